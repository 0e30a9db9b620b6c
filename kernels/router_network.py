"""The router network as the engine's NoC model (``noc.type`` mesh, torus, ring, fly or
custom): the cycle-level routers of ``kernels/network/`` between the cores' rings and the
memory channels' rings.

Every core and every memory channel is an endpoint of the network with a network interface
(``network/nic.py``): a core has ``k = noc.core_ports`` of them, nodes ``c * k .. c * k +
k - 1``, and channel ch is node ``n_cores * k + ch``. A request is a packet of message
class 0 from one of its core's nodes to its channel's node, a response one of class 1 back
to the core's node ``channel % k`` (as ONNXim numbers its ports); the two classes have their own virtual channels, so a
response never waits behind a request and the protocol cannot deadlock. A read request
and a write acknowledgement are one flit, data ``ceil(request_bytes / flit_bytes)`` flits
(``ports.packet_flits``).

- Injection: a node whose interface is free takes the head of its ring (its core's
  injection ring, the core's nodes in turn; a channel's output ring once the response is
  ready) and sends it one flit per cycle as credits allow; the ring slot is freed when the
  packet enters the interface.
- Ejection: a node takes every flit that has arrived; the tail completes the packet, which
  goes into the core's arrival ring or the channel's input ring, there at once. A channel
  whose input ring is full takes no flits at all until the memory pops it (its ``ch_in_pop``
  rings the network's bell): the flits wait in the ejection buffer, their credits stay
  away, and back-pressure reaches the routers and then the cores.

The network counts in NoC cycles (``t // noc_period``); its wake is the earliest cycle any
router or interface can act, as a tick. Besides the network's own tables the unit keeps,
per packet row, what the rings need back at the other end (``net_msg[M_*, packet]``).
"""

from numba.cpython.unsafe.numbers import trailing_zeros

from . import isa
from .jit import entry, kernel
from .network.nic import eject_flit, nic_next_arrival, nic_send, nic_start, packet_done
from .network.packed import network_views
from .network.router import routers_step
from .network.state import F_TAIL, IV_COUNT, IV_FRONT_ARR, NG_WAKE, NI_PKT
from .network.trace import trace_sync
from .ports import (arr_push, ch_in_push, ch_in_room, ch_out_pop, heard, inj_pop,
                    packet_flits, take_fresh)
from .state import *  # noqa: F403  (field indices of the state tables)
from .trace import trace_flits

MSG_REQUEST, MSG_RESPONSE = 0, 1


@kernel(inline=True)
def _core_of(n, k):
    """The core whose interface node n is (k interfaces per core): n // k, without the
    division (the slowest instruction on this path) in the usual case of one."""
    return n if k == 1 else n // k


@kernel(inline=True)
def _interfaces_per_core(np_, p):
    """k = noc.core_ports, from the node count: without the division (once per NoC step,
    0.7% of a ResNet-50 mesh run's samples) in the usual case of one."""
    C = np_.n_nodes - p.n_channels
    return 1 if C == p.n_cores else C // p.n_cores


@kernel(inline=True)
def _take_request(st, rg, p, n, c, k, tc, t):
    """Node n, an interface of core c (of k), takes the head of the core's injection ring."""
    h = rg.cport[CP_INJ_HEAD, c]
    ch = rg.inj[N_CHAN, c, h]
    d = rg.inj[N_DIR, c, h]
    flits = packet_flits(p, d == 1)
    pkt = nic_start(st.net, st.net_p, n, p.n_cores * k + ch, flits, MSG_REQUEST, tc)
    st.net_msg[M_CORE, pkt] = c
    st.net_msg[M_CHAN, pkt] = ch
    st.net_msg[M_DIR, pkt] = d
    st.net_msg[M_ENTRY, pkt] = rg.inj[N_ENTRY, c, h]
    st.net_msg[M_SENT, pkt] = rg.inj[N_TIME, c, h]
    st.net_msg[M_ADDR, pkt] = rg.inj[N_ADDR, c, h]
    trace_flits(st, p, NOC_REQUEST, c, ch, flits, t)
    inj_pop(rg, p, c, t)


