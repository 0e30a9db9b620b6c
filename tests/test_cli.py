"""The `npusim` command line: real runs, every bad input routed to one clear error line."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

import npusim
from npusim import cli
from npusim.cli import app
from npusim.errors import NpusimError
from npusim.paths import models_dir

from helpers import without_compile_notice

runner = CliRunner()


def run(*args: str, env: dict | None = None):
    return runner.invoke(app, list(args), env=env)


def _save(graph, path):
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture
def unsupported_model(tmp_path):
    """A valid ONNX model whose only op (Det, a determinant) npusim cannot lower."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 8, 8])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])
    node = helper.make_node("Det", ["X"], ["Y"], name="det_0")
    return _save(helper.make_graph([node], "det_net", [x], [y]), tmp_path / "det.onnx")


@pytest.fixture
def matmul_model(tmp_path):
    """One MatMul layer: [16, 256] x [256, 256] (loop bounds N16 C256 M256)."""
    a = helper.make_tensor_value_info("A", TensorProto.FLOAT, [16, 256])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [16, 256])
    b = numpy_helper.from_array(np.zeros((256, 256), np.float32), "B")
    node = helper.make_node("MatMul", ["A", "B"], ["Y"], name="proj")
    return _save(helper.make_graph([node], "mm_net", [a], [y], [b]), tmp_path / "mm.onnx")


# --------------------------------------------------------------------------- a real run


