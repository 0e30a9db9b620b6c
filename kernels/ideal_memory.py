"""Ideal memory: every request is answered on the next core cycle, at any rate.

There is no NoC and no channel state: the model takes each request from its core's
injection ring on the first core-clock edge after it was sent (the memory domain runs on
the core clock, ``npusim.params.TimeBase``) and puts the response on the same core's
arrival ring, there at once. Traffic is counted on channel 0. The core's own limits
(one request per DMA engine and cycle, one tag each: ``npusim.params``) set the
bandwidth.
"""

from numba.cpython.unsafe.numbers import trailing_zeros

from . import isa
from .jit import kernel
from .ports import arr_push, heard, inj_pop, take_fresh
from .state import *  # noqa: F403  (field indices of the state tables)


@kernel
def ideal_memory_step(st, rg, p, t):
    """Answer every request the cores sent before tick t (a core-clock edge)."""
    words = (p.n_cores + 63) >> 6
    for w in range(words):
        bits = take_fresh(rg, FRESH_INJ, w)
        while bits != 0:
            c = (w << 6) + trailing_zeros(bits)
            bits &= bits - 1
            while rg.cport[CP_INJ_COUNT, c] > 0:
                h = rg.cport[CP_INJ_HEAD, c]
                d = rg.inj[N_DIR, c, h]
                arr_push(rg, p, c, t, d, rg.inj[N_ENTRY, c, h], rg.inj[N_TIME, c, h])
                inj_pop(rg, p, c, t)
                st.chan[H_READS + d, 0] += 1
                st.chan[H_READ_BYTES + d, 0] += p.req_bytes
    st.ctl[MC_WAKE] = isa.NEVER
    heard(rg, SIDE_NET)
