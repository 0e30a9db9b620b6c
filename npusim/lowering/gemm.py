"""MatMul and Gemm: Y[N, M] = X[N, C] . W[C, M] (+ bias), batched when the weights are.

Tiles are (n, c, m) blocks of the loop nest. The tiles of one output block that differ only
in c form a *group*: they run in order on one core and accumulate into the same
accumulator rows; the first loads the bias, the last moves the result out. Within a tile
the array walks its weight blocks reduction-outer (``lowering/array.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil, gcd, prod

import numpy as np

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.array import Block, Stream, emit_schedule
from npusim.lowering.context import LoweringContext
from npusim.lowering.mapping import LoopCounts
from npusim.lowering.tiling import (ACC_BYTES, GemmTile, WeightFormat, choose_gemm_tile,
                                    gemm_tile_fits)
from npusim.lowering.weights import dequantized_weight, nbits_weight, weight_format
from npusim.program import Instr, LayerInfo


@dataclass
class GemmProblem:
    """One (possibly batched) GEMM with DRAM byte addresses and strides."""

    N: int
    C: int
    M: int
    batch_offsets: list[tuple[int, int, int]]  # per batch: (x, w, y) byte offsets
    x_addr: int
    x_row_stride: int  # bytes between rows n (layout N x C), or between rows c if x_trans
    x_trans: bool
    w_addr: int
    w_trans: bool  # False: W stored C x M; True: stored M x C (Gemm transB)
    y_addr: int
    bias_addr: int | None = None
    bias_rows: int = 1  # 1: one bias row broadcast over N; N: a full N x M addend
    bias_batch_stride: int = 0  # bytes from one batch's bias (or N x M addend) to the next's
    # the weights' own width and layout when narrower than the layer's precision (stored
    # per output column, so w_trans); None: at the precision, as stored
    weight: WeightFormat | None = None


def emit_gemm(ctx: LoweringContext, node: Node, prob: GemmProblem, info: LayerInfo) -> None:
    """Tile the problem, emit templates and tiles, and register the layer as the producer."""
    b = ctx.budget
    prec = ctx.precision
    N, C, M = prob.N, prob.C, prob.M
    wf = prob.weight
    info.weight_bits = prec * 8 if wf is None else wf.bits
    if wf is not None:
        if not prob.w_trans:
            raise NpusimError(f"'{node.name}': a weight in {wf.bits} bits is laid out per "
                              f"output column (GemmProblem.w_trans)")
        b = replace(b, weight=wf)
        pitch = int(wf.column_bytes(C))  # one output column's bytes, headers included
    mapping = ctx.lookup_mapping(LoopCounts(N=N, C=C, M=M))
    if mapping is not None:
        tile = GemmTile(min(mapping.inner.N, N), min(mapping.inner.C, C), min(mapping.inner.M, M))
        ok, why = gemm_tile_fits(b, tile.n, tile.c, tile.m)
        if not ok:
            raise ctx.mapping_error(node, mapping, why)
        info.mapping = mapping.text.strip()
        info.mapping_source = f"{ctx.mapping.path}:{mapping.line}"
    else:
        tile = choose_gemm_tile(b, N, C, M, batch=len(prob.batch_offsets),
                                w_trans=prob.w_trans)
        info.mapping = tile.mapping(N, C, M)
        info.mapping_source = "heuristic"
    H, W = b.height, b.width
    dataflow = ctx.config.core.systolic.dataflow
    builder = ctx.builder
    layer = builder.begin_layer(info, ctx.preds(node))

    # weights load in a few chunks (up to the load queue's depth less two), so that compute,
    # which walks them in order, starts after the first. Stored C x M, a chunk is a slice
    # of the reduction spanning all m_t columns (long DRAM runs). Stored M x C (transposed),
    # each column is a run: a chunk is a group of column blocks over the whole reduction,
    # and only a tile of fewer column blocks than chunks cuts the reduction too. Its runs
    # then start at offsets of gcd(pitch, interleave) apart within the channels'
    # interleave (channels x request bytes, sequential addresses stepping channels): a
    # run at least that long keeps every channel in use (a row pitch that is a multiple
    # of the interleave starts every column on one channel), and at least a request long,
    # as a run shorter than a request costs a whole one.
    max_chunks = max(1, ctx.config.core.ld_queue - 2)
    request = ctx.config.dma.request_bytes
    min_trans_run = max(request, gcd(C * prec, ctx.config.memory.channels * request))
    min_trans_blocks = ceil(min_trans_run / (H * prec))

    def template(nt: int, ct: int, mt: int, first: bool, last: bool, c0: int):
        def build():
            rows = []
            if prob.x_trans:  # X stored C x N
                rows.append(Instr.dma(True, 0, 0, ct, prob.x_row_stride, 1, 0, nt * prec))
            else:
                rows.append(Instr.dma(True, 0, 0, nt, prob.x_row_stride, 1, 0, ct * prec))
            deps_x: tuple[int, ...] = (0,)
            if first and prob.bias_addr is not None:  # small: loaded before the weights
                nrows = 1 if prob.bias_rows == 1 else nt
                rows.append(Instr.dma(True, 2, 0, nrows, M * ACC_BYTES, 1, 0, mt * ACC_BYTES,
                                      to_acc=True))
                deps_x = (0, len(rows) - 1)
            n_cb = ceil(ct / H)
            if prob.w_trans and wf is None:  # chunks of whole columns, in column blocks
                n_mb = ceil(mt / W)
                groups = min(n_mb, max_chunks)  # column blocks split evenly
                cuts = max(1, max_chunks // n_mb)  # reduction chunks a column block
                per_chunk = max(ceil(n_cb / min(n_cb, cuts)), min_trans_blocks)
                blocks = []
                for g in range(groups):
                    mbs = range(g * n_mb // groups, (g + 1) * n_mb // groups)
                    mb0 = mbs.start
                    for cb0 in range(0, n_cb, per_chunk):
                        cbs = range(cb0, min(cb0 + per_chunk, n_cb))
                        kc = min(len(cbs) * H, ct - cb0 * H)
                        rows.append(Instr.dma(True, 1, (mb0 * W * C + cb0 * H) * prec,
                                              min(mt, mbs.stop * W) - mb0 * W, C * prec,
                                              1, 0, kc * prec))
                        blocks += [Block(min(H, ct - cb * H), min(W, mt - mb * W),
                                         len(rows) - 1) for mb in mbs for cb in cbs]
            else:
                per_chunk = ceil(n_cb / min(n_cb, max_chunks))
                chunk_of_cb = []
                for cb0 in range(0, n_cb, per_chunk):
                    c_lo = cb0 * H
                    kc = min(per_chunk * H, ct - c_lo)
                    if wf is not None:  # the chunk's columns, one run (WeightFormat's layout)
                        start, run = wf.span_bytes(c0 + c_lo, c0 + c_lo + kc)
                        rows.append(Instr.dma(True, 1, mt * start, 1, 0, 1, 0, mt * run))
                    else:
                        rows.append(Instr.dma(True, 1, c_lo * M * prec, kc, M * prec, 1, 0,
                                              mt * prec))
                    chunk_of_cb += [len(rows) - 1] * min(per_chunk, n_cb - cb0)
                blocks = [Block(min(H, ct - cb * H), min(W, mt - mb * W), chunk_of_cb[cb])
                          for cb in range(n_cb) for mb in range(ceil(mt / W))]
            emit_schedule(dataflow, rows, blocks, Stream(rows=nt, deps=deps_x))
            if last:
                rows.append(Instr.dma(False, 3, 0, nt, M * prec, 1, 0, mt * prec,
                                      deps=(len(rows) - 1,)))
            return rows
        return builder.template(("gemm", layer, nt, ct, mt, first, last, c0), build)

    for j, (xo, wo, yo) in enumerate(prob.batch_offsets):
        for n0 in range(0, N, tile.n):
            nt = min(tile.n, N - n0)
            for m0 in range(0, M, tile.m):
                mt = min(tile.m, M - m0)
                builder.begin_group()
                for c0 in range(0, C, tile.c):
                    ct = min(tile.c, C - c0)
                    first, last = c0 == 0, c0 + ct >= C
                    if prob.x_trans:
                        xb = prob.x_addr + xo + c0 * prob.x_row_stride + n0 * prec
                    else:
                        xb = prob.x_addr + xo + n0 * prob.x_row_stride + c0 * prec
                    if wf is not None:  # c0 is in the template (WeightFormat's layout)
                        wb = prob.w_addr + wo + m0 * pitch
                    elif prob.w_trans:
                        wb = prob.w_addr + wo + m0 * C * prec + c0 * prec
                    else:
                        wb = prob.w_addr + wo + c0 * M * prec + m0 * prec
                    bb = 0
                    if prob.bias_addr is not None:
                        bb = prob.bias_addr + m0 * ACC_BYTES + j * prob.bias_batch_stride
                        if prob.bias_rows != 1:
                            bb += n0 * M * ACC_BYTES
                    yb = prob.y_addr + yo + n0 * M * prec + m0 * prec
                    builder.add_tile(template(nt, ct, mt, first, last,
                                              c0 if wf is not None else 0), (xb, wb, bb, yb))
    for out in node.outputs:
        ctx.producer_layer[out] = layer


def _batch_strides(shape: tuple[int, ...], out_batch: tuple[int, ...], mat_bytes: int) -> np.ndarray:
    """Byte offset of every output batch index into a (broadcast) operand."""
    dims = (1,) * (len(out_batch) - len(shape)) + tuple(shape)
    strides = []
    acc = mat_bytes
    for d in reversed(dims):
        strides.append(acc)
        acc *= d
    strides = list(reversed(strides))
    offsets = np.zeros(out_batch, dtype=np.int64) if out_batch else np.zeros((), np.int64)
    for axis, (d, s) in enumerate(zip(dims, strides)):
        if d == 1:
            continue
        shape_b = [1] * len(out_batch)
        shape_b[axis] = d
        offsets = offsets + (np.arange(d, dtype=np.int64) * s).reshape(shape_b)
    return np.broadcast_to(offsets, out_batch).reshape(-1) if out_batch else offsets.reshape(1)


def lower_matmul(ctx: LoweringContext, node: Node) -> None:
    g = ctx.graph
    a_shape, b_shape = g.shape(node.inputs[0]), g.shape(node.inputs[1])
    y = node.outputs[0]
    if len(a_shape) == 0 or len(b_shape) == 0:
        raise NpusimError(f"MatMul '{node.name}': scalar operands are not valid for MatMul")
    a2 = a_shape if len(a_shape) >= 2 else (1,) + a_shape
    b2 = b_shape if len(b_shape) >= 2 else b_shape + (1,)
    N, C = a2[-2], a2[-1]
    C2, M = b2[-2], b2[-1]
    if C != C2:
        raise NpusimError(f"MatMul '{node.name}': inner dimensions differ ({a_shape} x {b_shape})")
    prec = ctx.precision
    if len(b2) > 2:
        # trailing batch dims over which B is broadcast are just more rows of A (their rows
        # are contiguous): B's block is then loaded once for all of them, e.g. K shared by
        # the query heads of a KV head in grouped-query attention
        n = max(len(a2), len(b2)) - 2
        ab = (1,) * (n - len(a2) + 2) + tuple(a2[:-2])
        bb = (1,) * (n - len(b2) + 2) + tuple(b2[:-2])
        k = n
        while k > 0 and bb[k - 1] == 1:
            k -= 1
        a2 = ab[:k] + (prod(ab[k:]) * N, C)
        b2 = bb[:k] + (C, M)
        N = a2[-2]
    if len(b2) == 2:
        # shared weights: every leading dim of A is just more rows
        rows = prod(a2[:-1])
        offsets = [(0, 0, 0)]
        N = rows
    else:
        out_batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
        xo = _batch_strides(a2[:-2], out_batch, N * C * prec)
        wo = _batch_strides(b2[:-2], out_batch, C * M * prec)
        yo = np.arange(prod(out_batch), dtype=np.int64) * (N * M * prec)
        offsets = list(zip(xo.tolist(), wo.tolist(), yo.tolist()))
    bias = ctx.folded_bias.get(node.name)  # a bias Add folded into this MatMul
    rank = len(b_shape)
    wf = dequantized_weight(ctx, node, node.inputs[1], (rank - 2,), rank - 1) \
        if len(b2) == 2 and rank >= 2 else None
    prob = GemmProblem(N=N, C=C, M=M, batch_offsets=offsets,
                       x_addr=ctx.addr(node.inputs[0]), x_row_stride=C * prec, x_trans=False,
                       w_addr=_weight_addr(ctx, node.inputs[1], wf, C, M),
                       w_trans=wf is not None, y_addr=ctx.addr(y),
                       bias_addr=ctx.bias_addr(bias) if bias else None, weight=wf)
    info = _info(ctx, node, len(offsets) * N * C * M)
    emit_gemm(ctx, node, prob, info)


def _weight_addr(ctx: LoweringContext, w: str, wf: WeightFormat | None, C: int,
                 M: int) -> int:
    """DRAM address of a weight: ``M`` columns of ``C`` in ``wf``'s layout, or as stored."""
    return ctx.addr(w) if wf is None else ctx.addr(w, M * int(wf.column_bytes(C)))