def test_simulate_writes_json_matching_the_api(tmp_path):
    out = tmp_path / "out.json"
    res = run("simulate", "tiny_cnn", "--config", "gemmini_validation", "--json", str(out))
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())

    expected = npusim.simulate("tiny_cnn", "gemmini_validation")
    assert data["total_cycles"] > 0
    assert data["total_cycles"] == expected.total_cycles
    assert data["model"] == "tiny_cnn" and data["config_name"] == "gemmini_validation"

    assert len(data["cores"]) == expected.config.num_cores == 1
    core = data["cores"][0]
    assert core["macs"] == expected.cores[0]["macs"] > 0
    assert 0.0 < core["systolic_utilization"] <= 1.0
    assert core["bytes_loaded"] == expected.cores[0]["bytes_loaded"] > 0

    layers = data["layers"]
    assert len(layers) == len(expected.layers) > 0
    for layer in layers:
        assert layer["end_cycle"] >= layer["start_cycle"] >= 0
    assert max(layer["end_cycle"] for layer in layers) == data["total_cycles"]
    assert layers[-1]["end_cycle"] == data["total_cycles"]

    # The summary names the run and gives its headline numbers.
    text = res.stdout
    assert "tiny_cnn" in text and "gemmini_validation" in text
    assert f"{expected.total_cycles:,}" in text
    util = f"{100 * expected.cores[0]['systolic_utilization']:.1f}%"
    assert util in text
    assert "GB/s" in text and "simulated cycles/s" in text
    # No progress bar in captured (non-terminal) output, and nothing on stderr.
    assert "simulating" not in res.stderr and without_compile_notice(res.stderr) == ""
    # No temp file left next to the result.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_fast_runs_summary_says_how_much_was_extrapolated(tmp_path):
    """The summary's fidelity row gives the JSON's counts: BERT's twelve blocks at sequence
    128 on `server` are a region cut at its fixed point; tiny_cnn repeats nothing; a full
    run has no such row."""
    out = tmp_path / "bert.json"
    res = run("simulate", "bert_base", "-c", "server", "-d", "batch=1", "-d", "seq=128",
              "--fidelity", "fast", "--json", str(out), env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    info, total = data["fidelity"], data["total_cycles"]
    assert info["extrapolated_cycles"] > 0 and info["layers_extrapolated"] > 0
    tiles = sum(c["tiles"] for c in data["cores"])
    assert info["tiles_simulated"] + info["tiles_extrapolated"] == tiles
    row = next(line for line in res.stdout.splitlines() if line.startswith("fidelity"))
    assert (f"fast: {info['extrapolated_cycles']:,} of {total:,} cycles extrapolated "
            f"({100 * info['extrapolated_cycles'] / total:.1f}%): "
            f"{info['layers_extrapolated']:,} of {len(data['layers']):,} layers, "
            f"{info['tiles_extrapolated']:,} of {tiles:,} tiles") in row
    res = run("simulate", "tiny_cnn", "--fidelity", "fast", env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "fidelity          fast: nothing extrapolated, every cycle simulated" in res.stdout
    res = run("simulate", "tiny_cnn", env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "fidelity" not in res.stdout, res.output


def test_quiet_prints_only_cycles_and_no_skip_agrees():
    skip = run("simulate", "tiny_cnn", "-c", "gemmini_validation", "--quiet")
    noskip = run("simulate", "tiny_cnn", "-c", "gemmini_validation", "--quiet", "--no-skip")
    assert skip.exit_code == 0 and noskip.exit_code == 0, skip.output + noskip.output
    expected = npusim.simulate("tiny_cnn", "gemmini_validation").total_cycles
    assert skip.stdout.strip() == str(expected)
    assert noskip.stdout.strip() == str(expected)


def test_set_and_dim_are_passed_through(tmp_path):
    out = tmp_path / "r.json"
    res = run("simulate", "tiny_cnn", "-c", "gemmini_validation",
              "--set", "core.systolic.width=16", "--set", "core.systolic.height=16",
              "--json", str(out))
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["config"]["core"]["systolic"]["width"] == 16
    expected = npusim.simulate("tiny_cnn", "gemmini_validation",
                               overrides=["core.systolic.width=16", "core.systolic.height=16"])
    assert data["total_cycles"] == expected.total_cycles
    assert "core.systolic.width=16" in res.stdout

    # bert_ffn has a symbolic 'seq' dim: --dim binds it and the run completes.
    res = run("simulate", "bert_ffn", "-c", "gemmini_validation", "--dim", "seq=8", "-q")
    assert res.exit_code == 0, res.output
    assert int(res.stdout.strip()) == npusim.simulate(
        "bert_ffn", "gemmini_validation", dims={"seq": 8}).total_cycles


# --------------------------------------------------------------------------- bad inputs


def _bad_cases(tmp_path, unsupported_model, matmul_model):
    text_file = tmp_path / "notes.txt"
    text_file.write_text("this is not an ONNX model\n")
    fake_onnx = tmp_path / "fake.onnx"
    fake_onnx.write_text("neither is this\n")
    too_big = tmp_path / "big.map"  # whole layer as one tile: more than the scratchpad
    too_big.write_text("[T] N16 C256 M256 - [O] N1 C1 M1 - [I] N16 C256 M256\n")
    short = tmp_path / "short.map"  # tiles that do not cover the loop
    short.write_text("# comment\n[T] N16 C256 M256 - [O] N1 C1 M1 - [I] N8 C256 M256\n")
    mm, gv = str(matmul_model), ["-c", "gemmini_validation"]
    return {
        "missing model": (["no_such_model"], ["no_such_model", "not found"]),
        "missing model path": ([str(tmp_path / "gone.onnx")], ["gone.onnx"]),
        "text file": ([str(text_file)], ["notes.txt", "not a valid ONNX model"]),
        "text file named .onnx": ([str(fake_onnx)], ["fake.onnx", "not a valid ONNX model"]),
        "unknown preset": (["tiny_cnn", "--config", "no_such_preset"],
                           ["no_such_preset", "mobile"]),
        "missing config file": (["tiny_cnn", "--config", str(tmp_path / "hw.toml")], ["hw.toml"]),
        "value out of range": (["tiny_cnn", "--set", "core.systolic.width=0"],
                               ["core.systolic.width", "1..4096"]),
        "unknown config key": (["tiny_cnn", "--set", "core.systolic.wdth=8"],
                               ["core.systolic.wdth", "width"]),
        "malformed --set": (["tiny_cnn", "--set", "core.systolic.width"],
                            ["--set", "core.systolic.width", "key=value"]),
        "malformed --dim": (["bert_ffn", "--dim", "seq"], ["--dim", "seq", "NAME=VALUE"]),
        "zero --dim": (["bert_ffn", "--dim", "seq=0"], ["seq", "positive integer"]),
        "non-integer --dim": (["bert_ffn", "--dim", "seq=1.5"], ["seq", "positive integer"]),
        "unknown --dim": (["tiny_cnn", "--dim", "batch=2"], ["batch"]),
        "unbound dim": (["bert_ffn"], ["seq", "--dim seq=VALUE"]),
        "unsupported op": ([str(unsupported_model)], ["Det", "det_0"]),
        "mapping too big": ([mm, *gv, "--mapping", str(too_big)],
                            ["big.map:1", "does not fit", "proj"]),
        "mapping not covering": ([mm, *gv, "--mapping", str(short)], ["short.map:2", "loop N"]),
        "mapping missing": (["tiny_cnn", "--mapping", str(tmp_path / "nope.map")],
                            ["nope.map", "not found"]),
        "no tile fits": (["resnet18", "--set", "core.spad_kib=1", "--set", "core.accum_kib=1",
                          "--set", "core.systolic.width=512", "--set",
                          "core.systolic.height=512"],
                         ["layer 'conv1' (Conv): no convolution tile fits", "core.spad_kib"]),
    }


CASE_NAMES = [
    "missing model", "missing model path", "text file", "text file named .onnx",
    "unknown preset", "missing config file", "value out of range", "unknown config key",
    "malformed --set", "malformed --dim", "zero --dim", "non-integer --dim", "unknown --dim",
    "unbound dim", "unsupported op", "mapping too big", "mapping not covering",
    "mapping missing", "no tile fits",
]


@pytest.mark.parametrize("case", CASE_NAMES)
def test_bad_input_is_one_clear_error(case, tmp_path, unsupported_model, matmul_model):
    cases = _bad_cases(tmp_path, unsupported_model, matmul_model)
    assert set(cases) == set(CASE_NAMES)
    args, needles = cases[case]
    out = tmp_path / "out.json"
    before = set(tmp_path.iterdir())
    res = run("simulate", *args, "--json", str(out))
    assert res.exit_code == 2, (case, res.exit_code, res.output)
    assert res.stdout == ""
    assert res.stderr.startswith("error: "), res.stderr
    assert res.stderr.count("error:") == 1
    for needle in needles:
        assert needle in res.stderr, (needle, res.stderr)
    assert "Traceback" not in res.output
    assert not out.exists()
    assert set(tmp_path.iterdir()) == before  # no temp file either


def _no_nodes(path):
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])
    onnx.save(helper.make_model(helper.make_graph([], "g", [x], [x]),
                                opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def _one_request(tmp_path):
    f = tmp_path / "r.toml"
    f.write_text('[[request]]\nmodel = "tiny_cnn"\n')
    return str(f)


def _one_relu(path, shape, reads="X"):
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, shape)
    node = helper.make_node("Relu", [reads], ["Y"], name="relu")
    graph = helper.make_graph([node], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))  # saved unchecked: some of these are not valid ONNX
    return str(path)


@pytest.mark.parametrize("case", ["a directory", "a huge dim", "a huge static input",
                                  "a negative input dim", "an undefined input",
                                  "the mapping a directory", "a graph with no nodes",
                                  "--dim with --requests", "an input without a shape",
                                  "a trace named .txt"])
def test_more_bad_inputs_are_one_clear_error(tmp_path, case):
    """Found from the outside (a bad-input sweep): each was a hang, an internal error or a
    message that did not name the thing."""
    folder = tmp_path / "adir"
    folder.mkdir()
    args, needles = {
        "a directory": ([str(folder)], ["adir", "is a directory"]),
        "a huge dim": ([_one_relu(tmp_path / "sym.onnx", ["batch", 64]), "--dim",
                        "batch=99999999999999999999999"], ["batch", "at most 2147483647"]),
        "a huge static input": ([_one_relu(tmp_path / "huge.onnx", [10**12, 64])],
                                ["tensor 'X'", "is 64,000,000,000,000 B at 1 B per element, "
                                 "more than npusim simulates (1,099,511,627,776 B, 1 TiB)"]),
        "a negative input dim": ([_one_relu(tmp_path / "neg.onnx", [-3, 64])],
                                 ["input 'X' axis 0 has size -3"]),
        "an undefined input": ([_one_relu(tmp_path / "undef.onnx", [4, 64], reads="nope")],
                               ["node 'relu'", "reads 'nope'"]),
        "the mapping a directory": (["tiny_cnn", "--mapping", str(folder)],
                                    ["mapping file", "is a directory"]),
        # (a second bad-input sweep: the first ran and reported 0 cycles, the second was
        # silently ignored)
        "a graph with no nodes": ([_no_nodes(tmp_path / "empty.onnx")],
                                  ["empty.onnx' has no nodes: nothing to simulate"]),
        "an input without a shape": ([_one_relu(tmp_path / "ns.onnx", None)],
                                     ["graph input 'X' has no shape (not even a rank)"]),
        "a trace named .txt": (["tiny_cnn", "--trace", str(tmp_path / "out.txt")],
                               ["a trace is an HDF5 (netCDF4) file: name it .h5, .hdf5 or .nc"]),
        "--dim with --requests": (["--requests", _one_request(tmp_path), "--dim", "seq=4"],
                                  ["--dim binds MODEL's dims; with --requests each request"]),
    }[case]
    res = run("simulate", *args, "--json", str(tmp_path / "out.json"))
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and res.stderr.count("error:") == 1, res.stderr
    for needle in needles:
        assert needle in res.stderr, (needle, res.stderr)
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("outputs", [("--json", "model"), ("--trace", "model"),
                                     ("--json", "config"), ("--json", "trace")])
def test_an_output_never_replaces_an_input_or_another_output(tmp_path, outputs):
    option, victim = outputs
    model = tmp_path / "m.onnx"
    model.write_bytes((models_dir() / "mlp.onnx").read_bytes())
    config = tmp_path / "c.toml"
    config.write_text('[memory]\ntype = "ideal"\n')
    target = {"model": model, "config": config, "trace": tmp_path / "run.h5"}[victim]
    before = {p: p.read_bytes() for p in (model, config)}
    args = ["simulate", str(model), "--config", str(config), option, str(target)]
    if victim == "trace":
        args += ["--trace", str(target)]
    res = run(*args)
    assert res.exit_code == 2, res.output
    assert "writing there would replace it" in res.stderr, res.stderr
    assert {p: p.read_bytes() for p in (model, config)} == before
    assert not (tmp_path / "run.h5").exists()


def test_an_output_never_replaces_a_model_a_request_file_names(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes((models_dir() / "mlp.onnx").read_bytes())
    requests = tmp_path / "r.toml"
    requests.write_text('[[request]]\nmodel = "m.onnx"\n')
    res = run("simulate", "--requests", str(requests), "-q", "--json", str(model))
    assert res.exit_code == 2, res.output
    assert f"--json {model} is the model of request 1: writing there would replace it" \
        in res.stderr
    assert model.read_bytes() == (models_dir() / "mlp.onnx").read_bytes()


def test_an_output_never_replaces_a_file_another_input_names(tmp_path):
    """An ONNXim config names its DRAM file: --json over that file replaced it (only the
    files given on the command line were checked before the run). Every input a run reads
    is off limits to its outputs."""
    import shutil
    from pathlib import Path

    folder = tmp_path / "on"
    shutil.copytree(Path(__file__).parent / "data" / "onnxim", folder)
    dram = folder / "configs" / "ramulator2_configs" / "DDR4.yaml"
    before = dram.read_bytes()
    res = run("simulate", "tiny_cnn", "-q", "--config",
              str(folder / "configs" / "systolic_ws_8x8_c4_simple_noc_transformer.json"),
              "--json", str(dram))
    assert res.exit_code == 2, res.output
    assert "this run read it as an input (ONNXim dram_config_path file)" in res.stderr
    assert dram.read_bytes() == before


def test_an_output_through_a_link_or_into_a_pipe_keeps_the_link_and_the_pipe(tmp_path):
    """A file renamed over the output replaced whatever node was there: a symbolic link
    (its target left as it was), a FIFO, a device (``--json /dev/full`` left a regular
    file in /dev). A link's target is replaced instead; a pipe or device is written into."""
    import stat
    import threading

    target = tmp_path / "target.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target.name)
    res = run("simulate", "tiny_cnn", "-q", "--json", str(link))
    assert res.exit_code == 0, res.output
    assert link.is_symlink() and json.loads(target.read_text())["model"] == "tiny_cnn"
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    res = run("simulate", "tiny_cnn", "-q", "--json", str(fifo))
    reader.join(timeout=60)
    assert res.exit_code == 0, res.output
    assert stat.S_ISFIFO(fifo.stat().st_mode) and json.loads(got[0])["model"] == "tiny_cnn"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.json", "link.json",
                                                         "target.json"]


def test_a_mapping_that_matches_no_layer_is_said(tmp_path):
    unused = tmp_path / "other.map"
    unused.write_text("[T] N16 C256 M512 - [O] N1 C1 M1 - [I] N16 C256 M512\n")
    res = run("simulate", "tiny_cnn", "--mapping", str(unused), "-q")
    assert res.exit_code == 0, res.output
    assert "other.map: no line matched a layer" in res.stderr


def test_json_into_missing_directory_fails_before_simulating(tmp_path):
    target = tmp_path / "no" / "such" / "dir" / "out.json"
    res = run("simulate", "tiny_cnn", "--json", str(target))
    assert res.exit_code == 2
    assert "error:" in res.stderr and str(target.parent) in res.stderr
    assert "Traceback" not in res.output and not target.exists()


def test_failed_write_leaves_no_file(tmp_path, monkeypatch):
    out = tmp_path / "out.json"

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli.os, "replace", broken_replace)
    res = run("simulate", "tiny_cnn", "-c", "gemmini_validation", "--json", str(out))
    assert res.exit_code == 2, res.output
    assert "No space left on device" in res.stderr and "out.json" in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    out = tmp_path / "out.json"
    out.write_text('{"old": 1}')
    with pytest.raises(RuntimeError, match="not JSON serialisable"):
        cli.write_json_atomic(out, {"x": object()})
    with pytest.raises(RuntimeError, match="Circular"):
        d: dict = {}
        d["self"] = d
        cli.write_json_atomic(out, d)
    assert out.read_text() == '{"old": 1}'
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    cli.write_json_atomic(out, {"n": np.int64(3), "a": np.arange(2)})
    assert json.loads(out.read_text()) == {"n": 3, "a": [0, 1]}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_hotspots_belong_to_hotspot_traffic(tmp_path):
    """They were ignored beside another pattern, given or the default; a Booksim file's
    hotspot pattern takes them."""
    res = run("noc", "--traffic", "uniform", "--hotspots", "1,2", "--cycles", "100")
    assert res.exit_code == 2
    assert res.stderr == ("error: hotspot nodes apply to hotspot traffic, and the traffic is "
                          "uniform (given): use --traffic hotspot\n")
    res = run("noc", "--hotspots", "1,2", "--cycles", "100")
    assert res.exit_code == 2
    assert "the traffic is uniform (the default): use --traffic hotspot" in res.stderr
    cfg = tmp_path / "hot.cfg"
    cfg.write_text("topology = mesh;\nk = 4;\nn = 2;\nrouting_function = dor;\n"
                   "traffic = hotspot({0});\n"
                   "injection_rate = 0.05;\n")
    res = run("noc", "--booksim", str(cfg), "--hotspots", "5", "--cycles", "200", "-o",
              str(tmp_path / "hot.json"))
    assert res.exit_code == 0, res.stderr
    assert json.loads((tmp_path / "hot.json").read_text())["traffic"]["hotspots"] == [5]


