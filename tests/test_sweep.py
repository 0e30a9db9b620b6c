"""Parameter sweeps: a grid equals its individual runs, survives kills, runs the same on a
dask.distributed cluster, and rejects bad axes before anything runs."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

import npusim
import npusim.kernels  # noqa: F401 - sets NUMBA_CACHE_DIR, the cache workers must share
from npusim.cli import app
from npusim.config import load_config
from npusim.errors import NpusimError
from npusim.simulation import simulate_requests
from npusim.sweep import load_sweep, open_sweep, run_sweep
from npusim.sweep.store import Journal, journal_path, read_journal
from npusim.workload import read_models_list
from helpers import write_on_a_full_disk
from tests.helpers import weight

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()
HBM2 = "HBM2-2400_8Gb_x128"


def sweep_cli(*args: str):
    return runner.invoke(app, ["sweep", *args])


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture
def batched_model(tmp_path):
    """Two MatMuls on a [batch, 64] input: small, with a symbolic batch dim to sweep."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")]
    graph = helper.make_graph(nodes, "batched", [x], [y],
                              [weight("w1", [64, 128]), weight("w2", [128, 32])])
    path = tmp_path / "batched.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture
def unsupported_model(tmp_path):
    """A valid model whose only op npusim cannot lower: its points fail when they run."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 8, 8])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])
    node = helper.make_node("Det", ["X"], ["Y"], name="det_0")
    graph = helper.make_graph([node], "det", [x], [y])
    path = tmp_path / "det.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def cli_simulate(tmp_path, model, overrides: dict, dims: dict) -> dict:
    """One individual `npusim simulate --json` run."""
    out = tmp_path / "single.json"
    args = ["simulate", str(model), "--config", "mobile", "--json", str(out), "--quiet"]
    for k, v in overrides.items():
        args += ["--set", f"{k}={v}"]
    for k, v in dims.items():
        args += ["--dim", f"{k}={v}"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


# --------------------------------------------------------------------------- a grid


def test_grid_equals_individual_simulate_runs(tmp_path, batched_model):
    sweep = write(tmp_path / "grid.toml", f"""
        name = "grid"
        [workload]
        model = "{batched_model.name}"
        [axes]
        batch = [1, 4]
        num_cores = [1, 2]
        [zip.dram]
        labels = ["DDR4", "HBM2"]
        memory.standard = ["DDR4-1600K_8Gb_x8", "{HBM2}"]
        memory.channels = [1, 8]
    """)
    out = tmp_path / "grid.h5"
    res = sweep_cli(str(sweep), "--out", str(out), "--workers", "2")
    assert res.exit_code == 0, res.output
    assert "8 points, 8 ok, 0 failed" in res.output

    ds = open_sweep(out)
    assert dict(ds.sizes) == {"batch": 2, "num_cores": 2, "dram": 2}
    assert list(ds["dram"].values) == ["DDR4", "HBM2"]
    assert list(ds["memory.channels"].values) == [1, 8]
    for batch in (1, 4):
        for cores in (1, 2):
            for label, standard, channels in (("DDR4", "DDR4-1600K_8Gb_x8", 1),
                                              ("HBM2", HBM2, 8)):
                point = ds.sel(batch=batch, num_cores=cores, dram=label)
                single = cli_simulate(tmp_path, batched_model,
                                      {"num_cores": cores, "memory.standard": standard,
                                       "memory.channels": channels}, {"batch": batch})
                mem = single["memory"]
                assert str(point.status.values) == "ok"
                assert int(point.total_cycles) == single["total_cycles"] > 0
                assert float(point.latency_s) == single["seconds"]
                assert float(point.throughput_inf_s) == batch / single["seconds"]
                assert int(point.bytes_moved) == single["bytes_moved"]
                assert float(point.dram_bandwidth_gbps) == mem["bandwidth_gbps"]
                energy = single["energy"]
                assert float(point.energy_j) == energy["total_j"] > 0
                assert float(point.avg_power_w) == energy["average_power_w"]
                assert float(point.tops_per_w) == energy["tops_per_w"]
                rows = mem["row_hits"] + mem["row_misses"] + mem["row_conflicts"]
                assert float(point.row_hit_rate) == mem["row_hits"] / rows
                util = np.mean([c["systolic_utilization"] for c in single["cores"]])
                assert float(point.systolic_utilization) == pytest.approx(util, rel=1e-12)
                assert float(point.wall_seconds) > 0
    # every worker loaded the kernels from this process's on-disk cache
    records = read_journal(journal_path(out))
    assert {r["kernel_cache"] for r in records} == {os.environ["NUMBA_CACHE_DIR"]}
    # more cores never make this workload slower
    assert (ds.total_cycles.sel(num_cores=2) <= ds.total_cycles.sel(num_cores=1)).all()

    # a finished sweep re-run runs nothing and rewrites the same numbers, here as Zarr
    shutil.copy(journal_path(out), journal_path(tmp_path / "grid.zarr"))
    res = sweep_cli(str(sweep), "--out", str(tmp_path / "grid.zarr"))
    assert res.exit_code == 0, res.output
    assert "ran 0" in res.output
    again = open_sweep(tmp_path / "grid.zarr")
    np.testing.assert_array_equal(again.total_cycles.values, ds.total_cycles.values)
    assert len(read_journal(journal_path(tmp_path / "grid.zarr"))) == 8
    res = sweep_cli(str(sweep), "--out", str(tmp_path / "grid.zarr"))  # over its own store
    assert res.exit_code == 0 and "ran 0" in res.output, res.output
    # a directory that is not a sweep result is never replaced: it was moved aside and
    # deleted whole, whatever it held
    mine = tmp_path / "mine.zarr"
    mine.mkdir()
    (mine / "data.txt").write_text("precious")
    res = sweep_cli(str(sweep), "--out", str(mine))
    assert res.exit_code == 2 and "is not an npusim sweep result" in res.output, res.output
    assert (mine / "data.txt").read_text() == "precious" and len(list(mine.iterdir())) == 1


def test_failures_are_recorded_and_do_not_stop_the_others(tmp_path, unsupported_model):
    """A bad combination (config), a run-time failure (an op npusim cannot lower) and a
    timeout are each recorded with their error; every other point runs."""
    sweep = write(tmp_path / "fail.toml", f"""
        [base]
        set = {{ "memory.channel_bytes_per_cycle" = 16 }}
        [workload]
        model = "tiny_cnn"
        [axes]
        model = ["tiny_cnn", "{unsupported_model}"]
        memory.type = ["simple", "dram"]
        memory.freq_mhz = [800, 1000]
    """)
    out = tmp_path / "fail.h5"
    res = sweep_cli(str(sweep), "--out", str(out), "--workers", "1")
    assert res.exit_code == 0, res.output
    ds = open_sweep(out)
    tiny = ds.sel(model="tiny_cnn")
    failing = ds.sel(model=str(unsupported_model))
    bad = {"memory.type": "dram", "memory.freq_mhz": 1000}
    for point in (tiny.sel(bad), failing.sel(bad)):  # the invalid combination, never run
        assert str(point.status.values) == "failed"
        assert "memory.freq_mhz = 1000" in str(point.error.values)
    assert (failing.status.values == "failed").all()
    failed_ran = failing.error.values.ravel()[[0, 1, 2]]  # simple/800, simple/1000, dram/800
    assert all("Det" in e for e in failed_ran)
    assert np.isnan(failing.total_cycles.values).all()
    for mem_type, freq in (("simple", 800), ("simple", 1000), ("dram", 800)):
        point = tiny.sel({"memory.type": mem_type, "memory.freq_mhz": freq})
        expected = npusim.simulate("tiny_cnn", "mobile", overrides=[
            "memory.channel_bytes_per_cycle=16", f"memory.type={mem_type}",
            f"memory.freq_mhz={freq}"])
        assert str(point.status.values) == "ok"
        assert int(point.total_cycles) == expected.total_cycles
    assert ds.attrs["points_ok"] == 3 and ds.attrs["points_failed"] == 5
    assert len(read_journal(journal_path(out))) == 6  # invalid combinations are not journaled

    # --dry-run counts what a run would start: nothing, or with --retry-failed the three
    # failing points again (it said 0 to run whatever --retry-failed said)
    res = sweep_cli(str(sweep), "--out", str(out), "--dry-run")
    assert "6 recorded, 2 invalid combinations, 0 to run" in res.output, res.output
    res = sweep_cli(str(sweep), "--out", str(out), "--dry-run", "--retry-failed")
    assert "6 recorded, 2 invalid combinations, 3 to run (3 of them again)" in res.output
    # --retry-failed runs the three failing points again; the ok points are not run again
    res = sweep_cli(str(sweep), "--out", str(out), "--retry-failed", "--workers", "1")
    assert res.exit_code == 0, res.output
    records = read_journal(journal_path(out))
    assert len(records) == 9 and all(r["status"] == "failed" for r in records[6:])
    assert {r["hash"] for r in records[6:]} == set(failing.point_hash.values.ravel()[[0, 1, 2]])
    assert open_sweep(out).attrs["points_ok"] == 3


def test_a_sweep_none_of_whose_points_ran_exits_1(tmp_path, unsupported_model):
    sweep = write(tmp_path / "f.toml", f"[workload]\nmodel = '{unsupported_model}'\n"
                                       "[axes]\nnum_cores = [1, 2]\n")
    out = tmp_path / "f.h5"
    res = sweep_cli(str(sweep), "--out", str(out), "--workers", "1")
    assert res.exit_code == 1, res.output
    assert "0 ok, 2 failed" in res.output and "no point of the sweep ran" in res.output
    assert out.exists()  # the dataset still says what failed


def test_a_file_that_is_not_a_journal_is_left_alone(tmp_path):
    sweep = write(tmp_path / "s.toml", "[workload]\nmodel = 'tiny_cnn'\n")
    junk = bytes(range(256)) * 2
    journal_path(tmp_path / "s.h5").write_bytes(junk)
    res = sweep_cli(str(sweep), "--out", str(tmp_path / "s.h5"), "--workers", "1")
    assert res.exit_code == 2 and "is not a sweep journal" in res.output, res.output
    assert journal_path(tmp_path / "s.h5").read_bytes() == junk  # not cut


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_journal_path_that_is_a_directory_is_one_clear_error(tmp_path, dry_run):
    # before: internal error "IsADirectoryError: [Errno 21] Is a directory"
    sweep = write(tmp_path / "s.toml", "[workload]\nmodel = 'tiny_cnn'\n")
    journal_path(tmp_path / "s.h5").mkdir()
    res = sweep_cli(str(sweep), "--out", str(tmp_path / "s.h5"), "--workers", "1",
                    *(["--dry-run"] if dry_run else []))
    assert res.exit_code == 2, res.output
    assert res.output == (f"error: sweep journal {journal_path(tmp_path / 's.h5')} is a "
                          f"directory; move it away or give another --out\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.h5.points.jsonl", "s.toml"]


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")
@pytest.mark.parametrize("name", ["x.h5", "x.zarr"])
def test_a_dataset_the_disk_cannot_hold_is_one_error_and_no_file(tmp_path, name):
    """Before: the .h5 write failed inside HDF5 and the process then crashed (SIGSEGV) in
    h5netcdf's __del__; a .zarr write was an internal error."""
    if name.endswith(".zarr"):
        pytest.importorskip("zarr")
    out = tmp_path / name
    write_on_a_full_disk(
        "import numpy as np, xarray as xr\n"
        "from npusim.sweep.dataset import write_dataset\n"
        "ds = xr.Dataset({name: ('point', np.random.default_rng(0).random(4096))\n"
        "                 for name in ('total_cycles', 'latency_s', 'macs')})",
        "write_dataset(ds, sys.argv[1])", 16384, out,
        "cannot write sweep dataset")


