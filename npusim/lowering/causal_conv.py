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

from math import prod

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.context import LoweringContext
from npusim.lowering.vector import ELEMENTWISE, LayerEmitter, View, emit_views, lower_pool
from npusim.program import LayerInfo

ACTIVATIONS = {"none": [], "silu": ELEMENTWISE["Swish"], "swish": ELEMENTWISE["Swish"]}


def lower_causal_conv(ctx: LoweringContext, node: Node, *,
                      write_state: bool | None = None) -> None:
    """``write_state``: whether present_state is written (default: when something reads
    it)."""
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
    dilation = int(node.attrs.get("dilation", 1))  # (VarlenCausalConvWithState's)
    if dilation < 1:
        raise NpusimError(f"{node.op_type} '{node.name}': dilation {dilation} must be >= 1")
    keep = (k - 1) * dilation  # the positions before the sequence a window reaches
    # (the past state among the inputs: the layer waits for whatever writes it)
    conv = Node(name=node.name, op_type=node.op_type, inputs=[x, w, bias, past], outputs=[y],
                attrs={"pads": [keep, 0], "group": C, "dilations": [dilation]})
    lower_pool(ctx, conv, carried=past or None, after=ACTIVATIONS[act])
    if write_state is None:
        write_state = bool(present) and bool(g.consumers(present) or present in g.outputs)
    if keep and present and write_state:
        _copy_state(ctx, node, x, past, present, B, C, L, keep)


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


def lower_varlen_causal_conv(ctx: LoweringContext, node: Node) -> None:
    """VarlenCausalConvWithState (ONNX Runtime, CUDA and WebGPU): CausalConvWithState over
    a packed token-major batch (total_tokens, C), sequence i from cu_seqlens[i], with the
    required initial_state (B, C, (k - 1) x dilation). The lengths are data, so they are
    taken as the even spread of the tokens (``total mod B`` sequences one token longer,
    first: layers ``name/g0``, ``name/g1``, each CausalConvWithState's). A
    ``state_update`` output (speculative decoding's compact transitions) is a copy of the
    first ``state_update_capacity`` input tokens of each sequence (``name/capture``)."""
    g = ctx.graph
    ins = list(node.inputs) + [""] * (5 - len(node.inputs))
    x, w, cu, bias, init = ins[:5]
    outs = list(node.outputs) + [""] * (3 - len(node.outputs))
    y, final, update = outs[:3]
    x_shape = g.shape(x)
    if len(x_shape) != 2 or not init or len(g.shape(init)) != 3 or not cu:
        raise NpusimError(f"VarlenCausalConvWithState '{node.name}': needs an input "
                          f"(total_tokens, channels), cu_seqlens and an initial_state (batch, "
                          f"channels, state length); got input {x_shape}")
    total, C = x_shape
    B, _, keep = g.shape(init)
    k, dilation = g.shape(w)[-1], int(node.attrs.get("dilation", 1))
    if keep != (k - 1) * dilation or prod(g.shape(cu)) != B + 1 or not total:
        raise NpusimError(f"VarlenCausalConvWithState '{node.name}': initial_state "
                          f"{g.shape(init)} must be (batch, channels, (kernel {k} - 1) x "
                          f"dilation {dilation}) with batch = len(cu_seqlens) - 1 = "
                          f"{prod(g.shape(cu)) - 1}, over at least one token")
    p = ctx.precision
    n, longer = divmod(total, B)
    groups = [(b, t) for b, t in ((longer, n + 1), (B - longer, n)) if b and t]
    token0 = seq0 = 0
    layers = []
    for gi, (Bg, T) in enumerate(groups):
        tag = node.name if len(groups) == 1 else f"{node.name}/g{gi}"
        views = {}
        for role, t, shape, offset in (("x", x, (Bg, C, T), token0 * C),
                                       ("y", y, (Bg, C, T), token0 * C),
                                       ("past", init, (Bg, C, keep), seq0 * C * keep),
                                       ("present", final, (Bg, C, keep), seq0 * C * keep)):
            if not t:
                views[role] = ""
                continue
            views[role] = ctx.scratch(f"{tag}::{role}", shape)
            ctx.address[views[role]] = ctx.addr(t) + offset * p
            if t in ctx.producer_layer:
                ctx.producer_layer[views[role]] = ctx.producer_layer[t]
        sub = Node(name=tag, op_type=node.op_type,
                   inputs=[views["x"], w, bias, views["past"]],
                   outputs=[views["y"]] + ([views["present"]] if final else []),
                   attrs=dict(node.attrs))
        before = ctx.builder.n_layers
        lower_causal_conv(ctx, sub, write_state=bool(final) and bool(
            g.consumers(final) or final in g.outputs))
        layers += range(before, ctx.builder.n_layers)
        token0 += Bg * T
        seq0 += Bg
    capacity = int(node.attrs.get("state_update_capacity", 0))
    if update and capacity > 0:
        em = LayerEmitter(ctx, Node(f"{node.name}/capture", node.op_type, inputs=[x],
                                    outputs=[update]), "DMA copy")
        dst, token0 = ctx.addr(update), 0
        for Bg, T in groups:
            take = min(capacity, T)
            emit_views(em, (Bg, take, C), [View(ctx.addr(x) + token0 * C * p, [T * C, C, 1])],
                       [View(dst, [capacity * C, C, 1])], [])
            dst += Bg * capacity * C * p
            token0 += Bg * T
        em.finish()
    if len(groups) > 1:  # the outputs are complete when every group's layers are
        join = ctx.builder.begin_layer(
            LayerInfo(name=node.name, op_type=node.op_type, input_shapes=[x_shape],
                      output_shape=x_shape, macs=0, mapping="",
                      mapping_source="the sequence groups joined (no data moved)"),
            sorted(set(layers)))
        for t in (y, final):
            if t:
                ctx.producer_layer[t] = join
    else:
        for t, role in ((y, "y"), (final, "present")):
            if t and views[role] in ctx.producer_layer:
                ctx.producer_layer[t] = ctx.producer_layer[views[role]]


LOWERINGS: dict = {"CausalConvWithState": lower_causal_conv,
                   "VarlenCausalConvWithState": lower_varlen_causal_conv}