def test_running_out_of_memory_is_a_clear_error(monkeypatch):
    """An input that asks for more memory than the machine has (an LLM of a huge hidden
    size, below the size guard) is the user's to shrink, not a bug in npusim."""
    import npusim.simulation

    def greedy(*args, **kwargs):
        raise MemoryError("Unable to allocate 54.0 GiB")

    monkeypatch.setattr(npusim.simulation, "simulate", greedy)
    res = run("simulate", "tiny_cnn")
    assert res.exit_code == 2
    assert res.stderr.startswith("error: out of memory (Unable to allocate 54.0 GiB): this "
                                 "workload needs more memory than the machine has")
    assert "Traceback" not in res.output


def test_a_program_of_more_tiles_than_memory_holds_is_refused_while_it_is_built(
        monkeypatch, tmp_path):
    """ResNet-18 at batch 1,000,000: lowering grew its list of tile rows until the
    out-of-memory killer ended the run (24 GB, no message). Every TILES_CHECKED_EVERY tiles
    the builder checks that their tables still fit in what is free; here every 256 tiles,
    with 10 MiB said to be free, of ResNet-18 at batch 64 (over 4,000 tiles)."""
    import npusim.program
    import npusim.state

    monkeypatch.setattr(npusim.program, "TILES_CHECKED_EVERY", 256)
    monkeypatch.setattr(npusim.state, "CHECKED_FROM_BYTES", 0)
    monkeypatch.setattr(npusim.state, "free_memory_bytes", lambda: 10 << 20)
    out = tmp_path / "r.json"
    res = run("simulate", "resnet18", "--dim", "batch=64", "-o", str(out))
    assert res.exit_code == 2
    assert res.stderr.startswith("error: out of memory (the program's ")
    assert "tiles so far (up to layer '" in res.stderr and "Traceback" not in res.output
    assert not out.exists()


