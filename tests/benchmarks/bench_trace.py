"""Trace benchmark (issue 6): ResNet-50 on `server` with and without `--trace`.

One warm-up loads the cached kernels, then the untraced and the traced run alternate
(``--repeats`` each; the minimum counts, as the machine may be shared). Wall time is the
whole `npusim.simulate` call: load, lower, simulate and, traced, building and writing the
HDF5 file. Prints simulated cycles, wall seconds, simulated cycles per second and trace
size, the load average while measuring, and writes results/benchmarks/trace.{json,md}.

    python tests/benchmarks/bench_trace.py [--repeats N] [--model M] [--config C]

Targets: the trace of ResNet-50 on `server` with default binning under 50 MB, and the
traced run under 2x the untraced wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "results" / "benchmarks" / "trace.json"


def measure(model: str, preset: str, repeats: int, dims: dict[str, int]) -> dict:
    import npusim
    from npusim.trace import TraceOptions

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.h5"
        npusim.simulate("tiny_cnn", preset, trace=TraceOptions(path))  # load cached kernels
        load_before = os.getloadavg()
        runs = {"untraced": [], "traced": []}
        for _ in range(repeats):
            for kind in runs:
                t0 = time.perf_counter()
                r = npusim.simulate(model, preset, dims=dims,
                                    trace=path if kind == "traced" else None)
                runs[kind].append((time.perf_counter() - t0, r))
        load_after = os.getloadavg()
        size = path.stat().st_size
        traced = runs["traced"][0][1]
        bins, width = traced.trace.sizes["time"], traced.trace.attrs["bin_cycles"]
        commands = traced.trace.sizes["command"]
    cycles = {k: [r.total_cycles for _, r in v] for k, v in runs.items()}
    assert len({c for v in cycles.values() for c in v}) == 1, cycles  # tracing changes nothing
    wall = {k: min(w for w, _ in v) for k, v in runs.items()}
    kernel = {k: min(r.wall_seconds for _, r in v) for k, v in runs.items()}
    total = cycles["untraced"][0]
    return {
        "model": model, "dims": dims, "config": preset, "simulated_cycles": total, "repeats": repeats,
        "untraced_wall_seconds": wall["untraced"], "traced_wall_seconds": wall["traced"],
        "untraced_kernel_seconds": kernel["untraced"], "traced_kernel_seconds": kernel["traced"],
        "all_wall_seconds": {k: [round(w, 3) for w, _ in v] for k, v in runs.items()},
        "overhead": wall["traced"] / wall["untraced"],
        "untraced_cycles_per_second": total / wall["untraced"],
        "traced_cycles_per_second": total / wall["traced"],
        "trace_bytes": size, "trace_bins": bins, "bin_cycles": width,
        "window_commands": commands,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def to_markdown(r: dict) -> str:
    mb = r["trace_bytes"] / 1e6
    return "\n".join([
        "# Trace benchmark",
        "",
        f"`python tests/benchmarks/bench_trace.py` ({r['date']}, {r['cpus']} CPUs, Python "
        f"{r['python']}; best of {r['repeats']} alternating runs; wall = the whole "
        f"`npusim.simulate` call incl. load, lowering and, traced, writing the file).",
        "",
        "| model | dims | config | simulated cycles | untraced wall (s) | traced wall (s) | overhead "
        "| untraced cycles/s | traced cycles/s | trace size | bins |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {r['model']} | {' '.join(f'{k}={v}' for k, v in r['dims'].items())} | "
        f"{r['config']} | {r['simulated_cycles']:,} | "
        f"{r['untraced_wall_seconds']:.2f} | {r['traced_wall_seconds']:.2f} | "
        f"{r['overhead']:.2f}x | {r['untraced_cycles_per_second'] / 1e3:,.0f} k | "
        f"{r['traced_cycles_per_second'] / 1e3:,.0f} k | {mb:.1f} MB | "
        f"{r['trace_bins']:,} x {r['bin_cycles']:,} cycles |",
        "",
        f"Kernel time alone: untraced {r['untraced_kernel_seconds']:.2f} s, traced "
        f"{r['traced_kernel_seconds']:.2f} s. Default window (core cycles 0:10000): "
        f"{r['window_commands']:,} DRAM commands. All runs (s): untraced "
        f"{r['all_wall_seconds']['untraced']}, traced {r['all_wall_seconds']['traced']}.",
        "",
        f"Load average while measuring: {r['load_average_before']} before, "
        f"{r['load_average_after']} after (1, 5, 15 min) — the machine was shared with other "
        f"work, so absolute times are pessimistic; the ratio is what the targets are about.",
        "",
        f"Targets: trace under 50 MB ({'met' if mb < 50 else 'MISSED'}), traced under 2x "
        f"untraced wall time ({'met' if r['overhead'] < 2 else 'MISSED'}).",
        "",
    ])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--config", default="server")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    r = measure(args.model, args.config, args.repeats, {"batch": args.batch})
    print(f"{r['model']} on {r['config']}: {r['simulated_cycles']:,} cycles")
    for kind in ("untraced", "traced"):
        print(f"  {kind:9s} {r[kind + '_wall_seconds']:6.2f} s  "
              f"{r[kind + '_cycles_per_second'] / 1e3:8,.0f} k cycles/s")
    print(f"  overhead  {r['overhead']:.2f}x   trace {r['trace_bytes'] / 1e6:.1f} MB "
          f"({r['trace_bins']} bins of {r['bin_cycles']} cycles)   load {r['load_average_after']}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(r, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(to_markdown(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