def lower_matmul_nbits(ctx: LoweringContext, node: Node) -> None:
    """ONNX Runtime's MatMulNBits (A [.., K] float, B packed [N, blocks, blob], scales,
    zero points, bias): a GEMM of every row of A with B, its weights read in ``bits``
    (:func:`weights.nbits_weight`)."""
    bias = node.inputs[5] if len(node.inputs) > 5 and node.inputs[5] else None
    _packed_weight_gemm(ctx, node, int(node.attrs["K"]), int(node.attrs["N"]),
                        nbits_weight(ctx, node), bias)


def lower_matmul_bnb4(ctx: LoweringContext, node: Node) -> None:
    """ONNX Runtime's MatMulBnb4 (bitsandbytes' FP4/NF4 weights: 4 bits, one absmax scale
    per ``block_size`` values, the code a table lookup as MatMulNBits' dequantization):
    MatMulNBits' GEMM with those weights. (A, B packed, absmax.)"""
    K, N, block = (int(node.attrs.get(k, 0)) for k in ("K", "N", "block_size"))
    if K < 1 or N < 1 or block < 16 or block & (block - 1):
        raise NpusimError(f"MatMulBnb4 '{node.name}': K = {K} and N = {N} must be positive "
                          f"and block_size = {block} a power of 2 from 16")
    _packed_weight_gemm(ctx, node, K, N, weight_format(ctx, 4, block, 0), None)


