"""The cores unit: every core, its DMA engines and the scheduler that hands out tiles.

Its tables are ``State.cores`` (``st`` here, in ``core.py``, ``dma.py``, ``scheduler.py``
and ``policies/``); it talks to the rest of the chip only through its rings (``rg``,
``ports.py``): DMA requests go out on a core's injection ring, responses come back on its
arrival ring. Each core keeps its own wake tick (``C_WAKE``); the bells the network side
rings (a response on its way, room in the injection ring) lower it when the unit runs.
"""

from .jit import entry, kernel

from . import isa
from .core import core_issue, load_tile, slot_finish_time
from .dma import dma_has_request, dma_left, dma_next_request, dma_response, dma_skip
from .memory import channel_of
from .ports import arr_pop, bell, core_bell, core_heard, heard, inj_push, inj_room
from .scheduler import (next_tile_for_core, release_due, scheduler_start, tile_finished,
                        work_waiting)
from .state import *  # noqa: F403  (field indices of the state tables)
from .timebase import align_up
from .trace import trace_interval


@kernel
def _core_receive(st, rg, prog, p, c, t):
    """Responses that reached core c by tick t complete their DMA requests."""
    while rg.cport[CP_ARR_COUNT, c] > 0:
        h = rg.cport[CP_ARR_HEAD, c]
        if rg.arr[A_TIME, c, h] > t:
            break
        d = rg.arr[A_DIR, c, h]
        if d == 0:
            st.core[C_READ_LAT_SUM, c] += t - rg.arr[A_SENT, c, h]
            st.core[C_READ_LAT_N, c] += 1
        dma_response(st, prog, p, c, d, rg.arr[A_ENTRY, c, h], t)
        arr_pop(rg, c)


@kernel
def _core_retire(st, prog, p, c, t):
    for s in range(2):
        if slot_finish_time(st, prog, c, s) <= t:
            tile = st.slot[S_TILE, c, s]
            st.core[C_TILES, c] += 1
            st.slot[S_TILE, c, s] = -1
            tile_finished(st, prog, tile, t)
            if st.slot[S_TILE, c, 1 - s] < 0:  # the core falls idle: close its busy interval
                st.core[C_BUSY, c] += t - st.core[C_BUSY_SINCE, c]
                trace_interval(st, p, IV_ACTIVE, c, st.core[C_BUSY_SINCE, c], t)


@kernel
def _core_send(st, rg, prog, mt, p, c, t):
    """Each DMA engine (load, store) sends at most ``core_ports`` requests this cycle (one
    per NoC port of the core), while it has tags left (``max_outstanding`` each: Gemmini's
    StreamReader and StreamWriter own their transaction ids, so a long load cannot starve a
    store of them) and the core's injection ring has room."""
    for d in range(2):
        for _ in range(p.core_ports):
            if (st.core[C_LD_OUTSTANDING + d, c] >= p.max_outstanding
                    or not dma_has_request(st, c, d) or not inj_room(rg, c)):
                break
            k, addr = dma_next_request(st, prog, p, c, d)
            inj_push(rg, p, c, t, channel_of(addr, p, mt), d, k, addr)
            st.core[C_LD_OUTSTANDING + d, c] += 1
            st.core[C_LD_REQUESTS + d, c] += 1
            st.core[C_LD_BYTES + d, c] += p.req_bytes
            layer = prog.tile[st.slot[S_TILE, c, st.dq[Q_SLOT, c, d, k]], isa.T_LAYER]
            st.layer_st[L_LD_BYTES + d, layer] += p.req_bytes


@kernel
def _core_wake(st, rg, prog, p, c, t, issue_wake):
    """Next tick core c may change state, given what it is waiting for."""
    P = p.core_period
    wake = issue_wake
    if rg.cport[CP_ARR_COUNT, c] > 0:
        wake = min(wake, align_up(max(rg.arr[A_TIME, c, rg.cport[CP_ARR_HEAD, c]], t + 1), P))
    for d in range(2):
        if (dma_has_request(st, c, d) and st.core[C_LD_OUTSTANDING + d, c] < p.max_outstanding
                and inj_room(rg, c)):
            wake = min(wake, t + P)
    for s in range(2):
        f = slot_finish_time(st, prog, c, s)
        if f < isa.NEVER:
            wake = min(wake, align_up(max(f, t + 1), P))
    return wake


