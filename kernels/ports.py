"""The rings between units: the only tables two units share (``State.rings``).

::

    cores side                   network side                      memory side
    core c   ── inj[c] ──────►   the NoC carries        ── ch_in[ch] ──►  channel ch
    core c   ◄── arr[c] ──────   requests and responses ◄── ch_out[ch] ──  channel ch

Every endpoint has a port: a core has its injection ring (requests its DMA sends) and its
arrival ring (responses coming back), a memory channel its input ring (requests arriving)
and its output ring (responses ready to leave). Each ring is a fixed-size FIFO of packets
whose head and count live in the port record (``cport[CP_*, core]``,
``mport[MP_*, channel]``); its capacity is its last dimension. The NoC sits on the network
side of all four. With ideal memory there is no NoC: the ideal memory serves the network
side of the cores' rings itself and the channel rings stay empty.

A unit pushes only into the rings it produces and pops only the rings it consumes, always
through the functions below:

- a producer checks ``*_room`` first (a full ring is back-pressure: the packet waits in
  the producer), and stamps each packet with the tick from which the consumer may take it
  (``A_TIME``/``P_TIME``: arrival or ready tick; non-decreasing along a ring, so a
  consumer only ever looks at the head);
- a push rings the consumer's bell, and a pop from a full ring rings the producer's bell
  (a producer waits on a ring only when it is full). A bell is the first edge of the
  listener's clock at which it must look again (``bells[SIDE_*]`` per side; ``CP_BELL``/``MP_BELL`` per core and channel,
  for the units that step endpoints one by one). The listener lowers its own wake time to
  its bell when it next runs and resets the bell: no unit ever writes another's wake time;
- the network side also learns *which* of its input rings turned non-empty (``fresh``: a
  bit per core for injection rings, per channel for output rings), so a NoC never scans
  every endpoint to find new work; it clears the bits it has taken note of.

Within a tick the units run in the order memory, NoC, cores (``loop.py``); a bell rung for
a side that has already run in this tick points past it.

Packet fields: ``inj`` N_ADDR, N_DIR (0 read, 1 write), N_ENTRY (the DMA queue entry),
N_TIME (tick sent), N_CHAN (destination channel); ``ch_in`` and ``ch_out`` P_TIME, P_CORE
(source core / destination core), P_DIR, P_ENTRY, P_SENT (tick the core sent it), P_ADDR
(``ch_in`` only); ``arr`` A_TIME, A_DIR, A_ENTRY, A_SENT. A read request and a write's
acknowledgement carry no data, a write request and a read response carry ``req_bytes``
(``packet_flits``).
"""

from .isa import NEVER
from .jit import kernel
from .ring import ring_at, ring_next
from .state import *  # noqa: F403  (field indices of the state tables)
from .timebase import align_up


