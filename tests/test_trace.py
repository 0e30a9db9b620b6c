"""Traces (`npusim simulate --trace`): totals equal the JSON result, the windowed command log
passes the independent DRAM checker, the file opens with xarray and h5py, tracing changes
no result, and a failed or killed run leaves no trace file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr
from typer.testing import CliRunner

import npusim
from npusim.cli import app
from npusim.config import config_from_dict, config_to_dict
from npusim.dram import check_command_log
from npusim.dram import dram_standard
from npusim.errors import NpusimError
from npusim.trace import MAX_BINS, TraceOptions, open_trace
from npusim.trace import record
from helpers import write_on_a_full_disk

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
LOG_COLUMNS = ("cycle", "channel", "rank", "bankgroup", "bank", "row", "column", "type")


def command_log(ds: xr.Dataset) -> np.ndarray:
    return np.stack([ds[f"command_{c}"].values for c in LOG_COLUMNS], axis=1)


def strip_wall(result) -> dict:
    d = result.to_dict()
    d.pop("simulation")
    return d


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """tiny_cnn on mobile through the CLI: the trace (bins of 100 core cycles = 80 DRAM
    cycles) and the JSON result of the same run."""
    d = tmp_path_factory.mktemp("cli")
    res = runner.invoke(app, ["simulate", "tiny_cnn", "--json", str(d / "out.json"),
                              "--trace", str(d / "run.h5"), "--trace-window", "2000:6000",
                              "--trace-bin", "100"])
    assert res.exit_code == 0, res.output
    assert "trace written to" in res.output
    return d / "run.h5", json.loads((d / "out.json").read_text())


def test_trace_totals_equal_the_json_result(cli_run):
    path, data = cli_run
    ds = open_trace(path)
    assert ds.attrs["total_cycles"] == data["total_cycles"]
    for ch in data["memory"]["channels"]:
        c = ch["channel"]
        for bank in ch["banks"]:
            b = ds.sel(channel=c, bank=bank["bank"]).sum("time")
            for key in ("reads", "writes", "row_hits", "row_misses", "row_conflicts"):
                assert int(b[key]) == bank[key] > -1, (c, bank["bank"], key)
        per_ch = ds.sel(channel=c).sum()
        assert int(per_ch.activates) == ch["activates"]
        assert int(per_ch.precharges + per_ch.all_bank_precharges) == ch["precharges"]
        assert int(per_ch.refreshes) == ch["refreshes"] > 0
    assert int(ds.reads.sum()) == data["memory"]["reads"] > 0
    assert int(ds.row_conflicts.sum()) == data["memory"]["row_conflicts"] > 0
    for core in data["cores"]:
        c = ds.sel(core=core["core"]).sum("time")
        assert int(c.core_active_cycles) == core["busy_cycles"] > 0
        assert int(c.unit_busy_cycles.sel(unit="systolic")) == core["systolic_stream_cycles"]
        assert int(c.unit_busy_cycles.sel(unit="vector")) == core["vector_busy_cycles"]
    # busy + stalled + idle fill every bin; a unit is busy only while its core holds a tile
    width = ds.attrs["bin_cycles"]
    parts = ds.unit_busy_cycles + ds.unit_stalled_cycles + ds.unit_idle_cycles
    assert (parts == width).all() and (ds.unit_stalled_cycles >= 0).all()
    assert (ds.unit_busy_cycles.sel(unit="dma_load").sum("time") > 0).all()
    assert ds.layer_start_cycle.values.tolist() == [l["start_cycle"] for l in data["layers"]]
    assert ds.layer_end_cycle.values.tolist() == [l["end_cycle"] for l in data["layers"]]
    assert ds.layer_name.values.tolist() == [l["name"] for l in data["layers"]]
    assert int(ds.request_end_cycle[0]) == data["total_cycles"]
    # every request crossed the NoC: one request flit per read or write request
    assert int(ds.noc_request_flits.sum()) >= data["memory"]["reads"] + data["memory"]["writes"]
    assert 0 < float(ds.read_queue_occupancy.max()) <= 32


def test_window_log_passes_the_checker_and_matches_the_bank_state(cli_run):
    path, data = cli_run
    ds = open_trace(path)
    cfg = config_from_dict(json.loads(ds.attrs["config"]))
    log = command_log(ds)
    assert len(log) > 100
    assert log[:, 0].min() >= 1600 and log[:, 0].max() < 4800  # DRAM cycles of 2000:6000
    assert ds.sizes["window_time"] == 3200
    assert check_command_log(ds, dram_standard(cfg), channels=1,  # the trace as it is
                             initial_open_rows=ds.initial_open_row.values) == []
    # the window starts mid-run: without its open rows, the first accesses look illegal
    assert check_command_log(log, dram_standard(cfg), channels=1)
    # every RD/WR finds its row open in the per-cycle state
    state = ds.bank_state.values
    flat = (log[:, 2] * 4 + log[:, 3]) * 4 + log[:, 4]
    for (cyc, ch, *_rest, row, _col, cmd), b in zip(log, flat):
        if cmd in (3, 4):
            i = cyc - 1600
            assert ds.open_row.values[i, ch, b] == row and state[i, ch, b] in (3, 4)
    # binned busy time over the window's bins equals the busy cycles of the bank state
    busy = ds.bank_busy_cycles.sel(time=slice(2000, 5999)).sum("time")
    assert (busy.values == (ds.bank_state >= 2).sum("window_time").values).all()
    assert ds.bank_state.attrs["flag_meanings"].split()[:2] == ["closed", "open"]


def test_xarray_and_h5py_both_open_it_and_the_config_round_trips(cli_run):
    path, data = cli_run
    with xr.open_dataset(path) as ds:
        assert ds.reads.dims == ("time", "channel", "bank")
        assert ds.unit_busy_cycles.dims == ("time", "core", "unit")
        assert ds.bank_state.dims == ("window_time", "channel", "bank")
        assert ds.reads.attrs["units"] == "count"
        assert ds.bank_busy_cycles.attrs["units"] == "DRAM cycles"
        assert ds.time_seconds.attrs["units"] == "s"
        assert ds.time.values[1] == 100
        assert ds.time_seconds.values[1] == pytest.approx(100 / 1e9)
        assert ds.attrs["model"] == "tiny_cnn" and ds.attrs["npusim_version"] == npusim.__version__
        assert json.loads(ds.attrs["config"]) == data["config"]
        reads = ds.reads.values
    cfg = npusim.config.load_config("mobile")
    assert json.loads(xr.open_dataset(path).attrs["config"]) == config_to_dict(cfg)
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["reads"][...], reads)
        assert f["reads"].compression == "gzip" and f["reads"].chunks is not None
        assert f["bank_state"].shape == (3200, 1, 16)
        config = f.attrs["config"]
        config = config.decode() if isinstance(config, bytes) else config
        assert config_from_dict(json.loads(config)) == cfg


def test_tracing_changes_no_result_and_small_rings_give_the_same_trace(monkeypatch):
    """Returns from the kernel to drain full rings are between steps: same results, same
    trace, whether the rings are big or tiny, skipping or stepping every cycle."""
    opts = TraceOptions(None, window=(0, 3000), bin_cycles=64)
    plain = npusim.simulate("mlp", "mobile", overrides=["num_cores=2"])
    big = npusim.simulate("mlp", "mobile", overrides=["num_cores=2"], trace=opts)
    assert plain.trace is None
    assert strip_wall(big) == strip_wall(plain)
    monkeypatch.setattr(record, "RING_BINS", 1)
    monkeypatch.setattr(record, "LOG_ROWS", 16)
    monkeypatch.setattr(record, "INTERVAL_ROWS", 40)
    small = npusim.simulate("mlp", "mobile", overrides=["num_cores=2"], trace=opts)
    stepped = npusim.simulate("mlp", "mobile", overrides=["num_cores=2"], trace=opts,
                              skip=False)
    assert strip_wall(small) == strip_wall(plain) == strip_wall(stepped)
    xr.testing.assert_identical(small.trace, big.trace)
    xr.testing.assert_identical(stepped.trace, big.trace)
    assert small.event_steps == plain.event_steps


def test_auto_bins_on_hbm_with_many_channels():
    """server: 16 HBM2 channels; auto binning keeps at most MAX_BINS bins and totals exact."""
    r = npusim.simulate("mlp", "server", trace=TraceOptions(None, window=(0, 2000)))
    ds, d = r.trace, r.to_dict()
    assert ds.attrs["bin_mode"] == "auto" and 1 <= ds.sizes["time"] <= MAX_BINS
    assert ds.sizes["time"] * ds.attrs["bin_cycles"] > r.total_cycles
    assert ds.sizes["channel"] == 16
    per_bank = ds.row_hits.sum("time").values
    assert per_bank.tolist() == [[b["row_hits"] for b in ch["banks"]]
                                 for ch in d["memory"]["channels"]]
    assert [int(v) for v in ds.core_active_cycles.sum("time")] == \
        [c["busy_cycles"] for c in d["cores"]]
    assert check_command_log(ds, dram_standard(r.config), channels=16,
                             initial_open_rows=ds.initial_open_row.values) == []
    # one-cycle bins: the loop skips idle stretches far past a ring's end between drains
    fine = npusim.simulate("mlp", "server", trace=TraceOptions(None, bin_cycles=1)).trace
    assert fine.sizes["time"] == r.total_cycles + 1
    assert int(fine.row_hits.sum()) == r.memory["row_hits"]
    assert int(fine.reads.sum()) == r.memory["reads"]


def test_auto_bins_merge_pairs_past_the_limit(monkeypatch):
    monkeypatch.setattr(record, "MAX_BINS", 16)
    r = npusim.simulate("tiny_cnn", "mobile", trace=TraceOptions(None))
    ds = r.trace
    assert 8 < ds.sizes["time"] <= 16
    assert [int(v) for v in ds.core_active_cycles.sum("time")] == \
        [c["busy_cycles"] for c in r.cores]
    assert int(ds.row_misses.sum()) == r.memory["row_misses"]


def test_requests_and_ideal_memory(tmp_path):
    """Two requests: per-request times; ideal memory: no DRAM or NoC variables, and the
    summary and plot still work."""
    from npusim.simulation import simulate_requests
    from npusim.trace.report import plot_trace, summary_rows
    from npusim.workload import Request

    reqs = [Request("mlp", name="a"), Request("mlp", arrival_cycle=3000, name="b")]
    r = simulate_requests(reqs, "mobile", overrides=["memory.type=ideal"],
                          trace=TraceOptions(None))
    ds = r.trace
    assert "reads" not in ds and "noc_request_flits" not in ds and "bank_state" not in ds
    assert ds.request_start_cycle.values.tolist() == [q["start_cycle"] for q in r.requests]
    assert ds.request_end_cycle.values.tolist() == [q["finish_cycle"] for q in r.requests]
    assert set(ds.layer_request.values.tolist()) == {0, 1}
    assert [int(v) for v in ds.core_active_cycles.sum("time")] == \
        [c["busy_cycles"] for c in r.cores]
    assert dict(summary_rows(ds))["layers / requests"] == f"{len(r.layers)} / 2"
    assert plot_trace(ds, tmp_path / "f.png").stat().st_size > 10_000


def test_summary_and_plot(cli_run, tmp_path):
    path, data = cli_run
    res = runner.invoke(app, ["trace", "summary", str(path)])
    assert res.exit_code == 0, res.output
    m = data["memory"]
    assert f"{m['row_hits']:,} / {m['row_misses']:,} / {m['row_conflicts']:,}" in res.output
    assert f"{data['total_cycles']:,}" in res.output and "most conflicted banks" in res.output
    out = tmp_path / "fig.png"
    res = runner.invoke(app, ["trace", "plot", str(path), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    res = runner.invoke(app, ["trace", "summary", str(tmp_path / "missing.h5")])
    assert res.exit_code == 2 and "trace file not found" in res.output
    res = runner.invoke(app, ["trace", "plot", str(path), "--out", str(tmp_path / "fig.xyz")])
    assert res.exit_code == 2 and "supported: " in res.output and "png" in res.output
    assert not (tmp_path / "fig.xyz").exists()
    res = runner.invoke(app, ["trace", "plot", str(path), "--out", str(path)])
    assert res.exit_code == 2 and "is the trace file" in res.output


def test_a_sweep_result_is_not_taken_for_a_trace(tmp_path):
    import xarray as xr

    ds = xr.Dataset({"total_cycles": ("point", [1, 2])}, attrs={"npusim_version": "x"})
    ds.to_netcdf(tmp_path / "sweep.h5", engine="h5netcdf")
    res = runner.invoke(app, ["trace", "summary", str(tmp_path / "sweep.h5")])
    assert res.exit_code == 2 and "is not an npusim trace" in res.output, res.output


def _edited_copy(src: Path, dst: Path, edit) -> Path:
    import shutil

    shutil.copy(src, dst)
    with h5py.File(dst, "a") as f:
        edit(f)
    return dst


def _garble_attrs(f, names=None):
    for key in names or list(f.attrs):
        f.attrs[key] = "garbage"


def _delete_core_vars_in_place(f):
    # h5py's in-place deletes leave this file's metadata inconsistent: h5py then fails
    # to open a variable with a KeyError ("incorrect metadata checksum")
    for key in list(f):
        if key.startswith("core") or "util" in key:
            del f[key]


@pytest.mark.parametrize("edit, problem", [
    # before: internal error "ValueError: invalid literal for int() with base 10: 'garbage'"
    (_garble_attrs, "attribute total_cycles = 'garbage' is not an integer"),
    (lambda f: _garble_attrs(f, ["bin_cycles"]),
     "attribute bin_cycles = 'garbage' is not an integer"),
    (lambda f: f.attrs.__delitem__("core_freq_mhz"), "attribute core_freq_mhz is missing"),
    # before: internal error "KeyError: 'Unable to open object by token ...'"
    (_delete_core_vars_in_place, "Unable to open object by token"),
])
@pytest.mark.parametrize("command", ["summary", "plot"])
def test_a_corrupt_trace_is_not_a_readable_trace(cli_run, tmp_path, edit, problem, command):
    path = _edited_copy(cli_run[0], tmp_path / "bad.h5", edit)
    out = tmp_path / "fig.png"
    res = runner.invoke(app, ["trace", command, str(path)] +
                        (["--out", str(out)] if command == "plot" else []))
    assert res.exit_code == 2, res.output
    assert res.output.startswith(f"error: '{path}' is not a readable npusim trace (")
    assert problem in res.output and len(res.output.splitlines()) == 1, res.output
    assert not out.exists()


def test_a_trace_without_a_variable_it_always_has_is_not_readable(cli_run, tmp_path):
    ds = open_trace(cli_run[0]).drop_vars("unit_busy_cycles")
    ds.to_netcdf(tmp_path / "part.h5", engine="h5netcdf")
    with pytest.raises(NpusimError, match=r"is not a readable npusim trace \("
                                                 r"variable unit_busy_cycles is missing"):
        open_trace(tmp_path / "part.h5")


def test_a_plot_of_a_trace_without_bins_is_one_error(cli_run, tmp_path):
    """(It was an IndexError from the time axis' last edge: an internal error.)"""
    from npusim.errors import NpusimError
    from npusim.trace.report import plot_trace

    empty = open_trace(cli_run[0]).isel(time=slice(0, 0))
    with pytest.raises(NpusimError, match="no time bins"):
        plot_trace(empty, tmp_path / "f.png")
    assert not (tmp_path / "f.png").exists()


def test_a_summary_of_a_zero_cycle_run_says_0_percent_without_warnings(cli_run, tmp_path):
    import warnings

    from npusim.trace.report import summary_rows

    path = _edited_copy(cli_run[0], tmp_path / "zero.h5",
                        lambda f: f.attrs.__setitem__("total_cycles", np.int64(0)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # before: RuntimeWarning: invalid value in divide
        rows = dict(summary_rows(open_trace(path)))
    assert rows["busiest bank"].endswith("DRAM cycles busy (0.0%)"), rows
    assert "nan" not in " ".join(rows.values())


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")
def test_a_trace_the_disk_cannot_hold_is_one_error_and_no_file(tmp_path):
    """Before: HDF5 wrote the file itself; the failed writes printed one "Exception
    ignored" traceback per dataset h5py could not close, and h5netcdf's __del__ then
    flushed into the half-closed file: SIGSEGV, and the temp file left behind."""
    out = tmp_path / "t.h5"
    write_on_a_full_disk(
        "import npusim\n"
        "from npusim.trace import TraceOptions, write_trace\n"
        "ds = npusim.simulate('tiny_cnn', trace=TraceOptions(None, bin_cycles=1)).trace",
        "write_trace(ds, sys.argv[1])", 65536, out,
        "cannot write --trace")


@pytest.mark.parametrize("args,message", [
    (["--trace-window", "5:3"], "END must be greater than START"),
    (["--trace-window", "a:b"], "expected START:END"),
    (["--trace-window", "100"], "expected START:END"),
    (["--trace-bin", "0"], "bin width must be a positive"),
])
def test_bad_trace_options_exit_2_and_leave_no_file(tmp_path, args, message):
    out = tmp_path / "run.h5"
    res = runner.invoke(app, ["simulate", "tiny_cnn", "--trace", str(out), *args])
    assert res.exit_code == 2 and message in res.output, res.output
    assert res.output.count("error:") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_fixed_bin_too_narrow_for_the_run_is_refused_before_or_while_it_runs(
        tmp_path, monkeypatch):
    """--trace-bin 1 on ResNet-50 batch 8 simulated for 18 s and then ran out of memory
    (8 GiB of bins). A run that must make more than MAX_FIXED_BINS bins is refused before
    it starts: tiny_cnn's 4,669,440 MACs on mobile's 4 x 64 MACs a cycle take at least
    18,240 cycles; one that turns out longer than its MACs say stops when it gets there."""
    monkeypatch.setattr(record, "MAX_FIXED_BINS", 1000)
    out = tmp_path / "run.h5"
    res = runner.invoke(app, ["simulate", "tiny_cnn", "--trace", str(out), "--trace-bin", "18"])
    assert res.exit_code == 2
    assert res.stderr == ("error: --trace-bin 18: this run lasts at least 18,240 core cycles, "
                          "more than 1,000 bins of 18 (each holds every bank's, core's and "
                          "link's counts); give --trace-bin 19 or more, or leave it out for "
                          "bins sized to the run\n")
    res = runner.invoke(app, ["simulate", "tiny_cnn", "--trace", str(out), "--trace-bin", "19"])
    assert res.exit_code == 2  # (it runs 64,109 cycles: 3,375 bins)
    assert res.stderr.startswith("error: --trace-bin 19: the run has passed ")
    assert "give a --trace-bin above " in res.stderr
    assert list(tmp_path.iterdir()) == []
    res = runner.invoke(app, ["simulate", "tiny_cnn", "--trace", str(out), "--trace-bin", "65"])
    assert res.exit_code == 0, res.output
    assert open_trace(out).sizes["time"] == -(-64_109 // 65)  # 987 bins of 65 cycles


def test_unwritable_path_options_without_trace_and_a_too_large_window(tmp_path):
    res = runner.invoke(app, ["simulate", "tiny_cnn", "--trace", str(tmp_path / "no" / "r.h5")])
    assert res.exit_code == 2 and "does not exist" in res.output
    res = runner.invoke(app, ["simulate", "tiny_cnn", "--trace", str(tmp_path)])
    assert res.exit_code == 2 and "is a directory" in res.output
    res = runner.invoke(app, ["simulate", "tiny_cnn", "--trace-bin", "10"])
    assert res.exit_code == 2 and "need --trace" in res.output
    res = runner.invoke(app, ["simulate", "tiny_cnn", "--trace", str(tmp_path / "r.h5"),
                              "--trace-window", "0:100000000"])
    assert res.exit_code == 2 and "a window may span at most 1,562,500 core cycles" in res.output
    assert list(tmp_path.iterdir()) == []


def test_a_failure_while_writing_leaves_no_file(tmp_path, monkeypatch):
    """The write is atomic: an error (or Ctrl-C) half-way (the temp file written, not yet
    synced) leaves neither the target nor the temp file, and an existing target
    untouched."""
    real = os.fsync
    target = tmp_path / "run.h5"

    def written_then(exc):
        def fsync(fd):
            assert os.fstat(fd).st_size > 0  # the temp file holds the trace's bytes
            raise exc
        return fsync

    for exc in (RuntimeError("disk on fire"), KeyboardInterrupt()):
        monkeypatch.setattr(os, "fsync", written_then(exc))
        with pytest.raises(type(exc)):
            npusim.simulate("mlp", "mobile", trace=str(target))
        assert list(tmp_path.iterdir()) == []
    target.write_bytes(b"old")
    monkeypatch.setattr(os, "fsync", written_then(RuntimeError("again")))
    with pytest.raises(RuntimeError):
        npusim.simulate("mlp", "mobile", trace=str(target))
    assert target.read_bytes() == b"old" and list(tmp_path.iterdir()) == [target]
    monkeypatch.setattr(os, "fsync", real)
    npusim.simulate("mlp", "mobile", trace=str(target))
    assert open_trace(target).attrs["model"] == "mlp"


def test_a_killed_run_leaves_no_trace_file(tmp_path):
    """kill -9 during the run: no run.h5 (a leftover could only be the temp name). The run
    takes about 35 s on a fast host (ResNet-50, batch 4, every cycle stepped), so it is
    still running when killed (tiny_cnn finished in 2.5 s, as the kill came)."""
    out = tmp_path / "run.h5"
    proc = subprocess.Popen([sys.executable, "-m", "npusim", "simulate", "resnet50",
                             "--dim", "batch=4", "--no-skip", "--trace", str(out),
                             "--trace-bin", "2048", "--trace-window", "0:60000", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        # kill it once it is running, well before it could have finished
        time.sleep(2.5)
        assert proc.poll() is None, "the run finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not out.exists()
    # (atomic.py's temp name: .run.h5.<random>.tmp, left when killed while writing)
    assert all(p.name.startswith(".run.h5.") and p.name.endswith(".tmp")
               for p in tmp_path.iterdir())


def test_the_walkthrough_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    """notebooks/trace_walkthrough.ipynb, executed as a reader would (its traces go to
    NPUSIM_TRACE_DIR), so it never rots."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("NPUSIM_TRACE_DIR", str(tmp_path))
    nb = nbformat.read(REPO / "notebooks" / "trace_walkthrough.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert sorted(p.name for p in tmp_path.glob("*.h5")) == ["mlp_server_closed.h5",
                                                             "mlp_server_open.h5"]
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if "image/png" in o.get("data", {})]
    assert len(images) == 3


def test_a_serving_run_with_pauses_is_traced_whole():
    """LLM serving pauses after every iteration to add the next: the trace still holds
    every command and busy cycle, and the LLM server's stream ends with its last token."""
    from npusim.simulation import simulate_requests
    from npusim.workload import Request

    reqs = [Request("gpt2", prompt=8, generate=3, llm={"layers": 1, "vocab": 512}),
            Request("mlp", arrival_cycle=2000, name="m")]
    r = simulate_requests(reqs, "mobile", trace=TraceOptions(None, bin_cycles=512))
    ds = r.trace
    assert int(ds.reads.sum()) == r.memory["reads"] > 0
    assert int(ds.writes.sum()) == r.memory["writes"] > 0
    assert [int(v) for v in ds.core_active_cycles.sum("time")] == \
        [c["busy_cycles"] for c in r.cores]
    assert int(ds.request_end_cycle[0]) == r.requests[0]["token_cycles"][-1]
    assert ds.layer_end_cycle.values.tolist() == [l["end_cycle"] for l in r.layers]


def test_a_trace_hook_is_chosen_by_the_class_of_the_params():
    """A hook is its kernel for a traced run's Params and a constant for any other, chosen
    by the class (``kernels/state.py: params_class``), never by a field: a command outside
    the trace's log window is logged by an untraced run (which has no window) and not by a
    traced one; a fast traced run traces too."""
    from numba import njit

    from npusim.config import load_config
    from npusim.kernels.state import params_class
    from npusim.kernels.trace import trace_in_log_window
    from npusim.params import TimeBase, make_params

    @njit
    def logged(p, cyc):
        return trace_in_log_window(p, cyc)

    cfg = load_config(None)
    p = make_params(cfg, TimeBase.of(cfg), True)
    window = dict(trace_log_from=100 * p.mem_period, trace_log_to=200 * p.mem_period)
    for fast in (False, True):
        untraced = params_class(fast, False)(*p._replace(**window))
        traced = params_class(fast, True)(*p._replace(**window))
        assert [logged(untraced, c) for c in (50, 150, 250)] == [True, True, True]
        assert [logged(traced, c) for c in (50, 150, 250)] == [False, True, False]


def test_a_window_after_the_run_says_so():
    """A window past the run's end was silently empty (0 DRAM commands, no note)."""
    r = npusim.simulate("tiny_cnn", trace=TraceOptions(None, window=(10**6, 10**6 + 10)))
    assert r.total_cycles < 10**6
    assert (f"trace window 1000000:1000010 starts after the run ended ({r.total_cycles} "
            f"cycles): the trace holds no per-cycle bank state or DRAM commands") in r.warnings
    assert not any("trace window" in w for w in npusim.simulate(
        "tiny_cnn", trace=TraceOptions(None)).warnings)
