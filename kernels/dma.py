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


@kernel(inline=True)
def _walk(st, prog, p, c, d, k):
    """The aligned request block at entry k's walk position, and the position after it
    (run, element, byte); ``done``: that block was the entry's last."""
    row = st.dq[Q_ROW, c, d, k]
    R = p.req_bytes
    o = st.dq[Q_O, c, d, k]
    i = st.dq[Q_I, c, d, k]
    run_start = (st.dq[Q_BASE, c, d, k] + o * prog.inst[row, isa.I_OUTER_STRIDE]
                 + i * prog.inst[row, isa.I_INNER_STRIDE])
    a = run_start + st.dq[Q_POS, c, d, k]
    block = a - a % R
    pos = block + R - run_start
    done = False
    if pos >= prog.inst[row, isa.I_RUN_BYTES]:
        pos = 0
        i += 1
        if i >= prog.inst[row, isa.I_N_INNER]:
            i = 0
            o += 1
            if o >= prog.inst[row, isa.I_N_OUTER]:
                done = True
    return block, o, i, pos, done


@kernel
def dma_next_request(st, prog, p, c, d):
    """Address of the next request of the entry being sent on (c, d); advances it.

    Returns (entry, address), or (-1, 0) when nothing is left to send.
    """
    k = _sending(st, c, d)
    if k < 0:
        return -1, 0
    block, o, i, pos, done = _walk(st, prog, p, c, d, k)
    st.dq[Q_O, c, d, k] = o
    st.dq[Q_I, c, d, k] = i
    st.dq[Q_POS, c, d, k] = pos
    if done:
        st.dq[Q_UNSENT, c, d, k] = 0
    st.dq[Q_PENDING, c, d, k] += 1
    return k, block


@kernel(inline=True)
def _sending(st, c, d):
    """The entry being sent on (c, d), or -1; the send pointer walks the ring from the
    head, past entries already fully sent."""
    q = st.dq.shape[3]
    while st.dq_ctl[D_SEND, c, d] < st.dq_ctl[D_COUNT, c, d]:
        k = ring_at(st.dq_ctl[D_HEAD, c, d], st.dq_ctl[D_SEND, c, d], q)
        if st.dq[Q_UNSENT, c, d, k] == 1:
            return k
        st.dq_ctl[D_SEND, c, d] += 1
    return -1


@kernel
def dma_left(st, prog, p, c, d):
    """Fast fidelity (``npusim.fast.streams``): (requests the entry being sent on (c, d)
    has still to send, the entry); (0, -1) if none is being sent."""
    k = _sending(st, c, d)
    if k < 0:
        return 0, -1
    o0, i0, pos0 = st.dq[Q_O, c, d, k], st.dq[Q_I, c, d, k], st.dq[Q_POS, c, d, k]
    left = 0
    done = False
    while not done:  # walk to the end, then put the position back
        _, o, i, pos, done = _walk(st, prog, p, c, d, k)
        st.dq[Q_O, c, d, k], st.dq[Q_I, c, d, k], st.dq[Q_POS, c, d, k] = o, i, pos
        left += 1
    st.dq[Q_O, c, d, k], st.dq[Q_I, c, d, k], st.dq[Q_POS, c, d, k] = o0, i0, pos0
    return left, k


@kernel
def dma_skip(st, prog, p, c, d, n):
    """Fast fidelity: advance the entry being sent on (c, d) by ``n`` requests without
    sending them (``n`` less than ``dma_left``: the entry is never finished this way)."""
    k = _sending(st, c, d)
    for _ in range(n):
        _, o, i, pos, done = _walk(st, prog, p, c, d, k)
        st.dq[Q_O, c, d, k], st.dq[Q_I, c, d, k], st.dq[Q_POS, c, d, k] = o, i, pos


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
    st.core[C_LD_OUTSTANDING + d, c] -= 1
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
    trace_dma_response(st, p, c, d, t)
