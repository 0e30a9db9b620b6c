"""NoC benchmark: npusim's router network beside Booksim2, in one run.

Run from the repository root::

    BOOKSIM=/path/to/booksim python tests/benchmarks/bench_noc.py          # everything
    python tests/benchmarks/bench_noc.py --booksim /path/to/booksim --quick # 4x4 only
    python tests/benchmarks/bench_noc.py                                    # npusim only

Three parts (see tests/benchmarks/README.md):

1. Accuracy. Booksim's mesh parameters (its ``runfiles/meshconfig``: 16 VCs of 8 flits,
   iSLIP, routing 0 / VC allocation 1 / switch allocation 1 / traversal 1, credit delay 2,
   dimension order), written by this script to a config file that both simulators read
   (npusim through ``npusim noc --booksim``), for 4x4 and 8x8 meshes, uniform and transpose
   traffic, packets of 1 and 4 flits: latency and accepted throughput against offered load
   up to saturation, and saturation throughput (the highest stable load, by bisection).
   Booksim's IQ router runs its allocators one iteration whatever ``alloc_iters`` says;
   a second set of cases runs both with ``islip(2)``, the two iterations meshconfig means.
2. Speed: an 8x8 mesh at 0.1 flits/node/cycle, router-cycles per second of each.
3. Compile time of the router kernels, cold (an empty numba cache, in a child process).

Booksim is a reference tool built outside the repository (``/work/ref/booksim2``); give
its binary with ``--booksim`` or ``BOOKSIM``, else its columns are left empty. Speed is
measured and recorded, never asserted; the script exits 0 unless a case fails to run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from bench_engine import machine_info  # run as a script: its folder is on sys.path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "results" / "benchmarks" / "noc.json"
QUICK_OUT = REPO / "results" / "benchmarks" / "noc_quick.json"

MESH_PARAMS = """// Booksim's runfiles/meshconfig parameters
num_vcs = 16;
vc_buf_size = 8;
wait_for_tail_credit = 1;
vc_allocator = {alloc};
sw_allocator = {alloc};
alloc_iters = 2;
credit_delay = 2;
routing_delay = 0;
vc_alloc_delay = 1;
sw_alloc_delay = 1;
st_final_delay = 1;
input_speedup = 1;
output_speedup = 1;
internal_speedup = 1.0;
sim_type = latency;
warmup_periods = 3;
sample_period = {period};
sim_count = 1;
topology = mesh;
k = {k};
n = 2;
routing_function = dor;
packet_size = {flits};
use_read_write = 0;
traffic = {traffic};
injection_rate = 0.1;
"""

RATE_STEP = 0.05          # offered loads swept: 0.01, then 0.05, 0.10, ... flits/node/cycle
ZERO_LOAD_RATE = 0.01
BISECT_RESOLUTION = 0.005  # saturation throughput to within this many flits/node/cycle
HIGH_LATENCY = 1.2        # latency / zero-load latency above which more seeds are run
SPEED_RATE = 0.1
SPEED_PERIOD = 10000       # sample period of the speed runs (longer runs time better)
TARGET_RATE = 3e6          # router-cycles/s
TARGET_SPEEDUP = 10


def write_config(tmp: Path, k: int, traffic: str, flits: int, alloc: str,
                 period: int = 1000, extra: str = "") -> Path:
    """The mesh parameters as a Booksim config file (``extra``: more settings, last wins)."""
    tag = re.sub(r"\W+", "_", f"{alloc}_{extra}")
    f = tmp / f"mesh{k}_{traffic}_{flits}_{tag}_{period}"
    f.write_text(MESH_PARAMS.format(k=k, traffic=traffic, flits=flits, alloc=alloc,
                                    period=period) + extra)
    return f


# --------------------------------------------------------------------------- the two simulators

def run_booksim(binary: str, cfg: Path, rate: float, flits: int, seed: int = 0) -> dict[str, Any]:
    """One Booksim run at ``rate`` flits/node/cycle (its injection_rate is in packets)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([binary, str(cfg), f"injection_rate={rate / flits!r}", f"seed={seed}"],
                         capture_output=True, text=True, cwd=cfg.parent, timeout=3600).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    last = lambda pat: (float(re.findall(pat, out)[-1])  # noqa: E731
                        if re.findall(pat, out) else None)
    unstable = "unstable" in out
    return {
        "latency": None if unstable else last(r"Packet latency average = ([\d.eE+-]+)"),
        "accepted": None if unstable else last(r"Accepted flit rate average *= ([\d.eE+-]+)"),
        "saturated": unstable,
        "cycles": int(last(r"Time taken is (\d+) cycles") or 0),
        "run_seconds": last(r"Total run time ([\d.eE+-]+)"),
        "wall_seconds": wall,
        "cpu_seconds": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
    }


