"""Census of every benchmark case's simulated outcome, to show that a change moved nothing.

A refactoring of the engine must leave every simulated number as it was. This script runs
each case of the benchmark scripts once (bench_engine, bench_dram, bench_models,
bench_serving, bench_trace, bench_sweep, a reduced case_interference, and the 2-layer
Llama-3-8B MHA step used as a quick serving proxy) and records what the simulation
produced: total cycles, event steps, per-layer end cycles, memory and DRAM statistics, the
first DRAM commands issued and, for the traced case, the trace dataset, each as numbers or
as a SHA-256 digest; plus the wall time of each case (one run, so only a rough guide:
the benchmark scripts measure speed).

    python tests/benchmarks/census.py --out results/refactor/census_before.json
    python tests/benchmarks/census.py --out /tmp/after.json --cases engine,dram
    python tests/benchmarks/census.py --compare results/refactor/census_before.json /tmp/after.json

``--compare`` prints, per case, whether every recorded value is identical and the wall-time
ratio, and exits 1 if any value differs. It reads only public entry points
(``npusim.simulate``, ``simulate_requests``, ``run_program``, ``replay_requests``,
``run_sweep``), so the same script runs on the code before and after a change.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

REPO = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
LOGGED_COMMANDS = 200_000  # DRAM commands of each case whose log is compared
GROUPS = ("engine", "dram", "models", "serving", "trace", "sweep", "interference")


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _command_log(state) -> np.ndarray:
    """The logged DRAM commands of a final state, wherever this version keeps them."""
    from npusim.kernels import state as ks

    mem = getattr(state, "mem", state)
    log = mem.cmd_log
    if hasattr(ks, "MC_LOG_N"):
        n = int(mem.ctl[ks.MC_LOG_N])
    else:
        n = int(state.glob[ks.G_LOG_N])
    return log[:, :n]


def _result_record(r) -> dict[str, Any]:
    """What a Result says about the simulation (no wall times)."""
    mem = {k: v for k, v in r.memory.items() if k != "channels"}
    channels = r.memory.get("channels", [])
    return {
        "total_cycles": r.total_cycles,
        "event_steps": r.event_steps,
        "layers": len(r.layers),
        "layer_ends": digest([l["end_cycle"] for l in r.layers],
                             [l["start_cycle"] for l in r.layers]),
        "cores": digest([[c[k] for k in sorted(c) if not isinstance(c[k], float)]
                         for c in r.cores]),
        "memory": json.dumps(mem, sort_keys=True, default=str),
        "channels": hashlib.sha256(json.dumps(channels, sort_keys=True).encode()).hexdigest()[:16],
        "requests": hashlib.sha256(json.dumps(r.requests, sort_keys=True, default=str)
                                   .encode()).hexdigest()[:16],
    }


def _timed(fn: Callable[[], dict]) -> dict:
    t = time.perf_counter()
    row = fn()
    row["wall_seconds"] = time.perf_counter() - t
    return row


# --------------------------------------------------------------------------- groups


def engine_cases(tmp: Path) -> list[tuple[str, Callable[[], dict]]]:
    """bench_engine's cases, each with its DRAM command log."""
    from npusim.config import load_config
    from npusim.engine import run_program
    from npusim.frontend import load_model, resolve_model_path
    from npusim.frontend.optimize import prepared_model
    from npusim.lowering import lower_graph
    from npusim.lowering.mapping import parse_mapping_file
    from npusim.results import collect

    gc = _module(REPO / "tests" / "gemmini_cases.py", "gemmini_cases")
    ref = gc.load_reference()
    specs = [("matmul_512x768x768", "matmul_512x768x768", "mobile", [], None),
             ("matmul_1024", "matmul_1024", "server", [], None),
             ("conv_resnet18_layer1", "conv_resnet18_layer1", "mobile", [], None),
             ("tiny_cnn", "tiny_cnn", "mobile", [], None)]
    for case in ref["cases"]:
        model_path, mapping_path = gc.write_case(case, tmp)
        specs.append((f"gemmini/{case['name']}", str(model_path), "gemmini_validation",
                      gc.case_overrides(ref, case), str(mapping_path)))

    def one(model, preset, overrides, mapping):
        cfg = load_config(preset, list(overrides))
        with prepared_model(resolve_model_path(model), "none", None) as (ready, dims):
            graph = load_model(ready, dims)
        prog = lower_graph(graph, cfg, parse_mapping_file(mapping) if mapping else None)
        raw = run_program(prog, cfg, log_commands=LOGGED_COMMANDS)
        rec = _result_record(collect(Path(model).stem, cfg, prog, raw))
        rec["kernel_seconds"] = raw.wall_seconds
        if cfg.memory.type == "dram":
            rec["dram_commands"] = digest(_command_log(raw.state))
        return rec

    return [(name, lambda a=(m, p, o, mp): one(*a)) for name, m, p, o, mp in specs]


