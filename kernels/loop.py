"""The main loop: every unit stepped in lockstep, skipping ahead to the next event.

Each clock domain (cores, NoC, memory) is processed on its own edges of the global time
base, in the fixed order memory -> NoC -> cores within a tick. Every unit keeps the tick at
which it may next change state (its *wake*); the loop jumps to the earliest one. With
``p.skip == 0`` the loop instead visits every edge of every domain and steps every unit,
which must give bit-identical results (a test checks it).
"""

from .jit import kernel

from . import isa
from .ring import ring_at, ring_next
from .state import *  # noqa: F403  (field indices of the state tables)
from .core import core_issue, load_tile, slot_finish_time
from .dma import dma_has_request, dma_next_request, dma_response
from .dram import dram_step
from .memory import MEM_DRAM, MEM_IDEAL, simple_memory_step
from .noc import noc_inject, noc_step
from .scheduler import next_tile_for_core, release_due, scheduler_start, tile_finished, work_waiting
from .timebase import align_up, on_edge
from .trace import trace_interval, trace_must_stop



@kernel
def _core_receive(st, prog, p, c, t):
    """Responses that reached core c by tick t complete their DMA requests."""
    q = st.arr.shape[2]
    while st.core[C_ARR_COUNT, c] > 0 and st.arr[A_TIME, c, st.core[C_ARR_HEAD, c]] <= t:
        h = st.core[C_ARR_HEAD, c]
        d = st.arr[A_DIR, c, h]
        if d == 0:
            st.core[C_READ_LAT_SUM, c] += t - st.arr[A_SENT, c, h]
            st.core[C_READ_LAT_N, c] += 1
        dma_response(st, prog, p, c, d, st.arr[A_ENTRY, c, h], t)
        st.core[C_ARR_HEAD, c] = ring_next(h, q)
        st.core[C_ARR_COUNT, c] -= 1


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
                if p.trace == 1:
                    trace_interval(st, p, IV_ACTIVE, c, st.core[C_BUSY_SINCE, c], t)


@kernel
def _core_send(st, prog, mt, p, c, t):
    """Each DMA engine (load, store) sends at most one request this cycle."""
    qarr = st.arr.shape[2]
    for d in range(2):
        if st.core[C_OUTSTANDING, c] >= p.max_outstanding or not dma_has_request(st, c, d):
            continue
        if p.mem_type == MEM_IDEAL:
            k, addr = dma_next_request(st, prog, p, c, d)
            a = ring_at(st.core[C_ARR_HEAD, c], st.core[C_ARR_COUNT, c], qarr)
            st.arr[A_TIME, c, a] = t + p.core_period
            st.arr[A_DIR, c, a] = d
            st.arr[A_ENTRY, c, a] = k
            st.arr[A_SENT, c, a] = t
            st.core[C_ARR_COUNT, c] += 1
            st.chan[H_READS + d, 0] += 1
            st.chan[H_READ_BYTES + d, 0] += p.req_bytes
        else:
            if st.core[C_INJ_COUNT, c] >= p.inj_queue:
                continue
            k, addr = dma_next_request(st, prog, p, c, d)
            noc_inject(st, mt, p, c, d, k, addr, t)
        st.core[C_OUTSTANDING, c] += 1
        st.core[C_LD_REQUESTS + d, c] += 1
        st.core[C_LD_BYTES + d, c] += p.req_bytes
        layer = prog.tile[st.slot[S_TILE, c, st.dq[Q_SLOT, c, d, k]], isa.T_LAYER]
        st.layer_st[L_LD_BYTES + d, layer] += p.req_bytes


@kernel
def _core_wake(st, prog, p, c, t, issue_wake):
    """Next tick core c may change state, given what it is waiting for."""
    P = p.core_period
    wake = issue_wake
    if st.core[C_ARR_COUNT, c] > 0:
        wake = min(wake, align_up(max(st.arr[A_TIME, c, st.core[C_ARR_HEAD, c]], t + 1), P))
    for d in range(2):
        if dma_has_request(st, c, d) and st.core[C_OUTSTANDING, c] < p.max_outstanding:
            if p.mem_type == MEM_IDEAL or st.core[C_INJ_COUNT, c] < p.inj_queue:
                wake = min(wake, t + P)
    for s in range(2):
        f = slot_finish_time(st, prog, c, s)
        if f < isa.NEVER:
            wake = min(wake, align_up(max(f, t + 1), P))
    return wake


