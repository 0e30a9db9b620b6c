"""One serving iteration of a decoder-only LLM, lowered into the program.

An iteration runs every request of the batch one step: a request that just joined runs its
whole prompt (prefill), the others one token each (generation). As in Orca-style
iteration-level batching, the token rows of all requests are stacked into one ``[T, hidden]``
activation so the weight GEMMs run once per iteration for the whole batch, while attention
runs per request over that request's own KV cache. The graph is the one ONNX Runtime makes
of a pre-norm decoder (its fused ops, lowered by :mod:`npusim.lowering` like any other)::

    x = Gather(embeddings, tokens) [+ Gather(positions)]             [T, hidden]
    h = LayerNorm(x)                        (RMSNorm for "rmsnorm" models)
    per layer:
        qkv = h . W_qkv (+ bias)                                     [T, (N + 2 Nkv) d]
        per request r: GroupQueryAttention(qkv rows of r, past K/V of r) -> rows of attn
        o = attn . W_o (+ bias)
        h, x = SkipLayerNorm(o, skip=x)     (x += o; h = norm(x))
        f = FFN(h): up, GELU, down  |  SiLU(h . W_gate) * (h . W_up), down
        h, x = SkipLayerNorm(f, skip=x)     (the next layer's norm, or the final one)
    logits = Gather(h, last token of each request) . W_lm_head       [B, vocab]

The rows of request r in ``qkv`` and ``attn`` are views (no copies); a layer without tiles
joins the per-request attention layers before the output projection. Each request's KV
cache is one buffer per layer, allocated when it joins, which attention reads in place and
extends by the new rows (``past_present_share_buffer``). Weights are allocated once per
model and shared by every iteration and request. Sampling from the logits is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from npusim.config import NpuConfig
from npusim.frontend.graph import Graph, Node, TensorInfo
from npusim.lowering import LOWERINGS
from npusim.lowering.context import LoweringContext
from npusim.lowering.replay import LoweringMemo
from npusim.lowering.tiling import ACC_BYTES
from npusim.program import LayerInfo, ProgramBuilder
from npusim.serving.spec import LlmSpec

FLOAT, INT64 = 1, 7
MS = "com.microsoft"


@dataclass
class Slot:
    """One request's share of an iteration: ``q`` new tokens after ``past`` cached ones."""

    request: int  # index into the serving workload
    q: int
    past: int


