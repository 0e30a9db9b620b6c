"""Fast fidelity beside full in a benchmark's table (issue 17): how a case's fast run is
compared with its full run, and the columns that show it. One rule for every benchmark with
fast columns (bench_engine, bench_models, bench_serving) and for bench_fast.

The speed-up is taken on CPU seconds of the whole ``simulate()`` (loading, lowering, running,
collecting): the machine is shared, and a process's own CPU time is what its wall time would
be on an idle one. Both runs load their loop from the kernel cache before they are timed (a
fast run's loop is a variant of its own), so neither pays a compile.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FAST_HEAD = ["fast cycles", "fast error", "fast CPU s", "fast speed-up"]
# a speed-up is shown from this many CPU seconds of the full run on: below, the scatter of
# a process's CPU time over a few hundredths of a second is the size of the times
MIN_TIMED_SECONDS = 0.1


def fill_kernel_cache() -> None:
    """`npusim compile` in a process of its own, before anything is timed: a fast run's cuts
    are entry points of their own, compiled at its first cut, which a timed run must not pay
    (and the benchmark's own process stays as a user's would start)."""
    subprocess.run([str(Path(sys.executable).parent / "npusim"), "compile"], check=True,
                   cwd=REPO, capture_output=True)


def error_percent(full_cycles: int, fast_cycles: int) -> float:
    """Fast's total cycles against full's, in percent of full."""
    return 100 * (fast_cycles - full_cycles) / full_cycles


def speedup(full_cpu_seconds: float, fast_cpu_seconds: float) -> float | None:
    return full_cpu_seconds / fast_cpu_seconds if fast_cpu_seconds > 0 else None


def fast_fields(full_cycles: int, full_cpu_seconds: float, fast_cycles: int,
                fast_cpu_seconds: float, report: dict) -> dict:
    """What a row records of its fast run; ``report`` is the result's ``fidelity`` entry."""
    return {"fast_cycles": fast_cycles,
            "fast_error_percent": error_percent(full_cycles, fast_cycles),
            "fast_cpu_seconds": fast_cpu_seconds,
            "fast_speedup": speedup(full_cpu_seconds, fast_cpu_seconds),
            "fast_layers_extrapolated": report.get("layers_extrapolated", 0),
            "fast_cycles_extrapolated": report.get("extrapolated_cycles", 0)}


def add_fast_run(row: dict, run: dict) -> None:
    """Into ``row`` (a full run's, with ``total_cycles`` and ``cpu_seconds``), what it records
    of the same case's fast run ``run`` (the same keys and the result's ``fidelity``), or
    the fast run's error."""
    if "error" in run:
        row["fast_error"] = run["error"]
    else:
        row.update(fast_fields(row["total_cycles"], row["cpu_seconds"], run["total_cycles"],
                               run["cpu_seconds"], run["fidelity"]))


def fast_cells(row: dict) -> list[str]:
    """The cells under ``FAST_HEAD``: dashes for a row without a fast run."""
    if "fast_cycles" not in row:
        return ["-"] * len(FAST_HEAD)
    s = row["fast_speedup"]
    shown = s is not None and row["fast_cpu_seconds"] * s >= MIN_TIMED_SECONDS
    return [f"{row['fast_cycles']:,}", f"{row['fast_error_percent']:+.2f}%",
            f"{row['fast_cpu_seconds']:.2f}", f"{s:.1f}x" if shown else "(too short)"]
