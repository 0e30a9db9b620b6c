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
from npusim.lowering import attention, vector
from npusim.lowering.layout import lower_relabel
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
    **vector.LOWERINGS,
    **attention.LOWERINGS,
}


def unsupported_ops(graph: Graph) -> dict[str, list[str]]:
    """Op type -> names of the nodes npusim cannot lower."""
    missing: dict[str, list[str]] = {}
    for node in graph.nodes:
        if node.op_type not in LOWERINGS:
            missing.setdefault(node.op_type, []).append(node.name)
    return missing


def lower_graph(graph: Graph, config: NpuConfig, mapping: MappingTable | None = None) -> Program:
    """Lower every node of ``graph`` into tiles for ``config``."""
    missing = unsupported_ops(graph)
    if missing:
        lines = [f"  {op}: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
                 for op, names in sorted(missing.items())]
        raise NpusimError(
            f"model '{graph.name}' uses op types npusim cannot lower yet:\n" + "\n".join(lines)
            + f"\nsupported op types: {', '.join(sorted(LOWERINGS))}")
    ctx = LoweringContext(graph=graph, config=config, builder=ProgramBuilder(), mapping=mapping)
    for node in graph.nodes:
        LOWERINGS[node.op_type](ctx, node)
    return ctx.builder.build()
