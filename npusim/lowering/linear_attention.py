"""LinearAttention (opset 27): linear attention, its gated and delta-rule forms (GLA, RetNet,
DeltaNet, Gated DeltaNet of Qwen3.5), prefill and decode, in the chunk-parallel form NPU
and GPU kernels run it.

Each KV head carries a state ``S`` (d_k x d_v). The sequence is cut into chunks of
``c = min(chunk_size, T)`` tokens; within a chunk everything but the state is computed at
once on the array, and the chunks follow each other through the state (a decode step is one
chunk of one token). Per chunk ``i``, layers named ``name/c<i>/...``:

``gates``   (gated rules; vector unit) the decay's prefix sum over the chunk and its
            exponentials applied to the rows: ``Q' = Q exp(G)``, ``K' = K exp(-G)`` (for
            the scores) and ``K'' = K exp(G_last - G)`` (for the state), per element of Q
            ``add, exp, mul``, of K ``add, exp x2, sub, mul x2``; a decay per key dimension
            and one per head cost the same (the per-head one is broadcast)
``scores``  ``A = Q' K'^T`` per batch and query head: ``[c, d_k] x [d_k, c]``
``kk``      (delta rules) ``K K^T`` per batch and KV head: ``[c, d_k] x [d_k, c]``
``masks``   (vector unit) the causal mask on ``A`` (``mul``); delta rules: on ``K K^T`` the
            update rates and the strict lower mask (``mul x2``) and the inverse
            ``T = (I + tril(diag(beta) K K^T))^-1 diag(beta)`` by forward substitution:
            ``c^3 / 6`` multiply-adds, ``ceil(c / 6)`` ``mul`` and ``add`` per element
``w, u``    (delta rules) ``W = T K``: ``[c, c] x [c, d_k]``; ``U = T V``: ``[c, c] x [c, d_v]``
``delta``   (delta rules) ``U' = U - W S``: ``[c, d_k] x [d_k, d_v]``, accumulating onto U
``inter``   ``Q' S`` per query head: ``[c, d_k] x [d_k, d_v]``
``out``     ``O = A U' + Q' S`` per query head: ``[c, c] x [c, d_v]`` accumulating onto
            ``inter``'s rows (``U' = V`` for the rules without delta), written to the output
``decay``   (gated rules; vector unit) ``exp(G_last) S`` (``mul`` per state element)
``state``   ``S = K''^T U' + (decayed) S``: ``[d_k, c] x [c, d_v]``, into present_state

The ``g = q_num_heads / kv_num_heads`` query heads of a KV head share its state, keys and
values (grouped-query). The scale is folded into the GEMM output (free), as attention's.
A state layer waits for every layer of its chunk that reads the state it replaces (it is
updated in place). Without ``past_state`` the first chunk works on a zero state, as the op
defines it. ``decay`` reads the decay's row of the chunk's last token (the exponential of its
prefix sum comes from ``gates``, which needs it for ``K''``).

Widths and addresses: the GEMMs read and write at the layer's precision, and read an addend
(``U``, ``inter``'s rows, the state) at accumulator width, as every npusim GEMM does; so the
buffers read as addends are allocated at accumulator width (as the recurrent ops' XW).
Operands read as rows (``x``) are read exactly where the packed ``(B, T, H * d)`` layout puts
them; a block read as the array's weights (K, V) or written by a GEMM (the output) is the
head's contiguous ``[T, d]`` block of a ``(B, H, T, d)`` layout (ONNX Runtime's BNSH, as
attention's): the same bytes, disjoint per head; only their DRAM addresses differ.
"""

from __future__ import annotations

from math import ceil

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.context import LoweringContext
from npusim.lowering.gemm import GemmProblem, emit_gemm
from npusim.lowering.tiling import ACC_BYTES
from npusim.lowering.vector import LayerEmitter, View, emit_views
from npusim.program import LayerInfo

UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")
GATED = ("gated", "gated_delta")
DELTA = ("delta", "gated_delta")