@kernel(inline=True)
def _take_response(st, rg, p, ch, k, tc, t):
    """Channel ch's interface takes the head of its output ring (for core c's interface
    ch % k)."""
    h = rg.mport[MP_OUT_HEAD, ch]
    c = rg.ch_out[P_CORE, ch, h]
    d = rg.ch_out[P_DIR, ch, h]
    flits = packet_flits(p, d == 0)
    port = 0 if k == 1 else ch % k
    pkt = nic_start(st.net, st.net_p, p.n_cores * k + ch, c * k + port, flits, MSG_RESPONSE, tc)
    st.net_msg[M_CORE, pkt] = c
    st.net_msg[M_CHAN, pkt] = ch
    st.net_msg[M_DIR, pkt] = d
    st.net_msg[M_ENTRY, pkt] = rg.ch_out[P_ENTRY, ch, h]
    st.net_msg[M_SENT, pkt] = rg.ch_out[P_SENT, ch, h]
    trace_flits(st, p, NOC_RESPONSE, c, ch, flits, t)
    ch_out_pop(rg, p, ch, t)


@kernel(inline=True)
def _eject(st, rg, p, n, k, tc, t):
    """Node n takes the flits that have arrived by cycle tc; tails become ring packets.
    Returns 1 if it is a channel that stopped taking flits because its input ring is full
    (its wake then stays where it is: every step looks again whether the ring has room)."""
    ns = st.net
    np_ = st.net_p
    q = np_.n_routers * np_.ports + n
    bits = ns.occ[q]
    while bits != 0:
        v = trailing_zeros(bits)
        bits &= bits - 1
        while ns.ivc[q, v, IV_COUNT] > 0 and ns.ivc[q, v, IV_FRONT_ARR] <= tc:
            ch = n - p.n_cores * k
            if ch >= 0 and not ch_in_room(rg, ch):
                return 1
            pkt, flags, arr = eject_flit(ns, st.net_tab, np_, n, v, tc)
            if flags & F_TAIL:
                if ch < 0:
                    arr_push(rg, p, _core_of(n, k), t, st.net_msg[M_DIR, pkt], st.net_msg[M_ENTRY, pkt],
                             st.net_msg[M_SENT, pkt])
                else:
                    ch_in_push(rg, p, ch, t, t, st.net_msg[M_CORE, pkt],
                               st.net_msg[M_DIR, pkt], st.net_msg[M_ENTRY, pkt],
                               st.net_msg[M_SENT, pkt], st.net_msg[M_ADDR, pkt])
                packet_done(ns, pkt)
    return 0


