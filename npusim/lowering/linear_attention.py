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

from dataclasses import dataclass
from math import ceil, prod

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.context import LoweringContext
from npusim.lowering.gemm import GemmProblem, emit_gemm
from npusim.lowering.tiling import ACC_BYTES
from npusim.lowering.vector import (MOVE, LayerEmitter, View, emit_elementwise, emit_row_layer,
                                    emit_views, row_major)
from npusim.program import LayerInfo

UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")
GATED = ("gated", "gated_delta")
DELTA = ("delta", "gated_delta")



@dataclass(frozen=True)
class Heads:
    """How the heads of Q, K, V, the state and the output pair up; every count divides the
    larger ones. LinearAttention: ``q`` query heads share the state, keys and values of
    their KV head (grouped-query: ``state = k = v``, ``out = q``). GatedDeltaNet: ``v``
    value heads share the query and key of their head (inverse grouped-query: ``state =
    out = v``, ``k = q``)."""

    q: int
    k: int
    v: int
    state: int
    out: int

    def q_of_out(self, h: int) -> int:
        return h // (self.out // self.q)

    def state_of_out(self, h: int) -> int:
        return h // (self.out // self.state)

    def k_of_state(self, h: int) -> int:
        return h // (self.state // self.k)

    def v_of_state(self, h: int) -> int:
        return h // (self.state // self.v)


@dataclass
class Operands:
    """Byte addresses of one run of sequences' operands (a group of equal-length sequences
    of a packed batch starts at an offset) and their rows' widths in elements; ``names``
    the tensors the layers wait for."""

    q: int
    k: int
    v: int
    y: int
    decay: int
    beta: int
    q_width: int  # elements from one token's Q row to the next
    k_width: int
    state_offset: int  # bytes into the state tensors (the group's first sequence)
    names: dict[str, str]  # role -> tensor (q, k, v, y, decay, beta)


def lower_linear_attention(ctx: LoweringContext, node: Node) -> None:
    g = ctx.graph
    ins = list(node.inputs) + [""] * (6 - len(node.inputs))
    q, k, v, past, decay, beta = ins[:6]
    y = node.outputs[0]
    present = node.outputs[1] if len(node.outputs) > 1 else ""
    rule = _rule(node)
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
    _check_gates(node, rule, decay, beta)
    B, T = q_shape[:2]
    dk, dv = q_shape[2] // Hq, v_shape[2] // Hkv
    for t, widths in ((decay, (Hkv * dk, Hkv)), (beta, (Hkv, 1))):
        if t and (g.shape(t)[:2] != (B, T) or g.shape(t)[2] not in widths):
            raise NpusimError(f"LinearAttention '{node.name}': {t} has shape {g.shape(t)}; "
                              f"expected ({B}, {T}, one of {widths})")
    heads = Heads(q=Hq, k=Hkv, v=Hkv, state=Hkv, out=Hq)
    names = dict(q=q, k=k, v=v, y=y, decay=decay, beta=beta)
    lower_chunked(ctx, node, rule, heads, dk, dv, [(B, T)], names, (q, Hq * dk), (k, Hkv * dk),
                  past, present, v_major=False,
                  decay_width=g.shape(decay)[2] if decay else 0,
                  beta_width=g.shape(beta)[2] if beta else 0)


def _rule(node: Node) -> str:
    rule = node.attrs.get("update_rule", "gated_delta")
    if rule not in UPDATE_RULES:
        raise NpusimError(f"{node.op_type} '{node.name}': update_rule '{rule}' is not one of "
                          f"{', '.join(UPDATE_RULES)}")
    return rule


def _check_gates(node: Node, rule: str, decay: str, beta: str) -> None:
    if rule in GATED and not decay or rule in DELTA and not beta:
        raise NpusimError(f"{node.op_type} '{node.name}': update_rule '{rule}' needs the "
                          f"{'decay' if rule in GATED and not decay else 'beta'} input")


