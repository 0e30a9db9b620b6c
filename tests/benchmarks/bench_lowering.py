"""Lowering benchmark: CPU seconds of ``lower_graph`` per case, and a digest of the Program it
builds, so two versions of the lowering can be compared for speed and for identity.

Cases: every bundled model on ``mobile`` and ``server`` (symbolic dims: batch 1, every other
128, as ``bench_fast.py --cases bundled``), ResNet-50 batch 8 on ``server``, and every point
of the ResNet-18 sweep (``configs/sweeps/resnet18_grid.toml``). The model is loaded before
the clock starts; each lowering runs ``--repeat`` times on a fresh load, with the lowering's
memo caches emptied first (each is timed as a process's first), and the least CPU time is
kept (the machine may be shared). The digest covers every Program table, the layer
records (names, shapes, mappings, fused nodes) and the warnings.

    python tests/benchmarks/bench_lowering.py --out /tmp/lower_after.json
    python tests/benchmarks/bench_lowering.py --compare /tmp/lower_before.json /tmp/lower_after.json \
        --md results/benchmarks/lowering.md

It uses only ``load_model``, ``lower_graph`` and the sweep spec, so the same script runs on
the code before and after a change. ``--compare`` exits 1 if any digest differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "configs" / "sweeps" / "resnet18_grid.toml"


def program_digest(prog) -> str:
    """SHA-256 over the Program's tables, layer records and warnings."""
    h = hashlib.sha256()
    for name in ("inst", "tile", "group", "layer", "layer_succ", "release_order"):
        a = np.ascontiguousarray(getattr(prog, name))
        h.update(f"{name}{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    h.update(repr([vars(info) for info in prog.layers]).encode())
    h.update(repr((prog.max_template_len, prog.warnings)).encode())
    return h.hexdigest()[:20]


def _cases() -> list[tuple[str, str, object, dict | None]]:
    """(name, model, config name or NpuConfig, dims)."""
    from bench_fast import bundled_models  # beside this file

    out = []
    for path, dims in bundled_models():
        for config in ("mobile", "server"):
            out.append((f"{path.stem}@{config}", path.stem, config, dims or None))
    out.append(("resnet50_b8@server", "resnet50", "server", {"batch": 8}))
    from npusim.sweep.spec import load_sweep

    for p in load_sweep(SWEEP).points():
        label = ",".join(f"{k}={v}" for k, v in p.setting.items())
        out.append((f"sweep[{label}]", p.workload.model, p.config, dict(p.workload.dims)))
    return out


def _forget_memos() -> None:
    """Empty the lowering's memo caches (``functools.lru_cache``), if it has any, so each
    lowering is timed as a process's first: what one ``npusim simulate`` pays."""
    from npusim import lowering

    for mod in list(vars(lowering).values()) + [lowering]:
        for obj in vars(mod).values() if hasattr(mod, "__dict__") else ():
            if callable(getattr(obj, "cache_clear", None)):
                obj.cache_clear()


def run(repeat: int, only: str | None) -> list[dict]:
    from npusim.config import NpuConfig, load_config
    from npusim.frontend import load_model, resolve_model_path, with_example_dims
    from npusim.lowering import lower_graph

    rows = []
    for name, model, config, dims in _cases():
        if only and only not in name:
            continue
        cfg = config if isinstance(config, NpuConfig) else load_config(config)
        path = resolve_model_path(model)
        full_dims, _ = with_example_dims(path, dims)
        best, digest = float("inf"), None
        for _ in range(repeat):
            graph = load_model(path, full_dims)  # lowering adds scratch tensors: load afresh
            _forget_memos()
            t0 = time.process_time()
            prog = lower_graph(graph, cfg)
            best = min(best, time.process_time() - t0)
            d = program_digest(prog)
            assert digest in (None, d), f"{name}: two lowerings differ"
            digest = d
        rows.append({"case": name, "lower_cpu_seconds": best, "digest": digest,
                     "instructions": int(prog.inst.shape[0]), "tiles": int(prog.tile.shape[0])})
        print(f"{name:70s} {best:8.4f} s  {digest}", flush=True)
    return rows


def compare(a_path: str, b_path: str, md: str | None = None) -> int:
    """Per case: identical digest or not, and the CPU seconds of both; with ``md``, the
    table is also written there as Markdown."""
    runs = [json.loads(Path(p).read_text()) for p in (a_path, b_path)]
    a, b = ({r["case"]: r for r in run["cases"]} for run in runs)
    names = [n for n in a if n in b]
    differ = [n for n in names if a[n]["digest"] != b[n]["digest"]]
    lines = []
    for n in names:
        ta, tb = a[n]["lower_cpu_seconds"], b[n]["lower_cpu_seconds"]
        lines.append((n, "DIFFERENT" if n in differ else "identical", ta, tb, ta / tb))
        print(f"{n:70s} {lines[-1][1]}  {ta:7.4f} -> {tb:7.4f} s ({ta / tb:5.1f}x)")
    ta = sum(a[n]["lower_cpu_seconds"] for n in names)
    tb = sum(b[n]["lower_cpu_seconds"] for n in names)
    total = (f"{len(names)} cases in both, {len(differ)} with a different Program; "
             f"lowering {ta:.3f} -> {tb:.3f} CPU s in total")
    print(total)
    if md:
        head = [f"# Lowering: CPU seconds and Program identity, {runs[0]['commit']} -> "
                f"{runs[1]['commit']}", "",
                f"Generated by `python tests/benchmarks/bench_lowering.py --compare` from runs "
                f"at {runs[0]['date']} and {runs[1]['date']} (CPU seconds of `lower_graph`, "
                "least of 3, memo caches emptied: a process's first lowering). " + total
                + ".", "", "| case | Program | before CPU s | after CPU s | speed-up |",
                "|---|---|---:|---:|---:|"]
        Path(md).write_text("\n".join(head + [f"| {n} | {same} | {x:.4f} | {y:.4f} | "
                                               f"{r:.1f}x |" for n, same, x, y, r in lines])
                            + "\n")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the cases as JSON here")
    ap.add_argument("--repeat", type=int, default=3, help="lowerings per case (least CPU kept)")
    ap.add_argument("--only", help="cases whose name contains this")
    ap.add_argument("--label", help="name of the code measured (default: git HEAD)")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--md", help="with --compare: write the table here as Markdown")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare, md=args.md)
    rows = run(args.repeat, args.only)
    if args.out:
        commit = args.label or subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                              cwd=REPO, capture_output=True,
                                              text=True).stdout.strip()
        Path(args.out).write_text(json.dumps({"commit": commit, "date": time.strftime(
            "%Y-%m-%d %H:%M UTC", time.gmtime()), "cases": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