def test_a_sweep_stopped_before_any_point_leaves_no_journal(tmp_path, monkeypatch):
    # (a scheduler that cannot be reached, as --scheduler bogus://x; without dask's own
    # failure, which leaves its loop state behind in a test process)
    import npusim.sweep.run as sweep_run

    def unreachable(*args):
        raise NpusimError("--scheduler bogus://x: cannot connect")

    monkeypatch.setattr(sweep_run, "_client", unreachable)
    sweep = write(tmp_path / "s.toml", "[workload]\nmodel = 'tiny_cnn'\n")
    res = sweep_cli(str(sweep), "--out", str(tmp_path / "s.h5"), "--scheduler", "bogus://x")
    assert res.exit_code == 2 and "cannot connect" in res.output, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


def test_a_point_past_its_timeout_is_recorded_as_failed(tmp_path):
    sweep = write(tmp_path / "t.toml", """
        [workload]
        model = "tiny_cnn"
        [axes]
        num_cores = [1, 2]
    """)
    ds = run_sweep(sweep, tmp_path / "t.h5", workers=1, timeout=1e-9)
    assert (ds.status.values == "failed").all()
    assert all(e.startswith("timeout: stopped after") for e in ds.error.values)
    assert np.isnan(ds.total_cycles.values).all()
    assert len(read_journal(journal_path(tmp_path / "t.h5"))) == 2


