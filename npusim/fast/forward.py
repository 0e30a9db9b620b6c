"""Steady-state extrapolation of repeated regions while a run is in progress (AIDG's method).

AIDG (fast performance models for DNN accelerators) simulates a loop until the latency of
one iteration reaches a fixed point, then adds the remaining iterations at that latency:
``total = t_prolog + (k - k_prolog) * t_iteration`` (its Eq. 2, with the overlap of
consecutive iterations inside ``t_iteration`` here, as it is measured end to end). Here the
loop is a :class:`~npusim.fast.regions.Region` of identical layers (decoder blocks,
repeated residual blocks), and the chip it runs on has a shared cycle-level DRAM, so the
fixed point is tested on the DRAM's behaviour as well as on time:

1. The run pauses when the first layer of each iteration ends (the engine's layer
   notifications). Between two such pauses lies one iteration: its period ``t_k`` and its
   counters (bytes moved, DRAM row hits and requests, read latency, busy cycles...).
2. Fixed point (Eq. 5): two consecutive periods agree within ``PERIOD_TOLERANCE``, and so
   do their bytes, their row-hit rate and their mean read latency (queueing delay).
   Periods shorter than a refresh lets agree by more than chance (``chip.least_period``)
   are compared as stretches of as many as make them that long, and the watch lasts
   ``MAX_WATCHED`` such stretches. Iterations that never settle but oscillate around a
   stable mean, at the end of the watch, over at least 1% of the region and a sample at
   least as long as a stretch, use the mean (Eq. 12). Otherwise the region is simulated
   in full.
3. The cut: every layer of the region not yet released becomes a layer without tiles,
   which the scheduler ends the moment it is released, so the run goes on with whatever
   follows the region. The skipped iterations are accounted for by time and by counts:
   each skipped layer gets the start, end and statistics of its counterpart in the last
   complete iteration, moved by whole periods; the layers after the region move by the
   difference between the region's extrapolated end and the end the shortened run saw;
   every chip counter (core, DRAM, channel, per bank) gains the skipped share of
   iterations times its per-iteration increment.

The same loop one level down: a :class:`~npusim.fast.regions.TileRun`, a layer's run of
identical tile groups, with one tile as the iteration. The kernel pauses each time the
layer is down to the next checkpoint of tiles left (``L_TILE_MARK``); at the fixed point
the run's groups not yet handed out are dropped (``skip_groups``; a run of few long groups
drops whole waves, a group on every core), the tiles in flight and any groups left over
finish, and the layer's end, what runs after it and every counter gain the dropped tiles
times the time and increments per tile.

A cut is only taken when nothing else shares the chip at that time: if a layer outside
the region (the layer) is running, another stream's layer is ready, or a request arrives
before the extrapolated end, it is simulated in full (multi-tenancy fallback). Nothing here
runs per cycle; the kernels are the same as in full fidelity.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from npusim.fast.chip import (COUNTERS, add_program_counts, counter_index, counters,
                              least_period, program_counts, released)
from npusim.fast.regions import (Region, TileContents, TileRun, find_regions,
                                 find_tile_runs, tile_row_sums)
from npusim.fast.repeats import LayerRepeats
from npusim.fast.streams import StreamCuts
from npusim.kernels import isa
from npusim.kernels import state as ks

PERIOD_TOLERANCE = 0.01  # Eq. 5: relative change of the period between two iterations
BYTES_TOLERANCE = 0.01  # relative change of DRAM bytes per iteration
HIT_RATE_TOLERANCE = 0.02  # absolute change of the row-hit rate
LATENCY_TOLERANCE = 0.05  # relative change of the mean read latency (queueing delay)
MAX_WATCHED = 8  # periods (or stretches of short ones) watched before falling back
MEAN_SAMPLE = 0.01  # Eq. 12: the oscillation fallback averages at least this share
WINDOWS = 16  # side by side (and runs of tiles): windows of 1/16 of the work
# A run of identical tile groups is watched from 16 groups per core on: the groups still to
# hand out at the cut are dropped whole, and the stagger of the last groups over the cores
# (up to one group's time) must be small beside the run (with 2 long groups per core it
# moved the layer's end by 7% of the run); and a short run leaves little to drop after its
# measurements (the 8-per-core attention layers of a Llama step: 256 runs watched, 16
# tiles dropped, the run 50% slower) ...
MIN_RUN_WAVES = 16
# ... or from 6 per core on when each wave (a group on every core) is long: at least the
# stretch a fixed point compares (``chip.least_period``) at the memory's peak bandwidth (on
# a memory without refresh nothing bounds that stretch, and such runs are not watched).
# Such a run is measured a wave at a time, so that each window holds the same work on every
# core (the LM head of a Llama step, 31 groups of 3 tiles over 4 cores, 143 MB of weights a
# wave and a third of a fast step's kernel time: in windows of 4 tiles, a group and a
# third, 3,170-33,452 cycles a tile, of whole waves 22,100-22,150), and its cut drops whole
# waves, so that the groups left over spread over the cores as in full; it is not cut while
# another layer waits for cores (``_cut_tiles``). Two windows past the first, a wave in
# flight, one to drop: 6 per core at least.
MIN_LONG_WAVES = 6


# How far side-by-side work has got: bytes moved, else array and vector cycles issued.
PROGRESS = ((ks.L_LD_BYTES, ks.L_ST_BYTES), (ks.L_SA_CYCLES, ks.L_VU_CYCLES))
# Per-layer statistics a skipped layer copies from its counterpart.
LAYER_STATS = (ks.L_SA_CYCLES, ks.L_VU_CYCLES, ks.L_LD_BYTES, ks.L_ST_BYTES)
# Times of the memory state that results read against the end of the run (DRAM cycles):
# moved by the total extrapolated time so that "after the end" stays after it.
END_TIMES = (("mem", "drank", (ks.RK_ACTIVE_UNTIL, ks.RK_ACTIVE_MARK)),
             ("mem", "dbank", (ks.B_AUTO_CLOSE, ks.B_ACT_CYCLE)))


def _dma_bytes(inst: np.ndarray) -> np.ndarray:
    """Per instruction row, the bytes its DMA descriptor moves (0 if it is no DMA)."""
    moved = inst[:, isa.I_N_OUTER] * inst[:, isa.I_N_INNER] * inst[:, isa.I_RUN_BYTES]
    return np.where(inst[:, isa.I_OP] <= isa.OP_MVOUT, moved, 0)


def _static_work(prog, first_layer: int) -> np.ndarray:
    """Per layer from ``first_layer`` on (the layers before: 0), from its instructions: DMA
    bytes, and array + vector instruction rows (only the scale matters: it sizes the
    measurement windows)."""
    out = np.zeros((2, prog.layer.shape[0]), np.int64)
    tiles = prog.tile[prog.tile[:, isa.T_LAYER] >= first_layer]

    def work(inst):
        return np.stack([_dma_bytes(inst), inst[:, isa.I_OP] > isa.OP_MVOUT], axis=1)

    per_tile = tile_row_sums(prog, tiles, work)
    for i in range(2):
        np.add.at(out[i], tiles[:, isa.T_LAYER], per_tile[:, i])
    return out


@dataclass
class _Watch:
    """One region being watched: the real tick and the counters when the first layer of
    every ``block``-th iteration ended, and what became of the region."""

    region: Region
    block: float  # progress between two measurements (iterations, or bytes / cycles)
    by_progress: bool = False  # side by side: measured by bytes (or cycles) done
    metric: int = 0  # which PROGRESS measure
    times: list[int] = field(default_factory=list)
    progress: list[float] = field(default_factory=list)
    counters: list[dict[str, np.ndarray]] = field(default_factory=list)
    outcome: str = "watching"
    period: int = 0  # ticks per iteration, once cut
    cut_layers: np.ndarray | None = None
    in_flight: np.ndarray | None = None  # region layers running when it was cut
    after: np.ndarray | None = None  # layers that run after the skipped ones
    predicted_end: int = 0  # real tick the region's last layer ends
    extrapolated_ticks: int = 0
    iterations_skipped: float = 0.0
    how: str = ""  # how the period was found: a fixed point, or a mean (Eq. 12)
    origin: int = -1  # iterations that follow each other: the layer whose end starts them
    settled: bool = False
    limit: int = MAX_WATCHED  # periods watched before falling back (``_lengthen``)

    @property
    def layer_list(self) -> np.ndarray:
        if not hasattr(self, "_layers"):
            self._layers = self.region.layers()
        return self._layers

    @property
    def anchors(self) -> list[int]:
        """Layers whose end the run pauses at: the first layer of every ``block``-th
        iteration; side by side, every layer (each end is a sample)."""
        r = self.region
        if self.by_progress:
            return self.layer_list.tolist()
        last = min(r.iterations - 1, self.limit * int(self.block))
        if self.origin >= 0:  # the end of each iteration, from the start of the first
            return [self.origin] + [r.layer(k, r.period - 1) for k in range(last + 1)]
        return [r.layer(k) for k in range(0, last + 1, int(self.block))]


def _anchor_mark(w: _Watch) -> int:
    """How the run pauses at ``w``'s anchors. Iterations that follow each other: before the
    tiles an anchor's end released are handed out, so that a cut there skips every layer of
    the region not yet begun, the next iteration whole where the anchors are iterations'
    ends (BERT-base at sequence 512 on `server` ran the next block's Q, K and V projections
    after its cut, 29,000 cycles: 6% of what fast fidelity simulates), the rest of the
    present one where they are iterations' first layers. Side by side: after the step, as
    the other pauses."""
    return ks.NOTIFY_AFTER_STEP if w.by_progress else ks.NOTIFY_BEFORE_HAND_OUT


@dataclass
class _TileWatch:
    """One run of identical tile groups inside a layer being watched: the real tick and the
    counters each time another ``block`` of the layer's tiles has finished (the kernel
    pauses there: ``L_TILE_MARK``). An iteration is one tile; the run's tiles still to be
    handed out when the fixed point is reached (in multiples of ``waves`` groups) are
    dropped and accounted for."""

    run: TileRun
    block: int  # tiles between two measurements
    waves: int  # a cut drops a multiple of this many groups (a wave, or 1)
    mark: int = 0  # tiles left in the layer at the next measurement
    times: list[int] = field(default_factory=list)
    progress: list[float] = field(default_factory=list)
    counters: list[dict[str, np.ndarray]] = field(default_factory=list)
    outcome: str = "watching"
    how: str = ""
    period: float = 0.0  # ticks per tile, once cut
    tiles_skipped: int = 0
    after: np.ndarray | None = None  # layers not begun at the cut: they move
    delta: int = 0  # ticks the dropped tiles would have taken
    extrapolated_ticks: int = 0
    settled: bool = False
    by_progress = True
    limit = MAX_WATCHED  # windows watched: the run has only ``WINDOWS``

    @property
    def total(self) -> float:
        return float(self.run.tiles)


class FastForward:
    """Watches a run's repeated regions and cuts them once they reach a fixed point.

    The engine calls :meth:`watch` with each program (again after every extension),
    :meth:`paused` whenever the kernel stops for a layer notification, and
    :meth:`final_state` for the results. Times the user sees ("real") are the simulated
    times plus what was extrapolated before them: ``offset`` for what runs from now on,
    ``shift`` per layer.
    """

    def __init__(self, timebase, n_cores: int):
        self.tb = timebase
        self.n_cores = n_cores
        self.watches: list[_Watch] = []
        self.active: list[_Watch] = []  # watching, or cut and not yet settled
        self._active_first: np.ndarray | None = None  # their first layers
        self.offset = 0
        self.shift = np.zeros(0, dtype=np.int64)
        self.cut = np.zeros(0, dtype=bool)
        self.synth_times = np.zeros((2, 0), dtype=np.int64)  # start, end of skipped layers
        self.synth_stats = np.zeros((len(LAYER_STATS), 0), dtype=np.int64)
        # layers cut short inside (tile runs): their end moves on its own, and their
        # statistics gain the dropped tiles' share
        self.end_shift = np.zeros(0, dtype=np.int64)
        self.stat_extra = np.zeros((len(LAYER_STATS), 0), dtype=np.float64)
        self.tile_watches: list[_TileWatch] = []
        # by layer, the runs of tiles watching or cut and not yet settled (an LLM step has
        # hundreds: a pause looks only at those whose layer has begun)
        self.tiles_pending: dict[int, list[_TileWatch]] = {}
        self._pending_layers: np.ndarray | None = None
        self.ledger: dict[str, np.ndarray] = {}
        self._claims: dict[int, tuple[int, Counter]] = {}  # layers we asked to pause at
        self.skipped: list[tuple[int, int]] = []  # (simulated tick, ticks extrapolated there)
        self.least = 0  # ticks a compared stretch lasts at least (set with the first program)
        self.streams = StreamCuts(self, timebase)  # steady streaming inside tiles
        self.repeats = LayerRepeats(self)  # identical layers spread over the run
        self.contents = TileContents()  # which tiles are alike, kept across extensions

    # -- notifications, shared with whoever else set them ------------------------------
    def _claim(self, st, layers, mark: int = ks.NOTIFY_AFTER_STEP) -> None:
        """Pause the run when each of ``layers`` ends, after the step or, with
        ``NOTIFY_BEFORE_HAND_OUT``, before that tick's tiles are handed out, until an
        ``_unclaim`` of the same mark; a layer pauses as the largest mark still claimed
        asks, or as whoever else set its mark (``notified``) asks."""
        for x in map(int, layers):
            if x not in self._claims:  # the mark someone else set, the marks claimed
                self._claims[x] = (int(st.cores.layer_st[ks.L_NOTIFY, x]), Counter())
            self._claims[x][1][mark] += 1
            self._set_mark(st, x)

    def _unclaim(self, st, layers, mark: int = ks.NOTIFY_AFTER_STEP) -> None:
        for x in map(int, layers):
            claim = self._claims.get(x)
            if claim is not None and claim[1][mark] > 0:
                claim[1][mark] -= 1
                self._set_mark(st, x)
                if not +claim[1]:
                    del self._claims[x]

    def _set_mark(self, st, x: int) -> None:
        outside, marks = self._claims[x]
        st.cores.layer_st[ks.L_NOTIFY, x] = max([outside, *(m for m, n in marks.items() if n)])

    def notified(self, layers) -> None:
        """Someone else (an LLM server) asked the run to pause at the end of ``layers``:
        a claimed one keeps that when its claims end."""
        for x in map(int, layers):
            if x in self._claims:
                outside, marks = self._claims[x]
                self._claims[x] = (max(outside, ks.NOTIFY_AFTER_STEP), marks)

    # -- setting up -----------------------------------------------------------------
    def watch(self, run, first_layer: int = 0) -> None:
        """Find the regions among layers ``first_layer ..`` and watch them."""
        prog, st = run.prog, run.st
        grow = prog.layer.shape[0] - self.shift.shape[0]
        self.shift = np.concatenate([self.shift, np.full(grow, self.offset, np.int64)])
        self.cut = np.concatenate([self.cut, np.zeros(grow, bool)])
        self.synth_times = np.concatenate([self.synth_times, np.zeros((2, grow), np.int64)], 1)
        self.synth_stats = np.concatenate(
            [self.synth_stats, np.zeros((len(LAYER_STATS), grow), np.int64)], 1)
        self.end_shift = np.concatenate([self.end_shift, np.zeros(grow, np.int64)])
        self.stat_extra = np.concatenate(
            [self.stat_extra, np.zeros((len(LAYER_STATS), grow))], 1)
        if not self.ledger:
            self.ledger = {k: np.zeros_like(v) for k, v in counters(st).items()}
            self.streams.start(st, run.p)
            self.least = least_period(run.p, self.tb, PERIOD_TOLERANCE)
        work = _static_work(prog, first_layer)
        src = prog.edge_sources()
        content = self.contents.update(prog)
        ls = st.cores.layer_st
        for tr in find_tile_runs(prog, first_layer, MIN_LONG_WAVES * self.n_cores, content):
            if (self._few_groups(tr)
                    and not (self.least and self._wave_ticks(run, tr) >= self.least)):
                continue
            # a long first block of the outer loop is a run of its own, watched first; the
            # run past it is watched from where the first one stops
            head = tr.first_block()
            runs = [head, tr] if head and head.groups >= MIN_RUN_WAVES * self.n_cores else [tr]
            ws = [self._tile_watch(r) for r in runs]
            self._start_tiles(run, ws[0], skip=tr.tiles_before)
            self.tile_watches += ws
            self.tiles_pending[tr.layer] = ws
            self._pending_layers = None
        regions = find_regions(prog, first_layer, tile_content=content,
                               signatures=self.repeats.signatures(prog, first_layer, content))
        for region in regions:
            if region.sequential:
                w = _Watch(region, 1)
                # iteration k runs from the end of iteration k - 1, the first from the end of
                # its last predecessor (when that is still to come): then two iterations
                # give two periods
                preds = src[prog.layer_succ == region.first]
                if len(preds) and st.cores.layer_st[ks.L_END, preds].max() < 0:
                    w.origin = int(preds.max())
            else:  # side by side: samples when WINDOWS-th of the work is done
                total = work[:, region.layers()].sum(axis=1)
                use = 0 if total[0] > 0 else 1
                if total[use] == 0:
                    continue
                w = _Watch(region, total[use] / WINDOWS, by_progress=True)
                w.metric = use
            self.watches.append(w)
            self.active.append(w)
            self._active_first = None
            self._claim(st, w.anchors, _anchor_mark(w))
        self.repeats.watch(run, first_layer, np.concatenate(
            [r.layers() for r in regions] + [np.zeros(0, np.int64)]).astype(np.int64))

    def _few_groups(self, tr: TileRun) -> bool:
        """Under ``MIN_RUN_WAVES`` groups per core: watched only if its waves are long,
        a wave at a time, and not cut while another layer waits for cores."""
        return tr.groups < MIN_RUN_WAVES * self.n_cores

    def _tile_watch(self, tr: TileRun) -> _TileWatch:
        """Many groups: windows of a ``WINDOWS``-th of the run (at least a tile per core),
        and the cut drops any number of groups. Few long ones: windows of one wave (a
        group on every core), and the cut drops whole waves."""
        if not self._few_groups(tr):
            return _TileWatch(tr, max(self.n_cores, tr.tiles // WINDOWS), 1)
        return _TileWatch(tr, self.n_cores * tr.tiles_per_group, self.n_cores)

    def _wave_ticks(self, run, tr: TileRun) -> float:
        """The least a wave of ``tr`` (a group on every core) can last, in ticks: its DRAM
        bytes at the memory's peak bandwidth (0 where the memory has no peak)."""
        peak = run.cfg.memory.peak_bytes_per_s
        if peak <= 0:
            return 0.0
        prog = run.prog
        t0, n = (int(x) for x in prog.group[tr.first_group, [isa.G_TILE_START,
                                                             isa.G_TILE_LEN]])
        group_bytes = float(tile_row_sums(prog, prog.tile[t0:t0 + n],
                                          lambda inst: _dma_bytes(inst)[:, None]).sum())
        return self.n_cores * group_bytes / peak * 1e6 * self.tb.ticks_per_us

    def real_end(self, st, layer: int) -> int:
        """The tick ``layer`` ended as the user sees it (it has ended in the run): its
        synthesised end if it was extrapolated."""
        if self.cut[layer]:
            return int(self.synth_times[1, layer])
        return (int(st.cores.layer_st[ks.L_END, layer]) + int(self.shift[layer])
                + int(self.end_shift[layer]))

    # -- during the run ---------------------------------------------------------------
    def paused(self, run) -> None:
        """Take the measurements due at this pause, cut what has converged, and settle the
        time shift of regions whose shortened run has ended."""
        st = run.st
        self.streams.paused(run)
        if self.tiles_pending:
            if self._pending_layers is None:
                self._pending_layers = np.fromiter(self.tiles_pending, np.int64)
            layers = self._pending_layers
            for layer in layers[st.cores.layer_st[ks.L_START, layers] >= 0].tolist():
                ws = self.tiles_pending[layer]
                for i, w in enumerate(ws):
                    was = w.outcome
                    self._sample_tiles(run, w)
                    if was == "watching" and w.outcome != "watching" and i + 1 < len(ws):
                        self._start_tiles(run, ws[i + 1])
                ws[:] = [w for w in ws if _still_active(w)]
                if not ws:
                    del self.tiles_pending[layer]
                    self._pending_layers = None
        if self._active_first is None:
            self._active_first = np.array([w.region.first for w in self.active], np.int64)
        # side by side regions are sampled from their first layer's start on (an LLM step
        # has a hundred waiting at most pauses: one look at all of them)
        begun = (st.cores.layer_st[ks.L_START, self._active_first] >= 0).tolist()
        for w, b in zip(self.active, begun):
            if w.outcome == "cut" and not w.settled:
                self._settle(run.st, w, run.release_offset_changed)
            if w.outcome != "watching":
                continue
            if w.by_progress:
                if not b:
                    continue
                self._sample_progress(run, w)
            else:
                self._sample_anchors(run, w)
            if w.outcome != "watching":
                self._unclaim(st, w.anchors, _anchor_mark(w))
        active = [w for w in self.active if _still_active(w)]
        if len(active) != len(self.active):
            self.active, self._active_first = active, None
        self.repeats.paused(run)

    def measuring(self, st) -> bool:
        """Whether a region or run of tiles in progress is being measured: a cut inside
        tiles would change the periods it compares (``streams.StreamCuts``)."""
        ls = st.cores.layer_st
        return (any(w.outcome == "watching" and ls[ks.L_START, w.region.first] >= 0
                    for w in self.active)
                or any(w.outcome == "watching" and ls[ks.L_START, layer] >= 0
                       for layer, ws in self.tiles_pending.items() for w in ws))

    def _sample(self, run, w: _Watch, tick: int, progress: float) -> None:
        w.times.append(tick)
        w.progress.append(progress)
        w.counters.append(counters(run.st, self.ledger))
        self._decide(run, w)

    def _sample_anchors(self, run, w: _Watch) -> None:
        ls = run.st.cores.layer_st
        anchors = w.anchors
        while w.outcome == "watching":
            if len(w.times) == len(anchors):
                if not self._lengthen(run.st, w):
                    w.outcome = f"no fixed point in {len(anchors) - 1} iterations"
                    return
                anchors = w.anchors
            a = anchors[len(w.times)]
            if ls[ks.L_END, a] < 0:
                return
            if self.cut[a]:
                w.outcome = "skipped with an enclosing region"
                return
            self._sample(run, w, int(ls[ks.L_END, a]) + int(self.shift[a])
                         + int(self.end_shift[a]), len(w.times) * w.block)

    def _lengthen(self, st, w: _Watch) -> bool:
        """Iterations shorter than ``least`` are compared as stretches of ``g`` of them
        (``_decide``): the watch covers ``MAX_WATCHED`` such stretches, not iterations (a
        GRU's 127 steps of 2,000 cycles on ``server``: 8 steps gave neither a fixed point
        nor a mean that met a refresh's rare slow steps, -2.0%). Claims the anchors that
        adds; False when there is nothing to add."""
        periods = np.diff(w.times)[1:]  # the first carries the prolog
        if self.least <= 0 or not len(periods):
            return False
        g = -(-self.least // max(1, int(np.median(periods))))
        old = len(w.anchors)
        w.limit = max(w.limit, MAX_WATCHED * g)
        new = w.anchors[old:]
        if not new:
            return False
        self._claim(st, new, _anchor_mark(w))
        return True

    def _sample_progress(self, run, w: _Watch) -> None:
        """Side by side: a sample whenever another window of the region's work is done
        (bytes moved, or array and vector cycles for work that moves none)."""
        ls = run.st.cores.layer_st
        if ls[ks.L_START, w.region.first] < 0:  # not begun (most pauses: cheap to tell)
            return
        layers = w.layer_list
        if self.cut[layers].any():
            w.outcome = "skipped with an enclosing region"
            return
        if (ls[ks.L_END, layers] >= 0).all():
            w.outcome = f"no fixed point in {max(0, len(w.times) - 1)} windows"
            return
        done = _progress(ls, w.metric, layers)
        last = w.progress[-1] if w.progress else 0.0  # the first window is the prolog
        if done >= last + w.block:
            self._sample(run, w, int(run.st.glob[ks.G_NOW]) + self.offset, done)
            if w.outcome == "watching" and len(w.times) > MAX_WATCHED:
                w.outcome = f"no fixed point in {len(w.times) - 1} windows"

    def _decide(self, run, w: _Watch) -> None:
        # a run of tiles counts its windows from the end of its outer loop's first
        # iteration on (``TileRun.span``): the windows before say nothing of the rest
        i0 = (np.searchsorted(w.progress, w.run.tiles_before + w.run.span)
              if isinstance(w, _TileWatch) else 0)
        times, progress, counts = w.times[i0:], w.progress[i0:], w.counters[i0:]
        k = len(times) - 1  # periods measured so far: 1..k
        if k < 2:
            return
        cut = self._cut_tiles if isinstance(w, _TileWatch) else self._cut
        # Eq. 5 between the last two stretches of g periods each, g the fewest that makes
        # both at least ``least`` long (chip.least_period: shorter ones agree by chance)
        g = 1
        while 2 * g <= k and min(times[k] - times[k - g],
                                 times[k - g] - times[k - 2 * g]) < self.least:
            g += 1
        if 2 * g <= k:
            rate = [_rate(times, progress, counts, i, i + g) for i in (k - 2 * g, k - g)]
            (p0, d0), (p1, d1) = rate
            if _same(p0, p1, d0, d1):
                # both stretches are at the fixed point: their mean is the better estimate
                mean = {n: (d0[n] + d1[n]) / 2 for n in d1}
                cut(run, w, float((p0 + p1) / 2), mean,
                    "fixed point" if g == 1 else f"fixed point over {g} periods each")
                return
        total = (w.total if isinstance(w, _TileWatch)
                 else w.block * WINDOWS if w.by_progress else w.region.iterations)
        # only at the end of the watch, and over a sample at least ``least`` long: a
        # shorter one misses or meets refreshes by chance (the steps of that GRU: seven
        # of 2,000 cycles, mean 2,012; all 126, 2,044)
        if (k >= w.limit and progress[-1] >= MEAN_SAMPLE * total
                and times[k] - times[1] >= self.least):
            # every period but the first, which carries the prolog
            sample = np.array([_period(times, progress, i, i + 1) for i in range(1, k)])
            sem = sample.std(ddof=1) / np.sqrt(len(sample)) / sample.mean()
            if sem <= PERIOD_TOLERANCE:
                deltas = [_rate(times, progress, counts, i, i + 1)[1] for i in range(1, k)]
                mean = {n: sum(d[n] for d in deltas) / len(sample) for n in deltas[0]}
                cut(run, w, float(sample.mean()), mean,
                    f"mean of {len(sample)} oscillating windows")

    def _account(self, add: dict[str, np.ndarray], prog, skipped: np.ndarray) -> None:
        """A cut's counter increments ``add`` (measured rates times what it skipped) join
        the ledger, with what the program fixes exact for the ``skipped`` tiles."""
        add_program_counts(add, program_counts(prog, skipped))
        for name, d in add.items():
            self.ledger[name] += d

    def _skip_no_work_after(self, st, prog, cut, inside) -> np.ndarray:
        """Layers of no work (no tiles) outside the region, not begun, whose every input is
        a layer of ``cut``, one of these in turn, or a layer that has ended: each would end
        the moment its last input does, so it is skipped too, at that input's synthesised
        end. Run, it would end at the cut and move with what follows the region (a tf2onnx
        GRU's per-step output slices were reported at the region's end, 18% of the run
        late). Returns them."""
        ls = st.cores.layer_st
        src = None
        out: list[int] = []
        todo = list(cut.tolist())
        while todo:
            p = todo.pop()
            s0 = int(prog.layer[p, isa.L_SUCC_START])
            for x in prog.layer_succ[s0:s0 + int(prog.layer[p, isa.L_SUCC_LEN])].tolist():
                if (self.cut[x] or inside[x] or ls[ks.L_START, x] >= 0
                        or prog.layer[x, isa.L_GROUP_LEN] > 0):
                    continue
                if src is None:
                    src = prog.edge_sources()
                preds = src[prog.layer_succ == x]
                if not (self.cut[preds] | (ls[ks.L_END, preds] >= 0)).all():
                    continue
                end = max(self.real_end(st, q) for q in preds.tolist())
                self.cut[x] = True
                self.synth_times[:, x] = end
                self.synth_stats[:, x] = 0
                out.append(x)
                todo.append(x)
        return np.array(sorted(out), np.int64)

    def _units(self, run, w: _Watch, layers) -> float:
        """Progress units of ``layers``: iterations, or the bytes / cycles they took."""
        if not w.by_progress:
            return len(layers) / w.region.period
        return _progress(run.st.cores.layer_st, w.metric, layers)

    def _cut(self, run, w: _Watch, per_unit: float, per_unit_counts: dict, how: str) -> None:
        st, prog = run.st, run.prog
        r = w.region
        ls = st.cores.layer_st
        n = prog.layer.shape[0]
        rel = released(st, prog)
        started = ls[ks.L_START] >= 0
        ended = ls[ks.L_END] >= 0
        grid = r.layers().reshape(r.iterations, r.period)
        layers = grid.ravel()
        # the layers to skip: not yet handed out to a core (where iterations follow each
        # other the run paused at an anchor before handing out what its end released:
        # ``_anchor_mark``)
        todo = ~started[layers]
        cut = layers[todo]
        if len(cut) == 0:
            w.outcome = "nothing left to skip"
            return
        done = ended[grid].all(axis=1)
        if not done.any():
            w.outcome = "no complete iteration to copy"
            return
        ref = int(np.flatnonzero(done).max())
        units = self._units(run, w, grid[ref])  # progress units of one iteration
        period = int(round(per_unit * units))
        per_iteration = {k: v * units for k, v in per_unit_counts.items()}
        inside = np.zeros(n, bool)
        inside[layers] = True
        running = started & ~ended & ~inside
        stream = prog.layer[r.first, isa.L_REQUEST]
        foreign = rel & ~ended & (prog.layer[:, isa.L_REQUEST] != stream)
        if running.any() or foreign.any():
            other = int(np.flatnonzero(running | foreign)[0])
            w.outcome = f"shared with {prog.layers[other].name} (simulated in full)"
            return
        it, idx = np.divmod(np.flatnonzero(todo), r.period)
        ref_layers = grid[ref, idx]
        moved = (it - ref) * period
        # the reference layers as the user sees them (some may be extrapolated themselves,
        # by a region inside this one)
        was_cut = self.cut[ref_layers]
        ref_start = np.where(was_cut, self.synth_times[0, ref_layers],
                             ls[ks.L_START, ref_layers] + self.shift[ref_layers])
        ref_end = np.where(was_cut, self.synth_times[1, ref_layers],
                           ls[ks.L_END, ref_layers] + self.shift[ref_layers]
                           + self.end_shift[ref_layers])
        predicted_end = int((ref_end + moved).max())
        waiting = prog.release_order[int(st.cores.ctl[ks.CC_RELEASED]):]
        if len(waiting):  # program rows keep the arrival the user gave
            arrival = int(prog.layer[waiting, isa.L_RELEASE].min()) * self.tb.core_period
            if arrival < predicted_end:
                w.outcome = "a request arrives before the region ends (simulated in full)"
                return
        # what runs after the skipped layers: everything not yet released, and what became
        # ready after the first skipped layer that was ready
        seq = ls[ks.L_READY_SEQ]
        ready_cut = cut[rel[cut]]
        first_seq = int(seq[ready_cut].min()) if len(ready_cut) else np.iinfo(np.int64).max
        after = ~started & ~inside & (~rel | (seq > first_seq))
        # inner regions inside the skipped layers are done with
        for other in self.watches:
            if other is not w and other.outcome == "watching" and inside[other.region.first]:
                if np.isin(other.anchors, cut).any():
                    other.outcome = "skipped with an enclosing region"
                    self._unclaim(st, other.anchors, _anchor_mark(other))
        self.cut[cut] = True
        self.synth_times[0, cut] = ref_start + moved
        self.synth_times[1, cut] = ref_end + moved
        for i, f in enumerate(LAYER_STATS):
            self.synth_stats[i, cut] = np.where(
                was_cut, self.synth_stats[i, ref_layers],
                ls[f, ref_layers] + np.rint(self.stat_extra[i, ref_layers]).astype(np.int64))
        ref_row = grid[ref]
        weight = np.where(self.cut[:n], self.synth_stats[2, :n] + self.synth_stats[3, :n],
                          ls[ks.L_LD_BYTES] + ls[ks.L_ST_BYTES] + self.stat_extra[2, :n]
                          + self.stat_extra[3, :n]).astype(np.float64)
        if weight[ref_row].sum() == 0:
            weight = np.where(self.cut[:n], self.synth_times[1, :n] - self.synth_times[0, :n],
                              ls[ks.L_END] - ls[ks.L_START]).astype(np.float64)
        total = weight[ref_row].sum()
        share = weight[ref_layers].sum() / total if total > 0 else len(cut) / r.period
        self._account({name: share * d for name, d in per_iteration.items()}, prog,
                      np.flatnonzero(np.isin(prog.tile[:, isa.T_LAYER], cut)))
        cut = np.concatenate([cut, self._skip_no_work_after(st, prog, cut, inside)])
        self._unclaim(st, w.anchors, _anchor_mark(w))
        w.outcome, w.how, w.period = "cut", how, period
        w.cut_layers = cut
        w.in_flight = layers[~todo & ~ended[layers]]  # handed out or ready before the cut
        w.after = after
        w.predicted_end = predicted_end
        w.iterations_skipped = share
        self._claim(st, w.in_flight)
        run.skip_layers(cut)
        self._settle(st, w, run.release_offset_changed)

    # -- runs of identical tiles inside a layer -----------------------------------------
    def _sample_tiles(self, run, w: _TileWatch) -> None:
        """A measurement when the layer is down to ``w.mark`` tiles; the settling of a cut
        once the layer has ended."""
        ls = run.st.cores.layer_st
        layer = w.run.layer
        if w.outcome == "cut":
            if not w.settled and ls[ks.L_END, layer] >= 0:
                self._settle_tiles(run.st, w, run.release_offset_changed)
            return
        if w.outcome != "watching":
            return
        if self.cut[layer]:
            self._stop_tiles(run, w, "skipped with an enclosing region")
            return
        if ls[ks.L_END, layer] >= 0:
            self._stop_tiles(run, w, f"no fixed point in {max(0, len(w.times) - 1)} windows")
            return
        left = int(ls[ks.L_TILES_LEFT, layer])
        if left > w.mark:
            return
        counts = counters(run.st, self.ledger)
        counts["layer"] = ls[list(LAYER_STATS), layer].astype(np.float64)
        w.times.append(int(run.st.glob[ks.G_NOW]) + self.offset)
        w.progress.append(float(_tiles_done(w.run, left)))
        w.counters.append(counts)
        self._decide(run, w)
        if w.outcome != "watching":
            if w.outcome != "cut":
                ls[ks.L_TILE_MARK, layer] = 0
            return
        w.mark -= w.block
        self._next_mark(run, w)

    def _next_mark(self, run, w: _TileWatch) -> None:
        """The kernel pauses at ``w.mark`` tiles left, if the run still has tiles to hand out
        after that measurement."""
        if (w.mark <= w.run.tiles_after + 2 * self.n_cores
                or len(w.times) > MAX_WATCHED):
            self._stop_tiles(run, w, f"no fixed point in {max(0, len(w.times) - 1)} windows")
        else:
            run.st.cores.layer_st[ks.L_TILE_MARK, w.run.layer] = w.mark

    def _start_tiles(self, run, w: _TileWatch, skip: int = 0) -> None:
        """Measure ``w`` from ``skip`` tiles of its layer on: its first run from the start of
        the run, a later one from where the one before it stopped watching (cut, or no
        fixed point)."""
        w.mark = int(run.st.cores.layer_st[ks.L_TILES_LEFT, w.run.layer]) - skip - w.block
        self._next_mark(run, w)

    def _stop_tiles(self, run, w: _TileWatch, outcome: str) -> None:
        w.outcome = outcome
        run.st.cores.layer_st[ks.L_TILE_MARK, w.run.layer] = 0

    def _cut_tiles(self, run, w: _TileWatch, per_tile: float, per_tile_counts: dict,
                   how: str) -> None:
        """Drop the run's groups not yet handed out; their time and counts come from the
        fixed point (ticks and counter increments per tile)."""
        st, prog = run.st, run.prog
        ls = st.cores.layer_st
        layer = w.run.layer
        ls[ks.L_TILE_MARK, layer] = 0
        started = ls[ks.L_START] >= 0
        ended = ls[ks.L_END] >= 0
        running = started & ~ended
        running[layer] = False
        stream = prog.layer[layer, isa.L_REQUEST]
        foreign = released(st, prog) & ~ended & (prog.layer[:, isa.L_REQUEST] != stream)
        if running.any() or foreign.any():
            other = int(np.flatnonzero(running | foreign)[0])
            w.outcome = f"shared with {prog.layers[other].name} (simulated in full)"
            return
        if self._few_groups(w.run):
            # few long groups: the cores run out of them up to a group's time apart, and a
            # layer waiting for cores starts in that stagger, which drifts over the run
            # (a Llama decoder's up projection beside its gate one, 8 groups per core of
            # 735,000 cycles on 2 cores: it started 312,000 cycles early after a cut)
            ready = released(st, prog) & ~started & (prog.layer[:, isa.L_GROUP_LEN] > 0)
            if ready.any():
                other = int(np.flatnonzero(ready)[0])
                w.outcome = f"{prog.layers[other].name} waits for cores (simulated in full)"
                return
        g = int(ls[ks.L_NEXT_GROUP, layer])
        end = g + (w.run.end_group - g) // w.waves * w.waves
        if g >= end:
            w.outcome = "nothing left to skip"
            return
        tiles = int(prog.group[g:end, isa.G_TILE_LEN].sum())
        delta = int(round(per_tile * tiles))
        waiting = prog.release_order[int(st.cores.ctl[ks.CC_RELEASED]):]
        if len(waiting):  # program rows keep the arrival the user gave
            arrival = int(prog.layer[waiting, isa.L_RELEASE].min()) * self.tb.core_period
            if arrival < int(st.glob[ks.G_NOW]) + self.offset + delta:
                w.outcome = "a request arrives before the layer ends (simulated in full)"
                return
        skipped = np.concatenate([np.arange(t0, t0 + n) for t0, n in prog.group[
            g:end, [isa.G_TILE_START, isa.G_TILE_LEN]].tolist()])
        dropped = run.skip_groups(layer, end)
        assert dropped == tiles, (dropped, tiles)
        add = {name: d * tiles for name, d in per_tile_counts.items()}
        self.stat_extra[:, layer] += add.pop("layer")
        self._account(add, prog, skipped)
        w.outcome, w.how, w.period = "cut", how, per_tile
        w.tiles_skipped, w.delta = tiles, delta
        w.after = ~started
        if ls[ks.L_END, layer] >= 0:  # nothing was in flight
            self._settle_tiles(st, w, run.release_offset_changed)
        else:
            self._claim(st, [layer])

    def _settle_tiles(self, st, w: _TileWatch, moved=None) -> None:
        """The layer has ended: it and what runs after it move by the dropped tiles' time
        (``moved()`` is told)."""
        ls = st.cores.layer_st
        layer = w.run.layer
        after = np.ones(self.shift.shape[0], bool)  # layers added since: all after
        after[:w.after.shape[0]] = w.after
        self.shift[after & ~self.cut] += w.delta
        self.end_shift[layer] += w.delta
        self.offset += w.delta
        self.skipped.append((int(ls[ks.L_END, layer]), w.delta))
        w.extrapolated_ticks = w.delta
        w.settled = True
        self._unclaim(st, [layer])
        if moved is not None:
            moved()

    def _settle(self, st, w: _Watch, moved=None) -> None:
        """Once the skipped layers and the rest of the region have ended, what runs after
        them moves by the difference between the region's extrapolated end and the end the
        shortened run saw (``moved()`` is told)."""
        ls = st.cores.layer_st
        last = np.concatenate([w.cut_layers, w.in_flight])
        if (ls[ks.L_END, last] < 0).any():
            return
        sim_end = int(ls[ks.L_END, last].max())
        delta = max(0, w.predicted_end - (sim_end + self.offset))
        w.extrapolated_ticks = delta
        after = np.ones(self.shift.shape[0], bool)  # layers added since: all after
        after[:w.after.shape[0]] = w.after
        self.shift[after & ~self.cut] += delta
        self.offset += delta
        self.skipped.append((sim_end, delta))
        self._unclaim(st, w.in_flight)
        w.settled = True
        if moved is not None:
            moved()

    # -- results ----------------------------------------------------------------------
    def final_state(self, st):
        """A copy of ``st`` as the full run would have left it, for the results."""
        for w in self.active:  # regions that ended with the run
            if w.outcome == "cut" and not w.settled:
                self._settle(st, w)
        for w in (w for ws in self.tiles_pending.values() for w in ws):
            if w.outcome == "cut" and not w.settled:
                self._settle_tiles(st, w)
        ls = st.cores.layer_st.copy()
        n = ls.shape[1]
        shift, cut = self.shift[:n], self.cut[:n]
        for f in (ks.L_START, ks.L_END):
            ls[f] = np.where(ls[f] >= 0, ls[f] + shift, ls[f])
        ls[ks.L_END] = np.where(ls[ks.L_END] >= 0, ls[ks.L_END] + self.end_shift[:n],
                                ls[ks.L_END])
        ls[ks.L_START, cut] = self.synth_times[0, :n][cut]
        ls[ks.L_END, cut] = self.synth_times[1, :n][cut]
        for i, f in enumerate(LAYER_STATS):
            ls[f] += np.rint(self.stat_extra[i, :n]).astype(np.int64)
            ls[f, cut] = self.synth_stats[i, :n][cut]
        glob = st.glob.copy()
        end = max(int(ls[ks.L_END].max()) if n else 0, int(glob[ks.G_END]))
        mem_extra = (end - int(glob[ks.G_END])) // self.tb.mem_period
        glob[ks.G_END] = end
        tables = {"cores": {"layer_st": ls}, "mem": {}}
        for unit, name, fields in COUNTERS:
            table = getattr(getattr(st, unit), name).copy()
            add = np.rint(self.ledger[name]).astype(np.int64)
            if fields is None:
                table += add
            else:
                table[list(fields)] += add
            tables[unit][name] = table
        for unit, name, fields in END_TIMES:
            table = tables[unit][name]
            for f in fields:
                table[f] = np.where(table[f] > 0, table[f] + mem_extra, table[f])
        return st._replace(glob=glob, cores=st.cores._replace(**tables["cores"]),
                           mem=st.mem._replace(**tables["mem"]))

    def report(self, prog) -> dict:
        """What was simulated and what extrapolated, for the JSON result."""
        n = prog.layer.shape[0]
        cut = self.cut[:n]
        tiles = np.bincount(prog.tile[:, isa.T_LAYER], minlength=n)
        P = self.tb.core_period
        runs = [w for w in self.tile_watches if not self.cut[w.run.layer]]
        dropped = sum(w.tiles_skipped for w in runs if w.outcome == "cut")
        ticks = sum(w.extrapolated_ticks for w in self.watches + self.tile_watches)
        ticks += self.streams.ticks + self.repeats.ticks
        return {
            "fidelity": "fast",
            "layers_simulated": int((~cut).sum()), "layers_extrapolated": int(cut.sum()),
            "tiles_simulated": int(tiles[~cut].sum()) - dropped,
            "tiles_extrapolated": int(tiles[cut].sum()) + dropped,
            "tiles_dropped_in_layers": dropped,
            "extrapolated_cycles": int(ticks) // P,
            **self.streams.report(),
            **self.repeats.report(),
            "tile_runs": [{
                "layer": prog.layers[w.run.layer].name,
                "groups": w.run.end_group - w.run.first_group,
                "tiles_per_group": w.run.tiles_per_group,
                "outer_step_tile": w.run.span,
                "measurements": len(w.times),
                "tiles_extrapolated": w.tiles_skipped,
                "cycles_per_tile": round(w.period / P, 1) if w.outcome == "cut" else None,
                "measured_cycles_per_tile": [
                    round(float(t) / P, 1) for t in np.diff(w.times) / np.diff(w.progress)],
                "outcome": w.how if w.outcome == "cut" else w.outcome,
            } for w in runs],
            "regions": [{
                "first_layer": prog.layers[w.region.first].name,
                "last_layer": prog.layers[w.region.end - 1].name,
                "layers_per_iteration": w.region.period, "iterations": w.region.iterations,
                "side_by_side": not w.region.sequential,
                "measurements": len(w.times),
                "iterations_extrapolated": round(float(w.iterations_skipped), 3),
                "cycles_per_iteration": w.period // P if w.outcome == "cut" else None,
                "measured_cycles_per_iteration": (
                    [] if w.by_progress else [int(t) // P for t in np.diff(w.times)]),
                "outcome": w.how if w.outcome == "cut" else w.outcome,
            } for w in self.watches if w.outcome != "skipped with an enclosing region"],
        }


def _still_active(w) -> bool:
    """Whether a watch still needs the pauses (measuring, or cut and not yet settled). One
    that does not gives up its samples' counters: each holds every chip counter, the DRAM's
    read-latency histogram among them (16 x 4,096 bins on ``server``), and a GPT-2
    generation of 4 x 64 tokens kept 4,000 of them to its end, 1.2 GB."""
    if w.outcome == "watching" or (w.outcome == "cut" and not w.settled):
        return True
    w.counters.clear()
    return False


def _tiles_done(run: TileRun, left: int) -> int:
    """The layer's tiles finished (or dropped) when ``left`` are left."""
    return run.tiles_before + run.tiles + run.tiles_after - left


def _progress(layer_st: np.ndarray, metric: int, layers: np.ndarray) -> float:
    """The ``PROGRESS[metric]`` measure summed over ``layers`` (only their columns are
    read: a Llama step's side-by-side regions take 3,700 samples over 24,900 layers)."""
    return float(sum(layer_st[f, layers].sum() for f in PROGRESS[metric]))


def _period(times, progress, i: int, j: int) -> float:
    """Ticks per unit of progress from sample i to j."""
    return (times[j] - times[i]) / (progress[j] - progress[i])


def _rate(times, progress, counts, i: int, j: int) -> tuple[float, dict]:
    """Ticks (``_period``) and every counter's increment per unit of progress from sample
    i to j."""
    units = progress[j] - progress[i]
    return (_period(times, progress, i, j),
            {n: (counts[j][n] - counts[i][n]) / units for n in counts[i]})


def _same(t0: float, t1: float, d0: dict, d1: dict) -> bool:
    """Eq. 5 with the DRAM guard: period, bytes, row-hit rate and read latency agree."""
    if abs(t1 - t0) > PERIOD_TOLERANCE * t1:
        return False
    b0, b1 = _bytes(d0), _bytes(d1)
    if abs(b1 - b0) > BYTES_TOLERANCE * max(b1, 1.0):
        return False
    h0, h1 = _hit_rate(d0), _hit_rate(d1)
    if h0 is not None and h1 is not None and abs(h1 - h0) > HIT_RATE_TOLERANCE:
        return False
    l0, l1 = _latency(d0), _latency(d1)
    return l0 is None or l1 is None or abs(l1 - l0) <= LATENCY_TOLERANCE * max(l1, 1e-9)


def _core(d: dict, field_index: int) -> float:
    return float(d["core"][counter_index("core", field_index)].sum())


def _bytes(d: dict) -> float:
    return _core(d, ks.C_LD_BYTES) + _core(d, ks.C_ST_BYTES)


def _hit_rate(d: dict) -> float | None:
    b = d["dbank"]  # rows: hits, misses, conflicts, reads, writes
    n = b[:3].sum()
    return float(b[0].sum() / n) if n > 0 else None


def _latency(d: dict) -> float | None:
    n = _core(d, ks.C_READ_LAT_N)
    return _core(d, ks.C_READ_LAT_SUM) / n if n > 0 else None
