"""What fast fidelity reads of the chip's state: its running totals and the layers the
scheduler has released. ``forward`` (regions, runs of tiles) and ``streams`` (cuts inside
tiles) both take their measurements and make their cuts through these."""

from __future__ import annotations

import numpy as np

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


def counter_index(table: str, field: int) -> int:
    """Where ``field`` of ``table`` sits in that table's row of :func:`counters`."""
    return next(f for _, name, f in COUNTERS if name == table).index(field)


def counters(st) -> dict[str, np.ndarray]:
    """Every running total in ``COUNTERS``, as floats, by table name."""
    out = {}
    for unit, name, fields in COUNTERS:
        table = getattr(getattr(st, unit), name)
        out[name] = (table if fields is None else table[list(fields)]).astype(np.float64)
    # a core adds its busy time when it falls idle: count the stretch it is in so far
    busy = (st.cores.slot[ks.S_TILE] >= 0).any(axis=1)
    since = st.cores.core[ks.C_BUSY_SINCE]
    out["core"][counter_index("core", ks.C_BUSY)] += np.where(
        busy, st.glob[ks.G_NOW] - since, 0)
    return out


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
