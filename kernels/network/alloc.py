"""Allocators: match requesting inputs to outputs, once per router and cycle.

Four kinds (``names.ALLOCATORS``), as Booksim defines them, with round-robin pointers kept
per router between cycles:

- ``islip``: outputs grant round robin from their grant pointer, inputs accept round robin
  from their accept pointer; pointers move past a match made in the first iteration only;
  later iterations match what is still free.
- ``separable_output_first``: the same arbiters in the same order; Booksim runs it once,
  which is iSLIP with one iteration (here it takes iterations too).
- ``separable_input_first``: each input picks one of its requested outputs round robin,
  each output then picks one of the inputs that picked it; both pointers move on a match.
- ``wavefront``: requests are visited by diagonals of the input x output square, from a
  priority diagonal that moves by one every cycle with requests; a request is granted if
  its input and output are both still free.

The switch allocator matches input ports to output ports (a dense request matrix of
ports x ports, each request labelled with the VC that makes it). The VC allocator matches
input VCs to output VCs; an input VC asks for every free output VC of one output port in a
set (its message class and VC class), so it runs per output port, on bit sets of VCs.
"""

from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import overload

from .names import ALLOC_ISLIP, ALLOC_SEPARABLE_INPUT_FIRST, ALLOC_WAVEFRONT
from ..jit import MODEL_OPTIONS, kernel
from .state import *  # noqa: F403  (field indices)


def age_priority(p):
    """Whether the arbiters of a network with Params ``p`` prefer older packets (``priority
    = age``; kernels only). A constant by the class of ``p`` (``state.AgedNocParams``), so a
    network without priorities compiles none of their code."""
    raise TypeError("age_priority is called by kernels only")


@overload(age_priority, jit_options=MODEL_OPTIONS)
def _age_priority_of(p):
    aged = bool(getattr(getattr(p, "instance_class", None), "aged", False))
    return lambda p: aged


@kernel(inline=True)
def _wrap(i, n):
    return i - n if i >= n else i


@kernel(inline=True)
def rr_distance(x, start, n):
    """Places from ``start`` to x in a round robin over n."""
    return x - start if x >= start else x - start + n


@kernel(inline=True)
def _nearer(x, cur, start, n):
    """Whether x comes before ``cur`` (-1: none yet) in a round robin from ``start``."""
    return cur < 0 or rr_distance(x, start, n) < rr_distance(cur, start, n)


@kernel(inline=True)
def _arbiter_pass(al, nset, ptr, base, P, inputs_pick, answer):
    """One round-robin arbiter per port of one side (the inputs' choices in ``AL_CHOICE``
    or the outputs' grants in ``AL_GRANT``) over the switch requests: each port keeps the
    port on the other side nearest its pointer among the requests that qualify, those
    whose two ports are both unmatched, or (``answer``) those whose other port picked it."""
    for k in range(nset):
        i = al[AL_REQ_IN, k]
        o = al[AL_REQ_OUT, k]
        me, other = (i, o) if inputs_pick else (o, i)
        mine, theirs = (AL_CHOICE, AL_GRANT) if inputs_pick else (AL_GRANT, AL_CHOICE)
        if answer:
            ok = al[theirs, other] == me
        else:
            ok = al[AL_IN, i] < 0 and al[AL_OUT, o] < 0
        if ok and _nearer(other, al[mine, me], ptr[base + me], P):
            al[mine, me] = other


@kernel
def _arbiter_pass_by_priority(al, nset, ptr, base, P, inputs_pick, answer):
    """``_arbiter_pass`` whose arbiters take the highest priority first (``AL_REQ_PRI``;
    a port's pick's own in ``AL_BEST``, written with the pick), then round robin."""
    for k in range(nset):
        i = al[AL_REQ_IN, k]
        o = al[AL_REQ_OUT, k]
        me, other = (i, o) if inputs_pick else (o, i)
        mine, theirs = (AL_CHOICE, AL_GRANT) if inputs_pick else (AL_GRANT, AL_CHOICE)
        if answer:
            ok = al[theirs, other] == me
        else:
            ok = al[AL_IN, i] < 0 and al[AL_OUT, o] < 0
        if not ok:
            continue
        cur = al[mine, me]
        pk = al[AL_REQ_PRI, k]
        if (cur < 0 or pk > al[AL_BEST, me]
                or (pk == al[AL_BEST, me] and _nearer(other, cur, ptr[base + me], P))):
            al[mine, me] = other
            al[AL_BEST, me] = pk


