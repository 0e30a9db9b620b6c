"""One NPU core: tile slots, in-order instruction issue, systolic array and vector unit.

Each core holds up to two tiles (the scratchpad and accumulator are split in halves: double
buffering). Every core cycle it issues at most one instruction, in order within a tile,
from the older tile first; an instruction issues when the instructions it depends on have
completed and its unit's queue has room. Compute (systolic array, vector unit) is
deterministic, so its start and completion ticks are computed at issue and the loop skips
straight to them; DMA completes when the memory system answers.

The systolic array's timing (PRELOAD, GEMM) is in ``systolic.py``, one rule per dataflow.
"""

from .jit import kernel

from . import isa
from .ring import ring_next
from .state import *  # noqa: F403  (field indices of the state tables)
from .dma import dma_enqueue
from .systolic import array_issue
from .timebase import align_up
from .trace import trace_dma_issue, trace_interval


@kernel
def vector_cycles(prog, p, row):
    """Cycles of a VECTOR or IM2COL instruction: ceil(elements / width) * latency * passes."""
    passes = (prog.inst[row, isa.I_ELEMENTS] + p.vec_width - 1) // p.vec_width
    if prog.inst[row, isa.I_OP] == isa.OP_IM2COL:
        return passes
    return passes * prog.vlat[prog.inst[row, isa.I_VOP]] * prog.inst[row, isa.I_PASSES]


@kernel
def _ex_queue_free_at(st, p, c):
    """Tick from which the execute queue has room (it holds issued, not yet started ops)."""
    return st.ex_ring[c, st.core[C_EX_POS, c]]


@kernel
def _ex_queue_push(st, p, c, start):
    st.ex_ring[c, st.core[C_EX_POS, c]] = start
    st.core[C_EX_POS, c] = ring_next(st.core[C_EX_POS, c], p.ex_queue)


@kernel
def _issue_compute(st, prog, p, c, row, t, layer):
    """Start/finish of a PRELOAD, GEMM, VECTOR or IM2COL issued at tick t; returns finish."""
    P = p.core_period
    if prog.inst[row, isa.I_UNIT] == isa.UNIT_SYSTOLIC:
        start, done = array_issue(st, prog, p, c, row, t, layer)
    else:
        start = max(t, st.core[C_VU_FREE, c])
        cycles = vector_cycles(prog, p, row)
        done = start + cycles * P
        st.core[C_VU_FREE, c] = done
        st.core[C_VU_BUSY, c] += cycles
        st.layer_st[L_VU_CYCLES, layer] += cycles
        st.core[C_VU_OPS, c] += prog.inst[row, isa.I_MACS]
        trace_interval(st, p, isa.UNIT_VECTOR, c, start, done)
    _ex_queue_push(st, p, c, start)
    return done


@kernel
def _older_slot(st, c):
    s0 = st.slot[S_TILE, c, 0] >= 0
    s1 = st.slot[S_TILE, c, 1] >= 0
    if s0 and s1:
        return 0 if st.slot[S_SEQ, c, 0] < st.slot[S_SEQ, c, 1] else 1
    return 0 if s0 else 1


@kernel
def _ready_time(st, prog, p, c, s, t):
    """Earliest tick slot s's next instruction may issue (isa.NEVER: wait for an event)."""
    tile = st.slot[S_TILE, c, s]
    j = st.slot[S_NEXT, c, s]
    row = prog.tile[tile, isa.T_INST_START] + j
    unit = prog.inst[row, isa.I_UNIT]
    other = 1 - s
    older_busy = st.slot[S_TILE, c, other] >= 0 and st.slot[S_SEQ, c, other] < st.slot[S_SEQ, c, s]
    ready = t
    # compute and stores stay in tile order on a core; loads of the next tile run ahead
    if unit == isa.UNIT_SYSTOLIC or unit == isa.UNIT_VECTOR:
        if older_busy and st.slot[S_COMPUTE_LEFT, c, other] > 0:
            return isa.NEVER
        ready = max(ready, _ex_queue_free_at(st, p, c))
    elif unit == isa.UNIT_STORE:
        if older_busy and st.slot[S_STORE_LEFT, c, other] > 0:
            return isa.NEVER
        if st.dq_ctl[D_COUNT, c, 1] >= p.st_queue:
            return isa.NEVER
    else:
        if st.dq_ctl[D_COUNT, c, 0] >= p.ld_queue:
            return isa.NEVER
    for k in range(2):
        dep = prog.inst[row, isa.I_DEP0 + k]
        if dep >= 0:
            ready = max(ready, st.done[c, s, dep])
    return ready