def test_a_state_table_larger_than_free_memory_is_refused_before_it_is_touched(
        monkeypatch, tmp_path):
    """Config fields each in range can multiply into more memory than the machine has (1024
    cores with 32 VCs of 1024 flits: the out-of-memory killer ended the run at 24 GB after
    54 s, with no message). What is larger than the memory left is refused before it is
    written: here 64 cores on a mesh of 32 VCs of 1024 flits (the router network's buffers
    and packet pool, twice while packed) with 100 MiB said to be free, and any one table of
    the chip's state."""
    import npusim.state

    monkeypatch.setattr(npusim.state, "free_memory_bytes", lambda: 100 << 20)
    out = tmp_path / "r.json"
    res = run("simulate", "tiny_cnn", "--set", "num_cores=64", "--set", "noc.type=mesh",
              "--set", "noc.router.vcs=32", "--set", "noc.router.vc_buffer_flits=1024",
              "-o", str(out))
    assert res.exit_code == 2
    assert res.stderr.startswith("error: out of memory (the router network's buffers (449 "
                                 "link ports x 32 VCs x 1024 flits) and packets: 2.")
    assert "GiB, and 0.1 GiB of memory is free): this workload needs more memory" in res.stderr
    assert "the NoC's buffers" in res.stderr and "Traceback" not in res.output
    assert not out.exists()
    # and any one table of the state: 256 cores whose two DMA engines have 65,536 requests
    # in flight each (the responses' rings)
    res = run("simulate", "tiny_cnn", "--set", "num_cores=256", "--set",
              "dma.max_outstanding=65536")
    assert res.exit_code == 2
    assert res.stderr.startswith("error: out of memory (a state table of 4 x 256 x 131073 "
                                 "entries: 1.0 GiB, and 0.1 GiB of memory is free)")
    # what fits is not refused: the same with 8 flits a VC
    res = run("simulate", "tiny_cnn", "--set", "num_cores=64", "--set", "noc.type=mesh",
              "--set", "noc.router.vcs=32", "-o", str(out))
    assert res.exit_code == 0, res.stderr
    # the memory said free is this machine's: on Linux, some and at most all of it
    monkeypatch.undo()
    if sys.platform.startswith("linux"):
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        assert 0 < npusim.state.free_memory_bytes() <= total