@kernel(inline=True)
def cores_step(st, prog, mt, p, t):
    """One core-clock edge for every core that is due (every core when not skipping)."""
    n = p.n_cores
    for c in range(n):
        if p.skip == 0 or st.core[C_WAKE, c] <= t:
            _core_receive(st, prog, p, c, t)
            _core_retire(st, prog, p, c, t)
    release_due(st, prog, p, t)  # requests that have arrived
    # hand out ready tiles: idle cores first, then second (prefetch) slots
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
            _core_send(st, prog, mt, p, c, t)
            st.core[C_WAKE, c] = _core_wake(st, prog, p, c, t, issue_wake)


@kernel
def _next_tick(st, prog, p, t):
    """The next tick anything may change: the next edge of every domain without skipping,
    else the earliest wake of any unit or arrival of a request (isa.NEVER if none)."""
    nxt = isa.NEVER
    if p.skip == 0:
        nxt = min(align_up(t + 1, p.core_period), nxt)
        if p.mem_type != MEM_IDEAL:
            nxt = min(nxt, align_up(t + 1, p.noc_period), align_up(t + 1, p.mem_period))
        return nxt
    for c in range(p.n_cores):
        nxt = min(nxt, st.core[C_WAKE, c])
    if st.glob[G_RELEASED] < prog.release_order.shape[0]:
        layer = prog.release_order[st.glob[G_RELEASED]]
        nxt = min(nxt, prog.layer[layer, isa.L_RELEASE] * p.core_period)
    nxt = min(nxt, st.glob[G_WAKE_NOC], st.glob[G_WAKE_MEM])
    return max(nxt, t + 1)


@kernel
def run(st, prog, mt, p, max_iterations):
    """Advance by at most ``max_iterations`` event steps.

    Returns 0 (chunk done, or finished: ``G_FINISHED``), 1 on deadlock, or 2 when a layer
    marked ``L_NOTIFY`` has ended: the caller may then add layers (e.g. the next step of an
    LLM) and call again, which resumes after the tick it stopped at. Stopping between two
    steps never changes results, so the caller may update a progress bar between calls.
    """
    t = st.glob[G_NOW]
    if st.glob[G_STARTED] == 0:
        st.glob[G_STARTED] = 1
        scheduler_start(st, prog)
    elif st.glob[G_PAUSE]:  # tick t was done before the pause
        st.glob[G_PAUSE] = 0
        if st.glob[G_LAYERS_LEFT] > 0:
            t = _next_tick(st, prog, p, t)
            if t >= isa.NEVER:
                return 1
    iterations = 0
    # the next edge of each clock domain at or after t (on_edge: no division per step)
    mem_edge = align_up(t, p.mem_period)
    noc_edge = align_up(t, p.noc_period)
    core_edge = align_up(t, p.core_period)
    while st.glob[G_LAYERS_LEFT] > 0:
        if iterations >= max_iterations:
            st.glob[G_NOW] = t
            return 0
        if p.trace == 1 and trace_must_stop(st, p, t):  # Python drains the trace buffers
            st.glob[G_NOW] = t
            return 0
        iterations += 1
        st.glob[G_STEPS] += 1
        mem_due, mem_edge = on_edge(t, mem_edge, p.mem_period)
        noc_due, noc_edge = on_edge(t, noc_edge, p.noc_period)
        core_due, core_edge = on_edge(t, core_edge, p.core_period)
        if p.mem_type != MEM_IDEAL and (p.skip == 0 or st.glob[G_WAKE_MEM] <= t) and mem_due:
            if p.mem_type == MEM_DRAM:
                st.glob[G_WAKE_MEM] = dram_step(st, mt, p, t)
            else:
                st.glob[G_WAKE_MEM] = simple_memory_step(st, p, t)
        if p.mem_type != MEM_IDEAL and (p.skip == 0 or st.glob[G_WAKE_NOC] <= t) and noc_due:
            st.glob[G_WAKE_NOC] = noc_step(st, p, t)
        if core_due:
            cores_step(st, prog, mt, p, t)
        if st.glob[G_PAUSE]:
            st.glob[G_NOW] = t
            return 2
        if st.glob[G_LAYERS_LEFT] == 0:
            break
        nxt = _next_tick(st, prog, p, t)
        if nxt >= isa.NEVER:
            st.glob[G_NOW] = t
            return 1
        t = nxt
    st.glob[G_NOW] = t
    st.glob[G_END] = t
    st.glob[G_FINISHED] = 1
    return 0
