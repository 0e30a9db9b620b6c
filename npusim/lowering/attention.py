"""Attention (multi-head and grouped-query) and ONNX Runtime's contrib ops.

Graphs optimized by ONNX Runtime (``--optimize``, or optimized offline) carry fused ops of
the ``com.microsoft`` domain. Each is lowered here from the same building blocks as the
plain ops: GEMMs through :func:`npusim.lowering.gemm.emit_gemm` (batched, with per-batch
byte offsets) and rows of vector steps on the vector unit.

Attention
=========

``Attention`` (com.microsoft; and ONNX's own ``Attention`` of opset 23),
``MultiHeadAttention`` and ``GroupQueryAttention`` become up to six layers, named after the
node with a suffix, each waiting for the one before::

    name/qkv       QKV projection (com.microsoft Attention only): one GEMM
                   [B*S, hidden_in] x [hidden_in, Hq+Hk+Hv], bias through the accumulator
    name/q_prep    bias add / rotary embedding of Q, K, V when the op has them
    name/k_prep    (vector unit; also the copy of new K/V rows into the KV cache, when
    name/v_prep     there is a past and nothing else writes them there)
    name/scores    Q.K^T: per batch and KV head one GEMM [g*S, d] x [d, L]
    name/softmax   row softmax of the scores (vector unit)
    name/context   P.V: per batch and KV head one GEMM [g*S, L] x [L, dv]

with ``B`` batch, ``S`` query length, ``L`` key length (past + new), ``d``/``dv`` head sizes,
``N`` query heads, ``Nkv`` KV heads and ``g = N / Nkv`` query heads per KV head (1 for MHA).
The ``g`` query heads sharing a KV head are stacked into one GEMM, so K and V are loaded
per KV head, not per query head: grouped-query attention moves less K/V data than
multi-head attention of the same shape. The 1/sqrt(d) scale is folded into the GEMM output
(free), as ONNX Runtime's kernels do.

MACs: ``B*S*hidden_in*(Hq+Hk+Hv)`` (projection) + ``B*N*S*L*d`` (scores) + ``B*N*S*L*dv``
(context). No op here includes an output projection (ONNX Runtime keeps it a MatMul).

Softmax over each of the ``B*N*S`` rows of ``L`` scores costs the steps of
``vector.py``'s Softmax, ``E`` the tile's elements, ``r`` its rows, ``T = ceil(log2 L)``::

    max(E), reduce x T (r), sub(E), exp(E), add(E), reduce x T (r), div(E)

preceded by ``mul, tanh, mul`` (E) with a softcap, ``add`` (E) with an additive attention
bias (its rows are loaded) and ``add`` (E) with a key-padding or causal mask (made on the
fly; GroupQueryAttention is always causal). A VECTOR step of ``n`` elements takes
``ceil(n / (lanes*alus)) * latency`` cycles.

Data layout (addresses only; timing depends on bytes and run lengths): Q, K and V are read
per head as contiguous ``[rows, d]`` blocks (ONNX Runtime's BNSH layout), the scores are a
scratch tensor ``[B, N, S, L]`` and the context is written per head into the output. A past
KV cache and the present output share one buffer (ONNX Runtime's
``past_present_share_buffer``): the past rows are read in place, never copied.

Other contrib ops
=================

``E`` elements, ``r`` rows of the op; a tile loads its inputs, runs the steps, stores::

    FusedConv / FusedGemm / GemmFastGelu   the Conv / Gemm, activation fused in the output
                                           path (free; listed in the layer's ``fused``);
                                           FusedConv's sum input Z: a layer name/sum of
                                           add + the activation's steps (Relu: max) (E)
    FusedMatMul            MatMul with transA/transB (alpha folded, free)
    SkipLayerNormalization add (skip), [add (bias)], then LayerNormalization's steps:
        add(E), reduce x T (r), mul (r), sub(E), mul(E), add(E), reduce x T (r), mul (r),
        add (r), rsqrt (r), mul(E), mul(E), [add(E) with beta]
    SkipSimplifiedLayerNormalization   add (skip), [add (bias)], RMS norm:
        mul(E), add(E), reduce x T (r), mul (r), add (r), rsqrt (r), mul(E), mul(E)
    SimplifiedLayerNormalization       RMS norm as above
    EmbedLayerNormalization  gather of word rows (one DMA run per token) + position rows
                           [+ segment row], add, [add], LayerNormalization's steps
    BiasGelu               add, gelu            FastGelu   [add], gelu
    QuickGelu              mul, sigmoid, mul    BiasAdd    add, add
    BiasSoftmax            add, then the softmax steps
    RotaryEmbedding        mul (cos), mul (sin), add; cos/sin rows loaded per token

Every vector layer here goes through ``vector.py``'s one row emitter (``emit_row_layer``):
the fused element steps above run as a prefix of the row op (Softmax, LayerNormalization,
its RMS form) with the op's own step list, tiling and chunked passes, so a softmax or a norm
inside these ops costs exactly what the plain node costs.

ONNX Runtime's dynamic quantization of a fused graph writes two more: ``QAttention``, the
com.microsoft Attention with its QKV projection in int8 (input, weights and projection
output at 1 byte per element: npusim's GEMMs store at their width) and the rest in float;
``QEmbedLayerNormalization``, EmbedLayerNormalization with int8 tables, each gathered
element dequantized (sub, mul) before the adds on a config wider than int8.

``DecoderMaskedMultiHeadAttention`` (ONNX Runtime's one-token decoding attention) is
MultiHeadAttention with its inputs reordered.

Not supported: PackedAttention, PackedMultiHeadAttention, SparseAttention, PagedAttention,
QOrderedAttention (CUDA only). MatMulNBits is a GEMM
with a narrow weight (``gemm.lower_matmul_nbits``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

import numpy as np

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.frontend.quantized import INT8
from npusim.lowering.context import LoweringContext
from npusim.lowering.conv import lower_conv
from npusim.lowering.gemm import GemmProblem, _batch_strides, emit_gemm, lower_gemm
from npusim.lowering.vector import (ELEMENTWISE, LayerEmitter, RowInput, View,
                                    dequantize_steps, emit_elementwise, emit_row_layer,
                                    emit_views)
from npusim.program import LayerInfo

MS = "com.microsoft"


# --------------------------------------------------------------------------- small helpers


def _opt(node: Node, i: int) -> str | None:
    return node.inputs[i] if len(node.inputs) > i and node.inputs[i] else None


def _opt_out(node: Node, i: int) -> str | None:
    return node.outputs[i] if len(node.outputs) > i and node.outputs[i] else None


def _shape(ctx: LoweringContext, t: str) -> tuple[int, ...]:
    return ctx.graph.shape(t)


def _err(node: Node, why: str) -> NpusimError:
    return NpusimError(f"{node.op_type} '{node.name}': {why}")


def _preds(ctx: LoweringContext, tensors) -> list[int]:
    return sorted({ctx.producer_layer[t] for t in tensors if t and t in ctx.producer_layer})


def _produced(ctx: LoweringContext, layer: int, tensors) -> None:
    for t in tensors:
        if t:
            ctx.producer_layer[t] = layer


def _layer_info(ctx: LoweringContext, layer: int) -> LayerInfo:
    return ctx.builder.layer_info(layer)


def _attr_str(node: Node, name: str, default: str = "") -> str:
    v = node.attrs.get(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


# --------------------------------------------------------------------------- vector rows


def emit_rows(ctx: LoweringContext, node: Node, *, name: str, rows: int, cols: int,
              x: int | None, y: int, prefix: tuple[str, ...] = (), op: str | None = None,
              inputs: tuple[RowInput, ...] = (), pitch: int | None = None,
              sum_out: int | None = None, preds: list[int], outputs, input_shapes,
              output_shape, fused: list[str] | None = None) -> int:
    """One layer of ``rows`` x ``cols`` on the vector unit, part of ``node``, through
    vector.py's row emitter (the same costs as the plain ops); returns its layer id."""
    info = LayerInfo(name=name, op_type=node.op_type, input_shapes=list(input_shapes),
                     output_shape=tuple(output_shape), macs=0, mapping="", mapping_source="",
                     fused=list(fused or []))
    em = LayerEmitter(ctx, node, "vector unit", info=info, preds=preds, outputs=list(outputs))
    emit_row_layer(em, O=max(rows, 1), L=cols, x=x, y=y, pitch=pitch, prefix=prefix, op=op,
                   inputs=inputs, sum_out=sum_out)
    return em.finish()


