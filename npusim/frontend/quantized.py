"""Quantized ops as their float counterparts computing in int8.

On an NPU a quantized convolution is the same array work as a float one on 1-byte
elements: the zero points are subtracted and the requantization (scale, zero point,
saturation) applied in the accumulator's output path, which costs nothing extra (as for a
bias or an activation). So ``QLinearConv`` becomes a ``Conv`` node over its data inputs
(x, w, bias) with ``precision = 1``, ``MatMulInteger`` a ``MatMul`` and so on; the node keeps
its name, and results show the original op type (``Node.origin``). Scales and zero points
are not loaded. ``DynamicQuantizeMatMul`` quantizes its float input on the fly; that pass is
not charged (a DynamicQuantizeLinear node in the graph is).
"""

from __future__ import annotations

from dataclasses import replace

from npusim.frontend.graph import Node

INT8 = 1  # bytes per element of the quantized ops

# op type -> (float op type, indices of its data inputs; None: every third from 2, as
# QLinearConcat's (X, X_scale, X_zero_point) triples after Y_scale, Y_zero_point)
QUANTIZED: dict[str, tuple[str, tuple[int, ...] | None]] = {
    "ConvInteger": ("Conv", (0, 1)),
    "QLinearConv": ("Conv", (0, 3, 8)),
    "MatMulInteger": ("MatMul", (0, 1)),
    "QLinearMatMul": ("MatMul", (0, 3)),
    # ONNX Runtime's contrib ops (its quantization tools and QDQ fusions write them)
    "QGemm": ("Gemm", (0, 3, 6)),
    "MatMulIntegerToFloat": ("MatMul", (0, 1)),
    "DynamicQuantizeMatMul": ("MatMul", (0, 1)),
    "QLinearAdd": ("Add", (0, 3)),
    "QLinearMul": ("Mul", (0, 3)),
    "QLinearSigmoid": ("Sigmoid", (0,)),
    "QLinearLeakyRelu": ("LeakyRelu", (0,)),
    "QLinearSoftmax": ("Softmax", (0,)),
    "QLinearAveragePool": ("AveragePool", (0,)),
    "QLinearGlobalAveragePool": ("GlobalAveragePool", (0,)),
    "QLinearConcat": ("Concat", None),
}


def as_float_ops(nodes: list[Node]) -> list[Node]:
    """``nodes`` with every quantized op replaced by its float counterpart (see above)."""
    out = []
    for node in nodes:
        entry = QUANTIZED.get(node.op_type)
        if entry is None:
            out.append(node)
            continue
        op, keep = entry
        picks = range(2, len(node.inputs), 3) if keep is None else keep
        inputs = [node.inputs[i] if i < len(node.inputs) else "" for i in picks]
        while inputs and not inputs[-1]:
            inputs.pop()
        out.append(replace(node, op_type=op, domain="", inputs=inputs,
                           outputs=node.outputs[:1], origin=node.op_type, precision=INT8))
    return out


__all__ = ["QUANTIZED", "as_float_ops"]
