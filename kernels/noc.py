"""A simple crossbar NoC between cores and memory channels.

Two networks: requests (cores -> channels) and responses (channels -> cores). Each
destination port accepts one packet at a time, chosen round-robin over the sources whose
head packet targets it; a packet of ``f`` flits holds the port for ``f`` NoC cycles and
arrives ``latency + f - 1`` NoC cycles after it was granted. A channel whose input queue is
full is not granted packets (back-pressure up to the cores' DMA engines).
"""

from numba.cpython.unsafe.numbers import trailing_zeros

from .jit import kernel

from . import isa
from .ring import ring_at, ring_next
from .state import *  # noqa: F403  (field indices of the state tables)
from .memory import channel_of, response_taken
from .timebase import align_up
from .trace import trace_flits


@kernel
def packet_flits(p, carries_data):
    """Flits of a packet: read requests and write acks fit one; data takes R / flit."""
    if carries_data:
        return max(1, (p.req_bytes + p.flit_bytes - 1) // p.flit_bytes)
    return 1


@kernel
def noc_inject(st, mt, p, c, d, entry, addr, t):
    """Core c's DMA d puts a request into its network interface; False when full."""
    q = st.inj.shape[2]
    if st.core[C_INJ_COUNT, c] >= p.inj_queue:
        return False
    k = ring_at(st.core[C_INJ_HEAD, c], st.core[C_INJ_COUNT, c], q)
    ch = channel_of(addr, p, mt)
    st.inj[N_ADDR, c, k] = addr
    st.inj[N_DIR, c, k] = d
    st.inj[N_ENTRY, c, k] = entry
    st.inj[N_TIME, c, k] = t
    st.inj[N_CHAN, c, k] = ch
    if st.core[C_INJ_COUNT, c] == 0:
        st.chan[H_INJ_HEADS, ch] += 1
    st.core[C_INJ_COUNT, c] += 1
    st.glob[G_WAKE_NOC] = min(st.glob[G_WAKE_NOC], align_up(t + 1, p.noc_period))
    return True


@kernel
def _grant_requests(st, p, t):
    qin = st.ch_in.shape[2]
    qinj = st.inj.shape[2]
    for ch in range(p.n_channels):
        if (st.chan[H_INJ_HEADS, ch] == 0 or st.chan[H_REQ_PORT_FREE, ch] > t
                or st.chan[H_IN_COUNT, ch] >= p.ch_queue):
            continue
        c = st.chan[H_REQ_RR, ch] - 1
        for n in range(p.n_cores):
            c = ring_next(c, p.n_cores)
            if st.core[C_INJ_COUNT, c] == 0:
                continue
            h = st.core[C_INJ_HEAD, c]
            if st.inj[N_CHAN, c, h] != ch:
                continue
            flits = packet_flits(p, st.inj[N_DIR, c, h] == 1)
            st.chan[H_REQ_PORT_FREE, ch] = t + flits * p.noc_period
            if p.trace == 1:
                trace_flits(st, p, NOC_REQUEST, c, ch, flits, t)
            k = ring_at(st.chan[H_IN_HEAD, ch], st.chan[H_IN_COUNT, ch], qin)
            arrival = t + (p.noc_latency + flits - 1) * p.noc_period
            st.ch_in[P_TIME, ch, k] = arrival
            st.ch_in[P_CORE, ch, k] = c
            st.ch_in[P_DIR, ch, k] = st.inj[N_DIR, c, h]
            st.ch_in[P_ENTRY, ch, k] = st.inj[N_ENTRY, c, h]
            st.ch_in[P_SENT, ch, k] = st.inj[N_TIME, c, h]
            st.ch_in[P_ADDR, ch, k] = st.inj[N_ADDR, c, h]
            # the channel controller looks at it when it arrives
            st.dch[DC_WAKE, ch] = min(st.dch[DC_WAKE, ch], -(-arrival // p.mem_period))
            st.chan[H_IN_COUNT, ch] += 1
            st.core[C_INJ_HEAD, c] = ring_next(h, qinj)
            st.core[C_INJ_COUNT, c] -= 1
            st.chan[H_INJ_HEADS, ch] -= 1
            if st.core[C_INJ_COUNT, c] > 0:
                st.chan[H_INJ_HEADS, st.inj[N_CHAN, c, ring_next(h, qinj)]] += 1
            st.chan[H_REQ_RR, ch] = ring_next(c, p.n_cores)
            st.glob[G_WAKE_MEM] = min(st.glob[G_WAKE_MEM], align_up(max(arrival, t + 1), p.mem_period))
            st.core[C_WAKE, c] = min(st.core[C_WAKE, c], align_up(t, p.core_period))
            break


@kernel
def _next_response_channel(st, c, t):
    """The first channel, round-robin from C_RESP_RR, whose ring head is a response for
    core c that is ready by tick t; -1 if none. Walks only the channels listed in
    ``resp_heads`` (a bit set per core), not every channel."""
    words = st.resp_heads.shape[1]
    first = st.core[C_RESP_RR, c]
    w0 = first >> 6
    below = (1 << (first & 63)) - 1  # bits of the first word before the start
    for i in range(words + 1):
        w = w0 + i
        if w >= words:
            w -= words
        bits = st.resp_heads[c, w]
        if i == 0:
            bits &= ~below
        elif i == words:
            bits &= below
        while bits != 0:
            ch = (w << 6) + trailing_zeros(bits)
            if st.ch_out[P_TIME, ch, st.chan[H_OUT_HEAD, ch]] <= t:
                return ch
            bits &= bits - 1
    return -1


@kernel
def _grant_responses(st, p, t):
    qarr = st.arr.shape[2]
    for c in range(p.n_cores):
        if st.core[C_RESP_HEADS, c] == 0 or st.core[C_RESP_PORT_FREE, c] > t:
            continue
        ch = _next_response_channel(st, c, t)
        if ch < 0:
            continue
        h = st.chan[H_OUT_HEAD, ch]
        flits = packet_flits(p, st.ch_out[P_DIR, ch, h] == 0)
        st.core[C_RESP_PORT_FREE, c] = t + flits * p.noc_period
        if p.trace == 1:
            trace_flits(st, p, NOC_RESPONSE, c, ch, flits, t)
        arrival = t + (p.noc_latency + flits - 1) * p.noc_period
        k = ring_at(st.core[C_ARR_HEAD, c], st.core[C_ARR_COUNT, c], qarr)
        st.arr[A_TIME, c, k] = arrival
        st.arr[A_DIR, c, k] = st.ch_out[P_DIR, ch, h]
        st.arr[A_ENTRY, c, k] = st.ch_out[P_ENTRY, ch, h]
        st.arr[A_SENT, c, k] = st.ch_out[P_SENT, ch, h]
        st.core[C_ARR_COUNT, c] += 1
        response_taken(st, ch)
        st.core[C_RESP_RR, c] = ring_next(ch, p.n_channels)
        st.core[C_WAKE, c] = min(st.core[C_WAKE, c], align_up(arrival, p.core_period))
        # the channel may serve again now that its output ring has room
        st.glob[G_WAKE_MEM] = min(st.glob[G_WAKE_MEM], align_up(t + 1, p.mem_period))
        st.dch[DC_WAKE, ch] = min(st.dch[DC_WAKE, ch], (t + 1 + p.mem_period - 1) // p.mem_period)


@kernel(inline=True)
def noc_step(st, p, t):
    """Grant one packet per free destination port at NoC edge t; return the next wake."""
    _grant_requests(st, p, t)
    _grant_responses(st, p, t)
    wake = isa.NEVER
    for c in range(p.n_cores):
        if st.core[C_INJ_COUNT, c] > 0:
            ch = st.inj[N_CHAN, c, st.core[C_INJ_HEAD, c]]
            if st.chan[H_IN_COUNT, ch] < p.ch_queue:
                wake = min(wake, max(st.chan[H_REQ_PORT_FREE, ch], t + 1))
    for ch in range(p.n_channels):
        if st.chan[H_OUT_COUNT, ch] > 0:
            h = st.chan[H_OUT_HEAD, ch]
            c = st.ch_out[P_CORE, ch, h]
            wake = min(wake, max(st.ch_out[P_TIME, ch, h], st.core[C_RESP_PORT_FREE, c], t + 1))
    if wake < isa.NEVER:
        wake = align_up(wake, p.noc_period)
    return wake
