"""MoE (com.microsoft): the mixture-of-experts FFN ONNX Runtime GenAI writes for Mixtral,
Phi-3.5-MoE, Qwen-MoE and gpt-oss, as an NPU runs it: route, gather each expert's tokens,
the experts' GEMMs, weigh and sum.

``T`` tokens (rows of the 2-D or 3-D input), ``E`` experts, top ``k``, ``h`` hidden size,
``i`` the expert FFN's inner size:

``name/route``     the row emitter's TopK over each token's ``E`` router probabilities
                   (``k`` selection rounds or a sort, as a TopK node costs), keeping ``k``
                   values and indices a token
``name/dispatch``  each active expert's tokens gathered into one contiguous block (DMA: one
                   run of ``h`` a token, from wherever the tokens lie)
``name/fc1``       per active expert ``[n, h] x [h, f i]`` (+ bias), ``f`` = 2 when the gate
                   and up projections are fused (swiglu_fusion 1, 2), else 1
``name/fc3``       (SwiGLU, not fused) per active expert the up projection ``[n, h] x [h, i]``
``name/act``       the activation per inner element: SwiGLU ``G sigmoid(a G) (L + b)``: mul,
                   sigmoid, mul, add, mul (and min / max x 2 with a ``swiglu_limit``); silu,
                   gelu, relu from the element-wise table; identity nothing
``name/fc2``       per active expert ``[n, i] x [i, h]`` (+ bias)
``name/combine``   per output element its ``k`` expert rows weighted and summed (``k``
                   multiply-adds), the rows read where the experts wrote them

Which experts a token goes to is data, which npusim never reads. It takes the routing as
the even spread routers are trained toward (their load-balancing loss): the ``T k``
token-expert pairs fall on ``min(E, T k)`` experts, ``ceil(T k / active)`` tokens each. So a
decode step of one token runs ``k`` experts and reads only their weights; a long prefill runs
all ``E``. The weights are stored per expert as ONNX Runtime holds them (out x in). The
normalization of the ``k`` routing weights (``k`` divisions a token) is not charged.

``QMoE`` is the same with the experts' weights stored narrow (2 to 8 bits, fp8, fp4), read
at that width by the GEMMs (``tiling.WeightFormat``, as MatMulNBits' weights).
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.context import LoweringContext
from npusim.lowering.gemm import GemmProblem, emit_gemm
from npusim.lowering.tiling import WeightFormat
from npusim.lowering.vector import (ELEMENTWISE, LayerEmitter, View, emit_row_layer,
                                    emit_views, row_major)
from npusim.lowering.weights import weight_format
from npusim.program import LayerInfo

# the activation's vector steps per inner element (SwiGLU's clamps added when limited)
ACTIVATIONS = {
    "swiglu": [("mul", 3), ("sigmoid", 1), ("add", 1)],
    "silu": ELEMENTWISE["Swish"],
    "gelu": ELEMENTWISE["Gelu"],
    "relu": ELEMENTWISE["Relu"],
    "identity": [],
}


def _attr(node: Node, name: str, default):
    v = node.attrs.get(name, default)
    return v.decode() if isinstance(v, bytes) else v


def lower_qmoe(ctx: LoweringContext, node: Node) -> None:
    """QMoE: MoE with the experts' weights stored in ``expert_weight_bits`` (2, 3, 4, 8;
    fp8 and the fp4 formats: 8 and 4), packed per output column, a scale per column or per
    ``block_size`` elements of it (and zero points): the GEMMs read them in that width
    (``tiling.WeightFormat``, as MatMulNBits). Inputs: input, router_probs, then per FC its
    weights, scales and bias (fc1, fc2, fc3), then the zero points."""
    a = node.attrs
    kind = _attr(node, "quant_type", "int")
    bits = {"fp8": 8, "fp4": 4, "nvfp4": 4, "wfp4afp8": 4}.get(
        kind, int(a.get("expert_weight_bits", 4)))
    if kind not in ("int", "fp8", "fp4", "nvfp4", "wfp4afp8") or bits not in (2, 3, 4, 8):
        raise NpusimError(f"QMoE '{node.name}': quant_type '{kind}' with {bits}-bit "
                          f"weights; npusim lowers int (2, 3, 4, 8 bits), fp8 and fp4")
    ins = list(node.inputs) + [""] * (14 - len(node.inputs))
    zp_bits = bits if ins[11] else 0
    wf = weight_format(ctx, bits, int(a.get("block_size", 0) or 0), zp_bits)
    lower_moe(ctx, replace(node, inputs=[ins[0], ins[1], ins[2], ins[4], ins[5], ins[7],
                                         ins[8], ins[10]]), weight=wf)


def lower_moe(ctx: LoweringContext, node: Node, *, weight: WeightFormat | None = None) -> None:
    """``weight``: the experts' weight format when stored narrower (QMoE)."""
    g = ctx.graph
    ins = list(node.inputs) + [""] * (8 - len(node.inputs))
    x, probs, w1, b1, w2, b2, w3, b3 = ins[:8]
    y = node.outputs[0]
    x_shape, p_shape = g.shape(x), g.shape(probs)
    act = _attr(node, "activation_type", "relu")
    if act not in ACTIVATIONS:
        raise NpusimError(f"MoE '{node.name}': activation_type '{act}' is not one of "
                          f"{', '.join(ACTIVATIONS)} (ONNX Runtime's CPU ones)")
    k = int(node.attrs.get("k", 1))
    fused = int(node.attrs.get("swiglu_fusion", 0))
    h = x_shape[-1]
    T = 1
    for d in x_shape[:-1]:
        T *= d
    E, f_inner = g.shape(w1)[0], g.shape(w1)[1]
    f = 2 if act == "swiglu" and fused else 1
    inner = f_inner // f

    def stored(n):  # a weight row of n elements as the file holds it (packed when narrow)
        return n if weight is None else ceil(n * weight.bits / 8)

    if (len(x_shape) not in (2, 3) or tuple(p_shape) != (T, E)
            or g.shape(w1)[2] != stored(h) or tuple(g.shape(w2)) != (E, h, stored(inner))
            or not 1 <= k <= E or (act == "swiglu" and not fused and not w3)):
        raise NpusimError(f"MoE '{node.name}': needs input (tokens, h) or (B, S, h), "
                          f"router_probs (tokens, E), fc1 (E, f x inner, h), fc2 (E, h, inner) "
                          f"and 1 <= k <= E (SwiGLU unfused: fc3 too); got input {x_shape}, "
                          f"router_probs {p_shape}, fc1 {g.shape(w1)}, fc2 {g.shape(w2)}, k {k}")
    prec = ctx.precision
    pairs = T * k
    active = min(E, pairs)
    n = ceil(pairs / active)  # tokens per active expert

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
    # dispatch: each active expert's n token rows gathered into one block (read as a run
    # of rows, the experts' runs spread over the input; a token may go to several)
    tokens = ctx.scratch(f"{node.name}::tokens", (active, n, h))
    apart = (T - n) // max(1, active - 1)  # rows between two experts' first tokens
    em = LayerEmitter(ctx, Node(f"{node.name}/dispatch", node.op_type, inputs=[x, picked],
                                outputs=[tokens]), "DMA gather",
                      info=info(f"{node.name}/dispatch", (active, n, h)))
    emit_views(em, (active, n, h), [View(ctx.addr(x), [apart * h, h, 1], keep_repeats=True)],
               [View(ctx.addr(tokens), row_major((active, n, h)))], [])
    em.finish()

    def experts(name, inputs, out, C, M, x_t, w, bias):
        """Per active expert [n, C] x [C, M] (+ bias), the weights stored M x C (a column
        of C in ``weight``'s layout when narrow)."""
        column = C * prec if weight is None else int(weight.column_bytes(C))
        offsets = [(e * n * C * prec, e * M * column, e * n * M * prec) for e in range(active)]
        sub = Node(f"{node.name}/{name}", node.op_type, inputs=inputs, outputs=[out])
        emit_gemm(ctx, sub, GemmProblem(
            N=n, C=C, M=M, batch_offsets=offsets, x_addr=ctx.addr(x_t), x_row_stride=C * prec,
            x_trans=False, w_addr=ctx.addr(w, E * M * column), w_trans=True,
            y_addr=ctx.addr(out), bias_addr=ctx.addr(bias) if bias else None,
            bias_batch_stride=M * prec, weight=weight),
            info(sub.name, (active, n, M), active * n * C * M))
        return out

    up = experts("fc1", [tokens, w1] + ([b1] if b1 else []),
                 ctx.scratch(f"{node.name}::fc1", (active, n, f_inner)), h, f_inner, tokens,
                 w1, b1)
    gates = [up]
    if act == "swiglu" and not fused:
        gates.append(experts("fc3", [tokens, w3] + ([b3] if b3 else []),
                             ctx.scratch(f"{node.name}::fc3", (active, n, inner)), h, inner,
                             tokens, w3, b3))
    steps = list(ACTIVATIONS[act])
    if act == "swiglu" and node.attrs.get("swiglu_limit") is not None:
        steps += [("min", 2), ("max", 1)]
    hidden = ctx.scratch(f"{node.name}::act", (active, n, inner))
    em = LayerEmitter(ctx, Node(f"{node.name}/act", node.op_type, inputs=gates,
                                outputs=[hidden]), f"vector unit ({act})",
                      info=info(f"{node.name}/act", (active, n, inner)))
    space = (active, n, inner)
    # the gate (FC1's rows) and with SwiGLU the up projection (FC3's rows, or FC1's second
    # halves when fused: interleaved or not, the same bytes of the row, read as two halves)
    sources = [View(ctx.addr(up), [n * f_inner, f_inner, 1])]
    if act == "swiglu":
        sources.append(View(ctx.addr(gates[-1]), [n * inner, inner, 1]) if not fused else
                       View(ctx.addr(up), [n * f_inner, f_inner, 1], inner))
    emit_views(em, space, sources, [View(ctx.addr(hidden), row_major(space))], steps)
    em.finish()
    down = experts("fc2", [hidden, w2] + ([b2] if b2 else []),
                   ctx.scratch(f"{node.name}::fc2", (active, n, h)), inner, h, hidden, w2, b2)
    # combine: each output element's k expert rows, weighted and summed
    em = LayerEmitter(ctx, Node(f"{node.name}/combine", node.op_type, inputs=[down, picks],
                                outputs=[y]), "vector unit (weighted sum)",
                      info=info(f"{node.name}/combine", tuple(x_shape)))
    # (the experts' output rows in pair order: token t's j-th is row t k + j)
    emit_views(em, (T, k, h), [View(ctx.addr(down), [k * h, h, 1])],
               [View(ctx.addr(y), [h, 0, 1])], [("mul", 1), ("add", 1)])
    em.finish()


LOWERINGS: dict = {"MoE": lower_moe, "QMoE": lower_qmoe}