@kernel(inline=True)
def switch_allocate(lab, al, nset, gptr, aptr, wf, p, r):
    """Match input ports to output ports of router r on its ``nset`` requests (request k:
    input ``al[AL_REQ_IN, k]`` asks for output ``al[AL_REQ_OUT, k]``; ``sa_label[i * P + o]``
    is the VC that asks). Leaves the output each input got in ``al[AL_IN]`` (-1 none).

    The arbiters visit only the requests, not the ports x ports square: an output's grant
    arbiter takes the requester nearest its pointer in round-robin order, which is the
    first one a scan from the pointer would meet, so the matching and the pointers are
    those of the definitions above, in time proportional to the requests."""
    P = p.ports
    base = r * P
    for i in range(P):
        al[AL_IN, i] = -1
        al[AL_OUT, i] = -1
    if p.sa_alloc == ALLOC_WAVEFRONT:
        pri = wf[1, r]
        for d in range(P):
            diag = pri + d
            for o in range(P):
                i = (diag + P - o) % P
                if lab[i * P + o] >= 0 and al[AL_IN, i] < 0 and al[AL_OUT, o] < 0:
                    al[AL_IN, i] = o
                    al[AL_OUT, o] = i
        wf[1, r] = _wrap(pri + 1, P)
        return
    input_first = p.sa_alloc == ALLOC_SEPARABLE_INPUT_FIRST
    # Booksim's separable allocators arbitrate by priority first, its iSLIP does not
    prio = age_priority(p) and p.sa_alloc != ALLOC_ISLIP
    for it in range(p.sa_iters):
        # AL_GRANT[o]: the input output o picks; AL_CHOICE[i]: the output input i picks
        for k in range(nset):
            i = al[AL_REQ_IN, k]
            o = al[AL_REQ_OUT, k]
            al[AL_GRANT, o] = -1
            al[AL_CHOICE, i] = -1
        if prio:  # (Booksim's separable allocators under priority = age)
            a, b = (aptr, gptr) if input_first else (gptr, aptr)
            _arbiter_pass_by_priority(al, nset, a, base, P, input_first, False)
            _arbiter_pass_by_priority(al, nset, b, base, P, not input_first, True)
        elif input_first:  # each free input picks an output, each output one of its pickers
            _arbiter_pass(al, nset, aptr, base, P, True, False)
            _arbiter_pass(al, nset, gptr, base, P, False, True)
        else:  # iSLIP / separable output-first: each free output grants, each input accepts
            _arbiter_pass(al, nset, gptr, base, P, False, False)
            _arbiter_pass(al, nset, aptr, base, P, True, True)
        matched = 0
        for k in range(nset):
            i = al[AL_REQ_IN, k]
            o = al[AL_REQ_OUT, k]
            if al[AL_CHOICE, i] == o and al[AL_GRANT, o] == i:
                al[AL_IN, i] = o
                al[AL_OUT, o] = i
                matched += 1
                if it == 0:
                    gptr[base + o] = _wrap(i + 1, P)
                    aptr[base + i] = _wrap(o + 1, P)
        if matched == 0:  # nothing changed: later iterations would match nothing either
            break


@kernel(inline=True)
def _first_from(bits, start):
    """The lowest set bit of ``bits`` at or above ``start``, else the lowest; -1 if none."""
    if bits == 0:
        return -1
    high = (bits >> start) << start
    return trailing_zeros(high) if high != 0 else trailing_zeros(bits)


@kernel(inline=True)
def _accept_start(a, o, V):
    """Where an accept pointer over every output VC of the router (o * V + ov) starts a
    scan restricted to output port o."""
    return a - o * V if o * V <= a < o * V + V else 0


@kernel(inline=True)
def _first_requester(vr, al, k0, k1, ov, g):
    """Round robin from input VC g: the first unmatched request in [k0, k1) (ascending
    input VCs) that asks for output VC ov; -1 if none."""
    first = -1
    for k in range(k0, k1):
        if al[AL_IN, k] < 0 and (vr[VR_MASK, k] >> ov) & 1:
            if vr[VR_IV, k] >= g:
                return k
            if first < 0:
                first = k
    return first


@kernel(inline=True)
def _before(vr, k, pick, g, S):
    """Whether request k comes before request ``pick`` (-1: none yet) for an output VC's
    arbiter under priority = age: the higher priority, then round robin from input VC g."""
    if pick < 0:
        return True
    if vr[VR_PRI, k] != vr[VR_PRI, pick]:
        return vr[VR_PRI, k] > vr[VR_PRI, pick]
    return rr_distance(vr[VR_IV, k], g, S) < rr_distance(vr[VR_IV, pick], g, S)