def run_npusim(cfg: Path, rate: float, seed: int = 0) -> dict[str, Any]:
    from npusim.noc.run import run_noc

    c0 = time.process_time()
    r = run_noc(booksim=cfg, traffic={"rate": rate, "seed": seed})
    return {
        "latency": None if r.saturated else r.avg_packet_latency_cycles,
        "accepted": None if r.saturated else r.accepted_flits_per_node_cycle,
        "saturated": r.saturated, "cycles": r.sim_cycles, "wall_seconds": r.wall_seconds,
        "cpu_seconds": time.process_time() - c0,
    }


def saturation_throughput(run, stable: float, unstable: float) -> float:
    """Bisect between a stable and an unstable offered load: the highest stable one."""
    while unstable - stable > BISECT_RESOLUTION:
        mid = round((stable + unstable) / 2, 6)
        if run(mid)["saturated"]:
            unstable = mid
        else:
            stable = mid
    return stable


def over_seeds(run, rate: float, seeds: int) -> dict[str, Any]:
    """Runs with seeds 0 .. seeds-1: saturated if most of them are; latency and accepted
    throughput averaged over the stable ones (single runs near saturation scatter)."""
    runs = [run(rate, s) for s in range(seeds)]
    stable = [r for r in runs if not r["saturated"]]
    sat = 2 * len(stable) < len(runs) + (len(runs) % 2 == 0)
    mean = lambda key: (sum(r[key] for r in stable) / len(stable)  # noqa: E731
                        if stable and not sat else None)
    return {"saturated": sat, "latency": mean("latency"), "accepted": mean("accepted"),
            "seeds": len(runs), "seeds_saturated": len(runs) - len(stable),
            "latencies": [r["latency"] for r in runs]}


def sweep(case: dict[str, Any], booksim: str | None, tmp: Path, seeds: int,
          seeds_high: int) -> dict[str, Any]:
    """Offered loads from ZERO_LOAD_RATE up in RATE_STEP until both simulators saturate.
    Where either's latency passes HIGH_LATENCY times the zero-load value, queueing
    dominates and single runs scatter by tens of percent (4x4 transpose, 4-flit packets
    at 0.30: 26 to 35 cycles over 20 seeds): those loads are run again with
    ``seeds_high`` seeds each."""
    cfg = write_config(tmp, case["k"], case["traffic"], case["flits"], case["alloc"])
    single = {"npusim": lambda r, s=0: run_npusim(cfg, r, s)}
    if booksim:
        single["booksim"] = lambda r, s=0: run_booksim(booksim, cfg, r, case["flits"], s)
    zero: dict[str, float] = {}

    def run_point(name, rate):
        res = over_seeds(single[name], rate, seeds)
        if (seeds_high > seeds and not res["saturated"] and name in zero
                and res["latency"] > HIGH_LATENCY * zero[name]):
            res = over_seeds(single[name], rate, seeds_high)
        if rate == ZERO_LOAD_RATE and res["latency"]:
            zero[name] = res["latency"]
        return res

    sims = {name: (lambda r, name=name: run_point(name, r)) for name in single}
    points = []
    rate = ZERO_LOAD_RATE
    last_stable = {name: 0.0 for name in sims}
    first_unstable: dict[str, float] = {}
    while len(first_unstable) < len(sims) and rate <= 1.0 + 1e-9:
        row = {"rate": rate}
        for name, sim in sims.items():
            if name in first_unstable:
                continue
            res = sim(rate)
            row[name] = res
            if res["saturated"]:
                first_unstable[name] = rate
            else:
                last_stable[name] = rate
        points.append(row)
        rate = round(RATE_STEP * (round(rate / RATE_STEP) + 1), 6)
    sat = {name: saturation_throughput(single[name], last_stable[name],
                                       first_unstable.get(name, 1.0))
           for name in sims}
    return {**case, "points": points, "saturation": sat}


