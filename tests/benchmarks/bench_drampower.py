"""DRAM energy against DRAMPower: npusim's energy of a replayed trace beside DRAMPower's on
the very same command log, for DDR4 parts of three speed bins, both densities and widths,
and an LPDDR4 part (issue 18: within 5%).

    python tests/benchmarks/bench_drampower.py --drampower /path/to/drampower_cli
    DRAMPOWER_CLI=/path/to/drampower_cli python tests/benchmarks/bench_drampower.py

Each case replays a generated memory trace on a one-channel config with the command log on,
computes npusim's DRAM core energy (activate/precharge, read, write, refresh, background:
``npusim.energy.dram``, from the controller's own counters), writes the log as DRAMPower's
CSV (``timestamp,command,rank,bankgroup,bank,row,column[,data]``, ``END`` at the run's last
cycle) and the standard as a DRAMPower memspec (the same currents, voltages and timings, one
device type with the rank's device count, bank-wise factor rho = 1), runs DRAMPower's CLI on
them and compares core energies component by component. I/O energy is left out of the
comparison: npusim prices it per bit, DRAMPower from data toggles and termination.

Without a DRAMPower binary the DRAMPower columns are skipped (npusim's numbers are still
printed). DRAMPower is a reference tool built outside the repository (never committed); see
tests/benchmarks/README.md. Results: results/benchmarks/drampower.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "results" / "benchmarks" / "drampower.json"
TOLERANCE = 0.05
COMMAND_NAMES = {0: "ACT", 1: "PRE", 2: "PREA", 3: "RD", 4: "WR", 5: "RDA", 6: "WRA", 7: "REFA"}

# (part, controller setting): open page, closed page (RDA / WRA: auto-precharge), two ranks
CASES = (
    ("DDR4-2400R_8Gb_x8", "open page", ()),
    ("DDR4-2400R_8Gb_x8", "closed page", ("memory.controller.page_policy=closed",)),
    ("DDR4-2400R_8Gb_x8", "2 ranks", ("memory.ranks=2",)),
    ("DDR4-3200AA_8Gb_x16", "open page", ()),  # two bank groups, the 3200 bin
    ("DDR4-1600K_8Gb_x8", "open page", ()),
    ("DDR4-2400R_4Gb_x16", "closed page", ("memory.controller.page_policy=closed",)),
    ("LPDDR4-3200_8Gb_x16", "open page", ()),
    ("LPDDR4-3200_8Gb_x16", "closed page", ("memory.controller.page_policy=closed",)),
)
TRACES = ("random", "streaming", "mixed_locality", "sparse", "model:tiny_cnn")


def make_trace(kind: str, n: int, seed: int, req: int) -> tuple[np.ndarray, np.ndarray]:
    """Addresses and write flags of a synthetic trace: ``random`` over 1 GiB (conflicts),
    ``streaming`` sequential reads then writes (row hits), ``mixed_locality`` short runs at
    random places, ``sparse`` a twentieth as many random reads (a short run in which
    refresh is a larger share)."""
    rng = np.random.default_rng(seed)
    if kind == "random":
        addrs = rng.integers(0, 1 << 30, n) // req * req
        writes = (rng.random(n) < 0.3).astype(np.int64)
    elif kind == "streaming":
        addrs = np.arange(n, dtype=np.int64) * req
        writes = (np.arange(n) >= n * 2 // 3).astype(np.int64)
    elif kind == "mixed_locality":
        starts = rng.integers(0, 1 << 28, n // 16 + 1) // 4096 * 4096
        addrs = (starts[:, None] + np.arange(16)[None, :] * req).reshape(-1)[:n]
        writes = (rng.random(n) < 0.25).astype(np.int64)
    else:
        addrs = rng.integers(0, 1 << 30, n) // req * req
        writes = np.zeros(n, dtype=np.int64)
    return addrs.astype(np.int64), writes


def npusim_case(part: str, overrides: tuple, kind: str, n: int) -> dict:
    from npusim.config import load_config
    from npusim.dram import load_standard
    from npusim.dram.replay import replay_requests
    from npusim.energy.dram import counts_from_state, dram_energy
    from npusim.kernels import state as ks

    cfg = load_config("mobile", [f"memory.standard={part}", "memory.channels=1",
                                 "memory.ranks=1", *overrides])
    std = load_standard(part)
    t0 = time.perf_counter()
    if kind.startswith("model:"):  # an NPU run of a bundled model, its own command log
        from npusim.engine import run_program
        from npusim.frontend import load_model, resolve_model_path
        from npusim.lowering import lower_graph

        prog = lower_graph(load_model(resolve_model_path(kind[6:])), cfg)
        raw = run_program(prog, cfg, log_commands=1 << 22)
        st = raw.state
        end = -(-int(st.glob[ks.G_END]) // raw.timebase.mem_period)
        n = int(sum(st.mem.dch[ks.DC_READS] + st.mem.dch[ks.DC_WRITES]))
    else:
        addrs, writes = make_trace(kind, n, seed=TRACES.index(kind), req=cfg.dma.request_bytes)
        stats, st = replay_requests(cfg, addrs, writes, log_commands=8 * n + 1000)
        end = int(st.glob[ks.G_END])
    wall = time.perf_counter() - t0
    log = st.mem.cmd_log[:, :int(st.mem.ctl[ks.MC_LOG_N])]
    assert int(st.mem.ctl[ks.MC_LOG_LOST]) == 0
    e = dram_energy(std, counts_from_state(st.mem, cfg, std, end))
    return dict(cfg=cfg, std=std, log=log, end=end, energy=e, wall=wall,
                commands=int(log.shape[1]), requests=n, dram_cycles=end)


def write_drampower_inputs(case: dict, workdir: Path) -> tuple[Path, Path, Path]:
    """DRAMPower's CSV trace, memspec and CLI config for one npusim run."""
    std, log, end = case["std"], case["log"], case["end"]
    pw = std.power
    devices = std.channel_dq_bits // pw.device_dq_bits
    data = "0x" + "00" * (pw.device_dq_bits * std.burst_length // 8)
    lines = []
    for i in range(log.shape[1]):
        cmd = COMMAND_NAMES[int(log[7, i])]
        row = max(int(log[5, i]), 0)
        col = max(int(log[6, i]), 0)
        # DRAMPower numbers banks within the rank; npusim logs the bank within its group
        bank = int(log[3, i]) * std.banks_per_group + int(log[4, i])
        line = f"{int(log[0, i])},{cmd},{int(log[2, i])},{int(log[3, i])},{bank},{row},{col}"
        if cmd in ("RD", "WR", "RDA", "WRA"):
            line += f",{data}"
        lines.append(line)
    lines.append(f"{end},END,0,0,0,0,0")
    csv = workdir / f"{std.name}.csv"
    csv.write_text("\n".join(lines) + "\n")
    t = std.timing
    tck = 1e-6 / std.freq_mhz
    dom = {d.name: d for d in pw.domains}
    arch = {"nbrOfChannels": 1, "nbrOfColumns": std.columns, "nbrOfRows": std.rows,
            "width": pw.device_dq_bits, "burstLength": std.burst_length,
            "maxBurstLength": std.burst_length, "dataRate": 2,
            "nbrOfBankGroups": std.bank_groups, "nbrOfBanks": std.banks,
            "nbrOfRanks": case["cfg"].memory.ranks,
            "nbrOfDevices": devices}
    imp = {k: v for k in ("ck", "cb", "rb", "wb", "dqs")
           for k, v in ((f"C_total_{k}", 1e-12), (f"R_eq_{k}", 1e6))}
    if std.family == "DDR4":
        vdd, vpp = dom["vdd"], dom.get("vpp")
        power = {"vdd": vdd.volts, "idd0": vdd.idd0, "idd2n": vdd.idd2n, "idd3n": vdd.idd3n,
                 "idd4r": vdd.idd4r, "idd4w": vdd.idd4w, "idd5B": vdd.idd5b,
                 "idd5F2": vdd.idd5b, "idd5F4": vdd.idd5b, "idd6n": vdd.idd6,
                 "idd2p": vdd.idd2p, "idd3p": vdd.idd3p, "iBeta_vdd": vdd.ibeta,
                 "vpp": vpp.volts if vpp else 0.0, "vddq": 1.2}
        for k, c in (("ipp0", "idd0"), ("ipp2n", "idd2n"), ("ipp3n", "idd3n"),
                     ("ipp4r", "idd4r"), ("ipp4w", "idd4w"), ("ipp5B", "idd5b"),
                     ("ipp5F2", "idd5b"), ("ipp5F4", "idd5b"), ("ipp6n", "idd6"),
                     ("ipp2p", "idd2p"), ("ipp3p", "idd3p")):
            power[k] = getattr(vpp, c) if vpp else 0.0
        power["iBeta_vpp"] = vpp.ibeta if vpp else 0.0
        timing = {"tCK": tck, "RAS": t["RAS"], "RC": t["RC"], "RCD": t["RCD"], "RL": t["CL"],
                  "RTP": t["RTP"], "WL": t["CWL"], "WR": t["WR"], "RFC1": t["RFC"],
                  "RFC2": t["RFC"], "RFC4": t["RFC"], "RP": t["RP"], "REFI": t["REFI"],
                  "CCD_S": t["CCD_S"], "CCD_L": t["CCD_L"], "FAW": t["FAW"],
                  "RRD_S": t["RRD_S"], "RRD_L": t["RRD_L"], "WTR_S": t["WTR_S"],
                  "WTR_L": t["WTR_L"], "AL": 0, "RTRS": t["RTRS"]}
        for k in ("CKE", "CKESR", "RPRE", "WPRE", "XP", "XS", "REFM", "DQSCK", "XPDLL",
                  "XSDLL", "ACTPDEN", "PRPDEN", "REFPDEN"):
            timing[k] = 0
        arch["RefMode"] = 1
        spec = {"memoryId": std.name, "memoryType": "DDR4", "memarchitecturespec": arch,
                "mempowerspec": power, "memtimingspec": timing,
                "bankwisespec": {"factRho": 1.0}, "memimpedancespec": imp,
                # DQS pre/postambles: interface energy only (not compared)
                "prepostamble": {"read_zeroes": 0, "write_zeroes": 0, "read_ones": 0,
                                 "write_ones": 0, "read_zeroes_to_ones": 0,
                                 "write_zeroes_to_ones": 0, "write_ones_to_zeroes": 0,
                                 "read_ones_to_zeroes": 0, "readMinTccd": 0,
                                 "writeMinTccd": 0}}
    else:
        d1, d2 = dom["vdd1"], dom["vdd2"]
        power = {"vddq": 1.1}
        for i, d in ((1, d1), (2, d2)):
            power.update({f"vdd{i}": d.volts, f"idd0{i}": d.idd0, f"idd2n{i}": d.idd2n,
                          f"idd3n{i}": d.idd3n, f"idd4r{i}": d.idd4r, f"idd4w{i}": d.idd4w,
                          f"idd5{i}": d.idd5b, f"idd5pb{i}": d.idd5b, f"idd6{i}": d.idd6,
                          f"idd2p{i}": d.idd2p, f"idd3p{i}": d.idd3p,
                          f"iBeta_vdd{i}": d.ibeta})
        timing = {"tCK": tck, "RAS": t["RAS"], "RCD": t["RCD"], "RL": t["CL"],
                  "REFI": t["REFI"], "REFIpb": t["REFI"] // 8, "RFCpb": t["RFC"] // 2,
                  "RFCab": t["RFC"], "RPpb": t["RP"], "RPab": t.get("RPab", t["RP"]),
                  "RCpb": t["RC"], "RCab": t["RC"], "FAW": t["FAW"], "RTP": t["RTP"],
                  "WL": t["CWL"], "WR": t["WR"], "RTRS": t["RTRS"]}
        for k in ("CKE", "ESCKE", "CMDCKE", "REFM", "PPD", "RRD", "CCD", "CCDMW", "RPST",
                  "DQSCK", "DQSS", "DQS2DQ", "WPRE", "WTR", "XP", "SR", "XSR"):
            timing.setdefault(k, 0)
        spec = {"memoryId": std.name, "memoryType": "LPDDR4", "memarchitecturespec": arch,
                "mempowerspec": power, "memtimingspec": timing,
                "bankwisespec": {"factRho": 1.0, "factSigma": 1.0, "pasrMode": 0,
                                 "hasPASR": False},
                "memimpedancespec": imp}
    memspec = workdir / f"{std.name}.json"
    memspec.write_text(json.dumps({"memspec": spec}, indent=1))
    config = workdir / "cliconfig.json"
    config.write_text(json.dumps({"useToggleRate": False}))
    return csv, memspec, config


def run_drampower(binary: str, case: dict, workdir: Path) -> dict:
    csv, memspec, config = write_drampower_inputs(case, workdir)
    out = workdir / f"{case['std'].name}_out.json"
    out.touch()  # the CLI insists that its output file exists
    t0 = time.perf_counter()
    p = subprocess.run([binary, "-c", str(config), "-t", str(csv), "-m", str(memspec),
                        "-j", str(out)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"DRAMPower failed: {p.stdout[-500:]} {p.stderr[-500:]}")
    j = json.loads(out.read_text())["CoreEnergy"]
    banks = j["BankEnergy"] if "BankEnergy" in j else next(v for v in j.values()
                                                           if isinstance(v, list))
    s = {k: sum(b[k] for b in banks) for k in banks[0] if k not in ("Rank", "Device", "Bank")}
    comps = {
        "dram_activate": s["ACT"] + s["PRE"],
        "dram_read": s["RD"] + s["RDA"],
        "dram_write": s["WR"] + s["WRA"],
        "dram_refresh": s["REF_AB"] + s["REF_PB"] + s.get("REF_SB", 0) + s.get("REF_2B", 0),
        "dram_background": s["BG_ACT"] + s["BG_PRE"] + j["E_bg_act_shared"],
    }
    return dict(components=comps, wall=wall)


CORE = ("dram_activate", "dram_read", "dram_write", "dram_refresh", "dram_background")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drampower", default=os.environ.get("DRAMPOWER_CLI"),
                    help="path of DRAMPower's drampower_cli (or set DRAMPOWER_CLI)")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    binary = args.drampower if args.drampower and Path(args.drampower).is_file() else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for part, setting, overrides in CASES:
            for kind in TRACES:
                n = args.requests // 20 if kind == "sparse" else args.requests
                case = npusim_case(part, overrides, kind, n)
                ours = {c: case["energy"][c] for c in CORE}
                row = dict(part=part, setting=setting, trace=kind, requests=case["requests"],
                           commands=case["commands"], dram_cycles=case["dram_cycles"],
                           npusim_j=ours, npusim_core_j=sum(ours.values()),
                           npusim_io_j=case["energy"]["dram_io"])
                if binary:
                    ref = run_drampower(binary, case, Path(tmp))
                    theirs = ref["components"]
                    row.update(drampower_j=theirs, drampower_core_j=sum(theirs.values()),
                               drampower_wall_seconds=ref["wall"])
                    row["error_percent"] = 100 * (row["npusim_core_j"] / row["drampower_core_j"] - 1)
                    row["component_error_percent"] = {
                        c: (100 * (ours[c] / theirs[c] - 1) if theirs[c] else None) for c in CORE}
                    row["within_tolerance"] = abs(row["error_percent"]) <= 100 * TOLERANCE
                rows.append(row)
                print(_line(row), flush=True)
    meta = dict(generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                drampower=binary or "skipped (no --drampower / DRAMPOWER_CLI)",
                tolerance_percent=100 * TOLERANCE, python=sys.version.split()[0])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(_markdown(meta, rows))
    return 0


def _line(r: dict) -> str:
    s = f"{r['part']:20s} {r['setting']:12s} {r['trace']:15s} {r['commands']:7d} cmds  npusim {r['npusim_core_j']*1e6:10.3f} uJ"
    if "drampower_core_j" in r:
        s += f"  DRAMPower {r['drampower_core_j']*1e6:10.3f} uJ  {r['error_percent']:+.3f}%"
    return s


def _markdown(meta: dict, rows: list[dict]) -> str:
    out = ["# DRAM energy: npusim vs DRAMPower on the same command logs", "",
           f"Generated by `python tests/benchmarks/bench_drampower.py` on {meta['generated']}; "
           f"DRAMPower: `{meta['drampower']}`. Core energy (activate + precharge, read, write, "
           f"refresh, background) of one channel, in microjoules; I/O energy is not compared "
           f"(npusim: per bit, DRAMPower: from data toggles). Tolerance: "
           f"{meta['tolerance_percent']:.0f}%.", "",
           "| part | controller | trace | commands | DRAM cycles | npusim uJ | DRAMPower uJ | "
           "error % | act+pre % | read % | write % | refresh % | background % |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ce = r.get("component_error_percent", {})
        f = (lambda c: "-" if ce.get(c) is None else f"{ce[c]:+.3f}")
        out.append(f"| {r['part']} | {r['setting']} | {r['trace']} | {r['commands']:,} | {r['dram_cycles']:,} | "
                   f"{r['npusim_core_j'] * 1e6:.3f} | "
                   f"{r.get('drampower_core_j', float('nan')) * 1e6:.3f} | "
                   f"{r.get('error_percent', float('nan')):+.3f} | "
                   + " | ".join(f(c) for c in CORE) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
