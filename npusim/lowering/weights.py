"""Weights stored narrower than the layer computes: the :class:`~.tiling.WeightFormat` a
GEMM or convolution reads its weight operand in.

Two sources, one format (width, blocks along the reduction sharing a scale, and the bits
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

Scales are float values, read at the layer's precision; zero points at their stored width.
The weight is read at its stored width, but never wider than the layer computes (the
config's precision rules as for float weights).
"""

from __future__ import annotations

from math import prod

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.tiling import WeightFormat

NBITS = (2, 4, 8)  # MatMulNBits widths lowered (ONNX Runtime's kernels take these)
UINT8 = 2  # TensorProto.UINT8: MatMulNBits' packed zero points


def _format(ctx, bits: int, block: int, zero_point_bits: int) -> WeightFormat:
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
    return _format(ctx, stored.bits, block, stored.zero_point_bits)


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
    return _format(ctx, bits, block, zero_point_bits)


__all__ = ["NBITS", "dequantized_weight", "nbits_weight"]
