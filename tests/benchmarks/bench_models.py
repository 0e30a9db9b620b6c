"""Whole-model benchmark (issue 4): ResNet-18, ResNet-50 (batch 1 and 8), MobileNetV2 and
BERT-base at sequence 512 on the `server` and `mobile` presets.

Each case runs in its own process (so its peak memory is its own): one warm-up simulation
loads the cached kernels, then the timed one. Prints simulated cycles, wall seconds of the
simulation (lowering and kernel separately), simulated cycles per second and peak resident
memory, and writes results/benchmarks/models.{json,md}. Each case is run again in fast
fidelity (issue 17; ``--no-fast`` leaves that out): the fast columns give its cycles, their
error against full and the speed-up on CPU seconds (``fast_columns.py``).

    python tests/benchmarks/bench_models.py [--quick] [--no-fast] [--out FILE]

For scale: ONNXim needs about 15 s on this machine for ResNet-18 on its TPUv4i-like config;
npusim should do ResNet-50 on `server` in under 5 s once compiled, in under 2 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from fast_columns import FAST_HEAD, add_fast_run, fast_cells, fill_kernel_cache

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "results" / "benchmarks" / "models.json"

CASES = [
    ("resnet50", {"batch": 1}, "server"),
    ("resnet50", {"batch": 8}, "server"),
    ("resnet18", {"batch": 1}, "server"),
    ("mobilenetv2", {"batch": 1}, "server"),
    ("bert_base", {"batch": 1, "seq": 512}, "server"),
    ("resnet50", {"batch": 1}, "mobile"),
    ("resnet50", {"batch": 8}, "mobile"),
    ("resnet18", {"batch": 1}, "mobile"),
    ("mobilenetv2", {"batch": 1}, "mobile"),
    ("bert_base", {"batch": 1, "seq": 512}, "mobile"),
]
QUICK = CASES[:1]

CHILD = r"""
import json, resource, sys, time
import npusim
from npusim.config import load_config
from npusim.engine import run_program
from npusim.frontend import load_model
from npusim.lowering import lower_graph
from npusim.results import collect
model, dims, preset = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
fidelity = [f"fidelity={sys.argv[4]}"]
npusim.simulate("tiny_cnn", preset, overrides=fidelity)  # load the cached kernels
cfg = load_config(preset, fidelity)
t0, c0 = time.perf_counter(), time.process_time()
graph = load_model(model, dims)
prog = lower_graph(graph, cfg)
t1 = time.perf_counter()
raw = run_program(prog, cfg)
t2 = time.perf_counter()
r = collect(model, cfg, prog, raw)
cpu = time.process_time() - c0
print(json.dumps({
    "total_cycles": r.total_cycles, "layers": len(r.layers), "tiles": int(prog.n_tiles),
    "load_and_lower_seconds": t1 - t0, "kernel_seconds": raw.wall_seconds,
    "wall_seconds": t2 - t0, "cpu_seconds": cpu, "event_steps": r.event_steps,
    "dram_requests": sum(c["load_requests"] + c["store_requests"] for c in r.cores),
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "bound": {b: sum(1 for l in r.layers if l["bound"] == b)
              for b in ("systolic", "vector", "memory")},
    "fidelity": r.extra["fidelity"],
}))
"""


def _child(model: str, dims: dict, preset: str, fidelity: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, model, json.dumps(dims), preset,
                          fidelity], capture_output=True, text=True, cwd=REPO)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_case(model: str, dims: dict, preset: str, fast: bool) -> dict:
    row = {"model": model, "dims": dims, "config": preset, **_child(model, dims, preset, "full")}
    if "error" in row:
        return row
    row["cycles_per_second"] = row["total_cycles"] / row["kernel_seconds"]
    row.pop("fidelity")
    if fast:
        add_fast_run(row, _child(model, dims, preset, "fast"))
    return row


def table(rows: list[dict]) -> list[str]:
    head = ("model", "dims", "config", "sim cycles", "lower s", "kernel s", "wall s",
            "cycles/s", "DRAM req/s", "peak MiB", "layers bound s/v/m", "CPU s", *FAST_HEAD)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        dims = " ".join(f"{k}={v}" for k, v in r["dims"].items())
        if "error" in r:
            lines.append(f"| {r['model']} | {dims} | {r['config']} | error: {r['error']} |")
            continue
        b = r["bound"]
        lines.append(
            f"| {r['model']} | {dims} | {r['config']} | {r['total_cycles']:,} | "
            f"{r['load_and_lower_seconds']:.2f} | {r['kernel_seconds']:.2f} | "
            f"{r['wall_seconds']:.2f} | {r['cycles_per_second'] / 1e6:.2f} M | "
            f"{r['dram_requests'] / r['kernel_seconds'] / 1e3:.0f} k | {r['peak_rss_mib']:.0f} | "
            f"{b['systolic']}/{b['vector']}/{b['memory']} | {r['cpu_seconds']:.2f} | "
            + " | ".join(fast_cells(r)) + " |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="ResNet-50 batch 1 on server only")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--no-fast", action="store_true", help="full fidelity only")
    args = ap.parse_args()
    if not args.no_fast:
        fill_kernel_cache()
    rows = []
    load_before = os.getloadavg()
    for model, dims, preset in (QUICK if args.quick else CASES):
        print(f"running {model} {dims} on {preset} ...", flush=True)
        rows.append(run_case(model, dims, preset, not args.no_fast))
    lines = table(rows)
    print("\n".join(lines))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=REPO).stdout.strip()
    load = (load_before[0], os.getloadavg()[0])
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": commit,
              "python": platform.python_version(), "machine": platform.platform(),
              "cpus": os.cpu_count(), "load_average_1min": load, "cases": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(
        f"# Whole-model benchmark\n\n{report['date']}, commit {commit}, Python "
        f"{report['python']}, {report['machine']}; {os.cpu_count()} CPUs, 1-minute load "
        f"average {load[0]:.1f} at the start and {load[1]:.1f} at the end (other jobs slow "
        f"the wall times, never the cycles)\n\n" + "\n".join(lines) + "\n\n"
        "CPU s: the process's own CPU seconds for loading, lowering, running and collecting. "
        "Fast columns: the same case in fast fidelity, its cycles' error against full and "
        "the speed-up on CPU seconds (results/benchmarks/fast.md has the per-layer errors "
        "and what was extrapolated).\n\n"
        "Targets: ResNet-50 on `server` under 5 s once compiled and under 2 GB "
        "(ONNXim: ~15 s for ResNet-18 on its TPUv4i-like config on this machine).\n")
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