# --------------------------------------------------------------------------- attention core


@dataclass
class Operand:
    """A Q/K/V block set: per-head contiguous [rows, d] blocks from ``addr`` (BNSH)."""

    addr: int
    deps: tuple[str, ...]  # tensors whose producers must finish first


@dataclass
class AttnShape:
    B: int
    S: int  # query length
    L: int  # key length attended (past + new)
    heads: int
    kv_heads: int
    dqk: int
    dv: int

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads


def _check_heads(node: Node, a: AttnShape) -> None:
    if a.heads < 1 or a.kv_heads < 1 or a.heads % a.kv_heads:
        raise _err(node, f"{a.heads} query heads cannot be shared by {a.kv_heads} KV heads "
                         "(num_heads must be a multiple of kv_num_heads)")
    if min(a.B, a.S, a.L, a.dqk, a.dv) < 1:
        raise _err(node, f"degenerate attention shape {a}")


def attention_core(ctx: LoweringContext, node: Node, a: AttnShape, q: Operand, k: Operand,
                   v: Operand, out: str, *, mask: bool = False, bias: str | None = None,
                   softcap: bool = False, qk_out: str | None = None) -> int:
    """Scores, softmax and context layers; returns the context layer."""
    _check_heads(node, a)
    prec = ctx.precision
    B, S, L, N, Nkv, g = a.B, a.S, a.L, a.heads, a.kv_heads, a.group
    scores = ctx.scratch(f"{node.name}::scores", (B, N, S, L))
    s_addr = ctx.addr(scores)

    offs = [(((b * N + j * g) * S * a.dqk) * prec, ((b * Nkv + j) * L * a.dqk) * prec,
             ((b * N + j * g) * S * L) * prec) for b in range(B) for j in range(Nkv)]
    prob = GemmProblem(N=g * S, C=a.dqk, M=L, batch_offsets=offs, x_addr=q.addr,
                       x_row_stride=a.dqk * prec, x_trans=False, w_addr=k.addr, w_trans=True,
                       y_addr=s_addr)
    sub = Node(name=f"{node.name}/scores", op_type=node.op_type,
               inputs=list(q.deps + k.deps), outputs=[scores])
    info = LayerInfo(name=sub.name, op_type=node.op_type,
                     input_shapes=[(B, N, S, a.dqk), (B, Nkv, L, a.dqk)],
                     output_shape=(B, N, S, L), macs=B * N * S * L * a.dqk, mapping="",
                     mapping_source="")
    emit_gemm(ctx, sub, prob, info)
    if qk_out:
        ctx.address[qk_out] = s_addr
        ctx.producer_layer[qk_out] = ctx.producer_layer[scores]

    # softmax, in place: the Softmax row op after the score's fused element steps
    probs = f"{node.name}::probs"
    ctx.address[probs] = s_addr
    inputs: list[RowInput] = []
    prefix: list[str] = []
    deps = [scores]
    if softcap:
        prefix += ["mul", "tanh", "mul"]
    if bias is not None:
        bshape = (1,) * (4 - len(_shape(ctx, bias))) + tuple(_shape(ctx, bias))
        if len(bshape) != 4 or bshape[-2] not in (1, S):
            raise _err(node, f"attention bias of shape {_shape(ctx, bias)} does not broadcast "
                             f"to [batch, heads, {S}, {L}]")
        Bb, Nb, Sb, Lb = bshape

        def bias_row(r0: int) -> int:
            b, h, s = r0 // (N * S), (r0 // S) % N, r0 % S
            return ((((b if Bb > 1 else 0) * Nb + (h if Nb > 1 else 0)) * Sb)
                    + (s if Sb > 1 else 0)) * Lb * prec

        inputs.append(RowInput(ctx.addr(bias), "gather", elems=Lb,
                               row_stride=Lb * prec if Sb > 1 else 0, base_of=bias_row))
        prefix.append("add")
        deps.append(bias)
    if mask:
        prefix.append("add")  # a key-padding or causal mask, made on the fly
    emit_rows(ctx, node, name=f"{node.name}/softmax", rows=B * N * S, cols=L, x=s_addr,
              y=s_addr, prefix=tuple(prefix), op="Softmax", inputs=tuple(inputs),
              preds=_preds(ctx, deps), outputs=[probs], input_shapes=[(B, N, S, L)],
              output_shape=(B, N, S, L))

    offs = [(((b * N + j * g) * S * L) * prec, ((b * Nkv + j) * L * a.dv) * prec,
             ((b * N + j * g) * S * a.dv) * prec) for b in range(B) for j in range(Nkv)]
    prob = GemmProblem(N=g * S, C=L, M=a.dv, batch_offsets=offs, x_addr=s_addr,
                       x_row_stride=L * prec, x_trans=False, w_addr=v.addr, w_trans=False,
                       y_addr=ctx.addr(out))
    sub = Node(name=f"{node.name}/context", op_type=node.op_type,
               inputs=[probs, *v.deps], outputs=[out])
    info = LayerInfo(name=sub.name, op_type=node.op_type,
                     input_shapes=[(B, N, S, L), (B, Nkv, L, a.dv)],
                     output_shape=_shape(ctx, out), macs=B * N * S * L * a.dv, mapping="",
                     mapping_source="")
    emit_gemm(ctx, sub, prob, info)
    return ctx.producer_layer[out]


def _prep(ctx: LoweringContext, node: Node, tag: str, src: Operand, rows: int, cols: int,
          dst_addr: int, dst_tensor: str, *, bias_addr: int | None = None,
          rotary: tuple[int | None, int | None, int, int] | None = None, extra_deps=(),
          pitch: int | None = None) -> Operand:
    """Bias add and/or rotary embedding (or a plain copy) of Q, K or V into ``dst``.

    ``rotary`` = (cos addr, sin addr, half width, first position); cos/sin None when the
    op computes them itself (no loads)."""
    inputs: list[RowInput] = []
    prefix: list[str] = []
    if bias_addr is not None:
        inputs.append(RowInput(bias_addr, "bcast"))
        prefix.append("add")
    if rotary is not None:
        cos, sin, half, pos0 = rotary
        if cos is not None and sin is not None:
            prec = ctx.precision

            def table_row(r0: int) -> int:
                return (pos0 + r0 % rows) * half * prec

            inputs += [RowInput(t, "gather", elems=half, row_stride=half * prec,
                                base_of=table_row) for t in (cos, sin)]
        prefix += ["mul", "mul", "add"]
    emit_rows(ctx, node, name=f"{node.name}/{tag}", rows=rows, cols=cols, x=src.addr,
              y=dst_addr, prefix=tuple(prefix), inputs=tuple(inputs), pitch=pitch,
              preds=_preds(ctx, src.deps + tuple(extra_deps)), outputs=[dst_tensor],
              input_shapes=[(rows, cols)], output_shape=(rows, cols))
    return Operand(dst_addr, (dst_tensor,))


