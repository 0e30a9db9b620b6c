"""DRAM energy from the standard's IDD currents, by DRAMPower's method.

For each supply domain (voltage V, currents per device) and each rank, as DRAMPower
(tukl-msd/DRAMPower, ``core_calculation_DDR4.cpp`` / ``_LPDDR4.cpp``) computes it with its
bank-wise factor rho = 1, i.e. the classic Micron method:

- activate:  V (I_theta - IDD3N) tRAS per ACT, with I_theta = (IDD0 (tRAS + tRP) - IBeta tRP) / tRAS
- precharge: V (IBeta - IDD2N) tRP per bank closed (PRE, each open bank of a PREA, the
  auto-precharge of RDA / WRA); IBeta defaults to IDD0
- read / write: V (IDD4R - IDD3N) or V (IDD4W - IDD3N) over one burst (tBL) per RD(A) / WR(A)
- refresh: V (IDD5B - IDD3N) tRFC per all-bank REF
- background: V IDD3N while at least one bank of the rank is active, V IDD2N while all are
  precharged (npusim never powers down, so IDD2P/IDD3P/IDD6 never apply)

times the devices of a rank (channel data bits / ``device_dq_bits``), plus the data I/O at
``io_pj_per_bit`` per bit moved. The counts are the controller's own (``kernels/dram.py``:
commands per channel, bank closes, and each rank's active time, kept at command issue), so
contention, row-buffer conflicts and refresh are in the numbers, not averages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npusim.kernels import state as ks

DRAM_COMPONENTS = ("dram_activate", "dram_read", "dram_write", "dram_refresh",
                   "dram_background", "dram_io")


@dataclass(frozen=True)
class DramCounts:
    """What DRAM energy depends on, summed over the channels of a run."""

    activates: int
    bank_closes: int  # precharges as DRAMPower counts them
    reads: int  # RD + RDA bursts
    writes: int  # WR + WRA bursts
    refreshes: int  # all-bank REF, one per rank
    active_cycles: int  # rank-cycles with at least one bank active
    rank_cycles: int  # ranks x channels x DRAM cycles of the run
    bytes_moved: int  # bytes on the data bus


def rank_active_cycles(drank: np.ndarray, end: int) -> np.ndarray:
    """Each rank's active cycles up to DRAM cycle ``end``: what the kernel summed at command
    issue, plus the stretch from its last command to ``end`` (``kernels/dram.py``
    ``_bank_state_time``)."""
    mark = drank[ks.RK_ACTIVE_MARK]
    tail = np.where(drank[ks.RK_OPEN_BANKS] > 0, end - mark,
                    np.clip(np.minimum(end, drank[ks.RK_ACTIVE_UNTIL]) - mark, 0, None))
    return drank[ks.RK_ACTIVE_CYCLES] + np.maximum(tail, 0)


def counts_from_state(mem, cfg, std, end: int) -> DramCounts:
    """Counts of a run from the memory unit's final tables (``State.mem``); ``end`` is the
    run's DRAM cycle."""
    n = cfg.memory.channels
    dch = mem.dch[:, :n]
    drank = mem.drank[:, :n, :cfg.memory.ranks]
    # an auto-precharge that falls after the end of the run has not happened yet
    late = int((mem.dbank[ks.B_AUTO_CLOSE, :n] > end).sum())
    return DramCounts(
        activates=int(dch[ks.DC_ACTS].sum()),
        bank_closes=int(dch[ks.DC_BANK_CLOSES].sum()) - late,
        reads=int(dch[ks.DC_RD_CMDS].sum() + dch[ks.DC_RDA_CMDS].sum()),
        writes=int(dch[ks.DC_WR_CMDS].sum() + dch[ks.DC_WRA_CMDS].sum()),
        refreshes=int(dch[ks.DC_REFS].sum()),
        active_cycles=int(rank_active_cycles(drank, end).sum()),
        rank_cycles=int(n * cfg.memory.ranks * end),
        bytes_moved=int((dch[ks.DC_RD_CMDS] + dch[ks.DC_WR_CMDS] + dch[ks.DC_RDA_CMDS]
                         + dch[ks.DC_WRA_CMDS]).sum()) * std.burst_bytes,
    )


def per_action_joules(std) -> dict[str, float]:
    """Joules of one action of each kind for one rank (all its devices), and of one cycle of
    active / precharged background; DRAMPower's formulas summed over the supply domains."""
    pw = std.power
    t = std.timing
    tck = 1e-6 / std.freq_mhz
    t_ras, t_rp, t_rfc, t_bl = t["RAS"] * tck, t["RP"] * tck, t["RFC"] * tck, t["BL"] * tck
    devices = std.channel_dq_bits / pw.device_dq_bits
    out = dict.fromkeys(("activate", "precharge", "read", "write", "refresh",
                         "active_cycle", "precharged_cycle"), 0.0)
    for d in pw.domains:
        i_theta = (d.idd0 * (t_ras + t_rp) - d.ibeta * t_rp) / t_ras
        out["activate"] += d.volts * (i_theta - d.idd3n) * t_ras
        out["precharge"] += d.volts * (d.ibeta - d.idd2n) * t_rp
        out["read"] += d.volts * (d.idd4r - d.idd3n) * t_bl
        out["write"] += d.volts * (d.idd4w - d.idd3n) * t_bl
        out["refresh"] += d.volts * (d.idd5b - d.idd3n) * t_rfc
        out["active_cycle"] += d.volts * d.idd3n * tck
        out["precharged_cycle"] += d.volts * d.idd2n * tck
    return {k: v * devices for k, v in out.items()}


def dram_energy(std, c: DramCounts) -> dict[str, float]:
    """Joules by component (``DRAM_COMPONENTS``) for the counts of a run."""
    e = per_action_joules(std)
    return {
        "dram_activate": c.activates * e["activate"] + c.bank_closes * e["precharge"],
        "dram_read": c.reads * e["read"],
        "dram_write": c.writes * e["write"],
        "dram_refresh": c.refreshes * e["refresh"],
        "dram_background": (c.active_cycles * e["active_cycle"]
                            + (c.rank_cycles - c.active_cycles) * e["precharged_cycle"]),
        "dram_io": c.bytes_moved * 8 * std.power.io_pj_per_bit * 1e-12,
    }
