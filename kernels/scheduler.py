"""Global scheduler: layer dependencies, ready layers per partition, tiles to cores.

A layer becomes ready when every layer it depends on has finished (and its request has
arrived); it then joins the ready list of its request's partition. A core with a free tile
slot takes the next tile of the group it is working on, or else the next group of the ready
layer its partition's policy ranks first (``kernels/policies/``). Cores that hold no tile at
all are served before cores that would only fill their second (prefetch) slot, so no core
idles while a ready tile exists that it may run.
"""

from .jit import entry, kernel

from . import isa
from .policies import layer_priority, layer_started
from .state import *  # noqa: F403  (field indices of the state tables)


@kernel
def _make_ready(st, prog, layer):
    part = prog.req[prog.layer[layer, isa.L_REQUEST], R_PART]
    n = st.part_st[PT_READY, part]
    st.ready[part, n] = layer
    st.part_st[PT_READY, part] = n + 1
    st.layer_st[L_READY_SEQ, layer] = st.ctl[CC_READY_SEQ]
    st.ctl[CC_READY_SEQ] += 1
    st.layer_st[L_NEXT_GROUP, layer] = prog.layer[layer, isa.L_GROUP_START]


@kernel
def _layer_ended(st, prog, layer, t):
    st.layer_st[L_END, layer] = t
    st.ctl[CC_LAYERS_LEFT] -= 1
    st.ctl[CC_PAUSE] = max(st.ctl[CC_PAUSE], st.layer_st[L_NOTIFY, layer])


@kernel
def release_layers(st, prog, first, t):
    """Mark ``first`` ready at tick t; layers without tiles finish at once, cascading."""
    stack = st.layer_stack
    stack[0] = first
    top = 1
    while top > 0:
        top -= 1
        layer = stack[top]
        if st.layer_st[L_TILES_LEFT, layer] > 0:
            _make_ready(st, prog, layer)
            continue
        # nothing to run: the layer starts and ends now
        st.layer_st[L_START, layer] = t
        _layer_ended(st, prog, layer, t)
        s0 = prog.layer[layer, isa.L_SUCC_START]
        for k in range(s0, s0 + prog.layer[layer, isa.L_SUCC_LEN]):
            succ = prog.layer_succ[k]
            st.layer_st[L_PREDS_LEFT, succ] -= 1
            if st.layer_st[L_PREDS_LEFT, succ] == 0:
                stack[top] = succ
                top += 1


@kernel
def scheduler_start(st, prog):
    # roots by their static predecessor count: releasing a root without tiles releases its
    # successors in the same cascade, which must not be released a second time here
    for layer in range(prog.layer.shape[0]):
        if prog.layer[layer, isa.L_N_PREDS] == 0 and prog.layer[layer, isa.L_RELEASE] == 0:
            release_layers(st, prog, layer, 0)


@kernel
def release_due(st, prog, p, t):
    """Release the root layers whose request has arrived by tick t; returns the tick the
    next one arrives (isa.NEVER when none is left)."""
    order = prog.release_order
    while st.ctl[CC_RELEASED] < order.shape[0]:
        layer = order[st.ctl[CC_RELEASED]]
        when = prog.layer[layer, isa.L_RELEASE] * p.core_period
        if when > t:
            return when
        st.ctl[CC_RELEASED] += 1
        release_layers(st, prog, layer, when)
    return isa.NEVER


@kernel
def tile_finished(st, prog, tile, t):
    """Book-keeping when a tile's last instruction completed at tick t."""
    layer = prog.tile[tile, isa.T_LAYER]
    st.layer_st[L_TILES_LEFT, layer] -= 1
    left = st.layer_st[L_TILES_LEFT, layer]
    if left > 0:
        if left == st.layer_st[L_TILE_MARK, layer]:
            st.ctl[CC_PAUSE] = max(st.ctl[CC_PAUSE], NOTIFY_AFTER_STEP)
        return
    _all_tiles_done(st, prog, layer, t)


@kernel
def _all_tiles_done(st, prog, layer, t):
    """The layer's last tile finished at tick t: it ends, its successors may be released."""
    _layer_ended(st, prog, layer, t)
    s0 = prog.layer[layer, isa.L_SUCC_START]
    for k in range(s0, s0 + prog.layer[layer, isa.L_SUCC_LEN]):
        succ = prog.layer_succ[k]
        st.layer_st[L_PREDS_LEFT, succ] -= 1
        if st.layer_st[L_PREDS_LEFT, succ] == 0:
            release_layers(st, prog, succ, t)