def lower_chunked(ctx: LoweringContext, node: Node, rule: str, heads: Heads, dk: int, dv: int,
                  groups: list[tuple[int, int]], names: dict[str, str],
                  q_rows: tuple[str, int], k_rows: tuple[str, int], past: str, present: str,
                  *, v_major: bool, decay_width: int, beta_width: int,
                  offsets: dict[str, int] | None = None,
                  widths: dict[str, int] | None = None) -> None:
    """The chunk layers of a linear attention over ``groups`` of (sequences, tokens each),
    one after the other in the packed token order, and a join of the output. ``q_rows`` and
    ``k_rows``: the tensor Q (K) rows are read from and its row width in elements;
    ``offsets``: bytes from a role's tensor to its first element (packed QKV); ``widths``:
    elements from one token's row of a role's tensor to the next (default: its heads')."""
    chunk = int(node.attrs.get("chunk_size", 64))
    if chunk < 1:
        raise NpusimError(f"{node.op_type} '{node.name}': chunk_size {chunk} must be positive")
    p = ctx.precision
    acc = max(p, ACC_BYTES)
    B = sum(b for b, _ in groups)
    per_seq = heads.state * dk * dv * acc
    # the state, updated in place chunk by chunk (an addend: accumulator width)
    s_shape = (B, heads.state) + ((dv, dk) if v_major else (dk, dv))
    state = present or ctx.scratch(f"{node.name}::present", s_shape, acc)
    ctx.addr(state, B * per_seq)
    if past:
        ctx.addr(past, B * per_seq)
    s_first = past or ctx.scratch(f"{node.name}::state0", s_shape, acc)
    y = names["y"]
    if all(T == 0 for _, T in groups):  # no token: the state passes through
        ctx.alias(state, s_first)
        for t in (y, state):
            if s_first in ctx.producer_layer:
                ctx.producer_layer[t] = ctx.producer_layer[s_first]
        return
    offsets = offsets or {}
    widths = dict(dict(q=q_rows[1], k=k_rows[1], v=heads.v * dv, y=heads.out * dv,
                       decay=decay_width, beta=beta_width), **(widths or {}))
    outputs, last_states = [], []
    token0, seq0 = 0, 0
    for gi, (Bg, T) in enumerate(groups):
        def at(role, t0=token0):
            name = names[role]
            return ctx.addr(name) + offsets.get(role, 0) + t0 * widths[role] * p if name else 0
        ops = Operands(q=at("q"), k=at("k"), v=at("v"), y=at("y"), decay=at("decay"),
                       beta=at("beta"), q_width=q_rows[1], k_width=k_rows[1],
                       state_offset=seq0 * per_seq, names=names)
        la = _Chunks(ctx, node, Bg, T, heads, dk, dv, rule, ops, v_major, decay_width,
                     beta_width, q_rows[0], k_rows[0])
        tag = node.name if len(groups) == 1 else f"{node.name}/g{gi}"
        c = min(chunk, T)
        n_chunks = ceil(T / c) if T else 0
        s_prev = s_first
        for i in range(n_chunks):
            r0 = i * c
            s_next = state if i == n_chunks - 1 else f"{tag}/c{i}::state"
            if s_next != state:
                ctx.alias(s_next, state)
            outputs.append(la.chunk(f"{tag}/c{i}", r0, min(c, T - r0), s_prev, s_next))
            s_prev = s_next
        if n_chunks:
            last_states.append(ctx.producer_layer[state])
        token0 += Bg * T
        seq0 += Bg
    # the output is complete when every chunk's rows are: a layer with no work joins them
    join = ctx.builder.begin_layer(
        LayerInfo(name=node.name, op_type=node.op_type,
                  input_shapes=[ctx.graph.shape(t) for t in node.inputs if t],
                  output_shape=ctx.graph.shape(y), macs=0, mapping="",
                  mapping_source="the chunks' outputs joined (no data moved)"),
        sorted({ctx.producer_layer[t] for t in outputs} | set(last_states)))
    ctx.producer_layer[y] = join
    if len(groups) > 1:  # every group's last chunk writes its sequences' part of the state
        ctx.producer_layer[state] = join