@kernel
def vc_allocate_port(free, gptr, aptr, vr, al, wf, p, r, o, k0, k1):
    """Match requests k0 .. k1-1 of ``va_req`` (input VCs in ascending order, all asking
    for output port o of router r) to the free output VCs ``free`` (a bit set) of that
    port. ``al[AL_IN, k]`` gets the output VC request k won (-1 none); returns the output
    VCs taken (a bit set)."""
    V = p.vcs
    S = p.ports * V
    qo = r * p.ports + o
    taken = 0
    if p.va_alloc == ALLOC_WAVEFRONT:
        pri = wf[0, r]
        for d in range(S):
            for ov in range(V):
                if not (free >> ov) & 1 or (taken >> ov) & 1:
                    continue
                iv = (pri + d + S - (o * V + ov)) % S
                for k in range(k0, k1):
                    if vr[VR_IV, k] == iv:
                        if al[AL_IN, k] < 0 and (vr[VR_MASK, k] >> ov) & 1:
                            al[AL_IN, k] = ov
                            taken |= 1 << ov
                        break
        return taken
    # Booksim's separable allocators' output arbiters prefer the older packet (``priority
    # = age``; their input arbiters see the routing function's priority, 0); iSLIP does not
    prio = age_priority(p) and p.va_alloc != ALLOC_ISLIP
    for it in range(p.va_iters):
        matched = 0
        if p.va_alloc == ALLOC_SEPARABLE_INPUT_FIRST:
            chosen = 0
            for k in range(k0, k1):  # each free input VC picks a free output VC
                al[AL_CHOICE, k] = -1
                if al[AL_IN, k] < 0:
                    a = aptr[r * p.ports + vr[VR_IN, k], vr[VR_VC, k]]
                    ov = _first_from(vr[VR_MASK, k] & free & ~taken, _accept_start(a, o, V))
                    al[AL_CHOICE, k] = ov
                    if ov >= 0:
                        chosen |= 1 << ov
            while chosen != 0:  # each picked output VC takes one input VC that picked it
                ov = trailing_zeros(chosen)
                chosen &= chosen - 1
                g = gptr[qo, ov]
                pick = -1
                for k in range(k0, k1):
                    if al[AL_CHOICE, k] == ov:
                        if prio:
                            if _before(vr, k, pick, g, S):
                                pick = k
                        elif pick < 0 or (vr[VR_IV, pick] < g <= vr[VR_IV, k]):
                            pick = k
                _va_match(gptr, aptr, vr, al, p, r, o, qo, ov, pick, it)
                taken |= 1 << ov
                matched += 1
        else:
            # iSLIP / separable output-first: every free output VC grants, input VCs accept
            union = 0
            for k in range(k0, k1):
                al[AL_GRANT, k] = 0
                if al[AL_IN, k] < 0:
                    union |= vr[VR_MASK, k]
            bits = union & free & ~taken
            while bits != 0:
                ov = trailing_zeros(bits)
                bits &= bits - 1
                if prio:
                    k = -1
                    for j in range(k0, k1):
                        if (al[AL_IN, j] < 0 and (vr[VR_MASK, j] >> ov) & 1
                                and _before(vr, j, k, gptr[qo, ov], S)):
                            k = j
                else:
                    k = _first_requester(vr, al, k0, k1, ov, gptr[qo, ov])
                al[AL_GRANT, k] |= 1 << ov
            for k in range(k0, k1):
                if al[AL_IN, k] >= 0 or al[AL_GRANT, k] == 0:
                    continue
                a = aptr[r * p.ports + vr[VR_IN, k], vr[VR_VC, k]]
                ov = _first_from(al[AL_GRANT, k], _accept_start(a, o, V))
                _va_match(gptr, aptr, vr, al, p, r, o, qo, ov, k, it)
                taken |= 1 << ov
                matched += 1
        if matched == 0:
            break
    return taken


@kernel(inline=True)
def _va_match(gptr, aptr, vr, al, p, r, o, qo, ov, k, it):
    """Input VC request k takes output VC ov; pointers move on a first-iteration match."""
    V = p.vcs
    S = p.ports * V
    al[AL_IN, k] = ov
    if it == 0:
        gptr[qo, ov] = _wrap(vr[VR_IV, k] + 1, S)
        aptr[r * p.ports + vr[VR_IN, k], vr[VR_VC, k]] = _wrap(o * V + ov + 1, S)