def lower_linear_attention(ctx: LoweringContext, node: Node) -> None:
    g = ctx.graph
    ins = list(node.inputs) + [""] * (6 - len(node.inputs))
    q, k, v, past, decay, beta = ins[:6]
    y = node.outputs[0]
    present = node.outputs[1] if len(node.outputs) > 1 else ""
    rule = node.attrs.get("update_rule", "gated_delta")
    if rule not in UPDATE_RULES:
        raise NpusimError(f"LinearAttention '{node.name}': update_rule '{rule}' is not one of "
                          f"{', '.join(UPDATE_RULES)}")
    Hq, Hkv = int(node.attrs.get("q_num_heads", 0)), int(node.attrs.get("kv_num_heads", 0))
    q_shape, k_shape, v_shape = g.shape(q), g.shape(k), g.shape(v)
    if (Hq <= 0 or Hkv <= 0 or Hq % Hkv or len(q_shape) != 3 or len(k_shape) != 3
            or len(v_shape) != 3 or q_shape[2] % Hq or k_shape[2] % Hkv or v_shape[2] % Hkv
            or q_shape[2] // Hq != k_shape[2] // Hkv or k_shape[:2] != q_shape[:2]
            or v_shape[:2] != q_shape[:2]):
        raise NpusimError(f"LinearAttention '{node.name}': needs query (B, T, q_num_heads x "
                          f"d_k), key (B, T, kv_num_heads x d_k) and value (B, T, "
                          f"kv_num_heads x d_v) with q_num_heads a multiple of kv_num_heads; "
                          f"got {q_shape}, {k_shape}, {v_shape} with q_num_heads {Hq}, "
                          f"kv_num_heads {Hkv}")
    if rule in GATED and not decay or rule in DELTA and not beta:
        raise NpusimError(f"LinearAttention '{node.name}': update_rule '{rule}' needs the "
                          f"{'decay' if rule in GATED and not decay else 'beta'} input")
    chunk = int(node.attrs.get("chunk_size", 64))
    if chunk < 1:
        raise NpusimError(f"LinearAttention '{node.name}': chunk_size {chunk} must be positive")
    B, T = q_shape[:2]
    dk, dv = q_shape[2] // Hq, v_shape[2] // Hkv
    for t, widths in ((decay, (Hkv * dk, Hkv)), (beta, (Hkv, 1))):
        if t and (g.shape(t)[:2] != (B, T) or g.shape(t)[2] not in widths):
            raise NpusimError(f"LinearAttention '{node.name}': {t} has shape {g.shape(t)}; "
                              f"expected ({B}, {T}, one of {widths})")
    acc = max(ctx.precision, ACC_BYTES)
    # the state, updated in place chunk by chunk (an addend: accumulator width)
    state = present or ctx.scratch(f"{node.name}::present", (B, Hkv, dk, dv), acc)
    ctx.addr(state, B * Hkv * dk * dv * acc)
    if past:
        ctx.addr(past, B * Hkv * dk * dv * acc)
    s_prev = past or ctx.scratch(f"{node.name}::state0", (B, Hkv, dk, dv), acc)
    if T == 0:  # no token: the state passes through
        ctx.alias(state, s_prev)
        for t in (y, state):
            if s_prev in ctx.producer_layer:
                ctx.producer_layer[t] = ctx.producer_layer[s_prev]
        return
    la = _Chunks(ctx, node, B, T, Hq, Hkv, dk, dv, rule)
    c = min(chunk, T)
    n_chunks = ceil(T / c)
    outputs = []
    for i in range(n_chunks):
        r0 = i * c
        s_next = state if i == n_chunks - 1 else f"{node.name}/c{i}::state"
        if s_next != state:
            ctx.alias(s_next, state)
        outputs.append(la.chunk(f"{node.name}/c{i}", r0, min(c, T - r0), q, k, v, decay, beta,
                                s_prev, s_next))
        s_prev = s_next
    # the output is complete when every chunk's rows are: a layer with no work joins them
    join = ctx.builder.begin_layer(
        LayerInfo(name=node.name, op_type=node.op_type, input_shapes=[q_shape, k_shape, v_shape],
                  output_shape=g.shape(y), macs=0, mapping="",
                  mapping_source="the chunks' outputs joined (no data moved)"),
        sorted({ctx.producer_layer[t] for t in outputs}))
    ctx.producer_layer[y] = join


