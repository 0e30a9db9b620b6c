"""Element-wise ops folded into the output path of the GEMM or convolution before them.

An NPU's accumulator drains through a small post-processing stage (bias, scale,
activation), so a Relu or Clip right after a Conv, MatMul or Gemm costs nothing extra, and
a BatchNormalization right after a Conv is folded into its weights and bias before
deployment. Such a node becomes part of its producer's layer (listed in the layer's
``fused``) when it is that producer's only consumer and reads nothing else that changes.

An integer GEMM or convolution (ConvInteger, MatMulInteger: its result is the raw int32
accumulator) is dequantized in that same stage, as an int8 compiler emits it: the Cast to
float, the Mul by the scale (one value, or one per output channel; ONNX Runtime's dynamic
quantizer computes it at run time as the input's scale times the weight's, so the layer
waits for it: ``plan_fusions``' second result), then the bias Add and the activation.

The vector unit's element-wise passes end in the same kind of stage: an activation right
after an Add, Sub, Mul, Div, Max, Min, Sum, Mean or a BatchNormalization of its own (a
ResNet's residual Add and its Relu, a DenseNet's BatchNormalization and Relu) is one more
step of that pass (Gemmini's ``tiled_resadd_auto`` takes a ``relu`` flag; ONNX Runtime's
FusedConv with a sum input Z is the same add-then-activation pass). Unlike the GEMM's, it
is not free: the vector unit spends the activation's steps on every element (the cost
table's, ``vector.ELEMENTWISE``), but the tensor is not stored and loaded again.
"""

from __future__ import annotations

from npusim.frontend.graph import Graph, Node

PRODUCERS = {"Conv", "MatMul", "Gemm", "FusedConv", "FusedGemm", "MatMulNBits"}
ACTIVATIONS = {"Relu", "Clip", "LeakyRelu"}
INTEGER_ACCUMULATORS = {"ConvInteger", "MatMulInteger"}  # origins writing the raw int32 sums
# element-wise passes of the vector unit an activation may end (their steps, then its)
VECTOR_PASSES = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "BatchNormalization"}


def _constant_inputs_only(graph: Graph, node: Node, first: str) -> bool:
    """All inputs besides ``first`` are initializers (weights, bounds, BN statistics)."""
    return all(t == first or not t or graph.tensor(t).is_initializer for t in node.inputs)


def fused_input(graph: Graph, node: Node) -> str:
    """The input through which a fusable node reads its producer's result: the first, or
    for an Add the one that is not a weight (TorchScript writes a Linear's bias first:
    ``Add(bias, MatMul(x, W))``; Add commutes)."""
    src = node.inputs[0] if node.inputs else ""
    if (node.op_type == "Add" and len(node.inputs) == 2 and src
            and src in graph.tensors and graph.tensor(src).is_initializer):
        return node.inputs[1]
    return src


def _per_output_channel(graph: Graph, root: Node, src: str, other: str) -> bool:
    """``other`` holds one value, or one per output channel of ``root`` broadcast along
    its channel axis (a GEMM's last, a convolution's second)."""
    shape, out = graph.shape(other), graph.shape(src)
    if not out or len(shape) > len(out):
        return False
    if root.op_type in ("Conv", "FusedConv"):
        aligned = (1,) * (len(out) - len(shape)) + tuple(shape)
        return len(out) >= 2 and all(d in (1, out[1]) if i == 1 else d == 1
                                     for i, d in enumerate(aligned))
    return len(shape) <= 1 and graph.tensor(other).numel in (1, out[-1])


def plan_fusions(graph: Graph) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Node name -> name of the node whose output path absorbs it; and root name -> the
    tensors computed at run time that its output path reads (its layer waits for them)."""
    fused: dict[str, str] = {}
    waits: dict[str, list[str]] = {}
    made_at = {t: i for i, n in enumerate(graph.nodes) for t in n.outputs}
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    outputs = set(graph.outputs)
    for node in graph.nodes:
        src = fused_input(graph, node)
        if not src:
            continue
        producer = graph.producer(src)
        if producer is None or src in outputs or len(graph.consumers(src)) != 1:
            continue
        root = fused.get(producer.name, producer.name)
        root_node = graph.node(root)
        root_op = root_node.op_type
        if root_op in VECTOR_PASSES:
            if node.op_type in ACTIVATIONS and _constant_inputs_only(graph, node, src):
                fused[node.name] = root  # more steps of the root's pass: vector_chains
            continue
        if root_op not in PRODUCERS:
            continue
        op = node.op_type
        other = next((t for t in node.inputs if t and t != src), "")
        # the dequantization of an integer accumulator: only Casts and scales before it
        dequantizing = (root_node.origin in INTEGER_ACCUMULATORS and all(
            graph.node(n).op_type in ("Cast", "Mul") for n, r in fused.items() if r == root))
        if dequantizing and op == "Cast":
            fused[node.name] = root
            continue
        if (dequantizing and op == "Mul" and len(node.inputs) == 2 and other
                and _per_output_channel(graph, root_node, src, other)):
            if graph.tensor(other).is_initializer:
                fused[node.name] = root
            elif made_at.get(other, len(graph.nodes)) < order[root]:  # computed before root
                fused[node.name] = root
                waits.setdefault(root, []).append(other)
            continue
        if not _constant_inputs_only(graph, node, src):
            continue
        if op in ACTIVATIONS:
            fused[node.name] = root
        elif op == "BatchNormalization" and root_op in ("Conv", "FusedConv") \
                and producer.name == root:
            fused[node.name] = root
        elif op == "Add" and len(node.inputs) == 2 and (
                (root_op in ("MatMul", "Gemm") and producer.name == root) or dequantizing):
            if _per_output_channel(graph, root_node, src, other):
                fused[node.name] = root  # a bias added in the accumulator
    return fused, waits


def vector_chains(graph: Graph, fused: dict[str, str]) -> dict[str, list[Node]]:
    """Root name -> the activations (in order) that run as further steps of its vector
    pass (``plan_fusions`` put them there: their root is an element-wise op)."""
    chains: dict[str, list[Node]] = {}
    for name, root in fused.items():
        if graph.node(root).op_type in VECTOR_PASSES:
            chains.setdefault(root, []).append(graph.node(name))
    return chains
