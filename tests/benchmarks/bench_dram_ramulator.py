"""npusim's cycle-level DRAM beside Ramulator 2 on the very same request traces.

    python tests/benchmarks/bench_dram_ramulator.py --ramulator /path/to/ramulator2
    RAMULATOR2=/path/to/ramulator2 python tests/benchmarks/bench_dram_ramulator.py

Every case generates one request trace (sequential reads, random reads, random 80/20
reads/writes, a 4 KiB stride) and runs it through ``npusim.dram.replay.replay_requests``
(the path of ``npusim dram TRACE``) and through Ramulator 2's stock binary, each set up as
the same memory: one DDR4-2400R 8Gb x8 channel (64 B requests) or one HBM2 pseudo channel
(2 Gb/s, 32 B requests, the ns timings of ``HBM2-2000_8Gb_x128``); the generic controller
with FR-FCFS, open page, all-bank refresh, 32-entry read and write queues drained between
80% and 20%; the address cut row | bank | bank group | rank | column | channel from the
most significant bit (Ramulator's ``RoBaRaCoCh``, npusim's ``RoBaBgRaCoCh``). Ramulator's
timing preset is loaded and every value npusim's speed bin has is set on top of it, so
both run the same numbers (``PRESET_DIFFERENCES`` in the output lists where Ramulator's own
preset differs).

How Ramulator is driven (read from its sources, commit ``be93be7``): the LoadStoreTrace
front end at clock ratio 1 offers one request per DRAM cycle and retries the same request
until the controller takes it (the fastest issue its trace front ends allow: the request
queue stays full), and the run ends the cycle the front end has *sent* its last request.
So that the measured channel drains completely, Ramulator runs a second channel (channel
bit 0 of its address, ``RoBaRaCoCh`` puts it lowest) and the trace ends with a tail of
sequential reads to channel 1 only; channel 0 is the memory measured. Its controller's
``TraceRecorder`` plugin logs channel 0's commands; the finish cycle is the last column
command's data end (RD + CL + BL, WR + CWL + BL), as npusim's is its last response.
Row hits / misses / conflicts, read count and the summed read latency are Ramulator's own
channel-0 statistics.

Without a Ramulator 2 binary its columns are skipped. Ramulator is a reference tool built
outside the repository (never committed). Results: results/benchmarks/dram_ramulator.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "results" / "benchmarks" / "dram_ramulator.json"
SEED = 20261125
SPAN_BYTES = 1 << 30          # random traffic is uniform over 1 GiB of the channel
STRIDE_BYTES = 4096
TAIL_REQUESTS = 4096          # Ramulator's channel-1 tail that keeps the run going
NOTABLE = 0.03                # differences above this are explained in the results file

# npusim timing name -> Ramulator 2 timing name, per family
DDR4_TIMINGS = {"CL": "nCL", "CWL": "nCWL", "RCD": "nRCD", "RP": "nRP", "RAS": "nRAS",
                "RC": "nRC", "BL": "nBL", "CCD_S": "nCCDS", "CCD_L": "nCCDL", "RRD_S": "nRRDS",
                "RRD_L": "nRRDL", "FAW": "nFAW", "WR": "nWR", "WTR_S": "nWTRS",
                "WTR_L": "nWTRL", "RTP": "nRTP", "RTRS": "nCS", "RFC": "nRFC", "REFI": "nREFI"}
HBM2_TIMINGS = {"CL": "nCL", "CWL": "nCWL", "RCD": "nRCDRD", "RCDWR": "nRCDWR", "RP": "nRP",
                "RAS": "nRAS", "RC": "nRC", "BL": "nBL", "CCD_S": "nCCDS", "CCD_L": "nCCDL",
                "RRD_S": "nRRDS", "RRD_L": "nRRDL", "FAW": "nFAW", "WR": "nWR",
                "WTR_S": "nWTRS", "WTR_L": "nWTRL", "RTP": "nRTPL", "RFC": "nRFC",
                "REFI": "nREFI"}
# Ramulator 2's own values of its presets (src/dram/impl/DDR4.cpp, HBM2.cpp at be93be7,
# with the x8 tRRD/tFAW tables, its tRFC table and its JEDEC_rounding of tRFC / tREFI).
RAMULATOR_PRESETS = {
    "DDR4_2400R": {"nCL": 16, "nCWL": 12, "nRCD": 16, "nRP": 16, "nRAS": 39, "nRC": 55,
                   "nBL": 4, "nCCDS": 4, "nCCDL": 6, "nRRDS": 4, "nRRDL": 6, "nFAW": 26,
                   "nWR": 18, "nWTRS": 3, "nWTRL": 9, "nRTP": 9, "nCS": 2,
                   "nRFC": 433, "nREFI": 9364, "tCK_ps": 833},
    "HBM2_2Gbps": {"nCL": 7, "nCWL": 2, "nRCDRD": 7, "nRCDWR": 7, "nRP": 7, "nRAS": 17,
                   "nRC": 19, "nBL": 4, "nCCDS": 1, "nCCDL": 2, "nRRDS": 2, "nRRDL": 3,
                   "nFAW": 15, "nWR": 8, "nWTRS": 3, "nWTRL": 4, "nRTPL": 3, "nRFC": 350,
                   "nREFI": 3900, "tCK_ps": 1000},
}

STANDARDS = {
    "ddr4": dict(label="DDR4-2400R 8Gb x8, 1 channel", npusim="DDR4-2400R_8Gb_x8",
                 request_bytes=64, impl="DDR4", org="DDR4_8Gb_x8", preset="DDR4_2400R",
                 timings=DDR4_TIMINGS,
                 org_extra={"channel": 2, "rank": 1}),
    # one pseudo channel with its own controller: what an npusim HBM2 channel is (two
    # pseudo channels in one Ramulator controller would share one command bus)
    "hbm2": dict(label="HBM2 2 Gb/s 8Gb, 1 pseudo channel", npusim="HBM2-2000_8Gb_x128",
                 request_bytes=32, impl="HBM2", org="HBM2_8Gb", preset="HBM2_2Gbps",
                 timings=HBM2_TIMINGS,
                 org_extra={"channel": 2, "pseudochannel": 1, "density": 4096,
                            "channel_width": 128}),
    # one HBM2 channel as Ramulator 2 models it: two pseudo channels behind one controller
    # and one command bus; npusim: two channels (pseudo channels), the pseudo-channel bit
    # above the column as in Ramulator's RoBaRaCoCh
    "hbm2_2pc": dict(label="HBM2 2 Gb/s 8Gb, 1 channel = 2 pseudo channels",
                     npusim="HBM2-2000_8Gb_x128", request_bytes=32, impl="HBM2", org="HBM2_8Gb",
                     preset="HBM2_2Gbps", timings=HBM2_TIMINGS, channels=2,
                     mapping="RoBaBgChCo",
                     org_extra={"channel": 2, "pseudochannel": 2, "channel_width": 128}),
}
PATTERNS = ("sequential", "random_read", "random_rw", "stride4k")


# --------------------------------------------------------------------------- traces


def make_trace(pattern: str, n: int, req: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """(addresses, is_write) of n requests of ``req`` bytes in one channel's address space."""
    rng = np.random.default_rng(seed)
    if pattern == "sequential":
        return np.arange(n, dtype=np.int64) * req, np.zeros(n, np.int64)
    if pattern == "stride4k":
        return np.arange(n, dtype=np.int64) * STRIDE_BYTES % SPAN_BYTES, np.zeros(n, np.int64)
    addrs = rng.integers(0, SPAN_BYTES // req, n, dtype=np.int64) * req
    if pattern == "random_read":
        return addrs, np.zeros(n, np.int64)
    if pattern == "random_rw":
        return addrs, (rng.random(n) >= 0.8).astype(np.int64)
    raise ValueError(pattern)


# --------------------------------------------------------------------------- npusim


def npusim_config(std: dict, refresh: bool = True):
    from npusim.config import load_config

    return load_config("mobile", [
        f"memory.standard={std['npusim']}", f"memory.channels={std.get('channels', 1)}",
        "memory.ranks=1", f"dma.request_bytes={std['request_bytes']}",
        f"memory.controller.address_mapping={std.get('mapping', 'RoBaBgRaCoCh')}",
        "memory.controller.page_policy=open",
        "memory.controller.read_queue=32", "memory.controller.write_queue=32",
        "memory.controller.write_high_pct=80", "memory.controller.write_low_pct=20",
        f"memory.controller.refresh={'true' if refresh else 'false'}"])


def run_npusim(std: dict, addrs: np.ndarray, writes: np.ndarray, refresh: bool = True) -> dict:
    from npusim.dram.replay import replay_requests
    from npusim.dram.standard import dram_standard

    cfg = npusim_config(std, refresh)
    t0 = time.perf_counter()
    s, _ = replay_requests(cfg, addrs, writes)
    wall = time.perf_counter() - t0
    sd = dram_standard(cfg)
    return dict(cycles=s["dram_cycles"], reads=s["reads"], writes=s["writes"],
                bytes=s["bytes_read"] + s["bytes_written"],
                tck_ns=1e3 / sd.freq_mhz, peak_gbps=cfg.memory.peak_gbps,
                avg_read_latency=s["avg_read_latency_cycles"], row_hits=s["row_hits"],
                row_misses=s["row_misses"], row_conflicts=s["row_conflicts"],
                activates=s["activates"], precharges=s["precharges"],
                refreshes=s["refreshes"], wall_seconds=wall, timing=dict(sd.timing))


# --------------------------------------------------------------------------- Ramulator


def ramulator_address(addrs: np.ndarray, req: int, channel: int) -> np.ndarray:
    """npusim's one-channel address with Ramulator's channel bit inserted just above the
    request offset (``RoBaRaCoCh`` with two channels)."""
    off = req.bit_length() - 1
    return (((addrs >> off) << 1) | channel) << off


def ramulator_yaml(std: dict, timing: dict, trace: Path, cmd_log: Path) -> str:
    org = "\n".join(f"      {k}: {v}" for k, v in std["org_extra"].items())
    tim = "\n".join(f"      {std['timings'][k]}: {v}" for k, v in sorted(timing.items())
                    if k in std["timings"])
    return f"""Frontend:
  impl: LoadStoreTrace
  clock_ratio: 1
  path: {trace}

MemorySystem:
  impl: GenericDRAM
  clock_ratio: 1
  DRAM:
    impl: {std['impl']}
    org:
      preset: {std['org']}
{org}
    timing:
      preset: {std['preset']}
{tim}
  Controller:
    impl: Generic
    Scheduler:
      impl: FRFCFS
    RefreshManager:
      impl: AllBank
    RowPolicy:
      impl: OpenRowPolicy
    plugins:
      - ControllerPlugin:
          impl: TraceRecorder
          path: {cmd_log}
  AddrMapper:
    impl: RoBaRaCoCh
"""


STAT_RE = re.compile(r"^\s*([A-Za-z_0-9]+):\s*([-0-9.eE+]+)\s*$")


def run_ramulator(binary: str, std: dict, timing: dict, addrs: np.ndarray,
                  writes: np.ndarray, workdir: Path) -> dict:
    req = std["request_bytes"]
    trace = workdir / "trace.txt"
    cmd_log = workdir / "cmds" / "log"
    main = ramulator_address(addrs, req, 0)
    tail = ramulator_address(np.arange(TAIL_REQUESTS, dtype=np.int64) * req, req, 1)
    with trace.open("w") as f:
        f.writelines(f"{'ST' if w else 'LD'} 0x{a:x}\n" for a, w in zip(main.tolist(),
                                                                    writes.tolist()))
        f.writelines(f"LD 0x{a:x}\n" for a in tail.tolist())
    cfg = workdir / "config.yaml"
    cfg.write_text(ramulator_yaml(std, timing, trace, cmd_log))
    t0 = time.perf_counter()
    proc = subprocess.run([binary, "-f", str(cfg)], capture_output=True, text=True,
                          cwd=workdir)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"ramulator2 failed ({proc.returncode}): {proc.stderr[-2000:]}")
    stats: dict[str, float] = {}
    for line in proc.stdout.splitlines():
        m = STAT_RE.match(line)
        if m:
            stats.setdefault(m.group(1), float(m.group(2)))
    log = []
    with open(f"{cmd_log}.ch0") as f:
        for line in f:
            parts = line.split(",")
            log.append((int(parts[0]), parts[1].strip()))
    cl, cwl, bl = timing["CL"], timing["CWL"], timing["BL"]
    column = [(clk, cmd) for clk, cmd in log if cmd in ("RD", "RDA", "WR", "WRA")]
    end = max(clk + (cwl if cmd.startswith("WR") else cl) + bl for clk, cmd in column)
    counts: dict[str, int] = {}
    for clk, cmd in log:  # the commands up to the last column command (not the tail's REFs)
        if clk <= column[-1][0]:
            counts[cmd] = counts.get(cmd, 0) + 1
    # Ramulator's num_read_reqs_0 counts every send attempt, refused ones included (so its
    # avg_read_latency_0 is too low under back-pressure): count the bursts the log shows
    n_reads, n_writes = counts.get("RD", 0), counts.get("WR", 0)
    want_reads = int((writes == 0).sum())
    if n_reads != want_reads or n_writes != int(writes.sum()):
        raise RuntimeError(f"Ramulator channel 0 issued {n_reads} RD / {n_writes} WR for "
                           f"{want_reads} / {int(writes.sum())} requests (not drained, or "
                           "reads forwarded from the write queue)")
    tck_ns = RAMULATOR_PRESETS[std["preset"]]["tCK_ps"] / 1e3  # its preset's clock
    return dict(cycles=end, accepted_cycle=int(stats.get("memory_system_cycles", 0)),
                reads=n_reads, writes=n_writes, bytes=(n_reads + n_writes) * req,
                tck_ns=tck_ns, avg_read_latency=stats["read_latency_0"] / n_reads,
                row_hits=int(stats["row_hits_0"]), row_misses=int(stats["row_misses_0"]),
                row_conflicts=int(stats["row_conflicts_0"]), activates=counts.get("ACT", 0),
                precharges=counts.get("PRE", 0) + counts.get("PREA", 0),
                refreshes=counts.get("REFab", 0), wall_seconds=wall)


