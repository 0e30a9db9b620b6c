"""Einsum as the GEMM, transpose or reduction it spells.

Two operands: the letters split into *batch* (in both operands and the output), *contracted*
(in both, not in the output) and *free* letters of each operand. That is a batched GEMM of
``N = prod(free A)`` rows, ``C = prod(contracted)`` and ``M = prod(free B)`` columns per batch
index, costing ``batch * N * C * M`` MACs on the array (:func:`gemm.emit_gemm`).
An operand already stored as [batch, rows, reduction] or [batch, reduction, rows] is read in
place (the second as a transposed load); any other order is first rearranged by a move layer
(``name/a_layout``, ``name/b_layout``), and an output order other than [batch, free A,
free B] is rearranged after the GEMM (``name/layout``), each costed like a Transpose.

Two operands with nothing to sum (an outer product, or contracted letters of size 1) are a
broadcast multiply on the vector unit: one product per output element, no array pass.

One operand: a permutation of the letters is a Transpose; summing letters away is one add
pass over the input (partial sums stored per tile). Repeated letters (diagonals) and three
or more operands are a clear error.
"""

from __future__ import annotations

from math import prod

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.context import LoweringContext
from npusim.lowering.gemm import GemmProblem, emit_gemm
from npusim.lowering.vector import MOVE, LayerEmitter, View, emit_views, row_major
from npusim.program import LayerInfo


def _err(node: Node, why: str) -> NpusimError:
    return NpusimError(f"Einsum '{node.name}': {why}")


def parse_equation(node: Node, shapes: list[tuple[int, ...]]) -> tuple[list[str], str]:
    """Operand terms and the output term, with ``...`` spelled out as capital letters."""
    eq = str(node.attrs.get("equation", "")).replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise _err(node, f"equation {eq!r} has {len(terms)} operands, the node {len(shapes)}")
    ell = max((len(s) - (len(t) - 3) for t, s in zip(terms, shapes) if "..." in t), default=0)
    letters = "ZYXWVUTSRQPONMLKJIHGFEDCBA"[:ell][::-1]
    out = []
    for t, s in zip(terms, shapes):
        if "..." in t:
            n = len(s) - (len(t) - 3)
            t = t.replace("...", letters[ell - n:])
        if len(t) != len(s):
            raise _err(node, f"term {t!r} does not match the operand's rank {len(s)} ({s})")
        out.append(t)
    if arrow:
        rhs = rhs.replace("...", letters)
    else:  # implicit output: the letters seen once, in alphabetical order (ellipsis first)
        seen = "".join(out)
        rhs = letters + "".join(sorted(c for c in set(seen) if seen.count(c) == 1
                                       and c not in letters))
    return out, rhs


def _move(ctx: LoweringContext, node: Node, tag: str, src: str, term: str, order: str,
          sizes: dict[str, int], dst: str | None = None) -> str:
    """A layer writing ``src`` (letters ``term``) in letter order ``order``."""
    shape = [sizes[c] for c in order]
    dst = dst or ctx.scratch(f"{node.name}::{tag}", shape)
    strides = dict(zip(term, row_major([sizes[c] for c in term])))
    sub = Node(name=f"{node.name}/{tag}", op_type=node.op_type, inputs=[src], outputs=[dst])
    em = LayerEmitter(ctx, sub, "vector unit (einsum operand layout)")
    emit_views(em, shape, [View(ctx.addr(src), [strides[c] for c in order])],
               [View(ctx.addr(dst), row_major(shape))], [(MOVE, 1)])
    em.finish()
    return dst


