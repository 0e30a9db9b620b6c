"""Memory-trace replay: requests straight into the DRAM controllers, no cores, no NoC.

The replay stands on the network side of the channels' rings. Requests enter in trace
order as fast as the controllers accept them: the next request waits while its channel's
queue is full (in order, as Ramulator's trace front end does). Nothing waits for
responses, so they are taken as soon as the controller produces them; a request completes
at its response's ready cycle.
"""

from numba.cpython.unsafe.numbers import trailing_zeros

from . import isa
from .dram import _accept, dram_step
from .jit import entry, kernel
from .memory import channel_of, memory_wake
from .ports import ch_in_push, ch_out_pop, take_fresh
from .state import *  # noqa: F403  (field indices of the state tables)


@kernel(inline=True)
def _feed(st, rg, mt, p, addrs, writes, cursor, t):
    """Send requests in trace order until one finds its channel's queue full."""
    n = addrs.shape[0]
    while cursor[0] < n:
        addr = addrs[cursor[0]]
        ch = channel_of(addr, p, mt)
        if rg.mport[MP_IN_COUNT, ch] > 0:
            return ch  # the previous request to this channel is still waiting
        ch_in_push(rg, p, ch, t, t, 0, writes[cursor[0]], cursor[0], t, addr)
        _accept(st, rg, mt, p, ch, t)
        cursor[0] += 1
    return -1


@kernel(inline=True)
def _take_responses(glob, rg, p, cursor, t):
    """Take every response the channels have produced: the output rings that turned
    non-empty (``rg.fresh``), each emptied at once; G_END is the last one's DRAM cycle."""
    for w in range((p.n_channels + 63) >> 6):
        bits = take_fresh(rg, FRESH_OUT, w)
        while bits != 0:
            ch = (w << 6) + trailing_zeros(bits)
            bits &= bits - 1
            while rg.mport[MP_OUT_COUNT, ch] > 0:
                ready = rg.ch_out[P_TIME, ch, rg.mport[MP_OUT_HEAD, ch]]
                glob[G_END] = max(glob[G_END], ready // p.mem_period)
                ch_out_pop(rg, p, ch, t)
                cursor[1] += 1


@entry
def replay(chip, mt, p, addrs, writes, cursor, max_iterations):
    """Advance the replay; cursor = [next request, completed]. Returns 1 when all done.

    ``chip.glob[G_NOW]`` is the tick reached, ``chip.glob[G_END]`` the DRAM cycle of the
    last response."""
    n = addrs.shape[0]
    st, rg = chip.mem, chip.rings
    t = chip.glob[G_NOW]
    for _ in range(max_iterations):
        if cursor[1] >= n:
            chip.glob[G_NOW] = t
            return 1
        chip.glob[G_STEPS] += 1
        _feed(st, rg, mt, p, addrs, writes, cursor, t)
        dram_step(st, rg, mt, p, t)
        _take_responses(chip.glob, rg, p, cursor, t)
        # a request that was waiting may have been accepted: the rest follow now, and the
        # channels they reach look at them from the next cycle
        _feed(st, rg, mt, p, addrs, writes, cursor, t)
        nxt = memory_wake(st, rg, p)
        if p.skip == 0 or nxt <= t:
            nxt = t + p.mem_period
        if nxt >= isa.NEVER:
            if cursor[1] >= n:
                continue
            return 2  # nothing can ever happen again: a bug
        t = nxt
        chip.glob[G_NOW] = t
    return 0
