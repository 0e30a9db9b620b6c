"""Several requests on one NPU: arrival times, ONNXim models lists."""

import json

import numpy as np

import pytest

import npusim
from npusim.errors import NpusimError
from npusim.simulation import simulate_requests
from npusim.workload import Request, read_models_list, read_requests
from npusim.frontend import resolve_model_path
from npusim.config import load_config
from npusim.dram import load_standard


def test_a_request_never_starts_before_it_arrives_and_alone_takes_its_solo_time():
    # without refresh the DRAM has no clock of its own: any arrival gives the solo time
    # (12345 core cycles is also a whole number of 800 MHz DRAM cycles)
    no_refresh = ["memory.controller.refresh=false"]
    solo = npusim.simulate("mlp", "mobile", overrides=no_refresh).total_cycles
    late = simulate_requests([Request(str(resolve_model_path("mlp")), arrival_cycle=12345,
                                      name="late")], "mobile", overrides=no_refresh)
    r = late.requests[0]
    assert r["start_cycle"] >= 12345
    assert r["latency_cycles"] == solo
    assert late.total_cycles == 12345 + solo


def test_with_refresh_the_solo_time_repeats_when_arriving_in_phase_with_refresh():
    std = load_standard(load_config("mobile").memory.standard)
    refi_ns = std.timing["REFI"] * 1000 // std.freq_mhz  # core cycles at 1 GHz
    solo = npusim.simulate("mlp", "mobile").total_cycles
    late = simulate_requests([Request(str(resolve_model_path("mlp")), arrival_cycle=2 * refi_ns,
                                      name="late")], "mobile")
    assert late.requests[0]["latency_cycles"] == solo


def test_skip_ahead_over_an_idle_gap_changes_nothing():
    reqs = [Request(str(resolve_model_path("mlp")), arrival_cycle=0, name="a"),
            Request(str(resolve_model_path("tiny_cnn")), arrival_cycle=500000, name="b")]
    fast = simulate_requests(reqs, "mobile")
    slow = simulate_requests(reqs, "mobile", skip=False)
    assert fast.requests == slow.requests and fast.total_cycles == slow.total_cycles
    assert fast.event_steps < slow.event_steps


def test_two_requests_sharing_the_npu_take_longer_than_one():
    path = str(resolve_model_path("matmul_512x768x768"))
    one = simulate_requests([Request(path, name="a")], "mobile")
    two = simulate_requests([Request(path, name="a"), Request(path, name="b")], "mobile")
    assert two.total_cycles > 1.5 * one.total_cycles
    assert max(r["latency_cycles"] for r in two.requests) > one.requests[0]["latency_cycles"]


def test_onnxim_models_list(tmp_path):
    f = tmp_path / "models_list.json"
    f.write_text(json.dumps({"models": [
        {"name": "tiny_cnn", "request_time": 0},
        {"name": "bert_ffn", "seq": 32, "request_time": 0.5},
    ]}))
    reqs = read_models_list(f, core_freq_mhz=1000)
    assert [r.arrival_cycle for r in reqs] == [0, 500000]  # 0.5 ms at 1 GHz
    assert reqs[1].dims == {"seq": 32}
    r = simulate_requests(reqs, "mobile")
    assert r.requests[1]["start_cycle"] >= 500000


def test_a_models_list_finds_models_where_onnxim_does(tmp_path, monkeypatch):
    """ONNXim runs models/NAME/NAME.onnx under $ONNXIM_HOME or its working folder, with its
    lists in example/ beside models/: a list there naming resnet18 ran npusim's bundled
    ResNet-18 instead of the file ONNXim runs. A name found nowhere else still falls back
    to the bundled model, with a warning saying so."""
    import shutil
    import warnings

    from npusim.errors import NpusimWarning
    from npusim.paths import models_dir

    home = tmp_path / "onnxim"
    (home / "models" / "resnet18").mkdir(parents=True)
    ours = home / "models" / "resnet18" / "resnet18.onnx"
    shutil.copy(models_dir() / "tiny_cnn.onnx", ours)
    lst = home / "example" / "models_list.json"
    lst.parent.mkdir()
    lst.write_text(json.dumps({"models": [{"name": "resnet18"}]}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ONNXIM_HOME", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NpusimWarning)
        assert [r.model for r in read_models_list(lst, 1000)] == [str(ours)]  # beside example/
        elsewhere = tmp_path / "lists" / "l.json"
        elsewhere.parent.mkdir()
        elsewhere.write_text(lst.read_text())
        monkeypatch.setenv("ONNXIM_HOME", str(home))
        assert [r.model for r in read_models_list(elsewhere, 1000)] == [str(ours)]
    monkeypatch.delenv("ONNXIM_HOME")
    with pytest.warns(NpusimWarning, match="simulating npusim's bundled resnet18.onnx"):
        (req,) = read_models_list(elsewhere, 1000)
    assert req.model == str(models_dir() / "resnet18.onnx")


def test_a_models_list_batch_size_binds_a_dim_of_that_name(tmp_path):
    """ONNXim's own model files name their batch dim batch_size (its lists' key): it binds
    that dim (it went to a dim named batch, and the file's batch_size stayed unbound)."""
    import onnx
    from onnx import TensorProto, helper

    io = [helper.make_tensor_value_info(t, TensorProto.FLOAT, ["batch_size", 8]) for t in "xy"]
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "m", io[:1], io[1:])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "m.onnx")
    lst = tmp_path / "list.json"
    lst.write_text(json.dumps({"models": [{"name": "m", "batch_size": 4}]}))
    (req,) = read_models_list(lst, 1000)
    assert req.dims == {"batch_size": 4}


