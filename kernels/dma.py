"""Per-core DMA engines: MVIN/MVOUT queues that cut descriptors into memory requests.

A DMA instruction is a strided descriptor (``n_outer x n_inner`` runs of ``run_bytes``).
The engine walks it and emits one request of ``req_bytes`` per cycle and direction, for
every aligned ``req_bytes`` block a run touches. The instruction completes when the last
response (read data, or write acknowledgement) is back.
"""

from .jit import kernel

from . import isa
from .ring import ring_at, ring_next
from .state import *  # noqa: F403  (field indices of the state tables)
from .trace import trace_dma_response


@kernel
def dma_enqueue(st, c, d, s, j, row, base):
    """Queue instruction ``j`` (program row ``row``) of the tile in slot s on DMA d."""
    q = st.dq.shape[3]
    k = ring_at(st.dq_ctl[D_HEAD, c, d], st.dq_ctl[D_COUNT, c, d], q)
    st.dq[Q_SLOT, c, d, k] = s
    st.dq[Q_INST, c, d, k] = j
    st.dq[Q_ROW, c, d, k] = row
    st.dq[Q_BASE, c, d, k] = base
    st.dq[Q_O, c, d, k] = 0
    st.dq[Q_I, c, d, k] = 0
    st.dq[Q_POS, c, d, k] = 0
    st.dq[Q_UNSENT, c, d, k] = 1
    st.dq[Q_PENDING, c, d, k] = 0
    st.dq_ctl[D_COUNT, c, d] += 1


@kernel
def dma_next_request(st, prog, p, c, d):
    """Address of the next request of the entry being sent on (c, d); advances it.

    Returns (entry, address), or (-1, 0) when nothing is left to send.
    """
    q = st.dq.shape[3]
    # the send pointer walks the ring from the head; skip entries already fully sent
    while st.dq_ctl[D_SEND, c, d] < st.dq_ctl[D_COUNT, c, d]:
        k = ring_at(st.dq_ctl[D_HEAD, c, d], st.dq_ctl[D_SEND, c, d], q)
        if st.dq[Q_UNSENT, c, d, k] == 1:
            break
        st.dq_ctl[D_SEND, c, d] += 1
    if st.dq_ctl[D_SEND, c, d] >= st.dq_ctl[D_COUNT, c, d]:
        return -1, 0
    k = ring_at(st.dq_ctl[D_HEAD, c, d], st.dq_ctl[D_SEND, c, d], q)
    row = st.dq[Q_ROW, c, d, k]
    R = p.req_bytes
    run_start = (st.dq[Q_BASE, c, d, k] + st.dq[Q_O, c, d, k] * prog.inst[row, isa.I_OUTER_STRIDE]
                 + st.dq[Q_I, c, d, k] * prog.inst[row, isa.I_INNER_STRIDE])
    a = run_start + st.dq[Q_POS, c, d, k]
    block = a - a % R
    pos = block + R - run_start
    if pos >= prog.inst[row, isa.I_RUN_BYTES]:
        pos = 0
        st.dq[Q_I, c, d, k] += 1
        if st.dq[Q_I, c, d, k] >= prog.inst[row, isa.I_N_INNER]:
            st.dq[Q_I, c, d, k] = 0
            st.dq[Q_O, c, d, k] += 1
            if st.dq[Q_O, c, d, k] >= prog.inst[row, isa.I_N_OUTER]:
                st.dq[Q_UNSENT, c, d, k] = 0
    st.dq[Q_POS, c, d, k] = pos
    st.dq[Q_PENDING, c, d, k] += 1
    return k, block


@kernel
def dma_has_request(st, c, d):
    """Whether DMA d of core c has a request ready to send."""
    q = st.dq.shape[3]
    for n in range(st.dq_ctl[D_SEND, c, d], st.dq_ctl[D_COUNT, c, d]):
        if st.dq[Q_UNSENT, c, d, ring_at(st.dq_ctl[D_HEAD, c, d], n, q)] == 1:
            return True
    return False


@kernel
def dma_response(st, prog, p, c, d, k, t):
    """A response for entry k of DMA d on core c arrived at tick t."""
    st.dq[Q_PENDING, c, d, k] -= 1
    st.core[C_OUTSTANDING, c] -= 1
    if st.dq[Q_PENDING, c, d, k] > 0 or st.dq[Q_UNSENT, c, d, k] == 1:
        return
    s = st.dq[Q_SLOT, c, d, k]
    st.done[c, s, st.dq[Q_INST, c, d, k]] = t
    st.slot[S_PENDING_DMA, c, s] -= 1
    st.slot[S_LAST_DONE, c, s] = max(st.slot[S_LAST_DONE, c, s], t)
    st.dq[Q_ROW, c, d, k] = -1  # complete
    # retire completed entries from the head, in order
    q = st.dq.shape[3]
    while st.dq_ctl[D_COUNT, c, d] > 0 and st.dq[Q_ROW, c, d, st.dq_ctl[D_HEAD, c, d]] == -1:
        st.dq_ctl[D_HEAD, c, d] = ring_next(st.dq_ctl[D_HEAD, c, d], q)
        st.dq_ctl[D_COUNT, c, d] -= 1
        st.dq_ctl[D_SEND, c, d] = max(0, st.dq_ctl[D_SEND, c, d] - 1)
    if p.trace == 1:
        trace_dma_response(st, p, c, d, t)
