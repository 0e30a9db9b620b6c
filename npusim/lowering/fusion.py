"""Element-wise ops folded into the output path of the GEMM or convolution before them.

An NPU's accumulator drains through a small post-processing stage (bias, scale,
activation), so a Relu or Clip right after a Conv, MatMul or Gemm costs nothing extra, and
a BatchNormalization right after a Conv is folded into its weights and bias before
deployment. Such a node becomes part of its producer's layer (listed in the layer's
``fused``) when it is that producer's only consumer and reads nothing else that changes.

A Mul by a constant (one value, or one per output channel) and a Div by one are a scale
in that same stage (Gemmini's accumulator scale on the way out; an attention score's
1/sqrt(d)), as long as no activation came before them.

An integer GEMM or convolution (ConvInteger, MatMulInteger: its result is the raw int32
accumulator) is dequantized in that same stage, as an int8 compiler emits it: the Cast to
float, the Mul by the scale (one value, or one per output channel; ONNX Runtime's dynamic
quantizer computes it at run time as the input's scale times the weight's, so the layer
waits for it: ``plan_fusions``' second result), then the bias Add and the activation.

Element-wise nodes of one output shape that feed each other run as one pass of the vector
unit (``vector_groups``), as an NPU compiler fuses them (XLA's loop fusion, TVM's injective
fusion; Gemmini's ``tiled_resadd_auto`` takes a ``relu`` flag): every node's steps are
charged per element (the cost table, ``vector.ELEMENTWISE``), but each input is loaded once
and only the tensors read outside the group are stored. A ResNet's residual Add and its
Relu cost what ONNX Runtime's FusedConv with a sum input costs; a GELU spelled out as Div,
Erf, Add, Mul, Mul is one pass over its input, as ONNX Runtime's Gelu is.
"""

from __future__ import annotations

from dataclasses import dataclass

from npusim.frontend.graph import Graph, Node

PRODUCERS = {"Conv", "MatMul", "Gemm", "FusedConv", "FusedGemm", "MatMulNBits"}
ACTIVATIONS = {"Relu", "Clip", "LeakyRelu"}
INTEGER_ACCUMULATORS = {"ConvInteger", "MatMulInteger"}  # origins writing the raw int32 sums


def _constant_inputs_only(graph: Graph, node: Node, first: str) -> bool:
    """All inputs besides ``first`` are initializers (weights, bounds, BN statistics)."""
    return all(t == first or not t or graph.tensor(t).is_initializer for t in node.inputs)