def test_requests_workload(tmp_path):
    """An ONNXim models-list file as the workload: each point is a simulate_requests run."""
    listing = tmp_path / "list.json"
    listing.write_text(json.dumps({"models": [{"name": "tiny_cnn", "request_time": 0},
                                              {"name": "mlp", "request_time": 0.01}]}))
    sweep = write(tmp_path / "req.toml", """
        [base]
        config = "mobile"
        set = { "memory.type" = "ideal" }
        [workload]
        requests = "list.json"
        [axes]
        num_cores = [1, 2]
    """)
    ds = run_sweep(sweep, tmp_path / "req.h5", workers=1)
    for cores in (1, 2):
        cfg = load_config("mobile", ["memory.type=ideal", f"num_cores={cores}"])
        expected = simulate_requests(read_models_list(listing, cfg.core_freq_mhz), cfg)
        point = ds.sel(num_cores=cores)
        assert int(point.total_cycles) == expected.total_cycles
        mean = np.mean([r["latency_cycles"] for r in expected.requests]) / 1e9
        assert float(point.latency_s) == pytest.approx(mean, rel=1e-12)
        assert float(point.throughput_inf_s) == pytest.approx(2 / expected.seconds, rel=1e-12)


def test_request_file_with_an_llm_swept_over_policies(tmp_path):
    """A TOML request file (an LLM beside a CNN) as the workload, the scheduler policy as
    the axis: each point equals npusim.simulate_requests of the same file."""
    from npusim.workload import read_requests

    reqs = write(tmp_path / "reqs.toml", """
        [[request]]
        model = "gpt2"
        prompt = 4
        generate = 2
        llm = { layers = 1, vocab = 256 }

        [[request]]
        model = "mlp"
        arrival_cycles = 100
    """)
    sweep = write(tmp_path / "pol.toml", """
        [base]
        config = "mobile"
        [workload]
        requests = "reqs.toml"
        [axes]
        "scheduler.policy" = ["fifo", "spatial"]
    """)
    ds = run_sweep(sweep, tmp_path / "pol.h5", workers=1)
    for policy in ("fifo", "spatial"):
        cfg = load_config("mobile", [f"scheduler.policy={policy}"])
        expected = simulate_requests(read_requests(reqs, cfg.core_freq_mhz), cfg)
        assert int(ds.sel({"scheduler.policy": policy}).total_cycles) == expected.total_cycles


