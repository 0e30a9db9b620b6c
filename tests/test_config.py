"""Hardware config: presets, validation messages, overrides, round trips, ONNXim import."""

import copy
import dataclasses
import json
import pickle
from pathlib import Path

import pytest
from typer.testing import CliRunner

from npusim.config import (
    DEFAULT_VECTOR_LATENCY,
    VECTOR_OPS,
    CoreConfig,
    NpuConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    list_presets,
    load_config,
    onnxim_to_dict,
    parse_override,
)
from npusim.cli import app
from npusim.errors import NpusimError, NpusimWarning

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def mobile_dict():
    return config_to_dict(load_config("mobile"))


def bad(d, dotted, value):
    """A copy of d with one dotted field set to value."""
    d = copy.deepcopy(d)
    *parents, last = dotted.split(".")
    table = d
    for p in parents:
        table = table[p]
    table[last] = value
    return d


def error_of(fn, *args, **kw) -> str:
    with pytest.raises(NpusimError) as info:
        fn(*args, **kw)
    return str(info.value)


# --- presets -----------------------------------------------------------------------------

def test_list_presets():
    assert list_presets() == ["chiplet", "gemmini_validation", "mobile", "server"]


def test_default_preset_is_mobile():
    assert load_config() == load_config("mobile")
    assert load_config(None).name == "mobile"


def test_mobile_preset_numbers():
    c = load_config("mobile")
    assert (c.num_cores, c.core_freq_mhz, c.precision, c.scheduler.policy) == (4, 1000, 1, "fifo")
    assert (c.core.systolic.width, c.core.systolic.height, c.core.systolic.min_gemm_cycles) == (8, 8, 4)
    assert (c.core.vector.lanes, c.core.vector.alus) == (8, 16)
    assert (c.core.spad_kib, c.core.accum_kib) == (64, 16)
    assert (c.core.spad_bytes, c.core.accum_bytes) == (65536, 16384)
    assert (c.core.ld_queue, c.core.st_queue, c.core.ex_queue) == (8, 8, 8)
    assert c.dma.request_bytes == 64
    assert (c.noc.type, c.noc.freq_mhz, c.noc.flit_bytes) == ("crossbar", 1000, 8)
    assert 1 <= c.noc.latency <= 8
    m = c.memory
    # DDR4-1600: 800 MHz command clock, 64-bit bus double data rate = 16 B per cycle
    assert (m.type, m.standard, m.freq_mhz, m.channels) == ("dram", "DDR4-1600K_8Gb_x8", 800, 1)
    assert m.channel_bytes_per_cycle == 64 // 8 * 2
    assert m.peak_bytes_per_s == 12.8e9
    assert m.peak_gbps == pytest.approx(12.8)


def test_server_preset_numbers():
    c = load_config("server")
    assert (c.num_cores, c.core_freq_mhz, c.precision) == (4, 1000, 2)
    assert (c.core.systolic.width, c.core.systolic.height) == (128, 128)
    assert (c.core.vector.lanes, c.core.vector.alus) == (128, 16)
    assert (c.core.spad_kib, c.core.accum_kib) == (32768, 4096)
    assert c.core.spad_bytes == 32 * 1024 * 1024
    assert c.dma.request_bytes == 256
    assert (c.noc.type, c.noc.freq_mhz, c.noc.flit_bytes) == ("crossbar", 1000, 256)
    m = c.memory
    # HBM2 at 2.4 Gb/s: 16 channels of 128 bits (legacy mode), 1200 MHz double data rate =
    # 32 B per cycle each
    assert (m.type, m.standard, m.freq_mhz, m.channels) == (
        "dram", "HBM2-2400_8Gb_x128_legacy", 1200, 16)
    assert m.channel_bytes_per_cycle == 128 // 8 * 2
    assert m.peak_bytes_per_s == 614.4e9
    assert m.peak_gbps == pytest.approx(614.4)


def test_gemmini_validation_preset_numbers():
    c = load_config("gemmini_validation")
    assert (c.num_cores, c.precision) == (1, 1)
    assert (c.core.systolic.width, c.core.systolic.height) == (8, 8)
    assert (c.core.spad_kib, c.core.accum_kib) == (64, 16)
    assert c.dma.request_bytes == 32
    assert c.memory.type == "ideal"
    assert (c.noc.type, c.noc.latency) == ("crossbar", 1)


