"""Quantized models as an int8 compiler reads them: float ops computing in int8.

QOperator format. On an NPU a quantized convolution is the same array work as a float
one on 1-byte elements: the zero points are subtracted and the requantization (scale,
zero point, saturation) applied in the accumulator's output path, which costs nothing
extra (as for a bias or an activation). So ``QLinearConv`` becomes a ``Conv`` node over
its data inputs (x, w, bias) with ``precision = 1``, ``MatMulInteger`` a ``MatMul`` and so
on; the node keeps its name, and results show the original op type (``Node.origin``).
Scales and zero points are not loaded. ``DynamicQuantizeMatMul`` quantizes its float input
on the fly; that pass is not charged (a DynamicQuantizeLinear node in the graph is).

QDQ format (what ``quantize_static`` writes by default, and PyTorch / TensorRT QAT flows):
the ops stay float and every quantized tensor is marked by a QuantizeLinear ->
DequantizeLinear pair. :func:`fold_qdq` reads the pairs by structure, as ONNX Runtime's
QDQ node-unit selectors do (scale and zero-point values are weight data, never read):

- A DequantizeLinear of a constant is the constant stored quantized; the front end folds
  it into the weight (:mod:`.shapes`) and records how the file stores it
  (:func:`stored_after`: bits, the blocks sharing a scale, zero points). A unit reads it
  at the unit's width; a float op (its activation not quantized: weight-only
  quantization) reads it at the stored width (``lowering/weights.py``).
- A *QDQ unit* is an op of ``QDQ_UNITS`` (the ops ONNX Runtime fuses into an integer op)
  whose float-valued inputs are all quantized activations (read through a DQ, or stored as
  integers) or constants, and whose output is quantized again (a Q after it; MatMul, Gemm
  and ArgMax may write a float). It computes at the width of its quantized data (int8: 1
  byte), exactly as its QOperator form (QLinearConv, QGemm, ...) and ORT's fusion
  (``--optimize extended``) give. A Relu or Clip between the op and its Q belongs to the
  unit (the Q's range clips it; ORT's ReluQuantFusion removes it and npusim fuses it into
  a conv or GEMM anyway).
- A Q whose producer is a unit is that unit's requantization (free, in its output path); a
  DQ all of whose readers compute in int8 (units, QOperator ops) is free: they read the
  integers. Both are dropped and listed in the unit's ``fused``.
- Any other op stays float, at the config's precision: ORT keeps ReduceMean, LayerNorm,
  Gelu, ... in float between a DQ and a Q, so an int8 compiler must convert there. A DQ
  with a float reader, a Q of a float producer (a model input, a float op),
  DynamicQuantizeLinear stay, as the conversions they are (the lowering charges them on
  a config that computes in a wider type than int8: ``lowering.vector``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from npusim.frontend.graph import Node, Stored, TensorInfo

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

# ONNX Runtime's QDQ node units: the ops its QDQ selectors fuse with their DQ inputs and Q
# output into one integer op (qdq_selector_action_transformer.cc) -> whether the unit
# needs a Q after it. MatMul and Gemm may write a float (MatMulIntegerToFloat, QGemm
# with a float Y); ArgMax writes indices.
QDQ_UNITS: dict[str, bool] = {
    "Conv": True, "MatMul": False, "Gemm": False,
    "Add": True, "Mul": True, "Where": True, "Concat": True, "Split": True,
    "AveragePool": True, "GlobalAveragePool": True, "LeakyRelu": True, "Sigmoid": True,
    "Softmax": True, "ArgMax": False,
    # ops that move or select values without changing them (ORT's "drop" rules)
    **dict.fromkeys(["Expand", "Flatten", "Gather", "GatherElements", "Reshape", "Slice",
                     "Squeeze", "Tile", "Transpose", "Unsqueeze", "Resize", "MaxPool",
                     "ReduceMax", "ReduceMin"], True),
}
# activations between a unit and its Q, clipped by the Q's range
CLIPPED_BY_Q = ("Relu", "Clip")
FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
# what a Q writes and a DQ reads: 8- and 16-bit integers, float8, 4-bit types
QUANTIZED_TYPES = {2, 3, 4, 5, 17, 18, 19, 20, 21, 22, 23}


# bits per element of the integer and small-float types a DequantizeLinear reads
STORED_BITS = {2: 8, 3: 8, 4: 16, 5: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4,
               25: 2, 26: 2}


def stored_after(node, ins, shape) -> Stored | None:
    """How the file stores the constant a folded ``node`` (an ``onnx.NodeProto``; ``ins``:
    what the shape pass knows of its inputs) makes, when it dequantizes one: a
    DequantizeLinear of a quantized constant (per tensor, per axis or blocked), or a
    Transpose or Identity of such a constant (a deployment stores the result quantized
    too). None otherwise."""
    if not shape or not ins or ins[0] is None:
        return None
    op = node.op_type
    if op == "Identity":
        return ins[0].stored
    if op == "Transpose" and ins[0].stored is not None:
        perm = [a.ints for a in node.attribute if a.name == "perm"]
        perm = list(perm[0]) if perm else list(reversed(range(len(shape))))
        return replace(ins[0].stored, blocks=tuple(ins[0].stored.blocks[p] for p in perm))
    if op != "DequantizeLinear" or ins[0].elem_type not in STORED_BITS:
        return None
    scale = ins[1].shape if len(ins) > 1 and ins[1] is not None else None
    if scale is None:
        return None
    attrs = {a.name: a.i for a in node.attribute}
    rank = len(shape)
    axis = attrs.get("axis", 1)
    axis = axis + rank if axis < 0 else axis
    if len(scale) == rank and rank > 1 or attrs.get("block_size", 0):  # blocked
        blocks = tuple(-(-d // max(1, s)) for d, s in zip(shape, scale))
    elif len(scale) == 1 and scale[0] > 1 and 0 <= axis < rank:  # one scale per index
        blocks = tuple(1 if a == axis else d for a, d in enumerate(shape))
    else:  # one scale for the tensor
        blocks = tuple(shape)
    zero = len(ins) > 2 and ins[2] is not None and len(node.input) > 2 and node.input[2]
    bits = STORED_BITS[ins[0].elem_type]
    return Stored(bits, blocks, bits if zero else 0)


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


@dataclass
class _Unit:
    width: int  # bytes per element of its quantized data
    clipped: list[Node] = field(default_factory=list)  # Relu/Clip before its Q
    requantize: list[Node] = field(default_factory=list)  # the Q after it


def fold_qdq(nodes: list[Node], tensors: dict[str, TensorInfo],
             outputs: list[str]) -> list[Node]:
    """``nodes`` (after :func:`as_float_ops`) with the QDQ format read as int8 ops (see the
    module docstring): units get their precision, free Q/DQ nodes are dropped."""
    readers: dict[str, list[Node]] = {}
    for n in nodes:
        for t in dict.fromkeys(n.inputs):
            if t:
                readers.setdefault(t, []).append(n)
    graph_outputs = set(outputs)

    def elem(t: str) -> int:
        return tensors[t].elem_type if t in tensors else 0

    def constant(t: str) -> bool:
        return t in tensors and tensors[t].is_initializer

    def stored_quantized(t: str) -> bool:
        return t in tensors and not constant(t) and elem(t) in QUANTIZED_TYPES

    # DQ output -> the quantized activation it reads
    views = {n.outputs[0]: n.inputs[0] for n in nodes
             if n.op_type == "DequantizeLinear" and stored_quantized(n.inputs[0])}

    def q_readers(t: str, unit: _Unit) -> bool:
        """Every reader of ``t`` is a Q, or a Relu/Clip whose readers are (collected)."""
        if t in graph_outputs or not readers.get(t):
            return False
        for r in readers[t]:
            if r.op_type == "QuantizeLinear" and r.inputs[0] == t:
                unit.requantize.append(r)
            elif (r.op_type in CLIPPED_BY_Q and r.inputs[0] == t and r.precision is None
                  and all(not i or constant(i) for i in r.inputs[1:])):
                unit.clipped.append(r)
                if not q_readers(r.outputs[0], unit):
                    return False
            else:
                return False
        return True

    units: dict[str, _Unit] = {}
    for n in nodes:
        if (n.precision is not None or n.op_type not in QDQ_UNITS
                or n.domain not in ("", "ai.onnx")):
            continue
        data = [t for t in n.inputs if elem(t) in FLOAT_TYPES | QUANTIZED_TYPES]
        quantized = [t for t in data if t in views or stored_quantized(t)]
        if not quantized or not all(t in quantized or constant(t) for t in data):
            continue  # no quantized input, or a float activation among them
        unit = _Unit(max(tensors[views.get(t, t)].itemsize for t in quantized))
        requantized = [stored_quantized(t) or q_readers(t, unit) for t in n.outputs if t]
        if QDQ_UNITS[n.op_type] and not all(requantized):
            continue
        if not all(requantized):  # a float output: the Qs it feeds convert
            unit.clipped, unit.requantize = [], []
        units[n.name] = unit

    def int8(n: Node) -> bool:  # reads quantized tensors as integers
        return n.name in units or n.origin in QUANTIZED

    dropped: set[str] = set()  # outputs of the Q/DQ nodes dropped
    absorbed: dict[str, list[str]] = {}  # unit name -> the DQ and Q nodes it absorbs
    for n in nodes:
        out = n.outputs[0] if n.outputs else ""
        users = readers.get(out, [])
        if out in views and users and out not in graph_outputs and all(map(int8, users)):
            dropped.add(out)
            for u in users:
                if u.name in units:
                    absorbed.setdefault(u.name, []).append(n.name)
    rename: dict[str, str] = {}  # a dropped Q's output -> the unit output it requantizes
    for name, unit in units.items():
        for q in unit.requantize:
            if q.outputs[0] not in graph_outputs:
                rename[q.outputs[0]] = q.inputs[0]
                dropped.add(q.outputs[0])
                absorbed.setdefault(name, []).append(q.name)
    in_unit = {c.name: u for u in units.values() for c in u.clipped}

    def resolve(t: str) -> str:
        while t in rename:
            t = rename[t]
        return t

    result = []
    for n in nodes:
        if n.outputs and n.outputs[0] in dropped:
            continue
        inputs = [resolve(views[t]) if t in views and int8(n) else resolve(t)
                  for t in n.inputs]
        if n.name in units:
            n = replace(n, inputs=inputs, precision=units[n.name].width,
                        fused=n.fused + absorbed.get(n.name, []))
        elif n.name in in_unit:
            n = replace(n, inputs=inputs, precision=in_unit[n.name].width)
        elif inputs != n.inputs:
            n = replace(n, inputs=inputs)
        result.append(n)
    return result


__all__ = ["QDQ_UNITS", "QUANTIZED", "STORED_BITS", "as_float_ops", "fold_qdq", "stored_after"]
