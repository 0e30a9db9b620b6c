"""Steady streaming inside tiles: the chip-level fixed point over time windows.

A tile of a large layer is a few long instructions: a DMA descriptor that walks hundreds
of kilobytes (thousands of requests against the shared cycle-level memory), a chain of
GEMMs. Where a layer has too few tiles for a run of tiles (``TileRun``) to reach a fixed
point, the repetition is inside those instructions, and this is where it is extrapolated:

1. In fast fidelity the main loop looks at the cores at the end of every window
   (``G_WINDOW_AT``: one compare per event step in the loop fast runs compile for
   themselves, ``kernels/loop.py: fast_fidelity``; a full-fidelity loop has none; the end is
   an event of its own, so skipping ahead or not gives the same windows). A window is
   *steady* when no core issued or completed an instruction, took or finished a tile, or
   started sending another DMA entry in it (``kernels/cores.py: cores_activity``). The
   loop returns to Python only after a steady window in which some core still has DMA
   requests to send (``cores_streaming``), so a run whose activity changes all the time,
   or whose steady stretches only compute, pays for almost no pauses.
2. At each such pause a few numbers are probed (``_probe``: requests, bytes, read latency
   and requests in flight per core, the row hits); every counter (``chip.COUNTERS``) only at a
   steady stretch's first sample and at a cut. The fixed point: the stretch so far, in two
   halves of at least ``HALF_REQUESTS`` requests (on a refreshing DRAM, of whole refresh
   intervals), agrees with itself (``_steady``).
3. The cut takes whole windows (refresh intervals) out of the run at the present tick t:
   each DMA entry being sent skips the requests it sends in that span at the stretch's
   pace (its walk position moves on: ``kernels/dma.py: dma_skip``), every time the cores
   keep after t (compute in flight, queued starts) comes the span earlier
   (``cores_cut``), the span joins ``FastForward.offset`` (so every layer, request and
   trace time after t moves), the requests and bytes skipped are counted exactly (per
   core and per layer), and every other counter gains the span times its rate over the
   stretch (refreshes: each rank once an interval). It leaves ``KEEP_WINDOWS`` windows of
   every stream, and as many before the first compute event, to simulate after the cut,
   so nothing ends inside the span. The memory and the NoC are left as they are: in a
   steady state their queues and open rows at t + span look like those at t, and the
   requests in flight stay in flight.
4. Not taken (the run goes on in full): when layers of another request are ready or
   running, or a request arrives before the span's end (multi-tenancy), when another
   layer of the same request is running beside (as for a region, ``forward``), when a DMA with
   requests to send sends none (starved by the other: when it gets a turn is a race), when too
   little of a stream is left, or while the halves disagree.
"""

from __future__ import annotations

import numpy as np

from npusim.fast.chip import counter_index, counters, released
from npusim.kernels import isa
from npusim.kernels import state as ks
from npusim.kernels.names import MEM_DRAM

WINDOW_CYCLES = 512  # core cycles per window
BYTES_TOLERANCE = 0.02  # relative change of the chip's bytes between two windows
LATENCY_TOLERANCE = 0.05  # relative change of the mean read latency (as forward.py)
HIT_RATE_TOLERANCE = 0.10  # absolute change of the row-hit rate
STREAM_TOLERANCE = 0.10  # relative change of a stream's requests between two windows
KEEP_WINDOWS = 2  # windows of every stream (and before any compute event) left after a cut
HALF_REQUESTS = 256  # requests the chip sends in each half of a measurement, at least
MIN_CUT_WINDOWS = 2  # a cut shorter than this is not worth its pause
_QUIET = -(1 << 40)  # G_WINDOW_STEADY: no pause until the cores' activity changes


