"""Warm speed of two npusim versions side by side: the engine, DRAM replay and a Llama
proxy, each case run in alternation by both versions' interpreters.

On a shared machine a single timing says little: other processes take the CPUs for a
while, then leave. So each version runs each case in its own child process, the versions
alternate (A, B, A, B, ...), and every run reports both its kernel wall time and the
process's CPU time over the same span; the best of each is compared. The simulated cycles
of both versions must agree (a speed comparison of different simulations means nothing).

    python tests/benchmarks/compare_speed.py --a /path/to/old/.venv/bin/python \\
        --b .venv/bin/python --rounds 3 --out results/benchmarks/compare_speed.json

Cases: bench_engine's MatMul 512x768x768 on ``mobile`` and the 1024 MatMul on ``server``;
bench_dram's random replays on one DDR4 channel and 16 HBM2 channels; and the 2-layer
Llama-3-8B MHA step (batch 128, context 1023) on ``server``, the quick proxy of the
serving benchmark's Llama case. ``--cases`` picks some.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time, importlib.util
from pathlib import Path
case, repeats = sys.argv[1], int(sys.argv[2])
bench = Path(sys.argv[3])

def module(name):
    spec = importlib.util.spec_from_file_location(name, bench / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def engine(model, preset):
    from npusim.config import load_config
    from npusim.engine import run_program
    from npusim.frontend import load_model, resolve_model_path
    from npusim.lowering import lower_graph
    cfg = load_config(preset)
    prog = lower_graph(load_model(resolve_model_path(model)), cfg)
    run_program(prog, cfg)  # warm-up: loads the cached kernels
    def once():
        raw = run_program(prog, cfg)
        from npusim.kernels import state as ks
        return raw.wall_seconds, int(-(-int(raw.state.glob[ks.G_END]) // raw.timebase.core_period))
    return once

def dram(name):
    from npusim.config import load_config
    from npusim.dram.replay import replay_requests
    bd = module("bench_dram")
    spec = next(c for c in bd.cases(False) if c["case"] == name)
    cfg = load_config(*spec["config"])
    addrs, writes = bd.random_traffic(spec["requests"], cfg.dma.request_bytes)
    replay_requests(cfg, addrs[:20000], writes[:20000])
    def once():
        stats, _ = replay_requests(cfg, addrs, writes)
        return stats["wall_seconds"], stats["dram_cycles"]
    return once

def llama():
    import tempfile
    import npusim
    from npusim.simulation import simulate_requests
    from npusim.workload import read_requests
    npusim.simulate("tiny_cnn", "server")
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "llama.json"
        f.write_text(json.dumps({"requests": [
            {"model": "llama3_8b", "context": 1023, "prompt": 1, "generate": 1, "count": 128,
             "llm": {"kv_heads": 32, "layers": 2}}]}))
        reqs = read_requests(f, 1000)
    def once():
        r = simulate_requests(reqs, "server", overrides=["scheduler.max_batch=128"])
        return r.wall_seconds, r.total_cycles
    return once

once = {"engine_matmul_512_mobile": lambda: engine("matmul_512x768x768", "mobile"),
        "engine_matmul_1024_server": lambda: engine("matmul_1024", "server"),
        "dram_ddr4_random": lambda: dram("ddr4_random"),
        "dram_hbm2_16ch_random": lambda: dram("hbm2_16ch_random"),
        "llama_mha_2layers": llama}[case]()
rows = []
for _ in range(repeats):
    c0 = time.process_time()
    wall, cycles = once()
    rows.append({"kernel_seconds": wall, "cpu_seconds": time.process_time() - c0,
                 "cycles": cycles})
print(json.dumps(rows))
"""

CASES = ("engine_matmul_512_mobile", "engine_matmul_1024_server", "dram_ddr4_random",
         "dram_hbm2_16ch_random", "llama_mha_2layers")
REPEATS = {"llama_mha_2layers": 1}


def run_child(python: str, case: str, repeats: int) -> list[dict]:
    # run outside any checkout: ``python -c`` puts the working directory first on sys.path,
    # which would import that checkout's npusim instead of the interpreter's own
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run([python, "-c", CHILD, case, str(repeats),
                              str(Path(__file__).resolve().parent)],
                             capture_output=True, text=True, cwd=cwd)
    if out.returncode != 0:
        raise RuntimeError(f"{python} {case}: {out.stderr.strip()[-1500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="python of version A (the reference)")
    ap.add_argument("--b", required=True, help="python of version B")
    ap.add_argument("--rounds", type=int, default=3, help="alternations per case")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    result = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "a": args.a, "b": args.b, "rounds": args.rounds,
              "load_before": os.getloadavg()[0], "cases": {}}
    print("| case | cycles | A kernel s | B kernel s | B/A kernel | A CPU s | B CPU s | B/A CPU |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    pythons = {"a": os.path.abspath(args.a), "b": os.path.abspath(args.b)}
    for case in cases:
        runs = {"a": [], "b": []}
        reps = REPEATS.get(case, 3)
        for _ in range(args.rounds):
            for v in ("a", "b"):
                runs[v] += run_child(pythons[v], case, reps)
        cycles = {r["cycles"] for v in runs for r in runs[v]}
        best = {v: {k: min(r[k] for r in runs[v]) for k in ("kernel_seconds", "cpu_seconds")}
                for v in runs}
        result["cases"][case] = {"cycles": sorted(cycles), "runs": runs, "best": best}
        ka, kb = best["a"]["kernel_seconds"], best["b"]["kernel_seconds"]
        ca, cb = best["a"]["cpu_seconds"], best["b"]["cpu_seconds"]
        same = "" if len(cycles) == 1 else " (CYCLES DIFFER)"
        print(f"| {case} | {min(cycles):,}{same} | {ka:.3f} | {kb:.3f} | {kb / ka:.3f} | "
              f"{ca:.3f} | {cb:.3f} | {cb / ca:.3f} |", flush=True)
    result["load_after"] = os.getloadavg()[0]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
