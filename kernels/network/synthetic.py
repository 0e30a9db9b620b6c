"""Synthetic traffic: Bernoulli sources and ideal sinks at every node, as Booksim runs them.

Each node creates a packet with probability ``rate`` every cycle (its own xorshift
generator, so results do not depend on the order nodes are visited) into an unbounded
source queue, and injects the packet at the queue's head one flit per cycle when the
router's input VC has a credit. A packet's latency runs from its creation to its tail's
arrival, so it includes source queueing. Only the head of the queue exists as a packet:
the next creation cycle is drawn when a packet leaves the queue, which draws the same
Bernoulli trials, cycle by cycle, as drawing every cycle (Booksim's lazy ``_qtime``).

Sinks accept every flit the cycle it arrives. Counters (``sy.stat``) feed the
warm-up / measurement / convergence procedure in ``npusim.noc.traffic``.
"""

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from .. import isa
from ..jit import kernel
from .router import flit_sent, pop_flit, push_flit, receive_credits, routers_step, send_credit
from .state import *  # noqa: F403  (field indices)
from collections import namedtuple

# traffic parameters: rate (packets per node per cycle, float), pattern, packet size
TrafficParams = namedtuple("TrafficParams", ("rate", "pattern", "size", "msg_class"))
PAT_TABLE, PAT_UNIFORM, PAT_WEIGHTED = range(3)  # pattern: dest[node]; any node; weights

# sy: src[SR_*, node], rng[node] (uint64), dest[node] (PAT_TABLE) or cumulative weights
# (PAT_WEIGHTED), accepted[node] flits, stat[SY_*]
SynState = namedtuple("SynState", ("src", "rng", "dest", "accepted", "stat"))
SR_NEXT, SR_DEST = range(2)  # cycle the next packet is created, and its destination
N_SR_FIELDS = 2
(SY_NOW, SY_LAT_SUM, SY_LAT_N, SY_LAT_MAX, SY_NLAT_SUM, SY_INFLIGHT,
 SY_INFLIGHT_CTIME, SY_RECORD_FROM, SY_RECORD_TO, SY_RECORD_LEFT, SY_COUNT_ALL,
 SY_COUNT_ACCEPTED, SY_INJECTED, SY_QUEUED) = range(14)
N_SY_FIELDS = 14
# SY_COUNT_ALL: latency of every packet is counted (warm-up), else of recorded ones only;
# SY_COUNT_ACCEPTED: accepted and injected flits are counted; SY_QUEUED: nodes with a
# packet at their queue's head


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


@kernel
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
def _new_packet(ns, p, sy, tp, n, t):
    """The packet created at node n's queue head: a packet row, counted in flight."""
    k = ns.glob[NG_FREE] - 1
    pkt = ns.pkt_free[k]
    ns.glob[NG_FREE] = k
    ctime = sy.src[SR_NEXT, n]
    ns.pkt[PK_SRC, pkt] = n
    ns.pkt[PK_DEST, pkt] = sy.src[SR_DEST, n]
    ns.pkt[PK_SIZE, pkt] = tp.size
    ns.pkt[PK_CTIME, pkt] = ctime
    ns.pkt[PK_CLASS, pkt] = tp.msg_class
    # measured: created while measuring (it may have waited in the queue since before),
    # or before the drain began (Booksim's record rule)
    record = sy.stat[SY_RECORD_FROM] <= t and ctime < sy.stat[SY_RECORD_TO]
    ns.pkt[PK_RECORD, pkt] = record
    if record:
        sy.stat[SY_RECORD_LEFT] += 1
    sy.stat[SY_INFLIGHT] += tp.size
    sy.stat[SY_INFLIGHT_CTIME] += tp.size * ctime
    draw_next_packet(sy, tp, n, ctime)
    return pkt