# MatMulFpQ4's blk_quant_type -> (block size, zero point bits) (MLAS BlkQ4Sym, BlkQ4Zp8,
# BlkQ4Sym64)
FPQ4_BLOCKS = {0: (32, 0), 1: (32, 8), 2: (64, 0)}


def lower_matmul_fpq4(ctx: LoweringContext, node: Node) -> None:
    """ONNX Runtime's MatMulFpQ4 (A, a pre-packed blob of 4-bit blocks, B's shape [K, N] as
    a constant): MatMulNBits' GEMM with the blocks of ``blk_quant_type``."""
    kind = int(node.attrs.get("blk_quant_type", 1))
    shape = ctx.graph.tensor(node.inputs[2]).value if len(node.inputs) > 2 else None
    if kind not in FPQ4_BLOCKS or shape is None or len(shape) != 2:
        raise NpusimError(f"MatMulFpQ4 '{node.name}': needs blk_quant_type in "
                          f"{sorted(FPQ4_BLOCKS)} (got {kind}) and B_shape as a constant "
                          f"[K, N]")
    K, N = (int(d) for d in shape)
    block, zero_point_bits = FPQ4_BLOCKS[kind]
    _packed_weight_gemm(ctx, node, K, N, weight_format(ctx, 4, block, zero_point_bits), None)