def test_api_overrides_take_one_string_a_mapping_or_a_list():
    """A lone string was read one character at a time, a mapping by its keys."""
    want = npusim.simulate("tiny_cnn", overrides=["num_cores=2"]).total_cycles
    assert npusim.simulate("tiny_cnn", overrides="num_cores=2").total_cycles == want
    assert npusim.simulate("tiny_cnn", overrides={"num_cores": 2}).total_cycles == want
    with pytest.raises(NpusimError, match="override 5 is not a string"):
        npusim.simulate("tiny_cnn", overrides=[5])
    # and the other arguments of a wrong kind are named (raw ValueErrors before)
    with pytest.raises(NpusimError, match=r"dims = \['batch=2'\] must map dim names to sizes"):
        npusim.simulate("tiny_cnn", dims=["batch=2"])
    with pytest.raises(NpusimError, match="skip = 'no' must be True or False"):
        npusim.simulate("tiny_cnn", skip="no")


def test_ctrl_c_while_the_command_line_imports_is_an_interrupt(monkeypatch, capsys):
    """The npusim script imports typer and rich first (a tenth of a second): a Ctrl-C
    then printed a KeyboardInterrupt traceback; now the same as at any later moment."""
    import builtins

    import npusim.__main__ as entry

    real_import = builtins.__import__

    def interrupted(name, *args, **kwargs):
        if name == "npusim.cli":
            raise KeyboardInterrupt
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", interrupted)
    with pytest.raises(SystemExit) as e:
        entry.main()
    assert e.value.code == 130 and capsys.readouterr().err == "interrupted\n"


