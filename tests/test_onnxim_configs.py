"""Every JSON config in ONNXim's current ``configs/`` folder loads and simulates.

tests/data/onnxim/configs/ holds copies of the nine JSON files of PSAL-POSTECH/ONNXim at
commit a1e8629 (2026-01-08) and the two Ramulator 2 files they name, in ONNXim's own folder
layout (``../configs/ramulator2_configs/HBM2.yaml`` resolves from the JSON's folder as it does
from ONNXim's build folder). Each config's npusim fields are checked against the JSON's own
values, and its warnings against the hardware keys npusim cannot model yet.
"""

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import npusim
from npusim.config import load_config
from npusim.config.onnxim import onnxim_to_dict
from npusim.engine import run_program
from npusim.errors import NpusimError, NpusimWarning
from npusim.program import Instr
from tests.helpers import one_tile_program

FOLDER = Path(__file__).parent / "data" / "onnxim" / "configs"
CONFIGS = sorted(FOLDER.glob("*.json"))

# the warnings each config must give (key names), and nothing else. The booksim2 configs
# run the router network of ONNXim's own fly_c*_m*.icnt files, except the TPUv4 one, whose
# fly_c64_m16.icnt ONNXim does not ship: the crossbar stands in, with the core ports
NO_ICNT, NEAREST, ACCUM = ("fly_c64_m16.icnt", "npusim has no such standard",
                           "no accum_spad_size")
EXPECTED_WARNINGS = {
    "systolic_ws_128x128_c4_booksim2_tpuv4": {NO_ICNT},
    "systolic_ws_128x128_c4_simple_noc_tpuv4": set(),
    "systolic_ws_128x128_c4_simple_noc_tpuv4_half_ramulator2": set(),
    "systolic_ws_128x128_c4_simple_noc_tpuv4_partition_quad": set(),
    "systolic_ws_8x8_c1_booksim2_transformer": {NEAREST},
    "systolic_ws_8x8_c1_simple_noc_transformer": {NEAREST},
    "systolic_ws_8x8_c4_booksim2_transformer": {NEAREST},
    "systolic_ws_8x8_c4_simple_noc_transformer": {NEAREST},
    "test": {ACCUM, NEAREST},
}


