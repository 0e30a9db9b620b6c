"""Input-queued virtual-channel routers, all stepped by one kernel.

A head flit's pipeline, in NoC cycles (Booksim's IQ router without speculation):

- it arrives in an input VC at cycle a (written there when it won the switch upstream);
- routing takes ``routing_delay`` cycles (0: lookahead, the route is known on arrival);
- VC allocation at cycle a + routing_delay; an output VC won there lets the VC bid for
  the switch ``va_delay`` cycles later;
- switch allocation at some cycle s, when the output VC has a credit and the output link
  is free; the flit then spends ``sa_delay - 1`` more cycles in allocation, ``st_delay`` in
  the switch and the link's latency on the wire, and arrives downstream at
  s + sa_delay + st_delay + latency (+ the link's serialization for a narrow link). With
  Booksim's meshconfig (0/1/1/1, links of 1) a hop costs 4 cycles.

Body flits follow their head at most one per cycle through the same output VC (wormhole);
the tail frees its input VC. A flit that leaves an input buffer sends a credit upstream,
usable ``latency + 1 + credit_delay`` cycles later. A downstream VC is handed to a new
packet once it is free: when its tail is sent, or with ``wait_tail`` once the tail's
credit is back (the VC empty).

Every interaction between two routers is at least one cycle in the future, so the order
in which routers are stepped within a cycle does not matter. Credits arriving at an idle
router are applied when it next steps (before anything reads them), so only routers that
hold or expect flits are stepped.
"""

from numba.cpython.unsafe.numbers import trailing_zeros

from .. import isa
from ..jit import kernel
from ..ring import ring_at, ring_next
from .alloc import age_priority, rr_distance, switch_allocate, vc_allocate_port
from .names import ALLOC_WAVEFRONT
from .state import *  # noqa: F403  (field indices)
from .trace import trace_buffer_change, trace_link


@kernel(inline=True)
def route_head(ns, nt, q, v, w, pkt):
    """The head of packet ``pkt`` came to the front of input row q, VC v of router w: note
    in the VC's record its output port and the output VCs it may take there, so that its
    VC requests read that one record instead of a chain of loads (flit, packet,
    destination, route, VC set). The route is static: noting it early changes no cycle.
    A torus hop's VC class is the packet's own in that dimension (``route_class`` -1 - i)."""
    dest = ns.pkt[PK_DEST, pkt]
    c = nt.route_class[w, dest]
    if c < 0:
        c = (nt.dateline[ns.pkt[PK_SRC, pkt], dest] >> (-1 - c)) & 1
    ns.ivc[q, v, IV_ROUTE] = nt.route[w, dest] | (
        nt.vc_mask[ns.pkt[PK_CLASS, pkt], c] << ROUTE_MASK_SHIFT)


@kernel(inline=True)
def vc_priority(ns, q, v):
    """Input row q, VC v's priority under ``priority = age``: its front packet's age, the
    earlier created the higher (Booksim's INT_MAX - creation time)."""
    return -ns.pkt[PK_CTIME, ns.ivc[q, v, IV_FRONT] >> F_BITS]


@kernel(inline=True)
def _supersedes(ns, p, q, v, cur, rr):
    """Whether VC v of input row q bids for an output instead of VC cur (Booksim's
    ``Supersedes``): the higher priority, then the nearer in round robin from rr."""
    if age_priority(p):
        a = vc_priority(ns, q, v)
        b = vc_priority(ns, q, cur)
        if a != b:
            return a > b
    return rr_distance(v, rr, p.vcs) < rr_distance(cur, rr, p.vcs)