def test_a_ctrl_c_after_the_command_has_ended_changes_nothing(tmp_path):
    """A SIGINT in the interpreter's last moments, the result written, raised in a
    finalizer: 'Exception ignored in: ... KeyboardInterrupt' on stderr, exit 0 (3 of 50
    tries at the end of a run). Once the command has ended, SIGINT and SIGTERM are
    ignored: here one sent then, the process still exits with the command's code."""
    out = tmp_path / "r.json"
    code = ("import os, signal, sys\n"
            "import npusim.__main__ as entry\n"
            f"sys.argv = ['npusim', 'simulate', 'tiny_cnn', '-q', '--json', {str(out)!r}]\n"
            "try:\n"
            "    entry.main()\n"
            "finally:\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert "KeyboardInterrupt" not in res.stderr and res.stdout.strip() == "64109"
    assert out.exists()


def test_sigterm_ends_the_command_line_as_ctrl_c_does(tmp_path):
    """A CI job's timeout sends SIGTERM: npusim died without a word. Now one line, exit 143
    (128 + 15), and the result file it was to write not begun."""
    import signal

    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "npusim", "simulate", "resnet50",
                             "--config", "mobile", "--dim", "batch=8", "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)  # (running: a batch-8 ResNet-50 on mobile takes half a minute)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # (a cold kernel cache adds its compile notice before)
    assert (proc.returncode, stdout, stderr.splitlines()[-1:]) == (143, "", ["terminated"])
    assert "Traceback" not in stderr
    assert list(tmp_path.iterdir()) == []


def test_internal_error_is_exit_3_without_traceback(monkeypatch):
    import npusim.simulation

    def boom(*args, **kwargs):
        raise ZeroDivisionError("kaboom")

    monkeypatch.setattr(npusim.simulation, "simulate", boom)
    res = run("simulate", "tiny_cnn")
    assert res.exit_code == 3
    assert res.stderr.startswith("internal error: ZeroDivisionError: kaboom")
    assert "report" in res.stderr and "NPUSIM_DEBUG" in res.stderr
    assert "Traceback" not in res.output

    res = run("simulate", "tiny_cnn", env={"NPUSIM_DEBUG": "1"})
    assert res.exit_code == 3
    assert "Traceback" in res.stderr and "kaboom" in res.stderr


# --------------------------------------------------------------------------- option parsing


def test_parse_dims_and_overrides():
    assert cli.parse_dims(["seq=128", " batch = 2 "]) == {"seq": 128, "batch": 2}
    assert cli.parse_dims(None) == {}
    for bad in ("seq", "=3", "seq=", "seq=-1", "seq=0", "seq=abc", "seq=2.0"):
        with pytest.raises(npusim.errors.NpusimError, match="--dim"):
            cli.parse_dims([bad])
    with pytest.raises(npusim.errors.NpusimError, match="twice"):
        cli.parse_dims(["seq=1", "seq=2"])
    assert cli.parse_overrides(["a.b = 3", "memory.type=ideal"]) == ["a.b=3", "memory.type=ideal"]
    for bad in ("a.b", "=3", "a.b="):
        with pytest.raises(npusim.errors.NpusimError, match="--set"):
            cli.parse_overrides([bad])
    with pytest.raises(npusim.errors.NpusimError, match="no value after '='"):
        cli.parse_overrides(["num_cores="])
    # a key given twice with two values is refused, as --dim is (the last silently won, so
    # --fidelity fast --set fidelity=full ran fast); the same value twice is one setting
    with pytest.raises(npusim.errors.NpusimError, match="num_cores is given twice, 2 and 4"):
        cli.parse_overrides(["num_cores=2", "num_cores=4"])
    assert cli.parse_overrides(["num_cores=2", "num_cores = 2"]) == ["num_cores=2"] * 2
    res = run("simulate", "tiny_cnn", "--fidelity", "fast", "--set", "fidelity=full")
    assert res.exit_code == 2 and "fidelity is given twice, full and fast" in res.stderr
    for model, said in (("", "give an ONNX file or a bundled model name"),
                        ("/dev/null", "is not a regular file")):
        res = run("simulate", model)
        assert res.exit_code == 2 and said in res.stderr, res.stderr


def test_human_units():
    assert cli.human_bytes(512) == "512 B"
    assert cli.human_bytes(1536) == "1.50 KiB"
    assert cli.human_bytes(3 * 1024 ** 2) == "3.00 MiB"
    assert cli.human_seconds(107.832e-6) == "107.8 µs"
    assert cli.human_seconds(0.0123) == "12.3 ms"
    assert cli.human_seconds(5e-9) == "5 ns"
    assert cli.human_seconds(2.5) == "2.5 s"
    assert cli.human_count(4_669_440) == "4.67 M"
    assert cli.human_count(950) == "950"


# --------------------------------------------------------------------------- progress bar


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_progress_bar_only_after_delay_and_when_enabled():
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    clock = FakeClock()
    rep = cli.ProgressReporter(enabled=True, delay=1.0, console=console, clock=clock)
    clock.t = 0.5
    rep(1, 6, 1000)
    assert not rep.shown  # a short run never shows a bar
    clock.t = 1.5
    rep(3, 6, 50_000)
    assert rep.shown
    task = rep.bar.tasks[0]
    assert (task.completed, task.total, task.fields["cycles"]) == (3, 6, 50_000)
    rep(6, 6, 90_000)
    rep.close()
    assert "layers" in buf.getvalue()

    off = cli.ProgressReporter(enabled=False, delay=0.0, console=console, clock=clock)
    clock.t = 100.0
    off(1, 6, 10)
    off.close()
    assert not off.shown


def test_progress_off_a_terminal_is_a_line_every_interval():
    clock, lines = FakeClock(), []
    rep = cli.ProgressReporter(enabled=True, clock=clock, tty=False, every=30.0,
                               write=lines.append)
    for t, done, cycles in ((0.5, 1, 1_000), (29.9, 10, 90_000), (30.2, 11, 99_000),
                            (45.0, 20, 150_000), (95.0, 40, 1_234_567), (96.0, 41, 1_250_000)):
        clock.t = t
        rep(done, 286, cycles)
    rep.close()
    # one line at 30 s, none before, one at 95 s for the two intervals missed (60 and 90)
    assert lines == ["npusim: simulating, 11 of 286 layers done, 99,000 cycles, 30 s",
                     "npusim: simulating, 40 of 286 layers done, 1,234,567 cycles, 95 s"]
    assert rep.shown and rep.bar is None  # never a bar off a terminal
    quiet, said = cli.ProgressReporter(enabled=False, clock=clock, tty=False,
                                       write=lines.append), len(lines)
    clock.t = 500.0
    quiet(1, 286, 10)
    assert len(lines) == said


# --------------------------------------------------------------------------- other commands


def test_models_lists_bundled_models():
    from npusim.config import load_config
    from npusim.frontend import load_model
    from npusim.lowering import lower_graph

    res = run("models")
    assert res.exit_code == 0, res.output
    lines = {line.split()[0]: line.split() for line in res.stdout.splitlines() if line.strip()}
    assert "tiny_cnn" in lines
    graph = load_model("tiny_cnn")
    macs = sum(info.macs for info in lower_graph(graph, load_config(None)).layers)
    row = " ".join(lines["tiny_cnn"])
    assert f" {len(graph.nodes)} " in f" {row} "
    assert cli.human_count(macs) in row
    # bert_ffn has an unbound symbolic dim: no MACs, and a hint how to bind it.
    bert = " ".join(lines["bert_ffn"])
    assert " - " in bert and "--dim seq" in bert


def test_configs_lists_presets_with_descriptions():
    from npusim.config import DEFAULT_PRESET, list_presets, load_config

    res = run("configs")
    assert res.exit_code == 0, res.output
    flat = " ".join(res.stdout.split())
    for name in list_presets():
        assert name in flat
        assert " ".join(load_config(name).description.split()[:4]) in flat
    assert f"{DEFAULT_PRESET} (default)" in flat


def test_version():
    res = run("--version")
    assert res.exit_code == 0
    assert res.stdout.strip() == f"npusim {npusim.__version__}"


# --------------------------------------------------------------------------- start-up cost


def test_cli_import_is_light():
    code = ("import sys, npusim.cli; "
            "heavy = [m for m in ('numba', 'onnx', 'numpy', 'npusim.simulation', "
            "'npusim.engine') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_help_is_fast_and_imports_nothing_heavy():
    code = ("import sys, runpy\n"
            "sys.argv = ['npusim', '--help']\n"
            "try:\n"
            "    runpy.run_module('npusim', run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    assert e.code in (0, None), e.code\n"
            "heavy = [m for m in ('numba', 'onnx') if m in sys.modules]\n"
            "print('HEAVY', heavy, file=sys.stderr)\n")
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "100"})
    elapsed = time.perf_counter() - t
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stderr
    assert "simulate" in out.stdout and "models" in out.stdout and "configs" in out.stdout
    assert elapsed < 2.0  # typically ~0.15 s; generous for loaded CI machines


