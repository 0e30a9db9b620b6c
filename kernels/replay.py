"""Memory-trace replay: requests straight into the DRAM controllers, no cores, no NoC.

Requests enter in trace order as fast as the controllers accept them: the next request
waits while its channel's queue is full (in order, as Ramulator's trace front end does).
Nothing waits for responses, so they are taken as soon as the controller produces them;
a request completes at its response's ready cycle.
"""

from . import isa
from .dram import _accept, dram_channel_step
from .jit import kernel
from .memory import channel_of, response_taken
from .state import *  # noqa: F403  (field indices of the state tables)


@kernel
def _feed(st, mt, p, addrs, writes, cursor, cyc):
    """Send requests in trace order until one finds its channel's queue full."""
    n = addrs.shape[0]
    qin = st.ch_in.shape[2]
    t = cyc * p.mem_period
    while cursor[0] < n:
        addr = addrs[cursor[0]]
        ch = channel_of(addr, p, mt)
        if st.chan[H_IN_COUNT, ch] > 0:
            return ch  # the previous request to this channel is still waiting
        k = (st.chan[H_IN_HEAD, ch] + st.chan[H_IN_COUNT, ch]) % qin
        st.ch_in[P_TIME, ch, k] = t
        st.ch_in[P_CORE, ch, k] = 0
        st.ch_in[P_DIR, ch, k] = writes[cursor[0]]
        st.ch_in[P_ENTRY, ch, k] = cursor[0]
        st.ch_in[P_SENT, ch, k] = t
        st.ch_in[P_ADDR, ch, k] = addr
        st.chan[H_IN_COUNT, ch] += 1
        _accept(st, mt, p, ch, t)
        st.dch[DC_WAKE, ch] = min(st.dch[DC_WAKE, ch], cyc)
        cursor[0] += 1
    return -1


@kernel
def replay(st, mt, p, addrs, writes, cursor, max_iterations):
    """Advance the replay; cursor = [next request, completed]. Returns 1 when all done."""
    n = addrs.shape[0]
    cyc = st.glob[G_NOW]
    for _ in range(max_iterations):
        if cursor[1] >= n:
            st.glob[G_NOW] = cyc
            return 1
        st.glob[G_STEPS] += 1
        t = cyc * p.mem_period
        _feed(st, mt, p, addrs, writes, cursor, cyc)
        nxt = isa.NEVER
        for ch in range(p.n_channels):
            if p.skip == 0 or st.dch[DC_WAKE, ch] <= cyc:
                dram_channel_step(st, mt, p, ch, t)
            # responses leave at once; the request completes at the ready cycle
            while st.chan[H_OUT_COUNT, ch] > 0:
                h = st.chan[H_OUT_HEAD, ch]
                st.glob[G_END] = max(st.glob[G_END], st.ch_out[P_TIME, ch, h] // p.mem_period)
                response_taken(st, ch)
                cursor[1] += 1
        # a request that was waiting may have been accepted: the rest follow now, and the
        # channels they reach look at them from the next cycle
        _feed(st, mt, p, addrs, writes, cursor, cyc)
        for ch in range(p.n_channels):
            nxt = min(nxt, st.dch[DC_WAKE, ch])
        if p.skip == 0 or nxt <= cyc:
            nxt = cyc + 1
        if nxt >= isa.NEVER:
            if cursor[1] >= n:
                continue
            return 2  # nothing can ever happen again: a bug
        cyc = nxt
        st.glob[G_NOW] = cyc
    return 0
