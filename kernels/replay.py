"""Memory-trace replay: requests straight into the DRAM controllers, no cores, no NoC.

Requests enter in trace order as fast as the controllers accept them: the next request
waits while its channel's queue is full (in order, as Ramulator's trace front end does).
Responses are taken the cycle they are ready.
"""

from . import isa
from .dram import _accept, dram_channel_step
from .jit import kernel
from .memory import channel_of
from .state import *  # noqa: F403  (field indices of the state tables)


@kernel
def replay(st, mt, p, addrs, writes, cursor, max_iterations):
    """Advance the replay; cursor = [next request, completed]. Returns 1 when all done."""
    n = addrs.shape[0]
    qin = st.ch_in.shape[2]
    qout = st.ch_out.shape[2]
    cyc = st.glob[G_NOW]
    for _ in range(max_iterations):
        if cursor[1] >= n:
            st.glob[G_END] = cyc
            st.glob[G_NOW] = cyc
            return 1
        st.glob[G_STEPS] += 1
        t = cyc * p.mem_period
        # feed in trace order while the target queue has room
        while cursor[0] < n:
            addr = addrs[cursor[0]]
            ch = channel_of(addr, p, mt)
            if st.chan[H_IN_COUNT, ch] > 0:
                break  # the previous request to this channel is still waiting
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
        nxt = isa.NEVER
        for ch in range(p.n_channels):
            if p.skip == 0 or st.dch[DC_WAKE, ch] <= cyc:
                dram_channel_step(st, mt, p, ch, t)
            # responses leave as soon as they are ready
            while st.chan[H_OUT_COUNT, ch] > 0:
                h = st.chan[H_OUT_HEAD, ch]
                ready = st.ch_out[P_TIME, ch, h] // p.mem_period
                if ready > cyc:
                    nxt = min(nxt, ready)
                    break
                st.chan[H_OUT_HEAD, ch] = (h + 1) % qout
                st.chan[H_OUT_COUNT, ch] -= 1
                st.dch[DC_WAKE, ch] = min(st.dch[DC_WAKE, ch], cyc + 1)
                cursor[1] += 1
                st.glob[G_END] = cyc
            nxt = min(nxt, st.dch[DC_WAKE, ch])
        if cursor[0] < n and st.chan[H_IN_COUNT, channel_of(addrs[cursor[0]], p, mt)] == 0:
            nxt = cyc + 1  # the next request can enter now
        if p.skip == 0 or nxt <= cyc:
            nxt = cyc + 1
        if nxt >= isa.NEVER:
            return 2  # nothing can ever happen again: a bug
        cyc = nxt
        st.glob[G_NOW] = cyc
    return 0