def _load(path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_config(str(path))
    texts = [str(w.message) for w in caught if issubclass(w.category, NpusimWarning)]
    return cfg, texts


def test_the_copies_are_onnxims_current_set():
    assert [p.stem for p in CONFIGS] == sorted(EXPECTED_WARNINGS)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_onnxim_config_loads_with_its_own_values(path):
    data = json.loads(path.read_text())
    cfg, texts = _load(path)
    core = data["core_config"]["core_0"] if "core_config" in data else data
    assert cfg.num_cores == data["num_cores"] and cfg.core_freq_mhz == data["core_freq"]
    assert (cfg.core.systolic.width, cfg.core.systolic.height) == (core["core_width"],
                                                                  core["core_height"])
    assert cfg.core.spad_kib == core["spad_size"]
    assert cfg.core.accum_kib == core.get("accum_spad_size", core["spad_size"])
    v = cfg.core.vector
    assert v.lanes * v.alus == core["vector_process_bit"] // (8 * data["precision"])
    assert v.latency["add"] == core.get("add_latency", 1)
    assert cfg.dma.request_bytes == data["dram_req_size"] and cfg.precision == data["precision"]
    assert (cfg.noc.freq_mhz, cfg.noc.latency) == (data["icnt_freq"], data["icnt_latency"])
    # a core's ports, each a request a cycle each way; requests in flight unbounded
    assert cfg.noc.core_ports == data.get("icnt_injection_ports_per_core", 1)
    assert cfg.dma.max_outstanding == 65536
    m = cfg.memory
    assert m.type == "dram"  # ramulator / ramulator2: the cycle-level DRAM
    assert m.channels == data["dram_channels"] * (2 if m.standard.startswith("HBM2") else 1)
    assert m.capacity_gib == data.get("dram_size", 0)
    if data["icnt_type"] == "booksim2" and NO_ICNT not in data["icnt_config_path"]:
        # one router with a terminal per core and channel (ONNXim's fly_c<C>_m<M>.icnt)
        assert (cfg.noc.type, cfg.noc.stages) == ("fly", 1)
        assert cfg.noc.radix == data["num_cores"] + data["dram_channels"]
    else:
        assert cfg.noc.type == "crossbar"
    # each expected warning once, naming its key; nothing else
    found = {key for key in EXPECTED_WARNINGS[path.stem] for t in texts if key in t}
    assert found == EXPECTED_WARNINGS[path.stem] and len(texts) == len(found), texts


def test_tpuv4_hbm2_is_the_matching_standard():
    cfg, _ = _load(FOLDER / "systolic_ws_128x128_c4_simple_noc_tpuv4.json")
    # HBM2.yaml: HBM2_8Gb at dram_freq 1200 MHz = npusim's 2.4 Gb/s HBM2, 8 Gb; same peak
    # as ONNXim's own formula dram_freq * dram_channels * dram_req_size / dram_nbl
    assert cfg.memory.standard == "HBM2-2400_8Gb_x128"
    assert cfg.memory.peak_bytes_per_s == 1200e6 * 16 * 32 / 1


def test_partition_cpu_gives_each_partition_its_cores():
    cfg, _ = _load(FOLDER / "systolic_ws_128x128_c4_simple_noc_tpuv4_partition_quad.json")
    assert cfg.scheduler.policy == "spatial"
    assert cfg.scheduler.partitions == ((0,), (1, 2, 3))


def test_logging_keys_are_silent_and_unmodelled_keys_warn_only_off_default():
    data = json.loads((FOLDER / "systolic_ws_128x128_c4_simple_noc_tpuv4.json").read_text())
    data.update(core_print_interval=5, dram_print_interval=5, icnt_print_interval=5,
                icnt_injection_ports_per_core=1, dram_type="simple")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails
        onnxim_to_dict(data)
    data["core_config"]["core_0"]["mac_latency"] = 3
    for c in data["core_config"].values():
        c["mac_latency"] = 3
    with pytest.warns(NpusimWarning, match=r"ONNXim key mac_latency = 3 is not modelled yet"):
        onnxim_to_dict(data)


def test_unknown_ram_standard_falls_back_to_fixed_latency_with_a_warning(tmp_path):
    data = json.loads((FOLDER / "test.json").read_text())
    data["accum_spad_size"] = 64
    cfg = tmp_path / "configs"
    cfg.mkdir()
    (tmp_path / "configs" / "ram.cfg").write_text("standard = WideIO2\norg = WideIO2_8Gb\n")
    data["dram_config_path"] = "ram.cfg"
    (cfg / "wide.json").write_text(json.dumps(data))
    with pytest.warns(NpusimWarning, match=r"WideIO2.*fixed-latency memory"):
        c = load_config(str(cfg / "wide.json"))
    assert c.memory.type == "simple" and c.memory.channels == data["dram_channels"]


def test_heterogeneous_cores_are_one_clear_error(tmp_path):
    data = json.loads((FOLDER / "systolic_ws_8x8_c4_simple_noc_transformer.json").read_text())
    data["core_config"]["core_2"]["spad_size"] = 128
    path = tmp_path / "hetero.json"
    path.write_text(json.dumps(data))
    with pytest.raises(NpusimError, match=r"heterogeneous cores are not supported: "
                                          r"core_config.core_2.spad_size = 128"):
        load_config(str(path))
    # a vector unit wider than npusim's is said of the ONNXim key (it named core.vector.alus)
    for entry in data["core_config"].values():
        entry["vector_process_bit"] = 10**9
    path.write_text(json.dumps(data))
    with pytest.raises(NpusimError, match=r"ONNXim key vector_process_bit = 1000000000 is "
                                          r"out of range: 62,500,000 elements a cycle"):
        load_config(str(path))
    for entry in data["core_config"].values():
        entry["vector_process_bit"] = 2048
    # a wrong value in core_0 alone is said to be wrong (it read as heterogeneous cores)
    data["core_config"]["core_2"]["spad_size"] = data["core_config"]["core_0"]["spad_size"]
    data["core_config"]["core_0"]["core_width"] = "8"
    path.write_text(json.dumps(data))
    with pytest.raises(NpusimError, match=r"ONNXim key core_width = '8' has the wrong type"):
        load_config(str(path))


def test_core_entries_beyond_num_cores_warn_and_a_missing_core_config_says_where(tmp_path):
    data = json.loads((FOLDER / "systolic_ws_8x8_c4_simple_noc_transformer.json").read_text())
    data["core_config"]["core_9"] = data["core_config"]["core_0"]
    path = tmp_path / "extra.json"
    path.write_text(json.dumps(data))
    with pytest.warns(NpusimWarning, match="core_config has core_9 beside num_cores = 4"):
        load_config(str(path))
    del data["core_config"]
    path.write_text(json.dumps(data))
    with pytest.raises(NpusimError, match=r"ONNXim key core_\w+ is missing \(in "
                                          r"core_config.core_N, or at the top level\)"):
        load_config(str(path))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_onnxim_config_simulates(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NpusimWarning)
        r = npusim.simulate("tiny_cnn", str(path))
    assert r.total_cycles > 0 and r.config.name == path.stem


def test_cli_prints_each_warning_once_and_runs():
    path = FOLDER / "systolic_ws_128x128_c4_booksim2_tpuv4.json"
    out = subprocess.run([sys.executable, "-m", "npusim", "simulate", "tiny_cnn", "-c",
                          str(path), "-q"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [l for l in out.stderr.splitlines() if l.startswith("warning:")]
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert "fly_c64_m16.icnt" in lines[0]
    assert int(out.stdout.strip()) > 0


def test_a_workload_larger_than_dram_size_warns():
    from npusim.lowering import capacity_warnings
    from npusim.program import ProgramBuilder

    cfg = load_config("server", ["memory.capacity_gib=1"])
    b = ProgramBuilder()
    b.allocate(2**30 - b.next_free_address)  # the address space up to 1 GiB: exactly full
    assert capacity_warnings(b, cfg) == []
    b.allocate(1)
    (text,) = capacity_warnings(b, cfg)
    assert "more than memory.capacity_gib = 1 GiB" in text
    assert capacity_warnings(b, load_config("server")) == []  # 0: unbounded


def test_a_workload_larger_than_the_decoded_dram_warns_that_it_aliases():
    """server's address mapping decodes 16 GiB: 16 HBM2 channels x 16 banks x 32,768 rows
    of 2 KiB. Tensors past that alias lower ones (a Llama-3-8B step of 128
    requests at context 1023 lays out 32 GiB), which is said; with two ranks the mapping
    decodes 32 GiB and nothing is."""
    from npusim.lowering import capacity_warnings
    from npusim.program import ProgramBuilder

    cfg = load_config("server")
    b = ProgramBuilder()
    b.allocate(16 * 2**30 - b.next_free_address)  # exactly the decoded 16 GiB
    assert capacity_warnings(b, cfg) == []
    b.allocate(2**30)
    (text,) = capacity_warnings(b, cfg)
    assert "17.00 GiB of DRAM, more than the 16 GiB the address mapping decodes" in text
    assert "(16 channel(s) x 1 rank(s) of HBM2-2400_8Gb_x128_legacy)" in text
    assert "modulo 16 GiB" in text
    assert capacity_warnings(b, load_config("server", ["memory.ranks=2"])) == []
    both = capacity_warnings(b, load_config("server", ["memory.capacity_gib=8"]))
    assert len(both) == 2 and "memory.capacity_gib = 8 GiB" in both[0]


def test_onnxim_booksim2_config_runs_its_network_with_core_ports(tmp_path):
    """An ONNXim JSON with icnt_type = booksim2 runs the network of its icnt_config_path
    file (found next to it, as ONNXim resolves the path): here a single fly router with
    4 cores x 2 ports + 2 channels = 10 terminals. A core's DMA sends a load and a store
    request per cycle; its first free interface takes each (interface 0 alone would do for
    loads: a 1-flit read request leaves it free the next cycle), so both send. A response
    from channel ch comes back to interface ch % 2: with two channels both receive."""
    data = json.loads((FOLDER / "systolic_ws_8x8_c4_booksim2_transformer.json").read_text())
    data.update({"icnt_injection_ports_per_core": 2, "icnt_config_path": "net/fly.icnt",
                 "dram_type": "simple"})
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "fly.icnt").write_text(
        "[config]\nflit_size = 16\ntopology = fly\nk = 10\nn = 1\n"
        "routing_function = dest_tag\nvc_buf_size = 4\nwait_for_tail_credit = 0\n")
    path = tmp_path / "onnxim.json"
    path.write_text(json.dumps(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NpusimWarning)  # nothing stands in for anything
        cfg = load_config(str(path))
    assert (cfg.noc.type, cfg.noc.radix, cfg.noc.core_ports, cfg.noc.flit_bytes) == \
        ("fly", 10, 2, 16)
    prog = one_tile_program([Instr.dma(True, 0, 0, 64, 32, 1, 0, 32),
                             Instr.dma(False, 1, 1 << 20, 64, 32, 1, 0, 32)], tiles=4)
    st = run_program(prog, cfg).state
    ns, p = st.noc.net, st.noc.net_p
    nic_out = ns.link_flits[p.n_routers * p.ports:]
    into_nic = st.noc.net_tab.in_src[p.n_routers * p.ports:]
    assert p.n_nodes == 10 and (nic_out[:8] > 0).all()  # both ports of every core send
    assert (ns.link_flits[into_nic[:8]] > 0).all()  # and receive


# --------------------------------------------------------------------------- bad input

# a one-core config of ONNXim's flat layout, fixed-latency memory and simple interconnect
FLAT = {"num_cores": 1, "core_freq": 1000, "core_width": 8, "core_height": 8,
        "spad_size": 64, "accum_spad_size": 16, "vector_process_bit": 512,
        "dram_type": "simple", "dram_freq": 1000, "dram_channels": 1, "dram_req_size": 32,
        "dram_latency": 10, "icnt_type": "simple", "icnt_latency": 1, "icnt_freq": 1000,
        "precision": 1, "scheduler": "simple"}
HBM2_YAML = FOLDER / "ramulator2_configs" / "HBM2.yaml"


def _error(data, base_dir=None) -> str:
    with pytest.raises(NpusimError) as info:
        onnxim_to_dict(data, base_dir=base_dir)
    return str(info.value)


def _cli(tmp_path, data) -> tuple[int, str]:
    """``npusim simulate tiny_cnn`` on ``data`` written as onnxim.json: (exit code, output)."""
    from typer.testing import CliRunner

    from npusim.cli import app

    path = tmp_path / "onnxim.json"
    path.write_text(json.dumps(data))
    res = CliRunner().invoke(app, ["simulate", "tiny_cnn", "-q", "-c", str(path)])
    return res.exit_code, res.output


@pytest.mark.parametrize("key, value, valid", [
    ("icnt_type", ["simple"], "'simple', 'booksim2'"),
    ("icnt_type", {"a": 1}, "'simple', 'booksim2'"),
    ("scheduler", ["simple"], "'simple', 'fifo', 'time_multiplex'"),
    ("core_type", ["systolic_ws"], "'systolic_ws', 'systolic_os'"),
    ("dram_type", ["simple"], "'simple', 'ramulator', 'ramulator2', 'ideal'"),
])
def test_a_name_given_as_a_list_or_table_is_a_wrong_type(tmp_path, key, value, valid):
    # before: internal error "unhashable type: 'list'" from the lookup of the name
    expected = (f"ONNXim key {key} = {value!r} has the wrong type ({type(value).__name__}): "
                f"must be one of {valid}")
    assert expected in _error({**FLAT, key: value})
    code, out = _cli(tmp_path, {**FLAT, key: value})
    assert code == 2 and "onnxim.json: " + expected in out, out


def test_a_sweep_based_on_such_a_config_names_it(tmp_path):
    from typer.testing import CliRunner

    from npusim.cli import app

    (tmp_path / "onnxim.json").write_text(json.dumps({**FLAT, "icnt_type": ["simple"]}))
    sweep = tmp_path / "s.toml"
    sweep.write_text("[base]\nconfig = 'onnxim.json'\n[workload]\nmodel = 'tiny_cnn'\n"
                     "[axes]\nnum_cores = [1]\n")
    res = CliRunner().invoke(app, ["sweep", str(sweep), "--out", str(tmp_path / "s.h5")])
    assert res.exit_code == 2, res.output
    assert "onnxim.json: ONNXim key icnt_type = ['simple'] has the wrong type (list)" \
        in res.output


@pytest.mark.parametrize("value, problem", [
    ("1200", "has the wrong type (str)"),   # before: TypeError in the standard's search
    (0, "is out of range"),                  # before: a warning, the 1000 MHz HBM2 used
    (1.5, "has the wrong type (float)"),
])
def test_dram_freq_is_checked_before_it_picks_a_standard(tmp_path, value, problem):
    shutil.copy(HBM2_YAML, tmp_path / "HBM2.yaml")
    data = {**FLAT, "dram_type": "ramulator2", "dram_config_path": "HBM2.yaml",
            "dram_freq": value}
    expected = f"ONNXim key dram_freq = {value!r} {problem}: must be an integer in 1..100000"
    assert expected in _error(data, tmp_path)
    code, out = _cli(tmp_path, data)
    assert code == 2 and expected in out, out


@pytest.mark.parametrize("key, extra", [
    ("dram_config_path", {"dram_type": "ramulator2"}),
    ("icnt_config_path", {"icnt_type": "booksim2"}),
])
def test_a_file_key_that_is_not_a_name_is_a_wrong_type(tmp_path, key, extra):
    # before: internal error "expected str, bytes or os.PathLike object, not int"
    data = {**FLAT, **extra, key: 5}
    expected = f"ONNXim key {key} = 5 has the wrong type (int): must be a file name (a string)"
    assert expected in _error(data, tmp_path)
    code, out = _cli(tmp_path, data)
    assert code == 2 and expected in out, out


@pytest.mark.parametrize("name, text, problem", [
    ("bad.yaml", "MemorySystem: [unclosed\n",
     "bad.yaml: malformed YAML at line 2, column 1: expected ',' or ']'"),
    ("list.yaml", "- 1\n- 2\n", "list.yaml: holds a YAML list, not a Ramulator 2 config"),
    ("nullorg.yaml", "MemorySystem:\n  DRAM:\n    impl: HBM2\n    org: null\n"
                     "    timing: {preset: X}\n",
     "nullorg.yaml: MemorySystem.DRAM.org.preset is missing"),
    ("empty.yaml", "", "empty.yaml: is empty, not a Ramulator 2 config"),
    ("ram.cfg", "org = DDR4_8Gb_x8\n", "ram.cfg: no 'standard = NAME' line"),
])
def test_an_existing_dram_file_that_names_no_dram_is_an_error(tmp_path, name, text, problem):
    # before: a warning ("npusim has no such DRAM standard") and fixed-latency memory
    (tmp_path / name).write_text(text)
    data = {**FLAT, "dram_type": "ramulator2", "dram_config_path": name}
    msg = _error(data, tmp_path)
    assert f"ONNXim key dram_config_path = {name!r}: {tmp_path}/{problem}" in msg, msg
    code, out = _cli(tmp_path, data)
    assert code == 2 and problem in out and "warning" not in out, out


def test_a_file_key_naming_a_directory_is_an_error(tmp_path):
    (tmp_path / "sub").mkdir()
    for key, extra in (("dram_config_path", {"dram_type": "ramulator2"}),
                       ("icnt_config_path", {"icnt_type": "booksim2"})):
        msg = _error({**FLAT, **extra, key: "sub"}, tmp_path)
        assert f"ONNXim key {key} = 'sub': {tmp_path / 'sub'} is a directory, not a file" \
            in msg


def test_a_missing_dram_file_still_warns_and_says_where_it_looked(tmp_path):
    data = {**FLAT, "dram_type": "ramulator2", "dram_config_path": "nothere.yaml"}
    with pytest.warns(NpusimWarning) as caught:
        out = onnxim_to_dict(data, base_dir=tmp_path)
    (text,) = [str(w.message) for w in caught]
    assert f"dram_config_path = 'nothere.yaml': no such file next to the config " \
           f"({tmp_path / 'nothere.yaml'}) and ONNXim ships none of that name" in text
    assert "using its fixed-latency memory" in text and out["memory"]["type"] == "simple"


@pytest.mark.parametrize("key, value, problem", [
    ("mac_latency", [1], "has the wrong type (list): must be an integer in 1..10000"),
    ("scalar_mul_latency", "2", "has the wrong type (str): must be an integer in 1..10000"),
    ("mac_latency", 0, "is out of range: must be an integer in 1..10000"),
])
def test_an_unmodelled_key_of_a_wrong_value_is_an_error_not_a_warning(key, value, problem):
    # before: "mac_latency = [1] is not modelled yet", and the run went on
    with warnings.catch_warnings():
        warnings.simplefilter("error", NpusimWarning)
        assert f"ONNXim key {key} = {value!r} {problem}" in _error({**FLAT, key: value})