@kernel(inline=True)
def packet_flits(p, carries_data):
    """Flits of a packet: read requests and write acks fit one; data takes R / flit."""
    if carries_data:
        return max(1, (p.req_bytes + p.flit_bytes - 1) // p.flit_bytes)
    return 1


@kernel(inline=True)
def _mark_fresh(rg, row, i):
    rg.fresh[row, i >> 6] |= 1 << (i & 63)


@kernel(inline=True)
def ring_bell(rg, side, edge):
    """Side ``side`` must look at its rings at ``edge`` (an edge of its clock) or before."""
    if edge < rg.bells[side]:
        rg.bells[side] = edge


# ------------------------------------------------------------------ listening


@kernel(inline=True)
def bell(rg, side):
    """The edge at which side ``side`` was last asked to look (isa.NEVER: not rung)."""
    return rg.bells[side]


@kernel(inline=True)
def heard(rg, side):
    """Side ``side`` has looked at its rings: its bell is silent until rung again."""
    rg.bells[side] = NEVER


@kernel(inline=True)
def core_bell(rg, c):
    """The edge at which core c must look at its rings (isa.NEVER: not rung)."""
    return rg.cport[CP_BELL, c]


@kernel(inline=True)
def core_heard(rg, c):
    rg.cport[CP_BELL, c] = NEVER


@kernel(inline=True)
def channel_bell(rg, ch):
    """The edge at which channel ch must look at its rings (isa.NEVER: not rung)."""
    return rg.mport[MP_BELL, ch]


@kernel(inline=True)
def channel_heard(rg, ch):
    rg.mport[MP_BELL, ch] = NEVER


@kernel(inline=True)
def take_fresh(rg, row, w):
    """Word w of the ``fresh`` bits of ``row`` (FRESH_INJ: cores, FRESH_OUT: channels),
    cleared: bit i % 64 set if ring i turned non-empty since the last take."""
    bits = rg.fresh[row, w]
    rg.fresh[row, w] = 0
    return bits


@kernel(inline=True)
def _past(edge, t, period):
    """``edge`` (an edge at or after t) pushed past t: the listener has run at t already."""
    return edge + period if edge <= t else edge


# ------------------------------------------------------------------ core c: inj (out)


@kernel(inline=True)
def inj_room(rg, c):
    return rg.cport[CP_INJ_COUNT, c] < rg.inj.shape[2]


@kernel(inline=True)
def inj_push(rg, p, c, t, ch, d, entry, addr):
    """Core c sends a request (direction d, DMA entry, address) for channel ch at tick t;
    the network side may take it from its next edge."""
    n = rg.cport[CP_INJ_COUNT, c]
    k = ring_at(rg.cport[CP_INJ_HEAD, c], n, rg.inj.shape[2])
    rg.inj[N_ADDR, c, k] = addr
    rg.inj[N_DIR, c, k] = d
    rg.inj[N_ENTRY, c, k] = entry
    rg.inj[N_TIME, c, k] = t
    rg.inj[N_CHAN, c, k] = ch
    rg.cport[CP_INJ_COUNT, c] = n + 1
    if n == 0:
        _mark_fresh(rg, FRESH_INJ, c)
    ring_bell(rg, SIDE_NET, align_up(t + 1, p.noc_period))


@kernel(inline=True)
def inj_pop(rg, p, c, t):
    """The network side takes the head of core c's injection ring at tick t."""
    q = rg.inj.shape[2]
    rg.cport[CP_INJ_HEAD, c] = ring_next(rg.cport[CP_INJ_HEAD, c], q)
    rg.cport[CP_INJ_COUNT, c] -= 1
    if rg.cport[CP_INJ_COUNT, c] == q - 1:
        _ring_core(rg, c, align_up(t, p.core_period))


# ------------------------------------------------------------------ core c: arr (in)


@kernel(inline=True)
def _ring_core(rg, c, edge):
    if edge < rg.cport[CP_BELL, c]:
        rg.cport[CP_BELL, c] = edge
    ring_bell(rg, SIDE_CORES, edge)


@kernel(inline=True)
def arr_push(rg, p, c, arrival, d, entry, sent):
    """A response (direction d, DMA entry, sent at tick ``sent``) for core c, there at tick
    ``arrival``. Never full: each of a core's two DMA engines has at most
    ``max_outstanding`` requests in flight."""
    k = ring_at(rg.cport[CP_ARR_HEAD, c], rg.cport[CP_ARR_COUNT, c], rg.arr.shape[2])
    rg.arr[A_TIME, c, k] = arrival
    rg.arr[A_DIR, c, k] = d
    rg.arr[A_ENTRY, c, k] = entry
    rg.arr[A_SENT, c, k] = sent
    rg.cport[CP_ARR_COUNT, c] += 1
    _ring_core(rg, c, align_up(arrival, p.core_period))


@kernel(inline=True)
def arr_pop(rg, c):
    """Core c takes the head of its arrival ring (never full: nobody waits for room)."""
    rg.cport[CP_ARR_HEAD, c] = ring_next(rg.cport[CP_ARR_HEAD, c], rg.arr.shape[2])
    rg.cport[CP_ARR_COUNT, c] -= 1


# ------------------------------------------------------------------ channel ch: ch_in (in)


@kernel(inline=True)
def _ring_channel(rg, p, ch, edge, t):
    if edge < rg.mport[MP_BELL, ch]:
        rg.mport[MP_BELL, ch] = edge
    ring_bell(rg, SIDE_MEM, _past(edge, t, p.mem_period))


@kernel(inline=True)
def ch_in_room(rg, ch):
    return rg.mport[MP_IN_COUNT, ch] < rg.ch_in.shape[2]


@kernel(inline=True)
def ch_in_push(rg, p, ch, t, arrival, core, d, entry, sent, addr):
    """At tick t the network side delivers a request to channel ch, there at tick
    ``arrival`` (>= t)."""
    k = ring_at(rg.mport[MP_IN_HEAD, ch], rg.mport[MP_IN_COUNT, ch], rg.ch_in.shape[2])
    rg.ch_in[P_TIME, ch, k] = arrival
    rg.ch_in[P_CORE, ch, k] = core
    rg.ch_in[P_DIR, ch, k] = d
    rg.ch_in[P_ENTRY, ch, k] = entry
    rg.ch_in[P_SENT, ch, k] = sent
    rg.ch_in[P_ADDR, ch, k] = addr
    rg.mport[MP_IN_COUNT, ch] += 1
    _ring_channel(rg, p, ch, align_up(arrival, p.mem_period), t)


@kernel(inline=True)
def ch_in_pop(rg, p, ch, t):
    """Channel ch takes the head of its input ring at tick t."""
    q = rg.ch_in.shape[2]
    rg.mport[MP_IN_HEAD, ch] = ring_next(rg.mport[MP_IN_HEAD, ch], q)
    rg.mport[MP_IN_COUNT, ch] -= 1
    if rg.mport[MP_IN_COUNT, ch] == q - 1:
        ring_bell(rg, SIDE_NET, align_up(t, p.noc_period))


# ------------------------------------------------------------------ channel ch: ch_out (out)


@kernel(inline=True)
def ch_out_room(rg, ch):
    return rg.mport[MP_OUT_COUNT, ch] < rg.ch_out.shape[2]


@kernel(inline=True)
def ch_out_push(rg, p, ch, ready, core, d, entry, sent):
    """Channel ch has a response for ``core`` ready to leave at tick ``ready``."""
    n = rg.mport[MP_OUT_COUNT, ch]
    k = ring_at(rg.mport[MP_OUT_HEAD, ch], n, rg.ch_out.shape[2])
    rg.ch_out[P_TIME, ch, k] = ready
    rg.ch_out[P_CORE, ch, k] = core
    rg.ch_out[P_DIR, ch, k] = d
    rg.ch_out[P_ENTRY, ch, k] = entry
    rg.ch_out[P_SENT, ch, k] = sent
    rg.mport[MP_OUT_COUNT, ch] = n + 1
    if n == 0:
        _mark_fresh(rg, FRESH_OUT, ch)
    ring_bell(rg, SIDE_NET, align_up(ready, p.noc_period))


@kernel(inline=True)
def ch_out_pop(rg, p, ch, t):
    """The network side takes the head of channel ch's output ring at tick t."""
    q = rg.ch_out.shape[2]
    rg.mport[MP_OUT_HEAD, ch] = ring_next(rg.mport[MP_OUT_HEAD, ch], q)
    rg.mport[MP_OUT_COUNT, ch] -= 1
    if rg.mport[MP_OUT_COUNT, ch] == q - 1:
        _ring_channel(rg, p, ch, align_up(t + 1, p.mem_period), t)