@kernel(inline=True)
def nic_inject(ns, nt, p, sy, tp, n, t):
    """Node n sends at most one flit of the packet at its queue's head at cycle t."""
    q = p.n_routers * p.ports + n
    receive_credits(ns, p, q, t)
    if ns.nic[NI_PKT, n] < 0:
        if sy.src[SR_NEXT, n] > t:
            return
        ns.nic[NI_PKT, n] = _new_packet(ns, p, sy, tp, n, t)
        ns.nic[NI_SENT, n] = 0
        ns.nic[NI_VC, n] = -1
        sy.stat[SY_QUEUED] += 1
    pkt = ns.nic[NI_PKT, n]
    sent = ns.nic[NI_SENT, n]
    if ns.out_free[q] > t:
        return
    if sent == 0:  # the head takes a free VC with a credit, round robin after the last one
        m = ns.pkt[PK_CLASS, pkt]
        lo = nt.vc_lo[m, nt.vc_lo.shape[1] - 1]
        hi = nt.vc_hi[m, nt.vc_lo.shape[1] - 1]
        count = hi - lo + 1
        last = ns.nic[NI_LAST_VC, n]
        vc = -1
        for i in range(1, count + 1):
            c = lo if last < lo or last > hi else lo + (last - lo + i) % count
            if ns.ovc[q, c, OV_OWNER] < 0 and ns.ovc[q, c, OV_CREDITS] > 0:
                vc = c
                break
        if vc < 0:
            return
        ns.ovc[q, vc, OV_OWNER] = q * p.vcs + vc
        ns.ov_free[q] &= ~(1 << vc)
        ns.nic[NI_VC, n] = vc
        ns.nic[NI_LAST_VC, n] = vc
        ns.pkt[PK_ITIME, pkt] = t
    vc = ns.nic[NI_VC, n]
    if ns.ovc[q, vc, OV_CREDITS] <= 0:
        return
    size = ns.pkt[PK_SIZE, pkt]
    flags = (F_HEAD if sent == 0 else 0) | (F_TAIL if sent == size - 1 else 0)
    gap = nt.link[LK_GAP, q]
    push_flit(ns, nt, p, nt.link[LK_DST, q], vc, pkt, flags, t + nt.link[LK_LAT, q] + gap)
    flit_sent(ns, p, q, vc, flags)
    ns.out_free[q] = t + gap
    ns.link_flits[q] += 1
    if sy.stat[SY_COUNT_ACCEPTED]:
        sy.stat[SY_INJECTED] += 1
    ns.nic[NI_SENT, n] = sent + 1
    if flags & F_TAIL:
        ns.nic[NI_PKT, n] = -1
        sy.stat[SY_QUEUED] -= 1


@kernel(inline=True)
def nic_eject(ns, nt, p, sy, n, t):
    """Node n's sink takes every flit that has arrived by cycle t; sets the NIC's wake to
    the next arrival."""
    q = p.n_routers * p.ports + n
    bits = ns.occ[q]
    while bits != 0:
        v = trailing_zeros(bits)
        bits &= bits - 1
        while (ns.ivc[q, v, IV_COUNT] > 0
               and ns.ivc[q, v, IV_FRONT_ARR] <= t):
            arr = ns.ivc[q, v, IV_FRONT_ARR]
            pkt, flags = pop_flit(ns, nt, p, q, v, t)
            send_credit(ns, nt, p, q, v, arr)
            ctime = ns.pkt[PK_CTIME, pkt]
            if sy.stat[SY_COUNT_ACCEPTED]:
                sy.accepted[n] += 1
            sy.stat[SY_INFLIGHT] -= 1
            sy.stat[SY_INFLIGHT_CTIME] -= ctime
            if flags & F_TAIL:
                record = ns.pkt[PK_RECORD, pkt]
                if sy.stat[SY_COUNT_ALL] or record:
                    lat = arr - ctime
                    sy.stat[SY_LAT_SUM] += lat
                    sy.stat[SY_LAT_N] += 1
                    sy.stat[SY_LAT_MAX] = max(sy.stat[SY_LAT_MAX], lat)
                    sy.stat[SY_NLAT_SUM] += arr - ns.pkt[PK_ITIME, pkt]
                if record:
                    sy.stat[SY_RECORD_LEFT] -= 1
                ns.pkt_free[ns.glob[NG_FREE]] = pkt
                ns.glob[NG_FREE] += 1
    w = isa.NEVER
    bits = ns.occ[q]
    while bits != 0:
        v = trailing_zeros(bits)
        bits &= bits - 1
        w = min(w, ns.ivc[q, v, IV_FRONT_ARR])
    ns.wake[p.n_routers + n] = w


@kernel
def run_synthetic(ns, nt, p, sy, tp, t_end):
    """Advance the network under synthetic traffic up to (not including) cycle t_end.
    Cycles at which no router or node is due are skipped."""
    t = sy.stat[SY_NOW]
    N = p.n_nodes
    R = p.n_routers
    while t < t_end:
        nxt = routers_step(ns, nt, p, t)
        for n in range(N):
            if ns.wake[R + n] <= t or p.skip == 0:
                nic_eject(ns, nt, p, sy, n, t)
            if ns.nic[NI_PKT, n] >= 0 or sy.src[SR_NEXT, n] <= t:
                nic_inject(ns, nt, p, sy, tp, n, t)
            nxt = min(nxt, ns.wake[R + n])
            nxt = min(nxt, t + 1 if ns.nic[NI_PKT, n] >= 0 else sy.src[SR_NEXT, n])
        t = min(t_end, max(t + 1, nxt)) if p.skip == 1 else t + 1
    sy.stat[SY_NOW] = t
    return t
