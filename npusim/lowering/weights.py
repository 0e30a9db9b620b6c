"""Weights stored narrower than the layer computes: the :class:`~.tiling.WeightFormat` a
GEMM or convolution reads its weight operand in.

Three sources, one format (width, blocks along the reduction sharing a scale, and the bits
of each block's scale and zero point):

- ``com.microsoft.MatMulNBits`` (ONNX Runtime's weight-only quantization, and
  onnxruntime-genai's model builder): ``bits`` (2, 4, 8) packed along K per output column,
  a scale per ``block_size`` elements of a column, optional zero points (packed at
  ``bits``, or floats).
- A ``DequantizeLinear`` of a constant (per tensor, per axis or blocked; the QDQ form the
  same quantizer writes with ``quant_format=QDQ``) feeding a float op: the front end folds
  it into the weight and keeps how the file stores it (``TensorInfo.stored``). An int8 QDQ
  unit (``frontend.quantized``) already computes at its width; only float consumers,
  whose activation is not quantized, get a format here.
- ``com.microsoft.GatherBlockQuantized`` (the same quantizer with ``op_types_to_quantize``
  including ``Gather``, and onnxruntime-genai's builder for tied embeddings): an embedding
  table in int4 / uint4, uint8 packed at ``bits`` (2, 4, 8), FP8 or FP4, blocked along the
  row, a scale per block, optional zero points (of the data's type). A gathered row is
  read like one output column of a GEMM: a row of ``D`` elements is one WeightFormat
  column.

Scales are float values, read at the layer's precision; zero points at their stored width.
The weight is read at its stored width, but never wider than the layer computes (the
config's precision rules as for float weights).
"""

from __future__ import annotations

from math import prod

from onnx import TensorProto

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.frontend.quantized import STORED_BITS
from npusim.lowering.tiling import WeightFormat

NBITS = (2, 4, 8)  # MatMulNBits widths lowered (ONNX Runtime's kernels take these)
UINT8 = TensorProto.UINT8  # MatMulNBits' packed zero points
UINT4, INT4 = TensorProto.UINT4, TensorProto.INT4
FLOATS = (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
          TensorProto.FLOAT8E5M2FNUZ, TensorProto.FLOAT4E2M1)


def weight_format(ctx, bits: int, block: int, zero_point_bits: int) -> WeightFormat:
    """A weight stored in ``bits``, with a scale (at the layer's precision) and a zero point
    of ``zero_point_bits`` per ``block`` reduction elements of a column (0: none per column),
    read never wider than the layer computes."""
    prec_bits = ctx.precision * 8
    header = prec_bits + zero_point_bits if block else 0
    return WeightFormat(min(bits, prec_bits), block, header)


def dequantized_weight(ctx, node: Node, tensor: str, k_axes: tuple[int, ...],
                       n_axis: int) -> WeightFormat | None:
    """The format a float ``node`` reads its constant weight ``tensor`` in when the file
    stores it quantized; None otherwise. ``k_axes``: the weight's reduction axes (in the
    order the reduction walks them), ``n_axis``: its output axis. Only scales of one
    output column each are loaded with the weights (as block headers); a scale several
    columns share (per tensor, or one per reduction row, K values at most) is not
    charged."""
    info = ctx.graph.tensors.get(tensor)
    stored = info.stored if info is not None else None
    if stored is None or node.precision is not None:
        return None
    block = prod(stored.blocks[a] for a in k_axes)
    if stored.blocks[n_axis] != 1:
        block = 0
    return weight_format(ctx, stored.bits, block, stored.zero_point_bits)