def test_vector_latency_defaults_filled():
    lat = load_config("mobile").core.vector.latency
    assert set(lat) == set(VECTOR_OPS)
    assert lat == DEFAULT_VECTOR_LATENCY
    assert (lat["add"], lat["exp"], lat["gelu"], lat["reduce"]) == (1, 4, 6, 1)


def test_load_by_toml_path_and_name_from_stem(tmp_path):
    src = Path(__file__).parents[1] / "configs" / "mobile.toml"
    body = src.read_text().replace('name = "mobile"\n', "")
    p = tmp_path / "my_npu.toml"
    p.write_text(body)
    c = load_config(str(p))
    assert c.name == "my_npu"
    assert c.core.systolic.width == 8


def test_partial_latency_table_in_toml(tmp_path):
    src = Path(__file__).parents[1] / "configs" / "mobile.toml"
    p = tmp_path / "lat.toml"
    p.write_text(src.read_text() + "\n[core.vector.latency]\nexp = 9\ngelu = 12\n")
    lat = load_config(p).core.vector.latency
    assert (lat["exp"], lat["gelu"], lat["add"], lat["div"]) == (9, 12, 1, 4)


# --- validation --------------------------------------------------------------------------

@pytest.mark.parametrize("dotted, value, expected", [
    ("core.systolic.width", 0, "core.systolic.width = 0 is out of range: must be an integer in 1..4096"),
    ("core.systolic.height", 5000, "core.systolic.height = 5000 is out of range: must be an integer in 1..4096"),
    ("num_cores", 1025, "num_cores = 1025 is out of range: must be an integer in 1..1024"),
    ("core_freq_mhz", 0, "core_freq_mhz = 0 is out of range: must be an integer in 1..100000"),
    ("core.spad_kib", 1048577, "core.spad_kib = 1048577 is out of range: must be an integer in 1..1048576"),
    ("core.accum_kib", 0, "core.accum_kib = 0 is out of range: must be an integer in 1..1048576"),
    ("precision", 3, "precision = 3 is not a valid choice: must be one of 1, 2, 4"),
    ("scheduler.policy", "lifo", "scheduler.policy = 'lifo' is not a valid choice: must be one of 'fifo', 'time-shared', 'spatial'"),
    ("scheduler.max_batch", 0, "scheduler.max_batch = 0 is out of range: must be an integer in 1..65536"),
    ("scheduler.partitions", [[0], []], "scheduler.partitions = [[0], []] is not a list of non-empty lists of core indices: must be a list of core lists, e.g. [[0, 1], [2, 3]]"),
    ("memory.type", "hbm", "memory.type = 'hbm' is not a valid choice: must be one of 'ideal', 'simple', 'dram'"),
    ("noc.type", "hypercube", "noc.type = 'hypercube' is not a valid choice: must be one of 'crossbar', 'custom', 'fly', 'mesh', 'ring', 'torus'"),
    ("noc.router.vcs", 0, "noc.router.vcs = 0 is out of range: must be an integer in 1..32"),
    ("noc.router.vc_allocator", "pim", "noc.router.vc_allocator = 'pim' is not a valid choice: must be one of 'islip', 'separable_input_first', 'separable_output_first', 'wavefront'"),
    ("noc.router.credit_delay", -1, "noc.router.credit_delay = -1 is out of range: must be an integer in 0..100"),
    ("noc.dims", [4, 0], "noc.dims = [4, 0] is out of range: must be a list of integers in 1..1024"),
    ("noc.dims", 4, "noc.dims = 4 is not a list of integers: must be a list of integers in 1..1024"),
    ("noc.link_latency", 0, "noc.link_latency = 0 is out of range: must be an integer in 1..10000"),
    ("noc.d2d.latency", 0, "noc.d2d.latency = 0 is out of range: must be an integer in 1..100000"),
    ("core.systolic.dataflow", "os", "core.systolic.dataflow = 'os' is not a valid choice: must be one of 'ws'"),
    ("memory.controller.read_queue", 0, "memory.controller.read_queue = 0 is out of range: must be an integer in 1..1024"),
    ("memory.controller.page_policy", "lazy", "memory.controller.page_policy = 'lazy' is not a valid choice: must be one of 'open', 'closed'"),
    ("memory.channels", 3, "memory.channels = 3 is not a power of two"),
    ("memory.standard", "DDR9", "memory.standard = 'DDR9': unknown DRAM standard 'DDR9'"),
    ("memory.latency", 100001, "memory.latency = 100001 is out of range: must be an integer in 0..100000"),
    ("memory.channel_bytes_per_cycle", 4097, "memory.channel_bytes_per_cycle = 4097 is out of range: must be an integer in 0..4096"),
    ("noc.latency", -1, "noc.latency = -1 is out of range: must be an integer in 0..10000"),
    ("noc.flit_bytes", 24, "noc.flit_bytes = 24 is not a power of two: must be a power of two in 1..1024"),
    ("noc.flit_bytes", 2048, "noc.flit_bytes = 2048 is out of range: must be a power of two in 1..1024"),
    ("dma.request_bytes", 4, "dma.request_bytes = 4 is out of range: must be a power of two in 8..4096"),
    ("dma.request_bytes", 48, "dma.request_bytes = 48 is not a power of two: must be a power of two in 8..4096"),
    ("core.vector.latency.exp", 0, "core.vector.latency.exp = 0 is out of range: must be an integer in 1..10000"),
    ("core.ld_queue", 0, "core.ld_queue = 0 is out of range: must be an integer in 1..1024"),
    ("core.systolic.min_gemm_cycles", 0, "core.systolic.min_gemm_cycles = 0 is out of range"),
])
def test_out_of_range_values(mobile_dict, dotted, value, expected):
    msg = error_of(config_from_dict, bad(mobile_dict, dotted, value))
    assert f"config field {expected}" in msg