@kernel(inline=True)
def push_flit(ns, nt, p, q, v, pkt, flags, arr, t):
    """Write a flit into input row q, VC v, at cycle t, arriving at cycle arr (its slot
    is taken now)."""
    n = ns.ivc[q, v, IV_COUNT]
    w = nt.row_owner[q]
    if n == 0:  # it is the VC's front flit
        ns.ivc[q, v, IV_FRONT] = (pkt << F_BITS) | flags
        ns.ivc[q, v, IV_FRONT_ARR] = arr
        if flags & F_HEAD:
            ns.ivc[q, v, IV_STATE] = VC_ALLOC
            ns.ivc[q, v, IV_READY] = arr + p.routing_delay
            if w < p.n_routers:
                route_head(ns, nt, q, v, w, pkt)
        ns.occ[q] |= 1 << v
    else:  # behind the front: into the ring
        k = ring_at(ns.ivc[q, v, IV_HEAD], n - 1, p.depth)
        ns.fb[q, v, k, FB_FLIT] = (pkt << F_BITS) | flags
        ns.fb[q, v, k, FB_ARR] = arr
    ns.ivc[q, v, IV_COUNT] = n + 1
    trace_buffer_change(ns, p, w, t)
    ns.busy[w] += 1
    ns.wake[w] = min(ns.wake[w], arr)
    ns.glob[NG_WAKE] = min(ns.glob[NG_WAKE], arr)
    ns.glob[NG_FLITS] += 1


@kernel(inline=True)
def pop_flit(ns, nt, p, q, v, t):
    """Remove the front flit of input row q, VC v, which leaves at cycle t; set up the
    next flit's stage. Returns the flit's (packet, flags)."""
    flit = ns.ivc[q, v, IV_FRONT]
    pkt = flit >> F_BITS
    flags = flit & F_MASK
    n = ns.ivc[q, v, IV_COUNT] - 1
    ns.ivc[q, v, IV_COUNT] = n
    w = nt.row_owner[q]
    trace_buffer_change(ns, p, w, t)
    ns.busy[w] -= 1
    ns.glob[NG_FLITS] -= 1
    if n == 0:
        ns.occ[q] &= ~(1 << v)
        if flags & F_TAIL:
            ns.ivc[q, v, IV_STATE] = VC_IDLE
        return pkt, flags
    h = ns.ivc[q, v, IV_HEAD]  # the flit behind comes to the front
    nxt = ns.fb[q, v, h, FB_FLIT]
    arr = ns.fb[q, v, h, FB_ARR]
    ns.ivc[q, v, IV_HEAD] = ring_next(h, p.depth)
    ns.ivc[q, v, IV_FRONT] = nxt
    ns.ivc[q, v, IV_FRONT_ARR] = arr
    if flags & F_TAIL:  # the next packet's head comes to the front
        ns.ivc[q, v, IV_STATE] = VC_ALLOC
        ns.ivc[q, v, IV_READY] = max(arr, t + 1) + p.routing_delay
        if w < p.n_routers:
            route_head(ns, nt, q, v, w, nxt >> F_BITS)
    return pkt, flags


@kernel(inline=True)
def send_credit(ns, nt, p, q, v, t):
    """A flit left input row q, VC v, at cycle t: its credit goes back to the sender."""
    u = nt.in_src[q]
    K = ns.cr.shape[1]
    n = ns.cr_ctl[CR_COUNT, u]
    k = ring_at(ns.cr_ctl[CR_HEAD, u], n, K)
    due = t + nt.link[LK_LAT, u] + 1 + nt.link[LK_CREDIT_DELAY, u]
    ns.cr[u, k] = (due << CR_VC_BITS) | v
    ns.cr_ctl[CR_COUNT, u] = n + 1
    if n == 0:  # (credits to a row are due in the order they are sent)
        ns.cr_ctl[CR_NEXT, u] = due
    if ns.cr_wait[u] == 1:  # a flit waits for this credit: wake its router when it is due
        ns.cr_wait[u] = 0
        w = nt.row_owner[u]
        ns.wake[w] = min(ns.wake[w], due)
        ns.glob[NG_WAKE] = min(ns.glob[NG_WAKE], due)