def check(case: dict[str, Any]) -> dict[str, Any]:
    """The issue's bounds: latency within 5% where Booksim's is under 1.2x its zero-load
    value, within 10% from there to saturation; saturation throughput within 5%; a point
    saturated in npusim exactly where Booksim is unstable."""
    zero = next((p["booksim"]["latency"] for p in case["points"]
                 if "booksim" in p and p["rate"] == ZERO_LOAD_RATE), None)
    worst_low = worst_high = 0.0
    agree = True
    for p in case["points"]:
        if "booksim" not in p or "npusim" not in p:
            if "booksim" in p or "npusim" in p:  # one saturated earlier than the other
                other = p.get("booksim") or p.get("npusim")
                agree &= bool(other["saturated"])
            continue
        b, n = p["booksim"], p["npusim"]
        agree &= b["saturated"] == n["saturated"]
        if b["saturated"] or n["saturated"]:
            continue
        err = (n["latency"] - b["latency"]) / b["latency"]
        p["latency_error"] = err
        if zero and b["latency"] < 1.2 * zero:
            worst_low = max(worst_low, abs(err))
        else:
            worst_high = max(worst_high, abs(err))
    sat = case["saturation"]
    sat_err = (sat["npusim"] - sat["booksim"]) / sat["booksim"] if sat.get("booksim") else None
    return {"zero_load_booksim": zero, "worst_error_low_load": worst_low,
            "worst_error_to_saturation": worst_high, "saturation_error": sat_err,
            "saturated_agree": agree,
            "met": worst_low <= 0.05 and worst_high <= 0.10 and agree
            and sat_err is not None and abs(sat_err) <= 0.05}


# --------------------------------------------------------------------------- the same packets

ENQUEUE = re.compile(r"^\d+ \| node(\d+) \| Enqueuing packet (\d+) at time (\d+)\.")
RETIRE = re.compile(r"^(\d+) \| node\d+ \| Retiring packet (\d+) \(plat = (\d+), .*"
                    r"src = (\d+), dest = (\d+)\)")


def same_packets(booksim: str, case: dict[str, Any], rate: float, tmp: Path) -> dict[str, Any]:
    """Booksim's own packets through npusim: Booksim runs with every packet watched (its
    watch output gives each packet's source, creation cycle, destination and latency);
    npusim replays exactly those packets (``replay_packets``: each source sends its
    packets in creation order) and the latencies are compared packet by packet."""
    from npusim.config import load_config
    from npusim.noc.booksim import read_booksim
    from npusim.noc.run import network_for, replay_packets

    import numpy as np

    extra = case.get("extra", "")
    if case.get("anynet"):  # the network file of an anynet case, written beside its config
        net_file = tmp / f"anynet_{zlib.crc32(case['anynet'].encode()):08x}"
        net_file.write_text(case["anynet"])
        extra += f" topology = anynet; routing_function = min; network_file = {net_file};"
    cfg = write_config(tmp, case["k"], case["traffic"], case["flits"], case["alloc"],
                       extra=extra)
    watch = tmp / "watch_all"
    if not watch.exists():
        watch.write_text("\n".join(f"p{i}" for i in range(1_000_000)) + "\n")
    proc = subprocess.Popen([booksim, str(cfg), f"injection_rate={rate / case['flits']!r}",
                             f"watch_file={watch}", "watch_out=-"], stdout=subprocess.PIPE,
                            text=True, cwd=tmp)
    made, done = {}, {}
    for line in proc.stdout:
        if "Enqueuing packet" in line:
            m = ENQUEUE.match(line)
            made[int(m.group(2))] = (int(m.group(1)), int(m.group(3)))
        elif "Retiring packet" in line:
            m = RETIRE.match(line)
            done[int(m.group(2))] = (int(m.group(3)), int(m.group(5)))
    proc.wait()
    pids = sorted(p for p in made if p in done)
    packets = [(made[p][0], done[p][1], case["flits"], made[p][1]) for p in pids]
    bf = read_booksim(cfg)
    net = network_for(load_config("mobile", bf.noc))
    out = replay_packets(net, packets)
    ours = out[:, 1] - np.array([pk[3] for pk in packets])
    theirs = np.array([done[p][0] for p in pids])
    diff = np.abs(ours - theirs)
    return {"rate": rate, "packets": len(pids), "identical": int((diff == 0).sum()),
            "max_abs_difference": int(diff.max()) if len(diff) else 0,
            "mean_latency_npusim": float(ours.mean()), "mean_latency_booksim": float(theirs.mean())}