@pytest.mark.parametrize("dotted, value, type_name, rule", [
    ("core.systolic.width", "8", "str", "an integer in 1..4096"),
    ("num_cores", True, "bool", "an integer in 1..1024"),
    ("core_freq_mhz", 1000.0, "float", "an integer in 1..100000"),
    ("precision", "2", "str", "one of 1, 2, 4"),
    ("memory.type", 1, "int", "one of 'ideal', 'simple'"),
    ("core.vector.latency.add", False, "bool", "an integer in 1..10000"),
    ("name", 5, "int", "a non-empty string"),
])
def test_wrong_types(mobile_dict, dotted, value, type_name, rule):
    msg = error_of(config_from_dict, bad(mobile_dict, dotted, value))
    assert f"config field {dotted} = {value!r} has the wrong type ({type_name}): must be {rule}" in msg


def test_missing_field_and_section(mobile_dict):
    d = copy.deepcopy(mobile_dict)
    del d["core"]["systolic"]["width"]
    assert "config field core.systolic.width is missing: must be an integer in 1..4096" in \
        error_of(config_from_dict, d)
    d = copy.deepcopy(mobile_dict)
    del d["memory"]
    assert "config section memory is missing" in error_of(config_from_dict, d)


def test_optional_fields_take_defaults(mobile_dict):
    d = copy.deepcopy(mobile_dict)
    del d["dma"], d["scheduler"], d["description"], d["core"]["ld_queue"]
    del d["core"]["systolic"]["min_gemm_cycles"], d["core"]["vector"]["latency"]
    c = config_from_dict(d)
    assert (c.dma.request_bytes, c.scheduler.policy, c.description) == (32, "fifo", "")
    assert (c.scheduler.partitions, c.scheduler.max_batch) == ((), 32)
    assert (c.core.ld_queue, c.core.systolic.min_gemm_cycles) == (8, 4)
    assert c.core.vector.latency == DEFAULT_VECTOR_LATENCY


def test_section_must_be_table(mobile_dict):
    msg = error_of(config_from_dict, bad(mobile_dict, "core.systolic", 8))
    assert "config section core.systolic must be a table, got int" in msg