# --------------------------------------------------------------------------- kills


def _sigint_disposition() -> int:
    return int(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)


def test_local_workers_ignore_ctrl_c_and_the_sweep_never_does(monkeypatch):
    """A terminal's Ctrl-C reaches the whole process group: the workers ignore it (it
    would fail the points they run; dask's worker preload, npusim.sweep.worker_signals),
    the sweep takes it, also while it starts its workers. It ignored SIGINT then, for them
    to inherit, and a Ctrl-C in those seconds was lost: the example grid ran to its end in
    3 of 6 tries."""
    import distributed

    from npusim.sweep.run import _client

    while_starting = []
    real = distributed.LocalCluster

    def recording(*args, **kwargs):
        while_starting.append(_sigint_disposition())
        return real(*args, **kwargs)

    monkeypatch.setattr(distributed, "LocalCluster", recording)
    with _client(1, None, 1) as (client, _):
        workers = list(client.run(_sigint_disposition).values())
    assert while_starting == [0]  # the sweep's own: a Ctrl-C interrupts it
    assert workers == [1]  # ignored in the worker


def _default_sigint() -> None:
    # a shell runs background jobs with SIGINT ignored, and children inherit that: give the
    # sweep the disposition an interactive terminal would, so Ctrl-C raises in it
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _sweep_process(sweep: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "npusim", "sweep", str(sweep), "--out",
                             str(out), "--workers", "1"], cwd=REPO, start_new_session=True,
                            preexec_fn=_default_sigint,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_records(journal: Path, proc: subprocess.Popen, k: int) -> None:
    deadline = time.monotonic() + 120
    while len(read_journal(journal)) < k:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the sweep recorded no points"
        time.sleep(0.05)