@dataclass
class ModelMemory:
    """DRAM addresses of one served model: its weights and each request's KV cache."""

    spec: LlmSpec
    weights: dict[str, int] = field(default_factory=dict)
    weight_bytes: dict[str, int] = field(default_factory=dict)
    kv: dict[tuple[int, int, str], int] = field(default_factory=dict)  # (req, layer, k|v)

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        s = self.spec
        h, d, f = s.hidden, s.head_dim, s.intermediate
        qkv = (s.heads + 2 * s.kv_heads) * d
        shapes: dict[str, tuple[int, ...]] = {"embed": (s.vocab, h), "lm_head": (h, s.vocab)}
        if not s.rotary:
            shapes["positions"] = (s.max_positions, h)
        else:
            shapes["rope_cos"] = shapes["rope_sin"] = (s.max_positions, d // 2)
        # norm{i}: before layer i's attention (norm{layers}: the final one); mid{i}: before
        # layer i's FFN
        for i in range(s.layers + 1):
            shapes[f"norm{i}.gamma"] = shapes[f"norm{i}.beta"] = (h,)
        for i in range(s.layers):
            shapes[f"mid{i}.gamma"] = shapes[f"mid{i}.beta"] = (h,)
            shapes[f"l{i}.qkv"] = (h, qkv)
            shapes[f"l{i}.o"] = (s.heads * d, h)
            shapes[f"l{i}.down"] = (f, h)
            shapes[f"l{i}.up"] = (h, f)
            if s.activation == "swiglu":
                shapes[f"l{i}.gate"] = (h, f)
            if s.bias:
                for name, n in (("qkv", qkv), ("o", h), ("up", f), ("down", h)):
                    shapes[f"l{i}.{name}.bias"] = (n,)
        return shapes

    def allocate_weights(self, builder: ProgramBuilder, precision: int) -> None:
        """Every weight at ``precision`` bytes an element, biases at the accumulator's width
        (as ``LoweringContext.bias_addr``: the projections add them there)."""
        for name, shape in self.weight_shapes().items():
            self.weight_bytes[name] = prod(shape) * (ACC_BYTES if name.endswith(".bias")
                                                     else precision)
            self.weights[name] = builder.allocate(self.weight_bytes[name])

    def allocate_kv(self, builder: ProgramBuilder, request: int, tokens: int,
                    precision: int) -> None:
        """A KV cache for ``tokens`` positions of every layer of ``request``."""
        s = self.spec
        for i in range(s.layers):
            for which in "kv":
                self.kv[request, i, which] = builder.allocate(
                    s.kv_heads * tokens * s.head_dim * precision)


class _IterationGraph:
    """Builds the iteration's graph node by node, lowering each node as it is added."""

    def __init__(self, name: str, mem: ModelMemory, cfg: NpuConfig, builder: ProgramBuilder,
                 memo: LoweringMemo | None = None):
        self.name = name
        self.memo = memo or LoweringMemo()
        self.mem = mem
        self.graph = Graph(name=name, nodes=[], tensors={}, inputs=[], outputs=[])
        self.ctx = LoweringContext(graph=self.graph, config=cfg, builder=builder)
        self.prec = cfg.precision
        for w, shape in mem.weight_shapes().items():
            self.tensor(w, shape, initializer=True)
            self.ctx.address[w] = mem.weights[w]
            self.ctx.nbytes[w] = mem.weight_bytes[w]

    def tensor(self, name: str, shape, elem_type: int = FLOAT, initializer=False) -> str:
        self.graph.tensors[name] = TensorInfo(name, tuple(shape), elem_type, initializer)
        return name

    def view(self, name: str, shape, of: str, offset_bytes: int) -> str:
        """``name`` is bytes of ``of`` from ``offset_bytes``: same producer, no copy."""
        self.tensor(name, shape)
        self.ctx.address[name] = self.ctx.addr(of) + offset_bytes
        if of in self.ctx.producer_layer:
            self.ctx.producer_layer[name] = self.ctx.producer_layer[of]
        return name

    def op(self, op_type: str, inputs: list[str], outputs: list[tuple[str, tuple]],
           domain: str = "", **attrs) -> list[str]:
        names = []
        for out, shape in outputs:
            if out and out not in self.graph.tensors:
                self.tensor(out, shape)
            names.append(out)
        node = Node(name=f"{self.name}/{names[0]}", op_type=op_type, domain=domain,
                    inputs=inputs, outputs=names, attrs=attrs)
        self.graph.nodes.append(node)
        key = (op_type, domain, repr(sorted(attrs.items())), self.prec,
               tuple((self.graph.tensors[t].shape, self.graph.tensors[t].elem_type)
                     if t else None for t in [*inputs, *names]))
        self.memo.lower(self.ctx, node, key, LOWERINGS[op_type])
        return names

    def join(self, name: str, out: str, parts: list[str]) -> None:
        """A layer without tiles that ends when the producers of ``parts`` have ended; it
        becomes the producer of ``out`` (whose bytes the parts wrote)."""
        ctx = self.ctx
        preds = sorted({ctx.producer_layer[p] for p in parts})
        info = LayerInfo(name=f"{self.name}/{name}", op_type="Concat",
                         input_shapes=[self.graph.shape(p) for p in parts],
                         output_shape=self.graph.shape(out), macs=0, mapping="",
                         mapping_source="view (no data moved)")
        ctx.producer_layer[out] = ctx.builder.begin_layer(info, preds)


@dataclass
class IterationLayers:
    """Where one lowered iteration's layers are and whom each serves: ``own[r]`` are the
    layers that work for request ``r`` alone (its attention); layers from ``first`` up to
    ``per_sequence`` work on every request's token rows together; layers from
    ``per_sequence`` to ``last`` (the last-token gather and the LM head) on one row per
    request."""

    first: int
    last: int
    per_sequence: int
    own: dict[int, list[int]]


def lower_iteration(builder: ProgramBuilder, mem: ModelMemory, cfg: NpuConfig,
                    slots: list[Slot], name: str,
                    memo: LoweringMemo | None = None) -> IterationLayers:
    """Lower one iteration over ``slots`` into ``builder`` (``memo``: ops lowered before,
    copied where they repeat; kept by the caller across iterations of one builder)."""
    s = mem.spec
    h, d, N, K = s.hidden, s.head_dim, s.heads, s.kv_heads
    T = sum(sl.q for sl in slots)
    B = len(slots)
    g = _IterationGraph(name, mem, cfg, builder, memo)
    prec = g.prec
    first = builder.n_layers
    norm_op = "SkipLayerNormalization" if s.norm == "layernorm" else "SkipSimplifiedLayerNormalization"

    def norm_params(prefix: str) -> list[str]:
        return [f"{prefix}.gamma"] + ([f"{prefix}.beta"] if s.norm == "layernorm" else [])

    def linear(x: str, w: str, out: str, n_out: int) -> str:
        if s.bias:
            return g.op("Gemm", [x, w, f"{w}.bias"], [(out, (T, n_out))])[0]
        return g.op("MatMul", [x, w], [(out, (T, n_out))])[0]

    tokens = g.tensor("tokens", (T,), INT64)
    x = g.op("Gather", ["embed", tokens], [("embedded", (T, h))], axis=0)[0]
    if not s.rotary:
        pos = g.op("Gather", ["positions", g.tensor("positions_ids", (T,), INT64)],
                   [("position_rows", (T, h))], axis=0)[0]
        x = g.op("Add", [x, pos], [("x_in", (T, h))])[0]
    first_norm = "LayerNormalization" if s.norm == "layernorm" else "SimplifiedLayerNormalization"
    hn = g.op(first_norm, [x] + norm_params("norm0"), [("h0", (T, h))], axis=-1)[0]

    qkv_width = (N + 2 * K) * d
    own: dict[int, list[int]] = {sl.request: [] for sl in slots}
    offsets = []
    row = 0
    for sl in slots:
        offsets.append(row)
        row += sl.q
    for i in range(s.layers):
        qkv = linear(hn, f"l{i}.qkv", f"l{i}/qkv", qkv_width)
        attn = g.tensor(f"l{i}/attn", (T, N * d))
        g.ctx.addr(attn)
        parts = []
        for sl, r0 in zip(slots, offsets):
            r = sl.request
            L = sl.past + sl.q
            q_r = g.view(f"l{i}/r{r}/qkv", (1, sl.q, qkv_width), qkv, r0 * qkv_width * prec)
            out_r = g.view(f"l{i}/r{r}/attn", (1, sl.q, N * d), attn, r0 * N * d * prec)
            past_k = g.tensor(f"l{i}/r{r}/past_k", (1, K, sl.past, d))
            past_v = g.tensor(f"l{i}/r{r}/past_v", (1, K, sl.past, d))
            g.ctx.address[past_k] = mem.kv[r, i, "k"]
            g.ctx.address[past_v] = mem.kv[r, i, "v"]
            pres_k = g.tensor(f"l{i}/r{r}/k", (1, K, L, d))
            pres_v = g.tensor(f"l{i}/r{r}/v", (1, K, L, d))
            g.ctx.address[pres_k] = mem.kv[r, i, "k"]
            g.ctx.address[pres_v] = mem.kv[r, i, "v"]
            rotary = ["rope_cos", "rope_sin"] if s.rotary else ["", ""]
            before = builder.n_layers
            g.op("GroupQueryAttention",
                 [q_r, "", "", past_k, past_v, "", "", *rotary],
                 [(out_r, ()), (pres_k, ()), (pres_v, ())], domain=MS,
                 num_heads=N, kv_num_heads=K, do_rotary=int(s.rotary))
            own[r].extend(range(before, builder.n_layers))
            parts.append(out_r)
        g.join(f"l{i}/attn_join", attn, parts)
        o = linear(attn, f"l{i}.o", f"l{i}/o", h)
        hn, _, _, x = g.op(norm_op, [o, x] + norm_params(f"mid{i}"),
                           [(f"l{i}/h_mid", (T, h)), ("", ()), ("", ()), (f"l{i}/x_mid", (T, h))],
                           domain=MS)
        if s.activation == "swiglu":
            gate = g.op("MatMul", [hn, f"l{i}.gate"], [(f"l{i}/gate", (T, s.intermediate))])[0]
            up = g.op("MatMul", [hn, f"l{i}.up"], [(f"l{i}/up", (T, s.intermediate))])[0]
            act = g.op("Silu", [gate], [(f"l{i}/silu", (T, s.intermediate))])[0]
            act = g.op("Mul", [act, up], [(f"l{i}/gated", (T, s.intermediate))])[0]
        else:
            up = linear(hn, f"l{i}.up", f"l{i}/up", s.intermediate)
            act = g.op("FastGelu", [up], [(f"l{i}/gelu", (T, s.intermediate))], domain=MS)[0]
        f = linear(act, f"l{i}.down", f"l{i}/down", h)
        hn, _, _, x = g.op(norm_op, [f, x] + norm_params(f"norm{i + 1}"),
                           [(f"l{i + 1}/h", (T, h)), ("", ()), ("", ()), (f"l{i}/x_out", (T, h))],
                           domain=MS)
    per_sequence = builder.n_layers
    last = g.tensor("last_rows", (B,), INT64)
    last_h = g.op("Gather", [hn, last], [("last_hidden", (B, h))], axis=0)[0]
    g.op("MatMul", [last_h, "lm_head"], [("logits", (B, s.vocab))])
    return IterationLayers(first, builder.n_layers - 1, per_sequence, own)
