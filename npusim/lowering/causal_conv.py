"""CausalConvWithState (opset 27): the stateful causal depthwise 1-D convolution of Gated
DeltaNet (Qwen3.5) and Mamba, fused from the Concat + Conv + Slice it replaces.

``name``          the depthwise convolution over the sequence on the vector unit, as a
                  depthwise Conv (``vector.lower_pool``): per output element one mul and
                  one add per tap, [an add of the bias], [the fused activation: silu /
                  swish = sigmoid, mul]. The k - 1 positions before the sequence come from
                  ``past_state`` where given (its rows are loaded by the tiles whose
                  windows reach them), else they are zero padding; the input is never
                  copied behind the state, which is what the fusion saves.
``name/state``    ``present_state``, the last k - 1 positions of past state and input
                  together, copied by DMA (when something reads it): the input's last rows,
                  and for a sequence shorter than k - 1 the state's last rows (zeros without
                  one) before them.

Activations are channels-last in memory (B, L, C), as npusim's convolutions and pooling
read and write them; the states likewise (B, k - 1, C).
"""

from __future__ import annotations

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.context import LoweringContext
from npusim.lowering.vector import ELEMENTWISE, LayerEmitter, View, emit_views, lower_pool

ACTIVATIONS = {"none": [], "silu": ELEMENTWISE["Swish"], "swish": ELEMENTWISE["Swish"]}


def lower_causal_conv(ctx: LoweringContext, node: Node) -> None:
    g = ctx.graph
    ins = list(node.inputs) + [""] * (4 - len(node.inputs))
    x, w, bias, past = ins[:4]
    y = node.outputs[0]
    present = node.outputs[1] if len(node.outputs) > 1 else ""
    x_shape, w_shape = g.shape(x), g.shape(w)
    if len(x_shape) != 3 or len(w_shape) != 3 or w_shape[0] != x_shape[1] or w_shape[1] != 1:
        raise NpusimError(f"CausalConvWithState '{node.name}': needs an input (batch, "
                          f"channels, length) and depthwise weights (channels, 1, k); got "
                          f"{x_shape} and {w_shape}")
    act = node.attrs.get("activation", "none")  # (the loader decodes string attributes)
    if act not in ACTIVATIONS:
        raise NpusimError(f"CausalConvWithState '{node.name}': activation '{act}' is not "
                          f"one of {', '.join(ACTIVATIONS)}")
    B, C, L = x_shape
    k = w_shape[2]
    # (the past state among the inputs: the layer waits for whatever writes it)
    conv = Node(name=node.name, op_type=node.op_type, inputs=[x, w, bias, past], outputs=[y],
                attrs={"pads": [k - 1, 0], "group": C})
    lower_pool(ctx, conv, carried=past or None, after=ACTIVATIONS[act])
    if k > 1 and present and (g.consumers(present) or present in g.outputs):
        _copy_state(ctx, node, x, past, present, B, C, L, k - 1)


def _copy_state(ctx, node, x, past, present, B, C, L, keep) -> None:
    """present_state = the last ``keep`` positions of past state and input together."""
    em = LayerEmitter(ctx, Node(f"{node.name}/state", node.op_type,
                                inputs=[x] + ([past] if past else []), outputs=[present]),
                      "DMA copy")
    out = ctx.addr(present)
    from_x = min(L, keep)
    emit_views(em, (B, from_x, C), [View(ctx.addr(x), [L * C, C, 1], (L - from_x) * C)],
               [View(out, [keep * C, C, 1], (keep - from_x) * C)], [])
    if from_x < keep:  # a sequence shorter than the state: its older part moves up
        older = keep - from_x
        sources = [View(ctx.addr(past), [keep * C, C, 1], from_x * C)] if past else []
        emit_views(em, (B, older, C), sources, [View(out, [keep * C, C, 1])], [])
    em.finish()


LOWERINGS: dict = {"CausalConvWithState": lower_causal_conv}