class _Chunks:
    """One LinearAttention node's sizes, and the layers of each of its chunks."""

    def __init__(self, ctx, node, B, T, Hq, Hkv, dk, dv, rule):
        self.ctx, self.node = ctx, node
        self.B, self.T, self.Hq, self.Hkv, self.dk, self.dv = B, T, Hq, Hkv, dk, dv
        self.G = Hq // Hkv
        self.rule = rule
        self.p = ctx.precision

    # -- helpers ------------------------------------------------------------------------
    def _gemm(self, name, inputs, out, N, C, M, offsets, x_addr, x_stride, w_addr, *,
              x_trans=False, w_trans=False, y_addr=None, bias=None, bias_rows=1,
              bias_stride=0, out_shape=()):
        ctx = self.ctx
        sub = Node(name, self.node.op_type, inputs=inputs, outputs=[out])
        info = LayerInfo(name=name, op_type=self.node.op_type, input_shapes=[],
                         output_shape=tuple(out_shape), macs=len(offsets) * N * C * M,
                         mapping="", mapping_source="")
        emit_gemm(ctx, sub, GemmProblem(
            N=N, C=C, M=M, batch_offsets=offsets, x_addr=x_addr, x_row_stride=x_stride,
            x_trans=x_trans, w_addr=w_addr, w_trans=w_trans,
            y_addr=ctx.addr(out) if y_addr is None else y_addr,
            bias_addr=None if bias is None else ctx.addr(bias), bias_rows=bias_rows,
            bias_batch_stride=bias_stride), info)
        return out

    def _per_q_head(self, x_off, w_off, y_off):
        """Batch offsets over (batch, query head): each query head with its KV head's data."""
        return [(x_off(b, h), w_off(b, h // self.G), y_off(b, h))
                for b in range(self.B) for h in range(self.Hq)]

    def _per_kv_head(self, x_off, w_off, y_off):
        return [(x_off(b, h), w_off(b, h), y_off(b, h))
                for b in range(self.B) for h in range(self.Hkv)]

    # -- one chunk ----------------------------------------------------------------------
    def chunk(self, tag, r0, c, q, k, v, decay, beta, s_prev, s_next) -> str:
        ctx, p = self.ctx, self.p
        B, T, Hq, Hkv, dk, dv = self.B, self.T, self.Hq, self.Hkv, self.dk, self.dv
        gated, delta = self.rule in GATED, self.rule in DELTA
        acc = max(p, ACC_BYTES)
        qs, ks = Hq * dk, Hkv * dk  # row widths (elements) of the packed Q and K

        def rows(length, width, d):
            """(batch, head) -> byte offset of the head's first row in a packed tensor of
            ``length`` rows per batch, ``width`` elements a row (read as rows)."""
            return lambda b, h: (b * length * width + h * d) * p

        def block(length, heads, d, first=0, item=p):
            """(batch, head) -> byte offset of the head's [length, d] block in a (B, heads,
            length, d) layout, from row ``first``."""
            return lambda b, h: ((b * heads + h) * length + first) * d * item

        def sc(what, shape, itemsize=None):
            return ctx.scratch(f"{tag}::{what}", shape, itemsize)

        # what the GEMMs read: Q and K rows from the chunk's first token, or the gates'
        # decayed copies of the chunk (B, c, H * d)
        q_in, k_in, k_state = q, k, k
        q_at, q_len = ctx.addr(q) + r0 * qs * p, T
        k_len, k_first = T, r0
        if gated:
            q_in, k_in = sc("q", (B, c, qs)), sc("k", (B, c, ks))
            k_state = sc("k_state", (B, c, ks))
            self._gates(tag, r0, c, q, k, decay, q_in, k_in, k_state)
            q_at, q_len = ctx.addr(q_in), c
            k_len, k_first = c, 0
        # A = Q' K'^T per query head: the chunk's scores
        A = self._gemm(f"{tag}/scores", [q_in, k_in], sc("scores", (B * Hq, c, c)), c, dk, c,
                       self._per_q_head(rows(q_len, qs, dk), block(k_len, Hkv, dk, k_first),
                                        block(c, Hq, c)),
                       q_at, qs * p, ctx.addr(k_in), w_trans=True, out_shape=(B, Hq, c, c))
        kk = None
        if delta:  # K K^T, then (masks) T in place
            kk = self._gemm(f"{tag}/kk", [k], sc("kk", (B * Hkv, c, c)), c, dk, c,
                            self._per_kv_head(rows(T, ks, dk), block(T, Hkv, dk, r0),
                                              block(c, Hkv, c)),
                            ctx.addr(k) + r0 * ks * p, ks * p, ctx.addr(k), w_trans=True,
                            out_shape=(B, Hkv, c, c))
        self._masks(tag, c, A, kk, beta, r0)
        # U' (the values the state takes in): V, or for the delta rules U - W S
        if delta:
            W = self._gemm(f"{tag}/w", [kk, k_in], sc("w", (B * Hkv, c, dk)), c, c, dk,
                           self._per_kv_head(block(c, Hkv, c), block(k_len, Hkv, dk, k_first),
                                             block(c, Hkv, dk)),
                           ctx.addr(kk), c * p, ctx.addr(k_in), out_shape=(B, Hkv, c, dk))
            U = self._gemm(f"{tag}/u", [kk, v], sc("u", (B * Hkv, c, dv), acc), c, c, dv,
                           self._per_kv_head(block(c, Hkv, c), block(T, Hkv, dv, r0),
                                             block(c, Hkv, dv, item=acc)),
                           ctx.addr(kk), c * p, ctx.addr(v), out_shape=(B, Hkv, c, dv))
            u_new = self._gemm(f"{tag}/delta", [W, s_prev, U], sc("u_new", (B * Hkv, c, dv)),
                               c, dk, dv,
                               self._per_kv_head(block(c, Hkv, dk), block(dk, Hkv, dv, item=acc),
                                                 block(c, Hkv, dv)),
                               ctx.addr(W), dk * p, ctx.addr(s_prev), bias=U, bias_rows=c,
                               bias_stride=c * dv * acc, out_shape=(B, Hkv, c, dv))
            u_off = block(c, Hkv, dv)
        else:
            u_new, u_off = v, block(T, Hkv, dv, r0)
        # the output rows: Q' S, then A U' added onto them
        inter = self._gemm(f"{tag}/inter", [q_in, s_prev], sc("inter", (B * Hq, c, dv), acc),
                           c, dk, dv,
                           self._per_q_head(rows(q_len, qs, dk), block(dk, Hkv, dv, item=acc),
                                            block(c, Hq, dv, item=acc)),
                           q_at, qs * p, ctx.addr(s_prev), out_shape=(B, Hq, c, dv))
        out = self._gemm(f"{tag}/out", [A, u_new, inter], f"{tag}::out", c, c, dv,
                         self._per_q_head(block(c, Hq, c), u_off, block(T, Hq, dv, r0)),
                         ctx.addr(A), c * p, ctx.addr(u_new),
                         y_addr=ctx.addr(self.node.outputs[0]), bias=inter, bias_rows=c,
                         bias_stride=c * dv * acc, out_shape=(B, Hq, c, dv))
        # the state: S = K''^T U' + exp(G_last) S, in place once its readers are done
        addend = self._decay(tag, r0, c, decay, s_prev) if gated else s_prev
        readers = [inter] + ([u_new] if delta else [])
        self._gemm(f"{tag}/state", [k_state, u_new, addend, *readers], s_next, dk, c, dv,
                   self._per_kv_head(lambda b, h: (b * k_len * ks + h * dk) * p, u_off,
                                     block(dk, Hkv, dv, item=acc)),
                   ctx.addr(k_state) + k_first * ks * p, ks * p, ctx.addr(u_new), x_trans=True,
                   bias=addend, bias_rows=dk, bias_stride=dk * dv * acc,
                   out_shape=(B, Hkv, dk, dv))
        return out

    def _gates(self, tag, r0, c, q, k, decay, q_out, k_out, k_state) -> None:
        """The chunk's decay applied to Q and K rows (gated rules)."""
        ctx, B, T, Hkv, G, dk = self.ctx, self.B, self.T, self.Hkv, self.G, self.dk
        d_width = self.ctx.graph.shape(decay)[2]  # Hkv * dk (per key dimension) or Hkv
        per_key = d_width == Hkv * dk
        d_str = [T * d_width, d_width, dk if per_key else 1, 0, 1 if per_key else 0]
        d_view = View(ctx.addr(decay), d_str, r0 * d_width)
        em = LayerEmitter(ctx, Node(f"{tag}/gates", self.node.op_type, inputs=[q, k, decay],
                                    outputs=[q_out, k_out, k_state]), "vector unit (decay)",
                          info=self._info(f"{tag}/gates", (B, c, self.Hq * dk)))
        space = (B, c, Hkv, G, dk)
        qs = self.Hq * dk
        emit_views(em, space, [View(ctx.addr(q), [T * qs, qs, G * dk, dk, 1], r0 * qs), d_view],
                   [View(ctx.addr(q_out), [c * qs, qs, G * dk, dk, 1])],
                   [("add", 1), ("exp", 1), ("mul", 1)])
        space = (B, c, Hkv, 1, dk)
        ks = Hkv * dk
        emit_views(em, space, [View(ctx.addr(k), [T * ks, ks, dk, 0, 1], r0 * ks), d_view],
                   [View(ctx.addr(k_out), [c * ks, ks, dk, 0, 1]),
                    View(ctx.addr(k_state), [c * ks, ks, dk, 0, 1])],
                   [("add", 1), ("exp", 2), ("sub", 1), ("mul", 2)])
        em.finish()

    def _masks(self, tag, c, A, kk, beta, r0) -> None:
        """The causal mask on the scores; for the delta rules T from K K^T (in place)."""
        ctx, B, Hq, Hkv, T = self.ctx, self.B, self.Hq, self.Hkv, self.T
        outs = [A] + ([kk] if kk else [])
        em = LayerEmitter(ctx, Node(f"{tag}/masks", self.node.op_type,
                                    inputs=outs + ([beta] if kk else []), outputs=outs),
                          "vector unit (masks)", info=self._info(f"{tag}/masks", (B, Hq, c, c)))
        emit_views(em, (B * Hq, c, c), [View(ctx.addr(A), [c * c, c, 1])],
                   [View(ctx.addr(A), [c * c, c, 1])], [("mul", 1)])
        if kk:
            bw = ctx.graph.shape(beta)[2]  # Hkv, or 1 shared by the heads
            b_view = View(ctx.addr(beta), [T * bw, 1 if bw > 1 else 0, bw, 0], r0 * bw)
            emit_views(em, (B, Hkv, c, c), [View(ctx.addr(kk), [Hkv * c * c, c * c, c, 1]),
                                            b_view],
                       [View(ctx.addr(kk), [Hkv * c * c, c * c, c, 1])],
                       [("mul", 2 + ceil(c / 6)), ("add", ceil(c / 6))])
        em.finish()

    def _decay(self, tag, r0, c, decay, s_prev) -> str:
        """exp(G_last) S: the state decayed over the chunk (gated rules), reading the decay's
        row of the chunk's last token."""
        ctx, B, T, Hkv, dk, dv = self.ctx, self.B, self.T, self.Hkv, self.dk, self.dv
        out = ctx.scratch(f"{tag}::decayed", (B, Hkv, dk, dv), max(self.p, ACC_BYTES))
        d_width = ctx.graph.shape(decay)[2]
        per_key = d_width == Hkv * dk
        last = (r0 + c - 1) * d_width
        em = LayerEmitter(ctx, Node(f"{tag}/decay", self.node.op_type, inputs=[s_prev, decay],
                                    outputs=[out]), "vector unit (decay)",
                          info=self._info(f"{tag}/decay", (B, Hkv, dk, dv)))
        s = [Hkv * dk * dv, dk * dv, dv, 1]
        emit_views(em, (B, Hkv, dk, dv),
                   [View(ctx.addr(s_prev), s),
                    View(ctx.addr(decay), [T * d_width, dk if per_key else 1,
                                           1 if per_key else 0, 0], last)],
                   [View(ctx.addr(out), s)], [("mul", 1)])
        em.finish()
        return out

    def _info(self, name, shape) -> LayerInfo:
        return LayerInfo(name=name, op_type=self.node.op_type, input_shapes=[],
                         output_shape=tuple(shape), macs=0, mapping="", mapping_source="")


LOWERINGS: dict = {"LinearAttention": lower_linear_attention}