@kernel(out_of_line=True)
def _issue(st, prog, p, c, s, t):
    """Issue instruction ``S_NEXT`` of slot s of core c at tick t: a DMA into its queue, a
    compute instruction onto its unit. A call of its own (``out_of_line``): inlined into
    the main loop, as LLVM chose to once it was a few instructions shorter, it made the
    loop larger and the Llama step (an issue every few cycles) 7-8% slower."""
    tile = st.slot[S_TILE, c, s]
    j = st.slot[S_NEXT, c, s]
    row = prog.tile[tile, isa.T_INST_START] + j
    unit = prog.inst[row, isa.I_UNIT]
    if unit == isa.UNIT_LOAD or unit == isa.UNIT_STORE:
        d = 0 if unit == isa.UNIT_LOAD else 1
        base = prog.tile[tile, isa.T_BASE0 + prog.inst[row, isa.I_SLOT]] + prog.inst[row, isa.I_OFFSET]
        trace_dma_issue(st, p, c, d, t)
        dma_enqueue(st, c, d, s, j, row, base)
        st.slot[S_PENDING_DMA, c, s] += 1
        if d == 1:
            st.slot[S_STORE_LEFT, c, s] -= 1
    else:
        done = _issue_compute(st, prog, p, c, row, t, prog.tile[tile, isa.T_LAYER])
        st.done[c, s, j] = done
        st.slot[S_LAST_DONE, c, s] = max(st.slot[S_LAST_DONE, c, s], done)
        st.slot[S_COMPUTE_LEFT, c, s] -= 1
    st.slot[S_NEXT, c, s] = j + 1


@kernel(inline=True)
def core_issue(st, prog, p, c, t):
    """Issue at most one instruction on core c at tick t; return the core's next wake tick."""
    wake = isa.NEVER
    first = _older_slot(st, c)
    issued = False
    for k in range(2):
        s = first if k == 0 else 1 - first
        tile = st.slot[S_TILE, c, s]
        if tile < 0 or st.slot[S_NEXT, c, s] >= prog.tile[tile, isa.T_INST_LEN]:
            continue
        ready = _ready_time(st, prog, p, c, s, t)
        if ready <= t and not issued:
            _issue(st, prog, p, c, s, t)
            issued = True
            wake = min(wake, t + p.core_period)  # maybe more to issue next cycle
        elif ready < isa.NEVER:
            wake = min(wake, align_up(max(ready, t + 1), p.core_period))
    return wake


@kernel
def slot_finish_time(st, prog, c, s):
    """Tick the tile in slot s completes, or NEVER while anything is outstanding."""
    tile = st.slot[S_TILE, c, s]
    if tile < 0:
        return isa.NEVER
    if st.slot[S_NEXT, c, s] < prog.tile[tile, isa.T_INST_LEN] or st.slot[S_PENDING_DMA, c, s] > 0:
        return isa.NEVER
    return st.slot[S_LAST_DONE, c, s]


@kernel
def load_tile(st, prog, p, c, s, tile, t):
    """Put ``tile`` into slot s of core c at tick t."""
    st.slot[S_TILE, c, s] = tile
    st.slot[S_SEQ, c, s] = st.core[C_SEQ, c]
    st.core[C_SEQ, c] += 1
    st.slot[S_NEXT, c, s] = 0
    st.slot[S_PENDING_DMA, c, s] = 0
    st.slot[S_LAST_DONE, c, s] = t
    n = prog.tile[tile, isa.T_INST_LEN]
    r0 = prog.tile[tile, isa.T_INST_START]
    compute = 0
    stores = 0
    for j in range(n):
        unit = prog.inst[r0 + j, isa.I_UNIT]
        if unit == isa.UNIT_SYSTOLIC or unit == isa.UNIT_VECTOR:
            compute += 1
        elif unit == isa.UNIT_STORE:
            stores += 1
        st.done[c, s, j] = isa.NEVER
    st.slot[S_COMPUTE_LEFT, c, s] = compute
    st.slot[S_STORE_LEFT, c, s] = stores
    layer = prog.tile[tile, isa.T_LAYER]
    if st.layer_st[L_START, layer] < 0:
        st.layer_st[L_START, layer] = t