class StreamCuts:
    """The windows of one run and the cuts made in them (part of a ``FastForward``)."""

    def __init__(self, ff, timebase):
        self.ff = ff
        self.tb = timebase
        self.window = WINDOW_CYCLES * timebase.core_period  # ticks (``start`` sets it)
        self.per_refresh = 1  # windows per refresh interval, or 1
        self.samples: list[tuple[int, dict]] = []
        self.cuts = 0
        self.ticks = 0
        self.requests = 0  # requests not sent
        self.refused: dict[str, int] = {}  # why a fixed point was not cut, how often
        self.first: dict = {}  # every counter at the steady stretch's first sample

    def start(self, st, p) -> None:
        self.window, self.per_refresh = _windows(p, self.tb)
        st.glob[ks.G_WINDOW] = self.window
        st.glob[ks.G_WINDOW_EVERY] = self.per_refresh  # samples a refresh interval apart
        st.glob[ks.G_WINDOW_AT] = self.window
        st.glob[ks.G_WINDOW_STEADY] = 0

    def _quiet(self, st, why: str | None = None) -> None:
        """No pause until the cores' activity changes."""
        st.glob[ks.G_WINDOW_STEADY] = _QUIET
        self.samples = []
        if why:
            self.refused[why] = self.refused.get(why, 0) + 1

    def paused(self, run) -> None:
        st = run.st
        g = st.glob
        steady, t = int(g[ks.G_WINDOW_STEADY]), int(g[ks.G_NOW])
        if not (steady > 0 and (steady - 1) % self.per_refresh == 0
                and g[ks.G_WINDOW_AT] == t + self.window):
            return  # not the end of a steady window the kernel stops for
        if self.samples and self.samples[-1][0] == t:
            return  # stopped again at the same tick (a layer ended there)
        if steady == 1:  # a new steady stretch
            self.samples = []
        if not self.samples:  # the stretch's first sample: every counter, for the rates
            why = self._refusal(run)
            if why:  # (it would be refused at its cut: no pause in it, not one per window)
                self._quiet(st, why)
                return
            self.first = counters(st)
        self.samples.append((t, _probe(st)))
        m = len(self.samples) - 1  # samples since the stretch's first
        if m < 2 or m % 2:  # two equal halves (of whole refresh intervals)
            return
        # the stretch so far in two halves, each holding enough requests that a row switch
        # or a write drain more or less in one of them is within the tolerances (a test on
        # two short windows would keep only those without one: a pace too fast)
        (t0, c0), (t1, c1), (t2, c2) = self.samples[0], self.samples[m // 2], self.samples[m]
        n = st.cores.core.shape[1]  # (the probe begins with the cores' requests)
        if min((c1 - c0)[:2 * n].sum(), (c2 - c1)[:2 * n].sum()) < HALF_REQUESTS:
            return
        w1, w2 = (c1 - c0) * (self.window / (t1 - t0)), (c2 - c1) * (self.window / (t2 - t1))
        if _steady(w1, w2, n):
            now = counters(st)
            self._cut(run, {k: (now[k] - self.first[k]) / (t2 - t0) for k in now})

    def _refusal(self, run) -> str | None:
        """Why no cut may be taken now, or None. Asked at a steady stretch's first sample
        as well as at its cut: in a stretch no tile is taken or finished, so no layer starts
        or ends and no region begins; these hold until the cores' activity changes, unless
        a request arrives or ``forward`` begins a watch at a pause (asked again at the cut).
        A stretch refused at its first sample stays uncut if ``forward`` ends its watch
        before the stretch ends (none of the 376 runs of ``bench_fast``'s accuracy cases
        had one: their cycles were the same with and without this first ask). BERT-base at
        sequence 512 on `server` paused 156 times in windows of its measured blocks, for 4
        refusals."""
        st, prog = run.st, run.prog
        ls = st.cores.layer_st
        live = released(st, prog) & (ls[ks.L_END] < 0)
        if len(np.unique(prog.layer[live, isa.L_REQUEST])) > 1:
            return "shared with another request"
        if np.count_nonzero(live & (ls[ks.L_START] >= 0)) > 1:
            # two layers' tiles share the cores (forward.py's rule for a region: a layer
            # outside it running): which ends first, and so what the cores take next, is a
            # race of the last tiles that a span taken out would decide one way
            return "another layer runs beside"
        if self.ff.measuring(st):  # its periods must be the run's own
            return "a region is being measured"
        return None

    def _cut(self, run, rate: dict) -> None:
        from npusim.kernels.cores import cores_cut, cores_streams

        st, prog, p, ff = run.st, run.prog, run.p, self.ff
        cs = st.cores
        t = int(st.glob[ks.G_NOW])
        W = self.window
        ls = cs.layer_st
        ended = ls[ks.L_END] >= 0
        why = self._refusal(run)  # (a request may have arrived, a watch begun, since)
        if why:
            self._quiet(st, why)
            return
        # how far the cut may reach: windows to spare before the first compute event and
        # before the end of every stream
        n_cores = cs.core.shape[1]
        left = np.zeros((n_cores, 2), np.int64)
        entry = np.full((n_cores, 2), -1, np.int64)
        nxt = int(cores_streams(cs, run.pa, p, np.int64(t), left, entry))
        room = (nxt - t) - KEEP_WINDOWS * W if nxt < isa.NEVER else isa.NEVER
        req_rate = np.stack([rate["core"][counter_index("core", ks.C_LD_REQUESTS + d)]
                             for d in range(2)], axis=1)
        busy = req_rate > 0
        if not busy.any():
            self._quiet(st, "too little left")
            return
        if (~busy & (left > 0)).any():
            # a DMA with requests to send and none sent (the other direction takes the room
            # its core's injection ring makes first; before each had tags of its own, the
            # tags too): when it gets some is a race of single cycles, which a span taken
            # out would decide one way for all of it (a Llama layer's store waited 98,000
            # cycles more after such a cut)
            self._quiet(st, "a stream waits")
            return
        room = min(room, int((left[busy] / req_rate[busy]).min()) - KEEP_WINDOWS * W)
        # whole refresh intervals, as measured (the refreshes fall where they would have:
        # the DRAM's schedule, kept in simulated time, stays in step), else whole windows
        unit = self.per_refresh * W
        k = int(room // unit) if room > 0 else 0
        if k < (1 if self.per_refresh > 1 else MIN_CUT_WINDOWS):
            self._quiet(st, "too little left")
            return
        span = k * unit  # ticks taken out of the run
        waiting = prog.release_order[int(cs.ctl[ks.CC_RELEASED]):]
        if len(waiting):  # program rows keep the arrival the user gave
            arrival = int(prog.layer[waiting, isa.L_RELEASE].min()) * self.tb.core_period
            if arrival < t + ff.offset + span:
                self._quiet(st, "a request arrives")
                return
        skips = np.minimum(np.rint(_even(req_rate, busy) * span).astype(np.int64), left - 1)
        skips[~busy] = 0
        # exact counts of what is not sent: per core and per layer
        R = p.req_bytes
        for c, d in zip(*np.nonzero(skips)):
            n = int(skips[c, d])
            cs.core[ks.C_LD_REQUESTS + d, c] += n
            cs.core[ks.C_LD_BYTES + d, c] += n * R
            tile = cs.slot[ks.S_TILE, c, cs.dq[ks.Q_SLOT, c, d, entry[c, d]]]
            ls[ks.L_LD_BYTES + d, prog.tile[tile, isa.T_LAYER]] += n * R
        cores_cut(cs, run.pa, p, np.int64(t), np.int64(span), skips)
        # every other counter: its rate over the stretch times the span; refreshes by the
        # clock (each rank once an interval)
        exact = [counter_index("core", f)
                 for f in (ks.C_LD_REQUESTS, ks.C_ST_REQUESTS, ks.C_LD_BYTES, ks.C_ST_BYTES)]
        for name, r in rate.items():
            add = r * span
            if name == "core":
                add[exact] = 0
            ff.ledger[name] += add
        if self.per_refresh > 1:
            refs = counter_index("dch", ks.DC_REFS)
            ff.ledger["dch"][refs] += k * p.d_ranks - rate["dch"][refs] * span
        # time: everything from t on moves by the span
        started = ls[ks.L_START] >= 0
        n = ls.shape[1]
        ff.shift[:n][~started & ~ff.cut[:n]] += span
        ff.end_shift[:n][started & ~ended] += span
        ff.offset += span
        ff.skipped.append((t, span))
        self.cuts += 1
        self.ticks += span
        self.requests += int(skips.sum())
        run.release_offset_changed()
        self._quiet(st)

    def report(self) -> dict:
        P = self.tb.core_period
        return {"stream_cuts": self.cuts,
                "cycles_extrapolated_in_tiles": self.ticks // P,
                "requests_extrapolated": self.requests,
                "window_cycles": self.window // P,
                "stream_cuts_refused": dict(self.refused)}


def _even(rate: np.ndarray, busy: np.ndarray) -> np.ndarray:
    """Per DMA direction, the streams' rates, made one where they agree within
    ``STREAM_TOLERANCE``. Streams that share the memory evenly keep the places they hold
    relative to each other in a steady state: rates measured over a stretch differ by
    noise, and skipping by them would move the cores apart by a hundred requests over a
    long span, which reorders the tiles they finish and take next (a Llama decoder layer
    on ``server``: one core idle for 12,000 cycles at a layer's end in the full run, none
    after such a cut)."""
    out = rate.copy()
    for d in range(rate.shape[1]):
        r = rate[busy[:, d], d]
        if len(r) and np.all(np.abs(r - r.mean()) <= STREAM_TOLERANCE * r.mean()):
            out[busy[:, d], d] = r.mean()
    return out


def _windows(p, tb) -> tuple[int, int]:
    """The window (ticks) and how many make a refresh interval (tREFI).

    Refresh is periodic: every tREFI each rank is busy for tRFC, and on a busy channel that
    costs up to tRFC of service, how much depends on the queues. A window is short beside
    tREFI, so it holds one or none, and a pace measured over windows that do not make up
    whole intervals would be off by up to tRFC / tREFI (9% on HBM2). On a refreshing DRAM
    the window therefore divides tREFI (the divisor nearest ``WINDOW_CYCLES``), the two
    halves of a measurement are whole intervals, and a cut takes out whole intervals."""
    W = WINDOW_CYCLES * tb.core_period
    if p.mem_type != MEM_DRAM or p.d_refresh != 1 or p.d_refi <= 1:
        return W, 1
    n = int(p.d_refi)
    parts = [j for j in range(1, n + 1) if n % j == 0]
    j = min(parts, key=lambda j: abs(n // j * tb.mem_period - W))
    return n // j * tb.mem_period, j


_PROBE = (ks.C_LD_REQUESTS, ks.C_ST_REQUESTS, ks.C_LD_BYTES, ks.C_ST_BYTES,
          ks.C_READ_LAT_SUM, ks.C_READ_LAT_N, ks.C_LD_OUTSTANDING, ks.C_ST_OUTSTANDING)


def _probe(st) -> np.ndarray:
    """What the fixed-point test looks at, per core (``_PROBE``), then the chip's row hits
    and row-buffer outcomes: a few numbers, taken at every steady window the loop stops at."""
    b = st.mem.dbank
    return np.concatenate([st.cores.core[list(_PROBE)].ravel().astype(np.float64),
                           [float(b[ks.B_HITS].sum()),
                            float(b[[ks.B_HITS, ks.B_MISSES, ks.B_CONFLICTS]].sum())]])


def _steady(w1: np.ndarray, w2: np.ndarray, n: int) -> bool:
    """Two halves' increments of ``_probe`` (``n`` cores; each scaled to one window) at a
    fixed point: the chip's bytes, the mean read latency (queueing delay) and the row-hit
    rate agree, and so do the requests of every DMA stream, and the requests in flight did
    not grow. A window is short beside a layer, so its row-hit rate and the share each core
    wins of the memory scatter more than a whole iteration's do (ResNet-50 on ``server``,
    512-cycle windows: bytes within 2%, hit rate +-10 points, a core's requests +-10%):
    the tolerances are wider than ``forward``'s for those two."""
    field = {f: slice(i * n, (i + 1) * n) for i, f in enumerate(_PROBE)}
    by = [field[ks.C_LD_BYTES], field[ks.C_ST_BYTES]]
    b1, b2 = sum(w1[x].sum() for x in by), sum(w2[x].sum() for x in by)
    if abs(b2 - b1) > BYTES_TOLERANCE * max(b1, b2, 1.0):
        return False
    if w1[-1] > 0 and w2[-1] > 0 and abs(w2[-2] / w2[-1] - w1[-2] / w1[-1]) > HIT_RATE_TOLERANCE:
        return False
    ls, ln = field[ks.C_READ_LAT_SUM], field[ks.C_READ_LAT_N]
    n1, n2 = w1[ln].sum(), w2[ln].sum()
    if n1 > 0 and n2 > 0:
        l1, l2 = w1[ls].sum() / n1, w2[ls].sum() / n2
        if abs(l2 - l1) > LATENCY_TOLERANCE * max(l1, l2):
            return False
    for f in (ks.C_LD_REQUESTS, ks.C_ST_REQUESTS):
        a, b = w1[field[f]], w2[field[f]]
        if np.any(np.abs(a - b) > np.maximum(STREAM_TOLERANCE * np.maximum(a, b), 1.0)):
            return False
    # as many requests answered as sent: the queues are not still filling (a stream's
    # first windows send faster than the memory serves, until its tags run out)
    sent = w1[:2 * n].sum() + w2[:2 * n].sum()
    grew = sum(w1[field[f]].sum() + w2[field[f]].sum()
               for f in (ks.C_LD_OUTSTANDING, ks.C_ST_OUTSTANDING))
    return bool(abs(grew) <= max(STREAM_TOLERANCE * sent, 2.0))
