"""A DRAM config compiled for the kernel: the controller's scalar parameters (``d_*`` of
``Params``) and the read-only ``MemTables`` (timing rules as dense delay tables, windowed
rules, address mapping, channel hash), built once per run from the standard
(``npusim.dram.standard``) and the config. Nothing here imports numba."""

from __future__ import annotations

import numpy as np

from npusim.config import NpuConfig
from npusim.dram.addressing import field_table, ipoly_table, log2_exact
from npusim.dram.standard import dram_standard
from npusim.errors import NpusimError
from npusim.kernels import state as ks
from npusim.kernels.names import COMMANDS, LV_BANK, LV_BANKGROUP, LV_CHANNEL, LV_RANK, PREA, REF

N_COMMANDS = len(COMMANDS)


def dram_params(cfg: NpuConfig) -> dict[str, int]:
    """The ``d_*`` Params of a "dram" config (placeholders otherwise: no DRAM state is used)."""
    std = dram_standard(cfg)
    if std is None:
        names = ("d_ranks", "d_bankgroups", "d_banks", "d_cl", "d_cwl", "d_bl", "d_refi",
                 "d_refresh", "d_closed_page", "d_rq", "d_wq", "d_wq_high", "d_wq_low",
                 "d_bursts", "d_burst_bits", "d_bpr_bits", "d_ipoly", "d_ras", "d_rfc",
                 "d_close_rd", "d_close_wr")
        return {n: 1 for n in names}
    ctl = cfg.memory.controller
    t = std.timing
    bursts = max(1, cfg.dma.request_bytes // std.burst_bytes)
    return dict(
        d_ranks=cfg.memory.ranks, d_bankgroups=std.bank_groups, d_banks=std.banks_per_group,
        d_cl=t["CL"], d_cwl=t["CWL"], d_bl=t["BL"], d_refi=t["REFI"],
        d_refresh=int(ctl.refresh), d_closed_page=int(ctl.page_policy == "closed"),
        d_rq=ctl.read_queue, d_wq=ctl.write_queue,
        d_wq_high=max(1, ctl.write_queue * ctl.write_high_pct // 100),
        d_wq_low=ctl.write_queue * ctl.write_low_pct // 100,
        d_bursts=bursts, d_burst_bits=std.burst_bytes.bit_length() - 1,
        d_bpr_bits=bursts.bit_length() - 1, d_ipoly=int(ctl.channel_hash == "ipoly"),
        d_ras=t["RAS"], d_rfc=t["RFC"], d_close_rd=std.auto_precharge_cycles("RD"),
        d_close_wr=std.auto_precharge_cycles("WR"),
    )


def memory_tables(cfg: NpuConfig) -> ks.MemTables:
    """Timing rules and address mapping of a "dram" config (placeholders otherwise)."""
    std = dram_standard(cfg)
    if std is None:
        nc = N_COMMANDS
        return ks.MemTables(np.zeros((nc, 2, nc), np.int64), np.zeros((nc, 3, nc), np.int64),
                            np.zeros((nc, 2, nc), np.int64), np.zeros(nc, np.int64),
                            np.zeros((1, ks.N_WINDOW_FIELDS), np.int64),
                            np.zeros(nc + 1, np.int64), np.zeros((6, 2), np.int64),
                            np.zeros(1, np.int64))
    r = std.rule_arrays()
    delay_rank, delay_group, delay_bank, spread = _delay_tables(r)
    # windowed rules (tFAW-like) stay a list: they depend on the last few commands
    w = np.flatnonzero(r["window"] > 1)
    windows = np.zeros((max(len(w), 1), ks.N_WINDOW_FIELDS), dtype=np.int64)
    for col, key in ((ks.W_NEXT, "next"), (ks.W_LEVEL, "level"), (ks.W_LAT, "latency"),
                     (ks.W_SIZE, "window")):
        windows[:len(w), col] = r[key][w]
    for row, k in enumerate(w):
        windows[row, ks.W_RELS] = sum(1 << rel for rel in _relations(
            r["level"][k], r["sibling"][k], r["prev"][k] in (PREA, REF)))
    window_start = np.concatenate(
        [[0], np.cumsum(np.bincount(r["prev"][w], minlength=N_COMMANDS))]).astype(np.int64)
    bursts = max(1, cfg.dma.request_bytes // std.burst_bytes)
    row_bursts = std.columns // std.burst_length
    if bursts > row_bursts:
        raise NpusimError(f"dma.request_bytes = {cfg.dma.request_bytes} spans more than one "
                          f"DRAM row of {std.name} ({row_bursts * std.burst_bytes} B)")
    ctl = cfg.memory.controller
    widths = {
        "Ch": log2_exact(cfg.memory.channels, "memory.channels"),
        "Co": log2_exact(row_bursts, f"{std.name} bursts per row") - (bursts.bit_length() - 1),
        "Ra": log2_exact(cfg.memory.ranks, "memory.ranks"),
        "Ba": log2_exact(std.banks_per_group, f"{std.name} banks per group"),
        "Bg": log2_exact(std.bank_groups, f"{std.name} bank groups"),
        "Ro": log2_exact(std.rows, f"{std.name} rows"),
    }
    ipoly = (ipoly_table(cfg.memory.channels) if ctl.channel_hash == "ipoly"
             else np.zeros(1, np.int64))
    return ks.MemTables(delay_rank, delay_group, delay_bank, spread, windows, window_start,
                        field_table(ctl.address_mapping, widths), ipoly)


def _relations(level: int, sibling: bool, rank_wide: bool) -> tuple[int, ...]:
    """The bank groups (REL_SAME_GROUP, REL_SAME_RANK, REL_OTHER_RANK) or, for a bank-level
    rule, the banks (REL_SAME_BANK, REL_OTHER_BANK) a rule reaches, by how they stand to the
    target of its prev command. A rank-wide prev (PREA, REF) targets every group and bank
    of its rank."""
    if level == LV_CHANNEL:
        return ks.REL_SAME_GROUP, ks.REL_SAME_RANK, ks.REL_OTHER_RANK
    if level == LV_RANK:
        return (ks.REL_OTHER_RANK,) if sibling else (ks.REL_SAME_GROUP, ks.REL_SAME_RANK)
    if level == LV_BANKGROUP:
        return (ks.REL_SAME_RANK,) if sibling and not rank_wide else (ks.REL_SAME_GROUP,)
    return (ks.REL_OTHER_BANK,) if sibling and not rank_wide else (ks.REL_SAME_BANK,)


def _delay_tables(r: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """The plain (not windowed) timing rules as dense delays, ``NO_DELAY`` where no rule
    applies: how long after ``cmd`` the command ``next`` must wait in a bank group or bank,
    by its relation to the one ``cmd`` went to (``_relations``).

    The kernel keeps a bound per rank, per bank group and per bank; a group's bound is the
    larger of its own and its rank's. So what every group of a rank must wait goes into the
    rank's row once: ``rank[cmd, RANK_OWN]`` is the least of the same-group and other-group
    delays (for a rank-wide command, the same-group delay every group gets) and
    ``rank[cmd, RANK_OTHER]`` the delay of the other ranks. ``group[cmd, REL_SAME_GROUP]``
    then moves the target group alone, and ``group[cmd, REL_SAME_RANK]`` keeps only what
    reaches the other groups further than the rank row does (``SPREAD_GROUPS`` in
    ``spread[cmd]`` when there is any). ``bank[cmd, rel]`` likewise for banks
    (``SPREAD_BANKS``: sibling rules reach the other banks of the group). The group rows
    the kernel never reads (another rank's, a rank-wide command's) are left empty."""
    nc = N_COMMANDS
    group = np.full((nc, 3, nc), ks.NO_DELAY, dtype=np.int64)
    bank = np.full((nc, 2, nc), ks.NO_DELAY, dtype=np.int64)
    for prev, nxt, level, lat, window, sibling in zip(
            r["prev"], r["next"], r["level"], r["latency"], r["window"], r["sibling"]):
        if window > 1:
            continue
        table = bank if level == LV_BANK else group
        for rel in _relations(level, sibling, prev in (PREA, REF)):
            table[prev, rel, nxt] = max(table[prev, rel, nxt], lat)
    rank = np.full((nc, 2, nc), ks.NO_DELAY, dtype=np.int64)
    rank[:, ks.RANK_OWN] = np.minimum(group[:, ks.REL_SAME_GROUP], group[:, ks.REL_SAME_RANK])
    for wide in (PREA, REF):
        rank[wide, ks.RANK_OWN] = group[wide, ks.REL_SAME_GROUP]
    rank[:, ks.RANK_OTHER] = group[:, ks.REL_OTHER_RANK]
    same_rank = group[:, ks.REL_SAME_RANK]
    group[:, ks.REL_SAME_RANK] = np.where(same_rank > rank[:, ks.RANK_OWN], same_rank,
                                          ks.NO_DELAY)
    group[:, ks.REL_OTHER_RANK] = ks.NO_DELAY
    group[[PREA, REF]] = ks.NO_DELAY
    spread = ((group[:, ks.REL_SAME_RANK] > ks.NO_DELAY).any(axis=1) * ks.SPREAD_GROUPS
              | (bank[:, ks.REL_OTHER_BANK] > ks.NO_DELAY).any(axis=1) * ks.SPREAD_BANKS)
    return rank, group, bank, spread.astype(np.int64)