# --------------------------------------------------------------------------- report


def derived(r: dict, peak_gbps: float) -> dict:
    """Bandwidth (each tool's own clock period), share of peak, and the mean number of reads
    inside the controller by Little's law (reads per cycle x mean read latency)."""
    seconds = r["cycles"] * r["tck_ns"] * 1e-9
    r["bandwidth_gbps"] = r["bytes"] / seconds / 1e9 if seconds else 0.0
    r["peak_fraction"] = r["bandwidth_gbps"] / peak_gbps
    r["reads_in_controller"] = (r["reads"] / r["cycles"] * r["avg_read_latency"]
                                if r["cycles"] else 0.0)
    return r


def rel(a: float, b: float) -> float | None:
    return (a - b) / b if b else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ramulator", default=os.environ.get("RAMULATOR2"),
                    help="Ramulator 2 binary (default: $RAMULATOR2; absent: npusim only)")
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--standards", default=",".join(STANDARDS))
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    binary = args.ramulator
    if binary and not Path(binary).is_file():
        print(f"Ramulator 2 binary not found: {binary}", file=sys.stderr)
        return 1

    rows = []
    preset_diffs = {}
    for key in args.standards.split(","):
        std = STANDARDS[key]
        peak = None
        for pattern in args.patterns.split(","):
            addrs, writes = make_trace(pattern, args.requests, std["request_bytes"])
            ns = run_npusim(std, addrs, writes)
            timing = ns.pop("timing")
            peak = ns["peak_gbps"]
            ns_norefresh = run_npusim(std, addrs, writes, refresh=False)
            ns_norefresh.pop("timing")
            row = dict(standard=key, label=std["label"], pattern=pattern,
                       requests=args.requests, npusim=derived(ns, peak),
                       npusim_no_refresh=derived(ns_norefresh, peak))
            if binary:
                with tempfile.TemporaryDirectory() as tmp:
                    rm = run_ramulator(binary, std, timing, addrs, writes, Path(tmp))
                row["ramulator"] = derived(rm, peak)
                row["difference"] = {k: rel(ns[k], rm[k]) for k in (
                    "cycles", "bandwidth_gbps", "avg_read_latency", "row_hits", "row_misses",
                    "row_conflicts", "activates")}
            rows.append(row)
            print(_line(row), flush=True)
        theirs = RAMULATOR_PRESETS[std["preset"]]
        preset_diffs[key] = {k: {"npusim": v, "ramulator_preset": theirs[std["timings"][k]]}
                             for k, v in timing.items() if k in std["timings"]
                             and theirs.get(std["timings"][k]) != v}
        preset_diffs[key]["tCK_ps"] = {"npusim": round(ns["tck_ns"] * 1e3, 3),
                                       "ramulator_preset": theirs["tCK_ps"]}
    meta = dict(date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                ramulator=binary, ramulator_commit="be93be7", requests=args.requests,
                tail_requests=TAIL_REQUESTS, preset_differences=preset_diffs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(dict(meta=meta, cases=rows), indent=1) + "\n")
    md = args.out.with_suffix(".md")
    md.write_text(_markdown(meta, rows))
    print(f"wrote {args.out} and {md}")
    return 0


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:+.1f}%"