def test_unknown_key_suggests_close_one(mobile_dict):
    d = copy.deepcopy(mobile_dict)
    d["core"]["systolic"]["widht"] = 16
    msg = error_of(config_from_dict, d)
    assert "unknown key core.systolic.widht" in msg
    assert "did you mean core.systolic.width?" in msg

    d = copy.deepcopy(mobile_dict)
    d["num_core"] = 2
    msg = error_of(config_from_dict, d)
    assert "unknown key num_core" in msg and "did you mean num_cores?" in msg

    d = copy.deepcopy(mobile_dict)
    d["memory"]["zzz"] = 1
    msg = error_of(config_from_dict, d)
    assert "unknown key memory.zzz" in msg and "did you mean" not in msg
    assert ("valid keys in memory: type, standard, freq_mhz, channels, ranks, latency, "
            "channel_bytes_per_cycle, capacity_gib, controller") in msg


def test_unknown_vector_op_lists_valid_ones(mobile_dict):
    d = copy.deepcopy(mobile_dict)
    d["core"]["vector"]["latency"]["expp"] = 3
    msg = error_of(config_from_dict, d)
    assert "unknown key core.vector.latency.expp" in msg
    assert "did you mean core.vector.latency.exp?" in msg
    assert "add, sub, mul, div, max, min, exp, log" in msg


def test_direct_construction_is_validated(mobile_dict):
    c = load_config("mobile")
    bad_mem = dataclasses.replace(c.memory, channels=3)
    msg = error_of(dataclasses.replace, c, memory=bad_mem)
    assert "config field memory.channels = 3 is not a power of two" in msg


def test_file_errors_name_the_file(tmp_path):
    p = tmp_path / "bad.toml"
    src = Path(__file__).parents[1] / "configs" / "mobile.toml"
    p.write_text(src.read_text().replace("width = 8 ", "width = 0 "))
    msg = error_of(load_config, str(p))
    assert str(p) in msg and "core.systolic.width = 0 is out of range: must be an integer in 1..4096" in msg


# --- file and preset errors --------------------------------------------------------------

def test_unknown_preset_lists_presets():
    msg = error_of(load_config, "mobil")
    assert "unknown preset 'mobil'" in msg and "did you mean 'mobile'?" in msg
    assert "available presets: chiplet, gemmini_validation, mobile, server" in msg


def test_missing_file_lists_presets(tmp_path):
    msg = error_of(load_config, str(tmp_path / "nope.toml"))
    assert "nope.toml not found" in msg
    assert "available presets: chiplet, gemmini_validation, mobile, server" in msg
    msg = error_of(load_config, str(tmp_path / "nope.json"))
    assert "available presets: chiplet, gemmini_validation, mobile, server" in msg


def test_a_config_path_that_is_a_directory_says_so(tmp_path):
    (tmp_path / "dir.toml").mkdir()
    msg = error_of(load_config, str(tmp_path / "dir.toml"))
    assert f"config file {tmp_path / 'dir.toml'} is a directory, not a file; give an " \
           f"existing .toml/.json file" in msg and "not found" not in msg
    res = CliRunner().invoke(app, ["simulate", "tiny_cnn", "-c", str(tmp_path / "dir.toml")])
    assert res.exit_code == 2 and "is a directory, not a file" in res.output, res.output


def test_malformed_toml_names_file_and_line(tmp_path):
    p = tmp_path / "broken.toml"
    p.write_text('name = "x"\nnum_cores = \n')
    msg = error_of(load_config, str(p))
    assert "broken.toml" in msg and "malformed TOML" in msg and "line 2" in msg


