"""What fast fidelity reads of the chip's state: its running totals and the layers the
scheduler has released. ``forward`` (regions, runs of tiles) and ``streams`` (cuts inside
tiles) both take their measurements and make their cuts through these."""

from __future__ import annotations

import numpy as np

from npusim.fast.regions import tile_row_sums
from npusim.kernels import isa
from npusim.kernels import state as ks
from npusim.kernels.names import MEM_DRAM

# Running totals of the chip: (table, field indices or None for the whole table). A cut
# adds the skipped iterations' share of their increments; everything else in the state
# is either a time (moved with the run) or current occupancy (left as it is).
COUNTERS = (
    ("cores", "core", (ks.C_SA_STREAM, ks.C_SA_MACS, ks.C_VU_BUSY, ks.C_VU_OPS, ks.C_BUSY,
              ks.C_LD_REQUESTS, ks.C_ST_REQUESTS, ks.C_LD_BYTES, ks.C_ST_BYTES, ks.C_TILES,
              ks.C_READ_LAT_SUM, ks.C_READ_LAT_N)),
    ("mem", "chan", (ks.H_READS, ks.H_WRITES, ks.H_READ_BYTES, ks.H_WRITE_BYTES)),
    ("mem", "dch", (ks.DC_READS, ks.DC_WRITES, ks.DC_READ_BYTES, ks.DC_WRITE_BYTES, ks.DC_ACTS,
             ks.DC_PRES, ks.DC_REFS, ks.DC_CMDS, ks.DC_BUS_BUSY, ks.DC_LAT_SUM, ks.DC_LAT_N,
             ks.DC_RD_CMDS, ks.DC_WR_CMDS, ks.DC_RDA_CMDS, ks.DC_WRA_CMDS,
             ks.DC_BANK_CLOSES)),
    ("mem", "dbank", (ks.B_HITS, ks.B_MISSES, ks.B_CONFLICTS, ks.B_READS, ks.B_WRITES)),
    ("mem", "drank", (ks.RK_ACTIVE_CYCLES,)),
    ("mem", "lat_hist", None),
)


# Core counters the program fixes, whatever the timing: the array's and the vector unit's
# MACs (the I_MACS of their instructions, added at issue: the unit of each) and the tiles
# finished (None: one per tile). What a cut skips adds exactly the skipped tiles' counts of
# these (``program_counts``), spread over the cores as the measured rates have it; a
# measured rate counts work by issue against progress by tiles or iterations finished, off
# by the work in flight at either end, and times the tiles skipped that put MACs, a
# workload's own number, up to 0.5% off.
PROGRAM_COUNTERS = {ks.C_SA_MACS: isa.UNIT_SYSTOLIC, ks.C_VU_OPS: isa.UNIT_VECTOR,
                    ks.C_TILES: None}


def counter_index(table: str, field: int) -> int:
    """Where ``field`` of ``table`` sits in that table's row of :func:`counters`."""
    return next(f for _, name, f in COUNTERS if name == table).index(field)


def counters(st, plus: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Every running total in ``COUNTERS``, as floats, by table name; with ``plus`` (a dict
    of the same shapes: what cuts extrapolated) added in place (the DRAM's read-latency
    histogram is 16 x 4,096 bins on `server`, taken at every sample of a watch: copied, then
    summed into another copy, it was 2.5 of a GPT-2 generation's 46 profiled CPU s)."""
    out = {}
    for unit, name, fields in COUNTERS:
        table = getattr(getattr(st, unit), name)
        out[name] = (table if fields is None else table[list(fields)]).astype(np.float64)
    # a core adds its busy time when it falls idle: count the stretch it is in so far
    busy = (st.cores.slot[ks.S_TILE] >= 0).any(axis=1)
    since = st.cores.core[ks.C_BUSY_SINCE]
    out["core"][counter_index("core", ks.C_BUSY)] += np.where(
        busy, st.glob[ks.G_NOW] - since, 0)
    if plus is not None:
        for name, table in out.items():
            table += plus[name]
    return out


def program_counts(prog, tiles: np.ndarray) -> dict[int, int]:
    """``PROGRAM_COUNTERS`` summed over ``tiles`` (tile indices), from their instructions."""
    units = [(field, unit) for field, unit in PROGRAM_COUNTERS.items() if unit is not None]
    out = {field: len(tiles) for field, unit in PROGRAM_COUNTERS.items() if unit is None}

    def work(inst):
        return np.stack([np.where(inst[:, isa.I_UNIT] == unit, inst[:, isa.I_MACS], 0)
                         for _, unit in units], axis=1)

    sums = tile_row_sums(prog, prog.tile[tiles], work).sum(axis=0)
    out.update({field: int(sums[k]) for k, (field, _) in enumerate(units)})
    return out


def add_program_counts(add: dict[str, np.ndarray], exact: dict[int, int]) -> None:
    """Make the cores' increments ``add`` (``counters``' shape) of ``PROGRAM_COUNTERS``
    whole numbers summing to ``exact`` (``program_counts``), split over the cores as they
    were (evenly where nothing was measured; the remainder to the largest fractions)."""
    for field, total in exact.items():
        row = add["core"][counter_index("core", field)]
        measured = row.sum()
        share = row * (total / measured) if measured > 0 else np.full(len(row), total / len(row))
        whole = np.floor(share)
        rest = int(total - whole.sum())
        whole[np.argsort(whole - share, kind="stable")[:rest]] += 1
        row[:] = whole


def released(st, prog) -> np.ndarray:
    """Layers the scheduler has released (ready, running or ended)."""
    ls = st.cores.layer_st
    rel = ls[ks.L_PREDS_LEFT] == 0
    roots = prog.layer[:, isa.L_N_PREDS] == 0
    waiting = prog.release_order[int(st.cores.ctl[ks.CC_RELEASED]):]
    rel[waiting] = False
    return rel | (ls[ks.L_END] >= 0) | (roots & (ls[ks.L_START] >= 0))


def least_period(p, timebase, tolerance: float) -> int:
    """The shortest stretch (ticks) whose length a fixed point may compare within
    ``tolerance``: on a refreshing DRAM a stretch takes up to a refresh (tRFC) more or less
    depending on where the refreshes fall in it, so only stretches of at least tRFC /
    ``tolerance`` agree by more than chance (0 without refresh; ``isa.NEVER`` at a zero
    tolerance). ``forward`` compares iterations, windows and tiles over stretches at least
    this long; ``repeats`` counts only instances this long."""
    if p.mem_type != MEM_DRAM or p.d_refresh != 1:
        return 0
    if tolerance <= 0:
        return isa.NEVER
    return int(p.d_rfc * timebase.mem_period / tolerance)