def dram_cases(tmp: Path) -> list[tuple[str, Callable[[], dict]]]:
    """bench_dram's replays, full size, with the first DRAM commands."""
    from npusim.config import load_config
    from npusim.dram.replay import replay_requests

    bd = _module(BENCH / "bench_dram.py", "bench_dram")

    def one(case):
        cfg = load_config(*case["config"])
        req = cfg.dma.request_bytes
        if case["traffic"] == "random":
            addrs, writes = bd.random_traffic(case["requests"], req)
        else:
            addrs, writes = bd.sequential_reads(case["requests"], req)
        stats, st = replay_requests(cfg, addrs, writes, log_commands=LOGGED_COMMANDS)
        rec = {k: v for k, v in stats.items()
               if k not in ("wall_seconds", "compile_seconds", "requests_per_second",
                            "channels")}
        rec["channels"] = hashlib.sha256(json.dumps(stats["channels"], sort_keys=True)
                                         .encode()).hexdigest()[:16]
        rec["dram_commands"] = digest(_command_log(st))
        rec["kernel_seconds"] = stats["wall_seconds"]
        return rec

    return [(f"dram/{c['case']}", lambda c=c: one(c)) for c in bd.cases(False)]


def model_cases(tmp: Path) -> list[tuple[str, Callable[[], dict]]]:
    import npusim

    bm = _module(BENCH / "bench_models.py", "bench_models")

    def one(model, dims, preset):
        r = npusim.simulate(model, preset, dims=dims)
        return {**_result_record(r), "kernel_seconds": r.wall_seconds}

    return [(f"models/{m}/{'/'.join(f'{k}={v}' for k, v in d.items())}/{p}",
             lambda a=(m, d, p): one(*a)) for m, d, p in bm.CASES]


def serving_cases(tmp: Path) -> list[tuple[str, Callable[[], dict]]]:
    from npusim.simulation import simulate_requests
    from npusim.workload import read_requests

    bs = _module(BENCH / "bench_serving.py", "bench_serving")
    cases = dict(bs.CASES)
    cases["llama_mha_2layers"] = ("2-layer Llama-3-8B MHA step (proxy)", [
        {"model": "llama3_8b", "context": 1023, "prompt": 1, "generate": 1, "count": 128,
         "llm": {"kv_heads": 32, "layers": 2}}])

    def one(name):
        f = tmp / f"{name}.json"
        f.write_text(json.dumps({"requests": cases[name][1]}))
        r = simulate_requests(read_requests(f, 1000), "server",
                              overrides=["scheduler.max_batch=128"])
        return {**_result_record(r), "kernel_seconds": r.wall_seconds}

    order = ["llama_mha_2layers", *bs.CASES]
    return [(f"serving/{n}", lambda n=n: one(n)) for n in order]


def trace_cases(tmp: Path) -> list[tuple[str, Callable[[], dict]]]:
    import npusim

    def one():
        r = npusim.simulate("resnet50", "server", dims={"batch": 1}, trace=tmp / "r50.h5")
        ds = r.trace
        rec = _result_record(r)
        rec["trace"] = {name: digest(ds[name].values) for name in sorted(ds.data_vars)}
        rec["kernel_seconds"] = r.wall_seconds
        return rec

    return [("trace/resnet50_server", one)]


