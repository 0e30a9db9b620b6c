"""Network interfaces: where packets enter and leave the router network.

Node n's NIC has row ``n_routers * ports + n``: its output row injects into a router
input port (one flit per cycle, when that VC has a credit), its input row is the ejection
buffer of a router output port. A NIC injects one packet at a time: its head takes a free
VC of the packet's message class, round robin after the last one it took (Booksim's
source), and keeps it until the tail is sent. Whoever drives the NIC (synthetic traffic,
the engine's rings, a packet list) decides when a packet starts and when an arrived flit
is taken out of the ejection buffer.
"""

from numba.cpython.unsafe.numbers import trailing_zeros

from .. import isa
from ..jit import kernel
from .router import flit_sent, pop_flit, push_flit, receive_credits, send_credit
from .state import *  # noqa: F403  (field indices)
from .trace import trace_link


@kernel(inline=True)
def nic_start(ns, p, n, dest, size, msg_class, ctime):
    """Node n starts injecting a packet of ``size`` flits to node ``dest``, created at
    ``ctime``; returns its packet row (its other fields are the caller's)."""
    k = ns.glob[NG_FREE] - 1
    pkt = ns.pkt_free[k]
    ns.glob[NG_FREE] = k
    ns.pkt[PK_SRC, pkt] = n
    ns.pkt[PK_DEST, pkt] = dest
    ns.pkt[PK_SIZE, pkt] = size
    ns.pkt[PK_CTIME, pkt] = ctime
    ns.pkt[PK_CLASS, pkt] = msg_class
    ns.nic[n, NI_PKT] = pkt
    ns.nic[n, NI_SENT] = 0
    ns.nic[n, NI_VC] = -1
    return pkt


@kernel(inline=True)
def packet_done(ns, pkt):
    """The packet's row is free again."""
    ns.pkt_free[ns.glob[NG_FREE]] = pkt
    ns.glob[NG_FREE] += 1


@kernel(inline=True)
def nic_send(ns, nt, p, n, t):
    """Node n sends the next flit of its packet at cycle t if it can: 0 nothing sent,
    1 a flit sent, 2 the tail sent (the NIC is free again)."""
    q = p.n_routers * p.ports + n
    receive_credits(ns, p, q, t)
    pkt = ns.nic[n, NI_PKT]
    sent = ns.nic[n, NI_SENT]
    if ns.out_free[q] > t:
        return 0
    if sent == 0:  # the head takes a free VC with a credit, round robin after the last one
        m = ns.pkt[PK_CLASS, pkt]
        lo = nt.vc_lo[m, nt.vc_lo.shape[1] - 1]
        hi = nt.vc_hi[m, nt.vc_lo.shape[1] - 1]
        last = ns.nic[n, NI_LAST_VC]
        vc = -1
        if lo <= last <= hi:
            c = last
            for _ in range(hi - lo + 1):
                c = c + 1 if c < hi else lo
                if ns.ovc[q, c, OV_OWNER] < 0 and ns.ovc[q, c, OV_CREDITS] > 0:
                    vc = c
                    break
        elif ns.ovc[q, lo, OV_OWNER] < 0 and ns.ovc[q, lo, OV_CREDITS] > 0:
            vc = lo  # (none taken yet, or one of another message class)
        if vc < 0:
            return 0
        ns.ovc[q, vc, OV_OWNER] = q * p.vcs + vc
        ns.ov_free[q] &= ~(1 << vc)
        ns.nic[n, NI_VC] = vc
        ns.nic[n, NI_LAST_VC] = vc
        ns.pkt[PK_ITIME, pkt] = t
    vc = ns.nic[n, NI_VC]
    if ns.ovc[q, vc, OV_CREDITS] <= 0:
        return 0
    size = ns.pkt[PK_SIZE, pkt]
    flags = (F_HEAD if sent == 0 else 0) | (F_TAIL if sent == size - 1 else 0)
    gap = nt.link[LK_GAP, q]
    push_flit(ns, nt, p, nt.link[LK_DST, q], vc, pkt, flags, t + nt.link[LK_LAT, q] + gap, t)
    flit_sent(ns, p, q, vc, flags)
    ns.out_free[q] = t + gap
    ns.link_flits[q] += 1
    trace_link(ns, p, q, t)
    ns.nic[n, NI_SENT] = sent + 1
    if flags & F_TAIL:
        ns.nic[n, NI_PKT] = -1
        return 2
    return 1


@kernel(inline=True)
def eject_flit(ns, nt, p, n, v, t):
    """Take the front flit of node n's ejection VC v out at cycle t (its credit goes back
    to the router); returns (packet, flags, arrival cycle)."""
    q = p.n_routers * p.ports + n
    arr = ns.ivc[q, v, IV_FRONT_ARR]
    pkt, flags = pop_flit(ns, nt, p, q, v, t)
    send_credit(ns, nt, p, q, v, t)
    return pkt, flags, arr


@kernel(inline=True)
def nic_next_arrival(ns, p, n):
    """The earliest front-flit arrival in node n's ejection buffer (isa.NEVER if empty)."""
    q = p.n_routers * p.ports + n
    w = isa.NEVER
    bits = ns.occ[q]
    while bits != 0:
        v = trailing_zeros(bits)
        bits &= bits - 1
        w = min(w, ns.ivc[q, v, IV_FRONT_ARR])
    return w
