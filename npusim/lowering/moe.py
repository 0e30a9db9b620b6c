"""MoE (com.microsoft): the mixture-of-experts FFN ONNX Runtime GenAI writes for Mixtral,
Phi-3.5-MoE, Qwen-MoE and gpt-oss, as an NPU runs it: route, gather each expert's tokens,
the experts' GEMMs, weigh and sum.

``T`` tokens (rows of the 2-D or 3-D input), ``E`` experts, top ``k``, ``h`` hidden size,
``i`` the expert FFN's inner size; the ``T k`` token-expert pairs are rows ``j T + t``
(token ``t``'s ``j``-th choice) of the scratch tensors between the layers:

``name/route``     the row emitter's TopK over each token's ``E`` router probabilities
                   (``k`` selection rounds or a sort, as a TopK node costs), keeping ``k``
                   values and indices a token
``name/dispatch``  every pair's token row copied into the pairs' rows by DMA (each token read
                   ``k`` times), so that each expert's pairs are one block of rows
``name/fc1``       per active expert its pairs' ``[n, h] x [h, f i]`` (+ bias), ``f`` = 2 when
                   the gate and up projections are fused (SwiGLU, swiglu_fusion 1 or 2), else 1
``name/fc3``       (a gated activation, unfused: fc3 given) the up projection ``[n, h] x [h, i]``
``name/act``       per inner element: SwiGLU ``G sigmoid(a G) (L + b)``: mul x 3, sigmoid, add
                   (and min x 2, max with a ``swiglu_limit``); silu (with fc3: gated, times
                   the up projection), gelu, relu from the element-wise table; identity none
``name/fc2``       per active expert ``[n, i] x [i, h]`` (+ bias)
``name/combine``   per output element its ``k`` expert rows weighted (the routing values
                   read) and summed: ``k`` multiply-adds; a tile holds whole tokens

Which experts a token goes to is data, which npusim never reads. It takes the routing as
the even spread routers are trained toward (their load-balancing loss): the ``T k`` pairs
fall on ``min(E, T k)`` experts, ``q = T k // active`` each and one more on the first
``T k % active``; those two groups are a GEMM layer each (``name/fc1`` and, when the split is
uneven, ``name/fc1/more``). So a decode step of one token runs ``k`` experts and reads only
their weights; a long prefill runs all ``E``; the MACs are the dense FFN's times ``k``. The
weights are stored per expert as ONNX Runtime holds them (out x in), a bias row per expert.
The normalization of the ``k`` routing values (``k`` divisions a token) is not charged.

``QMoE`` is the same with the experts' weights stored narrow (2 to 8 bits, fp8, fp4; fc1,
fc2 and fc3 each at its own width), read at that width by the GEMMs
(``tiling.WeightFormat``, as MatMulNBits' weights).
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.context import LoweringContext
from npusim.lowering.gemm import GemmProblem, emit_gemm
from npusim.lowering.tiling import ACC_BYTES, WeightFormat
from npusim.lowering.vector import (ELEMENTWISE, LayerEmitter, View, emit_row_layer,
                                    emit_views, row_major)
from npusim.lowering.weights import weight_format
from npusim.program import LayerInfo

# the activation's vector steps per inner element (SwiGLU's clamps added when limited; a
# gated silu or SwiGLU also multiplies by the up projection: included in SwiGLU's)
ACTIVATIONS = {
    "swiglu": [("mul", 3), ("sigmoid", 1), ("add", 1)],
    "silu": ELEMENTWISE["Swish"],
    "gelu": ELEMENTWISE["Gelu"],
    "relu": ELEMENTWISE["Relu"],
    "identity": [],
}
# QMoE's quantization types: the weights' bits (int: expert_weight_bits) and the block its
# formats fix when block_size is not given (MXFP4: 32, NVFP4: 16)
QUANT_TYPES = {"int": (None, 0), "fp8": (8, 0), "fp4": (4, 32), "nvfp4": (4, 16),
               "wfp4afp8": (4, 32)}



def lower_qmoe(ctx: LoweringContext, node: Node) -> None:
    """QMoE: inputs input, router_probs, then per FC its weights, scales and bias (fc1, fc2,
    fc3), then the zero points (``expert_weight_bits``, or ``fc<n>_expert_weight_bits`` per
    FC; a scale per column, or per ``block_size`` elements of it)."""
    a = node.attrs
    kind = node.attrs.get("quant_type", "int")
    if kind not in QUANT_TYPES:
        raise NpusimError(f"QMoE '{node.name}': quant_type '{kind}'; npusim lowers "
                          f"{', '.join(QUANT_TYPES)}")
    fixed_bits, fixed_block = QUANT_TYPES[kind]
    block = int(a.get("block_size", 0) or 0) or fixed_block
    ins = list(node.inputs) + [""] * (14 - len(node.inputs))
    formats = []
    for fc, zero_points in ((1, ins[11]), (2, ins[12]), (3, ins[13])):
        bits = fixed_bits or int(a.get(f"fc{fc}_expert_weight_bits",
                                       a.get("expert_weight_bits", 4)))
        if bits not in (2, 3, 4, 8):
            raise NpusimError(f"QMoE '{node.name}': fc{fc} weights of {bits} bits; npusim "
                              f"lowers 2, 3, 4 or 8")
        formats.append(weight_format(ctx, bits, block, bits if zero_points else 0))
    lower_moe(ctx, replace(node, inputs=[ins[0], ins[1], ins[2], ins[4], ins[5], ins[7],
                                         ins[8], ins[10]]), weights=tuple(formats))


def lower_moe(ctx: LoweringContext, node: Node,
              weights: tuple[WeightFormat | None, ...] = (None, None, None)) -> None:
    """``weights``: fc1's, fc2's and fc3's formats when stored narrower (QMoE)."""
    g = ctx.graph
    ins = list(node.inputs) + [""] * (8 - len(node.inputs))
    x, probs, w1, b1, w2, b2, w3, b3 = ins[:8]
    y = node.outputs[0]
    x_shape, p_shape = g.shape(x), g.shape(probs)
    act = node.attrs.get("activation_type", "relu")
    if act not in ACTIVATIONS:
        raise NpusimError(f"MoE '{node.name}': activation_type '{act}' is not one of "
                          f"{', '.join(ACTIVATIONS)} (ONNX Runtime's CPU ones)")
    k = int(node.attrs.get("k", 1))
    fused = int(node.attrs.get("swiglu_fusion", 0))
    if act == "swiglu" and not w3:
        fused = fused or 1  # no fc3: gate and up in fc1 (interleaved, ONNX Runtime's default)
    h = x_shape[-1]
    T = 1
    for d in x_shape[:-1]:
        T *= d
    E, f_inner = g.shape(w1)[0], g.shape(w1)[1]
    f = 2 if act == "swiglu" and fused else 1
    inner = f_inner // f

    def stored(n, fmt):  # a weight row of n elements as the file holds it
        return n if fmt is None else ceil(n * fmt.bits / 8)

    if (len(x_shape) not in (2, 3) or tuple(p_shape) != (T, E)
            or g.shape(w1)[2] != stored(h, weights[0])
            or tuple(g.shape(w2)) != (E, h, stored(inner, weights[1]))
            or (w3 and tuple(g.shape(w3)) != (E, inner, stored(h, weights[2])))
            or any(b and tuple(g.shape(b)) != (E, n) for b, n in ((b1, f_inner), (b2, h),
                                                                  (b3, inner)))
            or not 1 <= k <= E):
        raise NpusimError(f"MoE '{node.name}': needs input (tokens, h) or (B, S, h), "
                          f"router_probs (tokens, E), fc1 (E, f x inner, h), fc2 (E, h, inner), "
                          f"[fc3 (E, inner, h)], biases (E, out) and 1 <= k <= E; got input "
                          f"{x_shape}, router_probs {p_shape}, fc1 {g.shape(w1)}, fc2 "
                          f"{g.shape(w2)}, biases {[g.shape(b) for b in (b1, b2, b3) if b]}, "
                          f"k {k}")
    prec = ctx.precision
    pairs = T * k
    active = min(E, pairs)
    q, more = divmod(pairs, active)  # pairs per expert; the first `more` experts one more

    def info(name, shape, macs=0):
        return LayerInfo(name=name, op_type=node.op_type, input_shapes=[], output_shape=shape,
                         macs=macs, mapping="", mapping_source="")

    # route: the top k of each token's router probabilities (values and indices)
    picks = ctx.scratch(f"{node.name}::picks", (T, k))
    picked = ctx.scratch(f"{node.name}::picked", (T, k))
    em = LayerEmitter(ctx, Node(f"{node.name}/route", node.op_type, inputs=[probs],
                                outputs=[picks, picked]), "vector unit (top k)",
                      info=info(f"{node.name}/route", (T, k)))
    emit_row_layer(em, O=T, L=E, x=ctx.addr(probs), y=(ctx.addr(picks), ctx.addr(picked)),
                   keep=k, op="TopK")
    em.finish()
    # dispatch: pair (j, t) is row j T + t; each token's row read once per choice
    tokens = ctx.scratch(f"{node.name}::tokens", (pairs, h))
    em = LayerEmitter(ctx, Node(f"{node.name}/dispatch", node.op_type, inputs=[x, picked],
                                outputs=[tokens]), "DMA gather",
                      info=info(f"{node.name}/dispatch", (pairs, h)))
    emit_views(em, (k, T, h), [View(ctx.addr(x), [0, h, 1], keep_repeats=True)],
               [View(ctx.addr(tokens), row_major((k, T, h)))], [])
    em.finish()

    def experts(name, inputs, out, C, M, x_t, w, bias, fmt):
        """Per active expert its pairs' [n, C] x [C, M] (+ its bias row), the weights stored
        M x C (a column of C in ``fmt``'s layout when narrow): the experts with q pairs and
        those with q + 1, a layer each; returns the names their outputs are known by."""
        column = C * prec if fmt is None else int(fmt.column_bytes(C))
        w_at = ctx.addr(w, E * M * column)
        b_at = ctx.bias_addr(bias) if bias else None
        groups = [(f"{node.name}/{name}", range(more, active), q)]
        if more:
            groups.append((f"{node.name}/{name}/more", range(more), q + 1))
        outs = []
        for layer, group, n in groups:
            if not len(group):
                continue
            e0 = group[0]
            row0 = e0 * q + min(e0, more)  # the group's first pair row
            part = f"{out}::{len(outs)}"  # (the groups write disjoint rows of one tensor)
            ctx.alias(part, out)
            outs.append(part)
            offsets = [((row0 + (e - e0) * n) * C * prec, e * M * column,
                        (row0 + (e - e0) * n) * M * prec) for e in group]
            emit_gemm(ctx, Node(layer, node.op_type, inputs=inputs, outputs=[part]),
                      GemmProblem(N=n, C=C, M=M, batch_offsets=offsets, x_addr=ctx.addr(x_t),
                                  x_row_stride=C * prec, x_trans=False, w_addr=w_at,
                                  w_trans=True, y_addr=ctx.addr(out),
                                  bias_addr=None if b_at is None else b_at + e0 * M * ACC_BYTES,
                                  bias_batch_stride=M * ACC_BYTES, weight=fmt),
                      info(layer, (len(group), n, M), len(group) * n * C * M))
        return outs

    up_t = ctx.scratch(f"{node.name}::fc1", (pairs, f_inner))
    ups = experts("fc1", [tokens, w1] + ([b1] if b1 else []), up_t, h, f_inner, tokens, w1, b1,
                  weights[0])
    gated = bool(w3)
    if gated:
        up3 = ctx.scratch(f"{node.name}::fc3", (pairs, inner))
        ups += experts("fc3", [tokens, w3] + ([b3] if b3 else []), up3, h, inner, tokens, w3,
                       b3, weights[2])
    steps = list(ACTIVATIONS[act])
    if act == "swiglu" and node.attrs.get("swiglu_limit") is not None:
        steps += [("min", 2), ("max", 1)]
    if gated and act != "swiglu":
        steps.append(("mul", 1))  # times the up projection (Mixtral's gated silu)
    hidden = ctx.scratch(f"{node.name}::act", (pairs, inner))
    em = LayerEmitter(ctx, Node(f"{node.name}/act", node.op_type, inputs=ups,
                                outputs=[hidden]), f"vector unit ({act})",
                      info=info(f"{node.name}/act", (pairs, inner)))
    # the gate (fc1's rows, or their first halves when fused: interleaved or not, the same
    # bytes of the row) and with a gate the up projection (fc3's rows, or the second halves)
    sources = [View(ctx.addr(up_t), [f_inner, 1])]
    if gated:
        sources.append(View(ctx.addr(up3), [inner, 1]))
    elif f == 2:
        sources.append(View(ctx.addr(up_t), [f_inner, 1], inner))
    emit_views(em, (pairs, inner), sources, [View(ctx.addr(hidden), [inner, 1])], steps)
    em.finish()
    down = ctx.scratch(f"{node.name}::fc2", (pairs, h))
    downs = experts("fc2", [hidden, w2] + ([b2] if b2 else []), down, inner, h, hidden, w2, b2,
                    weights[1])
    # combine: each output element's k expert rows (row j T + t), weighted and summed; a
    # tile holds whole tokens (its k rows), so no two tiles write one output element
    em = LayerEmitter(ctx, Node(f"{node.name}/combine", node.op_type, inputs=downs + [picks],
                                outputs=[y]), "vector unit (weighted sum)",
                      info=info(f"{node.name}/combine", tuple(x_shape)))
    emit_views(em, (T, k, h), [View(ctx.addr(down), [h, T * h, 1]),
                               View(ctx.addr(picks), [k, 1, 0])],
               [View(ctx.addr(y), [h, 0, 1])], [("mul", 1), ("add", 1)],
               per_core_elements=k * h * ceil(T / ctx.config.num_cores))
    em.finish()


LOWERINGS: dict = {"MoE": lower_moe, "QMoE": lower_qmoe}
