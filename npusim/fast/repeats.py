"""Repeated layers across a run: a layer identical to earlier ones, each of which ran alone.

Regions (``regions.py``) find repetition inside one program: consecutive decoder blocks, a
layer's run of tiles. Some repetition is spread over a run instead. An LLM server builds one
program part per generation step, and every step ends with the same LM head (GPT-2: 768 x
50257 weights streamed once per token, more than half of what a fast run of its generation
simulated). No region spans two steps, so none of the heads was extrapolated. (The decoder
blocks' projections repeat from step to step too, but inside each step's region, which
has them.)

The same fixed point, over *instances* of one layer signature (``layer_signatures``: the
same op, shapes, mapping and tiles) rather than over consecutive iterations:

1. An instance is measured when it runs alone: it is the only layer released and not ended
   when it is released, and no other layer starts and no request arrives until it ends.
   Its measurement is the real ticks from its release to its end and every chip counter's
   increment over them (read at the pauses at its predecessor's end and its own). A layer
   alone on a refreshing DRAM takes up to a refresh (tRFC) more or less depending on where
   the refreshes fall in it, so only instances of at least tRFC / ``PERIOD_TOLERANCE``
   count: shorter ones could agree within the tolerance by chance (MobileNetV2 on
   ``server``: identical 1x1 convolutions of 2,000-3,000 cycles differ by 17% in a full
   run).
2. Fixed point: the last two instances agree as consecutive iterations of a region must
   (``forward._same``: time, bytes, row-hit rate, read latency).
3. The cut: when the single layer P in front of such a layer X runs alone, P is X's only
   predecessor and X is P's only successor, X is made a layer without tiles (it ends the
   moment P does: ``skip_layers``). At P's end X gets the last instance's time, statistics
   and counter increments, and everything that runs after it moves by that time.

A layer inside a region is left to the region (its measurements read those layers' ends).
Anything else on the chip at P's end or before the extrapolated end (another stream's
layer, a request arriving) means no cut: X is simulated (multi-tenancy fallback).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npusim.fast.chip import counters, released
from npusim.fast.regions import layer_signatures
from npusim.kernels import isa
from npusim.kernels import state as ks

INSTANCES = 2  # instances that must agree (Eq. 5 between the last two)


@dataclass
class _Instance:
    ticks: int  # release to end
    counts: dict[str, np.ndarray]  # every chip counter's increment
    stats: np.ndarray  # the layer's own statistics (forward.LAYER_STATS)


@dataclass
class _Open:
    """An instance being measured: where it was released."""

    tick: int  # simulated tick of the release
    real: int  # the same, as the user sees it
    counts: dict[str, np.ndarray]
    released: int  # requests released by then (an arrival in between spoils it)


class LayerRepeats:
    """The repeated layers of one fast run (part of a ``FastForward``)."""

    def __init__(self, ff):
        self.ff = ff
        self.ids: dict[tuple, int] = {}  # signature -> id, kept across program extensions
        self.sig = np.zeros(0, np.int64)
        self.seen = np.zeros(0, np.int64)  # layers of each signature in the run so far
        self.in_region = np.zeros(0, bool)
        self.claimed = np.zeros(0, bool)  # layers whose end this unit pauses for
        self.src = np.zeros(0, np.int64)  # the program's edge_sources()
        self.instances: dict[int, list[_Instance]] = {}
        self.open: dict[int, _Open] = {}
        self.settle: dict[int, int] = {}  # predecessor -> the cut layer its end settles
        self.cuts = 0
        self.ticks = 0

    def signatures(self, prog, first: int, content: np.ndarray) -> np.ndarray:
        """``layer_signatures`` of layers ``first ..``, numbered alike across the run."""
        sig = layer_signatures(prog, first, content, ids=self.ids)
        self.sig = np.concatenate([self.sig[:first], sig])
        self.seen = np.bincount(self.sig, minlength=len(self.ids))
        return sig

    def watch(self, run, first: int, region_layers: np.ndarray) -> None:
        """The pauses the repeated layers among ``first ..`` need (after ``signatures``)."""
        prog = run.prog
        n = prog.layer.shape[0]
        self.in_region = np.concatenate([self.in_region[:first], np.zeros(n - first, bool)])
        self.in_region[region_layers] = True
        # a layer of a signature that occurs again, outside regions: pause at its end (to
        # measure it), at its predecessor's (to measure it, or settle its cut) and at the
        # end of that one's predecessor (to cut it before it is handed out)
        new = np.arange(first, n)
        rep = new[(self.seen[self.sig[new]] > 1) & ~self.in_region[new]
                  & (prog.layer[new, isa.L_N_PREDS] == 1)]
        self.src = prog.edge_sources()
        preds = self._predecessors(prog, rep)
        claim = np.unique(np.concatenate([rep, preds, self._predecessors(prog, preds)]))
        self.claimed = np.concatenate([self.claimed[:first], np.zeros(n - first, bool)])
        self.claimed[claim] = True
        self.ff._claim(run.st, claim)

    def paused(self, run) -> None:
        """At a layer end: close measurements, settle cuts, open measurements, cut."""
        st, prog, ff = run.st, run.prog, self.ff
        ls = st.cores.layer_st
        t = int(st.glob[ks.G_NOW])
        ended_now = np.flatnonzero(ls[ks.L_END] == t)
        if not self.claimed[ended_now].any():  # (the pause is someone else's)
            return
        for p in ended_now.tolist():
            if p in self.settle:
                self._settle(run, p, self.settle.pop(p))
        for x in [x for x in self.open if ls[ks.L_END, x] >= 0]:
            self._close(run, x)
        live = np.flatnonzero(released(st, prog) & (ls[ks.L_END] < 0))
        if len(live) != 1:
            return
        (x,) = live.tolist()
        # released now, by its one predecessor's end, and alone: measure it
        if (self._candidate(prog, x) and x not in self.open and not ff.cut[x]
                and ls[ks.L_START, x] in (-1, t)
                and ls[ks.L_END, self.src[prog.layer_succ == x]].max() == t):
            self.open[x] = _Open(t, t + ff.offset, self._counts(st),
                                 int(st.cores.ctl[ks.CC_RELEASED]))
        nxt = _successors(prog, x)
        if len(nxt) == 1 and self._candidate(prog, int(nxt[0])):
            self._cut(run, x, int(nxt[0]))

    def _predecessors(self, prog, layers: np.ndarray) -> np.ndarray:
        """Every predecessor of any of ``layers``."""
        return np.unique(self.src[np.isin(prog.layer_succ, layers)])

    def _candidate(self, prog, x: int) -> bool:
        return (x < len(self.sig) and self.seen[self.sig[x]] > 1 and not self.in_region[x]
                and prog.layer[x, isa.L_N_PREDS] == 1)

    def _counts(self, st) -> dict[str, np.ndarray]:
        return counters(st, self.ff.ledger)

    def _close(self, run, x: int) -> None:
        """X has ended: an instance, if nothing else ran or arrived meanwhile."""
        from npusim.fast.forward import LAYER_STATS

        st, ff = run.st, self.ff
        o = self.open.pop(x)
        ls = st.cores.layer_st
        end = int(ls[ks.L_END, x])
        others = (ls[ks.L_START] >= o.tick) & (ls[ks.L_START] < end)
        others[x] = False
        if others.any() or int(st.cores.ctl[ks.CC_RELEASED]) != o.released:
            return
        real_end = end + int(ff.shift[x]) + int(ff.end_shift[x])
        if real_end - o.real < self.ff.least:  # (chip.least_period)
            return
        now = self._counts(st)
        stats = ls[list(LAYER_STATS), x] + np.rint(ff.stat_extra[:, x]).astype(np.int64)
        self.instances.setdefault(int(self.sig[x]), []).append(
            _Instance(real_end - o.real, {k: now[k] - o.counts[k] for k in now}, stats))

    def _cut(self, run, p: int, x: int) -> None:
        """P runs alone and X, alone after it, repeats a fixed point: X will not run."""
        from npusim.fast.forward import _same

        st, prog, ff = run.st, run.prog, self.ff
        ls = st.cores.layer_st
        if ff.cut[x] or ls[ks.L_START, x] >= 0 or x in self.settle.values():
            return
        if prog.layer[p, isa.L_REQUEST] != prog.layer[x, isa.L_REQUEST]:
            return
        seen = self.instances.get(int(self.sig[x]), [])
        if len(seen) < INSTANCES:
            return
        a, b = seen[-2], seen[-1]
        if not _same(a.ticks, b.ticks, a.counts, b.counts):
            return
        waiting = prog.release_order[int(st.cores.ctl[ks.CC_RELEASED]):]
        if len(waiting):  # a request arriving before X's extrapolated end: run X in full
            arrival = int(prog.layer[waiting, isa.L_RELEASE].min()) * ff.tb.core_period
            mine = self.instances.get(int(self.sig[p]), [])
            p_left = mine[-1].ticks if mine else None
            if p_left is None or arrival < int(st.glob[ks.G_NOW]) + ff.offset + p_left + b.ticks:
                return
        run.skip_layers([x])
        ff.cut[x] = True
        self.settle[p] = x
        ff._claim(st, [p])

    def _settle(self, run, p: int, x: int) -> None:
        """P has ended (and X with it, unrun): X takes its last instance's time and
        counts, and what runs after X moves by that time."""
        st, ff = run.st, self.ff
        ls = st.cores.layer_st
        ref = self.instances[int(self.sig[x])][-1]
        t = int(ls[ks.L_END, p])
        start = t + int(ff.shift[p]) + int(ff.end_shift[p])
        ff.synth_times[:, x] = (start, start + ref.ticks)
        ff.synth_stats[:, x] = ref.stats
        for name, d in ref.counts.items():
            ff.ledger[name] += d
        n = ls.shape[1]
        after = ((ls[ks.L_START] < 0) | (ls[ks.L_START] >= t)) & ~ff.cut[:n]
        after[p] = False
        ff.shift[:n][after] += ref.ticks
        ff.offset += ref.ticks
        ff.skipped.append((t, ref.ticks))
        ff._unclaim(st, [p])
        self.cuts += 1
        self.ticks += ref.ticks
        run.release_offset_changed()

    def report(self) -> dict:
        return {"repeated_layers_cut": self.cuts,
                "repeated_layers_cycles": self.ticks // self.ff.tb.core_period}


def _successors(prog, x: int) -> np.ndarray:
    s0, sn = int(prog.layer[x, isa.L_SUCC_START]), int(prog.layer[x, isa.L_SUCC_LEN])
    return prog.layer_succ[s0:s0 + sn]