SEQS = [8, 16, 24, 32, 40, 48, 56]


@pytest.fixture
def slow_sweep(tmp_path):
    """Seven points of about half a second each."""
    return write(tmp_path / "seq.toml", f"""
        [workload]
        model = "bert_ffn"
        [axes]
        dim.seq = {SEQS}
    """)


def test_killed_and_interrupted_sweeps_resume_running_every_point_exactly_once(
        tmp_path, slow_sweep):
    """kill -9 part-way, then Ctrl-C part-way, then run to the end: the journal holds every
    point exactly once, and each run ran only points no earlier run had finished."""
    out = tmp_path / "seq.h5"
    journal = journal_path(out)
    proc = _sweep_process(slow_sweep, out)
    try:
        _wait_for_records(journal, proc, 2)
        os.killpg(proc.pid, signal.SIGKILL)  # the client and its worker processes
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    first = len(read_journal(journal))
    assert 2 <= first < len(SEQS) - 1
    assert not out.exists()  # never a half-written result

    proc = _sweep_process(slow_sweep, out)
    try:
        _wait_for_records(journal, proc, first + 1)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, stderr
    assert f"running {len(SEQS) - first} of {len(SEQS)} points" in stderr
    assert "run the same command again to resume" in stderr
    partial = open_sweep(out)  # consistent: exactly the journaled points, the rest pending
    second = len(read_journal(journal))
    assert int((partial.status.values == "ok").sum()) == second > first
    assert int((partial.status.values == "pending").sum()) == len(SEQS) - second
    assert np.isnan(partial.total_cycles.where(partial.status == "pending")).all()

    res = sweep_cli(str(slow_sweep), "--out", str(out), "--workers", "1")
    assert res.exit_code == 0, res.output
    assert f"ran {len(SEQS) - second} " in res.output
    records = read_journal(journal)
    assert sorted(r["setting"][0]["dim.seq"] for r in records) == SEQS
    assert len({r["hash"] for r in records}) == len(records) == len(SEQS)
    assert len({r["run"] for r in records}) == 3
    ds = open_sweep(out)
    assert (ds.status.values == "ok").all()
    for seq in SEQS[::3]:
        expected = npusim.simulate("bert_ffn", "mobile", dims={"seq": seq})
        assert int(ds.total_cycles.sel(seq=seq)) == expected.total_cycles


def test_journal_cuts_a_torn_last_line_and_allows_one_writer(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path) as journal:
        journal.append({"hash": "a", "status": "ok"})
        with pytest.raises(NpusimError, match="another sweep is writing"):
            Journal(path)
    with open(path, "ab") as f:
        f.write(b'{"hash": "b", "sta')  # killed mid-write
    assert [r["hash"] for r in read_journal(path)] == ["a"]
    with Journal(path) as journal:
        journal.append({"hash": "c", "status": "ok"})
    assert [r["hash"] for r in read_journal(path)] == ["a", "c"]


# --------------------------------------------------------------------------- a cluster