@kernel(inline=True)
def cores_step(st, rg, prog, mt, p, t):
    """One core-clock edge for every core that is due (every core when not skipping).

    Where a layer marked NOTIFY_BEFORE_HAND_OUT ended, the edge stops before the ready
    tiles are handed out (``paused``): ``cores_hand_out`` finishes it at the same tick once
    Python has looked, which gives the same run unless Python changed what is ready."""
    n = p.n_cores
    if bell(rg, SIDE_CORES) <= t:  # the network side rang: those cores are due now
        for c in range(n):
            st.core[C_WAKE, c] = min(st.core[C_WAKE, c], core_bell(rg, c))
            core_heard(rg, c)
        heard(rg, SIDE_CORES)
    for c in range(n):
        if p.skip == 0 or st.core[C_WAKE, c] <= t:
            _core_receive(st, rg, prog, p, c, t)
            _core_retire(st, prog, p, c, t)
    release_due(st, prog, p, t)  # requests that have arrived
    if st.ctl[CC_PAUSE] != NOTIFY_BEFORE_HAND_OUT:
        cores_hand_out(st, rg, prog, mt, p, t)


@kernel
def cores_hand_out(st, rg, prog, mt, p, t):
    """The rest of a core-clock edge: ready tiles to free slots, then every due core issues
    and sends."""
    n = p.n_cores
    # idle cores first, then second (prefetch) slots
    if work_waiting(st, prog):
        for rnd in range(2):
            for c in range(n):
                empty = (st.slot[S_TILE, c, 0] < 0) + (st.slot[S_TILE, c, 1] < 0)
                if (rnd == 0 and empty == 2) or (rnd == 1 and empty >= 1):
                    tile = next_tile_for_core(st, prog, p, c)
                    if tile >= 0:
                        if empty == 2:  # the core becomes busy
                            st.core[C_BUSY_SINCE, c] = t
                        s = 0 if st.slot[S_TILE, c, 0] < 0 else 1
                        load_tile(st, prog, p, c, s, tile, t)
                        st.core[C_WAKE, c] = t
    for c in range(n):
        if p.skip == 0 or st.core[C_WAKE, c] <= t:
            issue_wake = core_issue(st, prog, p, c, t)
            _core_send(st, rg, prog, mt, p, c, t)
            st.core[C_WAKE, c] = _core_wake(st, rg, prog, p, c, t, issue_wake)


@kernel(inline=True)
def cores_wake(st, rg, prog, p):
    """The first tick any core may change state or a request's first layers arrive."""
    nxt = bell(rg, SIDE_CORES)
    for c in range(p.n_cores):
        nxt = min(nxt, st.core[C_WAKE, c])
    if st.ctl[CC_RELEASED] < prog.release_order.shape[0]:
        layer = prog.release_order[st.ctl[CC_RELEASED]]
        nxt = min(nxt, prog.layer[layer, isa.L_RELEASE] * p.core_period)
    return nxt


@kernel(inline=True)
def cores_start(st, prog):
    """Before the first step: release the layers that wait for nothing."""
    scheduler_start(st, prog)


@kernel(inline=True)
def layers_left(st):
    """Layers not yet finished (the run is over at 0)."""
    return st.ctl[CC_LAYERS_LEFT]


@kernel(inline=True)
def paused(st):
    """A layer marked L_NOTIFY ended, or one marked L_TILE_MARK came down to that many
    tiles, in the last step: the run returns to Python."""
    return st.ctl[CC_PAUSE] != 0


@kernel(inline=True)
def paused_before_hand_out(st):
    """The last step stopped before handing out tiles (``cores_step``)."""
    return st.ctl[CC_PAUSE] == NOTIFY_BEFORE_HAND_OUT


@kernel(inline=True)
def resume(st):
    st.ctl[CC_PAUSE] = 0


