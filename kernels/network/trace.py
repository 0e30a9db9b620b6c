"""Trace counters of the router network (in a traced network: ``TracedNocParams``, whose
hooks ``trace_hook`` compiles only for it), binned like every unit's
(``kernels/trace.py``): counters per time bin of ``p.trace_bin`` ticks at slot
``bin % capacity`` of a ring that Python drains between kernel calls.

- ``tr_link[slot, row]``: flits sent out of each output row (router outputs, then the
  network interfaces' injection links), counted in the bin of the cycle they leave;
- ``tr_occ[slot, router]``: buffer occupancy integral, flits x NoC cycles: the flits that
  hold a slot of the router's input buffers (from the cycle their sender won the switch,
  which took the slot's credit, until they leave), added up interval by interval
  (``tr_since``: the cycle each router's count was added up to). ``trace_sync`` brings
  every router up to the present before a drain.

Times here are NoC cycles; a cycle counts into the bin of the tick it starts at.
"""

from ..jit import kernel
from ..trace import trace_hook


@kernel(inline=True)
def _bin(p, c):
    return c * p.period // p.trace_bin


@kernel
def trace_occupancy(ns, p, w, c):
    """Add router w's buffer occupancy from where it was last added up to cycle c (its
    count has not changed since)."""
    d = ns.tr_since[w]
    if c <= d:
        return
    ns.tr_since[w] = c
    b = ns.busy[w]
    if b == 0:
        return
    ring = ns.tr_occ.shape[0]
    while d < c:
        k = _bin(p, d)
        nxt = min(c, -(-((k + 1) * p.trace_bin) // p.period))
        ns.tr_occ[k % ring, w] += b * (nxt - d)
        d = nxt


@trace_hook
def trace_buffer_change(ns, p, w, c):
    """The flits router w (or a network interface, not traced) holds are about to change
    at cycle c: its occupancy is added up to c first."""
    if w < p.n_routers:
        trace_occupancy(ns, p, w, c)


@trace_hook(inline=True)
def trace_link(ns, p, q, c):
    """A flit leaves output row q at cycle c."""
    ns.tr_link[_bin(p, c) % ns.tr_link.shape[0], q] += 1


@kernel
def trace_sync(ns, p, c):
    """Bring every router's occupancy up to cycle c."""
    for w in range(p.n_routers):
        trace_occupancy(ns, p, w, c)
