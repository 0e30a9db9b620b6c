"""ONNX graph -> Program. One lowering function per op type, in ``LOWERINGS``; each op
family's module (gemm, conv, layout, vector, attention) contributes its entries.

An op type with no entry is never silently free: :func:`lower_graph` lists every
unsupported op (with node names) before doing any work and stops.
"""

from __future__ import annotations

from typing import Callable

from npusim.config import NpuConfig
from npusim.errors import NpusimError
from npusim.frontend.graph import Graph, Node
from npusim.lowering.context import LoweringContext
from npusim.lowering.conv import lower_conv
from npusim.lowering.gemm import lower_gemm, lower_matmul
from npusim.lowering import attention, conv_transpose, einsum, movement, vector
from npusim.lowering.fusion import plan_fusions
from npusim.lowering.layout import lower_free, lower_relabel
from npusim.lowering.mapping import MappingTable
from npusim.program import Program, ProgramBuilder

LOWERINGS: dict[str, Callable[[LoweringContext, Node], None]] = {
    "MatMul": lower_matmul,
    "Gemm": lower_gemm,
    "Conv": lower_conv,
    "Reshape": lower_relabel,
    "Flatten": lower_relabel,
    "Squeeze": lower_relabel,
    "Unsqueeze": lower_relabel,
    "Identity": lower_relabel,
    "Dropout": lower_relabel,  # inference: the output is the input
    "BitCast": lower_relabel,
    **vector.LOWERINGS,
    **movement.LOWERINGS,
    **einsum.LOWERINGS,
    **conv_transpose.LOWERINGS,
    **attention.LOWERINGS,
}


def unsupported_ops(graph: Graph) -> dict[str, list[str]]:
    """Op type -> names of the nodes npusim cannot lower."""
    missing: dict[str, list[str]] = {}
    for node in graph.nodes:
        if node.op_type not in LOWERINGS:
            missing.setdefault(node.op_type, []).append(node.name)
    return missing


def lower_graph(graph: Graph, config: NpuConfig, mapping: MappingTable | None = None,
                unsupported: str = "error") -> Program:
    """Lower every node of ``graph`` into tiles for ``config``.

    Ops npusim cannot lower stop the run with a list of them, unless ``unsupported`` is
    ``"zero-cost"``: then they take no time and the program carries a warning naming them.
    """
    builder = ProgramBuilder()
    warnings = lower_into(builder, graph, config, mapping, unsupported)
    program = builder.build()
    program.warnings += warnings
    return program


def lower_into(builder: ProgramBuilder, graph: Graph, config: NpuConfig,
               mapping: MappingTable | None = None, unsupported: str = "error",
               prefix: str = "") -> list[str]:
    """Lower ``graph`` into ``builder`` (which may already hold other requests' layers);
    layer names get ``prefix``. Returns warnings for the user."""
    if unsupported not in ("error", "zero-cost"):
        raise NpusimError(f"unsupported = {unsupported!r}: must be 'error' or 'zero-cost'")
    missing = unsupported_ops(graph)
    listing = [f"  {op}: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
               for op, names in sorted(missing.items())]
    if missing and unsupported == "error":
        raise NpusimError(
            f"model '{graph.name}' uses op types npusim cannot lower yet:\n" + "\n".join(listing)
            + f"\nsupported op types: {', '.join(sorted(LOWERINGS))}"
            + "\n(--unsupported zero-cost treats them as free instead)")
    graph.check_shapes()
    ctx = LoweringContext(graph=graph, config=config, builder=builder, mapping=mapping)
    first = builder.n_layers
    fused = plan_fusions(graph)
    for name, root in fused.items():
        node = graph.node(name)
        if node.op_type == "BatchNormalization":
            ctx.folded_bias.setdefault(root, node.inputs[2])  # its shift B
        elif node.op_type == "Add":
            src = graph.node(root).outputs[0]
            ctx.folded_bias.setdefault(root, next(t for t in node.inputs if t != src))
    layer_of: dict[str, int] = {}
    for node in graph.nodes:
        if node.name in fused:  # rides in its producer's output path: same layer, free
            layer = layer_of[fused[node.name]]
            builder.layer_info(layer).fused.append(node.name)
            for out in node.outputs:
                ctx.alias(out, node.inputs[0])
                ctx.producer_layer[out] = layer
            layer_of[node.name] = layer
            continue
        before = builder.n_layers
        ctx.node_precision = node.precision
        LOWERINGS.get(node.op_type, lower_free)(ctx, node)
        ctx.node_precision = None
        if node.origin:  # results name the op the model has (QLinearConv, not Conv)
            for layer in range(before, builder.n_layers):
                builder.layer_info(layer).op_type = node.origin
        layer_of[node.name] = builder.n_layers - 1
    if prefix:
        builder.prefix_names(first, prefix)
    if not missing:
        return []
    return [f"{prefix}{graph.name}: treated as free (no cycles, no data moved), results "
            "underestimate the model:\n" + "\n".join(listing)]