@pytest.mark.parametrize("entry,message", [
    ({"name": "no_such_model"}, "list.json: models[0]: model 'no_such_model' not found"),
    ({"name": "bert_ffn", "seqq": 4}, "seqq"),
    ({"name": "bert_ffn", "seq": 0}, "seq = 0"),
    ({"name": "tiny_cnn", "request_time": -1}, "request_time"),
    ({"name": "tiny_cnn", "request_time": 1.2e6}, "at most 1099511627776"),  # 2**40 < 1.2e15
    ({"name": "tiny_cnn", "request_time": float("nan")}, "request_time = nan must be a finite"),
    ({"name": "tiny_cnn", "request_time": True}, "request_time = True must be a finite"),
    # a name, not a path (this one read /etc/passwd as the 'bundled passwd')
    ({"name": "../../../etc/passwd"}, "model name '../../../etc/passwd' is a path"),
])
def test_models_list_errors_name_the_entry(tmp_path, entry, message):
    f = tmp_path / "list.json"
    f.write_text(json.dumps({"models": [entry]}))
    with pytest.raises(NpusimError) as e:
        read_models_list(f, 1000)
    assert message in str(e.value)


def test_an_empty_models_list_is_said_to_be_empty(tmp_path):
    f = tmp_path / "list.json"
    f.write_text('{"models": []}')
    with pytest.raises(NpusimError, match="list.json: the models list is empty"):
        read_models_list(f, 1000)


def test_a_request_files_model_errors_name_the_request(tmp_path):
    """A dim the model has not, in the second of two requests: the error said which model
    only, not which request of the file."""
    f = tmp_path / "r.toml"
    f.write_text('[[request]]\nmodel = "mlp"\n[[request]]\nmodel = "tiny_cnn"\n'
                 'dims = { foo = 3 }\n')
    with pytest.raises(NpusimError, match=r"^request 2 \(tiny_cnn\): .* no dimension named "
                                          r"'foo'"):
        simulate_requests(read_requests(f, 1000), "mobile")


def test_copies_of_a_model_run_as_if_loaded_apart_and_share_their_instructions(tmp_path):
    """A request file's ``count`` copies are loaded once and lowered each into the program:
    each takes the time it takes loaded on its own (the same file under three names), and
    their tiles run the same instruction rows (10,000 copies of tiny_cnn on ``mobile`` held
    14 GB of them and were killed for memory)."""
    import shutil

    from npusim.engine import EngineRun
    from npusim.workload import read_requests

    path = resolve_model_path("tiny_cnn")
    shutil.copy(path, tmp_path / "copy.onnx")
    gap = 1_000_000  # each copy alone on the NPU
    (tmp_path / "copies.toml").write_text(
        f'[[request]]\nmodel = "tiny_cnn"\ncount = 3\ninterval_cycles = {gap}\n')
    (tmp_path / "apart.toml").write_text("".join(
        f'[[request]]\nmodel = "{m}"\narrival_cycles = {k * gap}\n'
        for k, m in enumerate(["tiny_cnn", str(path), "copy.onnx"])))
    programs = []
    real_init = EngineRun.__init__

    def init(self, prog, *args, **kwargs):
        programs.append(prog)
        real_init(self, prog, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(EngineRun, "__init__", init)
        copies, apart = (simulate_requests(read_requests(tmp_path / f, 1000), "mobile")
                         for f in ("copies.toml", "apart.toml"))
        npusim.simulate("tiny_cnn", "mobile")
    lat = [r["latency_cycles"] for r in copies.requests]
    assert lat == [r["latency_cycles"] for r in apart.requests]
    assert max(lat) < gap
    prog_copies, prog_apart, prog_one = programs
    assert len(prog_copies.tile) == 3 * len(prog_one.tile)
    assert np.array_equal(prog_copies.inst, prog_one.inst)
    assert np.array_equal(prog_apart.inst, prog_one.inst)