def fused_input(graph: Graph, node: Node) -> str:
    """The input through which a fusable node reads its producer's result: the first, or
    for an Add or a Mul the one that is not a weight (TorchScript writes a Linear's bias
    first: ``Add(bias, MatMul(x, W))``; both commute)."""
    src = node.inputs[0] if node.inputs else ""
    if (node.op_type in ("Add", "Mul") and len(node.inputs) == 2 and src
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
    chain: dict[str, list[str]] = {}  # root -> the op types fused into it so far

    def fuse(node: Node, root: str) -> None:
        fused[node.name] = root
        chain.setdefault(root, []).append(node.op_type)

    made_at = {t: i for i, n in enumerate(graph.nodes) for t in n.outputs}
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    outputs = set(graph.outputs)
    for node in graph.nodes:
        src = fused_input(graph, node)
        if not src:
            continue
        producer = graph.producer(src)
        if (producer is None or src in outputs or len(graph.consumers(src)) != 1
                or node.inputs.count(src) != 1):
            continue  # (x * x, x + x: an element-wise layer of its own, not a bias or scale)
        root = fused.get(producer.name, producer.name)
        root_node = graph.node(root)
        root_op = root_node.op_type
        if root_op not in PRODUCERS:
            continue
        op = node.op_type
        other = next((t for t in node.inputs if t and t != src), "")
        # the dequantization of an integer accumulator: only Casts and scales before it
        dequantizing = (root_node.origin in INTEGER_ACCUMULATORS and all(
            o in ("Cast", "Mul") for o in chain.get(root, ())))
        if dequantizing and op == "Cast":
            fuse(node, root)
            continue
        if (dequantizing and op == "Mul" and len(node.inputs) == 2 and other
                and _per_output_channel(graph, root_node, src, other)):
            if graph.tensor(other).is_initializer:
                fuse(node, root)
            elif made_at.get(other, len(graph.nodes)) < order[root]:  # computed before root
                fuse(node, root)
                waits.setdefault(root, []).append(other)
            continue
        if not _constant_inputs_only(graph, node, src):
            continue
        if op in ACTIVATIONS:
            fuse(node, root)
        elif op == "BatchNormalization" and root_op in ("Conv", "FusedConv") \
                and producer.name == root:
            fuse(node, root)
        elif op == "Add" and len(node.inputs) == 2 and (
                (root_op in ("MatMul", "Gemm") and producer.name == root) or dequantizing):
            if _per_output_channel(graph, root_node, src, other):
                fuse(node, root)  # a bias added in the accumulator
        elif ((op == "Mul" or (op == "Div" and node.inputs[0] == src)) and len(node.inputs) == 2
              and _per_output_channel(graph, root_node, src, other)
              and not ACTIVATIONS.intersection(chain.get(root, ()))):
            fuse(node, root)  # a scale on the way out (a Div: by the reciprocal)
    return fused, waits


def immediate(graph: Graph, tensor: str) -> bool:
    """A constant of one element (an epsilon, a scale, an exponent): the vector unit takes
    it from the instruction; it is not loaded and takes no operand slot."""
    info = graph.tensors.get(tensor)
    return info is not None and info.is_initializer and info.numel == 1


@dataclass
class VectorGroup:
    """Element-wise nodes (in graph order) lowered as one pass of the vector unit."""

    nodes: list[Node]
    inputs: list[str]  # tensors made outside the group: each loaded once
    outputs: list[str]  # tensors read outside it (or graph outputs): each stored once


def vector_groups(graph: Graph, fused: dict[str, str], groupable: set[str],
                  max_tensors: int) -> dict[str, VectorGroup]:
    """First node's name -> its group, for every group of two or more nodes.

    A node of a ``groupable`` op joins the group of a node it reads from when it has the
    group's output shape and precision, and every other tensor it reads is made before the
    group's first node (so no path leaves the group and comes back: the group runs as one
    layer where its first node stands). A group reads and writes at most ``max_tensors``
    tensors (a vector tile's operand slots); the last nodes are left out until it does."""
    where = {n.name: i for i, n in enumerate(graph.nodes)}
    made_at = {t: i for i, n in enumerate(graph.nodes) for t in n.outputs}
    group_of: dict[str, int] = {}
    members: list[list[Node]] = []
    reads: list[set[str]] = []  # per group: tensors made outside it
    made: list[set[str]] = []  # per group: tensors made inside it

    def key(n: Node):
        return graph.shape(n.outputs[0]), n.precision

    for node in graph.nodes:
        if (node.op_type not in groupable or node.name in fused or not node.outputs
                or node.outputs[0] not in graph.tensors or graph.tensor(node.outputs[0]).numel == 0):
            continue
        ins = [t for t in node.inputs if t and not immediate(graph, t)]
        near = []  # the groups it reads from, of its shape and precision
        for t in ins:
            p = graph.producer(t)
            g = group_of.get(p.name, -1) if p is not None else -1
            if g >= 0 and g not in near and key(members[g][0]) == key(node):
                near.append(g)
        # all of them together (a GELU's x * 0.5 and its erf branch), else the first that fits
        home = -1
        for joined in ([near] if len(near) > 1 else []) + [[g] for g in near]:
            first = min(where[members[g][0].name] for g in joined)
            inside = set().union(*(made[g] for g in joined))
            outside = set().union(*(reads[g] for g in joined), ins) - inside
            if all(made_at.get(u, -1) < first for u in outside) and len(outside) < max_tensors:
                home = joined[0]
                for g in joined[1:]:  # merged into the first, in graph order
                    members[home] = sorted(members[home] + members[g], key=lambda n: where[n.name])
                    made[home] |= made[g]
                    for n in members[g]:
                        group_of[n.name] = home
                    members[g], reads[g], made[g] = [], set(), set()
                reads[home] = outside
                break
        if home < 0:
            home = len(members)
            members.append([])
            reads.append({u for u in ins})
            made.append(set())
        members[home].append(node)
        group_of[node.name] = home
        made[home] |= set(node.outputs)

    graph_outputs = set(graph.outputs)
    groups: dict[str, VectorGroup] = {}
    for nodes in members:
        while len(nodes) > 1:
            names = {n.name for n in nodes}
            inside = {t for n in nodes for t in n.outputs}
            inputs = list(dict.fromkeys(t for n in nodes for t in n.inputs
                                        if t and t not in inside and not immediate(graph, t)))
            outputs = [t for n in nodes for t in n.outputs if t and (
                t in graph_outputs or any(c.name not in names for c in graph.consumers(t)))]
            if len(inputs) + len(outputs) <= max_tensors:
                groups[nodes[0].name] = VectorGroup(nodes, inputs, outputs)
                break
            nodes = nodes[:-1]
    return groups