def test_distributed_cluster_equals_local(tmp_path, batched_model):
    sweep = write(tmp_path / "d.toml", f"""
        [base]
        set = {{ "memory.type" = "ideal" }}
        [workload]
        model = "{batched_model}"
        [axes]
        batch = [1, 2, 8]
        core.systolic.width = [8, 16]
    """)
    local = run_sweep(sweep, tmp_path / "local.h5", workers=1)
    procs = []
    try:
        info = tmp_path / "scheduler.json"
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
             "--port", "0", "--no-dashboard", "--scheduler-file", str(info)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 60
        while not info.exists() or not info.read_text().strip():
            assert procs[0].poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        address = json.loads(info.read_text())["address"]
        for _ in range(2):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", address,
                 "--nworkers", "1", "--nthreads", "1", "--no-dashboard"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO))
        from distributed import Client

        with Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
        out = tmp_path / "cluster.h5"
        res = sweep_cli(str(sweep), "--out", str(out), "--scheduler", address)
        assert res.exit_code == 0, res.output
        assert f"on {address} (2 workers)" in res.output
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
    remote = open_sweep(out)
    assert (remote.status.values == "ok").all()
    for name in ("total_cycles", "bytes_moved", "macs", "systolic_utilization", "latency_s"):
        np.testing.assert_array_equal(remote[name].values, local[name].values)
    np.testing.assert_array_equal(remote.point_hash.values, local.point_hash.values)
    records = read_journal(journal_path(out))
    assert len({r["worker"] for r in records}) == 2  # both cluster workers took points
    assert {r["kernel_cache"] for r in records} == {os.environ["NUMBA_CACHE_DIR"]}
    expected = npusim.simulate(batched_model, "mobile", overrides=["memory.type=ideal",
                               "core.systolic.width=16"], dims={"batch": 8})
    assert int(remote.total_cycles.sel({"batch": 8, "core.systolic.width": 16})) == \
        expected.total_cycles


# --------------------------------------------------------------------------- bad input

BAD_SWEEPS = {
    "unknown key": ("[workload]\nmodel = 'tiny_cnn'\n[axes]\ncore.systolic.widht = [8, 16]\n",
                    "core.systolic.widht"),
    "out of range": ("[workload]\nmodel = 'tiny_cnn'\n[axes]\nnum_cores = [2, 0]\n",
                     "num_cores = 0"),
    "missing model": ("[workload]\nmodel = 'tiny_cnn'\n[axes]\nmodel = ['tiny_cnn', 'nope']\n",
                      "model 'nope' not found"),
    "missing base model": ("[workload]\nmodel = 'nope.onnx'\n", "nope.onnx"),
    "unknown dim": ("[workload]\nmodel = 'tiny_cnn'\n[axes]\nbatch = [1, 2]\n",
                    "no dimension named 'batch'"),
    "malformed TOML": ("[workload\nmodel = 'tiny_cnn'\n", "malformed TOML"),
    "zip lengths": ("[workload]\nmodel = 'tiny_cnn'\n[zip.a]\nnum_cores = [1, 2]\n"
                    "core.systolic.width = [8]\n", "zip.a"),
    "bad base": ("[base]\nconfig = 'mobile'\nset = { num_cores = 5000 }\n"
                 "[workload]\nmodel = 'tiny_cnn'\n", "num_cores = 5000"),
    "unknown top key": ("[workload]\nmodel = 'tiny_cnn'\n[axis]\nnum_cores = [1]\n", "'axis'"),
    "no workload": ("[axes]\nnum_cores = [1, 2]\n", "give a model"),
    "dim fixed and varied": ("[workload]\nmodel = 'resnet18'\ndims = { batch = 1 }\n"
                             "[axes]\nbatch = [1, 2]\n",
                             "dim.batch is both fixed (workload.dims.batch) and varied"),
    "set fixed and varied": ("[base]\nset = { num_cores = 2 }\n[workload]\nmodel = 'tiny_cnn'\n"
                             "[zip.c]\nnum_cores = [1, 4]\ncore.spad_kib = [64, 128]\n",
                             "num_cores is both fixed (base.set.num_cores) and varied (axis c)"),
}


@pytest.mark.parametrize("case", sorted(BAD_SWEEPS))
def test_bad_sweeps_are_rejected_before_anything_runs(tmp_path, case):
    text, named = BAD_SWEEPS[case]
    sweep = write(tmp_path / "bad.toml", text)
    out = tmp_path / "bad.h5"
    res = sweep_cli(str(sweep), "--out", str(out))
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: ") and named in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1
    assert "Traceback" not in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]  # nothing written


