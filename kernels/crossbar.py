"""The crossbar NoC: every core wired to every memory channel, with a fixed latency.

Two networks: requests (cores -> channels) and responses (channels -> cores). Each
destination port accepts one packet at a time, chosen round-robin over the sources whose
ring head targets it; a packet of ``f`` flits holds the port for ``f`` NoC cycles and
arrives ``latency + f - 1`` NoC cycles after it was granted. A channel has one port; a core
has ``noc.core_ports`` (ONNXim's injection ports per core), a response from channel ch
arriving on port ``ch % ports`` (as ONNXim numbers them). A channel whose input ring is
full is not granted packets (back-pressure up to the cores' DMA engines).

So that a grant does not look at every source, the crossbar indexes the ring heads: per
channel, how many cores have a request for it at the head of their injection ring
(``XC_INJ_HEADS``), and per core, which channels have a response for it at the head of
their output ring (a bit set, ``xb_heads``, and its count ``XP_RESP_HEADS``). A head
changes when the crossbar pops a ring, or when a ring turns non-empty, which
``rg.fresh`` reports.
"""

from numba.cpython.unsafe.numbers import trailing_zeros

from . import isa
from .jit import kernel
from .ports import (arr_push, ch_in_push, ch_in_room, ch_out_pop, heard, inj_pop,
                    packet_flits, take_fresh)
from .ring import ring_next
from .state import *  # noqa: F403  (field indices of the state tables)
from .timebase import align_up
from .trace import trace_flits


@kernel(inline=True)
def _inj_head_to(st, rg, c, change):
    """Core c's injection ring head joins (+1) or leaves (-1) its channel's count."""
    st.xb_ch[XC_INJ_HEADS, rg.inj[N_CHAN, c, rg.cport[CP_INJ_HEAD, c]]] += change


@kernel
def _out_head_for_core(st, rg, ch, present):
    """The head of channel ch's output ring becomes (present) or stops being a response
    waiting for its core: its core's XP_RESP_HEADS count and ``xb_heads`` bit of ch."""
    c = rg.ch_out[P_CORE, ch, rg.mport[MP_OUT_HEAD, ch]]
    if present:
        st.xb_core[XP_RESP_HEADS, c] += 1
        st.xb_heads[c, ch >> 6] |= 1 << (ch & 63)
    else:
        st.xb_core[XP_RESP_HEADS, c] -= 1
        st.xb_heads[c, ch >> 6] &= ~(1 << (ch & 63))


@kernel(inline=True)
def _note_fresh(st, rg, p):
    """Index the heads of the rings that turned non-empty since the last edge."""
    for w in range((p.n_cores + 63) >> 6):
        bits = take_fresh(rg, FRESH_INJ, w)
        while bits != 0:
            _inj_head_to(st, rg, (w << 6) + trailing_zeros(bits), 1)
            bits &= bits - 1
    for w in range((p.n_channels + 63) >> 6):
        bits = take_fresh(rg, FRESH_OUT, w)
        while bits != 0:
            _out_head_for_core(st, rg, (w << 6) + trailing_zeros(bits), True)
            bits &= bits - 1


@kernel(inline=True)
def _take_request(st, rg, p, c, t):
    """Pop the head of core c's injection ring, keeping the head index."""
    _inj_head_to(st, rg, c, -1)
    inj_pop(rg, p, c, t)
    if rg.cport[CP_INJ_COUNT, c] > 0:
        _inj_head_to(st, rg, c, 1)


@kernel(inline=True)
def _take_response(st, rg, p, ch, t):
    """Pop the head of channel ch's output ring, keeping the head index."""
    _out_head_for_core(st, rg, ch, False)
    ch_out_pop(rg, p, ch, t)
    if rg.mport[MP_OUT_COUNT, ch] > 0:
        _out_head_for_core(st, rg, ch, True)


