"""Layout ops that only relabel a tensor: no data moves, no cycles.

Reshape, Flatten, Squeeze, Unsqueeze and Identity keep the bytes where they are (npusim's
DRAM layout is row-major in the tensor's own shape), so the output aliases the input. They
still appear as layers (with zero cycles) so per-layer results list every node.
"""

from __future__ import annotations

from npusim.frontend.graph import Node
from npusim.lowering.context import LoweringContext
from npusim.program import LayerInfo


def lower_relabel(ctx: LoweringContext, node: Node, how: str = "relabel (no data moved)"
                  ) -> None:
    g = ctx.graph
    src = node.inputs[0]
    for out in node.outputs:
        ctx.alias(out, src)
    info = LayerInfo(name=node.name, op_type=node.op_type,
                     input_shapes=[g.shape(t) for t in node.inputs if t],
                     output_shape=g.shape(node.outputs[0]), macs=0,
                     mapping="", mapping_source=how)
    layer = ctx.builder.begin_layer(info, ctx.preds(node))
    for out in node.outputs:
        ctx.producer_layer[out] = layer


def lower_free(ctx: LoweringContext, node: Node,
               how: str = "unsupported: treated as free") -> None:
    """An op npusim cannot lower, treated as free on request (``--unsupported zero-cost``):
    its outputs get DRAM space, it takes no cycles and moves no data."""
    g = ctx.graph
    for out in node.outputs:
        if out:
            ctx.addr(out)
    info = LayerInfo(name=node.name, op_type=node.op_type,
                     input_shapes=[g.shape(t) for t in node.inputs if t and t in g.tensors],
                     output_shape=g.shape(node.outputs[0]) if node.outputs[0] in g.tensors else (),
                     macs=0, mapping="", mapping_source=how)
    layer = ctx.builder.begin_layer(info, ctx.preds(node))
    for out in node.outputs:
        ctx.producer_layer[out] = layer


def lower_empty(ctx: LoweringContext, node: Node) -> None:
    """An op whose outputs have no elements (a zero-sized axis): no tiles."""
    lower_free(ctx, node, "empty output (nothing to compute)")