def test_malformed_json_names_file_line_and_column(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text('{\n  "num_cores": 4,\n  "core_freq" 1000\n}\n')
    msg = error_of(load_config, str(p))
    assert "broken.json" in msg and "malformed JSON at line 3, column 15" in msg


# --- overrides ---------------------------------------------------------------------------

def test_overrides_change_values():
    c = load_config("mobile", ["core.systolic.width=16", "memory.type=ideal",
                               "core.vector.latency.exp=8", 'name="edge2"',
                               "num_cores = 2"])
    assert c.core.systolic.width == 16
    assert c.memory.type == "ideal"
    assert c.core.vector.latency["exp"] == 8
    assert c.core.vector.latency["log"] == 4
    assert (c.name, c.num_cores) == ("edge2", 2)
    assert c.core.systolic.height == 8  # untouched


def test_overrides_as_mapping_and_apply_overrides():
    c = load_config("server", {"core.systolic.height": 64})
    assert c.core.systolic.height == 64
    c2 = apply_overrides(c, ["dma.request_bytes=128"])
    assert (c2.dma.request_bytes, c2.core.systolic.height) == (128, 64)
    assert c.dma.request_bytes == 256  # original untouched


def test_parse_override_values():
    assert parse_override("a.b=16") == ("a.b", 16)
    assert parse_override("a= true") == ("a", True)
    assert parse_override('a="x y"') == ("a", "x y")
    assert parse_override("a=ideal") == ("a", "ideal")
    assert parse_override("a=1.5") == ("a", 1.5)


def test_out_of_range_override_errors():
    msg = error_of(load_config, "mobile", ["core.systolic.width=0"])
    assert "core.systolic.width = 0 is out of range: must be an integer in 1..4096" in msg
    msg = error_of(load_config, "mobile", ["num_cores=four"])
    assert "num_cores = 'four' has the wrong type (str)" in msg


def test_unknown_and_malformed_overrides():
    msg = error_of(load_config, "mobile", ["core.systolic.widht=16"])
    assert "core.systolic.widht" in msg and "did you mean core.systolic.width?" in msg
    msg = error_of(load_config, "mobile", ["core.vector.latency.foo=3"])
    assert "core.vector.latency.foo" in msg
    msg = error_of(load_config, "mobile", ["core.systolic.width"])
    assert "malformed" in msg and "dotted.key=value" in msg
    msg = error_of(load_config, "mobile", ["core.systolic=3"])
    assert "names a table" in msg
    msg = error_of(load_config, "mobile", ["num_cores.x=3"])
    assert "num_cores is a value, not a table" in msg


# --- round trip --------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mobile", "server", "gemmini_validation"])
def test_round_trip_exact(name):
    cfg = load_config(name)
    d = config_to_dict(cfg)
    again = config_from_dict(d)
    assert again == cfg
    assert config_to_dict(again) == d
    assert json.loads(json.dumps(d)) == d
    assert d["core"]["systolic"]["width"] == cfg.core.systolic.width
    assert d["memory"]["type"] == cfg.memory.type


def test_config_is_frozen_hashable_picklable():
    cfg = load_config("server")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.num_cores = 8
    assert hash(cfg) == hash(load_config("server"))
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    # the dict view is a copy: mutating it cannot change the config
    d = config_to_dict(cfg)
    d["core"]["vector"]["latency"]["exp"] = 99
    assert cfg.core.vector.latency["exp"] == 4
    assert isinstance(cfg.core, CoreConfig) and isinstance(cfg, NpuConfig)


# --- ONNXim import -----------------------------------------------------------------------

def test_onnxim_tpuv4_translation():
    c = load_config(str(DATA / "onnxim_tpuv4_c4.json"))
    assert c.name == "onnxim_tpuv4_c4"
    assert (c.num_cores, c.core_freq_mhz, c.precision, c.scheduler.policy) == (4, 1000, 2, "fifo")
    assert (c.core.systolic.width, c.core.systolic.height) == (128, 128)
    assert (c.core.spad_kib, c.core.accum_kib) == (32768, 4096)
    # 65536 bits / (8 * 2 B) = 4096 elements per pass = 128 lanes x 32 ALUs
    assert (c.core.vector.lanes, c.core.vector.alus) == (128, 32)
    lat = c.core.vector.latency
    assert (lat["add"], lat["sub"], lat["max"], lat["mul"], lat["exp"]) == (1, 1, 1, 2, 3)
    assert (lat["gelu"], lat["div"], lat["recip"], lat["reduce"]) == (5, 4, 4, 2)
    assert (lat["sqrt"], lat["rsqrt"]) == (6, 6)
    assert lat["tanh"] == DEFAULT_VECTOR_LATENCY["tanh"]  # no ONNXim key: npusim default
    assert c.dma.request_bytes == 32
    assert (c.noc.type, c.noc.freq_mhz, c.noc.latency, c.noc.flit_bytes) == ("crossbar", 8000, 1, 32)
    m = c.memory
    # ramulator2 with ONNXim's HBM2.yaml (HBM2_8Gb) at dram_freq 1200 MHz: npusim's HBM2
    # 2.4 Gb/s standard, two pseudo channels per ONNXim channel (Ramulator 2's HBM2 levels)
    assert (m.type, m.standard, m.freq_mhz, m.channels) == \
        ("dram", "HBM2-2400_8Gb_x128", 1200, 32)
    assert m.peak_bytes_per_s == 614.4e9  # ONNXim: 1200 MHz * 16 ch * 32 B / nbl 1
    assert m.capacity_gib == 16  # dram_size


def test_onnxim_flat_layout_and_ideal_dram():
    c = load_config(DATA / "onnxim_gemmini_8x8_c1_flat.json")
    assert (c.num_cores, c.precision) == (1, 1)
    assert (c.core.systolic.width, c.core.systolic.height) == (8, 8)
    assert (c.core.spad_kib, c.core.accum_kib) == (64, 16)
    # 2048 bits / 8 = 256 elements = 8 lanes x 32 ALUs
    assert (c.core.vector.lanes, c.core.vector.alus) == (8, 32)
    assert c.memory.type == "ideal"
    assert (c.memory.freq_mhz, c.memory.channels, c.memory.latency) == (1600, 2, 0)
    assert c.memory.channel_bytes_per_cycle == 32  # dram_req_size 64 / dram_nbl 2
    assert (c.dma.request_bytes, c.noc.flit_bytes, c.noc.freq_mhz) == (64, 64, 2000)
    # booksim2 with ONNXim's own fly_c1_m2.icnt: one router of 3 terminals
    assert (c.noc.type, c.noc.radix, c.noc.stages) == ("fly", 3, 1)


def test_onnxim_overrides_apply_after_translation():
    c = load_config(DATA / "onnxim_tpuv4_c4.json", ["memory.type=ideal", "num_cores=2"])
    assert (c.memory.type, c.num_cores) == ("ideal", 2)


def test_onnxim_heterogeneous_cores_rejected():
    msg = error_of(load_config, str(DATA / "onnxim_heterogeneous_c2.json"))
    assert "heterogeneous cores are not supported" in msg
    assert "core_config.core_1.core_width = 16" in msg


def _tpuv4() -> dict:
    return json.loads((DATA / "onnxim_tpuv4_c4.json").read_text())


def test_onnxim_defaults_for_missing_optional_keys():
    data = _tpuv4()
    data["dram_type"] = "simple"
    for key in ("dram_req_size", "dram_latency", "dram_nbl", "icnt_latency", "icnt_freq",
                "icnt_type", "scheduler"):
        del data[key]
    for core in data["core_config"].values():
        del core["mul_latency"], core["add_tree_latency"]
    c = config_from_dict(onnxim_to_dict(data))
    # ONNXim's own default for every vector latency is 1 cycle
    assert (c.core.vector.latency["mul"], c.core.vector.latency["reduce"]) == (1, 1)
    assert (c.dma.request_bytes, c.memory.latency, c.memory.channel_bytes_per_cycle) == (32, 10, 32)
    assert (c.noc.latency, c.noc.freq_mhz, c.scheduler.policy) == (1, 1000, "fifo")


def test_onnxim_errors():
    data = _tpuv4()
    del data["core_config"]["core_3"]
    assert "lacks core_config.core_3" in error_of(onnxim_to_dict, data)

    data = _tpuv4()
    data["scheduler"] = "round_robin"
    msg = error_of(onnxim_to_dict, data)
    assert "scheduler = 'round_robin' is not supported" in msg and "'simple'" in msg

    data = _tpuv4()
    data["dram_type"] = "hbm"
    msg = error_of(onnxim_to_dict, data)
    assert "dram_type = 'hbm'" in msg and "'ramulator2'" in msg and "'ideal'" in msg

    data = _tpuv4()
    data["dram_chanels"] = 8
    msg = error_of(onnxim_to_dict, data)
    assert "unknown key dram_chanels" in msg and "did you mean dram_channels?" in msg

    data = _tpuv4()
    for core in data["core_config"].values():
        core["core_type"] = "systolic_tiled"
    msg = error_of(onnxim_to_dict, data)
    assert "core_type = 'systolic_tiled' is not supported" in msg and "'systolic_os'" in msg

    data = _tpuv4()
    del data["dram_freq"]
    assert "ONNXim key dram_freq is missing" in error_of(onnxim_to_dict, data)

    data = _tpuv4()
    data["precision"] = 3
    assert "ONNXim key precision = 3" in error_of(onnxim_to_dict, data)


def test_onnxim_output_stationary_core_is_the_dataflow_error(tmp_path):
    # ONNXim's systolic_os is core.systolic.dataflow = "os": rejected by the config's own
    # check, which lists the dataflows npusim models
    data = _tpuv4()
    data["dram_type"] = "simple"
    for core in data["core_config"].values():
        core["core_type"] = "systolic_os"
    assert onnxim_to_dict(data)["core"]["systolic"]["dataflow"] == "os"
    p = tmp_path / "os.json"
    p.write_text(json.dumps(data))
    msg = error_of(load_config, str(p))
    assert "os.json" in msg
    assert "core.systolic.dataflow = 'os' is not a valid choice: must be one of 'ws'" in msg


def test_onnxim_range_errors_go_through_validation(tmp_path):
    data = _tpuv4()
    data["dram_channels"] = 0
    assert "ONNXim key dram_channels = 0 is out of range" in error_of(onnxim_to_dict, data)
    data["dram_type"] = "simple"
    p = tmp_path / "zero_ch.json"
    p.write_text(json.dumps(data))
    msg = error_of(load_config, str(p))
    assert "zero_ch.json" in msg
    assert "memory.channels = 0 is out of range: simple memory needs a positive integer" in msg


def test_simple_memory_names_every_field_it_lacks_at_once():
    """A preset's DRAM set to simple memory lacks its clock and width (the DRAM standard
    gave them); both are named in one message, with the latency it would take."""
    msg = error_of(load_config, "mobile", ["memory.type=simple"])
    assert ("config field memory.freq_mhz = 0 and memory.channel_bytes_per_cycle = 0 are out "
            "of range: simple memory needs a positive integer for each of memory.freq_mhz, "
            "memory.channels and memory.channel_bytes_per_cycle (its latency, memory.latency, "
            "is 0 memory cycles)") in msg


@pytest.mark.parametrize("parts, why", [
    ([[0, 1], [2, 4]], "core 4 does not exist (cores 0..3)"),
    ([[0, 1], [1, 2, 3]], "core 1 is in two partitions"),
])
def test_partitions_name_the_bad_core(mobile_dict, parts, why):
    d = copy.deepcopy(mobile_dict)
    d["scheduler"] = {"partitions": parts}
    assert why in error_of(config_from_dict, d)


def test_partitions_must_cover_every_core(mobile_dict):
    d = copy.deepcopy(mobile_dict)
    d["scheduler"] = {"partitions": [[0], [2, 3]]}
    assert "leaves cores [1] out" in error_of(config_from_dict, d)


def test_partitions_round_trip_through_dict_and_override():
    c = load_config("mobile", ["scheduler.partitions=[[0], [1, 2, 3]]",
                               "scheduler.policy=spatial"])
    assert c.scheduler.partitions == ((0,), (1, 2, 3))
    assert config_to_dict(c)["scheduler"]["partitions"] == [[0], [1, 2, 3]]
    assert config_from_dict(config_to_dict(c)) == c


def test_onnxim_schedulers_and_partitions():
    data = _tpuv4()
    data["scheduler"] = "spatial_split"
    data["partition"] = {"core_0": 0, "core_1": 0, "core_2": 1, "core_3": 1}
    c = config_from_dict(onnxim_to_dict(data))
    assert (c.scheduler.policy, c.scheduler.partitions) == ("spatial", ((0, 1), (2, 3)))
    data["scheduler"] = "time_multiplex"
    assert config_from_dict(onnxim_to_dict(data)).scheduler.policy == "time-shared"