@kernel(inline=True)
def receive_credits(ns, p, q, t):
    """Apply the credits due by cycle t to output row q."""
    if ns.cr_ctl[CR_NEXT, q] > t:  # none due (or none at all): the ring is not read
        return
    n = ns.cr_ctl[CR_COUNT, q]
    K = ns.cr.shape[1]
    h = ns.cr_ctl[CR_HEAD, q]
    while n > 0 and ns.cr[q, h] >> CR_VC_BITS <= t:
        v = ns.cr[q, h] & CR_VC_MASK
        c = ns.ovc[q, v, OV_CREDITS] + 1
        ns.ovc[q, v, OV_CREDITS] = c
        if c == p.depth and ns.ovc[q, v, OV_OWNER] >= OV_TAIL_SENT:
            ns.ovc[q, v, OV_OWNER] = -1  # wait_tail: the VC is empty, hand it out again
            ns.ov_free[q] |= 1 << v
        h = ring_next(h, K)
        n -= 1
    ns.cr_ctl[CR_HEAD, q] = h
    ns.cr_ctl[CR_COUNT, q] = n
    ns.cr_ctl[CR_NEXT, q] = ns.cr[q, h] >> CR_VC_BITS if n > 0 else isa.NEVER


@kernel(inline=True)
def flit_sent(ns, p, q, v, flags):
    """Output row q sent a flit on downstream VC v: one credit less; a tail frees the VC
    at once, or with ``wait_tail`` when its last credit is back."""
    ns.ovc[q, v, OV_CREDITS] -= 1
    if flags & F_TAIL:
        if p.wait_tail:
            ns.ovc[q, v, OV_OWNER] += OV_TAIL_SENT
        else:
            ns.ovc[q, v, OV_OWNER] = -1
            ns.ov_free[q] |= 1 << v


@kernel(inline=True)
def _credit_wait(ns, qo):
    """Earliest cycle a credit for output row qo can be back; or mark the row so that the
    next credit sent there wakes its router (``cr_wait``)."""
    nxt = ns.cr_ctl[CR_NEXT, qo]
    if nxt == isa.NEVER:
        ns.cr_wait[qo] = 1
    return nxt


@kernel(inline=True)
def _vc_request(ns, p, r, i, v, q, nreq):
    """Record the head at input row q, VC v asking for a VC of its route's output (noted
    in its record by ``route_head``), as request ``nreq``. Returns whether the request
    counts: a head none of whose output VCs is free cannot win one, and leaves every allocator's state as it is (but the
    wavefront's, whose priority moves on with every cycle that has a request)."""
    vr = ns.va_req
    route = ns.ivc[q, v, IV_ROUTE]
    o = route & ROUTE_OUT_MASK
    mask = route >> ROUTE_MASK_SHIFT
    if mask & ns.ov_free[r * p.ports + o] == 0 and p.va_alloc != ALLOC_WAVEFRONT:
        return False  # (nothing recorded: the slot is the next request's)
    vr[VR_IV, nreq] = i * p.vcs + v
    vr[VR_IN, nreq] = i
    vr[VR_VC, nreq] = v
    vr[VR_OUT, nreq] = o
    vr[VR_MASK, nreq] = mask
    if age_priority(p):
        vr[VR_PRI, nreq] = vc_priority(ns, q, v)
    ns.al[AL_IN, nreq] = -1
    return True


@kernel(inline=True)
def _group_by_port(vr, nreq, p):
    """Sort the requests by output port, keeping input VC order within a port (their
    priorities, the last field, move too only where there are priorities)."""
    fields = N_VR_FIELDS if age_priority(p) else VR_PRI
    for k in range(1, nreq):
        j = k
        while j > 0 and vr[VR_OUT, j - 1] > vr[VR_OUT, j]:
            for f in range(fields):
                x = vr[f, j]
                vr[f, j] = vr[f, j - 1]
                vr[f, j - 1] = x
            j -= 1