@kernel(inline=True)
def _response_due(rg, p, ch, tc):
    """The first NoC cycle after tc at which the head of channel ch's (non-empty) output
    ring is ready to be taken."""
    ready = rg.ch_out[P_TIME, ch, rg.mport[MP_OUT_HEAD, ch]]
    return tc + 1 if ready <= (tc + 1) * p.noc_period else -(-ready // p.noc_period)


@kernel(inline=True)
def router_network_step(st, rg, p, t):
    """One NoC-clock edge at tick t, a call of its own over the network's buffer."""
    _packed_step(st.ctl, st.net_mem, st.net_layout, st.net_p, st.net_msg, st.nic_due,
                 st.tr_noc, rg, p, t)


@kernel(out_of_line=True)
def _packed_step(ctl, mem, layout, np_, msg, nic_due, tr_noc, rg, p, t):
    """The step out of line, passed the network as its buffer (``network/packed.py``: two
    arrays, not the ~40 of its tables), so that LLVM compiles it apart from the main loop's
    DRAM and cores: ResNet-50 on a mesh 3-5% faster than inlined in 26 alternating rounds.
    The loop outside the network got faster, the network itself did not (perf,
    results/benchmarks/noc_engine.md): code generation, which an edit of the loop may move."""
    ns, nt = network_views(mem, layout)
    _network_step(RouterNetwork(ctl, ns, nt, mem, layout, np_, msg, nic_due, tr_noc), rg, p, t)


@kernel(inline=True)
def _note_fresh(st, rg, k, C, tc):
    """The rings that turned non-empty since the last step (the rings' ``fresh`` bits): the
    injection side of their nodes is due now (a core's k interfaces, a channel's one)."""
    for w in range(rg.fresh.shape[1]):
        bits = take_fresh(rg, FRESH_INJ, w)
        while bits != 0:
            c = (w << 6) + trailing_zeros(bits)
            bits &= bits - 1
            for j in range(k):
                st.nic_due[c * k + j] = tc
        bits = take_fresh(rg, FRESH_OUT, w)
        while bits != 0:
            st.nic_due[C + (w << 6) + trailing_zeros(bits)] = tc
            bits &= bits - 1


@kernel(inline=True)
def _inject(st, rg, p, n, k, C, tc, t):
    """Node n's injection side at cycle tc: an idle interface takes the head of its ring if
    it can, then sends a flit if it can. Returns the next cycle it may act (``nic_due``)."""
    ns = st.net
    if ns.nic[n, NI_PKT] < 0:  # idle: take the head of its ring, if there is one
        if n < C:
            if rg.cport[CP_INJ_COUNT, _core_of(n, k)] == 0:
                return isa.NEVER
            _take_request(st, rg, p, n, _core_of(n, k), k, tc, t)
        else:
            ch = n - C
            if rg.mport[MP_OUT_COUNT, ch] == 0:
                return isa.NEVER
            if rg.ch_out[P_TIME, ch, rg.mport[MP_OUT_HEAD, ch]] > t:  # not ready yet
                return _response_due(rg, p, ch, tc)
            _take_response(st, rg, p, ch, k, tc, t)
    nic_send(ns, st.net_tab, st.net_p, n, tc)
    if ns.nic[n, NI_PKT] >= 0:
        return tc + 1
    if n < C:
        return tc + 1 if rg.cport[CP_INJ_COUNT, _core_of(n, k)] > 0 else isa.NEVER
    return _response_due(rg, p, n - C, tc) if rg.mport[MP_OUT_COUNT, n - C] > 0 else isa.NEVER


@kernel(inline=True)
def _network_step(st, rg, p, t):
    """Routers, then the ejection and injection of every node that is due (all of them
    without skipping): a node's injection side is visited only from the cycle it gave
    (``nic_due``) or once its ring turns non-empty."""
    ns = st.net
    np_ = st.net_p
    R = np_.n_routers
    k = _interfaces_per_core(np_, p)
    C = p.n_cores * k  # the cores' nodes
    tc = t // p.noc_period
    _note_fresh(st, rg, k, C, tc)
    ns.glob[NG_WAKE] = isa.NEVER  # wakes set from here on (flits, credits) count too
    nxt = routers_step(ns, st.net_tab, np_, tc)
    for n in range(np_.n_nodes):
        if ns.wake[R + n] <= tc or np_.skip == 0:
            if _eject(st, rg, p, n, k, tc, t) == 0:
                ns.wake[R + n] = nic_next_arrival(ns, np_, n)
                nxt = min(nxt, ns.wake[R + n])
            # (a blocked channel waits for its ring's pop to ring the bell)
        else:
            nxt = min(nxt, ns.wake[R + n])
        if st.nic_due[n] <= tc or np_.skip == 0:
            st.nic_due[n] = _inject(st, rg, p, n, k, C, tc, t)
        nxt = min(nxt, st.nic_due[n])
    nxt = min(nxt, ns.glob[NG_WAKE])
    st.ctl[NC_WAKE] = isa.NEVER if nxt >= isa.NEVER else max(nxt, tc + 1) * p.noc_period
    heard(rg, SIDE_NET)


@entry
def router_network_trace_sync(st, p, t):
    """Bring every router's buffer occupancy up to tick t (before a trace drain)."""
    trace_sync(st.net, st.net_p, t // p.noc_period)
