"""Element-wise ops folded into the output path of the GEMM or convolution before them.

An NPU's accumulator drains through a small post-processing stage (bias, scale,
activation), so a Relu or Clip right after a Conv, MatMul or Gemm costs nothing extra, and
a BatchNormalization right after a Conv is folded into its weights and bias before
deployment. Such a node becomes part of its producer's layer (listed in the layer's
``fused``) when it is that producer's only consumer and reads nothing else that changes.
"""

from __future__ import annotations

from npusim.frontend.graph import Graph, Node

PRODUCERS = {"Conv", "MatMul", "Gemm", "FusedConv", "FusedGemm"}
ACTIVATIONS = {"Relu", "Clip", "LeakyRelu"}


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


def plan_fusions(graph: Graph) -> dict[str, str]:
    """Node name -> name of the node whose output path absorbs it."""
    fused: dict[str, str] = {}
    outputs = set(graph.outputs)
    for node in graph.nodes:
        src = fused_input(graph, node)
        if not src:
            continue
        producer = graph.producer(src)
        if producer is None or src in outputs or len(graph.consumers(src)) != 1:
            continue
        root = fused.get(producer.name, producer.name)
        root_op = graph.node(root).op_type
        if root_op not in PRODUCERS or not _constant_inputs_only(graph, node, src):
            continue
        op = node.op_type
        if op in ACTIVATIONS:
            fused[node.name] = root
        elif op == "BatchNormalization" and root_op in ("Conv", "FusedConv") \
                and producer.name == root:
            fused[node.name] = root
        elif op == "Add" and root_op in ("MatMul", "Gemm") and producer.name == root:
            other = node.inputs[1] if node.inputs[0] == src else node.inputs[0]
            out_cols = graph.shape(src)[-1] if graph.shape(src) else 0
            if len(graph.shape(other)) <= 1 and graph.tensor(other).numel in (1, out_cols):
                fused[node.name] = root  # a bias added in the accumulator
    return fused
