"""Recording a trace: sizing the kernels' trace buffers, draining them between kernel
calls, and turning what was drained into an ``xarray.Dataset``.

The kernels (``npusim.kernels.trace``) count into rings of time bins and append core
activity intervals to a log; ``TraceRecorder.drain`` moves finished bins and logged rows
into Python-side arrays after every ``run`` call, so memory is bounded by the number of
bins and the window, never by run length.

Bins: ``bin_cycles`` core cycles each when given; by default ("auto") the kernels count in
bins of a power of two sized from a lower bound of the run length (its MACs at peak), and
pairs of bins are merged whenever a run has more than ``MAX_BINS``, so a run ends with
between ``MAX_BINS / 2`` and ``MAX_BINS`` bins (fewer only when it is shorter than that
many base bins).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npusim.errors import NpusimError
from npusim.kernels import isa
from npusim.kernels import state as ks

MAX_BINS = 2048  # auto binning keeps a run at most this many bins long
# a fixed --trace-bin may make up to this many (tens of KB each: --trace-bin 1 on ResNet-50
# batch 8 simulated for 18 s and then asked for 8 GiB, and would have wanted over 100)
MAX_FIXED_BINS = 32 * MAX_BINS
DEFAULT_WINDOW = (0, 10_000)  # core cycles of per-cycle bank state and command log
RING_BINS = 256  # bins the kernels may fill between drains (plus the look-ahead)
LOG_ROWS = 1 << 16  # DRAM command-log rows between drains
INTERVAL_ROWS = 1 << 16  # core activity intervals between drains
MAX_WINDOW_CELLS = 20_000_000  # DRAM cycles x banks of per-cycle state (about 0.5 GB to build)
UNITS = tuple(isa.UNIT_NAMES[u] for u in (isa.UNIT_SYSTOLIC, isa.UNIT_VECTOR, isa.UNIT_LOAD,
                                          isa.UNIT_STORE))
_UNIT_INDEX = {isa.UNIT_SYSTOLIC: 0, isa.UNIT_VECTOR: 1, isa.UNIT_LOAD: 2, isa.UNIT_STORE: 3}
N_KINDS = 5  # the four units, then "core holds a tile" (ks.IV_ACTIVE)


@dataclass(frozen=True)
class TraceOptions:
    """What to record: the output file, the window (core cycles [start, end)) of per-cycle
    bank state and command log, and the bin width in core cycles (None: auto)."""

    path: str | Path | None = None
    window: tuple[int, int] = DEFAULT_WINDOW
    bin_cycles: int | None = None


def command_durations(std) -> np.ndarray:
    """DRAM cycles a command keeps its bank(s) busy, by command index (npusim.dram.COMMANDS):
    ACT tRCD; RD CL + BL; WR CWL + BL; RDA/WRA the access, then its auto-precharge;
    PRE tRP; PREA tRPab (tRP where the standard has none); REF tRFC."""
    from npusim.dram import COMMANDS

    t = std.timing
    read, write = t["CL"] + t["BL"], t["CWL"] + t["BL"]
    dur = {"ACT": t["RCD"], "RD": read, "WR": write,
           "RDA": max(read, t["RTP"] + t["RP"]), "WRA": write + t["WR"] + t["RP"],
           "PRE": t["RP"], "PREA": t.get("RPab", t["RP"]), "REF": t["RFC"]}
    return np.array([dur[c] for c in COMMANDS], dtype=np.int64)


def shortest_run(prog, cfg) -> int:
    """A lower bound of the run's length in core cycles: every MAC at the arrays' peak."""
    macs = sum(int(info.macs) for info in prog.layers)
    return macs // max(1, cfg.num_cores * cfg.core.systolic.width * cfg.core.systolic.height)


def auto_bin_cycles(prog, cfg) -> int:
    """Base bin: a power of two giving at most MAX_BINS bins over a lower bound of the run
    length, so merging starts from a sensible width."""
    floor = max(1, shortest_run(prog, cfg) // MAX_BINS)
    return 1 << (floor - 1).bit_length()


def too_many_bins(width: int, cycles: int, running: bool) -> NpusimError:
    """The error for a fixed bin width that makes more than MAX_FIXED_BINS bins of a run
    that lasts at least ``cycles`` (``running``: has reached them and goes on)."""
    least = -(-cycles // MAX_FIXED_BINS)
    what, wider = (("the run has passed", f"a --trace-bin above {least:,} (the run goes on)")
                   if running else ("this run lasts at least", f"--trace-bin {least:,} or more"))
    return NpusimError(f"--trace-bin {width}: {what} {cycles:,} core cycles, more than "
                       f"{MAX_FIXED_BINS:,} bins of {width} (each holds every bank's, core's "
                       f"and link's counts); give {wider}, or leave it out for bins sized "
                       f"to the run")


class _Bins:
    """Per-bin arrays that share one width; with ``merge`` on, pairs of bins merge whenever
    there are more than MAX_BINS. Bin k covers core cycles [k * width, (k + 1) * width)."""

    def __init__(self, base_cycles: int, merge: bool):
        self.base = base_cycles  # width of the kernels' bins
        self.factor = 1  # kernel bins per bin here
        self.merge = merge
        self.arrays: dict[str, np.ndarray] = {}
        self.n = 0  # bins in use

    @property
    def width(self) -> int:
        return self.base * self.factor

    def _fit(self, last_cycle: int) -> None:
        """Room for the bin holding core cycle ``last_cycle``, merging pairs of bins first
        while that would make more than MAX_BINS."""
        while self.merge and last_cycle // self.width >= MAX_BINS:
            self._halve()
        n = last_cycle // self.width + 1
        if n > MAX_FIXED_BINS:
            raise too_many_bins(self.width, last_cycle, running=True)
        for name, a in self.arrays.items():
            if a.shape[0] < n:
                bigger = np.zeros((max(n, 2 * a.shape[0]),) + a.shape[1:], a.dtype)
                bigger[:a.shape[0]] = a
                self.arrays[name] = bigger
        self.n = max(self.n, n)

    def _halve(self) -> None:
        for name, a in self.arrays.items():
            if a.shape[0] % 2:
                a = np.concatenate([a, np.zeros((1,) + a.shape[1:], a.dtype)])
            self.arrays[name] = a[0::2] + a[1::2]
        self.n = -(-self.n // 2)
        self.factor *= 2

    def ensure(self, name: str, tail: tuple[int, ...]) -> None:
        """Start array ``name`` ([bin, *tail], zeros) the first time it is needed."""
        if name not in self.arrays:
            self.arrays[name] = np.zeros((max(self.n, 1),) + tail, np.int64)

    def add_kernel_bins(self, name: str, first: int, block: np.ndarray) -> None:
        """Add kernel bins ``first, first + 1, ...`` (``block[k]`` is bin first + k)."""
        if len(block) == 0:
            return
        self._fit((first + len(block)) * self.base - 1)
        if self.factor == 1:
            self.arrays[name][first:first + len(block)] += block
            return
        idx = (first + np.arange(len(block))) // self.factor
        bins, starts = np.unique(idx, return_index=True)  # runs of kernel bins per bin here
        self.arrays[name][bins] += np.add.reduceat(block, starts, axis=0)

    def add_intervals(self, name: str, column: np.ndarray, start: np.ndarray,
                      end: np.ndarray) -> None:
        """Spread intervals [start, end) (core cycles) over the bins they cover, in column
        ``column`` of ``name`` (a [bin, n] array)."""
        keep = end > start
        column, start, end = column[keep], start[keep], end[keep]
        if len(start) == 0:
            return
        self._fit(int(end.max()) - 1)
        w = self.width
        a = self.arrays[name]
        b0, b1 = start // w, (end - 1) // w
        same = b0 == b1
        np.add.at(a, (b0[same], column[same]), end[same] - start[same])
        b0, b1, s, e, col = b0[~same], b1[~same], start[~same], end[~same], column[~same]
        np.add.at(a, (b0, col), (b0 + 1) * w - s)
        np.add.at(a, (b1, col), e - b1 * w)
        full = np.zeros((a.shape[0] + 1, a.shape[1]), np.int64)  # bins strictly inside
        np.add.at(full, (b0 + 1, col), w)
        np.add.at(full, (b1, col), -w)
        a += np.cumsum(full, axis=0)[:a.shape[0]]

    def final(self, name: str, n_bins: int) -> np.ndarray:
        a = self.arrays[name]
        out = np.zeros((n_bins,) + a.shape[1:], np.int64)
        k = min(n_bins, a.shape[0])
        out[:k] = a[:k]
        return out


class TraceRecorder:
    """Owns a run's trace buffers: says how large they are (``ring``, ``interval_rows``,
    ``log_rows``, ``durations``: ``npusim.state`` allocates them) and what the kernels'
    Params must say (``params``), drains them after each kernel call (``drain``), and keeps
    what was drained for the Dataset (``npusim.trace.dataset``)."""

    interval_rows = INTERVAL_ROWS
    log_rows = LOG_ROWS

    def __init__(self, options: TraceOptions, cfg, prog, tb):
        from npusim.dram import dram_standard

        self.options = options
        self.cfg, self.prog, self.tb = cfg, prog, tb
        self.std = dram_standard(cfg)
        self.dram = self.std is not None
        self.routers = cfg.memory.type != "ideal" and cfg.noc.type != "crossbar"
        auto = options.bin_cycles is None
        if auto:
            base = auto_bin_cycles(prog, cfg)
        else:
            base, floor = int(options.bin_cycles), shortest_run(prog, cfg)
            if floor // base >= MAX_FIXED_BINS:
                raise too_many_bins(base, floor, running=False)
        self.bins = _Bins(base, merge=auto)
        self.bin_ticks = base * tb.core_period
        self.durations = (command_durations(self.std) if self.dram
                          else np.zeros(8, np.int64))
        self.lookahead = int(self.durations.max()) * tb.mem_period
        self.ring = RING_BINS + -(-self.lookahead // self.bin_ticks) + 2
        start, end = options.window
        self.window_ticks = (start * tb.core_period, end * tb.core_period)
        if self.dram:
            self._check_window_size(cfg, tb)
        self.drained = 0  # kernel bins before this one are drained
        self.snapshot = None  # open rows when the window starts
        self.commands: list[np.ndarray] = []
        self.end_tick = None
        self.layer_times = None  # (start, end) ticks of every layer, once finished
        self.network = None  # (NocTables, NocParams) of a router network, once finished

    def _check_window_size(self, cfg, tb) -> None:
        banks = cfg.memory.channels * cfg.memory.ranks * self.std.bank_groups \
            * self.std.banks_per_group
        start, end = self.options.window
        dram_cycles = -(-(end - start) * tb.core_period // tb.mem_period)
        if dram_cycles * banks > MAX_WINDOW_CELLS:
            longest = MAX_WINDOW_CELLS // banks * tb.mem_period // tb.core_period
            raise NpusimError(f"--trace-window {start}:{end}: per-cycle state of {banks} banks "
                              f"over {dram_cycles:,} DRAM cycles is too large; on this config "
                              f"a window may span at most {longest:,} core cycles")

    # ------------------------------------------------------------------ kernel side

    def params(self) -> dict[str, int]:
        """The kernels' trace Params: the bin width, the command-log window (ticks)."""
        w0, w1 = self.window_ticks
        return dict(trace_bin=self.bin_ticks,
                    trace_log_from=max(0, w0 - self.lookahead), trace_log_to=w1)

    def start(self, st) -> None:
        """Before the first kernel call: the open rows at cycle 0 if the window starts
        there, and where the kernels must first stop."""
        if self.window_ticks[0] == 0:
            self.snapshot = st.mem.dbank[ks.B_OPEN_ROW].copy()
        self._set_stop(st)

    def compile(self, st, p) -> None:
        from numba import typeof

        if self.dram:
            from npusim.kernels.trace import trace_sync

            trace_sync.compile((typeof(st.mem), typeof(p), typeof(np.int64(0))))
        if self.routers:
            from npusim.kernels.router_network import router_network_trace_sync

            router_network_trace_sync.compile((typeof(st.noc), typeof(p), typeof(np.int64(0))))

    def _set_stop(self, st) -> None:
        stop = (self.drained + self.ring) * self.bin_ticks - self.lookahead
        if self.snapshot is None:
            stop = min(stop, self.window_ticks[0])
        st.glob[ks.G_TRACE_STOP] = stop

    def drain(self, st, p) -> None:
        """Move finished bins, intervals and logged commands out of the kernels' buffers."""
        finished = bool(st.glob[ks.G_FINISHED])
        t = int(st.glob[ks.G_END] if finished else st.glob[ks.G_NOW])
        if self.dram:
            from npusim.kernels.trace import trace_sync

            trace_sync(st.mem, p, np.int64(t))
        if self.routers:
            from npusim.kernels.router_network import router_network_trace_sync

            router_network_trace_sync(st.noc, p, np.int64(t))
        upto = t // self.bin_ticks + 1 if finished else t // self.bin_ticks
        if upto > self.drained:
            # the loop may have skipped far past the stop tick, but it wrote only below
            # the ring's end: later bins are empty
            last = min(upto, self.drained + self.ring)
            first = self.drained
            while first < last:  # the ring's slots in at most two runs, as views
                s0 = first % self.ring
                s1 = min(s0 + last - first, self.ring)
                for name, table, axis in self._rings(st):
                    slots = (slice(None),) * axis + (slice(s0, s1),)
                    block = np.moveaxis(table[slots], axis, 0)  # [bin, ...]
                    self.bins.ensure(name, block.shape[1:])
                    self.bins.add_kernel_bins(name, first, block)
                    table[slots] = 0
                first += s1 - s0
            self.drained = upto
        cores, mem = st.cores, st.mem
        n = int(cores.ctl[ks.CC_IV_N])
        if n:
            self._add_intervals(cores.tr_iv[:, :n])
            cores.ctl[ks.CC_IV_N] = 0
        n = int(mem.ctl[ks.MC_LOG_N])
        if n:
            self.commands.append(mem.cmd_log[:, :n].T.copy())
            mem.ctl[ks.MC_LOG_N] = 0
        if self.snapshot is None and (t >= self.window_ticks[0] or finished):
            self.snapshot = mem.dbank[ks.B_OPEN_ROW].copy()
        if finished:
            self.end_tick = t
            if self.routers:  # the network's shape, for naming its links and routers
                self.network = (st.noc.net_tab, st.noc.net_p)
            self.layer_times = (cores.layer_st[ks.L_START].copy(),
                                cores.layer_st[ks.L_END].copy())
            if int(mem.ctl[ks.MC_LOG_LOST]):
                raise AssertionError("trace: DRAM commands were lost between drains")
        self._set_stop(st)

    def _rings(self, st):
        """The binned rings: (name, table, axis of its slots)."""
        rings = [("dram", st.mem.tr_dram, 1), ("chan", st.mem.tr_chan, 1),
                 ("noc", st.noc.tr_noc, 1)]
        if self.routers:  # the router network's (kernels/network/trace.py)
            rings += [("noc_link", st.noc.net.tr_link, 0), ("noc_occ", st.noc.net.tr_occ, 0)]
        return rings

    def _add_intervals(self, iv: np.ndarray) -> None:
        P = self.tb.core_period
        kind, core = iv[ks.IV_KIND], iv[ks.IV_CORE]
        column = core * N_KINDS + np.select(
            [kind == u for u in _UNIT_INDEX], list(_UNIT_INDEX.values()), default=4)
        self.bins.ensure("core", (self.cfg.num_cores * N_KINDS,))
        self.bins.add_intervals("core", column, iv[ks.IV_START] // P, -(-iv[ks.IV_END] // P))

    # ------------------------------------------------------------------ results

    @property
    def n_bins(self) -> int:
        """Bins covering the run, the tick it ended at included."""
        base_bins = self.end_tick // self.bin_ticks + 1
        return -(-base_bins // self.bins.factor)

    def command_log(self) -> np.ndarray:
        """Every logged command, (n, N_LOG_FIELDS), in issue order (window plus look-back)."""
        if not self.commands:
            return np.zeros((0, ks.N_LOG_FIELDS), np.int64)
        return np.concatenate(self.commands)
