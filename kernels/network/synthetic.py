"""Synthetic traffic: Bernoulli sources and ideal sinks at every node, as Booksim runs them.

Each node creates a packet with probability ``rate`` every cycle (its own xorshift
generator, so results do not depend on the order nodes are visited) into an unbounded
source queue, and injects the packet at the queue's head one flit per cycle when the
router's input VC has a credit. A packet's latency runs from its creation to its tail's
arrival, so it includes source queueing. Only the head of the queue exists as a packet:
the next creation cycle is drawn when a packet leaves the queue, which draws the same
Bernoulli trials, cycle by cycle, as drawing every cycle (Booksim's lazy ``_qtime``).

Sinks accept every flit the cycle it arrives. Counters (``sy.stat``) feed the
warm-up / measurement / convergence procedure in ``npusim.noc.traffic``; in its drain,
``run_synthetic`` stops at the end of the cycle the drain is done (``SY_STOP_DRAINED``).
"""

from collections import namedtuple

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from .. import isa
from ..jit import entry, kernel
from .nic import eject_flit, nic_next_arrival, nic_send, nic_start, packet_done
from .router import routers_step
from .state import *  # noqa: F403  (field indices)

# traffic parameters: rate (packets per node per cycle, float), pattern, packet size
TrafficParams = namedtuple("TrafficParams", ("rate", "pattern", "size", "msg_class"))
PAT_TABLE, PAT_UNIFORM, PAT_WEIGHTED = range(3)  # pattern: dest[node]; any node; weights

# sy: src[SR_*, node], rng[node] (uint64), dest[node] (PAT_TABLE) or cumulative weights
# (PAT_WEIGHTED), accepted[node] flits, stat[SY_*]
SynState = namedtuple("SynState", ("src", "rng", "dest", "accepted", "stat"))
SR_NEXT, SR_DEST = range(2)  # cycle the next packet is created, and its destination
N_SR_FIELDS = 2
(SY_LAT_SUM, SY_LAT_N, SY_LAT_MAX, SY_NLAT_SUM, SY_INFLIGHT,
 SY_INFLIGHT_CTIME, SY_RECORD_FROM, SY_RECORD_TO, SY_RECORD_LEFT, SY_COUNT_ALL,
 SY_COUNT_ACCEPTED, SY_INJECTED, SY_QUEUED, SY_STOP_DRAINED) = range(14)
N_SY_FIELDS = 14
# SY_COUNT_ALL: latency of every packet is counted (warm-up), else of recorded ones only;
# SY_COUNT_ACCEPTED: accepted and injected flits are counted; SY_QUEUED: nodes with a
# packet at their queue's head; SY_STOP_DRAINED: run_synthetic returns once drained