def lower_einsum(ctx: LoweringContext, node: Node) -> None:
    g = ctx.graph
    ins = [t for t in node.inputs if t]
    shapes = [g.shape(t) for t in ins]
    terms, rhs = parse_equation(node, shapes)
    sizes: dict[str, int] = {}
    for t, s in zip(terms, shapes):
        for c, d in zip(t, s):
            if sizes.get(c, d) != d and 1 not in (sizes[c], d):
                raise _err(node, f"letter {c!r} has sizes {sizes[c]} and {d}")
            sizes[c] = max(sizes.get(c, d), d)
    y = node.outputs[0]
    if any(len(set(t)) != len(t) for t in terms) or len(set(rhs)) != len(rhs):
        raise _err(node, f"repeated letters (diagonals) in {node.attrs.get('equation')!r} are "
                         f"not supported")
    if len(terms) == 1:
        return _single(ctx, node, ins[0], terms[0], rhs, sizes)
    if len(terms) != 2:
        raise _err(node, f"{len(terms)} operands; npusim lowers Einsum of one or two operands")
    a, b = terms
    if not set(rhs) <= set(a) | set(b):
        raise _err(node, f"output letters {rhs!r} do not all appear in the operands")
    only = (set(a) ^ set(b)) - set(rhs)
    if only:
        raise _err(node, f"letters {''.join(sorted(only))!r} are summed within one operand; "
                         f"npusim lowers contractions over letters of both operands")
    red = [c for c in a if c in b and c not in rhs]
    if prod(sizes[c] for c in red) == 1:
        return _broadcast_multiply(ctx, node, ins, terms, shapes, rhs, sizes)
    batch = [c for c in rhs if c in a and c in b]
    free_a = [c for c in rhs if c in a and c not in b]
    free_b = [c for c in rhs if c in b and c not in a]
    if any(sizes[c] != dim for t, s in zip(terms, shapes) for c, dim in zip(t, s) if c in batch):
        raise _err(node, "a batch letter broadcasts (size 1 against a larger size); npusim "
                         "lowers Einsum batches of equal size")
    Bn, N, C, M = (prod(sizes[c] for c in grp) for grp in (batch, free_a, red, free_b))
    prec = ctx.precision
    seq = "".join

    # operand A: [batch, rows, red] in place, [batch, red, rows] as a transposed load
    x, x_trans = ins[0], False
    if a == seq(batch + red + free_a):
        x_trans = True
    elif a != seq(batch + free_a + red):
        x = _move(ctx, node, "a_layout", x, a, seq(batch + free_a + red), sizes)
    w, w_trans = ins[1], False
    if b == seq(batch + free_b + red):
        w_trans = True
    elif b != seq(batch + red + free_b):
        w = _move(ctx, node, "b_layout", w, b, seq(batch + red + free_b), sizes)
    canonical = seq(batch + free_a + free_b)
    out = y if rhs == canonical else ctx.scratch(f"{node.name}::gemm",
                                                 [sizes[c] for c in canonical])
    offsets = [(i * N * C * prec, i * C * M * prec, i * N * M * prec) for i in range(Bn)]
    prob = GemmProblem(N=N, C=C, M=M, batch_offsets=offsets, x_addr=ctx.addr(x),
                       x_row_stride=(N if x_trans else C) * prec, x_trans=x_trans,
                       w_addr=ctx.addr(w), w_trans=w_trans, y_addr=ctx.addr(out))
    sub = Node(name=node.name if out == y else f"{node.name}/gemm", op_type=node.op_type,
               inputs=[x, w], outputs=[out])
    info = LayerInfo(name=sub.name, op_type=node.op_type, input_shapes=shapes,
                     output_shape=tuple(sizes[c] for c in canonical), macs=Bn * N * C * M,
                     mapping="", mapping_source="")
    emit_gemm(ctx, sub, prob, info)
    if out != y:
        _move(ctx, node, "layout", out, canonical, rhs, sizes, dst=y)


def _broadcast_multiply(ctx, node, ins, terms, shapes, rhs, sizes) -> None:
    """Two operands with nothing to sum (an outer product, or contracted letters of size 1):
    each output element is one product, a multiply pass over the output on the vector unit,
    each operand read through its broadcast (a GEMM of K = 1 would use one row of the
    array)."""
    y = node.outputs[0]
    views = []
    for t, s, name in zip(terms, shapes, ins):
        strides = {c: (st if d != 1 else 0) for c, d, st in zip(t, s, row_major(s))}
        views.append(View(ctx.addr(name), [strides.get(c, 0) for c in rhs]))
    out = [sizes[c] for c in rhs]
    em = LayerEmitter(ctx, node, "vector unit (einsum without a sum: a broadcast multiply)")
    emit_views(em, out, views, [View(ctx.addr(y), row_major(out))], [("mul", 1)])
    em.finish()


def _single(ctx, node, x, term, rhs, sizes) -> None:
    y = node.outputs[0]
    if not set(rhs) <= set(term):
        raise _err(node, f"output letters {rhs!r} do not all appear in the operand {term!r}")
    if len(rhs) == len(term):  # a permutation
        _move(ctx, node, "transpose", x, term, rhs, sizes, dst=y)
        return
    # a sum over the letters missing from the output: one add pass over the input
    ys = dict(zip(rhs, row_major([sizes[c] for c in rhs])))
    em = LayerEmitter(ctx, Node(name=node.name, op_type=node.op_type, inputs=[x], outputs=[y]),
                      "vector unit (einsum sum)")
    emit_views(em, [sizes[c] for c in term], [View(ctx.addr(x), row_major(
        [sizes[c] for c in term]))], [View(ctx.addr(y), [ys.get(c, 0) for c in term])],
        [("add", 1)])
    em.finish()


LOWERINGS: dict = {"Einsum": lower_einsum}
