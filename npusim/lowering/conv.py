"""Conv (stride, padding, dilation, groups) on the weight-stationary array, im2col implicit.

Activations live in DRAM as NHWC, weights as ONNX stores them (M x C/g x kH x kW). A tile
covers ``p x q`` output pixels, ``c`` input and ``m`` output channels of one group: it loads
the input window those pixels need (clipped at the padded borders) and the weights, then
for every block of ``height`` rows of the flattened (c, kh, kw) reduction preloads the
weights and streams the window through the array one output row (``q`` pixels) at a time.
"""

from __future__ import annotations

from math import ceil

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.context import LoweringContext
from npusim.lowering.mapping import LoopCounts
from npusim.lowering.tiling import (ACC_BYTES, ConvTile, choose_conv_tile, conv_input_extent,
                                    conv_tile_fits)
from npusim.program import Instr, LayerInfo


def _pads(node: Node, in_hw, out_hw, k_hw, strides, dil):
    pads = list(node.attrs.get("pads", [0, 0, 0, 0]))
    auto = node.attrs.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for i in range(2):
            total = max(0, (out_hw[i] - 1) * strides[i] + (k_hw[i] - 1) * dil[i] + 1 - in_hw[i])
            small = total // 2
            pads.append(small if auto == "SAME_UPPER" else total - small)
        pads += [0, 0]
    elif auto == "VALID":
        pads = [0, 0, 0, 0]
    return pads[0], pads[1]