@kernel
def _random(sy, n):
    """Uniform float in [0, 1) from node n's xorshift64* generator."""
    x = sy.rng[n]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    sy.rng[n] = x
    return float((x * np.uint64(0x2545F4914F6CDD1D)) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@kernel
def _destination(sy, tp, n):
    if tp.pattern == PAT_TABLE:
        return sy.dest[n]
    if tp.pattern == PAT_UNIFORM:
        return min(int(_random(sy, n) * sy.dest.shape[0]), sy.dest.shape[0] - 1)
    x = _random(sy, n) * sy.dest[sy.dest.shape[0] - 1]  # weighted: cumulative weights
    for d in range(sy.dest.shape[0]):
        if x < sy.dest[d]:
            return d
    return sy.dest.shape[0] - 1


@entry
def draw_next_packet(sy, tp, n, after):
    """The first cycle after ``after`` at which node n creates a packet, and its destination."""
    c = after + 1
    if tp.rate <= 0.0:
        sy.src[SR_NEXT, n] = 1 << 62
        return
    while _random(sy, n) >= tp.rate:
        c += 1
    sy.src[SR_NEXT, n] = c
    sy.src[SR_DEST, n] = _destination(sy, tp, n)


@kernel(inline=True)
def _source(ns, nt, p, sy, tp, n, t):
    """Node n's source at cycle t: the packet at its queue's head (created by then) enters
    the NIC, whose next flit goes out if it can."""
    if ns.nic[n, NI_PKT] < 0:
        ctime = sy.src[SR_NEXT, n]
        if ctime > t:
            return
        pkt = nic_start(ns, p, n, sy.src[SR_DEST, n], tp.size, tp.msg_class, ctime)
        # measured: created while measuring (it may have waited in the queue since
        # before), or before the drain began (Booksim's record rule)
        record = sy.stat[SY_RECORD_FROM] <= t and ctime < sy.stat[SY_RECORD_TO]
        ns.pkt[PK_TAG, pkt] = record
        if record:
            sy.stat[SY_RECORD_LEFT] += 1
        sy.stat[SY_INFLIGHT] += tp.size
        sy.stat[SY_INFLIGHT_CTIME] += tp.size * ctime
        sy.stat[SY_QUEUED] += 1
        draw_next_packet(sy, tp, n, ctime)
    done = nic_send(ns, nt, p, n, t)
    if done > 0 and sy.stat[SY_COUNT_ACCEPTED]:
        sy.stat[SY_INJECTED] += 1
    if done == 2:
        sy.stat[SY_QUEUED] -= 1


@kernel(inline=True)
def _sink(ns, nt, p, sy, n, t):
    """Node n's sink takes every flit that has arrived by cycle t; a tail completes its
    packet's latency (creation to the tail's arrival)."""
    q = p.n_routers * p.ports + n
    bits = ns.occ[q]
    while bits != 0:
        v = trailing_zeros(bits)
        bits &= bits - 1
        while ns.ivc[q, v, IV_COUNT] > 0 and ns.ivc[q, v, IV_FRONT_ARR] <= t:
            pkt, flags, arr = eject_flit(ns, nt, p, n, v, t)
            ctime = ns.pkt[PK_CTIME, pkt]
            if sy.stat[SY_COUNT_ACCEPTED]:
                sy.accepted[n] += 1
            sy.stat[SY_INFLIGHT] -= 1
            sy.stat[SY_INFLIGHT_CTIME] -= ctime
            if flags & F_TAIL:
                record = ns.pkt[PK_TAG, pkt]
                if sy.stat[SY_COUNT_ALL] or record:
                    lat = arr - ctime
                    sy.stat[SY_LAT_SUM] += lat
                    sy.stat[SY_LAT_N] += 1
                    sy.stat[SY_LAT_MAX] = max(sy.stat[SY_LAT_MAX], lat)
                    sy.stat[SY_NLAT_SUM] += arr - ns.pkt[PK_ITIME, pkt]
                if record:
                    sy.stat[SY_RECORD_LEFT] -= 1
                packet_done(ns, pkt)
    ns.wake[p.n_routers + n] = nic_next_arrival(ns, p, n)


@kernel(inline=True)
def _drained(sy):
    """Every recorded packet has arrived and no source will create one any more (each
    source's next packet is created at or after SY_RECORD_TO, the drain's start)."""
    if sy.stat[SY_RECORD_LEFT] > 0:
        return False
    for n in range(sy.src.shape[1]):
        if sy.src[SR_NEXT, n] < sy.stat[SY_RECORD_TO]:
            return False
    return True


@entry
def run_synthetic(ns, nt, p, sy, tp, t_end):
    """Advance the network under synthetic traffic up to (not including) cycle t_end, or,
    with SY_STOP_DRAINED set, to the end of the first cycle after which it is ``_drained``.
    Cycles at which no router or node is due are skipped. Returns the cycle reached."""
    t = ns.glob[NG_NOW]
    N = p.n_nodes
    R = p.n_routers
    while t < t_end:
        ns.glob[NG_WAKE] = isa.NEVER  # wakes set from here on (flits, credits) count too
        nxt = routers_step(ns, nt, p, t)
        for n in range(N):
            if ns.wake[R + n] <= t or p.skip == 0:
                _sink(ns, nt, p, sy, n, t)
            if ns.nic[n, NI_PKT] >= 0 or sy.src[SR_NEXT, n] <= t:
                _source(ns, nt, p, sy, tp, n, t)
            nxt = min(nxt, ns.wake[R + n])
            nxt = min(nxt, t + 1 if ns.nic[n, NI_PKT] >= 0 else sy.src[SR_NEXT, n])
        nxt = min(nxt, ns.glob[NG_WAKE])
        if sy.stat[SY_STOP_DRAINED] and _drained(sy):
            t += 1
            break
        t = min(t_end, max(t + 1, nxt)) if p.skip == 1 else t + 1
    ns.glob[NG_NOW] = t
    return t