def nbits_weight(ctx, node: Node) -> WeightFormat:
    """MatMulNBits' weight format, after checking its attributes against its inputs."""
    g = ctx.graph
    a = node.attrs
    where = f"MatMulNBits '{node.name}'"
    bits, block, K, N = (int(a.get(k, 0)) for k in ("bits", "block_size", "K", "N"))
    if bits not in NBITS:
        raise NpusimError(f"{where}: bits = {bits}; npusim lowers bits = 2, 4 or 8")
    if block < 1 or K < 1 or N < 1:
        raise NpusimError(f"{where}: block_size, K and N must be positive, got "
                          f"block_size={block}, K={K}, N={N}")
    ins = node.inputs + [""] * (6 - len(node.inputs))
    if ins[4]:
        raise NpusimError(f"{where}: g_idx (act-order groups) is not supported; npusim "
                          f"lowers MatMulNBits with contiguous blocks (no g_idx input)")
    blocks, blob = -(-K // block), -(-block * bits // 8)
    if g.shape(ins[1]) not in ((N, blocks, blob), (N, blocks * blob)):
        raise NpusimError(f"{where}: B has shape {list(g.shape(ins[1]))}; K={K}, N={N}, "
                          f"bits={bits}, block_size={block} need [{N}, {blocks}, {blob}]")
    if g.shape(ins[0])[-1:] != (K,):
        raise NpusimError(f"{where}: A has shape {list(g.shape(ins[0]))}, its last dim "
                          f"must be K = {K}")
    zero_point_bits = 0
    if ins[3]:
        zero_point_bits = bits if g.tensor(ins[3]).elem_type == UINT8 else ctx.precision * 8
    return weight_format(ctx, bits, block, zero_point_bits)


EMBEDDING_FORM = ("gather_axis = 0 with quantize_axis = the table's last axis (rank >= 2): "
                  "whole rows gathered, blocked along the row")


def embedding_form(graph, node: Node) -> bool:
    """Whether a GatherBlockQuantized ``node`` gathers rows of a table blocked along them."""
    r = len(graph.shape(node.inputs[0]))
    return (r >= 2 and int(node.attrs.get("gather_axis", 0)) % r == 0
            and int(node.attrs.get("quantize_axis", 1)) % r == r - 1)


def gather_block_weight(ctx, node: Node) -> tuple[WeightFormat, int]:
    """GatherBlockQuantized's table format and ``D``, its row's length along the quantize
    axis, after checking the attributes against the inputs. npusim lowers the embedding
    form: ``gather_axis`` 0 and ``quantize_axis`` the last axis (each gathered row holds
    whole blocks)."""
    g = ctx.graph
    a = node.attrs
    where = f"GatherBlockQuantized '{node.name}'"
    ins = node.inputs + [""] * (4 - len(node.inputs))
    data = g.tensor(ins[0])
    shape, elem = data.shape, data.elem_type
    r = len(shape)
    if not embedding_form(g, node):
        raise NpusimError(f"{where}: gather_axis = {a.get('gather_axis', 0)}, quantize_axis"
                          f" = {a.get('quantize_axis', 1)} on a rank-{r} table; npusim lowers "
                          f"{EMBEDDING_FORM}")
    if elem == UINT8:
        bits = int(a.get("bits", 4))
        if bits not in NBITS:
            raise NpusimError(f"{where}: bits = {bits}; npusim lowers uint8 data with bits = "
                              f"2, 4 or 8")
        D = shape[-1] * 8 // bits
    elif elem in (UINT4, INT4) or elem in FLOATS:
        bits, D = STORED_BITS[elem], shape[-1]
    else:
        raise NpusimError(f"{where}: data has element type {elem}; GatherBlockQuantized "
                          f"takes int4, uint4, uint8 (packed at bits), FP8 or FP4")
    block = int(a.get("block_size", 128))
    if block == 0 and elem in FLOATS:
        block = D  # one block per row
    elif block < 16 or block & (block - 1):
        raise NpusimError(f"{where}: block_size = {block}; it must be a power of 2 of at "
                          f"least 16 (0: one block per row, FP8 and FP4 data only)")
    scales = g.shape(ins[2])
    per_row = tuple(shape[:-1]) + (-(-D // block),)
    if scales != per_row and not (elem in FLOATS and len(scales) == r and scales[-1] ==
                                  per_row[-1] and all(s in (1, d) for s, d in
                                                      zip(scales, per_row))):
        raise NpusimError(f"{where}: scales have shape {list(scales)}; a table of "
                          f"{list(shape[:-1]) + [D]} in blocks of {block} needs "
                          f"{list(per_row)}")
    if scales != per_row:  # shared by the rows (FP8 / FP4): held once, not per row
        return weight_format(ctx, bits, 0, 0), D
    return weight_format(ctx, bits, block, bits if ins[3] else 0), D


__all__ = ["EMBEDDING_FORM", "NBITS", "dequantized_weight", "embedding_form",
           "gather_block_weight", "nbits_weight"]