class _Chunks:
    """One run of equal-length sequences of a linear attention node: its sizes, and the
    layers of each of its chunks."""

    def __init__(self, ctx, node, B, T, heads, dk, dv, rule, ops, v_major, decay_width,
                 beta_width, q_name, k_name):
        self.ctx, self.node = ctx, node
        self.B, self.T, self.h, self.dk, self.dv = B, T, heads, dk, dv
        self.rule, self.ops, self.v_major = rule, ops, v_major
        self.decay_width, self.beta_width = decay_width, beta_width
        self.q_name, self.k_name = q_name, k_name
        self.p = ctx.precision

    # -- helpers ------------------------------------------------------------------------
    def _gemm(self, name, inputs, out, N, C, M, offsets, x_addr, x_stride, w_addr, *,
              x_trans=False, w_trans=False, y_addr=None, bias=None, bias_addr=None,
              bias_rows=1, bias_stride=0, out_shape=()):
        ctx = self.ctx
        sub = Node(name, self.node.op_type, inputs=inputs, outputs=[out])
        info = LayerInfo(name=name, op_type=self.node.op_type, input_shapes=[],
                         output_shape=tuple(out_shape), macs=len(offsets) * N * C * M,
                         mapping="", mapping_source="")
        if bias is not None and bias_addr is None:
            bias_addr = ctx.bias_addr(bias)
        emit_gemm(ctx, sub, GemmProblem(
            N=N, C=C, M=M, batch_offsets=offsets, x_addr=x_addr, x_row_stride=x_stride,
            x_trans=x_trans, w_addr=w_addr, w_trans=w_trans,
            y_addr=ctx.addr(out) if y_addr is None else y_addr,
            bias_addr=bias_addr, bias_rows=bias_rows, bias_batch_stride=bias_stride), info)
        return out

    def _per_out_head(self, x_off, w_off, y_off):
        """Batch offsets over (batch, output head)."""
        return [(x_off(b, h), w_off(b, h), y_off(b, h))
                for b in range(self.B) for h in range(self.h.out)]

    def _per_state_head(self, x_off, w_off, y_off):
        return [(x_off(b, h), w_off(b, h), y_off(b, h))
                for b in range(self.B) for h in range(self.h.state)]

    def _state_at(self, s) -> int:
        return self.ctx.addr(s) + self.ops.state_offset

    # -- one chunk ----------------------------------------------------------------------
    def chunk(self, tag, r0, c, s_prev, s_next) -> str:
        ctx, p, hd, ops = self.ctx, self.p, self.h, self.ops
        B, T, dk, dv = self.B, self.T, self.dk, self.dv
        gated, delta = self.rule in GATED, self.rule in DELTA
        acc = max(p, ACC_BYTES)
        names = ops.names
        vm = self.v_major

        def rows(length, width, d, head=lambda h: h):
            """(batch, head) -> byte offset of the head's first row in a packed tensor of
            ``length`` rows per batch, ``width`` elements a row (read as rows)."""
            return lambda b, h: (b * length * width + head(h) * d) * p

        def block(length, heads, d, first=0, item=p, head=lambda h: h):
            """(batch, head) -> byte offset of the head's [length, d] block in a (B, heads,
            length, d) layout, from row ``first``."""
            return lambda b, h: ((b * heads + head(h)) * length + first) * d * item

        def sc(what, shape, itemsize=None):
            return ctx.scratch(f"{tag}::{what}", shape, itemsize)

        state_block = block(dv if vm else dk, hd.state, dk if vm else dv, item=acc)
        # what the GEMMs read: Q and K rows from the chunk's first token, or the gates'
        # decayed copies of the chunk, per output head (Q) and state head (K)
        q_in, k_in, k_state = self.q_name, self.k_name, self.k_name
        q_at, q_len, q_w, q_head = ops.q + r0 * ops.q_width * p, T, ops.q_width, hd.q_of_out
        k_at, k_len, k_first, k_heads = ops.k, T, r0, hd.k
        k_of_out = lambda h: hd.k_of_state(hd.state_of_out(h))  # noqa: E731
        k_of_state = hd.k_of_state
        if gated:
            q_in, k_in = sc("q", (B, c, hd.out * dk)), sc("k", (B, c, hd.state * dk))
            k_state = sc("k_state", (B, c, hd.state * dk))
            self._gates(tag, r0, c, q_in, k_in, k_state)
            q_at, q_len, q_w, q_head = ctx.addr(q_in), c, hd.out * dk, (lambda h: h)
            k_at, k_len, k_first, k_heads = ctx.addr(k_in), c, 0, hd.state
            k_of_out, k_of_state = hd.state_of_out, (lambda h: h)
        # A = Q' K'^T per output head: the chunk's scores
        A = self._gemm(f"{tag}/scores", [q_in, k_in], sc("scores", (B * hd.out, c, c)),
                       c, dk, c,
                       self._per_out_head(rows(q_len, q_w, dk, q_head),
                                          block(k_len, k_heads, dk, k_first, head=k_of_out),
                                          block(c, hd.out, c)),
                       q_at, q_w * p, k_at, w_trans=True, out_shape=(B, hd.out, c, c))
        kk = None
        if delta:  # K K^T per state head, then (masks) T in place
            kk = self._gemm(f"{tag}/kk", [self.k_name], sc("kk", (B * hd.state, c, c)), c, dk, c,
                            self._per_state_head(rows(T, ops.k_width, dk, hd.k_of_state),
                                                 block(T, hd.k, dk, r0, head=hd.k_of_state),
                                                 block(c, hd.state, c)),
                            ops.k + r0 * ops.k_width * p, ops.k_width * p, ops.k, w_trans=True,
                            out_shape=(B, hd.state, c, c))
        self._masks(tag, c, A, kk, r0)
        # U' (the values the state takes in): V, or for the delta rules U - W S
        v_block = block(T, hd.v, dv, r0, head=hd.v_of_state)
        if delta:
            W = self._gemm(f"{tag}/w", [kk, k_in], sc("w", (B * hd.state, c, dk)), c, c, dk,
                           self._per_state_head(block(c, hd.state, c),
                                                block(k_len, k_heads, dk, k_first,
                                                      head=k_of_state),
                                                block(c, hd.state, dk)),
                           ctx.addr(kk), c * p, k_at, out_shape=(B, hd.state, c, dk))
            U = self._gemm(f"{tag}/u", [kk, names["v"]], sc("u", (B * hd.state, c, dv), acc),
                           c, c, dv,
                           self._per_state_head(block(c, hd.state, c), v_block,
                                                block(c, hd.state, dv, item=acc)),
                           ctx.addr(kk), c * p, ops.v, out_shape=(B, hd.state, c, dv))
            u_new = self._gemm(f"{tag}/delta", [W, s_prev, U],
                               sc("u_new", (B * hd.state, c, dv)), c, dk, dv,
                               self._per_state_head(block(c, hd.state, dk), state_block,
                                                    block(c, hd.state, dv)),
                               ctx.addr(W), dk * p, self._state_at(s_prev), w_trans=vm,
                               bias=U, bias_rows=c, bias_stride=c * dv * acc,
                               out_shape=(B, hd.state, c, dv))
            u_at, u_state, u_len, u_first = ctx.addr(u_new), (lambda h: h), c, 0
        else:
            u_new, u_at, u_state, u_len, u_first = names["v"], ops.v, hd.v_of_state, T, r0
        u_heads = hd.state if delta else hd.v
        # the output rows: Q' S, then A U' added onto them
        inter = self._gemm(f"{tag}/inter", [q_in, s_prev], sc("inter", (B * hd.out, c, dv), acc),
                           c, dk, dv,
                           self._per_out_head(rows(q_len, q_w, dk, q_head),
                                              lambda b, h: state_block(b, hd.state_of_out(h)),
                                              block(c, hd.out, dv, item=acc)),
                           q_at, q_w * p, self._state_at(s_prev), w_trans=vm,
                           out_shape=(B, hd.out, c, dv))
        out = self._gemm(f"{tag}/out", [A, u_new, inter], f"{tag}::out", c, c, dv,
                         self._per_out_head(
                             block(c, hd.out, c),
                             block(u_len, u_heads, dv, u_first,
                                   head=lambda h: u_state(hd.state_of_out(h))),
                             block(T, hd.out, dv, r0)),
                         ctx.addr(A), c * p, u_at, y_addr=ops.y, bias=inter, bias_rows=c,
                         bias_stride=c * dv * acc, out_shape=(B, hd.out, c, dv))
        # the state: S = K''^T U' + exp(G_last) S (V-major: its transpose U'^T K''), in
        # place once its readers are done
        if gated:
            addend = self._decay(tag, r0, c, s_prev)
            addend_at = ctx.addr(addend)
        else:
            addend, addend_at = s_prev, self._state_at(s_prev)
        readers = [inter] + ([u_new] if delta else [])
        u_rows = block(u_len, u_heads, dv, u_first, head=u_state)
        if vm:  # S^T [dv, dk] = U'^T [dv, c] . K'' [c, dk]
            self._gemm(f"{tag}/state", [k_state, u_new, addend, *readers], s_next, dv, c, dk,
                       self._per_state_head(u_rows, block(k_len, k_heads, dk, k_first,
                                                          head=k_of_state), state_block),
                       u_at, dv * p, ctx.addr(k_state) if gated else ops.k, x_trans=True,
                       y_addr=self._state_at(s_next),
                       bias=addend, bias_addr=addend_at, bias_rows=dv,
                       bias_stride=dv * dk * acc, out_shape=(B, hd.state, dv, dk))
        else:
            k_rows_at = ctx.addr(k_state) if gated else ops.k + r0 * ops.k_width * p
            k_rows_w = hd.state * dk if gated else ops.k_width
            k_rows = rows(k_len, k_rows_w, dk, k_of_state)
            self._gemm(f"{tag}/state", [k_state, u_new, addend, *readers], s_next, dk, c, dv,
                       self._per_state_head(k_rows, u_rows, state_block),
                       k_rows_at, k_rows_w * p, u_at, x_trans=True,
                       y_addr=self._state_at(s_next), bias=addend, bias_addr=addend_at,
                       bias_rows=dk, bias_stride=dk * dv * acc,
                       out_shape=(B, hd.state, dk, dv))
        return out

    def _gates(self, tag, r0, c, q_out, k_out, k_state) -> None:
        """The chunk's decay applied to Q rows (one copy per output head) and K rows (per
        state head) (gated rules)."""
        ctx, B, T, hd, dk, ops = self.ctx, self.B, self.T, self.h, self.dk, self.ops
        dw = self.decay_width  # state * dk (per key dimension) or state
        per_key = dw == hd.state * dk
        em = LayerEmitter(ctx, Node(f"{tag}/gates", self.node.op_type,
                                    inputs=[self.q_name, self.k_name, self.ops.names["decay"]],
                                    outputs=[q_out, k_out, k_state]), "vector unit (decay)",
                          info=self._info(f"{tag}/gates", (B, c, hd.out * dk)))

        def decay_view(n1, n2):
            """The decay over (B, c, n1, n2, dk), state head a * n2 + b (n2 = 1: a)."""
            a, b = (hd.state // n1), (1 if hd.state == n1 * n2 else 0)
            heads = [a * dk, b * dk, 1] if per_key else [a, b, 0]
            return View(ops.decay, [T * dw, dw] + heads, r0 * dw)

        # Q' per output head: (B, c, n1, n2, dk) with n1 the fewer of Q and state heads
        n1 = min(hd.q, hd.state)
        n2 = hd.out // n1
        qw, qo = ops.q_width, hd.out * dk
        emit_views(em, (B, c, n1, n2, dk),
                   [View(ops.q, [T * qw, qw, (hd.q // n1) * dk, dk if hd.q == hd.out else 0, 1],
                         r0 * qw), decay_view(n1, n2)],
                   [View(ctx.addr(q_out), [c * qo, qo, n2 * dk, dk, 1])],
                   [("add", 1), ("exp", 1), ("mul", 1)])
        # K' and K'' per state head: (B, c, k heads, state heads a K head serves, dk)
        g = hd.state // hd.k
        kw, ko = ops.k_width, hd.state * dk
        emit_views(em, (B, c, hd.k, g, dk),
                   [View(ops.k, [T * kw, kw, dk, 0, 1], r0 * kw), decay_view(hd.k, g)],
                   [View(ctx.addr(k_out), [c * ko, ko, g * dk, dk, 1]),
                    View(ctx.addr(k_state), [c * ko, ko, g * dk, dk, 1])],
                   [("add", 1), ("exp", 2), ("sub", 1), ("mul", 2)])
        em.finish()

    def _masks(self, tag, c, A, kk, r0) -> None:
        """The causal mask on the scores; for the delta rules T from K K^T (in place)."""
        ctx, B, hd, T = self.ctx, self.B, self.h, self.T
        outs = [A] + ([kk] if kk else [])
        beta = self.ops.names["beta"]
        em = LayerEmitter(ctx, Node(f"{tag}/masks", self.node.op_type,
                                    inputs=outs + ([beta] if kk else []), outputs=outs),
                          "vector unit (masks)", info=self._info(f"{tag}/masks",
                                                                 (B, hd.out, c, c)))
        emit_views(em, (B * hd.out, c, c), [View(ctx.addr(A), [c * c, c, 1])],
                   [View(ctx.addr(A), [c * c, c, 1])], [("mul", 1)])
        if kk:
            bw = self.beta_width  # state heads, or 1 shared by the heads
            b_view = View(self.ops.beta, [T * bw, 1 if bw > 1 else 0, bw, 0], r0 * bw)
            S = hd.state
            emit_views(em, (B, S, c, c), [View(ctx.addr(kk), [S * c * c, c * c, c, 1]),
                                          b_view],
                       [View(ctx.addr(kk), [S * c * c, c * c, c, 1])],
                       [("mul", 2 + ceil(c / 6)), ("add", ceil(c / 6))])
        em.finish()

    def _decay(self, tag, r0, c, s_prev) -> str:
        """exp(G_last) S: the state decayed over the chunk (gated rules), reading the decay's
        row of the chunk's last token."""
        ctx, B, T, S, dk, dv = self.ctx, self.B, self.T, self.h.state, self.dk, self.dv
        shape = (B, S) + ((dv, dk) if self.v_major else (dk, dv))
        out = ctx.scratch(f"{tag}::decayed", shape, max(self.p, ACC_BYTES))
        dw = self.decay_width
        per_key = dw == S * dk
        last = (r0 + c - 1) * dw
        em = LayerEmitter(ctx, Node(f"{tag}/decay", self.node.op_type,
                                    inputs=[s_prev, self.ops.names["decay"]], outputs=[out]),
                          "vector unit (decay)", info=self._info(f"{tag}/decay", shape))
        s = row_major(shape)
        key, other = (1 if per_key else 0), 0
        inner = [other, key] if self.v_major else [key, other]
        emit_views(em, shape,
                   [View(self._state_at(s_prev), s),
                    View(self.ops.decay, [T * dw, dk if per_key else 1] + inner, last)],
                   [View(ctx.addr(out), s)], [("mul", 1)])
        em.finish()
        return out

    def _info(self, name, shape) -> LayerInfo:
        return LayerInfo(name=name, op_type=self.node.op_type, input_shapes=[],
                         output_shape=tuple(shape), macs=0, mapping="", mapping_source="")


# GatedDeltaNet's gate_activation: its element steps on the decay before the recurrence
# (float32 in ONNX Runtime): -exp(a_log) * Softplus(decay + dt_bias), or
# gate_lower_bound * Sigmoid(exp(a_log) * (decay + dt_bias)); exp(a_log) is per head
_SOFTPLUS_GATE = [("add", 1), ("exp", 1), ("add", 1), ("log", 1), ("mul", 1)]
_SIGMOID_GATE = [("add", 1), ("mul", 1), ("sigmoid", 1), ("mul", 1)]
GATE_ACTIVATIONS = {"none": [], "softplus": _SOFTPLUS_GATE, "qwen": _SOFTPLUS_GATE,
                    "sigmoid": _SIGMOID_GATE, "kda": _SIGMOID_GATE}


def lower_gated_delta_net(ctx: LoweringContext, node: Node) -> None:
    """GatedDeltaNet (ONNX Runtime; Qwen3.5's linear attention): the LinearAttention chunks
    with value heads sharing a query and key head (``num_heads_v`` a multiple of
    ``num_heads_q``), a V-major state ``(B, H_v, d_v, d_k)``, token-major operands
    ``(total_tokens, H, d)`` or ``(B, S, H, d)`` (or one packed QKV tensor), and on the
    vector unit before them: the gate activation on the decay (layer ``name/gate``), a
    sigmoid on beta (``name/beta``), the L2 norm of each query and key head
    (``name/l2norm``). With ``cu_seqlens`` the sequences' lengths are data, so they are taken
    as the even spread of the tokens (``total mod B`` sequences one token longer, first:
    layers ``name/g0/...``, ``name/g1/...``). A ``state_update`` output (compact transitions
    for speculative decoding) is a copy of the first ``state_update_capacity`` tokens' decay,
    key and value rows (``name/capture``)."""
    g = ctx.graph
    ins = list(node.inputs) + [""] * (11 - len(node.inputs))
    query, key, value, cu, decay, beta, init = ins[:7]
    outs = list(node.outputs) + [""] * (3 - len(node.outputs))
    y, final, update = outs[:3]
    rule = _rule(node)
    _check_gates(node, rule, decay, beta)
    p = ctx.precision

    def err(why: str) -> NpusimError:
        return NpusimError(f"GatedDeltaNet '{node.name}': {why}")

    qs = g.shape(query)
    if key and value:
        ks, vs = g.shape(key), g.shape(value)
        if (len(qs) not in (3, 4) or len(ks) != len(qs) or len(vs) != len(qs)
                or qs[:-2] != ks[:-2] or qs[:-2] != vs[:-2] or qs[-2:] != ks[-2:]
                or vs[-2] % qs[-2]):
            raise err(f"needs query and key (tokens, H_q, d_k) and value (tokens, H_v, d_v) "
                      f"(tokens: total or B, S) with H_v a multiple of H_q; got {qs}, {ks}, "
                      f"{vs}")
        lead, (Hq, dk), (Hv, dv) = qs[:-2], qs[-2:], vs[-2:]
        rows_q, rows_k = (query, Hq * dk), (key, Hq * dk)
        names = dict(q=query, k=key, v=value)
        widths = dict(q=Hq * dk, k=Hq * dk, v=Hv * dv)
        offsets = {}
    elif not key and not value:
        if not init or len(g.shape(init)) != 4:
            raise err("packed QKV (no key and value inputs) needs initial_state (B, H_v, d_v, "
                      "d_k) for the head counts")
        _, Hv, dv, dk = g.shape(init)
        W = qs[-1] if qs else 0
        Hq, rest = divmod(W - Hv * dv, 2 * dk)
        if len(qs) not in (2, 3) or rest or Hq < 1 or Hv % Hq:
            raise err(f"packed QKV {qs} is not (tokens, 2 x H_q x {dk} + {Hv} x {dv}) with "
                      f"{Hv} a multiple of H_q")
        lead = qs[:-1]
        rows_q, rows_k = (query, W), (query, W)
        names = dict(q=query, k=query, v=query)
        widths = dict(q=W, k=W, v=W)
        offsets = {"k": Hq * dk * p, "v": 2 * Hq * dk * p}
    else:
        raise err("key and value are both given or both omitted (packed QKV)")
    total = prod(lead)
    if len(lead) == 2:  # (B, S): uniform
        groups = [(lead[0], lead[1])]
    elif cu:
        B = prod(g.shape(cu)) - 1
        if B < 1:
            raise err(f"cu_seqlens {g.shape(cu)} holds no sequence")
        n, longer = divmod(total, B)
        groups = [(b, t) for b, t in ((longer, n + 1), (B - longer, n)) if b]
    elif init:
        B = g.shape(init)[0]
        if not B or total % B:
            raise err(f"{total} tokens do not split evenly over initial_state's batch of {B} "
                      f"(give cu_seqlens for sequences of different lengths)")
        groups = [(B, total // B)]
    else:
        raise err("without cu_seqlens, initial_state gives the batch size: give one of them")
    for role, t, allowed in (("decay", decay, (Hv, Hv * dk)), ("beta", beta, (Hv,))):
        if not t:
            continue
        width = prod(g.shape(t)) // max(total, 1)
        if width not in allowed or width * total != prod(g.shape(t)):
            raise err(f"{role} {g.shape(t)} is not ({total} tokens, one of {allowed})")
        widths[role] = width
    names.update(y=y, decay=decay, beta=beta)
    act = str(node.attrs.get("gate_activation", "none"))
    if act not in GATE_ACTIVATIONS:
        raise err(f"gate_activation '{act}' is not one of {', '.join(GATE_ACTIVATIONS)}")
    if decay and GATE_ACTIVATIONS[act]:
        names["decay"] = _elementwise(ctx, node, "gate", decay, GATE_ACTIVATIONS[act])
    b_act = str(node.attrs.get("beta_activation", "none"))
    if b_act not in ("none", "sigmoid"):
        raise err(f"beta_activation '{b_act}' is not one of none, sigmoid")
    if beta and b_act == "sigmoid":
        names["beta"] = _elementwise(ctx, node, "beta", beta, [("sigmoid", 1)])
    if int(node.attrs.get("qk_l2_norm", 0)):
        normed = _l2_norm_heads(ctx, node, total, Hq, dk, rows_q, rows_k, offsets)
        names.update(q=normed, k=normed)
        rows_q, rows_k = (normed, rows_q[1]), (normed, rows_k[1])
        offsets = dict(offsets, q=0, k=total * rows_q[1] * p)  # (K at column 0 of its copy)
    lower_chunked(ctx, node, rule, Heads(q=Hq, k=Hq, v=Hv, state=Hv, out=Hv), dk, dv, groups,
                  names, rows_q, rows_k, init, final, v_major=True,
                  decay_width=widths.get("decay", 0), beta_width=widths.get("beta", 0),
                  offsets=offsets, widths=widths)
    capacity = int(node.attrs.get("state_update_capacity", 0))
    if update and capacity > 0:
        _capture(ctx, node, update, groups, capacity, names, widths, offsets,
                 [("decay", widths.get("decay", 0)), ("k", Hq * dk), ("v", Hv * dv)])


def _elementwise(ctx, node, what, t, steps) -> str:
    """``steps`` per element of ``t`` into a copy (layer ``name/what``)."""
    out = ctx.scratch(f"{node.name}::{what}", ctx.graph.shape(t))
    emit_elementwise(ctx, Node(f"{node.name}/{what}", node.op_type, inputs=[t], outputs=[out]),
                     steps)
    return out


def _l2_norm_heads(ctx, node, total, H, dk, rows_q, rows_k, offsets) -> str:
    """Each query and key head's d_k values L2-normalized (layer ``name/l2norm``): a row op
    per head vector, read where it lies and written to the same place in a copy of the Q
    rows followed by one of the K rows."""
    p = ctx.precision
    out = ctx.scratch(f"{node.name}::qk", (total, rows_q[1] + rows_k[1]))
    em = LayerEmitter(ctx, Node(f"{node.name}/l2norm", node.op_type,
                                inputs=[rows_q[0], rows_k[0]], outputs=[out]), "vector unit",
                      info=LayerInfo(name=f"{node.name}/l2norm", op_type=node.op_type,
                                     input_shapes=[], output_shape=(total, 2, H, dk), macs=0,
                                     mapping="", mapping_source=""))
    dst = ctx.addr(out)
    for role, (t, width) in (("q", rows_q), ("k", rows_k)):
        src = ctx.addr(t) + offsets.get(role, 0)
        for h in range(H):
            emit_row_layer(em, O=total, L=dk, x=src + h * dk * p, y=dst + h * dk * p,
                           pitch=width, op="LpNormalization")
        dst += total * width * p
    em.finish()
    return out


def _capture(ctx, node, update, groups, capacity, names, widths, offsets, copies) -> None:
    """The compact transitions: the first ``capacity`` tokens of each sequence, their decay,
    key and value-sized delta rows copied into ``state_update`` (layer ``name/capture``)."""
    p = ctx.precision
    em = LayerEmitter(ctx, Node(f"{node.name}/capture", node.op_type,
                                inputs=[names["decay"], names["k"], names["v"]],
                                outputs=[update]), "vector unit",
                      info=LayerInfo(name=f"{node.name}/capture", op_type=node.op_type,
                                     input_shapes=[], output_shape=ctx.graph.shape(update),
                                     macs=0, mapping="", mapping_source=""))
    dst = ctx.addr(update)
    token0 = 0
    for Bg, T in groups:
        n = min(capacity, T)
        for role, width in copies:
            if not names.get(role) or not width or not n:
                continue
            src = ctx.addr(names[role]) + offsets.get(role, 0) + token0 * widths[role] * p
            emit_views(em, (Bg, n, width), [View(src, [T * widths[role], widths[role], 1])],
                       [View(dst, [n * width, width, 1])], [(MOVE, 1)])
            dst += Bg * n * width * p
        token0 += Bg * T
    em.finish()


LOWERINGS: dict = {"LinearAttention": lower_linear_attention,
                   "GatedDeltaNet": lower_gated_delta_net}