@kernel(inline=True)
def _vc_single(ns, p, r, k):
    """Request k, the only one for its output port: every free output VC it may take
    grants it, and it accepts the first from its accept pointer (what iSLIP and the
    separable allocators all do with one requester)."""
    V = p.vcs
    P = p.ports
    base = r * P
    vr = ns.va_req
    o = vr[VR_OUT, k]
    iv = vr[VR_IV, k]
    q = base + vr[VR_IN, k]
    v = vr[VR_VC, k]
    a = ns.va_aptr[q, v]
    a = a - o * V if o * V <= a < o * V + V else 0
    bits = vr[VR_MASK, k] & ns.ov_free[base + o]
    if bits != 0:
        high = (bits >> a) << a
        ov = trailing_zeros(high) if high != 0 else trailing_zeros(bits)
        ns.al[AL_IN, k] = ov
        S = P * V
        ns.va_gptr[base + o, ov] = iv + 1 if iv + 1 < S else 0
        ns.va_aptr[q, v] = o * V + ov + 1 if o * V + ov + 1 < S else 0


@kernel(inline=True)
def _vc_allocation(ns, p, r, t, nreq):
    """Match the recorded heads to free output VCs, port by port (output VCs of different
    ports are different resources); winners take theirs."""
    V = p.vcs
    P = p.ports
    base = r * P
    vr = ns.va_req
    _group_by_port(vr, nreq, p)
    k0 = 0
    while k0 < nreq:
        o = vr[VR_OUT, k0]
        k1 = k0 + 1
        while k1 < nreq and vr[VR_OUT, k1] == o:
            k1 += 1
        if k1 == k0 + 1 and p.va_alloc != ALLOC_WAVEFRONT:
            _vc_single(ns, p, r, k0)
        else:
            vc_allocate_port(ns.ov_free[base + o], ns.va_gptr, ns.va_aptr, vr, ns.al, ns.wf,
                             p, r, o, k0, k1)
        k0 = k1
    if p.va_alloc == ALLOC_WAVEFRONT:
        ns.wf[0, r] = (ns.wf[0, r] + 1) % (P * V)
    for k in range(nreq):
        ov = ns.al[AL_IN, k]
        if ov < 0:
            continue
        q = base + vr[VR_IN, k]
        v = vr[VR_VC, k]
        qo = base + vr[VR_OUT, k]
        ns.ovc[qo, ov, OV_OWNER] = q * V + v
        ns.ov_free[qo] &= ~(1 << ov)
        ns.ivc[q, v, IV_STATE] = VC_ACTIVE
        ns.ivc[q, v, IV_OVC] = ov
        ns.ivc[q, v, IV_READY] = t + p.va_delay


@kernel(inline=True)
def _switch_allocation(ns, nt, p, r, t, nset):
    """Match the input ports' bids (``sa_label``) to output ports; winners send a flit."""
    P = p.ports
    V = p.vcs
    base = r * P
    lab = ns.sa_label
    if nset == 1:  # one request: every allocator grants it (and moves its pointers so)
        i = ns.al[AL_REQ_IN, 0]
        o = ns.al[AL_REQ_OUT, 0]
        ns.al[AL_IN, i] = o
        if p.sa_alloc == ALLOC_WAVEFRONT:
            ns.wf[1, r] = ns.wf[1, r] + 1 if ns.wf[1, r] + 1 < P else 0
        else:
            ns.sa_gptr[base + o] = i + 1 if i + 1 < P else 0
            ns.sa_aptr[base + i] = o + 1 if o + 1 < P else 0
    else:
        if age_priority(p):  # each request's priority: that of the VC making it
            for k in range(nset):
                i = ns.al[AL_REQ_IN, k]
                ns.al[AL_REQ_PRI, k] = vc_priority(ns, base + i,
                                                   lab[i * P + ns.al[AL_REQ_OUT, k]])
        switch_allocate(lab, ns.al, nset, ns.sa_gptr, ns.sa_aptr, ns.wf, p, r)
    for k in range(nset):  # the winners, by ascending input (the order of the requests)
        i = ns.al[AL_REQ_IN, k]
        o = ns.al[AL_REQ_OUT, k]
        if ns.al[AL_IN, i] != o:
            continue
        q = base + i
        v = lab[i * P + o]
        qo = base + o
        ov = ns.ivc[q, v, IV_OVC]
        leave = t + p.sa_delay - 1
        pkt, flags = pop_flit(ns, nt, p, q, v, t)
        ns.ivc[q, v, IV_READY] = max(ns.ivc[q, v, IV_READY], t + p.sa_delay)
        send_credit(ns, nt, p, q, v, leave)
        gap = nt.link[LK_GAP, qo]
        push_flit(ns, nt, p, nt.link[LK_DST, qo], ov, pkt, flags,
                  leave + 1 + p.st_delay + nt.link[LK_LAT, qo] + gap - 1, t)
        flit_sent(ns, p, qo, ov, flags)
        ns.out_free[qo] = t + gap
        ns.sw_rr[q] = v + 1 if v + 1 < V else 0
        ns.link_flits[qo] += 1
        ns.router_flits[r] += 1
        trace_link(ns, p, qo, t)
    for k in range(nset):
        lab[ns.al[AL_REQ_IN, k] * P + ns.al[AL_REQ_OUT, k]] = -1