def sweep_cases(tmp: Path) -> list[tuple[str, Callable[[], dict]]]:
    from npusim.sweep import run_sweep

    def one():
        ds = run_sweep(REPO / "configs" / "sweeps" / "resnet18_grid.toml", tmp / "grid.h5",
                       workers=1, reporter=None)
        rec = {"points": int(ds.total_cycles.size),
               "total_cycles": digest(ds.total_cycles.values)}
        for name in sorted(ds.data_vars):
            if ds[name].dtype.kind in "iu":
                rec[name] = digest(ds[name].values)
        return rec

    return [("sweep/resnet18_grid", one)]


def interference_cases(tmp: Path) -> list[tuple[str, Callable[[], dict]]]:
    ci = _module(BENCH / "case_interference.py", "case_interference")

    def one():
        rows = ci.interference([1, 8], layers=12, tokens=8, prompt=128, cnn="resnet50")
        return {"rows": [{k: v for k, v in r.items() if k != "wall_seconds"} for r in rows]}

    return [("interference/gpt2_resnet50_b1_b8", one)]


CASES = {"engine": engine_cases, "dram": dram_cases, "models": model_cases,
         "serving": serving_cases, "trace": trace_cases, "sweep": sweep_cases,
         "interference": interference_cases}


# --------------------------------------------------------------------------- records


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(groups: list[str], out: Path) -> None:
    import npusim

    npusim.simulate("tiny_cnn")  # load the cached kernels before anything is timed
    record = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "commit": _git("rev-parse", "--short=12", "HEAD"),
              "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
              "source": str(Path(npusim.__file__).resolve().parent), "cases": {}}
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        for group in groups:
            for name, fn in CASES[group](Path(d)):
                try:
                    row = _timed(fn)
                except Exception as e:  # recorded, so a compare shows it
                    row = {"error": f"{type(e).__name__}: {e}"}
                record["cases"][name] = row
                print(f"{name}: {row.get('total_cycles', row.get('dram_cycles', ''))} "
                      f"({row.get('wall_seconds', 0):.1f} s){' ' + row['error'] if 'error' in row else ''}",
                      flush=True)
                out.write_text(json.dumps(record, indent=1, default=str))


TIMES = ("wall_seconds", "kernel_seconds")


def compare(a_path: Path, b_path: Path) -> int:
    a, b = json.loads(a_path.read_text()), json.loads(b_path.read_text())
    print(f"A: {a_path} (commit {a['commit']}, {a['date']})")
    print(f"B: {b_path} (commit {b['commit']}, {b['date']})\n")
    print("| case | total cycles | identical | kernel s A | kernel s B | B / A |")
    print("|---|---:|---|---:|---:|---:|")
    bad = 0
    for name in a["cases"]:
        ra, rb = a["cases"][name], b["cases"].get(name)
        if rb is None:
            print(f"| {name} | | missing in B | | | |")
            bad += 1
            continue
        keys = sorted((set(ra) | set(rb)) - set(TIMES))
        diff = [k for k in keys if ra.get(k) != rb.get(k)]
        bad += bool(diff)
        ka, kb = ra.get("kernel_seconds"), rb.get("kernel_seconds")
        ratio = f"{kb / ka:.3f}" if ka and kb else ""
        cycles = ra.get("total_cycles", ra.get("dram_cycles", ""))
        cycles = f"{cycles:,}" if isinstance(cycles, int) else cycles
        print(f"| {name} | {cycles} | {'yes' if not diff else 'NO: ' + ', '.join(diff)} | "
              f"{ka or 0:.3f} | {kb or 0:.3f} | {ratio} |")
    print(f"\n{len(a['cases']) - bad} of {len(a['cases'])} cases identical")
    return 1 if bad else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cases", default=",".join(GROUPS),
                    help=f"comma-separated groups: {', '.join(GROUPS)}")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    args = ap.parse_args()
    if args.compare:
        sys.exit(compare(*args.compare))
    if args.out is None:
        ap.error("--out is required unless --compare")
    groups = [g for g in args.cases.split(",") if g]
    unknown = set(groups) - set(GROUPS)
    if unknown:
        ap.error(f"unknown groups {sorted(unknown)}; choose from {', '.join(GROUPS)}")
    run(groups, args.out)


if __name__ == "__main__":
    main()