def test_a_grid_of_more_points_than_npusim_runs_is_refused_at_once(tmp_path):
    """Seven axes of ten values, 10,000,000 points, were expanded one by one for hours
    before --dry-run said anything; six of ten are refused before they are expanded."""
    keys = ["num_cores", "core.systolic.width", "core.systolic.height", "noc.latency",
            "dma.max_outstanding", "core.ld_queue"]
    axes = "\n".join(f"{k} = {list(range(8, 18))}" for k in keys)
    sweep = write(tmp_path / "s.toml", f"[workload]\nmodel = 'tiny_cnn'\n[axes]\n{axes}\n")
    res = sweep_cli(str(sweep), "--out", str(tmp_path / "s.h5"), "--dry-run")
    assert res.exit_code == 2, res.output
    assert "the grid has 1,000,000 points (10 num_cores x 10 " in res.output
    assert "at most 100,000; split it into several sweeps" in res.output


def test_dry_run_counts_points_and_checks_the_out_path(tmp_path):
    sweep = write(tmp_path / "s.toml", """
        [workload]
        model = "tiny_cnn"
        [axes]
        num_cores = [1, 2, 4]
        [zip.array]
        core.systolic.width = [8, 16]
        core.systolic.height = [8, 16]
    """)
    res = sweep_cli(str(sweep), "--out", str(tmp_path / "s.h5"), "--dry-run")
    assert res.exit_code == 0, res.output
    assert "6 points (3 num_cores x 2 array); 0 recorded, 0 invalid combinations, 6 to run" \
        in res.output
    assert len(load_sweep(sweep).points()) == 6
    res = sweep_cli(str(sweep), "--out", str(tmp_path / "s.csv"))
    assert res.exit_code == 2 and ".h5" in res.output
    res = sweep_cli(str(sweep), "--out", str(tmp_path / "no" / "s.h5"))
    assert res.exit_code == 2 and "does not exist" in res.output


def test_example_sweep_file_is_valid():
    sweep = load_sweep(REPO / "configs" / "sweeps" / "resnet18_grid.toml")
    points = sweep.points()
    assert len(points) == math.prod(sweep.shape) == 64
    assert all(p.error is None for p in points)
    assert len({p.hash for p in points}) == 64


def test_a_sweep_binds_inputs_holding_one_integer_and_unnamed_dims(tmp_path):
    """A model with an input of one integer (a sample rate its If branches on) and an input
    dim with no name: `dim.sr` and `dim.x.0` are valid names, as `--dim` takes them."""
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                              [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Constant", [], ["rate"], value=helper.make_tensor(
                 "rate", TensorProto.INT64, [], [16000])),
             helper.make_node("Equal", ["sr", "rate"], ["is16k"]),
             helper.make_node("If", ["is16k"], ["y"], then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "vad", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 64]),
        helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 64])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              str(tmp_path / "vad.onnx"))
    sweep = write(tmp_path / "s.toml", """
        [workload]
        model = "vad.onnx"
        dims = { "x.0" = 1 }
        [axes]
        dim.sr = [8000, 16000]
    """)
    points = load_sweep(sweep).points()
    assert len(points) == 2 and all(p.error is None for p in points)
    bad = write(tmp_path / "bad.toml", """
        [workload]
        model = "vad.onnx"
        dims = { "x.0" = 1, rate = 3 }
    """)
    errors = {p.error for p in load_sweep(bad).points()}
    assert any("no dimension named 'rate'" in e and "scalar integer inputs: sr" in e
               for e in errors if e), errors


def test_a_bundled_model_takes_its_example_dims_in_a_sweep_too(tmp_path):
    """npusim simulate resnet18 runs at its example batch; a sweep over it without dims
    refused every point as unbound (a bad-input sweep found the two disagree)."""
    sweep = write(tmp_path / "s.toml", "[workload]\nmodel = 'resnet18'\n"
                                       "[axes]\nnum_cores = [1, 2]\n")
    res = sweep_cli(str(sweep), "--out", str(tmp_path / "s.h5"), "--dry-run")
    assert res.exit_code == 0, res.output
    assert "2 to run" in res.output
