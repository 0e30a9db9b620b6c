"""Sweep benchmark (issue 7): the 64-point ResNet-18 grid of
``configs/sweeps/resnet18_grid.toml`` (cores x array size x DRAM x batch) with 1 and with 2
local workers.

Each run is the whole ``npusim sweep`` command in its own process, from a fresh output (no
journal to resume from): interpreter start, cluster start, every point, the dataset write.
Prints points, wall seconds and the speedup, checks that both runs gave identical numbers,
and writes results/benchmarks/sweep.{json,md}. The target: 2 workers take under 60% of the
1-worker time. The machine's load average is recorded around each run, since other work on
the same cores slows the 2-worker run most.

    python tests/benchmarks/bench_sweep.py [--quick] [--out FILE] [--render JSON]

``--quick`` runs an 8-point corner of the grid (1 and 2 cores, batch 1) instead and writes
results/benchmarks/sweep_quick.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "configs" / "sweeps" / "resnet18_grid.toml"
DEFAULT_OUT = REPO / "results" / "benchmarks" / "sweep.json"
TARGET_RATIO = 0.6


def quick_sweep(folder: Path) -> Path:
    """The grid's corner: 1 and 2 cores at batch 1 (8 points)."""
    text = SWEEP.read_text().replace("num_cores = [1, 2, 4, 8]", "num_cores = [1, 2]")
    text = text.replace("batch = [1, 2, 3, 4]", "batch = [1]")
    path = folder / "quick.toml"
    path.write_text(text)
    return path


def run(sweep: Path, out: Path, workers: int) -> dict:
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "npusim", "sweep", str(sweep), "--out",
                           str(out), "--workers", str(workers), "--quiet"],
                          capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"sweep with {workers} worker(s) failed: {proc.stderr.strip()}")
    import xarray as xr

    ds = xr.load_dataset(out, engine="h5netcdf")
    return {"workers": workers, "wall_seconds": wall, "points": int(ds.attrs["points"]),
            "points_ok": int(ds.attrs["points_ok"]),
            "point_seconds_sum": float(ds.wall_seconds.sum()),
            "compile_seconds_sum": float(ds.compile_seconds.sum()),
            "load_average_before": load_before[0], "load_average_after": os.getloadavg()[0],
            "total_cycles": ds.total_cycles.values.ravel().tolist()}


def measure(quick: bool) -> dict:
    """Both runs, and what they mean."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sweep = quick_sweep(folder) if quick else SWEEP
        grid = tomllib.loads(sweep.read_text())
        subprocess.run([sys.executable, "-m", "npusim", "simulate", "tiny_cnn", "--quiet"],
                       check=True, capture_output=True, cwd=REPO)  # kernels in the disk cache
        runs = []
        for workers in (1, 2):
            print(f"sweep {sweep.name} with {workers} worker(s) ...", flush=True)
            runs.append(run(sweep, folder / f"w{workers}.h5", workers))
            print(f"  {runs[-1]['points']} points in {runs[-1]['wall_seconds']:.1f} s",
                  flush=True)
    one, two = runs
    identical = one.pop("total_cycles") == two.pop("total_cycles")
    ratio = two["wall_seconds"] / one["wall_seconds"]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=REPO).stdout.strip()
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": commit,
            "python": platform.python_version(), "machine": platform.platform(),
            "cpus": os.cpu_count(),
            "sweep_file": "quick corner" if quick else str(SWEEP.relative_to(REPO)),
            "sweep": grid, "runs": runs,
            "speedup": one["wall_seconds"] / two["wall_seconds"],
            "two_over_one": ratio, "target_two_over_one": TARGET_RATIO,
            "met": ratio < TARGET_RATIO, "identical_results": identical}


def write_report(report: dict, out: Path) -> None:
    """``out`` (JSON) and its Markdown table beside it."""
    lines = ["| workers | points | wall s | sum of point s | sum of compile s | "
             "load avg before / after |", "|---|---|---|---|---|---|"]
    for r in report["runs"]:
        lines.append(f"| {r['workers']} | {r['points_ok']}/{r['points']} | "
                     f"{r['wall_seconds']:.1f} | {r['point_seconds_sum']:.1f} | "
                     f"{r['compile_seconds_sum']:.2f} | {r['load_average_before']:.2f} / "
                     f"{r['load_average_after']:.2f} |")
    ratio = report["two_over_one"]
    summary = (f"Speedup {report['speedup']:.2f}x: 2 workers took {100 * ratio:.0f}% of the "
               f"1-worker time (target < {100 * TARGET_RATIO:.0f}%: "
               f"{'met' if report['met'] else 'missed'}); results "
               f"{'identical' if report['identical_results'] else 'DIFFER'} between the runs.")
    baseline = report["runs"][0]["load_average_before"]
    if baseline >= 0.5:
        summary += (f" Other processes were already running when the benchmark started "
                    f"(load average {baseline:.2f}), so the workers shared the CPUs with them.")
    print("\n".join(lines))
    print(summary)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(
        f"# Sweep benchmark\n\n{report['date']}, commit {report['commit']}, Python "
        f"{report['python']}, {report['machine']}, {report['cpus']} CPUs\n\n"
        f"`npusim sweep {report['sweep_file']} --workers N` (whole command, fresh output):\n\n"
        + "\n".join(lines) + "\n\n" + summary + "\n\n'sum of point s' is the wall time of "
        "every point added up (what one worker must do); 'sum of compile s' what the points "
        "spent loading kernels (from the disk cache, once per worker process). The load "
        "average (1 minute) before the 2-worker run still counts the 1-worker run that just "
        "ended; the one before the first run is the machine's own load.\n")
    print(f"wrote {out} and {out.with_suffix('.md')}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 points instead of 64")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"default {DEFAULT_OUT.relative_to(REPO)} (--quick: sweep_quick.json)")
    ap.add_argument("--render", type=Path, metavar="JSON",
                    help="rewrite the report from a JSON this script wrote; run nothing")
    args = ap.parse_args()
    if args.out is None:
        args.out = DEFAULT_OUT.with_name("sweep_quick.json") if args.quick else DEFAULT_OUT
    report = json.loads(args.render.read_text()) if args.render else measure(args.quick)
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
