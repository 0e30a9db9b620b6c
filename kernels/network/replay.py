"""Replay a list of packets through the router network (``npusim.noc.replay_packets``):
each source injects its packets in list order, none before its creation cycle; sinks take
every flit the cycle it arrives. Records when each packet's head left its source and when
its tail arrived: the way to check a network's timing packet by packet."""

from numba.cpython.unsafe.numbers import trailing_zeros

from .. import isa
from ..jit import entry, kernel
from .nic import eject_flit, nic_next_arrival, nic_send, nic_start, packet_done
from .router import routers_step
from .state import *  # noqa: F403  (field indices)

# pk[k, PL_*]: the packet list; out[k, PO_*]: what happened to each
PL_SRC, PL_DEST, PL_SIZE, PL_CTIME, PL_CLASS = range(5)
N_PL_FIELDS = 5
PO_ITIME, PO_ATIME = range(2)  # head left the source, tail arrived (-1: not yet)
N_PO_FIELDS = 2


@entry
def run_packets(ns, nt, p, pk, order, first, last, out, t_end):
    """Run until every packet has arrived or cycle t_end; returns the cycle reached.
    ``order[first[n]:last[n]]`` are node n's packets (rows of pk) in injection order;
    ``first`` advances as they start."""
    N = p.n_nodes
    R = p.n_routers
    left = 0
    for k in range(pk.shape[0]):
        left += out[k, PO_ATIME] < 0
    t = ns.glob[NG_NOW]
    while t < t_end and left > 0:
        ns.glob[NG_WAKE] = isa.NEVER  # wakes set from here on (flits, credits) count too
        nxt = routers_step(ns, nt, p, t)
        for n in range(N):
            if ns.wake[R + n] <= t or p.skip == 0:
                q = R * p.ports + n
                bits = ns.occ[q]
                while bits != 0:
                    v = trailing_zeros(bits)
                    bits &= bits - 1
                    while ns.ivc[q, v, IV_COUNT] > 0 and ns.ivc[q, v, IV_FRONT_ARR] <= t:
                        pkt, flags, arr = eject_flit(ns, nt, p, n, v, t)
                        if flags & F_TAIL:
                            k = ns.pkt[PK_TAG, pkt]
                            out[k, PO_ITIME] = ns.pkt[PK_ITIME, pkt]
                            out[k, PO_ATIME] = arr
                            left -= 1
                            packet_done(ns, pkt)
                ns.wake[R + n] = nic_next_arrival(ns, p, n)
            if ns.nic[n, NI_PKT] < 0 and first[n] < last[n]:
                k = order[first[n]]
                if pk[k, PL_CTIME] <= t:
                    first[n] += 1
                    pkt = nic_start(ns, p, n, pk[k, PL_DEST], pk[k, PL_SIZE], pk[k, PL_CLASS],
                                    pk[k, PL_CTIME])
                    ns.pkt[PK_TAG, pkt] = k
            if ns.nic[n, NI_PKT] >= 0:
                nic_send(ns, nt, p, n, t)
            nxt = min(nxt, ns.wake[R + n])
            if ns.nic[n, NI_PKT] >= 0:
                nxt = min(nxt, t + 1)
            elif first[n] < last[n]:
                nxt = min(nxt, pk[order[first[n]], PL_CTIME])
        nxt = min(nxt, ns.glob[NG_WAKE])
        t = min(t_end, max(t + 1, nxt)) if p.skip == 1 else t + 1
    ns.glob[NG_NOW] = t
    return t