def _markdown(meta: dict, rows: list[dict]) -> str:
    out = ["# npusim's DRAM beside Ramulator 2, same traces", "",
           f"`python tests/benchmarks/bench_dram_ramulator.py --ramulator <ramulator2>` "
           f"({meta['date']}; Ramulator 2 commit {meta['ramulator_commit']}, "
           f"{'binary ' + str(meta['ramulator']) if meta['ramulator'] else 'no binary: npusim only'}"
           f"; {meta['requests']:,} requests per case). How each tool is set up, how the "
           "Ramulator run is drained and measured: the script's docstring. Cycles: DRAM "
           "command-clock cycles to the last data (RD + CL + BL, WR + CWL + BL). Latency: "
           "mean read latency in cycles from entering the controller to the last data. "
           "In controller: mean reads inside the controller (Little's law, reads per cycle x "
           "latency). d: npusim relative to Ramulator.", ""]
    for key in dict.fromkeys(r["standard"] for r in rows):
        sub = [r for r in rows if r["standard"] == key]
        out += [f"## {sub[0]['label']}", "",
                "| pattern | model | cycles | GB/s | % peak | latency | in controller | "
                "hits / misses / conflicts | ACT | REF | d cycles | d latency |",
                "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
        for r in sub:
            models = [("npusim", r["npusim"]), ("npusim, refresh off", r["npusim_no_refresh"])]
            if "ramulator" in r:
                models.append(("Ramulator 2", r["ramulator"]))
            for name, m in models:
                d = ("", "")
                if "ramulator" in r and name != "Ramulator 2":
                    d = (_pct(rel(m["cycles"], r["ramulator"]["cycles"])),
                         _pct(rel(m["avg_read_latency"], r["ramulator"]["avg_read_latency"])))
                out.append(
                    f"| {r['pattern']} | {name} | {m['cycles']:,} | {m['bandwidth_gbps']:.2f} | "
                    f"{100 * m['peak_fraction']:.1f} | {m['avg_read_latency']:.1f} | "
                    f"{m['reads_in_controller']:.1f} | {m['row_hits']:,} / {m['row_misses']:,} / "
                    f"{m['row_conflicts']:,} | {m['activates']:,} | {m['refreshes']} | "
                    f"{d[0]} | {d[1]} |")
        out.append("")
    out += ["## Timing values: npusim's speed bin vs Ramulator 2's own preset", "",
            "Both tools ran npusim's values (set on top of Ramulator's preset); these are the "
            "values in which Ramulator's preset differs.", "",
            "| npusim standard | timing | npusim | Ramulator preset |", "|---|---|--:|--:|"]
    for key, diffs in meta["preset_differences"].items():
        for name, v in diffs.items():
            out.append(f"| {key} | {name} | {v['npusim']} | {v['ramulator_preset']} |")
    out += ["", NOTES]
    return "\n".join(out) + "\n"


NOTES = """## Where they differ, and why

Explained from Ramulator 2's sources (commit be93be7: src/dram_controller/impl/
generic_dram_controller.cpp, scheduler/generic_scheduler.cpp, refresh/all_bank_refresh.cpp,
rowpolicy/basic_rowpolicies.cpp, src/addr_mapper/impl/linear_mappers.cpp,
src/dram/impl/DDR4.cpp and HBM2.cpp, src/frontend/impl/memory_trace/loadstore_trace.cpp).

* **Rows opened and closed unused (fixed in npusim).** npusim used to lose a row it had just
  opened for a read when the controller flipped to draining writes (a write's PRE) or a
  refresh fell due (the PREA) before the read's column command: the read activated again
  later (on 20,000 random 80/20 requests 3.4% more ACTs than requests and 4.5% more DDR4
  cycles than Ramulator; 0.9% after the change). Ramulator moves a request whose ACT has
  issued to an "active buffer" that is served first and blocks any precharge of its bank.
  npusim now keeps such a row for its
  request (``B_OPENED_FOR``): the request joins FR-FCFS as a row hit whichever queue is being
  served and while its rank waits for refresh, no PRE or PREA closes its bank first; every
  random case now issues exactly one ACT per request, as Ramulator does.
* **HBM2 refresh: Ramulator never refreshes HBM2.** Its AllBank refresh manager sends one
  REFab per rank (``get_level_size("rank")``); the HBM2 spec has no rank level, the size is
  -1 and no refresh is ever sent (0 REFab in every HBM2 log). npusim refreshes every tREFI
  (3.9 us, tRFC 350 ns: about 9% of the time plus re-opening rows). With npusim's refresh
  off the one-pseudo-channel cases agree within about 2% in cycles.
* **Read latency: Ramulator holds more requests.** Both count from the cycle a request enters
  the controller to its last data, so at equal throughput the latency is proportional to the
  number of requests inside (Little's law; the "in controller" column). Ramulator's
  ReqBuffer accepts while ``size() <= max_size`` (33 entries for max_size 32), and a request
  whose ACT has issued leaves the read buffer for the active buffer, freeing its slot for
  one more; its arrival is also stamped one cycle before the controller first looks at it.
  npusim's queues hold exactly ``read_queue`` / ``write_queue`` requests until their last
  burst. A modeling choice of each (queue depth), not a timing difference: npusim with a
  36-entry read queue gives Ramulator's random-read latency at unchanged cycles.
  Ramulator's own ``avg_read_latency_0`` statistic is not used: it divides by
  ``num_read_reqs_0``, which counts refused send attempts too (the script counts RD commands).
* **Row hits on the 4 KiB stride (DDR4).** Each 8 KiB row is read twice (columns 0 and 64);
  Ramulator closes about a quarter of these rows before their second read, which then finds
  its bank closed (a miss and one more ACT: 11,743 misses, 61,662 ACTs for 100,000 reads).
  Its controller serves a request whose ACT has issued (the active buffer) before any older
  row hit, and otherwise takes the oldest request whose next command is ready, with no
  preference for row hits. Its log shows the pattern: the second read of a row, ready at
  cycle 45, loses to activated requests of younger rows, and at cycle 52 the PRE of a
  request 32 places younger (the same bank's next row, already queued) closes its row.
  npusim's FR-FCFS takes the oldest row hit legal at the earliest cycle, and an activated
  request only as the row hit it is, so it keeps every pair (50,000 hits with refresh off).
  The data bus is the bottleneck here, so the cycles agree to 0.7%.
* **Two pseudo channels (hbm2_2pc).** Ramulator models an HBM2 channel as one controller
  with one command bus for both pseudo channels (one command per cycle, ACT taking the bus
  two cycles, a shared 32-entry read queue); npusim makes each pseudo channel an independent
  channel with its own controller and command bus. In JESD235's pseudo-channel mode the two
  pseudo channels of a channel share its row and column command pins (separate row and
  column buses, so one row and one column command may go in the same cycle; to be
  confirmed against the standard's text): on random traffic (ACT, two row-bus cycles, and
  PRE, one, per request) that shared row bus allows at most one random request per 3
  cycles per channel; Ramulator's single bus gives one per 3.6 (362,651 cycles for 100,000),
  npusim's independent pseudo channels one per 2.2 (217,600 with refresh off). npusim is
  optimistic for random traffic on HBM2; not changed here (it couples the two pseudo
  channels' controllers: a kernel change of its own, with its own census).
* **Write drain.** Ramulator enters write mode when its write buffer holds more than 80%
  of 32 (26) or no read waits, and leaves below 20% (6) once a read waits; npusim at 25 and
  at 6. With the 33rd buffer entry this explains the remaining 1-2% on random 80/20.
* **Address mapping.** Ramulator's RoBaRaCoCh puts, from the least significant bit, channel,
  column, then rank, bank group, bank, row (its levels in order); that is npusim's
  ``RoBaBgRaCoCh`` (npusim's default ``RoBaRaCoBgCh`` alternates bank groups under the
  column instead, which is why the sequential cases here run at tCCD_L on one bank group).
* **Timing presets.** Ramulator's DDR4_2400R preset with 8 Gb x8 matches npusim's
  DDR4-2400R_8Gb_x8 but for tRFC (its table has 360 ns for 8 Gb, JESD79-4 says 350 ns) and
  tREFI (rounded from tCK 833 ps). Its only HBM2 preset, HBM2_2Gbps, has most core timings
  at half their ns value (nCL 7 at 1 GHz: 7 ns where JESD235 parts have 14 ns) and nBL 4
  (BL4 takes 2 clocks at DDR), halving a pseudo channel's bandwidth; the runs above use
  npusim's values.
* **Effect of the fix on the bundled models** (``python tests/benchmarks/census.py --cases
  models,engine`` at 1adb3a5 and at 6de5e38; every Gemmini case identical, no DRAM there):

  | case | cycles before | after | change | ACTs before | after | read latency before | after |
  |---|--:|--:|--:|--:|--:|--:|--:|
  | models/resnet50/batch=1/server | 677,701 | 673,500 | -0.620% | 228,667 | 203,407 | 254.5 | 249.1 |
  | models/resnet50/batch=8/server | 3,773,384 | 3,773,689 | +0.008% | 2,119,755 | 2,009,103 | 254.1 | 253.1 |
  | models/resnet18/batch=1/server | 364,166 | 363,929 | -0.065% | 56,154 | 50,466 | 247.1 | 244.8 |
  | models/mobilenetv2/batch=1/server | 172,242 | 170,525 | -0.997% | 55,128 | 48,647 | 195.6 | 190.5 |
  | models/bert_base/batch=1/seq=512/server | 3,838,919 | 3,822,854 | -0.418% | 3,695,035 | 3,445,545 | 256.1 | 255.1 |
  | models/resnet50/batch=1/mobile | 23,403,312 | 23,310,768 | -0.395% | 423,304 | 395,827 | 165.7 | 164.9 |
  | models/resnet50/batch=8/mobile | 178,425,984 | 178,194,646 | -0.130% | 3,312,154 | 3,248,204 | 166.5 | 165.9 |
  | models/resnet18/batch=1/mobile | 8,911,278 | 8,912,937 | +0.019% | 109,397 | 113,914 | 167.2 | 168.3 |
  | models/mobilenetv2/batch=1/mobile | 3,865,871 | 3,853,664 | -0.316% | 67,754 | 61,962 | 188.0 | 185.2 |
  | models/bert_base/batch=1/seq=512/mobile | 265,289,201 | 265,784,996 | +0.187% | 3,792,628 | 3,715,479 | 159.2 | 159.4 |
  | matmul_512x768x768 | 1,319,953 | 1,322,619 | +0.202% | 11,457 | 11,726 | 157.2 | 157.3 |
  | matmul_1024 | 30,583 | 30,575 | -0.026% | 11,436 | 10,741 | 263.2 | 262.0 |
  | conv_resnet18_layer1 | 466,058 | 466,058 | +0.000% | 1,229 | 1,236 | 146.3 | 146.3 |
  | tiny_cnn | 64,367 | 64,437 | +0.109% | 798 | 638 | 173.7 | 174.1 |

* **Frontend.** LoadStoreTrace offers one request per cycle and retries a refused one, so
  the controller queue stays full, as npusim's replay (which may enter several in one
  cycle) does; both stop a stream at the first request that finds its queue full.
"""


def _fmt(r: dict) -> str:
    return (f"{r['cycles']:>9,} cyc {r['bandwidth_gbps']:6.2f} GB/s ({100 * r['peak_fraction']:4.1f}%)"
            f" lat {r['avg_read_latency']:7.1f}  h/m/c {r['row_hits']}/{r['row_misses']}/"
            f"{r['row_conflicts']}")


def _line(row: dict) -> str:
    s = f"{row['standard']:5} {row['pattern']:12} npusim    {_fmt(row['npusim'])}"
    if "ramulator" in row:
        d = row["difference"]
        s += (f"\n{'':18} ramulator {_fmt(row['ramulator'])}\n{'':18} diff cycles "
              f"{100 * d['cycles']:+.2f}%  latency {100 * (d['avg_read_latency'] or 0):+.2f}%")
    return s


if __name__ == "__main__":
    sys.exit(main())
