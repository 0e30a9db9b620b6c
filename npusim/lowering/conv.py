"""Convolution (1, 2 or 3 spatial dims; stride, padding, dilation, groups) on the array.

Activations live in DRAM channels-last (N, *spatial, C: NHWC for 2-D), weights as ONNX
stores them (M x C/g x *kernel). A tile covers a box of output positions, ``c`` input and
``m`` output channels of one group, and runs the loop nest of Gemmini's convolution
(``LoopConv.scala``, ``sp_tiled_conv`` in gemmini-rocc-tests, ONNXim's ``ConvWS``):

    for each block of ``width`` output channels:
        for each kernel position (all spatial dims):
            for each block of ``height`` input channels:
                preload that block of weights (channels x output channels), then stream
                every output position of the tile through it, one output row at a time

so a layer with 3 input channels uses 3 of the array's rows in each of its kernel
positions' blocks. The tile loads the input its outputs read (implicit im2col): the dense
window when the kernel is wider than one along a dim, and only the strided positions when
it is one (the DMA walks the input with the stride, like Gemmini's downsampling loads).
Reduction (channel) tiles of one output box form a group: they run in order on one core
and accumulate into the same accumulator rows; the first loads the bias (without one, the
accumulator rows start from zero: Gemmini's zero-filling MVIN moves no data), the last
moves the output out while the next tile computes. Edge tiles are cut to the layer.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import product
from math import ceil, prod

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.array import Block, Stream, emit_schedule, wait_for
from npusim.lowering.context import LoweringContext
from npusim.lowering.mapping import LoopCounts, Mapping
from npusim.lowering.tiling import (ACC_BYTES, Budget, ConvShape, ConvTile, choose_conv_tile,
                                    conv_tile_fits)
from npusim.lowering.weights import dequantized_weight
from npusim.program import Instr, LayerInfo

SPATIAL_RANKS = (1, 2, 3)


def begin_pads(node: Node, in_dims, out_dims, kernel, strides, dil) -> tuple[int, ...]:
    """Padding before each spatial dim (ONNX ``pads`` or ``auto_pad``, any number of dims):
    the one rule convolutions and pooling windows share."""
    rank = len(in_dims)
    auto = node.attrs.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i in range(rank):
            total = max(0, (out_dims[i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1
                        - in_dims[i])
            small = total // 2
            out.append(small if auto == "SAME_UPPER" else total - small)
        return tuple(out)
    if auto == "VALID":
        return (0,) * rank
    pads = list(node.attrs.get("pads", [0] * (2 * rank)))
    return tuple(pads[:rank])


def _lookup_conv_mapping(ctx: LoweringContext, key: LoopCounts, rows: int,
                         cols: int) -> tuple[Mapping | None, bool]:
    """The mapping line of a conv layer with ``rows x cols`` outputs, and whether it names
    the rows P.

    ONNXim's mapping format names the two output dims P and Q, in two orientations: its
    conv mapper writes Gemmini's output rows as P (``calc_conv_mapping`` prints
    ``P{orows} Q{ocols}``, as do the lines published with Gemmini's RTL counts), while its
    ``ConvWS`` keys a layer by Q = height, P = width and reads the inner P as the width. A
    line written for ONNXim about a non-square layer therefore has P = width. npusim looks
    the layer up with P = rows first, then, when the layer is not square, with P = columns,
    and reads the inner tile in the orientation whose ``[T]`` matched. A square layer's
    ``[T]`` cannot tell: P is rows, as the mapper writes it.
    """
    m = ctx.lookup_mapping(LoopCounts(**dict(key.as_dict(), P=rows, Q=cols)))
    if m is not None or rows == cols:
        return m, True
    return ctx.lookup_mapping(LoopCounts(**dict(key.as_dict(), P=cols, Q=rows))), False


def _window(s: ConvShape, in_dim: int, pad: int, d: int, o0: int, t: int) -> tuple[int, int, int]:
    """(first input index, count, step) the tile of outputs [o0, o0 + t) loads along dim
    ``d``, clipped to the input (padding is never loaded)."""
    stride, k = s.strides[d], s.kernel[d]
    if k == 1:  # only the strided positions: o * stride - pad inside the input
        first = max(o0, -(-pad // stride))
        last = min(o0 + t - 1, (in_dim - 1 + pad) // stride)
        count = max(1, last - first + 1)
        return min(max(first * stride - pad, 0), in_dim - 1), count, stride
    lo = o0 * stride - pad
    hi = lo + s.span(d, t)
    lo, hi = max(lo, 0), min(hi, in_dim)
    return min(lo, in_dim - 1), max(hi - lo, 1), 1


def lower_conv(ctx: LoweringContext, node: Node) -> None:
    g = ctx.graph
    x_shape, w_shape = g.shape(node.inputs[0]), g.shape(node.inputs[1])
    y = node.outputs[0]
    y_shape = g.shape(y)
    rank = len(x_shape) - 2
    if rank not in SPATIAL_RANKS:
        raise NpusimError(f"Conv '{node.name}': input shape {x_shape} has {max(rank, 0)} "
                          f"spatial dims; npusim lowers convolutions over 1, 2 or 3 (an input "
                          f"N x C x D1 [x D2 [x D3]])")
    Nb, Ctot, in_dims = x_shape[0], x_shape[1], tuple(x_shape[2:])
    Mtot, Cg, kernel = w_shape[0], w_shape[1], tuple(w_shape[2:])
    out_dims = tuple(y_shape[2:])
    groups = int(node.attrs.get("group", 1))
    strides = tuple(node.attrs.get("strides", [1] * rank))
    dil = tuple(node.attrs.get("dilations", [1] * rank))
    pads = begin_pads(node, in_dims, out_dims, kernel, strides, dil)
    # a spatial dim of one position in and out, kernel one and no padding (an H x 1 conv over
    # an H x 1 map, as tf2onnx writes a 1-D conv) is no loop at all: dropped, the conv runs
    # over the others. The bytes lie where they did (a dim of one has no stride), and the
    # array streams the long dim as its rows instead of one pixel a row.
    keep = [d for d in range(rank) if not (in_dims[d] == out_dims[d] == kernel[d] == 1
                                           and pads[d] == 0)] or [rank - 1]
    if len(keep) < rank:
        in_dims, out_dims, kernel, strides, dil, pads = (
            tuple(t[d] for d in keep) for t in (in_dims, out_dims, kernel, strides, dil, pads))
        rank = len(keep)
    if groups > 1 and groups == Ctot == Mtot:
        # depthwise: nothing to reduce across channels, the systolic array would use one
        # column of one row; the vector unit does it (as a pooling-like window op, over 1,
        # 2 or 3 spatial dims like the pooling ops)
        from npusim.lowering.vector import lower_pool

        return lower_pool(ctx, node)
    s = ConvShape(N=Nb, C=Cg, M=Mtot // groups, groups=groups, out=out_dims, kernel=kernel,
                  strides=strides, dilations=dil, inputs=in_dims)
    # a weight stored narrower (weights.py): each output channel's C/g x kernel elements
    wf = dequantized_weight(ctx, node, node.inputs[1], tuple(range(1, len(w_shape))), 0)
    b = ctx.budget if wf is None else replace(ctx.budget, weight=wf)
    info = LayerInfo(name=node.name, op_type=node.op_type,
                     input_shapes=[g.shape(t) for t in node.inputs if t], output_shape=y_shape,
                     macs=Nb * prod(out_dims) * Mtot * Cg * prod(kernel), mapping="",
                     mapping_source="")
    tile = None
    if rank <= 2:  # ONNXim's mapping lines name two spatial dims, P and Q
        rows, cols = ((1,) + out_dims)[-2:]
        S, R = ((1,) + kernel)[-2:]
        mapping, p_is_rows = _lookup_conv_mapping(ctx, LoopCounts(N=Nb, C=Ctot, M=Mtot, S=S,
                                                                   R=R), rows, cols)
        if mapping is not None:
            inner = mapping.inner
            if inner.S < S or inner.R < R:
                raise ctx.mapping_error(node, mapping, f"it splits the {S}x{R} kernel window "
                                        f"(inner S{inner.S} R{inner.R}); npusim needs S{S} R{R}")
            if inner.N != 1:
                raise ctx.mapping_error(node, mapping, "inner N must be 1 for convolutions")
            tile_rows, tile_cols = (inner.P, inner.Q) if p_is_rows else (inner.Q, inner.P)
            box = (min(tile_rows, rows), min(tile_cols, cols))[-rank:]
            tile = ConvTile(box, min(inner.C, s.C), min(inner.M, s.M))
            ok, why = conv_tile_fits(b, s, tile)
            if not ok:
                raise ctx.mapping_error(node, mapping, why)
            info.mapping = mapping.text.strip()
            info.mapping_source = f"{ctx.mapping.path}:{mapping.line}"
    if tile is None:
        tile = choose_conv_tile(b, s)
        info.mapping = tile.mapping(s)
        info.mapping_source = "heuristic"
    info.weight_bits = ctx.precision * 8 if wf is None else wf.bits
    _emit(ctx, node, s, tile, in_dims, pads, info, b)


def _emit(ctx: LoweringContext, node: Node, s: ConvShape, tile: ConvTile, in_dims, pads,
          info: LayerInfo, b: Budget) -> None:
    from npusim.lowering.vector import box_dmas  # the one box-to-DMA cutter

    builder = ctx.builder
    layer = builder.begin_layer(info, ctx.preds(node))
    prec = ctx.precision
    dataflow = ctx.config.core.systolic.dataflow
    Ctot, Mtot = s.C * s.groups, s.M * s.groups
    K = s.kernel_positions
    y = node.outputs[0]
    wf = b.weight
    pitch = int(b.weight_bytes(s.C * K))  # one output channel's weights
    x_addr = ctx.addr(node.inputs[0])
    w_addr = ctx.addr(node.inputs[1], None if wf is None else Mtot * pitch)
    y_addr = ctx.addr(y)
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    bias = bias or ctx.folded_bias.get(node.name)
    bias_addr = ctx.bias_addr(bias) if bias else 0
    # element strides of the channels-last tensors, spatial dims then channels
    x_strides = [prod(in_dims[d + 1:]) * Ctot for d in range(len(in_dims))] + [1]
    y_strides = [prod(s.out[d + 1:]) * Mtot for d in range(len(s.out))] + [1]

    def template(box, walk, ct, mt, first, last, c0):
        """``walk``: (count, step) of the input positions loaded along each spatial dim."""
        def build():
            out = []
            counts = [n for n, _ in walk] + [ct]
            steps = [step * st for (_, step), st in zip(walk, x_strides)] + [1]
            for dma in box_dmas(0, counts, steps, prec)[0]:
                out.append(Instr.dma(True, 0, dma.offset, dma.n_outer, dma.outer_stride,
                                     dma.n_inner, dma.inner_stride, dma.run))
            inputs = list(range(len(out)))
            if first and bias:  # small: loaded before the weights
                out.append(Instr.dma(True, 2, 0, 1, 0, 1, 0, mt * ACC_BYTES, to_acc=True))
                inputs.append(len(out) - 1)
            n_mb = ceil(mt / b.width)
            weights = []  # one load per block of output channels: ct x kernel of each
            for mb in range(n_mb):
                mw = min(b.width, mt - mb * b.width)
                if wf is not None:  # the tile's channels, one run (WeightFormat's layout)
                    start, run = wf.span_bytes(c0 * K, (c0 + ct) * K)
                    out.append(Instr.dma(True, 1, mt * start + mb * b.width * run, 1, 0, 1,
                                         0, mw * run))
                else:
                    out.append(Instr.dma(True, 1, mb * b.width * s.C * K * prec, mw,
                                         s.C * K * prec, 1, 0, ct * K * prec))
                weights.append(len(out) - 1)
            stream = Stream(rows=box[-1], segs=prod(box[:-1]), deps=wait_for(out, inputs))
            blocks = [Block(min(b.height, ct - cb), min(b.width, mt - mb * b.width),
                            weights[mb])
                      for mb in range(n_mb) for _ in range(K)
                      for cb in range(0, ct, b.height)]
            emit_schedule(dataflow, out, blocks, stream)
            if last:
                last_gemm = (len(out) - 1,)
                for dma in box_dmas(3, list(box) + [mt], y_strides, prec)[0]:
                    out.append(Instr.dma(False, 3, dma.offset, dma.n_outer, dma.outer_stride,
                                         dma.n_inner, dma.inner_stride, dma.run,
                                         deps=last_gemm))
            return out
        return builder.template(("conv", layer, box, walk, ct, mt, first, last, c0), build)

    ranges = [[(o0, min(t, o - o0)) for o0 in range(0, o, t)] for o, t in zip(s.out, tile.out)]
    for n in range(s.N):
        for gi in range(s.groups):
            for starts in product(*ranges):
                box = tuple(t for _, t in starts)
                window = tuple(_window(s, in_dims[d], pads[d], d, o0, t)
                               for d, (o0, t) in enumerate(starts))
                x_pos = sum(first * st for (first, _, _), st in zip(window, x_strides))
                walk = tuple((n, step) for _, n, step in window)
                y_pos = sum(o0 * st for (o0, _), st in zip(starts, y_strides))
                for m0 in range(0, s.M, tile.m):
                    mt = min(tile.m, s.M - m0)
                    mabs = gi * s.M + m0
                    builder.begin_group()
                    for c0 in range(0, s.C, tile.c):
                        ct = min(tile.c, s.C - c0)
                        cabs = gi * s.C + c0
                        first, last = c0 == 0, c0 + ct >= s.C
                        xb = x_addr + (n * prod(in_dims) * Ctot + x_pos + cabs) * prec
                        if wf is not None:  # c0 is in the template
                            wb = w_addr + mabs * pitch
                        else:
                            wb = w_addr + (mabs * s.C + c0) * K * prec
                        bb = bias_addr + mabs * ACC_BYTES
                        yb = y_addr + (n * prod(s.out) * Mtot + y_pos + mabs) * prec
                        builder.add_tile(template(box, walk, ct, mt, first, last,
                                                  c0 if wf is not None else 0),
                                         (xb, wb, bb, yb))
    for out in node.outputs:
        ctx.producer_layer[out] = layer