@kernel
def work_waiting(st, prog):
    """True if some partition has a ready layer or some core a group with tiles left."""
    for part in range(st.part_st.shape[1]):
        if st.part_st[PT_READY, part] > 0:
            return True
    for c in range(st.core.shape[1]):
        if st.core[C_GROUP_NEXT, c] < st.core[C_GROUP_END, c]:
            return True
    return False


@kernel(inline=True)
def next_tile_for_core(st, prog, p, c):
    """The next tile core c should load into a free slot, or -1."""
    if st.core[C_GROUP_NEXT, c] < st.core[C_GROUP_END, c]:
        tile = st.core[C_GROUP_NEXT, c]
        st.core[C_GROUP_NEXT, c] += 1
        return tile
    part = prog.core_part[c]
    n = st.part_st[PT_READY, part]
    if n == 0:
        return -1
    best = 0
    best_pri = isa.NEVER
    best_seq = isa.NEVER
    for k in range(n):
        layer = st.ready[part, k]
        pri = layer_priority(st, prog, p, part, layer)
        seq = st.layer_st[L_READY_SEQ, layer]
        if pri < best_pri or (pri == best_pri and seq < best_seq):
            best, best_pri, best_seq = k, pri, seq
    layer = st.ready[part, best]
    g0 = prog.layer[layer, isa.L_GROUP_START]
    g = st.layer_st[L_NEXT_GROUP, layer]
    if g == g0:
        layer_started(st, prog, p, part, layer)
    st.layer_st[L_NEXT_GROUP, layer] = g + 1
    if g + 1 == g0 + prog.layer[layer, isa.L_GROUP_LEN]:  # all handed out: leave the list
        st.ready[part, best] = st.ready[part, n - 1]
        st.part_st[PT_READY, part] = n - 1
    t0 = prog.group[g, isa.G_TILE_START]
    st.core[C_GROUP_NEXT, c] = t0 + 1
    st.core[C_GROUP_END, c] = t0 + prog.group[g, isa.G_TILE_LEN]
    return t0


@entry
def skip_layers(st, prog, layers, t):
    """Fast fidelity (``npusim.fast``): end each of ``layers``, none of whose tiles has been
    handed out, as if it had no tiles: a ready one leaves its partition's ready list and
    ends at tick t (its successors released), one not yet released ends the moment it is."""
    for i in range(layers.shape[0]):
        layer = layers[i]
        st.layer_st[L_TILES_LEFT, layer] = 0
        if _leave_ready(st, prog, layer):
            release_layers(st, prog, layer, t)


@kernel
def _leave_ready(st, prog, layer):
    """Take ``layer`` off its partition's ready list; False if it was not on it."""
    part = prog.req[prog.layer[layer, isa.L_REQUEST], R_PART]
    n = st.part_st[PT_READY, part]
    for k in range(n):
        if st.ready[part, k] == layer:
            st.ready[part, k] = st.ready[part, n - 1]
            st.part_st[PT_READY, part] = n - 1
            return True
    return False


@entry
def skip_groups(st, prog, layer, end, t):
    """Fast fidelity (``npusim.fast``): the groups of ``layer`` not yet handed out, up to
    group ``end`` (exclusive), are dropped unrun: the layer hands out group ``end`` next (or
    leaves its partition's ready list when that is its last), and ends when its tiles in
    flight have finished (at tick t if there are none). Returns the tiles dropped."""
    g = st.layer_st[L_NEXT_GROUP, layer]
    if g >= end:
        return 0
    n = 0
    for k in range(g, end):
        n += prog.group[k, isa.G_TILE_LEN]
    st.layer_st[L_NEXT_GROUP, layer] = end
    if end == prog.layer[layer, isa.L_GROUP_START] + prog.layer[layer, isa.L_GROUP_LEN]:
        _leave_ready(st, prog, layer)
    st.layer_st[L_TILES_LEFT, layer] -= n
    if st.layer_st[L_TILES_LEFT, layer] == 0:
        _all_tiles_done(st, prog, layer, t)
    return n