@kernel(inline=True)
def router_step(ns, nt, p, r, t):
    """One cycle of router r: credits due, then one pass over its occupied input VCs
    collects the heads asking for an output VC and, per input and output port, the VC
    that bids for the switch (round robin from the input's last winner): a VC bids once
    its front flit has arrived, its stage is ready, its output VC has a credit and its
    link is free. Then VC and switch allocation. Sets ``ns.wake[r]``: the next cycle after
    a request, else the earliest cycle a VC can act (a VC waiting for a credit not yet
    sent marks its output so that the credit wakes the router)."""
    P = p.ports
    V = p.vcs
    base = r * P
    for o in range(P):
        receive_credits(ns, p, base + o, t)
    lab = ns.sa_label  # all -1 between steps
    nreq = 0
    nset = 0
    w = isa.NEVER
    for i in range(P):
        q = base + i
        bits = ns.occ[q]
        rr = ns.sw_rr[q]
        while bits != 0:
            v = trailing_zeros(bits)
            bits &= bits - 1
            ready = ns.ivc[q, v, IV_READY]
            if ns.ivc[q, v, IV_STATE] == VC_ALLOC:
                if ready > t:
                    w = min(w, ready)
                elif _vc_request(ns, p, r, i, v, q, nreq):
                    nreq += 1
                else:  # an output VC comes free when a credit comes back (wait_tail) or
                    # when this router sends a tail (it is stepping then)
                    w = min(w, _credit_wait(ns, base + (ns.ivc[q, v, IV_ROUTE] & ROUTE_OUT_MASK)))
                continue
            at = max(ready, ns.ivc[q, v, IV_FRONT_ARR])
            if at > t:
                w = min(w, at)
                continue
            o = ns.ivc[q, v, IV_ROUTE] & ROUTE_OUT_MASK
            qo = base + o
            if ns.ovc[qo, ns.ivc[q, v, IV_OVC], OV_CREDITS] <= 0:
                w = min(w, _credit_wait(ns, qo))
                continue
            if ns.out_free[qo] > t:
                w = min(w, ns.out_free[qo])
                continue
            cur = lab[i * P + o]
            if cur < 0:
                lab[i * P + o] = v
                ns.al[AL_REQ_IN, nset] = i
                ns.al[AL_REQ_OUT, nset] = o
                nset += 1
            elif _supersedes(ns, p, q, v, cur, rr):
                lab[i * P + o] = v
    if nreq > 0:
        _vc_allocation(ns, p, r, t, nreq)
    if nset > 0:
        _switch_allocation(ns, nt, p, r, t, nset)
    ns.wake[r] = t + 1 if nreq + nset > 0 else max(w, t + 1)


@kernel(inline=True)
def routers_step(ns, nt, p, t):
    """Cycle t of every router due (every router without skip); returns the earliest
    cycle any router is due next. Inlined into its callers (the engine's NoC step runs it
    every NoC cycle with traffic: an out-of-line call passes each of the network's ~40
    arrays separately, see kernels/jit.py)."""
    nxt = isa.NEVER
    for r in range(p.n_routers):
        if ns.wake[r] <= t or p.skip == 0:
            router_step(ns, nt, p, r, t)
        nxt = min(nxt, ns.wake[r])
    return nxt