def _packed_weight_gemm(ctx: LoweringContext, node: Node, K: int, N: int, wf: WeightFormat,
                        bias: str | None) -> None:
    """Every row of A [.., K] times a weight of N columns of K stored packed in ``wf``."""
    a, y = node.inputs[0], node.outputs[0]
    if ctx.graph.shape(a)[-1:] != (K,):
        raise NpusimError(f"{node.op_type} '{node.name}': A has shape "
                          f"{list(ctx.graph.shape(a))}, its last dim must be K = {K}")
    rows = prod(ctx.graph.shape(a)[:-1])
    bias = bias or ctx.folded_bias.get(node.name)
    prob = GemmProblem(N=rows, C=K, M=N, batch_offsets=[(0, 0, 0)], x_addr=ctx.addr(a),
                       x_row_stride=K * ctx.precision, x_trans=False,
                       w_addr=_weight_addr(ctx, node.inputs[1], wf, K, N), w_trans=True,
                       y_addr=ctx.addr(y), bias_addr=ctx.bias_addr(bias) if bias else None,
                       weight=wf)
    emit_gemm(ctx, node, prob, _info(ctx, node, rows * K * N))


def lower_gemm(ctx: LoweringContext, node: Node) -> None:
    g = ctx.graph
    a_shape, b_shape = g.shape(node.inputs[0]), g.shape(node.inputs[1])
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise NpusimError(f"Gemm '{node.name}': inputs must be 2-D, got {a_shape} and {b_shape}")
    trans_a = bool(node.attrs.get("transA", 0))
    trans_b = bool(node.attrs.get("transB", 0))
    N, C = (a_shape[1], a_shape[0]) if trans_a else a_shape
    M = b_shape[0] if trans_b else b_shape[1]
    prec = ctx.precision
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    bias = bias or ctx.folded_bias.get(node.name)
    bias_rows = 1
    if bias is not None:
        bshape = g.shape(bias)
        bias_rows = N if (len(bshape) == 2 and bshape[0] == N and N > 1) else 1
    y = node.outputs[0]
    wf = dequantized_weight(ctx, node, node.inputs[1], (int(trans_b),), 1 - int(trans_b))
    prob = GemmProblem(N=N, C=C, M=M, batch_offsets=[(0, 0, 0)],
                       x_addr=ctx.addr(node.inputs[0]),
                       x_row_stride=(N if trans_a else C) * prec, x_trans=trans_a,
                       w_addr=_weight_addr(ctx, node.inputs[1], wf, C, M),
                       w_trans=trans_b or wf is not None, y_addr=ctx.addr(y),
                       bias_addr=ctx.bias_addr(bias) if bias else None, bias_rows=bias_rows,
                       weight=wf)
    info = _info(ctx, node, N * C * M)
    emit_gemm(ctx, node, prob, info)


def _info(ctx: LoweringContext, node: Node, macs: int) -> LayerInfo:
    g = ctx.graph
    return LayerInfo(name=node.name, op_type=node.op_type,
                     input_shapes=[g.shape(t) for t in node.inputs if t],
                     output_shape=g.shape(node.outputs[0]), macs=int(macs),
                     mapping="", mapping_source="")
