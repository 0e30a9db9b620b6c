"""Ops whose output size depends on the data: NonZero, Compress, Unique, NonMaxSuppression.

The count each node keeps is a dim the user gives (``--dim NAME=N``, the front end's
:mod:`npusim.frontend.data_sized`), so the outputs have static shapes here. What the kept
elements are is still data npusim never reads: they are taken spread evenly over the input
(as a Gather's indices are), and a NonMaxSuppression's survivors spread evenly over its
batches and classes.

=================  ==========================================================================
NonZero            over the input: a compare with zero and a prefix count of the flags
                   (``T`` = ceil(log2 elements) shifted-add passes, CumSum's scan); over the
                   (rank, N) output: each kept element's coordinates from its flat position
                   (a div, a mul and a sub per coordinate)
Compress           over the condition: compare and prefix count (as NonZero); the N kept
                   slices gathered by DMA (Gather's rows, spread evenly over the axis)
Unique             over the input: a bitonic sort of its L slices (``T (T + 1) / 2``
                   compare-exchange passes, ``T`` = ceil(log2 L), as TopK's sort), a compare
                   with the neighbour and a prefix count; Y the N slices gathered, indices
                   a move pass, counts a sub pass over N, inverse_indices a move pass over L
NonMaxSuppression  ``name/boxes``: per box (a row of its 4 coordinates) its area and, for
                   centre boxes, its corners; then per (batch, class) row of the scores,
                   with the boxes loaded: the score threshold and, per kept box, one round
                   over every candidate (the row's max, the IoU with the kept box, the
                   suppression); a class keeping none pays the threshold and one max; the
                   (N, 3) triples stored by a move pass. The step lists are ``ROW_OPS``'
                   NonMaxSuppression entries (lowering/vector.py)
=================  ==========================================================================
"""

from __future__ import annotations

from math import prod

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.context import LoweringContext
from npusim.lowering.vector import (MOVE, LayerEmitter, View, _axis, _shape,
                                    emit_row_layer, emit_views, index_walks, row_major,
                                    tree_levels)

_COMPACT = [("sub", 1)]  # the flag: a compare (the prefix count follows)
_COORDINATE = [("div", 1), ("mul", 1), ("sub", 1)]  # (flat // stride) % dim


def _flags_and_positions(em: LayerEmitter, addr: int, shape, steps=()) -> None:
    """``steps`` then a compare and a prefix count over every element of a tensor."""
    n = prod(shape)
    emit_views(em, (n,), [View(addr, [1])], [],
               [*steps, *_COMPACT, ("add", max(1, tree_levels(n)))])


def _gather_slices(em: LayerEmitter, ctx: LoweringContext, x: str, y: str, axis: int | None
                   ) -> None:
    """The kept slices of ``x`` along ``axis`` (elements when None) into ``y``, spread
    evenly over the axis: a DMA gather."""
    x_shape, y_shape = _shape(ctx, x), _shape(ctx, y)
    if axis is None:
        x_shape, axis = (prod(x_shape),), 0
    L, n = x_shape[axis], y_shape[axis] if len(y_shape) == len(x_shape) else prod(y_shape)
    xs = row_major(x_shape)
    (_, _, (step,), _), = index_walks([min(n, L)], L)  # kept <= L: one walk
    strides = xs[:axis] + [xs[axis] * step] + xs[axis + 1:]
    shape = x_shape[:axis] + (n,) + x_shape[axis + 1:]
    emit_views(em, shape, [View(ctx.addr(x), strides, keep_repeats=True)],
               [View(ctx.addr(y), row_major(shape))], [])


def _axis_of(node: Node, rank: int) -> int | None:
    axis = node.attrs.get("axis")
    return None if axis is None else _axis(node, rank, axis)


def lower_nonzero(ctx: LoweringContext, node: Node) -> None:
    x, y = node.inputs[0], node.outputs[0]
    rank, n = _shape(ctx, y)
    em = LayerEmitter(ctx, node, "vector unit (compare, prefix count, coordinates)")
    _flags_and_positions(em, ctx.addr(x), _shape(ctx, x))
    emit_views(em, (rank, n), [], [View(ctx.addr(y), [n, 1])],
               _COORDINATE if rank > 1 else [(MOVE, 1)])
    em.finish()