@kernel(inline=True)
def _grant_requests(st, rg, p, t):
    for ch in range(p.n_channels):
        if (st.xb_ch[XC_INJ_HEADS, ch] == 0 or st.xb_ch[XC_PORT_FREE, ch] > t
                or not ch_in_room(rg, ch)):
            continue
        c = st.xb_ch[XC_RR, ch] - 1
        for n in range(p.n_cores):
            c = ring_next(c, p.n_cores)
            if rg.cport[CP_INJ_COUNT, c] == 0:
                continue
            h = rg.cport[CP_INJ_HEAD, c]
            if rg.inj[N_CHAN, c, h] != ch:
                continue
            flits = packet_flits(p, rg.inj[N_DIR, c, h] == 1)
            st.xb_ch[XC_PORT_FREE, ch] = t + flits * p.noc_period
            trace_flits(st, p, NOC_REQUEST, c, ch, flits, t)
            arrival = t + (p.noc_latency + flits - 1) * p.noc_period
            ch_in_push(rg, p, ch, t, arrival, c, rg.inj[N_DIR, c, h], rg.inj[N_ENTRY, c, h],
                       rg.inj[N_TIME, c, h], rg.inj[N_ADDR, c, h])
            _take_request(st, rg, p, c, t)
            st.xb_ch[XC_RR, ch] = ring_next(c, p.n_cores)
            break


@kernel(inline=True)
def _port(st, ch):
    """The response port of a core that channel ch's responses use."""
    ports = st.xb_port.shape[1]
    return 0 if ports == 1 else ch % ports


@kernel(out_of_line=True)  # inlined, the loop ran slower (jit.py)
def _next_response_channel(st, rg, c, t):
    """The first channel, round-robin from XP_RR, whose output ring head is a response for
    core c that is ready by tick t, on a port of c free at t; -1 if none. Walks only the
    channels listed in ``xb_heads`` (a bit set per core), not every channel."""
    words = st.xb_heads.shape[1]
    first = st.xb_core[XP_RR, c]
    w0 = first >> 6
    below = (1 << (first & 63)) - 1  # bits of the first word before the start
    for i in range(words + 1):
        w = w0 + i
        if w >= words:
            w -= words
        bits = st.xb_heads[c, w]
        if i == 0:
            bits &= ~below
        elif i == words:
            bits &= below
        while bits != 0:
            ch = (w << 6) + trailing_zeros(bits)
            if (rg.ch_out[P_TIME, ch, rg.mport[MP_OUT_HEAD, ch]] <= t
                    and st.xb_port[c, _port(st, ch)] <= t):
                return ch
            bits &= bits - 1
    return -1


@kernel(inline=True)
def _grant_responses(st, rg, p, t):
    """Each core's free response ports take a packet each, channels round-robin."""
    ports = st.xb_port.shape[1]
    for c in range(p.n_cores):
        if st.xb_core[XP_RESP_HEADS, c] == 0 or (ports == 1 and st.xb_port[c, 0] > t):
            continue
        for _ in range(ports):
            ch = _next_response_channel(st, rg, c, t)
            if ch < 0:
                break
            h = rg.mport[MP_OUT_HEAD, ch]
            flits = packet_flits(p, rg.ch_out[P_DIR, ch, h] == 0)
            st.xb_port[c, _port(st, ch)] = t + flits * p.noc_period
            trace_flits(st, p, NOC_RESPONSE, c, ch, flits, t)
            arr_push(rg, p, c, t + (p.noc_latency + flits - 1) * p.noc_period,
                     rg.ch_out[P_DIR, ch, h], rg.ch_out[P_ENTRY, ch, h],
                     rg.ch_out[P_SENT, ch, h])
            _take_response(st, rg, p, ch, t)
            st.xb_core[XP_RR, c] = ring_next(ch, p.n_channels)
            if st.xb_core[XP_RESP_HEADS, c] == 0:
                break


@kernel(inline=True)
def crossbar_step(st, rg, p, t):
    """Grant one packet per free destination port at NoC edge t; set the next wake."""
    _note_fresh(st, rg, p)
    _grant_requests(st, rg, p, t)
    _grant_responses(st, rg, p, t)
    wake = isa.NEVER
    for c in range(p.n_cores):
        if rg.cport[CP_INJ_COUNT, c] > 0:
            ch = rg.inj[N_CHAN, c, rg.cport[CP_INJ_HEAD, c]]
            if ch_in_room(rg, ch):
                wake = min(wake, max(st.xb_ch[XC_PORT_FREE, ch], t + 1))
    for ch in range(p.n_channels):
        if rg.mport[MP_OUT_COUNT, ch] > 0:
            h = rg.mport[MP_OUT_HEAD, ch]
            c = rg.ch_out[P_CORE, ch, h]
            wake = min(wake, max(rg.ch_out[P_TIME, ch, h], st.xb_port[c, _port(st, ch)],
                                 t + 1))
    if wake < isa.NEVER:
        wake = align_up(wake, p.noc_period)
    st.ctl[NC_WAKE] = wake
    heard(rg, SIDE_NET)
