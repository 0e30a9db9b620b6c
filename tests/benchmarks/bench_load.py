"""Load + shape benchmark (issue 14): how long the front end takes to read a real export,
bind its dims, fold its shape subgraphs and give every tensor a static shape.

Cases (graph-only files of the model zoo, ``tests/data/zoo/bench/``, dims from its
manifest): the 32-layer Llama-3-8B-sized decoder with a KV cache through the dynamo
exporter, and the 12-layer BERT-base after ONNX Runtime's transformer optimizer. Target:
each under 10 s. Each case runs in a fresh process (nothing cached): the timed part is
``load_graph`` alone (reading the protobuf without weight data, opset conversion, dim
binding, folding and shaping); importing npusim and lowering onto ``server`` are reported
beside it. Writes results/benchmarks/load.{json,md}.

    python tests/benchmarks/bench_load.py [--dir FOLDER] [--repeat N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DIR = REPO / "tests" / "data" / "zoo" / "bench"
DEFAULT_OUT = REPO / "results" / "benchmarks" / "load.json"
CASES = ["llama3_8b-dynamo.onnx", "bert_base-ts-ort.onnx"]
TARGET_SECONDS = 10.0

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import npusim
from npusim.config import load_config
from npusim.frontend import load_graph
from npusim.lowering import lower_graph, unsupported_ops
t1 = time.perf_counter()
path, dims, lower = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "1"
g = load_graph(path, dims)
t2 = time.perf_counter()
out = {"import_seconds": t1 - t0, "load_shape_seconds": t2 - t1, "nodes": len(g.nodes),
       "folded": g.folded, "tensors": len(g.tensors), "unshaped": len(g.unshaped),
       "unsupported": sorted(unsupported_ops(g))}
if lower:
    prog = lower_graph(g, load_config("server"))
    out["lower_seconds"] = time.perf_counter() - t2
    out["macs"] = sum(int(l.macs) for l in prog.layers)
    out["tiles"] = int(prog.n_tiles)
out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def run_case(path: Path, dims: dict, lower: bool) -> dict:
    res = subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps(dims),
                          "1" if lower else "0"], capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(res.stderr.strip().splitlines()[-1] if res.stderr else "failed")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="folder of the bench files")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    manifest = {e["file"]: e for e in json.loads((args.dir / "manifest.json").read_text())["files"]}
    rows, failed = [], False
    for name in CASES:
        entry = manifest[name]
        path = args.dir / name
        row = {"case": name, "model": entry["description"], "dims": entry["dims"],
               "file_bytes": path.stat().st_size, "macs_manifest": entry["macs"]}
        try:
            runs = [run_case(path, entry["dims"], lower=(i == 0)) for i in range(args.repeat)]
        except RuntimeError as e:
            row["error"] = str(e)
            failed = True
            rows.append(row)
            print(f"{name}: FAILED {e}")
            continue
        times = [r["load_shape_seconds"] for r in runs]
        row.update({k: runs[0][k] for k in ("nodes", "folded", "tensors", "unshaped",
                                            "unsupported", "lower_seconds", "macs", "tiles")})
        row.update(load_shape_best=min(times), load_shape_median=statistics.median(times),
                   import_seconds=min(r["import_seconds"] for r in runs),
                   peak_rss_mib=max(r["peak_rss_mib"] for r in runs),
                   target_seconds=TARGET_SECONDS, met=max(times) < TARGET_SECONDS)
        rows.append(row)
        print(f"{name}: load+shape best {row['load_shape_best']:.2f} s, median "
              f"{row['load_shape_median']:.2f} s ({row['nodes']} nodes after folding "
              f"{row['folded']}), import {row['import_seconds']:.2f} s, lowering on server "
              f"{row['lower_seconds']:.1f} s, MACs {row['macs']:,} (manifest "
              f"{entry['macs']:,}), target < {TARGET_SECONDS:.0f} s: "
              f"{'met' if row['met'] else 'MISSED'}")
    folder = args.dir.resolve()
    folder = folder.relative_to(REPO) if folder.is_relative_to(REPO) else folder
    record = {"benchmark": "load + shape (issue 14)", "date": time.strftime("%Y-%m-%d"),
              "machine": f"{platform.machine()}, {platform.python_version()}",
              "repeat": args.repeat, "files": str(folder), "cases": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    md = ["# Load + shape benchmark", "",
          f"{record['date']}, {record['machine']}, best of {args.repeat} fresh processes, files "
          f"from `{folder}`.", "",
          "| case | nodes (folded) | load + shape best / median | import | lowering (server) | "
          "MACs = manifest | target < 10 s |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            md.append(f"| {r['case']} | error: {r['error']} | | | | | |")
            continue
        md.append(f"| {r['case']} | {r['nodes']} ({r['folded']}) | {r['load_shape_best']:.2f} s"
                  f" / {r['load_shape_median']:.2f} s | {r['import_seconds']:.2f} s | "
                  f"{r['lower_seconds']:.1f} s | {r['macs'] == r['macs_manifest']} | "
                  f"{'met' if r['met'] else 'missed'} |")
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