# --------------------------------------------------------------------------- speed, compile

def speed(booksim: str | None, tmp: Path, repeat: int) -> dict[str, Any]:
    cfg = write_config(tmp, 8, "uniform", 1, "islip", SPEED_PERIOD)
    out: dict[str, Any] = {"rate": SPEED_RATE, "routers": 64, "sample_period": SPEED_PERIOD}
    runs = {"npusim": [], "booksim": []}
    run_npusim(cfg, SPEED_RATE)  # compile or load the kernels first
    for _ in range(repeat):  # alternate, so both see the same machine load
        runs["npusim"].append(run_npusim(cfg, SPEED_RATE))
        if booksim:
            runs["booksim"].append(run_booksim(booksim, cfg, SPEED_RATE, 1))
    for name, rs in runs.items():
        if not rs:
            continue
        seconds = [r["wall_seconds"] if name == "npusim" else r["run_seconds"] for r in rs]
        best = min(range(len(rs)), key=lambda i: seconds[i])
        r = rs[best]
        out[name] = {"cycles": r["cycles"], "seconds": seconds[best],
                     "cpu_seconds": r["cpu_seconds"],
                     "router_cycles_per_second": r["cycles"] * 64 / seconds[best],
                     "router_cycles_per_cpu_second": r["cycles"] * 64 / r["cpu_seconds"],
                     "all_seconds": seconds}
    if "booksim" in out:
        out["speedup"] = (out["npusim"]["router_cycles_per_second"]
                          / out["booksim"]["router_cycles_per_second"])
        out["speedup_cpu"] = (out["npusim"]["router_cycles_per_cpu_second"]
                              / out["booksim"]["router_cycles_per_cpu_second"])
    return out


