"""DeformConv (torchvision's ``deform_conv2d``; 1 to 3 spatial axes) as sampling and a GEMM.

A deformable convolution reads each kernel tap at its regular position moved by a learned
offset (and, with a mask, scaled). The offsets are data, so no array dataflow can walk the
input: the taps are gathered into columns first, as a deformable-conv kernel does, then the
columns meet the weights on the array.

``name/offsets``  over the offsets (N, *out, offset_group * K * k; channels-last, as the
                  conv producing them writes them): per coordinate the base position added
                  (add), floor and fraction (a move and two subs), the 2^k bilinear weights'
                  products spread over the k coordinates, and with a mask each tap's weights
                  scaled by it (its 2^k muls spread the same way); one packed word per
                  position, offset group and tap
``name/columns``  over the columns (N, *out, C, K): each element's 2^k taps weighted and
                  summed (Resize's steps), the input read where the regular taps lie (the
                  offsets are never read: taken as small; windows placed from the input's
                  first element, as ConvTranspose's col2im places them), the packed words
                  once per tile for all channels (offset group 0's stand for the others)
``name``          per group, the GEMM of the columns (N * prod(out) rows, C/group * K) with
                  the weights (C/group * K x M/group, stored M x C as ONNX holds them), plus
                  the bias: ``N * prod(out) * M * C/group * K`` MACs, as the convolution's;
                  the output channels-last, grouped outputs block by block

K = prod(kernel), k = spatial axes.
"""

from __future__ import annotations

from math import ceil, prod

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.context import LoweringContext
from npusim.lowering.conv import SPATIAL_RANKS
from npusim.lowering.gemm import GemmProblem, emit_gemm
from npusim.lowering.movement import GRID_MODES, _interpolation_steps
from npusim.lowering.vector import LayerEmitter, View, emit_views, row_major
from npusim.program import LayerInfo


def lower_deform_conv(ctx: LoweringContext, node: Node) -> None:
    g = ctx.graph
    x, w, offset = node.inputs[:3]
    bias = node.inputs[3] if len(node.inputs) > 3 and node.inputs[3] else None
    mask = node.inputs[4] if len(node.inputs) > 4 and node.inputs[4] else None
    y = node.outputs[0]
    x_shape, w_shape, o_shape, y_shape = g.shape(x), g.shape(w), g.shape(offset), g.shape(y)
    k = len(x_shape) - 2
    if k not in SPATIAL_RANKS or len(w_shape) != k + 2 or len(y_shape) != k + 2:
        raise NpusimError(f"DeformConv '{node.name}': needs an input N x C x (1 to 3 spatial "
                          f"axes), weights M x C/group x kernel and an output of the same "
                          f"rank; got {x_shape}, {w_shape}, {y_shape}")
    N, C, ins = x_shape[0], x_shape[1], tuple(x_shape[2:])
    M, Cg, kernel = w_shape[0], w_shape[1], tuple(w_shape[2:])
    outs = tuple(y_shape[2:])
    groups = int(node.attrs.get("group", 1))
    og = int(node.attrs.get("offset_group", 1))
    K, P = prod(kernel), prod(outs)
    if Cg * groups != C or M % groups or tuple(o_shape) != (N, og * K * k, *outs):
        raise NpusimError(f"DeformConv '{node.name}': {C} input channels, weights {w_shape} "
                          f"in {groups} groups and offsets {o_shape} (expected "
                          f"{(N, og * K * k, *outs)}) do not fit together")
    strides = tuple(node.attrs.get("strides", [1] * k))
    dil = tuple(node.attrs.get("dilations", [1] * k))
    prec = ctx.precision
    per_axis, weigh = GRID_MODES["linear"]  # bilinear, as GridSample's linear mode
    taps = per_axis ** k

    # offsets -> one packed word per (position, offset group, tap)
    per_coordinate = [("add", 1), *weigh]
    weights = taps * (k - 1) + (taps if mask else 0)  # products per (position, tap)
    if weights:
        per_coordinate.append(("mul", ceil(weights / k)))
    words = ctx.scratch(f"{node.name}::samples", (N, P, og * K))
    space = (N, P, og * K, k)
    sources = [View(ctx.addr(offset), row_major(space))]
    if mask:  # (N, og * K, *out) channels-last: one value per word, read with its coordinates
        sources.append(View(ctx.addr(mask), row_major((N, P, og * K)) + [0]))
    sub = Node(name=f"{node.name}/offsets", op_type=node.op_type,
               inputs=[offset] + ([mask] if mask else []), outputs=[words])
    em = LayerEmitter(ctx, sub, "vector unit (deformable offsets)")
    emit_views(em, space, sources, [View(ctx.addr(words), row_major((N, P, og * K)) + [0])],
               per_coordinate)
    em.finish()

    # columns (N, *out, C, *kernel): each element's taps, from where the regular tap lies
    cols = ctx.scratch(f"{node.name}::columns", (N * P, C * K))
    xs = row_major((N, *ins, C))  # channels-last
    space = (N, *outs, C, *kernel)
    src = ([xs[0]] + [xs[1 + i] * strides[i] for i in range(k)] + [1]
           + [xs[1 + i] * dil[i] for i in range(k)])
    wrm = row_major((N, *outs, og * K))
    # per batch, position and tap; the channel axis reads offset group 0's words for all
    word = wrm[:1 + k] + [0] + row_major(kernel)
    sub = Node(name=f"{node.name}/columns", op_type=node.op_type, inputs=[x, words],
               outputs=[cols])
    em = LayerEmitter(ctx, sub, "vector unit (deformable sampling)")
    emit_views(em, space, [View(ctx.addr(x), src), View(ctx.addr(words), word)],
               [View(ctx.addr(cols), row_major(space))], _interpolation_steps(taps))
    em.finish()

    # the GEMM per group: columns x weights (stored M x C/group x kernel: w_trans)
    Mg, Ck = M // groups, Cg * K
    offsets = [(gi * Ck * prec, gi * Mg * Ck * prec, gi * N * P * Mg * prec)
               for gi in range(groups)]
    prob = GemmProblem(N=N * P, C=Ck, M=Mg, batch_offsets=offsets, x_addr=ctx.addr(cols),
                       x_row_stride=C * K * prec, x_trans=False, w_addr=ctx.addr(w),
                       w_trans=True, y_addr=ctx.addr(y),
                       bias_addr=ctx.bias_addr(bias) if bias else None)
    main = Node(name=node.name, op_type=node.op_type,
                inputs=[cols, w] + ([bias] if bias else []), outputs=[y])
    info = LayerInfo(name=node.name, op_type=node.op_type,
                     input_shapes=[g.shape(t) for t in node.inputs if t], output_shape=y_shape,
                     macs=N * P * M * Ck, mapping="", mapping_source="")
    emit_gemm(ctx, main, prob, info)


LOWERINGS: dict = {"DeformConv": lower_deform_conv}
