"""Simple memory: each channel serves its input ring in arrival order at its bandwidth
(``ch_bytes_per_cycle`` bytes per memory cycle, as a credit that refills every cycle) and
answers each request a fixed ``mem_latency`` memory cycles later, while its output ring
has room.
"""

from . import isa
from .jit import kernel
from .ports import ch_in_pop, ch_out_push, ch_out_room, heard
from .state import *  # noqa: F403  (field indices of the state tables)
from .timebase import align_up


@kernel
def _refill(st, p, ch, t):
    cyc = t // p.mem_period
    cap = max(p.req_bytes, p.ch_bytes_per_cycle)
    st.chan[H_CREDIT, ch] = min(cap, st.chan[H_CREDIT, ch] + p.ch_bytes_per_cycle * (cyc - st.chan[H_CREDIT_CYCLE, ch]))
    st.chan[H_CREDIT_CYCLE, ch] = cyc


@kernel
def simple_memory_step(st, rg, p, t):
    """Serve what each channel's bandwidth allows at memory edge t; set the next wake."""
    wake = isa.NEVER
    for ch in range(p.n_channels):
        _refill(st, p, ch, t)
        while (rg.mport[MP_IN_COUNT, ch] > 0
               and rg.ch_in[P_TIME, ch, rg.mport[MP_IN_HEAD, ch]] <= t
               and st.chan[H_CREDIT, ch] >= p.req_bytes and ch_out_room(rg, ch)):
            h = rg.mport[MP_IN_HEAD, ch]
            st.chan[H_CREDIT, ch] -= p.req_bytes
            d = rg.ch_in[P_DIR, ch, h]
            ch_out_push(rg, p, ch, t + p.mem_latency * p.mem_period, rg.ch_in[P_CORE, ch, h], d,
                        rg.ch_in[P_ENTRY, ch, h], rg.ch_in[P_SENT, ch, h])
            ch_in_pop(rg, p, ch, t)
            st.chan[H_READS + d, ch] += 1
            st.chan[H_READ_BYTES + d, ch] += p.req_bytes
        if rg.mport[MP_IN_COUNT, ch] > 0 and ch_out_room(rg, ch):
            arrival = rg.ch_in[P_TIME, ch, rg.mport[MP_IN_HEAD, ch]]
            missing = p.req_bytes - st.chan[H_CREDIT, ch]
            cycles = 0 if missing <= 0 else (missing + p.ch_bytes_per_cycle - 1) // p.ch_bytes_per_cycle
            when = max(arrival, (st.chan[H_CREDIT_CYCLE, ch] + cycles) * p.mem_period, t + 1)
            wake = min(wake, align_up(when, p.mem_period))
    st.ctl[MC_WAKE] = wake
    heard(rg, SIDE_MEM)