# Times a core keeps that may lie ahead of the present (fast fidelity's cut pulls them in).
_CORE_TIMES = (C_SA_PRELOAD_READY, C_SA_STREAM_FREE, C_SA_LAST_CHUNK, C_VU_FREE,
               C_SA_DONE)


@kernel(inline=True)
def cores_activity(st):
    """A number that changes whenever any core issues or completes an instruction, takes
    or finishes a tile, or starts sending another DMA entry (fast fidelity's test that a
    window was steady: ``npusim.fast.streams``)."""
    h = 0
    for c in range(st.slot.shape[1]):
        for s in range(2):
            h = h * 1000003 + st.slot[S_TILE, c, s]
            h = h * 1000003 + st.slot[S_NEXT, c, s]
            h = h * 1000003 + st.slot[S_PENDING_DMA, c, s]
        for d in range(2):
            h = h * 1000003 + st.dq_ctl[D_HEAD, c, d]
            h = h * 1000003 + st.dq_ctl[D_SEND, c, d]
    return h


@kernel
def cores_streaming(st):
    """Whether any core's DMA has a request still to send (fast fidelity: a steady window
    without one is no place for a stream cut, ``npusim.fast.streams``)."""
    for c in range(st.slot.shape[1]):
        for d in range(2):
            if dma_has_request(st, c, d):
                return True
    return False


@kernel(inline=True)
def _core_times_after(st, prog, c, t, span):
    """Every time core c keeps that lies after t (compute in flight, queued starts, its
    tiles' instructions and slots done) comes ``span`` earlier; returns the first of them
    as it was (isa.NEVER if none)."""
    nxt = isa.NEVER
    for f in _CORE_TIMES:
        if t < st.core[f, c] < isa.NEVER:
            nxt = min(nxt, st.core[f, c])
            st.core[f, c] -= span
    for k in range(st.ex_ring.shape[1]):
        if t < st.ex_ring[c, k] < isa.NEVER:
            nxt = min(nxt, st.ex_ring[c, k])
            st.ex_ring[c, k] -= span
    for s in range(2):
        tile = st.slot[S_TILE, c, s]
        if tile < 0:
            continue
        if t < st.slot[S_LAST_DONE, c, s] < isa.NEVER:
            nxt = min(nxt, st.slot[S_LAST_DONE, c, s])
            st.slot[S_LAST_DONE, c, s] -= span
        for j in range(prog.tile[tile, isa.T_INST_LEN]):
            if t < st.done[c, s, j] < isa.NEVER:
                nxt = min(nxt, st.done[c, s, j])
                st.done[c, s, j] -= span
    return nxt


@entry
def cores_cut(st, prog, p, t, span, skips):
    """Fast fidelity (``npusim.fast.streams``): take ``span`` ticks of steady streaming out
    of the run at tick t. DMA d of core c skips ``skips[c, d]`` requests of the entry it is
    sending (fewer than it has left), and every time the cores keep that lies after t
    (compute in flight, queued starts) comes ``span`` earlier, so the work that spans the
    cut keeps its place relative to the streams; every core looks again at t. The caller
    makes sure none of those times falls to t or before (``cores_streams``)."""
    for c in range(st.slot.shape[1]):
        st.core[C_WAKE, c] = min(st.core[C_WAKE, c], t)
        for d in range(2):
            if skips[c, d] > 0:
                dma_skip(st, prog, p, c, d, skips[c, d])
        _core_times_after(st, prog, c, t, span)


@entry
def cores_streams(st, prog, p, t, left, sending):
    """Fast fidelity: per core c and DMA d, the requests the entry being sent has left and
    that entry (``left[c, d]``, ``sending[c, d]``; 0 and -1 if none); returns the first time
    after t that the cores keep (compute finishing, a queued start; isa.NEVER if none),
    which a cut must stay short of."""
    nxt = isa.NEVER
    for c in range(st.slot.shape[1]):
        for d in range(2):
            left[c, d], sending[c, d] = dma_left(st, prog, p, c, d)
        nxt = min(nxt, _core_times_after(st, prog, c, t, 0))
    return nxt
