"""What a Dask worker runs for one point: one simulation, reduced to its headline numbers.

Never raises for a point's own failure (a bad combination found only when lowering, a
deadlock, a crash inside npusim, a timeout): it returns a failed record with the error, so
one bad point cannot stop the others. Workers load the numba kernels from the on-disk cache
(``NUMBA_CACHE_DIR``, inherited or derived from the same kernel sources), once per process.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import npusim
from npusim.errors import NpusimError

STATS = {
    # name: (units, description)
    "total_cycles": ("cycles", "simulated core cycles until the last layer finished"),
    "latency_s": ("s", "simulated time of the model (requests: mean request latency)"),
    "throughput_inf_s": ("1/s", "inferences (batch items or requests) per simulated second"),
    "macs": ("MAC", "multiply-accumulates of the workload"),
    "systolic_utilization": ("1", "mean over cores of MACs / (array size x total cycles)"),
    "vector_utilization": ("1", "mean over cores of vector-unit busy cycles / total cycles"),
    "dram_bandwidth_gbps": ("GB/s", "bytes read and written in memory per simulated second"),
    "dram_bandwidth_utilization": ("1", "DRAM bandwidth / the memory's peak bandwidth"),
    "row_hit_rate": ("1", "row hits / (hits + misses + conflicts); cycle-level DRAM only"),
    "bytes_moved": ("B", "bytes loaded and stored by the cores' DMA"),
    "energy_j": ("J", "energy of the run, every component (README Energy)"),
    "avg_power_w": ("W", "energy / simulated time"),
    "tops_per_w": ("TOPS/W", "2 x MACs per joule, in tera-operations per second per watt"),
    "sim_seconds": ("s", "host seconds in the simulation kernel"),
    "compile_seconds": ("s", "host seconds loading or compiling the kernels for this point"),
    "wall_seconds": ("s", "host seconds of the whole point: load, lower, simulate"),
}


class PointTimeout(Exception):
    """The point ran past its --timeout."""


def execute_point(task: dict[str, Any]) -> dict[str, Any]:
    """Run one point; returns its journal record (status ``ok`` or ``failed``)."""
    t0 = time.perf_counter()
    record: dict[str, Any] = {"hash": task["hash"], "worker": _where()}
    try:
        import npusim.kernels  # noqa: F401 - sets NUMBA_CACHE_DIR unless inherited

        record["kernel_cache"] = os.environ.get("NUMBA_CACHE_DIR")
        if npusim.__version__ != task["version"]:
            raise NpusimError(f"the worker runs npusim {npusim.__version__}, the sweep "
                              f"{task['version']}; install the same version on every worker")
        result = _simulate(task, _deadline(task.get("timeout"), t0))
        record["stats"] = headline_stats(result, task["workload"])
        record["status"] = "ok"
    except PointTimeout as err:
        record.update(status="failed", error=f"timeout: {err}")
    except NpusimError as err:
        record.update(status="failed", error=str(err))
    except Exception as err:  # noqa: BLE001 - a crash is this point's result, not the sweep's
        record.update(status="failed", error=f"{type(err).__name__}: {err}".strip())
    wall = time.perf_counter() - t0
    record["wall_seconds"] = wall
    if record["status"] == "ok":
        record["stats"]["wall_seconds"] = wall
    return record


def _where() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return f"{socket.gethostname()}:{os.getpid()}"


def _deadline(timeout: float | None, t0: float):
    """A progress callback that stops the run once it is past its timeout (the engine calls
    it between kernel chunks, so the check costs nothing per cycle)."""
    if not timeout:
        return None

    def check(done: int, total: int, cycles: int) -> None:
        elapsed = time.perf_counter() - t0
        if elapsed > timeout:
            raise PointTimeout(f"stopped after {elapsed:.1f} s (limit {timeout:g} s) at "
                               f"{done}/{total} layers, cycle {cycles:,}")
    return check


def _simulate(task: dict[str, Any], progress):
    from npusim.simulation import simulate, simulate_requests

    wl, cfg = task["workload"], task["config"]
    common = dict(mapping=wl.mapping, progress=progress, unsupported=wl.unsupported,
                  optimize=wl.optimize)
    if wl.requests is not None:
        from npusim.workload import read_requests

        return simulate_requests(read_requests(wl.requests, cfg.core_freq_mhz), cfg,
                                 **common)
    return simulate(wl.model, cfg, dims=wl.dims or None, **common)


def headline_stats(result, workload) -> dict[str, float]:
    """The numbers a sweep keeps per point (see ``STATS`` for their meaning)."""
    cores, mem = result.cores, result.memory
    seconds = result.seconds
    if result.requests:
        freq_hz = result.config.core_freq_mhz * 1e6
        latency = sum(r["latency_cycles"] for r in result.requests) / len(result.requests) / freq_hz
        inferences = sum(r.get("dims", {}).get("batch", 1) for r in result.requests)  # LLM: 1
    else:
        latency = seconds
        inferences = workload.dims.get("batch", 1)
    rows = mem.get("row_hits", 0) + mem.get("row_misses", 0) + mem.get("row_conflicts", 0)
    peak = mem.get("peak_gbps")
    return {
        "total_cycles": result.total_cycles,
        "latency_s": latency,
        "throughput_inf_s": inferences / seconds if seconds else float("nan"),
        "macs": sum(layer["macs"] for layer in result.layers),
        "systolic_utilization": sum(c["systolic_utilization"] for c in cores) / len(cores),
        "vector_utilization": sum(c["vector_utilization"] for c in cores) / len(cores),
        "dram_bandwidth_gbps": mem["bandwidth_gbps"],
        "dram_bandwidth_utilization": mem["bandwidth_gbps"] / peak if peak else float("nan"),
        "row_hit_rate": mem["row_hits"] / rows if rows else float("nan"),
        "bytes_moved": result.bytes_moved,
        "energy_j": result.energy["total_j"],
        "avg_power_w": result.energy["average_power_w"],
        "tops_per_w": result.energy["tops_per_w"] or float("nan"),
        "sim_seconds": result.wall_seconds,
        "compile_seconds": result.compile_seconds,
    }