def lower_conv(ctx: LoweringContext, node: Node) -> None:
    g = ctx.graph
    x_shape, w_shape = g.shape(node.inputs[0]), g.shape(node.inputs[1])
    y = node.outputs[0]
    y_shape = g.shape(y)
    if len(x_shape) != 4:
        raise NpusimError(f"Conv '{node.name}': only 2-D convolutions (4-D input NCHW) are "
                          f"supported, got input shape {x_shape}")
    Nb, Ctot, H, Wd = x_shape
    Mtot, Cg, S, R = w_shape
    _, _, P, Q = y_shape
    groups = int(node.attrs.get("group", 1))
    strides = tuple(node.attrs.get("strides", [1, 1]))
    dil = tuple(node.attrs.get("dilations", [1, 1]))
    pad_t, pad_l = _pads(node, (H, Wd), (P, Q), (S, R), strides, dil)
    if groups > 1 and groups == Ctot == Mtot:
        # depthwise: nothing to reduce across channels, the systolic array would use one
        # column of one row; the vector unit does it (as a pooling-like window op)
        from npusim.lowering.vector import lower_pool

        return lower_pool(ctx, node)
    Mg = Mtot // groups
    prec = ctx.precision
    b = ctx.budget
    info = LayerInfo(name=node.name, op_type=node.op_type,
                     input_shapes=[g.shape(t) for t in node.inputs if t], output_shape=y_shape,
                     macs=Nb * P * Q * Mtot * Cg * S * R, mapping="", mapping_source="")

    mapping = ctx.lookup_mapping(LoopCounts(N=Nb, C=Ctot, M=Mtot, P=P, Q=Q, S=S, R=R))
    if mapping is not None:
        inner = mapping.inner
        if inner.S < S or inner.R < R:
            raise ctx.mapping_error(node, mapping, f"it splits the {S}x{R} kernel window "
                                    f"(inner S{inner.S} R{inner.R}); npusim needs S{S} R{R}")
        if inner.N != 1:
            raise ctx.mapping_error(node, mapping, "inner N must be 1 for convolutions")
        tile = ConvTile(min(inner.P, P), min(inner.Q, Q), min(inner.C, Cg), min(inner.M, Mg))
        ok, why = conv_tile_fits(b, tile, S, R, strides, dil)
        if not ok:
            raise ctx.mapping_error(node, mapping, why)
        info.mapping = mapping.text.strip()
        info.mapping_source = f"{ctx.mapping.path}:{mapping.line}"
    else:
        tile = choose_conv_tile(b, Nb, Cg, Mg, P, Q, S, R, strides, dil, groups)
        info.mapping = tile.mapping(Nb, Ctot, Mtot, P, Q, S, R)
        info.mapping_source = "heuristic"

    builder = ctx.builder
    layer = builder.begin_layer(info, ctx.preds(node))
    HA, WA = b.height, b.width
    x_addr, w_addr, y_addr = ctx.addr(node.inputs[0]), ctx.addr(node.inputs[1]), ctx.addr(y)
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    bias = bias or ctx.folded_bias.get(node.name)
    bias_addr = ctx.addr(bias) if bias else 0
    row_bytes = Wd * Ctot * prec  # one input image row, NHWC
    k_elems = S * R

    def template(pt, qt, ct, mt, rows, cols, first, last):
        def build():
            out = []
            if ct == Ctot:
                out.append(Instr.dma(True, 0, 0, rows, row_bytes, 1, 0, cols * Ctot * prec))
            else:
                out.append(Instr.dma(True, 0, 0, rows, row_bytes, cols, Ctot * prec, ct * prec))
            deps_x: tuple[int, ...] = (0,)
            if first and bias:  # small: loaded before the weights
                out.append(Instr.dma(True, 2, 0, 1, 0, 1, 0, mt * ACC_BYTES, to_acc=True))
                deps_x = (0, len(out) - 1)
            w_chunks = []
            for mb in range(ceil(mt / WA)):
                mw = min(WA, mt - mb * WA)
                out.append(Instr.dma(True, 1, mb * WA * Cg * k_elems * prec, mw,
                                     Cg * k_elems * prec, 1, 0, ct * k_elems * prec))
                w_chunks.append(len(out) - 1)
            K = ct * k_elems
            for mb in range(ceil(mt / WA)):
                mw = min(WA, mt - mb * WA)
                for kb in range(ceil(K / HA)):
                    kh = min(HA, K - kb * HA)
                    out.append(Instr.preload(deps=(w_chunks[mb],), drain=mb == 0 and kb == 0))
                    out.append(Instr.gemm(qt, pt, pt * qt * kh * mw, deps=deps_x))
            if last:
                last_gemm = (len(out) - 1,)
                if mt == Mtot:
                    out.append(Instr.dma(False, 3, 0, pt, Q * Mtot * prec, 1, 0, qt * Mtot * prec,
                                         deps=last_gemm))
                else:
                    out.append(Instr.dma(False, 3, 0, pt, Q * Mtot * prec, qt, Mtot * prec,
                                         mt * prec, deps=last_gemm))
            return out
        return builder.template(("conv", layer, pt, qt, ct, mt, rows, cols, first, last), build)

    for n in range(Nb):
        for gi in range(groups):
            for p0 in range(0, P, tile.p):
                pt = min(tile.p, P - p0)
                h_lo = p0 * strides[0] - pad_t
                h_hi = h_lo + conv_input_extent(pt, strides[0], dil[0], S)
                h_lo, h_hi = max(h_lo, 0), min(h_hi, H)
                for q0 in range(0, Q, tile.q):
                    qt = min(tile.q, Q - q0)
                    w_lo = q0 * strides[1] - pad_l
                    w_hi = w_lo + conv_input_extent(qt, strides[1], dil[1], R)
                    w_lo, w_hi = max(w_lo, 0), min(w_hi, Wd)
                    rows, cols = max(h_hi - h_lo, 1), max(w_hi - w_lo, 1)
                    for m0 in range(0, Mg, tile.m):
                        mt = min(tile.m, Mg - m0)
                        mabs = gi * Mg + m0
                        builder.begin_group()
                        for c0 in range(0, Cg, tile.c):
                            ct = min(tile.c, Cg - c0)
                            cabs = gi * Cg + c0
                            first, last = c0 == 0, c0 + ct >= Cg
                            xb = x_addr + ((n * H + h_lo) * Wd + w_lo) * Ctot * prec + cabs * prec
                            wb = w_addr + (mabs * Cg + c0) * k_elems * prec
                            bb = bias_addr + mabs * ACC_BYTES
                            yb = y_addr + ((n * P + p0) * Q + q0) * Mtot * prec + mabs * prec
                            builder.add_tile(template(pt, qt, ct, mt, rows, cols, first, last),
                                             (xb, wb, bb, yb))
    for out in node.outputs:
        ctx.producer_layer[out] = layer
