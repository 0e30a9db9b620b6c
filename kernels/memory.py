"""Memory models behind the NoC, one state row per channel.

``simple``: each channel serves requests in arrival order at its bandwidth
(``ch_bytes_per_cycle`` bytes per memory cycle, as a credit that refills every cycle) and
answers each one a fixed ``mem_latency`` memory cycles later. ``ideal`` memory has no
channel state at all: the core's DMA answers itself in the next cycle (see ``loop.py``).
The cycle-level DRAM (``dram.py``) uses the same rings: requests in, responses out.
"""

from . import isa
from .addrmap import dram_channel
from .jit import kernel
from .ring import ring_next
from .state import *  # noqa: F403  (field indices of the state tables)
from .timebase import align_up

MEM_IDEAL = 0
MEM_SIMPLE = 1
MEM_DRAM = 2


@kernel
def channel_of(addr, p, mt):
    """Channel of an address: the DRAM's address mapping, or for simple memory requests
    interleaved across channels at request granularity."""
    if p.mem_type == MEM_DRAM:
        return dram_channel(addr, p, mt)
    return (addr // p.req_bytes) % p.n_channels


@kernel
def _refill(st, p, ch, t):
    cyc = t // p.mem_period
    cap = max(p.req_bytes, p.ch_bytes_per_cycle)
    st.chan[H_CREDIT, ch] = min(cap, st.chan[H_CREDIT, ch] + p.ch_bytes_per_cycle * (cyc - st.chan[H_CREDIT_CYCLE, ch]))
    st.chan[H_CREDIT_CYCLE, ch] = cyc


@kernel
def _head_for_core(st, ch, h, present):
    """The response at slot h heads channel ch's ring (present) or no longer does: keep
    its core's C_RESP_HEADS count and ``resp_heads`` bit of ch."""
    c = st.ch_out[P_CORE, ch, h]
    if present:
        st.core[C_RESP_HEADS, c] += 1
        st.resp_heads[c, ch >> 6] |= 1 << (ch & 63)
    else:
        st.core[C_RESP_HEADS, c] -= 1
        st.resp_heads[c, ch >> 6] &= ~(1 << (ch & 63))


@kernel
def response_queued(st, ch):
    """Channel ch has just added a response to its ring."""
    if st.chan[H_OUT_COUNT, ch] == 1:
        _head_for_core(st, ch, st.chan[H_OUT_HEAD, ch], True)


@kernel
def response_taken(st, ch):
    """The response at the head of channel ch's ring leaves it."""
    h = st.chan[H_OUT_HEAD, ch]
    _head_for_core(st, ch, h, False)
    h = ring_next(h, st.ch_out.shape[2])
    st.chan[H_OUT_HEAD, ch] = h
    st.chan[H_OUT_COUNT, ch] -= 1
    if st.chan[H_OUT_COUNT, ch] > 0:
        _head_for_core(st, ch, h, True)


@kernel
def simple_memory_step(st, p, t):
    """Serve what each channel's bandwidth allows at memory edge t; return the next wake."""
    qin = st.ch_in.shape[2]
    qout = st.ch_out.shape[2]
    wake = isa.NEVER
    for ch in range(p.n_channels):
        _refill(st, p, ch, t)
        while (st.chan[H_IN_COUNT, ch] > 0 and st.ch_in[P_TIME, ch, st.chan[H_IN_HEAD, ch]] <= t
               and st.chan[H_CREDIT, ch] >= p.req_bytes and st.chan[H_OUT_COUNT, ch] < qout):
            h = st.chan[H_IN_HEAD, ch]
            st.chan[H_CREDIT, ch] -= p.req_bytes
            k = (st.chan[H_OUT_HEAD, ch] + st.chan[H_OUT_COUNT, ch]) % qout
            ready = t + p.mem_latency * p.mem_period
            st.ch_out[P_TIME, ch, k] = ready
            st.ch_out[P_CORE, ch, k] = st.ch_in[P_CORE, ch, h]
            st.ch_out[P_DIR, ch, k] = st.ch_in[P_DIR, ch, h]
            st.ch_out[P_ENTRY, ch, k] = st.ch_in[P_ENTRY, ch, h]
            st.ch_out[P_SENT, ch, k] = st.ch_in[P_SENT, ch, h]
            st.chan[H_OUT_COUNT, ch] += 1
            response_queued(st, ch)
            st.chan[H_IN_HEAD, ch] = (h + 1) % qin
            st.chan[H_IN_COUNT, ch] -= 1
            d = st.ch_in[P_DIR, ch, h]
            st.chan[H_READS + d, ch] += 1
            st.chan[H_READ_BYTES + d, ch] += p.req_bytes
            # the NoC can take the response when ready, and has room for one more request
            st.glob[G_WAKE_NOC] = min(st.glob[G_WAKE_NOC], align_up(t, p.noc_period))
        if st.chan[H_IN_COUNT, ch] > 0 and st.chan[H_OUT_COUNT, ch] < qout:
            arrival = st.ch_in[P_TIME, ch, st.chan[H_IN_HEAD, ch]]
            missing = p.req_bytes - st.chan[H_CREDIT, ch]
            cycles = 0 if missing <= 0 else (missing + p.ch_bytes_per_cycle - 1) // p.ch_bytes_per_cycle
            when = max(arrival, (st.chan[H_CREDIT_CYCLE, ch] + cycles) * p.mem_period, t + 1)
            wake = min(wake, align_up(when, p.mem_period))
    return wake
