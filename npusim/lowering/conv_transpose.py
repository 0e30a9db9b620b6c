"""ConvTranspose (1 to 3 spatial axes) as a GEMM and a col2im scatter-add.

A transposed convolution sends every input pixel through the kernel to a window of the
output. Per group, that is one GEMM: the ``N * prod(input spatial)`` input pixels (rows,
``C_in / g`` channels each, channels-last as the convolutions write them) times the weights
``[C_in / g, C_out / g * prod(kernel)]`` (ONNX stores them in that order), giving one column
block per input pixel (layer ``name/gemm``, ``N * prod(in) * C_in * C_out / g * prod(kernel)``
MACs, the same as the direct definition). The col2im layer (``name``) then adds each
column block into its output window: one add pass over the column elements (plus one for a
bias), windows of neighbouring pixels overlapping when the kernel is larger than the stride
(each overlapping store is charged; a kernel equal to the stride, as in U-Net decoders,
writes every output element once).
"""

from __future__ import annotations

from math import prod

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.context import LoweringContext
from npusim.lowering.gemm import GemmProblem, emit_gemm
from npusim.lowering.vector import LayerEmitter, View, emit_views, row_major
from npusim.program import LayerInfo


def lower_conv_transpose(ctx: LoweringContext, node: Node) -> None:
    g = ctx.graph
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    x_shape, w_shape, y_shape = g.shape(x), g.shape(w), g.shape(y)
    if not 3 <= len(x_shape) <= 5:
        raise NpusimError(f"ConvTranspose '{node.name}': needs 1 to 3 spatial axes (input N, "
                          f"C, ...), got input shape {x_shape}")
    N, Cin = x_shape[:2]
    sp_in, sp_out, kernel = x_shape[2:], y_shape[2:], w_shape[2:]
    n_sp = len(sp_in)
    groups = int(node.attrs.get("group", 1))
    Cg, Mg = Cin // groups, w_shape[1]
    Cout = Mg * groups
    K = prod(kernel)
    strides = list(node.attrs.get("strides", [1] * n_sp))
    dil = list(node.attrs.get("dilations", [1] * n_sp))
    prec = ctx.precision
    rows = N * prod(sp_in)
    M = Mg * K
    cols = ctx.scratch(f"{node.name}::columns", (groups, rows, M))
    col_addr = ctx.addr(cols)

    offsets = [(gi * Cg * prec, gi * Cg * M * prec, gi * rows * M * prec)
               for gi in range(groups)]
    prob = GemmProblem(N=rows, C=Cg, M=M, batch_offsets=offsets, x_addr=ctx.addr(x),
                       x_row_stride=Cin * prec, x_trans=False, w_addr=ctx.addr(w),
                       w_trans=False, y_addr=col_addr)
    sub = Node(name=f"{node.name}/gemm", op_type=node.op_type, inputs=[x, w], outputs=[cols])
    info = LayerInfo(name=sub.name, op_type=node.op_type, input_shapes=[x_shape, w_shape],
                     output_shape=(groups, rows, M), macs=rows * Cin * Mg * K, mapping="",
                     mapping_source="")
    emit_gemm(ctx, sub, prob, info)

    # col2im: space [group, n, in spatial..., c_out, kernel...] -> output (channels last)
    out_rm = row_major(list(sp_out) + [Cout])  # strides of spatial axes and channel
    space = [groups, N] + list(sp_in) + [Mg] + list(kernel)
    dst = ([Mg, prod(sp_out) * Cout] + [out_rm[i] * strides[i] for i in range(n_sp)] + [1]
           + [out_rm[i] * dil[i] for i in range(n_sp)])
    src = [rows * M] + row_major([N] + list(sp_in) + [M])[:-1] + row_major([Mg] + list(kernel))
    sources = [View(col_addr, src)]
    steps = [("add", 1)]
    if bias:
        sources.append(View(ctx.addr(bias), [Mg] + [0] * (1 + n_sp) + [1] + [0] * n_sp))
        steps.append(("add", 1))
    col_node = Node(name=node.name, op_type=node.op_type, inputs=[cols] + ([bias] if bias else []),
                    outputs=[y])
    em = LayerEmitter(ctx, col_node, "vector unit (col2im)")
    # windows placed from the output's first element: padding (cropping the windows at
    # the borders) moves no fewer bytes through the array, only fewer through the border
    emit_views(em, space, sources, [View(ctx.addr(y), dst)], steps)
    em.finish()


LOWERINGS: dict = {"ConvTranspose": lower_conv_transpose}
