"""DRAM model speed benchmark: how fast npusim replays saturating memory traffic.

Run from the repository root::

    python tests/benchmarks/bench_dram.py               # all cases, 3 timed repeats each
    python tests/benchmarks/bench_dram.py --quick       # smoke check: 1/10 of the requests, once
    python tests/benchmarks/bench_dram.py --out results/benchmarks/dram.json

Each case replays a request stream through ``npusim.dram.replay.replay_requests`` (the same
path as ``npusim dram TRACE``): the controller queues are kept full, so the DRAM runs
saturated and the run measures the cost of the cycle-level model itself.

Speed is measured and recorded, never asserted: a case that misses its target is reported in
the table (and in the JSON ``meets_target`` field), the script still exits 0. It exits 1 only
when a case fails to run at all.

Timing rules: each case first runs an untimed warm-up replay on its config (compiles the numba
kernel or loads it from its on-disk cache), then ``--repeat`` timed replays. The timed number
is ``stats["wall_seconds"]``, the kernel loop only (state construction and statistics
collection excluded; they are reported as ``end_to_end_seconds_best``). The file name has no
``test_`` prefix, so pytest does not collect it. See tests/benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "results" / "benchmarks" / "dram.json"
QUICK_OUT = REPO / "results" / "benchmarks" / "dram_quick.json"

SEED = 20240601
SPAN_BYTES = 4 << 30          # random addresses are uniform over 4 GiB
READ_FRACTION = 0.8
WARMUP_REQUESTS = 20_000

TARGET_DDR4_RPS = 500_000      # requests/s, one DDR4 channel, random traffic
TARGET_HBM2_16_RPS = 1_000_000  # requests/s, 16 HBM2 channels, random traffic
# Ramulator on this machine, the same kind of random traffic on one DDR4 channel
RAMULATOR_DDR4_RPS = 50_000
RAMULATOR_DDR4_CHANNEL_CYCLES_PER_S = 350_000


def _bench_engine():
    """Shared helpers (machine info, number formatting) of the engine benchmark."""
    spec = importlib.util.spec_from_file_location("bench_engine", Path(__file__).with_name(
        "bench_engine.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --------------------------------------------------------------------------- cases


def random_traffic(n: int, request_bytes: int, seed: int = SEED):
    """n requests, uniform over SPAN_BYTES, aligned to the request size, 80% reads."""
    rng = np.random.default_rng(seed)
    addrs = rng.integers(0, SPAN_BYTES // request_bytes, n, dtype=np.int64) * request_bytes
    writes = (rng.random(n) >= READ_FRACTION).astype(np.int64)
    return addrs, writes


def sequential_reads(n: int, request_bytes: int):
    return np.arange(n, dtype=np.int64) * request_bytes, np.zeros(n, dtype=np.int64)


def cases(quick: bool) -> list[dict[str, Any]]:
    """The cases; a single-standard config is the mobile preset with its memory replaced
    (as tests/dram_helpers.py::dram_config builds it), requests of one burst."""
    scale = 10 if quick else 1
    return [
        dict(case="ddr4_random", label="(a) 1 x DDR4-2400, random",
             config=("mobile", ["memory.standard=DDR4-2400R_8Gb_x8", "memory.channels=1",
                                "dma.request_bytes=64"]),
             traffic="random", requests=500_000 // scale, target_rps=TARGET_DDR4_RPS,
             reference={"ramulator_requests_per_second": RAMULATOR_DDR4_RPS,
                        "ramulator_channel_cycles_per_second":
                            RAMULATOR_DDR4_CHANNEL_CYCLES_PER_S}),
        dict(case="hbm2_16ch_random", label="(b) 16 x HBM2-2400, random",
             config=("mobile", ["memory.standard=HBM2-2400_8Gb_x128", "memory.channels=16",
                                "dma.request_bytes=32"]),
             traffic="random", requests=1_000_000 // scale, target_rps=TARGET_HBM2_16_RPS),
        dict(case="server_random", label="(c) server: 32 x HBM2-2400, 256 B, random",
             config=("server", []), traffic="random", requests=250_000 // scale),
        dict(case="ddr4_sequential", label="(d) 1 x DDR4-2400, sequential reads",
             config=("mobile", ["memory.standard=DDR4-2400R_8Gb_x8", "memory.channels=1",
                                "dma.request_bytes=64"]),
             traffic="sequential", requests=1_000_000 // scale),
    ]


# --------------------------------------------------------------------------- running


def run_case(case: dict[str, Any], repeat: int) -> dict[str, Any]:
    from npusim.config import load_config
    from npusim.dram.replay import replay_requests

    name, overrides = case["config"]
    cfg = load_config(name, overrides)
    mem, ctl = cfg.memory, cfg.memory.controller
    req = cfg.dma.request_bytes
    n = case["requests"]
    if case["traffic"] == "random":
        addrs, writes = random_traffic(n, req)
    else:
        addrs, writes = sequential_reads(n, req)

    row: dict[str, Any] = dict(
        case=case["case"], label=case["label"], config=name, overrides=overrides,
        traffic=case["traffic"], standard=mem.standard, channels=mem.channels,
        request_bytes=req, dram_freq_mhz=mem.freq_mhz, peak_gbps=mem.peak_gbps,
        page_policy=ctl.page_policy, address_mapping=ctl.address_mapping,
        channel_hash=ctl.channel_hash, read_queue=ctl.read_queue, write_queue=ctl.write_queue,
        requests=n, requests_written=int(writes.sum()),
        span_bytes=SPAN_BYTES if case["traffic"] == "random" else n * req,
        seed=SEED if case["traffic"] == "random" else None,
    )
    # Untimed warm-up on the same config: compile or load the cached kernel.
    m = min(n, WARMUP_REQUESTS)
    t = time.perf_counter()
    warm, _ = replay_requests(cfg, addrs[:m], writes[:m])
    row["warmup_seconds"] = time.perf_counter() - t
    row["warmup_compile_seconds"] = warm["compile_seconds"]

    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        stats, st = replay_requests(cfg, addrs, writes)
        e2e = time.perf_counter() - t
        del st
        runs.append((stats, e2e))
    walls = [s["wall_seconds"] for s, _ in runs]
    best, med = min(walls), statistics.median(walls)
    s0 = runs[0][0]
    keys = ("dram_cycles", "reads", "writes", "row_hits", "row_misses", "row_conflicts",
            "activates", "precharges", "refreshes", "p99_read_latency_cycles")
    deterministic = all(all(s[k] == s0[k] for k in keys) for s, _ in runs)
    cycles = s0["dram_cycles"]
    ns_per_cycle = 1e3 / mem.freq_mhz
    row.update(
        dram_cycles=cycles,
        simulated_seconds=cycles / (mem.freq_mhz * 1e6),
        wall_seconds_best=best,
        wall_seconds_median=med,
        wall_seconds_all=walls,
        end_to_end_seconds_best=min(e for _, e in runs),
        compile_seconds_in_timed_runs=max(s["compile_seconds"] for s, _ in runs),
        requests_per_second=n / best if best > 0 else None,
        dram_cycles_per_second=cycles / best if best > 0 else None,
        channel_cycles_per_second=cycles * mem.channels / best if best > 0 else None,
        bandwidth_gbps=s0["bandwidth_gbps"],
        percent_of_peak=100.0 * s0["bandwidth_gbps"] / s0["peak_gbps"],
        bus_utilization=s0["bandwidth_utilization"],
        reads=s0["reads"], writes=s0["writes"],
        row_hits=s0["row_hits"], row_misses=s0["row_misses"],
        row_conflicts=s0["row_conflicts"], activates=s0["activates"],
        precharges=s0["precharges"], refreshes=s0["refreshes"],
        row_hit_rate=s0["row_hits"] / n,
        avg_read_latency_cycles=s0["avg_read_latency_cycles"],
        p99_read_latency_cycles=s0["p99_read_latency_cycles"],
        avg_read_latency_ns=s0["avg_read_latency_cycles"] * ns_per_cycle,
        p99_read_latency_ns=s0["p99_read_latency_cycles"] * ns_per_cycle,
        classified_once=(s0["row_hits"] + s0["row_misses"] + s0["row_conflicts"] == n),
        deterministic=deterministic,
        repeats=repeat,
    )
    if "target_rps" in case:
        row["target_requests_per_second"] = case["target_rps"]
        row["meets_target"] = row["requests_per_second"] >= case["target_rps"]
    if "reference" in case:
        ref = case["reference"]
        row["reference"] = ref
        row["speedup_vs_ramulator_requests"] = (row["requests_per_second"]
                                                / ref["ramulator_requests_per_second"])
        row["speedup_vs_ramulator_channel_cycles"] = (
            row["channel_cycles_per_second"] / ref["ramulator_channel_cycles_per_second"])
    return row


# --------------------------------------------------------------------------- output


def _f(x, fmt: str, none: str = "-") -> str:
    return none if x is None else format(x, fmt)


HEAD = ["case", "memory", "req B", "requests", "DRAM cycles", "wall s", "requests/s",
        "ch-cycles/s", "GB/s", "% peak", "row hits / misses / conflicts",
        "avg read lat", "p99 read lat", "target"]
RIGHT = set(range(2, 13))


def _target(r) -> str:
    if "target_requests_per_second" not in r:
        return ""
    ok = "met" if r["meets_target"] else "MISSED"
    return f">= {r['target_requests_per_second'] / 1e6:g} M req/s: {ok}"


def table_rows(report, rate) -> list[list[str]]:
    out = []
    for r in report["cases"]:
        if "error" in r:
            out.append([r["case"], r.get("label", ""), f"ERROR: {r['error']}"]
                       + [""] * (len(HEAD) - 3))
            continue
        std = r["standard"].split("_")[0]
        out.append([
            r["case"], f"{r['channels']} x {std}", str(r["request_bytes"]),
            f"{r['requests']:,}", f"{r['dram_cycles']:,}", f"{r['wall_seconds_best']:.3f}",
            rate(r["requests_per_second"]), rate(r["channel_cycles_per_second"]),
            f"{r['bandwidth_gbps']:.1f}", f"{r['percent_of_peak']:.1f}",
            f"{r['row_hits']:,} / {r['row_misses']:,} / {r['row_conflicts']:,}",
            f"{r['avg_read_latency_cycles']:.1f}", str(r["p99_read_latency_cycles"]),
            _target(r),
        ])
    return out


def plain_table(rows) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(HEAD, *rows)]
    fmt = lambda cells: "  ".join(  # noqa: E731
        (c.rjust(w) if i in RIGHT else c.ljust(w)) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([fmt(HEAD), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])


def md_table(rows) -> str:
    lines = ["| " + " | ".join(HEAD) + " |",
             "|" + "|".join("---:" if i in RIGHT else "---" for i in range(len(HEAD))) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def summary_lines(report, rate) -> list[str]:
    lines = []
    for r in report["cases"]:
        if "error" in r:
            continue
        if "speedup_vs_ramulator_requests" in r:
            ref = r["reference"]
            lines.append(
                f"{r['case']}: {rate(r['requests_per_second'])} requests/s, "
                f"{rate(r['channel_cycles_per_second'])} channel-cycles/s vs Ramulator "
                f"~{rate(ref['ramulator_requests_per_second'])} requests/s, "
                f"{rate(ref['ramulator_channel_cycles_per_second'])} channel-cycles/s on this "
                f"machine: {r['speedup_vs_ramulator_requests']:.1f}x "
                f"({r['speedup_vs_ramulator_channel_cycles']:.1f}x in channel-cycles/s)")
        if r.get("deterministic") is False:
            lines.append(f"{r['case']}: repeats gave DIFFERENT cycle or row-buffer counts")
        if not r.get("classified_once", True):
            lines.append(f"{r['case']}: row hits + misses + conflicts != requests")
        if (r.get("compile_seconds_in_timed_runs") or 0) > 0.01:
            lines.append(f"{r['case']}: a timed run reported "
                         f"{r['compile_seconds_in_timed_runs']:.3f} s of compilation "
                         f"(excluded from its wall time)")
    first = next((r for r in report["cases"] if "warmup_compile_seconds" in r), None)
    if first:
        lines.append(f"kernel compile/cache load (warm-up of {first['case']}, first of the "
                     f"process): {first['warmup_compile_seconds']:.3f} s (excluded from every "
                     f"timed number)")
    missed = [r["case"] for r in report["cases"] if r.get("meets_target") is False]
    lines.append("targets: " + ("all met" if not missed else "MISSED by " + ", ".join(missed)))
    return lines


def markdown(report, rate) -> str:
    m = report["machine"]
    git = m.get("git") or {}
    out = [
        "# npusim DRAM benchmark",
        "",
        f"Generated by `{report['command']}` on {report['date']}.",
        "",
        f"Machine: {m.get('cpu_model')}, {m.get('cpu_count')} CPUs ({m.get('cpus_usable')} "
        f"usable), {m.get('platform')}; Python {m.get('python')}, numba {m.get('numba')}, "
        f"numpy {m.get('numpy')}; npusim {m.get('npusim')}"
        + (f" at {git.get('commit', '')[:12]}{' (dirty tree)' if git.get('dirty') else ''}"
           if git.get("commit") else "") + ".",
        "",
        f"Saturating traffic replayed with `replay_requests` (as `npusim dram TRACE`). Random "
        f"cases: {100 * READ_FRACTION:.0f}% reads, addresses uniform over 4 GiB aligned to the "
        f"request size, seed {SEED}. Each case: one untimed warm-up replay, then "
        f"{report['repeats']} timed replay(s); wall = kernel loop only (JIT compile excluded), "
        "best of the repeats; rates use it. Latencies in DRAM command-clock cycles. See "
        "tests/benchmarks/README.md for the columns.",
        "",
        md_table(table_rows(report, rate)),
        "",
        "## Cases",
        "",
    ]
    for r in report["cases"]:
        if "error" in r:
            out.append(f"- {r['case']}: ERROR {r['error']}")
            continue
        over = " ".join(f"`{o}`" for o in r["overrides"])
        out.append(
            f"- {r['case']} {r['label']}: `{r['config']}`{(' + ' + over) if over else ''}; "
            f"{r['standard']} x {r['channels']} at {r['dram_freq_mhz']} MHz, peak "
            f"{r['peak_gbps']:.1f} GB/s; mapping `{r['address_mapping']}`, channel hash "
            f"`{r['channel_hash']}`, {r['page_policy']} page; {r['requests']:,} requests of "
            f"{r['request_bytes']} B ({r['requests_written']:,} writes); simulated "
            f"{1e6 * r['simulated_seconds']:.1f} us; avg / p99 read latency "
            f"{r['avg_read_latency_ns']:.1f} / {r['p99_read_latency_ns']:.1f} ns; bus busy "
            f"{100 * r['bus_utilization']:.1f}%; wall median {r['wall_seconds_median']:.3f} s")
    out += ["", "## Notes", ""] + [f"- {s}" for s in summary_lines(report, rate)] + [""]
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="smoke check: 1/10 of the requests, one timed run per case; default "
                         "output results/benchmarks/dram_quick.json")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"JSON output (the Markdown copy goes next to it with .md); default "
                         f"{DEFAULT_OUT.relative_to(REPO)}")
    ap.add_argument("--repeat", type=int, default=None,
                    help="timed replays per case (default 3, or 1 with --quick)")
    args = ap.parse_args(argv)
    repeat = args.repeat or (1 if args.quick else 3)
    if repeat < 1:
        ap.error("--repeat must be at least 1")
    out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)
    be = _bench_engine()
    rate = be._rate

    started = _dt.datetime.now(_dt.timezone.utc)
    report: dict[str, Any] = {
        "benchmark": "dram",
        "date": started.isoformat(timespec="seconds"),
        "command": "python tests/benchmarks/bench_dram.py" + (" --quick" if args.quick else "")
                   + (f" --repeat {args.repeat}" if args.repeat else ""),
        "quick": args.quick,
        "repeats": repeat,
        "machine": be.machine_info(),
        "traffic": {"seed": SEED, "read_fraction": READ_FRACTION, "span_bytes": SPAN_BYTES,
                    "warmup_requests": WARMUP_REQUESTS},
        "targets": {"ddr4_random_requests_per_second": TARGET_DDR4_RPS,
                    "hbm2_16ch_random_requests_per_second": TARGET_HBM2_16_RPS,
                    "ramulator_ddr4_requests_per_second": RAMULATOR_DDR4_RPS,
                    "ramulator_ddr4_channel_cycles_per_second":
                        RAMULATOR_DDR4_CHANNEL_CYCLES_PER_S},
        "cases": [],
    }
    failed = False
    for case in cases(args.quick):
        print(f"running {case['case']} ({case['requests']:,} requests) ...", file=sys.stderr,
              flush=True)
        try:
            row = run_case(case, repeat)
        except Exception as err:  # noqa: BLE001 - record it, keep benchmarking the rest
            failed = True
            row = {"case": case["case"], "label": case["label"],
                   "error": f"{type(err).__name__}: {str(err).strip()[:300]}"}
        report["cases"].append(row)
    report["total_benchmark_seconds"] = (_dt.datetime.now(_dt.timezone.utc)
                                         - started).total_seconds()

    print()
    print(plain_table(table_rows(report, rate)))
    print()
    for line in summary_lines(report, rate):
        print(line)

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    md = out.with_suffix(".md")
    md.write_text(markdown(report, rate))
    print(f"\nwrote {out} and {md}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