def cold_compile(tmp: Path) -> dict[str, Any]:
    """First `npusim noc` run with an empty numba cache, in a child process."""
    cfg = write_config(tmp, 4, "uniform", 1, "islip")
    code = ("import json, time; from npusim.noc.run import run_noc; t = time.perf_counter(); "
            f"r = run_noc(booksim={str(cfg)!r}, measurement={{'cycles': 100, "
            "'warmup_periods': 1}); "
            "print(json.dumps({'compile_seconds': r.compile_seconds, "
            "'total_seconds': time.perf_counter() - t}))")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp / "numba-cold"))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=1800)
    if res.returncode:
        return {"error": res.stderr.strip().splitlines()[-1:]}
    return json.loads(res.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- output

def _f(x, fmt, none="-"):
    return none if x is None else format(x, fmt)


def markdown(data: dict[str, Any]) -> str:
    m = data["machine"]
    lines = [
        "# npusim NoC benchmark", "",
        f"Generated by `python tests/benchmarks/bench_noc.py` on {data['date']}.", "",
        f"Machine: {m.get('cpu_model')}, {m.get('cpus_usable')} CPUs usable; Python "
        f"{m.get('python')}, numba {m.get('numba')}; npusim at "
        f"{(m.get('git') or {}).get('commit', '?')[:12]}"
        f"{' (dirty tree)' if (m.get('git') or {}).get('dirty') else ''}. Booksim: "
        f"{data['booksim'] or 'not given (its columns are empty)'}. Load average before / "
        f"after: {data['load_before']} / {data['load_after']}.", "",
        *([f"The same packets and the speed were run again (`--refresh`) on "
           f"{data['refreshed']['date']}, npusim at "
           f"{(data['refreshed']['machine'].get('git') or {}).get('commit', '?')[:12]}; the "
           "sweeps are the recorded ones.", ""] if data.get("refreshed") else []),
        "Both simulators read the same Booksim config (meshconfig's parameters, written by "
        "the script). Latency: average packet latency in cycles, creation to tail arrival, "
        f"averaged over traffic seeds 0..{data['seeds'] - 1}, or 0..{data['seeds_high'] - 1} "
        f"where latency is above {HIGH_LATENCY}x its zero-load value (each simulator its own random "
        "traffic); a load is saturated (`sat`; Booksim: \"Simulation unstable\") when most "
        "seeds are. Rates in flits per node per cycle. Error = (npusim - Booksim) / Booksim. "
        "Saturation throughput: the highest stable load, bisected to "
        f"{BISECT_RESOLUTION} with seed 0.", "",
        "## Summary", "",
        "| case | allocators | zero-load (Booksim) | worst error, latency < 1.2x zero-load "
        "(bound 5%) | worst error to saturation (bound 10%) | saturation npusim / Booksim | "
        "error (bound 5%) | saturated at the same loads | met |",
        "|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for c in data["cases"]:
        ck = c.get("check") or {}
        s = c["saturation"]
        lines.append(
            f"| {c['name']} | {c['alloc']} | {_f(ck.get('zero_load_booksim'), '.2f')} | "
            f"{_f(ck.get('worst_error_low_load'), '.1%')} | "
            f"{_f(ck.get('worst_error_to_saturation'), '.1%')} | "
            f"{_f(s.get('npusim'), '.3f')} / {_f(s.get('booksim'), '.3f')} | "
            f"{_f(ck.get('saturation_error'), '+.1%')} | "
            f"{'yes' if ck.get('saturated_agree') else 'no' if ck else '-'} | "
            f"{'yes' if ck.get('met') else 'no' if ck else '-'} |")
    lines += ["", "## The same packets", "",
              "Booksim's own packets replayed through npusim (`replay_packets`), at 80% of "
              "Booksim's saturation load: Booksim runs with every packet watched, which gives "
              "each packet's source, creation cycle, destination and latency; npusim sends "
              "exactly those packets and the latencies are compared packet by packet. This "
              "separates the network (cycle for cycle the same) from the random traffic "
              "(each simulator draws its own), which is what the averages above differ by.", "",
              "| case | allocators | offered | packets | identical latency | max difference | "
              "mean npusim / Booksim |", "|---|---|---:|---:|---:|---:|---:|"]
    for c in data["cases"] + data.get("variants", []):
        sp = c.get("same_packets")
        if sp:
            alloc = c["alloc"] + (f"; {c['extra']}" if c.get("extra") else "")
            lines.append(f"| {c['name']} | {alloc} | {sp['rate']:.3f} | "
                         f"{sp['packets']:,} | {sp['identical']:,} | "
                         f"{sp['max_abs_difference']} | {sp['mean_latency_npusim']:.2f} / "
                         f"{sp['mean_latency_booksim']:.2f} |")
    lines += ["", "## Latency against offered load", ""]
    for c in data["cases"]:
        lines += [f"### {c['name']} ({c['alloc']})", "",
                  "| offered | npusim latency | Booksim latency | error | npusim accepted | "
                  "Booksim accepted |", "|---:|---:|---:|---:|---:|---:|"]
        for p in c["points"]:
            n, b = p.get("npusim"), p.get("booksim")
            cell = lambda r, key, fmt: ("sat" if r and r["saturated"] else  # noqa: E731
                                        _f(r and r[key], fmt))
            lines.append(f"| {p['rate']:.2f} | {cell(n, 'latency', '.2f')} | "
                         f"{cell(b, 'latency', '.2f')} | {_f(p.get('latency_error'), '+.1%')} | "
                         f"{cell(n, 'accepted', '.4f')} | {cell(b, 'accepted', '.4f')} |")
        lines.append("")
    sp = data.get("speed") or {}
    lines += ["## Speed", "",
              f"8x8 mesh, uniform traffic at {SPEED_RATE} flits/node/cycle, sample period "
              f"{SPEED_PERIOD} cycles; best of {data['repeat']} alternating runs. npusim: the "
              "kernel's wall time; Booksim: its own `Total run time`. CPU time: the process's "
              "(npusim) or the child's (Booksim) user + system time, less sensitive to other "
              "load on the machine.", "",
              "| simulator | cycles | seconds | router-cycles/s | CPU seconds | "
              "router-cycles/CPU-s |", "|---|---:|---:|---:|---:|---:|"]
    for name in ("npusim", "booksim"):
        r = sp.get(name)
        if r:
            lines.append(f"| {name} | {r['cycles']:,} | {r['seconds']:.3f} | "
                         f"{r['router_cycles_per_second'] / 1e6:.2f} M | {r['cpu_seconds']:.3f} | "
                         f"{r['router_cycles_per_cpu_second'] / 1e6:.2f} M |")
    if "speedup" in sp:
        lines += ["", f"npusim / Booksim: {sp['speedup']:.1f}x in wall time, "
                      f"{sp['speedup_cpu']:.1f}x in CPU time (target: 10x and 3 M "
                      "router-cycles/s)."]
    cc = data.get("compile") or {}
    lines += ["", "## Compile", "",
              f"Cold compile of the router kernels (synthetic-traffic driver, empty numba "
              f"cache): {_f(cc.get('compile_seconds'), '.1f')} s; whole first run "
              f"{_f(cc.get('total_seconds'), '.1f')} s.", ""]
    return "\n".join(lines)


IRREGULAR_ANYNET = """router 0 node 0 node 1 router 1 router 3
router 1 node 2 router 2 router 4
router 2 node 3 node 4 router 3
router 3 node 5 router 4
router 4 node 6 node 7 router 0
"""

# more router settings and other topologies, checked packet by packet only (by default
# 4x4, uniform, 4-flit packets at 0.5 flits/node/cycle). A torus or ring of even k is left
# out: Booksim sends a packet half a ring away either way at random, npusim by a fixed rule.
VARIANTS = [
    {"alloc": "separable_input_first"}, {"alloc": "separable_output_first"},
    {"alloc": "wavefront"},
    {"alloc": "islip(3)", "extra": "routing_delay = 1; credit_delay = 0; "
                                   "wait_for_tail_credit = 0; num_vcs = 4; vc_buf_size = 4;"},
    {"name": "4x4 uniform 4-flit, 2 VCs of 2 flits", "rate": 0.25,
     "extra": "num_vcs = 2; vc_buf_size = 2;"},
    {"name": "4x4 uniform 8-flit", "flits": 8, "rate": 0.4,
     "extra": "wait_for_tail_credit = 0; num_vcs = 4;"},
    {"name": "4x4 bitcomp 4-flit", "traffic": "bitcomp", "rate": 0.3},
    {"name": "3x3x3 mesh uniform 4-flit", "k": 3, "rate": 0.3,
     "extra": "n = 3; num_vcs = 4; vc_buf_size = 4;"},
    {"name": "5x5 torus uniform 4-flit", "k": 5, "rate": 0.4,
     "extra": "topology = torus; routing_function = dim_order; num_vcs = 4;"},
    {"name": "ring of 7 uniform 4-flit", "k": 7, "rate": 0.2,
     "extra": "topology = torus; n = 1; routing_function = dim_order; num_vcs = 4;"},
    {"name": "4-ary 2-fly uniform 4-flit", "rate": 0.4,
     "extra": "topology = fly; n = 2; routing_function = dest_tag; num_vcs = 4;"},
    # anynet files: paths of equal length (Booksim's tie-break), several nodes a router
    {"name": "irregular anynet, 5 routers, 1-flit", "alloc": "separable_input_first",
     "flits": 1, "rate": 0.3, "extra": "num_vcs = 4;", "anynet": IRREGULAR_ANYNET},
    {"name": "irregular anynet, 5 routers, 4-flit", "rate": 0.2, "extra": "num_vcs = 4;",
     "anynet": IRREGULAR_ANYNET},
    # priority = age (ONNXim's mesh_sif-age): the older packet first, then round robin
    {"name": "4x4 uniform 4-flit, priority = age", "alloc": "separable_input_first",
     "rate": 0.4, "extra": "priority = age; num_vcs = 4;"},
    {"name": "4x4 uniform 4-flit, priority = age", "alloc": "separable_output_first",
     "rate": 0.4, "extra": "priority = age; num_vcs = 4;"},
    {"name": "4x4 uniform 4-flit, priority = age", "rate": 0.4,
     "extra": "priority = age; num_vcs = 4;"},
    {"name": "6x6 grid as anynet (as ONNXim's anynet_file), 1-flit", "flits": 1, "rate": 0.1,
     "anynet": "".join(f"router {r} node {r}"
                       + (f" router {r + 1}" if r % 6 < 5 else "")
                       + (f" router {r + 6}" if r < 30 else "") + "\n" for r in range(36))},
]
# ONNXim's mesh_sif-age.icnt on the grid above: separable input-first allocators, age first
VARIANTS.append({**VARIANTS[-1], "name": VARIANTS[-1]["name"] + ", priority = age",
                 "alloc": "separable_input_first", "rate": 0.2,
                 "extra": "priority = age; wait_for_tail_credit = 0; vc_buf_size = 64;"})


def variant_case(v: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """A VARIANTS entry as a case (the defaults filled in) and its offered load."""
    case = {"name": "4x4 uniform 4-flit", "k": 4, "traffic": "uniform", "flits": 4,
            "alloc": "islip", **{k: x for k, x in v.items() if k != "rate"}}
    return case, v.get("rate", 0.5)


def _key(c: dict[str, Any]) -> tuple:
    return c["name"], c["alloc"], c.get("extra", "")


def cases(quick: bool) -> list[dict[str, Any]]:
    out = []
    for k in ([4] if quick else [4, 8]):
        for traffic in ("uniform", "transpose"):
            for flits in (1, 4):
                out.append({"name": f"{k}x{k} {traffic} {flits}-flit", "k": k,
                            "traffic": traffic, "flits": flits, "alloc": "islip"})
    if not quick:
        for flits in (1, 4):
            out.append({"name": f"8x8 uniform {flits}-flit", "k": 8, "traffic": "uniform",
                        "flits": flits, "alloc": "islip(2)"})
    return out


def point(args) -> int:
    """One offered load, many seeds, both simulators: the mean latency and its standard
    error, for loads where a few seeds cannot tell the simulators apart."""
    import statistics

    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        for case in cases(False):
            if args.only and not re.search(args.only, f"{case['name']} ({case['alloc']})"):
                continue
            cfg = write_config(Path(tmpdir), case["k"], case["traffic"], case["flits"],
                               case["alloc"])
            row = {**case, "rate": args.point}
            sims = {"npusim": lambda r, s: run_npusim(cfg, r, s)}
            if args.booksim:
                sims["booksim"] = lambda r, s: run_booksim(args.booksim, cfg, r, case["flits"], s)
            for name, run in sims.items():
                res = over_seeds(run, args.point, args.seeds)
                lat = [x for x in res["latencies"] if x is not None]
                res["stderr"] = statistics.stdev(lat) / len(lat) ** 0.5 if len(lat) > 1 else None
                row[name] = res
            rows.append(row)
            print(json.dumps(row, default=str)[:300], flush=True)
    out = args.out or REPO / "results" / "benchmarks" / "noc_point.json"
    out.write_text(json.dumps({"date": _dt.datetime.now(_dt.timezone.utc).isoformat(
        timespec="seconds"), "seeds": args.seeds, "rows": rows}, indent=1))
    lines = [f"# NoC latency at one offered load over {args.seeds} seeds",
             "", f"Generated by `python tests/benchmarks/bench_noc.py --point {args.point} "
             f"--seeds {args.seeds} --only '{args.only}'`. Latency: mean over the stable "
             "seeds, +- its standard error; each simulator its own random traffic.", "",
             "| case | offered | npusim | Booksim | error |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        n, b = r["npusim"], r.get("booksim")
        err = (f"{n['latency'] / b['latency'] - 1:+.2%}" if b and b["latency"] and n["latency"]
               else "-")
        fmt = lambda x: (f"{x['latency']:.2f} +- {x['stderr']:.2f}"  # noqa: E731
                         if x and x["latency"] else "sat")
        lines.append(f"| {r['name']} ({r['alloc']}) | {r['rate']} | {fmt(n)} | {fmt(b)} | {err} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


def refresh(args) -> int:
    """``--refresh``: the recorded results with their same-packets replays and speed part
    run again (Booksim is needed for both the packets and the comparison)."""
    out = args.out or DEFAULT_OUT
    data = json.loads(out.read_text())
    if not (args.booksim and Path(args.booksim).is_file()):
        print("--refresh needs the Booksim binary (--booksim or BOOKSIM)", file=sys.stderr)
        return 2
    failed = False
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for c in data["cases"] + data.get("variants", []):
            if not c.get("same_packets"):
                continue
            case = {k: v for k, v in c.items() if k in ("name", "k", "traffic", "flits",
                                                       "alloc", "extra", "anynet")}
            c["same_packets"] = same_packets(args.booksim, case, c["same_packets"]["rate"], tmp)
            failed |= c["same_packets"]["identical"] != c["same_packets"]["packets"]
            print(f"same packets {case}: {c['same_packets']}", flush=True)
        recorded = {_key(c) for c in data.get("variants", [])}
        for v in VARIANTS:  # variants added since the results were recorded
            case, rate = variant_case(v)
            if _key(case) not in recorded:
                res = same_packets(args.booksim, case, rate, tmp)
                data.setdefault("variants", []).append({**case, "same_packets": res})
                failed |= res["identical"] != res["packets"]
                print(f"same packets {case}: {res}", flush=True)
        data["repeat"] = args.repeat
        data["speed"] = speed(args.booksim, tmp, args.repeat)
        print(f"speed: {json.dumps(data['speed'])}", flush=True)
    data["refreshed"] = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                         "machine": machine_info()}
    out.write_text(json.dumps(data, indent=1))
    out.with_suffix(".md").write_text(markdown(data))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--booksim", default=os.environ.get("BOOKSIM"),
                    help="Booksim2 binary (default: $BOOKSIM); without it npusim runs alone")
    ap.add_argument("--quick", action="store_true", help="4x4 cases only, one speed run")
    ap.add_argument("--repeat", type=int, default=3, help="speed runs of each simulator")
    ap.add_argument("--seeds", type=int, default=3,
                    help="traffic seeds per offered load, averaged (default 3)")
    ap.add_argument("--seeds-high", type=int, default=10,
                    help="seeds where latency is above 1.2x its zero-load value (default 10)")
    ap.add_argument("--no-compile", action="store_true", help="skip the cold compile")
    ap.add_argument("--only", metavar="REGEX", default=None,
                    help="run only the cases whose 'name (allocators)' matches, e.g. "
                         "'\\(islip\\)' leaves out the islip(2) cases")
    ap.add_argument("--point", type=float, default=None, metavar="RATE",
                    help="only this offered load of the --only cases, --seeds seeds each, "
                         "side by side (a load near saturation needs many: --seeds 100); "
                         "writes results/benchmarks/noc_point.{json,md}")
    ap.add_argument("--refresh", action="store_true",
                    help="re-run only the same-packets replays (at the loads recorded in "
                         "--out) and the speed part, keeping the recorded sweeps: for a "
                         "change that must leave the network cycle for cycle as it was")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.point is not None:
        return point(args)
    if args.refresh:
        return refresh(args)
    booksim = args.booksim if args.booksim and Path(args.booksim).is_file() else None
    if args.booksim and not booksim:
        print(f"Booksim binary {args.booksim} not found: running npusim alone", file=sys.stderr)
    out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)
    repeat = 1 if args.quick else args.repeat
    data: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(), "booksim": booksim, "repeat": repeat,
        "load_before": round(os.getloadavg()[0], 2), "seeds": args.seeds,
        "seeds_high": args.seeds_high, "cases": [],
    }
    failed = False
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        if not args.no_compile:
            data["compile"] = cold_compile(tmp)
            print(f"cold compile: {data['compile']}", flush=True)
        for case in cases(args.quick):
            if args.only and not re.search(args.only, f"{case['name']} ({case['alloc']})"):
                continue
            t0 = time.perf_counter()
            try:
                res = sweep(case, booksim, tmp, args.seeds, args.seeds_high)
                if booksim:
                    res["check"] = check(res)
            except Exception as err:  # noqa: BLE001 - reported in the table, not raised
                failed = True
                res = {**case, "points": [], "saturation": {}, "error": repr(err)}
            if booksim and "error" not in res and res["saturation"].get("booksim"):
                # the same packets at 80% of Booksim's saturation load
                rate = round(0.8 * res["saturation"]["booksim"], 3)
                res["same_packets"] = same_packets(booksim, case, rate, tmp)
            data["cases"].append(res)
            print(f"{case['name']} ({case['alloc']}): {time.perf_counter() - t0:.0f} s, "
                  f"saturation {res['saturation']}, check {res.get('check')}", flush=True)
        data["variants"] = []
        if booksim:
            for v in VARIANTS:
                case, rate = variant_case(v)
                res = same_packets(booksim, case, rate, tmp)
                data["variants"].append({**case, "same_packets": res})
                print(f"same packets {v}: {res}", flush=True)
        data["speed"] = speed(booksim, tmp, repeat)
        print(f"speed: {json.dumps(data['speed'])}", flush=True)
    data["load_after"] = round(os.getloadavg()[0], 2)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    out.with_suffix(".md").write_text(markdown(data))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