# --------------------------------------------------------------------------- attention ops


def _cache(ctx: LoweringContext, node: Node, which: str, present: str | None,
           shape) -> tuple[int, str]:
    """The KV-cache buffer: the present output when the graph has it, else a scratch."""
    if present is not None:
        return ctx.addr(present), present
    t = ctx.scratch(f"{node.name}::{which}_cache", shape)
    return ctx.addr(t), t


def lower_ms_attention(ctx: LoweringContext, node: Node,
                       projection_precision: int | None = None) -> None:
    """com.microsoft Attention: QKV projection + attention (no output projection); the
    projection computes in ``projection_precision`` bytes per element when given (QAttention:
    int8)."""
    g = ctx.graph
    x, w = node.inputs[0], node.inputs[1]
    bias, mask, past, ab = _opt(node, 2), _opt(node, 3), _opt(node, 4), _opt(node, 5)
    present = _opt_out(node, 1)
    xs = _shape(ctx, x)
    if len(xs) != 3:
        raise _err(node, f"input must be [batch, seq, hidden], got {xs}")
    B, S, Hin = xs
    ws = _shape(ctx, w)
    heads = int(node.attrs.get("num_heads", 0))
    sizes = list(node.attrs.get("qkv_hidden_sizes", []) or [])
    if not sizes:
        if ws[-1] % 3:
            raise _err(node, f"weights {ws}: the last dim is not 3 * hidden")
        sizes = [ws[-1] // 3] * 3
    Hq, Hk, Hv = (int(s) for s in sizes)
    if heads < 1 or Hq % heads or Hv % heads or Hq != Hk:
        raise _err(node, f"num_heads={heads} does not divide qkv_hidden_sizes {sizes} "
                         "(Q and K must have equal sizes)")
    dqk, dv = Hq // heads, Hv // heads
    Htot = Hq + Hk + Hv
    P = _shape(ctx, past)[3] if past else 0
    L = _shape(ctx, present)[3] if present else P + S

    float_precision = ctx.node_precision
    # (room for Q, K and V in float: the attention reads them so; the bias at the
    # accumulator's width: ctx.bias_addr)
    qkv = ctx.scratch(f"{node.name}::qkv", (B, S, Htot), ctx.precision)
    if bias:
        ctx.bias_addr(bias)
    ctx.node_precision = projection_precision or float_precision
    prec = ctx.precision
    prob = GemmProblem(N=B * S, C=Hin, M=Htot, batch_offsets=[(0, 0, 0)], x_addr=ctx.addr(x),
                       x_row_stride=Hin * prec, x_trans=False, w_addr=ctx.addr(w),
                       w_trans=False, y_addr=ctx.addr(qkv),
                       bias_addr=ctx.bias_addr(bias) if bias else None)
    sub = Node(name=f"{node.name}/qkv", op_type=node.op_type,
               inputs=[x, w] + ([bias] if bias else []), outputs=[qkv])
    info = LayerInfo(name=sub.name, op_type=node.op_type,
                     input_shapes=[g.shape(t) for t in sub.inputs], output_shape=(B, S, Htot),
                     macs=B * S * Hin * Htot, mapping="", mapping_source="",
                     fused=["bias"] if bias else [], precision=projection_precision)
    emit_gemm(ctx, sub, prob, info)
    ctx.node_precision = float_precision
    prec = ctx.precision
    qkv_addr = ctx.addr(qkv)
    if int(node.attrs.get("do_rotary", 0)):
        # rotary embedding of Q and K in place (cos/sin computed by the op: no loads)
        _prep(ctx, node, "rotary", Operand(qkv_addr, (qkv,)), B * S, Hq + Hk, qkv_addr, qkv,
              rotary=(None, None, dqk // 2, P), pitch=Htot)
    q = Operand(qkv_addr, (qkv,))
    if past or present:
        # the projection writes the new K/V rows into the cache (shared past/present buffer)
        kv_addr, kv_t = _cache(ctx, node, "kv", present, (2, B, heads, L, dqk))
        if present:
            ctx.producer_layer[present] = ctx.producer_layer[qkv]
        deps = (qkv,) + ((past,) if past else ())
        k = Operand(kv_addr, deps)
        v = Operand(kv_addr + B * heads * L * dqk * prec, deps)
    else:
        k = Operand(qkv_addr + B * S * Hq * prec, (qkv,))
        v = Operand(qkv_addr + B * S * (Hq + Hk) * prec, (qkv,))
    a = AttnShape(B, S, L, heads, heads, dqk, dv)
    attention_core(ctx, node, a, q, k, v, node.outputs[0],
                   mask=bool(mask) or bool(int(node.attrs.get("unidirectional", 0))), bias=ab)


def _kv_side(ctx: LoweringContext, node: Node, which: str, new: Operand, rows: int, cols: int,
             B: int, kv_heads: int, P: int, L: int, d: int, past: str | None,
             present: str | None, bias_addr: int | None, rotary=None) -> Operand:
    """K or V as the attention reads it: the new rows (after bias / rotary) and, with a
    past, the KV cache they are appended to."""
    prec = ctx.precision
    if past is not None:
        c_addr, c_t = _cache(ctx, node, which, present, (B, kv_heads, L, d))
        # the new rows go to the cache's tail (address of the first head's tail)
        _prep(ctx, node, f"{which}_prep", new, rows, cols, c_addr + P * d * prec, c_t,
              bias_addr=bias_addr, rotary=rotary, extra_deps=(past,) if past else ())
        return Operand(c_addr, (c_t,))
    if bias_addr is not None or rotary is not None:
        t = ctx.scratch(f"{node.name}::{which}", (B, kv_heads, L, d))
        op = _prep(ctx, node, f"{which}_prep", new, rows, cols, ctx.addr(t), t,
                   bias_addr=bias_addr, rotary=rotary)
    else:
        op = new
    if present is not None:  # the present is the K/V itself: no copy
        ctx.address[present] = op.addr
        if op.deps and op.deps[0] in ctx.producer_layer:
            ctx.producer_layer[present] = ctx.producer_layer[op.deps[0]]
    return op


def lower_mha(ctx: LoweringContext, node: Node) -> None:
    """com.microsoft MultiHeadAttention (Q, K, V already projected; optional bias, past)."""
    prec = ctx.precision
    q_in = node.inputs[0]
    k_in, v_in, bias = _opt(node, 1), _opt(node, 2), _opt(node, 3)
    kpm, ab, past_k, past_v = _opt(node, 4), _opt(node, 5), _opt(node, 6), _opt(node, 7)
    pres_k, pres_v, qk_out = _opt_out(node, 1), _opt_out(node, 2), _opt_out(node, 3)
    heads = int(node.attrs.get("num_heads", 0))
    if heads < 1:
        raise _err(node, "num_heads must be given")
    qs = _shape(ctx, q_in)
    q_addr = ctx.addr(q_in)
    if len(qs) == 5:  # packed QKV [B, S, N, 3, H]
        B, S, _, _, d = qs
        D = heads * d
        k_new = Operand(q_addr + B * S * D * prec, (q_in,))
        v_new = Operand(q_addr + 2 * B * S * D * prec, (q_in,))
        Lk, dv = S, d
    elif len(qs) == 3:
        B, S, D = qs
        d = D // heads
        if k_in is None:
            raise _err(node, "key is required unless query is packed QKV [B, S, N, 3, H]")
        ks = _shape(ctx, k_in)
        k_addr = ctx.addr(k_in)
        if len(ks) == 5:  # packed KV [B, L, N, 2, H]
            Lk, dv = ks[1], ks[4]
            k_new = Operand(k_addr, (k_in,))
            v_new = Operand(k_addr + B * Lk * heads * d * prec, (k_in,))
        else:
            Lk = ks[1] if len(ks) == 3 else ks[2]
            if v_in is None:
                raise _err(node, "value is required with an unpacked key")
            vs = _shape(ctx, v_in)
            dv = vs[2] // heads if len(vs) == 3 else vs[3]
            k_new = Operand(k_addr, (k_in,))
            v_new = Operand(ctx.addr(v_in), (v_in,))
    else:
        raise _err(node, f"query must be [B, S, D] or packed [B, S, N, 3, H], got {qs}")
    P = _shape(ctx, past_k)[2] if past_k else 0
    L = _shape(ctx, pres_k)[2] if pres_k else P + Lk
    b_addr = ctx.addr(bias) if bias else None
    q = Operand(q_addr, (q_in,))
    if b_addr is not None:
        t = ctx.scratch(f"{node.name}::q", (B, heads, S, d))
        q = _prep(ctx, node, "q_prep", q, B * S, heads * d, ctx.addr(t), t, bias_addr=b_addr)
    k = _kv_side(ctx, node, "k", k_new, B * Lk, heads * d, B, heads, P, L, d, past_k, pres_k,
                 b_addr + heads * d * prec if b_addr is not None else None)
    v = _kv_side(ctx, node, "v", v_new, B * Lk, heads * dv, B, heads, P, L, dv, past_v, pres_v,
                 b_addr + 2 * heads * d * prec if b_addr is not None else None)
    a = AttnShape(B, S, L, heads, heads, d, dv)
    attention_core(ctx, node, a, q, k, v, node.outputs[0],
                   mask=bool(kpm) or bool(int(node.attrs.get("unidirectional", 0))), bias=ab,
                   qk_out=qk_out)


def lower_decoder_masked_mha(ctx: LoweringContext, node: Node) -> None:
    """com.microsoft DecoderMaskedMultiHeadAttention (ONNX Runtime's one-token decoding
    attention of its GPT-2, Whisper and beam-search exports): MultiHeadAttention with its
    inputs in another order (query, key, value, mask_index, attention_bias, past_key,
    past_value, past_sequence_length, beam_width, cache_indirection, bias). With
    ``past_present_share_buffer`` the cache is a buffer of the maximum length, and the
    length attended is that buffer's, as for GroupQueryAttention: the current length is
    data (``past_sequence_length``); so are the beams' cache indirections, read as the
    plain cache."""
    ins = list(node.inputs) + [""] * (11 - len(node.inputs))
    lower_mha(ctx, replace(node, inputs=[ins[0], ins[1], ins[2], ins[10], ins[3], ins[4],
                                         ins[5], ins[6]]))


def lower_gqa(ctx: LoweringContext, node: Node) -> None:
    """com.microsoft GroupQueryAttention: num_heads query heads share kv_num_heads K/V heads
    (always causal); optional packed QKV, KV cache (past/present) and rotary embedding."""
    prec = ctx.precision
    q_in = node.inputs[0]
    k_in, v_in, past_k, past_v = _opt(node, 1), _opt(node, 2), _opt(node, 3), _opt(node, 4)
    cos, sin, ab = _opt(node, 7), _opt(node, 8), _opt(node, 10)
    pres_k, pres_v = _opt_out(node, 1), _opt_out(node, 2)
    heads = int(node.attrs.get("num_heads", 0))
    kv_heads = int(node.attrs.get("kv_num_heads", 0))
    if heads < 1 or kv_heads < 1:
        raise _err(node, "num_heads and kv_num_heads must be given")
    qs = _shape(ctx, q_in)
    if len(qs) != 3:
        raise _err(node, f"query must be [batch, seq, hidden], got {qs}")
    B, S, width = qs
    q_addr = ctx.addr(q_in)
    if k_in is None:  # packed [B, S, (N + 2 Nkv) H]
        d = width // (heads + 2 * kv_heads)
        k_new = Operand(q_addr + B * S * heads * d * prec, (q_in,))
        v_new = Operand(q_addr + B * S * (heads + kv_heads) * d * prec, (q_in,))
    else:
        d = width // heads
        k_new, v_new = Operand(ctx.addr(k_in), (k_in,)), Operand(ctx.addr(v_in), (v_in,))
    if past_k:
        P = _shape(ctx, past_k)[2]
    else:
        P = 0
    L = _shape(ctx, pres_k)[2] if pres_k else P + S
    rot_q = rot_k = None
    if int(node.attrs.get("do_rotary", 0)) and cos and sin:
        half = _shape(ctx, cos)[-1]
        rot_q = rot_k = (ctx.addr(cos), ctx.addr(sin), half, P)
    q = Operand(q_addr, (q_in,))
    if rot_q is not None:
        t = ctx.scratch(f"{node.name}::q", (B, heads, S, d))
        q = _prep(ctx, node, "q_prep", q, B * S, heads * d, ctx.addr(t), t, rotary=rot_q,
                  extra_deps=(cos, sin))
    k = _kv_side(ctx, node, "k", k_new, B * S, kv_heads * d, B, kv_heads, P, L, d, past_k,
                 pres_k, None, rotary=rot_k)
    v = _kv_side(ctx, node, "v", v_new, B * S, kv_heads * d, B, kv_heads, P, L, d, past_v,
                 pres_v, None)
    softcap = float(node.attrs.get("softcap", 0.0) or 0.0) > 0
    a = AttnShape(B, S, L, heads, kv_heads, d, d)
    attention_core(ctx, node, a, q, k, v, node.outputs[0], mask=True, bias=ab, softcap=softcap)


def lower_onnx_attention(ctx: LoweringContext, node: Node) -> None:
    """ONNX Attention (opset 23): Q, K, V in [B, N, S, H] or [B, S, N*H], GQA through
    kv_num_heads < q_num_heads, optional mask, past/present KV cache, causal, softcap."""
    q_in, k_in, v_in = node.inputs[0], node.inputs[1], node.inputs[2]
    mask, past_k, past_v = _opt(node, 3), _opt(node, 4), _opt(node, 5)
    pres_k, pres_v, qk_out = _opt_out(node, 1), _opt_out(node, 2), _opt_out(node, 3)
    qs, ks, vs = _shape(ctx, q_in), _shape(ctx, k_in), _shape(ctx, v_in)
    if len(qs) == 4:
        B, heads, S, d = qs
        kv_heads, Lk, dv = ks[1], ks[2], vs[3]
    elif len(qs) == 3:
        heads = int(node.attrs.get("q_num_heads", 0))
        kv_heads = int(node.attrs.get("kv_num_heads", 0))
        if heads < 1 or kv_heads < 1:
            raise _err(node, "3-D inputs need the q_num_heads and kv_num_heads attributes")
        B, S, Dq = qs
        d = Dq // heads
        Lk, dv = ks[1], vs[2] // kv_heads
    else:
        raise _err(node, f"Q must be 3-D or 4-D, got {qs}")
    P = _shape(ctx, past_k)[2] if past_k else 0
    L = P + Lk
    k_new, v_new = Operand(ctx.addr(k_in), (k_in,)), Operand(ctx.addr(v_in), (v_in,))
    k = _kv_side(ctx, node, "k", k_new, B * Lk, kv_heads * d, B, kv_heads, P, L, d, past_k,
                 pres_k, None)
    v = _kv_side(ctx, node, "v", v_new, B * Lk, kv_heads * dv, B, kv_heads, P, L, dv, past_v,
                 pres_v, None)
    a = AttnShape(B, S, L, heads, kv_heads, d, dv)
    attention_core(ctx, node, a, Operand(ctx.addr(q_in), (q_in,)), k, v, node.outputs[0],
                   mask=bool(int(node.attrs.get("is_causal", 0))), bias=mask,
                   softcap=float(node.attrs.get("softcap", 0.0) or 0.0) > 0, qk_out=qk_out)


def lower_qattention(ctx: LoweringContext, node: Node) -> None:
    """com.microsoft QAttention (what ONNX Runtime's dynamic quantization makes of a fused
    Attention): the QKV projection of the quantized input with int8 weights computes in
    int8, its dequantization (scales, zero points, bias) in the output path as for any
    integer GEMM; the attention itself runs in float, as ONNX Runtime's kernel runs it.
    The projection stores Q, K and V at the width it computes in (1 byte), as every npusim
    GEMM stores its output (MatMulIntegerToFloat likewise), where ONNX Runtime stores them
    dequantized: their store is counted at 1 byte per element, not the float width.
    Inputs: input, weight, bias, input_scale, weight_scale, [mask_index,
    input_zero_point, weight_zero_point, past]; scales and zero points are not loaded."""
    ins = list(node.inputs) + [""] * (9 - len(node.inputs))
    attention = replace(node, inputs=[ins[0], ins[1], ins[2], ins[5], ins[8]])
    lower_ms_attention(ctx, attention, projection_precision=INT8)


def lower_attention(ctx: LoweringContext, node: Node) -> None:
    if node.domain == MS:
        lower_ms_attention(ctx, node)
    elif node.domain in ("", "ai.onnx"):
        lower_onnx_attention(ctx, node)
    else:
        raise _err(node, f"Attention of domain '{node.domain}' is not supported "
                         "(only com.microsoft and ONNX's own)")


# --------------------------------------------------------------------------- fused GEMM/conv


def _activation_note(node: Node) -> str:
    act = _attr_str(node, "activation", "")
    return f"{act} (activation in the output path)" if act else ""


def lower_fused_conv(ctx: LoweringContext, node: Node) -> None:
    """FusedConv: Conv (+ bias) with its activation applied on the way out (free). With
    a sum input Z (a residual) the activation comes after the add: one element-wise pass
    of the vector unit over the output that adds Z and applies it, the pass a raw
    export's Add and activation make (``vector.emit_elementwise``, one cost rule)."""
    conv = Node(name=node.name, op_type=node.op_type, domain=node.domain,
                inputs=node.inputs[:3], outputs=list(node.outputs), attrs=dict(node.attrs))
    lower_conv(ctx, conv)
    y = node.outputs[0]
    z = _opt(node, 3)
    act = _attr_str(node, "activation")
    if z is None:
        note = _activation_note(node)
        if note:
            _layer_info(ctx, ctx.producer_layer[y]).fused.append(note)
        return
    steps = ELEMENTWISE["Add"] + (ELEMENTWISE.get(act, ELEMENTWISE["Relu"]) if act else [])
    emit_elementwise(ctx, Node(name=f"{node.name}/sum", op_type=node.op_type,
                               domain=node.domain, inputs=[y, z], outputs=[y]), steps)


def lower_fused_gemm(ctx: LoweringContext, node: Node) -> None:
    """FusedGemm: Gemm with the activation on the way out (free)."""
    lower_gemm(ctx, node)
    note = _activation_note(node)
    if note:
        _layer_info(ctx, ctx.producer_layer[node.outputs[0]]).fused.append(note)


def lower_fused_matmul(ctx: LoweringContext, node: Node) -> None:
    """FusedMatMul: alpha * op(A) . op(B) with transA/transB over the last two dims."""
    if int(node.attrs.get("transBatchA", 0)) or int(node.attrs.get("transBatchB", 0)):
        raise _err(node, "transBatchA/transBatchB are not supported")
    prec = ctx.precision
    a_shape, b_shape = _shape(ctx, node.inputs[0]), _shape(ctx, node.inputs[1])
    ta, tb = bool(node.attrs.get("transA", 0)), bool(node.attrs.get("transB", 0))
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise _err(node, f"operands must be at least 2-D, got {a_shape} and {b_shape}")
    N, C = (a_shape[-1], a_shape[-2]) if ta else (a_shape[-2], a_shape[-1])
    C2, M = (b_shape[-1], b_shape[-2]) if tb else (b_shape[-2], b_shape[-1])
    if C != C2:
        raise _err(node, f"inner dimensions differ ({a_shape} x {b_shape}, transA={int(ta)}, "
                         f"transB={int(tb)})")
    if len(b_shape) == 2 and not ta:
        N = prod(a_shape[:-1])  # shared weights: leading dims of A are just rows
        offsets = [(0, 0, 0)]
    else:
        out_batch = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
        xo = _batch_strides(a_shape[:-2], out_batch, N * C * prec)
        wo = _batch_strides(b_shape[:-2], out_batch, C * M * prec)
        yo = np.arange(prod(out_batch), dtype=np.int64) * (N * M * prec)
        offsets = list(zip(xo.tolist(), wo.tolist(), yo.tolist()))
    y = node.outputs[0]
    prob = GemmProblem(N=N, C=C, M=M, batch_offsets=offsets, x_addr=ctx.addr(node.inputs[0]),
                       x_row_stride=(N if ta else C) * prec, x_trans=ta,
                       w_addr=ctx.addr(node.inputs[1]), w_trans=tb, y_addr=ctx.addr(y))
    info = LayerInfo(name=node.name, op_type=node.op_type,
                     input_shapes=[a_shape, b_shape], output_shape=_shape(ctx, y),
                     macs=len(offsets) * N * C * M, mapping="", mapping_source="")
    emit_gemm(ctx, node, prob, info)


def lower_gemm_fast_gelu(ctx: LoweringContext, node: Node) -> None:
    """GemmFastGelu: X [.., K] . W [K, N] + bias, FastGelu in the output path (free)."""
    prec = ctx.precision
    x, w, bias = node.inputs[0], node.inputs[1], _opt(node, 2)
    xs, ws = _shape(ctx, x), _shape(ctx, w)
    N, C, M = prod(xs[:-1]), xs[-1], ws[-1]
    y = node.outputs[0]
    prob = GemmProblem(N=N, C=C, M=M, batch_offsets=[(0, 0, 0)], x_addr=ctx.addr(x),
                       x_row_stride=C * prec, x_trans=False, w_addr=ctx.addr(w), w_trans=False,
                       y_addr=ctx.addr(y), bias_addr=ctx.bias_addr(bias) if bias else None)
    info = LayerInfo(name=node.name, op_type=node.op_type,
                     input_shapes=[_shape(ctx, t) for t in node.inputs if t],
                     output_shape=_shape(ctx, y), macs=N * C * M, mapping="", mapping_source="",
                     fused=["FastGelu (activation in the output path)"])
    emit_gemm(ctx, node, prob, info)


# --------------------------------------------------------------------------- vector contrib ops


def _rows_cols(shape, axis: int = -1) -> tuple[int, int]:
    axis = axis % len(shape) if shape else 0
    return prod(shape[:axis]), prod(shape[axis:])


def _row_operand(ctx: LoweringContext, t: str, rows: int, cols: int) -> RowInput:
    """An operand over the op's rows: the full tensor, or rows repeating over the leading
    dims (e.g. a skip of [S, H] for [B, S, H]), one broadcast row, or one value per row."""
    shape = _shape(ctx, t)
    n = prod(shape)
    if n == rows * cols:
        return RowInput(ctx.addr(t))
    if n == rows > 1 and shape[-1] == 1 < cols:  # one value per row (a gate of (..., 1))
        prec = ctx.precision
        return RowInput(ctx.addr(t), "gather", elems=1, row_stride=prec,
                        base_of=lambda r0: r0 * prec)
    if n == cols or n == 1:
        return RowInput(ctx.addr(t), "bcast", elems=None if n == cols else 1)
    if n % cols == 0 and rows % (n // cols) == 0:
        period = n // cols
        prec = ctx.precision
        return RowInput(ctx.addr(t), "gather", row_stride=cols * prec,
                        base_of=lambda r0: (r0 % period) * cols * prec)
    raise NpusimError(f"operand '{t}' of shape {_shape(ctx, t)} does not broadcast over "
                      f"{rows} rows of {cols}")


def _simple_rows(ctx: LoweringContext, node: Node, operands: list[str],
                 prefix: tuple[str, ...], op: str | None = None, params: list[str] = (),
                 axis: int = -1, sum_out: str | None = None) -> int:
    """``prefix`` element steps over ``operands`` (the first is the rows), then the row op
    ``op`` with its per-column ``params``; a layer of the node's rows."""
    y = node.outputs[0]
    ys = _shape(ctx, y)
    rows, cols = _rows_cols(ys, axis)
    first = _row_operand(ctx, operands[0], rows, cols)
    if first.kind != "rows":
        raise _err(node, f"input '{operands[0]}' of shape {_shape(ctx, operands[0])} is not "
                         f"{rows} rows of {cols}")
    inputs = [_row_operand(ctx, t, rows, cols) for t in operands[1:]]
    inputs += [RowInput(ctx.addr(t), "params") for t in params]
    lid = emit_rows(ctx, node, name=node.name, rows=rows, cols=cols, x=first.addr,
                    y=ctx.addr(y), prefix=prefix, op=op, inputs=tuple(inputs),
                    sum_out=ctx.addr(sum_out) if sum_out else None,
                    preds=_preds(ctx, node.inputs), outputs=node.outputs,
                    input_shapes=[_shape(ctx, t) for t in node.inputs if t], output_shape=ys)
    _produced(ctx, lid, [sum_out])
    return lid


def lower_skip_layer_norm(ctx: LoweringContext, node: Node) -> None:
    """(Skip)(Simplified)LayerNormalization: x + skip (+ bias), then (RMS) layer norm."""
    simplified = node.op_type.startswith("SkipSimplified")
    x, skip, gamma = node.inputs[0], node.inputs[1], node.inputs[2]
    if simplified:
        beta, bias = None, _opt(node, 3)
    else:
        beta, bias = _opt(node, 3), _opt(node, 4)
    operands = [x, skip] + ([bias] if bias else [])
    _simple_rows(ctx, node, operands, ("add",) * (len(operands) - 1),
                 "SimplifiedLayerNormalization" if simplified else "LayerNormalization",
                 [gamma] + ([beta] if beta else []), sum_out=_opt_out(node, 3))


def lower_embed_layer_norm(ctx: LoweringContext, node: Node,
                           widen: tuple[str, ...] = ()) -> None:
    """EmbedLayerNormalization: gathered word rows + position rows (+ segment row), then
    layer norm. The token ids are not known: the gathered rows are spread over the table
    (one DMA run each), as random ids would be. ``widen``: the vector steps that
    dequantize each gathered row's element (QEmbedLayerNormalization)."""
    prec = ctx.precision
    seg_ids = _opt(node, 1)  # the ids themselves (4 bytes a token) are not loaded
    word, pos, seg = node.inputs[2], node.inputs[3], _opt(node, 4)
    gamma, beta = node.inputs[5], _opt(node, 6)
    y = node.outputs[0]
    B, S, H = _shape(ctx, y)
    V = _shape(ctx, word)[0]
    rows = B * S
    spread = max(1, V // rows) * H * prec  # more tokens than words: the table again
    inputs = [RowInput(ctx.addr(word), "gather", row_stride=spread,
                       base_of=lambda r0: (r0 % V) * spread),
              RowInput(ctx.addr(pos), "gather", row_stride=H * prec,
                       base_of=lambda r0: (r0 % S) * H * prec)]
    prefix = [*widen, *widen, "add"]
    if seg and seg_ids:
        inputs.append(RowInput(ctx.addr(seg), "bcast"))
        prefix += [*widen, "add"]
    inputs += [RowInput(ctx.addr(t), "params") for t in (gamma, beta) if t]
    emb_sum = _opt_out(node, 2)
    lid = emit_rows(ctx, node, name=node.name, rows=rows, cols=H, x=None, y=ctx.addr(y),
                    prefix=tuple(prefix), op="LayerNormalization", inputs=tuple(inputs),
                    sum_out=ctx.addr(emb_sum) if emb_sum else None,
                    preds=_preds(ctx, node.inputs), outputs=node.outputs,
                    input_shapes=[_shape(ctx, t) for t in node.inputs if t],
                    output_shape=(B, S, H))
    _produced(ctx, lid, [emb_sum])


def lower_qembed_layer_norm(ctx: LoweringContext, node: Node) -> None:
    """QEmbedLayerNormalization (ONNX Runtime's dynamic quantization of
    EmbedLayerNormalization): the tables stored in int8, each gathered element dequantized
    as it is read (a DequantizeLinear's steps; none on an int8 config), then the float op
    (gamma and beta, int8 too, are loaded once per tile: their widening is not charged).
    Inputs: input_ids, segment_ids, the word, position and segment tables, gamma, beta,
    mask, then scales and zero points (not loaded). The tables' rows are read at the
    layer's width: a few rows per token, a small share of a model's bytes, which the row
    emitter moves at one width."""
    ins = list(node.inputs) + [""] * (8 - len(node.inputs))
    widen = tuple(op for op, passes in dequantize_steps(ctx) for _ in range(passes))
    lower_embed_layer_norm(ctx, replace(node, inputs=ins[:8]), widen)


def lower_bias_gelu(ctx: LoweringContext, node: Node) -> None:
    """BiasGelu (A + bias, gelu) and FastGelu (optional bias, gelu)."""
    bias = _opt(node, 1)
    _simple_rows(ctx, node, [node.inputs[0]] + ([bias] if bias else []),
                 ("add", "gelu") if bias else ("gelu",))


def lower_quick_gelu(ctx: LoweringContext, node: Node) -> None:
    """QuickGelu: x * sigmoid(alpha * x) (SiLU for alpha = 1)."""
    _simple_rows(ctx, node, [node.inputs[0]], ("mul", "sigmoid", "mul"))


def lower_bias_add(ctx: LoweringContext, node: Node) -> None:
    """BiasAdd: X + bias + skip."""
    _simple_rows(ctx, node, node.inputs[:3], ("add", "add"))


def lower_bias_softmax(ctx: LoweringContext, node: Node) -> None:
    """BiasSoftmax: softmax(data + bias) over the axes from ``axis`` on."""
    _simple_rows(ctx, node, node.inputs[:2], ("add",), "Softmax",
                 axis=int(node.attrs.get("axis", 1)))


def lower_rotary(ctx: LoweringContext, node: Node) -> None:
    """RotaryEmbedding (com.microsoft and ONNX): x*cos + rotate(x)*sin per position."""
    prec = ctx.precision
    x = node.inputs[0]
    if node.domain == MS:
        cos, sin = node.inputs[2], node.inputs[3]
    else:
        cos, sin = node.inputs[1], node.inputs[2]
    xs = _shape(ctx, x)
    S = xs[-2]
    rows, cols = _rows_cols(xs)
    half = _shape(ctx, cos)[-1]
    y = node.outputs[0]

    def table_row(r0: int) -> int:
        return (r0 % S) * half * prec

    tables = tuple(RowInput(ctx.addr(t), "gather", elems=half, row_stride=half * prec,
                            base_of=table_row) for t in (cos, sin))
    emit_rows(ctx, node, name=node.name, rows=rows, cols=cols, x=ctx.addr(x), y=ctx.addr(y),
              prefix=("mul", "mul", "add"), inputs=tables, preds=_preds(ctx, node.inputs),
              outputs=node.outputs, input_shapes=[_shape(ctx, t) for t in node.inputs if t],
              output_shape=_shape(ctx, y))


def lower_gated_add(ctx: LoweringContext, node: Node) -> None:
    """GatedAdd: X + Y * gate, the gate one value per row (plain mode). In projected mode
    (a ``gate_weight`` input) the gate is first the row's activation (..., K) times
    gate_weight (K, 1) on the array, then a sigmoid per row (layers ``name/gate``,
    ``name/sigmoid``)."""
    x, y_in, gate = node.inputs[:3]
    weight = _opt(node, 3)
    if weight:
        gs = _shape(ctx, gate)
        rows, K = prod(gs[:-1]), gs[-1]
        proj = ctx.scratch(f"{node.name}::gate", (*gs[:-1], 1))
        sub = Node(f"{node.name}/gate", node.op_type, domain=node.domain, inputs=[gate, weight],
                   outputs=[proj])
        emit_gemm(ctx, sub, GemmProblem(
            N=rows, C=K, M=1, batch_offsets=[(0, 0, 0)], x_addr=ctx.addr(gate),
            x_row_stride=K * ctx.precision, x_trans=False, w_addr=ctx.addr(weight),
            w_trans=False, y_addr=ctx.addr(proj)),
            LayerInfo(name=sub.name, op_type=node.op_type, input_shapes=[gs, _shape(ctx, weight)],
                      output_shape=(*gs[:-1], 1), macs=rows * K, mapping="", mapping_source=""))
        emit_elementwise(ctx, Node(f"{node.name}/sigmoid", node.op_type, domain=node.domain,
                                   inputs=[proj], outputs=[proj]), ELEMENTWISE["Sigmoid"])
        gate = proj
    _simple_rows(ctx, replace(node, inputs=[x, y_in, gate]), [x, y_in, gate], ("mul", "add"))


# the gate's activation in GatedRMSNorm: its element steps before the product
_GATE_STEPS = {"silu": ("sigmoid", "mul"), "swish": ("sigmoid", "mul"), "sigmoid": ("sigmoid",)}


def lower_gated_rms_norm(ctx: LoweringContext, node: Node) -> None:
    """GatedRMSNorm (Mamba2, Gated DeltaNet outputs): RMS norm over each group of C
    elements (C = len(scale), so a packed (B, T, H * C) tensor is H rows a token) times the
    activated gate. One row pass: the gate's activation and product are element steps of
    the pass (charged as its prefix: the same steps, in the row's one pass, since a head's
    row fits on chip)."""
    x, scale, gate = node.inputs[:3]
    act = str(node.attrs.get("activation", "silu"))
    if act not in _GATE_STEPS:
        raise _err(node, f"activation '{act}' is not one of {', '.join(_GATE_STEPS)}")
    C = prod(_shape(ctx, scale))
    xs = _shape(ctx, x)
    if not xs or C < 1 or xs[-1] % C:
        raise _err(node, f"the last dim of X {xs} must be a multiple of scale's length {C}")
    _group_rows(ctx, node, xs, C, [x, gate], (*_GATE_STEPS[act], "mul"), [scale])


def lower_branchwise_rms_norm(ctx: LoweringContext, node: Node) -> None:
    """BranchwiseRMSNorm: RMS norm of each branch's H values, X grouped (..., C, H) or
    flattened (..., C * H) with ``num_branches`` C; a scale of H values is the norm's own,
    one of C * H values is one multiply per element on the way."""
    x, scale = node.inputs[0], _opt(node, 1)
    xs = _shape(ctx, x)
    branches = int(node.attrs.get("num_branches", 0))
    if not xs or (branches and xs[-1] % branches) or (not branches and len(xs) < 2):
        raise _err(node, f"X {xs} is neither (..., C, H) nor (..., C * H) with num_branches "
                         f"{branches} dividing its last dim")
    H = xs[-1] // branches if branches else xs[-1]
    per_col = scale and prod(_shape(ctx, scale)) == H
    _group_rows(ctx, node, xs, H, [x] + ([scale] if scale and not per_col else []),
                ("mul",) if scale and not per_col else (), [scale] if per_col else [])


def _group_rows(ctx, node, xs, cols, operands, prefix, params) -> None:
    """A row op over groups of ``cols`` consecutive elements of ``xs`` (one row each)."""
    rows = prod(xs) // cols
    y = node.outputs[0]
    first, *rest = [RowInput(ctx.addr(operands[0]))] + [
        _row_operand(ctx, t, rows, cols) for t in operands[1:]]
    emit_rows(ctx, node, name=node.name, rows=rows, cols=cols, x=first.addr, y=ctx.addr(y),
              prefix=prefix, op="SimplifiedLayerNormalization",
              inputs=tuple(rest) + tuple(RowInput(ctx.addr(t), "params") for t in params),
              preds=_preds(ctx, node.inputs), outputs=node.outputs,
              input_shapes=[_shape(ctx, t) for t in node.inputs if t],
              output_shape=_shape(ctx, y))


def lower_linear_attention_gate(ctx: LoweringContext, node: Node) -> None:
    """LinearAttentionGate: decay = decay_scale * Softplus(a + dt_bias) (layer ``name``)
    and, when asked for, beta = Sigmoid(b) (layer ``name/beta``): element-wise passes over
    (B, T, H), the per-head vectors broadcast."""
    a, dt_bias, scale = node.inputs[:3]
    b = _opt(node, 3)
    decay, beta = node.outputs[0], _opt_out(node, 1)
    steps = ELEMENTWISE["Add"] + ELEMENTWISE["Softplus"] + ELEMENTWISE["Mul"]
    if decay:
        emit_elementwise(ctx, Node(node.name, node.op_type, domain=node.domain,
                                   inputs=[a, dt_bias, scale], outputs=[decay]), steps)
    if beta:
        if not b:
            raise _err(node, "the beta output needs the b input")
        emit_elementwise(ctx, Node(f"{node.name}/beta", node.op_type, domain=node.domain,
                                   inputs=[b], outputs=[beta]), ELEMENTWISE["Sigmoid"])


def _streams(ctx: LoweringContext, node: Node) -> tuple[int, int, int]:
    """(tokens, C, H) of hyper-connection streams: grouped (..., C, H) or flattened
    (..., C * H) with ``num_branches`` C."""
    xs = _shape(ctx, node.inputs[0])
    C = int(node.attrs.get("num_branches", 0))
    if C:
        if not xs or xs[-1] % C:
            raise _err(node, f"streams {xs}: the last dim is not num_branches = {C} branches")
        return prod(xs[:-1]), C, xs[-1] // C
    if len(xs) < 2:
        raise _err(node, f"streams {xs} are neither (..., C, H) nor flattened with "
                         f"num_branches")
    return prod(xs[:-2]), xs[-2], xs[-1]


def _per_branch_view(ctx, node, t, T, C, H, order) -> View:
    """A mix input of (..., C) / (..., C, 1) values (one per branch) or (..., C, H) / (...,
    C * H) (one per element), over an iteration space whose axes are ``order`` (a string of
    t, c, h)."""
    n = prod(_shape(ctx, t))
    if n == T * C:
        stride = {"t": C, "c": 1, "h": 0}
    elif n == T * C * H:
        stride = {"t": C * H, "c": H, "h": 1}
    else:
        raise _err(node, f"'{t}' of shape {_shape(ctx, t)} is neither one value per branch "
                         f"({T} x {C}) nor one per element ({T} x {C} x {H})")
    return View(ctx.addr(t), [stride[a] for a in order])


def lower_hyper_connection_pre_mix(ctx: LoweringContext, node: Node) -> None:
    """HyperConnectionPreMix: Y[.., h] = scale * sum_c X[.., c, h] * pre_mix[.., c, (h)], a
    multiply and an add per stream element (the scale, one multiply per output, rides in
    the add's pass). The iteration space is (tokens, H, C), C innermost, so a tile holds
    every branch of the outputs it writes."""
    T, C, H = _streams(ctx, node)
    em = LayerEmitter(ctx, node, "vector unit")
    emit_views(em, (T, H, C), [View(ctx.addr(node.inputs[0]), [C * H, 1, H]),
                               _per_branch_view(ctx, node, node.inputs[1], T, C, H, "thc")],
               [View(ctx.addr(node.outputs[0]), [H, 1, 0])], [("mul", 1), ("add", 1)])
    em.finish()


def lower_hyper_connection_post_mix(ctx: LoweringContext, node: Node) -> None:
    """HyperConnectionPostMix: Y[.., k, h] = sum_c stream_mix[.., c, k] X[.., c, h] +
    post_mix[.., k, (h)] block_output[.., h]. With a stream_mix, layer ``name/mix`` first:
    C multiply-adds per output element (space (tokens, k, h, c), c innermost); then the
    injection, a multiply and an add per output element, onto the mix (or the streams)."""
    T, C, H = _streams(ctx, node)
    x, block, post = node.inputs[:3]
    mix = _opt(node, 3)
    y = node.outputs[0]
    base = x
    if mix:
        if prod(_shape(ctx, mix)) != T * C * C:
            raise _err(node, f"stream_mix {_shape(ctx, mix)} is not ({T} x {C} x {C})")
        mixed = ctx.scratch(f"{node.name}::mix", (T, C, H))
        em = LayerEmitter(ctx, Node(f"{node.name}/mix", node.op_type, domain=node.domain,
                                    inputs=[x, mix], outputs=[mixed]), "vector unit")
        emit_views(em, (T, C, H, C), [View(ctx.addr(x), [C * H, 0, 1, H]),
                                      View(ctx.addr(mix), [C * C, 1, 0, C])],
                   [View(ctx.addr(mixed), [C * H, H, 1, 0])], [("mul", 1), ("add", 1)])
        em.finish()
        base = mixed
    em = LayerEmitter(ctx, Node(node.name, node.op_type, domain=node.domain,
                                inputs=[base, block, post], outputs=[y]), "vector unit")
    emit_views(em, (T, C, H), [View(ctx.addr(base), [C * H, H, 1]),
                               View(ctx.addr(block), [H, 0, 1]),
                               _per_branch_view(ctx, node, post, T, C, H, "tch")],
               [View(ctx.addr(y), [C * H, H, 1])], [("mul", 1), ("add", 1)])
    em.finish()


def lower_inverse(ctx: LoweringContext, node: Node) -> None:
    """Inverse (ONNX Runtime): each n x n matrix by Gauss-Jordan elimination on the vector
    unit: per pivot its row divided (n divisions) and the n - 1 other rows reduced (n
    multiply-subtracts each), so per element one div and n - 1 mul and sub."""
    n = _shape(ctx, node.inputs[0])[-1]
    emit_elementwise(ctx, node, [("div", 1), ("mul", n - 1), ("sub", n - 1)])


LOWERINGS: dict = {
    "Attention": lower_attention,
    "QAttention": lower_qattention,
    "MultiHeadAttention": lower_mha,
    "DecoderMaskedMultiHeadAttention": lower_decoder_masked_mha,
    "GroupQueryAttention": lower_gqa,
    "FusedConv": lower_fused_conv,
    "FusedGemm": lower_fused_gemm,
    "FusedMatMul": lower_fused_matmul,
    "TransposeMatMul": lower_fused_matmul,  # FusedMatMul's older name (ONNX Runtime keeps both)
    "GemmFastGelu": lower_gemm_fast_gelu,
    "SkipLayerNormalization": lower_skip_layer_norm,
    "SkipSimplifiedLayerNormalization": lower_skip_layer_norm,
    "EmbedLayerNormalization": lower_embed_layer_norm,
    "QEmbedLayerNormalization": lower_qembed_layer_norm,
    "BiasGelu": lower_bias_gelu,
    "FastGelu": lower_bias_gelu,
    "QuickGelu": lower_quick_gelu,
    "BiasAdd": lower_bias_add,
    "BiasSoftmax": lower_bias_softmax,
    "RotaryEmbedding": lower_rotary,
    # M-RoPE (Qwen-VL, Qwen3.5): each section's cos/sin from its own position stream (T, H
    # or W), the same half row of table values a token; the same rotation
    "MRotaryEmbedding": lower_rotary,
    "ScaledSiLU": lower_quick_gelu,  # z * sigmoid(z), z = scale * x
    "GatedAdd": lower_gated_add,
    "GatedRMSNorm": lower_gated_rms_norm,
    "BranchwiseRMSNorm": lower_branchwise_rms_norm,
    "LinearAttentionGate": lower_linear_attention_gate,
    "Inverse": lower_inverse,
    "HyperConnectionPreMix": lower_hyper_connection_pre_mix,
    "HyperConnectionPostMix": lower_hyper_connection_post_mix,
}
