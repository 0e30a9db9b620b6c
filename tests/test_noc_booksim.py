"""Booksim2 config files (npusim/noc/booksim.py) and `npusim noc` on the command line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from npusim.cli import app
from npusim.errors import NpusimError
from npusim.noc.booksim import onnxim_booksim_text, read_booksim
from npusim.config import load_config
from npusim.noc.run import network_for, run_noc

runner = CliRunner()

# the parameters of Booksim's runfiles/meshconfig, written out here in Booksim's syntax
MESHCONFIG = """// an 8x8 mesh
num_vcs     = 16;
vc_buf_size = 8;
wait_for_tail_credit = 1;
vc_allocator = islip;
sw_allocator = islip;
alloc_iters  = 2;
credit_delay   = 2;
routing_delay  = 0;
vc_alloc_delay = 1;
sw_alloc_delay = 1;
st_final_delay = 1;
input_speedup     = 1;
output_speedup    = 1;
internal_speedup  = 1.0;
sim_type = latency;
warmup_periods = 3;
sample_period  = 1000;
sim_count          = 1;
topology = mesh;
k  = 8;
n  = 2;
routing_function = dor;
packet_size = 1;
use_read_write = 0;
traffic       = uniform;
injection_rate = 0.2;
"""

# ONNXim's configs/booksim2_configs/fly_c4_m8.icnt (the form of its files: a [config]
# header, no semicolons), as npusim.noc.booksim keeps ONNXim's own butterflies
ONNXIM_FLY = onnxim_booksim_text("fly_c4_m8.icnt")


def write(tmp_path, text, name="cfg"):
    f = tmp_path / name
    f.write_text(text)
    return f


def test_meshconfig_maps_onto_the_router_config(tmp_path):
    bf = read_booksim(write(tmp_path, MESHCONFIG))
    assert bf.noc["noc.type"] == "mesh" and bf.noc["noc.dims"] == [8, 8]
    assert bf.noc["noc.link_latency"] == 1
    r = {k.split(".")[-1]: v for k, v in bf.noc.items() if k.startswith("noc.router.")}
    assert r == {"vcs": 16, "vc_buffer_flits": 8, "vc_allocator": "islip",
                 "sw_allocator": "islip", "vc_alloc_iters": 1, "sw_alloc_iters": 1,
                 "routing_delay": 0, "vc_alloc_delay": 1, "sw_alloc_delay": 1, "st_delay": 1,
                 "credit_delay": 2, "wait_for_tail_credit": True, "priority": "none"}
    # Booksim's IQ router never passes alloc_iters to its allocators: one iteration
    assert any("alloc_iters = 2 is ignored" in n for n in bf.notes)
    assert (bf.traffic.pattern, bf.traffic.rate, bf.traffic.packet_flits) == ("uniform", 0.2, 1)
    assert (bf.measurement.sample_period, bf.measurement.warmup_periods) == (1000, 3)


def test_booksim_defaults_fill_what_a_file_leaves_out(tmp_path):
    bf = read_booksim(write(tmp_path, "topology = torus; k = 4; n = 2; "
                                      "routing_function = dim_order;\n"))
    r = bf.noc
    # booksim_config.cpp: routing_delay 1, credit_delay 0, no tail-credit wait; torus
    # channels take 2 cycles
    assert (r["noc.router.routing_delay"], r["noc.router.credit_delay"]) == (1, 0)
    assert r["noc.router.wait_for_tail_credit"] is False
    assert r["noc.link_latency"] == 2
    assert bf.traffic.rate == pytest.approx(0.1)


def test_allocator_iterations_and_rates_in_flits(tmp_path):
    bf = read_booksim(write(tmp_path, MESHCONFIG + "vc_allocator = islip(2);\n"
                            "sw_allocator = separable_input_first(3);\n"
                            "packet_size = 4; injection_rate = 0.05;\n"))
    assert bf.noc["noc.router.vc_alloc_iters"] == 2
    assert (bf.noc["noc.router.sw_allocator"], bf.noc["noc.router.sw_alloc_iters"]) == (
        "separable_input_first", 3)
    assert bf.traffic.rate == pytest.approx(0.2)  # 0.05 packets of 4 flits
    bf = read_booksim(write(tmp_path, MESHCONFIG + "packet_size = 4; injection_rate = 0.05;"
                            "injection_rate_uses_flits = 1;\n"))
    assert bf.traffic.rate == pytest.approx(0.05)
    bf = read_booksim(write(tmp_path, MESHCONFIG + "traffic = hotspot({3,7},{1,3});\n"))
    assert (bf.traffic.hotspots, bf.traffic.hotspot_weights) == ((3, 7), (1, 3))


def test_onnxim_icnt_files(tmp_path):
    bf = read_booksim(write(tmp_path, ONNXIM_FLY, "fly_c4_m8.icnt"))
    assert (bf.noc["noc.type"], bf.noc["noc.radix"], bf.noc["noc.stages"]) == ("fly", 12, 1)
    assert bf.noc["noc.flit_bytes"] == 64 and bf.noc["noc.router.vc_buffer_flits"] == 64
    # an anynet file named by a path from another machine is looked for beside the config
    write(tmp_path, "router 0 node 0 router 1\nrouter 1 node 1\n", "anynet_file")
    text = ONNXIM_FLY.replace("topology = fly", "topology = anynet").replace(
        "routing_function = dest_tag", "routing_function = min\n"
        "network_file = /home/someone/configs/anynet_file")
    bf = read_booksim(write(tmp_path, text, "anynet.icnt"))
    assert bf.noc["noc.type"] == "custom"
    assert bf.noc["noc.file"] == str((tmp_path / "anynet_file").resolve())


@pytest.mark.parametrize("extra, message", [
    ("num_vc = 4;", "unknown Booksim key num_vc .did you mean num_vcs"),
    ("speculative = 1;", "speculative = 1 is not modelled"),
    ("topology = dragonfly;", "topology = 'dragonfly' is not supported"),
    # an unsupported topology is named, not one of its own keys (Booksim's flatflyconfig)
    ("topology = flatfly; c = 4; x = 4; y = 4; xr = 2; yr = 2;",
     "topology = 'flatfly' is not supported"),
    ("routing_function = romm;", "routing_function = 'romm' is not supported for mesh"),
    ("vc_allocator = pim;", "vc_allocator = 'pim' is not supported"),
    ("k = eight;", "k = 'eight' is not an integer"),
    ("traffic = diagonal;", "traffic = 'diagonal' is not supported"),
    ("num_vcs 4;", "expected 'key = value'"),
    # named with the file and key (it read 'traffic rate 5.0 flits/node/cycle ...')
    ("injection_rate = 5;", r"cfg: injection_rate = 5.0 \(packets per node per "
                            r"cycle\) is out of range: above 0 and at most 1"),
])
def test_bad_booksim_files_are_clear_errors(tmp_path, extra, message):
    with pytest.raises(NpusimError, match=message):
        read_booksim(write(tmp_path, MESHCONFIG + extra + "\n"))


def test_a_booksim_file_without_a_topology_says_so(tmp_path):
    """(Booksim's default, a torus routed by 'none', made an empty file's first error one
    about routing.)"""
    with pytest.raises(NpusimError, match="sets no topology; give topology and its keys"):
        read_booksim(write(tmp_path, ""))


def test_priority_age_is_read_and_others_are_noted(tmp_path):
    """ONNXim's mesh_sif-age file sets Booksim's priority = age: the allocators prefer the
    older packet (an 8x9 anynet at 0.25 flits/node/cycle: 41.9 cycles in Booksim, 117 with
    round robin alone); priorities npusim does not model are a note, not silence."""
    age = read_booksim(write(tmp_path, MESHCONFIG + "priority = age;\n"))
    assert age.noc["noc.router.priority"] == "age" and not any("priority" in n for n in age.notes)
    assert read_booksim(write(tmp_path, MESHCONFIG)).noc["noc.router.priority"] == "none"
    other = read_booksim(write(tmp_path, MESHCONFIG + "priority = queue_length;\n"))
    assert any("priority = queue_length is not modelled" in n for n in other.notes)
    with pytest.raises(NpusimError, match="priority = 'age' is not modelled with a wavefront"):
        network_for(load_config("mobile", {"noc.type": "mesh", "noc.router.priority": "age",
                                           "noc.router.sw_allocator": "wavefront"}))


def test_a_booksim_run_and_the_same_run_from_npusim_settings_agree(tmp_path):
    f = write(tmp_path, MESHCONFIG.replace("k  = 8;", "k  = 4;"))
    kw = dict(measurement={"cycles": 2000})
    a = run_noc(booksim=f, **kw)
    b = run_noc("mobile", ["noc.type=mesh", "noc.dims=[4,4]"], traffic={"rate": 0.2}, **kw)
    assert a.avg_packet_latency_cycles == b.avg_packet_latency_cycles
    assert a.topology["notes"] and not b.topology["notes"]


def test_cli_noc_json_and_summary(tmp_path):
    f = write(tmp_path, MESHCONFIG.replace("k  = 8;", "k  = 4;"))
    out = tmp_path / "out.json"
    res = runner.invoke(app, ["noc", "--booksim", str(f), "--rate", "0.3", "--packet-flits",
                              "4", "--traffic", "transpose", "--cycles", "1000", "--json",
                              str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    for key in ("avg_packet_latency_cycles", "accepted_flits_per_node_cycle", "saturated",
                "sim_cycles", "wall_seconds"):
        assert key in data
    assert data["traffic"]["pattern"] == "transpose" and data["traffic"]["packet_flits"] == 4
    assert data["accepted_flits_per_node_cycle"] == pytest.approx(0.3, rel=0.1)
    assert "packet latency" in res.stdout and "saturated       no" in res.stdout


def test_a_binary_booksim_file_is_not_text(tmp_path):
    f = tmp_path / "net.cfg"
    f.write_bytes(bytes(range(128, 256)))
    res = runner.invoke(app, ["noc", "--booksim", str(f)])
    assert res.exit_code == 2
    assert "net.cfg: not a text file" in res.output and "internal error" not in res.output


@pytest.mark.parametrize("args, message", [
    (["--traffic", "zigzag"], "--traffic 'zigzag' is not a traffic pattern"),
    (["--rate", "0"], "traffic rate 0.0 flits/node/cycle is out of range"),
    (["--set", "noc.type=mesh", "--traffic", "transpose", "--set", "noc.dims=[3,3]"],
     "transpose needs a power-of-two number of nodes"),
    (["--booksim", "/nonexistent/booksim.cfg"], "cannot read it"),
    (["--set", "noc.type=mesh", "--packet-flits", "0"], "packet size 0 flits is out of range"),
])
def test_cli_noc_bad_input_is_one_clear_error(tmp_path, args, message):
    out = tmp_path / "out.json"
    res = runner.invoke(app, ["noc", *args, "--json", str(out)])
    assert res.exit_code != 0
    assert message in res.output and "Traceback" not in res.output
    assert not out.exists()


# a 4x4 mesh and a 4-ary 2-fly, everything else at Booksim's defaults
MESH4 = "mesh"
FLY = "fly"
SMALL = {"mesh": "topology = mesh;\nk = 4;\nn = 2;\nrouting_function = dim_order;\n",
         "fly": "topology = fly;\nk = 4;\nn = 2;\nrouting_function = dest_tag;\n"}


@pytest.mark.parametrize("base, extra, message", [
    # each was reported as "mobile.toml with overrides: config field noc.dims = ..." (the
    # npusim field it set, against the default preset), not as the file's own key
    (MESH4, "k = -4;", "k = -4 is out of range: must be an integer in 1..1024"),
    (MESH4, "flit_size = 3;", "flit_size = 3 is not a power of two: must be a power of two "
                              "in 1..1024"),
    (MESH4, "num_vcs = 0;", "num_vcs = 0 is out of range: must be an integer in 1..32"),
    (MESH4, "vc_buf_size = 0;", "vc_buf_size = 0 is out of range: must be an integer in "
                                "1..1024"),
    (MESH4, "st_final_delay = 0;", "st_prepare_delay + st_final_delay = 0 is out of range"),
    (MESH4, "vc_allocator = islip(0);",
     "vc_allocator = 'islip(0)': 0 iterations is out of range: must be an integer in 1..16"),
    (MESH4, "n = 9;", "n = 9 is out of range: must be an integer in 1..3"),
    (MESH4, "k = 64;", "k = 64, n = 2 make 4096 routers: npusim simulates at most 1024"),
    (FLY, "k = 1;", "k = 1 is out of range: must be an integer in 2..256"),
    (FLY, "n = 40;", "n = 40 is out of range: must be an integer in 1..8"),
    # n = 0 silently ran a 2x2 mesh (noc.dims = [], fit to the endpoints)
    (MESH4, "n = 0;", "n = 0 is out of range: must be an integer in 1..3"),
    # these ran to exit 0 with 0 packets measured
    (MESH4, "sample_period = 0;", "sample_period = 0 is out of range: must be an integer "
                                  "in 1..1000000000"),
    (MESH4, "sample_period = -5;", "sample_period = -5 is out of range"),
    (MESH4, "max_samples = 0;", "max_samples = 0 is out of range"),
    (MESH4, "packet_size = 0;", "packet_size = 0 is out of range: must be an integer in "
                                "1..1024"),
    # internal errors: ValueError from int()
    (MESH4, "traffic = hotspot({a,b});", "traffic = 'hotspot({a,b})': hotspot nodes {a,b} "
                                         "must be a list of integers, e.g. hotspot({0,5},{1,2})"),
    (MESH4, "traffic = hotspot({});", "hotspot nodes {} must be a list of integers"),
    (MESH4, "traffic = hotspot({0,5},{});", "hotspot weights {} must be a list of integers"),
])
def test_a_bad_value_in_a_booksim_file_names_the_file_and_its_key(tmp_path, base, extra,
                                                                   message):
    f = write(tmp_path, SMALL[base] + extra + "\n", "net.cfg")
    with pytest.raises(NpusimError) as info:
        read_booksim(f)
    assert str(info.value).startswith(f"{f}: ") and message in str(info.value), info.value
    res = runner.invoke(app, ["noc", "--booksim", str(f)])
    assert res.exit_code == 2 and res.output == f"error: {info.value}\n", res.output


def test_an_onnxim_config_names_its_booksim_file_and_key(tmp_path):
    (tmp_path / "net.icnt").write_text(ONNXIM_FLY.replace("k = 12", "k = 1"))
    data = {"num_cores": 1, "core_freq": 1000, "core_width": 8, "core_height": 8,
            "spad_size": 64, "accum_spad_size": 16, "dram_type": "simple", "dram_freq": 1000,
            "dram_channels": 1, "dram_req_size": 32, "icnt_type": "booksim2",
            "icnt_config_path": "net.icnt", "precision": 1}
    (tmp_path / "onnxim.json").write_text(json.dumps(data))
    with pytest.raises(NpusimError) as info:
        load_config(str(tmp_path / "onnxim.json"))
    assert f"onnxim.json: {tmp_path / 'net.icnt'}: k = 1 is out of range: must be an " \
           f"integer in 2..256" in str(info.value)
