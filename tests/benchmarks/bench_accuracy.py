"""Accuracy against Gemmini's RTL: every case of ../shared/validation/gemmini_rtl_public.json
and gemmini_rtl_conv.json (copies in tests/data) and of the check set
tests/data/gemmini_rtl_onnxim_tests.json, simulated with the mapping the RTL ran.

Prints npusim cycles, RTL cycles and the error per case, the wall seconds of each
simulation, the mean and worst error per file, and writes
results/validation/gemmini_rtl.{json,md}.

    python tests/benchmarks/bench_accuracy.py [--out FILE]

``tests/test_validation.py`` checks the same cases stay within 2%.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
DEFAULT_OUT = REPO / "results" / "validation" / "gemmini_rtl.json"

import gemmini_cases as gc  # noqa: E402
import npusim  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    ref = gc.load_reference()
    npusim.simulate("tiny_cnn", "gemmini_validation")  # load the cached kernels
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in ref["cases"]:
            model, mapping = gc.write_case(case, Path(tmp))
            t = time.perf_counter()
            r = npusim.simulate(str(model), "gemmini_validation",
                                overrides=gc.case_overrides(ref, case), mapping=str(mapping))
            wall = time.perf_counter() - t
            rtl = int(case["rtl_cycles"])
            rows.append({"case": case["name"], "file": case["file"], "op": case["op"],
                         "mapping": case["mapping"], "npusim_cycles": r.total_cycles,
                         "rtl_cycles": rtl,
                         "error_percent": 100.0 * (r.total_cycles - rtl) / rtl,
                         "wall_seconds": wall})
            print(f"{case['name']:32s} {r.total_cycles:>11,} {rtl:>11,} "
                  f"{rows[-1]['error_percent']:+6.2f}%  {wall:.2f} s", flush=True)
    worst = max(abs(r["error_percent"]) for r in rows)
    mean = sum(abs(r["error_percent"]) for r in rows) / len(rows)
    per_file = {}
    for name in dict.fromkeys(r["file"] for r in rows):
        errs = [abs(r["error_percent"]) for r in rows if r["file"] == name]
        per_file[name] = {"cases": len(errs), "mean_abs_error_percent": sum(errs) / len(errs),
                          "max_abs_error_percent": max(errs)}
        print(f"{name:34s} {len(errs):2d} cases: mean |error| {per_file[name]['mean_abs_error_percent']:.2f}%, "
              f"worst {per_file[name]['max_abs_error_percent']:.2f}%")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=REPO).stdout.strip()
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": commit,
              "python": platform.python_version(), "core": ref["core"], "cases": rows,
              "per_file": per_file, "mean_abs_error_percent": mean, "max_abs_error_percent": worst}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    lines = ["| layer | file | npusim | RTL | error |", "|---|---|---:|---:|---:|"]
    lines += [f"| {r['case']} | {r['file']} | {r['npusim_cycles']:,} | {r['rtl_cycles']:,} | "
              f"{r['error_percent']:+.2f}% |" for r in rows]
    args.out.with_suffix(".md").write_text(
        f"# Accuracy against Gemmini RTL\n\n{report['date']}, commit {commit}; one 8x8 "
        f"weight-stationary core, int8, 32-byte DMA requests, ideal memory; each case with "
        f"the mapping the RTL ran.\n\n" + "\n".join(lines)
        + "\n\n" + "\n".join(f"{name}: {v['cases']} cases, mean |error| "
                                 f"{v['mean_abs_error_percent']:.2f}%, worst "
                                 f"{v['max_abs_error_percent']:.2f}%." for name, v in per_file.items())
        + f"\n\nAll {len(rows)} cases: mean |error| {mean:.2f}%, worst {worst:.2f}%.\n")
    print(f"mean |error| {mean:.2f}%, worst {worst:.2f}%; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
