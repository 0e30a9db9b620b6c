"""Builds the chip state from a config, drives the kernels, and collects the result.

Python does per-run and per-chunk work only: the kernel ``run`` advances the simulation by a
bounded number of loop iterations and returns, so a progress bar can update in between;
chunk boundaries never change results.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from npusim.config import NpuConfig
from npusim.errors import NpusimError
from npusim.kernels import isa
from npusim.kernels import state as ks
from npusim.kernels.state import PARAM_FIELDS, MemTables, Params, ProgramArrays, State
from npusim.program import Program
from npusim.scheduling import Placement, place, policy_id
from npusim.trace.record import untraced_tables

MEMORY_TYPES = {"ideal": 0, "simple": 1, "dram": 2}
INJECTION_QUEUE = 16  # requests a core's network interface buffers
CHANNEL_QUEUE = 32  # requests a memory channel buffers (its controller queue)
CHANNEL_OUT_QUEUE = 32  # responses a channel holds while the NoC is busy
CACHE_LINE = 64  # bytes; state tables start on one (_table)
ITERATIONS_PER_CALL = 1 << 18  # event steps between progress updates


@dataclass(frozen=True)
class TimeBase:
    """One global tick in which every clock domain has an integer period."""

    ticks_per_us: int  # lcm of the domain frequencies in MHz
    core_period: int
    noc_period: int
    mem_period: int

    @staticmethod
    def of(cfg: NpuConfig) -> "TimeBase":
        f = (cfg.core_freq_mhz, cfg.noc.freq_mhz, cfg.memory.freq_mhz)
        lcm = math.lcm(*f)
        return TimeBase(lcm, lcm // f[0], lcm // f[1], lcm // f[2])


def make_params(cfg: NpuConfig, tb: TimeBase, skip: bool) -> Params:
    core = cfg.core
    values = dict(
        n_cores=cfg.num_cores, core_period=tb.core_period, noc_period=tb.noc_period,
        mem_period=tb.mem_period, skip=int(skip),
        sa_dataflow=isa.DATAFLOWS.index(core.systolic.dataflow), sa_width=core.systolic.width, sa_height=core.systolic.height,
        sa_min_cycles=core.systolic.min_gemm_cycles, acc_latency=1,
        vec_width=core.vector.lanes * core.vector.alus,
        ld_queue=core.ld_queue, st_queue=core.st_queue, ex_queue=core.ex_queue,
        req_bytes=cfg.dma.request_bytes,
        max_outstanding=2 if cfg.memory.type == "ideal" else cfg.dma.max_outstanding,
        mem_type=MEMORY_TYPES[cfg.memory.type], n_channels=cfg.memory.channels,
        mem_latency=cfg.memory.latency, ch_bytes_per_cycle=cfg.memory.channel_bytes_per_cycle,
        ch_queue=CHANNEL_QUEUE, noc_latency=cfg.noc.latency, flit_bytes=cfg.noc.flit_bytes,
        inj_queue=INJECTION_QUEUE,
        trace=0, trace_bin=1, trace_log_from=0, trace_log_to=0,  # npusim.trace turns it on
    )
    values.update(_dram_params(cfg))
    values["policy"] = policy_id(cfg)
    assert set(values) == set(PARAM_FIELDS)
    return Params(**{k: int(values[k]) for k in PARAM_FIELDS})


def dram_standard(cfg: NpuConfig):
    """The DRAM standard of a "dram" config (loaded from configs/dram/), else None."""
    if cfg.memory.type != "dram":
        return None
    from npusim.dram import load_standard

    return load_standard(cfg.memory.standard)


def _dram_params(cfg: NpuConfig) -> dict[str, int]:
    std = dram_standard(cfg)
    if std is None:  # placeholders: no DRAM state is used
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


def memory_tables(cfg: NpuConfig) -> MemTables:
    """Timing rules and address mapping of a "dram" config (placeholders otherwise)."""
    from npusim.dram.addressing import field_table, ipoly_table, log2_exact
    from npusim.kernels import dram as kd

    std = dram_standard(cfg)
    if std is None:
        nc = kd.N_COMMANDS
        return MemTables(np.zeros((nc, 2, nc), np.int64), np.zeros((nc, 3, nc), np.int64),
                         np.zeros((nc, 2, nc), np.int64), np.zeros(nc, np.int64),
                         np.zeros((1, kd.N_WINDOW_FIELDS), np.int64), np.zeros(nc + 1, np.int64),
                         np.zeros((6, 2), np.int64), np.zeros(1, np.int64))
    r = std.rule_arrays()
    delay_rank, delay_group, delay_bank, spread = _delay_tables(r)
    # windowed rules (tFAW-like) stay a list: they depend on the last few commands
    w = np.flatnonzero(r["window"] > 1)
    windows = np.zeros((max(len(w), 1), kd.N_WINDOW_FIELDS), dtype=np.int64)
    for col, key in ((kd.W_NEXT, "next"), (kd.W_LEVEL, "level"), (kd.W_LAT, "latency"),
                     (kd.W_SIZE, "window")):
        windows[:len(w), col] = r[key][w]
    for row, k in enumerate(w):
        windows[row, kd.W_RELS] = sum(1 << rel for rel in _relations(
            r["level"][k], r["sibling"][k], r["prev"][k] in (kd.PREA, kd.REF)))
    window_start = np.concatenate(
        [[0], np.cumsum(np.bincount(r["prev"][w], minlength=kd.N_COMMANDS))]).astype(np.int64)
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
    return MemTables(delay_rank, delay_group, delay_bank, spread, windows, window_start,
                     field_table(ctl.address_mapping, widths), ipoly)


def _relations(level: int, sibling: bool, rank_wide: bool) -> tuple[int, ...]:
    """The bank groups (kernels/dram.py REL_SAME_GROUP, REL_SAME_RANK, REL_OTHER_RANK) or,
    for a bank-level rule, the banks (REL_SAME_BANK, REL_OTHER_BANK) a rule reaches, by how
    they stand to the target of its prev command. A rank-wide prev (PREA, REF) targets every
    group and bank of its rank."""
    from npusim.kernels import dram as kd

    if level == kd.LV_CHANNEL:
        return kd.REL_SAME_GROUP, kd.REL_SAME_RANK, kd.REL_OTHER_RANK
    if level == kd.LV_RANK:
        return (kd.REL_OTHER_RANK,) if sibling else (kd.REL_SAME_GROUP, kd.REL_SAME_RANK)
    if level == kd.LV_BANKGROUP:
        return (kd.REL_SAME_RANK,) if sibling and not rank_wide else (kd.REL_SAME_GROUP,)
    return (kd.REL_OTHER_BANK,) if sibling and not rank_wide else (kd.REL_SAME_BANK,)


def _delay_tables(r: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """The plain (not windowed) timing rules as dense delays, ``kd.NO_DELAY`` where no rule
    applies: how long after ``cmd`` the command ``next`` must wait in a bank group or bank,
    by its relation to the one ``cmd`` went to (``_relations``).

    The kernel keeps a bound per rank, per bank group and per bank; a group's bound is the
    larger of its own and its rank's. So what every group of a rank must wait goes into the
    rank's row once: ``rank[cmd, RANK_OWN]`` is the least of the same-group and other-group
    delays (for a rank-wide command, the same-group delay every group gets) and
    ``rank[cmd, RANK_OTHER]`` the delay of the other ranks. ``group[cmd, REL_SAME_GROUP]``
    then moves the target group alone, and ``group[cmd, REL_SAME_RANK]`` keeps only what
    reaches the other groups further than the rank row does (``kd.SPREAD_GROUPS`` in
    ``spread[cmd]`` when there is any). ``bank[cmd, rel]`` likewise for banks
    (``kd.SPREAD_BANKS``: sibling rules reach the other banks of the group). The group rows
    the kernel never reads (another rank's, a rank-wide command's) are left empty."""
    from npusim.kernels import dram as kd

    nc = kd.N_COMMANDS
    group = np.full((nc, 3, nc), kd.NO_DELAY, dtype=np.int64)
    bank = np.full((nc, 2, nc), kd.NO_DELAY, dtype=np.int64)
    for prev, nxt, level, lat, window, sibling in zip(
            r["prev"], r["next"], r["level"], r["latency"], r["window"], r["sibling"]):
        if window > 1:
            continue
        table = bank if level == kd.LV_BANK else group
        for rel in _relations(level, sibling, prev in (kd.PREA, kd.REF)):
            table[prev, rel, nxt] = max(table[prev, rel, nxt], lat)
    rank = np.full((nc, 2, nc), kd.NO_DELAY, dtype=np.int64)
    rank[:, kd.RANK_OWN] = np.minimum(group[:, kd.REL_SAME_GROUP], group[:, kd.REL_SAME_RANK])
    for wide in (kd.PREA, kd.REF):
        rank[wide, kd.RANK_OWN] = group[wide, kd.REL_SAME_GROUP]
    rank[:, kd.RANK_OTHER] = group[:, kd.REL_OTHER_RANK]
    same_rank = group[:, kd.REL_SAME_RANK]
    group[:, kd.REL_SAME_RANK] = np.where(same_rank > rank[:, kd.RANK_OWN], same_rank,
                                          kd.NO_DELAY)
    group[:, kd.REL_OTHER_RANK] = kd.NO_DELAY
    group[[kd.PREA, kd.REF]] = kd.NO_DELAY
    spread = ((group[:, kd.REL_SAME_RANK] > kd.NO_DELAY).any(axis=1) * kd.SPREAD_GROUPS
              | (bank[:, kd.REL_OTHER_BANK] > kd.NO_DELAY).any(axis=1) * kd.SPREAD_BANKS)
    return rank, group, bank, spread.astype(np.int64)


def _table(*shape, fill=0) -> np.ndarray:
    """An int64 state table whose data starts on a cache line, so that the fixed-size
    records of a record-major table (``dreq``: two lines per request) never straddle
    one more line."""
    n = int(np.prod(shape))
    buf = np.empty(n + CACHE_LINE // 8, dtype=np.int64)
    skip = (-buf.ctypes.data % CACHE_LINE) // 8
    out = buf[skip:skip + n].reshape(shape)
    out.fill(fill)
    return out


def make_state(cfg: NpuConfig, prog: Program, p: Params, mt: MemTables,
               log_commands: int = 0, placement: Placement | None = None) -> State:
    """Zeroed state tables sized for this config and program.

    ``log_commands`` > 0 records up to that many DRAM commands in ``State.cmd_log``.
    """
    C = cfg.num_cores
    ch = cfg.memory.channels
    L = prog.layer.shape[0]
    q = max(p.ld_queue, p.st_queue)

    glob = _table(ks.N_GLOB)
    glob[ks.G_LAYERS_LEFT] = L
    glob[ks.G_WAKE_NOC] = isa.NEVER  # nothing in flight yet
    glob[ks.G_WAKE_MEM] = isa.NEVER
    layer_st = _table(ks.N_LAYER_FIELDS, L)
    layer_st[ks.L_PREDS_LEFT] = prog.layer[:, isa.L_N_PREDS]
    if prog.n_tiles:
        np.add.at(layer_st[ks.L_TILES_LEFT], prog.tile[:, isa.T_LAYER], 1)
    layer_st[ks.L_START] = -1
    layer_st[ks.L_END] = -1
    placement = placement or place(cfg, [0] * prog.n_requests)
    n_parts = len(placement.partitions)
    part_st = _table(ks.N_PART_FIELDS, n_parts)
    part_st[ks.PT_LAST_RANK] = -1  # time-shared: the first request comes first
    slot = _table(ks.N_SLOT_FIELDS, C, 2)
    slot[ks.S_TILE] = -1
    dram = _dram_state(cfg, p, mt, log_commands)
    first = int(dram["dch"][ks.DC_WAKE].min())
    if cfg.memory.type == "dram" and first < isa.NEVER:
        glob[ks.G_WAKE_MEM] = first * p.mem_period
    return State(
        glob=glob,
        ready=_table(n_parts, max(1, L)),
        part_st=part_st,
        layer_st=layer_st,
        layer_stack=_table(L + 1),
        core=_table(ks.N_CORE_FIELDS, C),
        slot=slot,
        done=_table(C, 2, prog.max_template_len, fill=isa.NEVER),
        ex_ring=_table(C, p.ex_queue),
        dq=_table(ks.N_DQ_FIELDS, C, 2, q),
        dq_ctl=_table(ks.N_DQ_CTL_FIELDS, C, 2),
        arr=_table(ks.N_ARR_FIELDS, C, p.max_outstanding + 1),
        inj=_table(ks.N_INJ_FIELDS, C, p.inj_queue),
        chan=_table(ks.N_CHAN_FIELDS, ch),
        ch_in=_table(ks.N_PACKET_FIELDS, ch, p.ch_queue),
        ch_out=_table(ks.N_PACKET_FIELDS, ch, CHANNEL_OUT_QUEUE),
        resp_heads=_table(C, (ch + 63) // 64),
        **dram,
        **untraced_tables(),
    )


def _dram_state(cfg: NpuConfig, p: Params, mt: MemTables, log_commands: int) -> dict:
    """DRAM controller tables; one-element placeholders when the memory is not "dram"."""
    from npusim.kernels import dram as kd

    dram = cfg.memory.type == "dram"
    ch = cfg.memory.channels if dram else 1
    R, G, B = (p.d_ranks, p.d_bankgroups, p.d_banks) if dram else (1, 1, 1)
    n_ch = max(1, cfg.memory.channels)  # the NoC wakes channels whatever the memory type
    nc = kd.N_COMMANDS
    n_win = int(mt.window_start[-1])
    max_window = max(1, int(mt.windows[:n_win, kd.W_SIZE].max()) if n_win else 1)
    n_win = max(1, n_win)

    dbank = _table(ks.N_DBANK_FIELDS, ch, R * G * B)
    dbank[ks.B_OPEN_ROW] = -1
    drank = _table(ks.N_DRANK_FIELDS, ch, R)
    if dram:
        # refresh rank r at r/R of every tREFI, from cycle 0 on: controllers stagger ranks,
        # and starting at 0 makes the refresh phase a property of absolute time only
        drank[ks.RK_NEXT_REF] = (np.arange(R) * p.d_refi // R)[None, :]
    dch = _table(ks.N_DCH_FIELDS, n_ch)
    # an idle channel first wakes for its first refresh (or never, without refresh)
    dch[ks.DC_WAKE] = int(drank[ks.RK_NEXT_REF].min()) if dram and p.d_refresh else isa.NEVER
    nb = R * G * B
    dqb = _table(ks.N_QB_FIELDS, ch, 2, nb)
    dqb[[ks.QB_HEAD, ks.QB_TAIL, ks.QB_OLDEST_HIT, ks.QB_OLDEST_OTHER]] = -1
    # free slots, popped from the end: slot 0 (reads) and slot rq (writes) go first
    dfree = _table(ch, 2, max(p.d_rq, p.d_wq), fill=-1)
    dfree[:, 0, :p.d_rq] = np.arange(p.d_rq)[::-1]
    dfree[:, 1, :p.d_wq] = p.d_rq + np.arange(p.d_wq)[::-1]
    return dict(
        dch=dch, dreq=_table(ch, p.d_rq + p.d_wq, ks.N_DREQ_FIELDS), dbank=dbank, drank=drank,
        dqb=dqb, dact=_table(ch, 2, nb), dpick=_table(ks.N_PK_FIELDS, ch, 2, nb, fill=isa.NEVER),
        dgroup=_table(ks.N_GB_FIELDS, ch, nb), dfree=dfree,
        rdy_rank=_table(ch, R, nc), rdy_group=_table(ch, R * G, nc),
        rdy_bank=_table(ch, R * G * B, nc),
        win=_table(ch, n_win, R * G * B, max_window),
        win_ctl=_table(2, ch, n_win, R * G * B), lat_hist=_table(ch, kd.LAT_BINS),
        cmd_log=_table(ks.N_LOG_FIELDS, log_commands),
    )


def program_arrays(prog: Program, cfg: NpuConfig, placement: Placement) -> ProgramArrays:
    vlat = np.array([cfg.core.vector.latency[op] for op in isa.VECTOR_OPS], dtype=np.int64)
    return ProgramArrays(prog.inst, prog.tile, prog.group, prog.layer, prog.layer_succ,
                         prog.release_order, vlat, placement.req, placement.core_part)


@dataclass
class RawRun:
    """What a run leaves behind: the final state plus how long it took."""

    state: State
    params: Params
    timebase: TimeBase
    wall_seconds: float
    compile_seconds: float
    trace: object = None  # the npusim.trace.TraceRecorder, when traced
    fast: object = None  # the npusim.fast.forward.FastForward of a fast-fidelity run


class EngineRun:
    """A simulation in progress: chip state plus the program it runs.

    ``advance`` runs until the program is done or a layer marked with :meth:`notify_on`
    ends; the caller may then :meth:`extend` the program with more layers (the same
    ProgramBuilder, built again) and advance again. This is how LLM serving adds one
    iteration at a time, each shaped by what happened before it.
    """

    def __init__(self, prog: Program, cfg: NpuConfig, *, skip: bool = True,
                 placement: Placement | None = None, log_commands: int = 0, trace=None):
        from npusim.kernels.loop import run  # imported here: numba loads only when simulating

        self._run = run
        self.cfg = cfg
        self.placement = placement or place(cfg, [0] * prog.n_requests)
        self.tb = TimeBase.of(cfg)
        self.p = make_params(cfg, self.tb, skip)
        self.mt = memory_tables(cfg)
        self.prog = prog
        self.st = make_state(cfg, prog, self.p, self.mt, log_commands, self.placement)
        self.pa = program_arrays(prog, cfg, self.placement)
        self.fast = None
        if cfg.fidelity == "fast":
            from npusim.fast.forward import FastForward

            self.fast = FastForward(self.tb, cfg.num_cores)
            self.fast.watch(self)
        self.recorder = None
        if trace is not None:
            from npusim.trace.record import TraceRecorder

            self.recorder = TraceRecorder(trace, cfg, prog, self.tb)
            self.st, self.p = self.recorder.attach(self.st, self.p)
        t0 = time.perf_counter()
        _ensure_compiled(run, self.st, self.pa, self.mt, self.p)
        if self.recorder is not None:
            self.recorder.compile(self.st, self.p)
        self.compile_seconds = time.perf_counter() - t0
        self.wall_seconds = 0.0

    @property
    def now_cycle(self) -> int:
        """The core cycle the run has reached (in fast fidelity, with what was
        extrapolated before it)."""
        offset = self.fast.offset if self.fast is not None else 0
        return int((self.st.glob[ks.G_NOW] + offset) // self.tb.core_period)

    def layer_end_cycle(self, layer: int) -> int:
        """The core cycle ``layer`` ended (-1 if it has not), extrapolated time included."""
        end = int(self.st.layer_st[ks.L_END, layer])
        if end < 0:
            return -1
        if self.fast is not None:
            end += int(self.fast.shift[layer])
        return end // self.tb.core_period

    @property
    def finished(self) -> bool:
        return bool(self.st.glob[ks.G_FINISHED])

    def notify_on(self, layers) -> None:
        """Make :meth:`advance` return when any of ``layers`` ends."""
        self.st.layer_st[ks.L_NOTIFY, np.asarray(layers, dtype=np.int64)] = 1

    def advance(self, progress: Callable[[int, int, int], None] | None = None) -> bool:
        """Run on; True if stopped because a notify layer ended, False when all is done.

        ``progress(layers_done, layers_total, core_cycles)`` is called between kernel chunks.
        """
        st, tb = self.st, self.tb
        total = self.prog.layer.shape[0]
        t1 = time.perf_counter()
        try:
            while not self.finished:
                code = self._run(st, self.pa, self.mt, self.p, ITERATIONS_PER_CALL)
                if code == 1:
                    raise NpusimError(_deadlock_message(st, self.prog, tb))
                if self.recorder is not None:
                    self.recorder.drain(st, self.p)
                if self.fast is not None and not self.finished:
                    self.fast.paused(self)
                if code == 2:
                    return True
                if progress is not None:
                    cycle = st.glob[ks.G_END] if self.finished else st.glob[ks.G_NOW]
                    progress(total - int(st.glob[ks.G_LAYERS_LEFT]), total,
                             int(cycle // tb.core_period))
            return False
        finally:
            self.wall_seconds += time.perf_counter() - t1

    def extend(self, prog: Program) -> None:
        """Continue with ``prog``: the program run so far with layers appended (new root
        layers must be released after the current cycle)."""
        old, L0, L = self.prog, self.prog.layer.shape[0], prog.layer.shape[0]
        if L0 and not np.array_equal(prog.layer[:L0, :isa.L_SUCC_START],
                                     old.layer[:, :isa.L_SUCC_START]):
            raise ValueError("extend() needs the same program with layers appended")
        new = prog.layer[L0:]
        roots = new[:, isa.L_N_PREDS] == 0
        if np.any(new[roots, isa.L_RELEASE] <= self.now_cycle):
            raise ValueError("new root layers must be released after the current cycle")
        st = self.st
        ext = np.zeros((ks.N_LAYER_FIELDS, L - L0), dtype=np.int64)
        ext[ks.L_START] = ext[ks.L_END] = -1
        if prog.n_tiles > old.n_tiles:
            np.add.at(ext[ks.L_TILES_LEFT], prog.tile[old.n_tiles:, isa.T_LAYER] - L0, 1)
        # predecessors still to finish: new layers, and old ones that have not ended yet
        src = np.repeat(np.arange(L), prog.layer[:, isa.L_SUCC_LEN])
        dst = prog.layer_succ
        ended = np.zeros(L, dtype=bool)
        ended[:L0] = st.layer_st[ks.L_END] >= 0
        counted = (dst >= L0) & ~ended[src]
        np.add.at(ext[ks.L_PREDS_LEFT], dst[counted] - L0, 1)
        if np.any((new[:, isa.L_N_PREDS] > 0) & (ext[ks.L_PREDS_LEFT] == 0)):
            raise ValueError("a new layer depends only on layers that have ended")
        layer_st = np.concatenate([st.layer_st, ext], axis=1)
        ready = np.zeros((st.ready.shape[0], max(1, L)), dtype=np.int64)
        ready[:, :st.ready.shape[1]] = st.ready
        done = st.done
        if prog.max_template_len > done.shape[2]:
            done = np.full(done.shape[:2] + (prog.max_template_len,), isa.NEVER, np.int64)
            done[:, :, :st.done.shape[2]] = st.done
        released = int(st.glob[ks.G_RELEASED])
        if not np.array_equal(prog.release_order[:released], old.release_order[:released]):
            raise ValueError("extend() would reorder layers already released")
        glob = st.glob
        glob[ks.G_LAYERS_LEFT] += L - L0
        glob[ks.G_FINISHED] = 0
        self.st = st._replace(layer_st=layer_st, layer_stack=np.zeros(L + 1, np.int64),
                              ready=ready, done=done)
        self.prog = prog
        self.pa = program_arrays(prog, self.cfg, self.placement)
        if self.fast is not None:
            self.fast.watch(self, L0)
            self.release_offset_changed()
        if self.recorder is not None:
            self.recorder.prog = prog

    def release_offset_changed(self) -> None:
        """Fast fidelity: requests not yet arrived arrive earlier in simulated time by what
        was extrapolated (their program rows keep the arrival the user gave)."""
        layer = self.prog.layer
        if self.fast.offset and len(self.prog.release_order):
            layer = layer.copy()
            waiting = self.prog.release_order[int(self.st.glob[ks.G_RELEASED]):]
            shifted = layer[waiting, isa.L_RELEASE] - self.fast.offset // self.tb.core_period
            layer[waiting, isa.L_RELEASE] = np.maximum(shifted, self.now_cycle_simulated + 1)
        self.pa = self.pa._replace(layer=layer)

    def skip_layers(self, layers) -> None:
        """End ``layers`` (none handed out to a core yet) without running them."""
        from npusim.kernels.scheduler import skip_layers

        skip_layers(self.st, self.pa, np.asarray(layers, dtype=np.int64),
                    self.st.glob[ks.G_NOW])

    @property
    def now_cycle_simulated(self) -> int:
        return int(self.st.glob[ks.G_NOW] // self.tb.core_period)

    def result(self) -> "RawRun":
        st = self.fast.final_state(self.st) if self.fast is not None else self.st
        return RawRun(st, self.p, self.tb, self.wall_seconds, self.compile_seconds,
                      self.recorder, self.fast)


def run_program(prog: Program, cfg: NpuConfig, skip: bool = True,
                progress: Callable[[int, int, int], None] | None = None,
                log_commands: int = 0, placement: Placement | None = None,
                trace=None) -> RawRun:
    """Simulate ``prog`` on ``cfg`` to completion.

    ``progress(layers_done, layers_total, core_cycles)`` is called between kernel chunks.
    ``trace`` (``npusim.trace.TraceOptions``) records a trace, drained between chunks.
    """
    run = EngineRun(prog, cfg, skip=skip, placement=placement, log_commands=log_commands,
                    trace=trace)
    while run.advance(progress):
        pass
    return run.result()


_compiled: set[tuple] = set()


def _ensure_compiled(run, st, pa, mt, p) -> float:
    """Compile (or load from cache) the kernel for these argument types; returns seconds."""
    key = (type(st), type(pa), type(mt), type(p))
    if key in _compiled:
        return 0.0
    t = time.perf_counter()
    run.compile(tuple(numba_typeof(x) for x in (st, pa, mt, p, np.int64(0))))
    _compiled.add(key)
    return time.perf_counter() - t


def numba_typeof(x):
    from numba import typeof
    return typeof(x)


def _deadlock_message(st: State, prog: Program, tb: TimeBase) -> str:
    stuck = [prog.layers[i].name for i in range(prog.layer.shape[0])
             if st.layer_st[ks.L_END, i] < 0]
    return (f"simulation stalled at core cycle {int(st.glob[ks.G_NOW] // tb.core_period)} with "
            f"{len(stuck)} layers unfinished (first: {stuck[:3]}); this is an npusim bug, "
            f"please report it with the model and config")