def test_simulate_requests_file_prints_llm_latencies_and_writes_json(tmp_path):
    f = tmp_path / "reqs.toml"
    f.write_text('[[request]]\nmodel = "gpt2"\nprompt = 8\ngenerate = 3\npartition = 0\n'
                 'llm = { layers = 1, vocab = 256 }\n\n'
                 '[[request]]\nmodel = "mlp"\narrival_us = 1\npartition = 1\nname = "m"\n')
    out = tmp_path / "r.json"
    res = run("simulate", "--requests", str(f), "--config", "mobile",
              "--set", "scheduler.policy=spatial", "--json", str(out))
    assert res.exit_code == 0, res.output
    assert "TTFT" in res.stdout and "partition utilization" in res.stdout
    data = json.loads(out.read_text())
    llm, mlp = data["requests"]
    assert len(llm["token_cycles"]) == 3 and llm["tbt_cycles"] == [
        b - a for a, b in zip(llm["token_cycles"], llm["token_cycles"][1:])]
    assert mlp["arrival_cycle"] == 1000 and mlp["start_cycle"] >= 1000
    assert [p["cores"] for p in data["partitions"]] == [[0, 1], [2, 3]]
    assert len(data["llm_servers"][0]["iterations"]) == 3
    from npusim.cli import human_joules  # each request's energy is in the table
    assert human_joules(llm["energy_j"]) in res.stdout
    assert human_joules(mlp["energy_j"]) in res.stdout


def test_simulate_requests_file_errors_are_one_line(tmp_path):
    f = tmp_path / "reqs.toml"
    f.write_text('[[request]]\nmodel = "gpt2"\nprompt = 8\ngenerate = 3\npartition = 3\n')
    res = run("simulate", "--requests", str(f))
    assert res.exit_code == 2
    assert "asks for partition 3, but the cores form 1 partition(s)" in res.output
    res = run("simulate", "--requests", str(tmp_path / "missing.toml"))
    assert res.exit_code == 2 and "request file not found" in res.output
    res = run("simulate", "tiny_cnn", "--requests", str(f))
    assert res.exit_code == 2 and "exactly one" in res.output