def lower_compress(ctx: LoweringContext, node: Node) -> None:
    x, cond, y = node.inputs[0], node.inputs[1], node.outputs[0]
    em = LayerEmitter(ctx, node, "vector unit (compare, prefix count), DMA gather")
    _flags_and_positions(em, ctx.addr(cond), _shape(ctx, cond))
    _gather_slices(em, ctx, x, y, _axis_of(node, len(_shape(ctx, x))))
    em.finish()


def lower_unique(ctx: LoweringContext, node: Node) -> None:
    x = node.inputs[0]
    x_shape = _shape(ctx, x)
    axis = _axis_of(node, len(x_shape))
    L = prod(x_shape) if axis is None else x_shape[axis]
    T = tree_levels(L)
    outs = list(node.outputs) + [""] * (4 - len(node.outputs))
    em = LayerEmitter(ctx, node, "vector unit (bitonic sort, compare, prefix count), DMA gather")
    _flags_and_positions(em, ctx.addr(x), x_shape,
                         [("max", T * (T + 1) // 2)] if node.attrs.get("sorted", 1) else [])
    if outs[0]:
        _gather_slices(em, ctx, x, outs[0], axis)
    for out, steps in zip(outs[1:], ([(MOVE, 1)], [(MOVE, 1)], [("sub", 1)])):
        if out:  # indices, inverse_indices, counts
            n = prod(_shape(ctx, out))
            emit_views(em, (n,), [], [View(ctx.addr(out), [1])], steps)
    em.finish()


def lower_nms(ctx: LoweringContext, node: Node) -> None:
    boxes, scores, y = node.inputs[0], node.inputs[1], node.outputs[0]
    B, N = _shape(ctx, boxes)[:2]
    C = _shape(ctx, scores)[1]
    kept = _shape(ctx, y)[0]
    if _shape(ctx, boxes) != (B, N, 4) or _shape(ctx, scores) != (B, C, N):
        raise NpusimError(f"NonMaxSuppression '{node.name}': needs boxes (B, N, 4) and scores "
                          f"(B, C, N); got {_shape(ctx, boxes)} and {_shape(ctx, scores)}")
    centre = int(node.attrs.get("center_point_box", 0)) == 1
    words = ctx.scratch(f"{node.name}::boxes", (B, N))
    sub = Node(name=f"{node.name}/boxes", op_type=node.op_type, inputs=[boxes], outputs=[words])
    em = LayerEmitter(ctx, sub, "vector unit (box corners and areas)")
    emit_row_layer(em, O=B * N, L=4, x=ctx.addr(boxes), y=ctx.addr(words), keep=1,
                   op="NonMaxSuppression/centres" if centre else "NonMaxSuppression/corners")
    em.finish()

    kept_rows = ctx.scratch(f"{node.name}::kept", (B * C, kept // (B * C) + 1))
    main = Node(name=node.name, op_type=node.op_type, inputs=[scores, words], outputs=[y])
    em = LayerEmitter(ctx, main, "vector unit (greedy suppression per class)")
    emit_views(em, (B, N), [View(ctx.addr(words), [N, 1])], [], [])  # the candidates' boxes
    rows = B * C
    more, rounds = kept % rows, kept // rows  # survivors spread evenly over the classes
    prec = ctx.precision
    out = 0  # elements of the kept rows written so far
    for lo, hi, s in ((0, more, rounds + 1), (more, rows, rounds)):
        if hi <= lo:
            continue
        op = "NonMaxSuppression" if s else "NonMaxSuppression/empty"
        emit_row_layer(em, O=hi - lo, L=N, x=ctx.addr(scores) + lo * N * prec,
                       y=ctx.addr(kept_rows) + out * prec, keep=max(s, 1), op=op)
        out += (hi - lo) * max(s, 1)
    emit_views(em, (kept, 3), [View(ctx.addr(kept_rows), [1, 0])],
               [View(ctx.addr(y), [3, 1])], [(MOVE, 1)])
    em.finish()


LOWERINGS: dict = {
    "NonZero": lower_nonzero,
    "Compress": lower_compress,
    "Unique": lower_unique,
    "NonMaxSuppression": lower_nms,
}
