"""Copied lowerings (npusim.lowering.replay) give the program a real lowering gives.

A serving iteration lowers each repeated op (every request's attention in every layer) once
and copies it with addresses, layers and names moved. The copy is right only if every tile
runs the same instruction rows on the same addresses after the same layers: compared here
tile by tile against lowering every op for real, on GQA and MHA with the KV caches, rotary
tables and scratch space of every request in their own places.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from npusim.config import load_config
from npusim.kernels import isa
from npusim.lowering import replay
from npusim.program import ProgramBuilder
from npusim.serving.server import LlmServer
from npusim.serving.spec import load_llm
from npusim.workload import Request


def _step(monkeypatch, kv_heads: int | None, copies: bool, contexts=(63, 63, 63, 31, 63),
          model: str = "llama3_8b", **changes):
    """One decode step of two layers of ``model`` (llama's attention: GQA, rotary; GPT-2's:
    projections with biases) over requests with the given contexts; returns the program,
    the memo and the builder."""
    if not copies:
        monkeypatch.setattr(replay.LoweringMemo, "lower",
                            lambda self, ctx, node, key, lower: lower(ctx, node))
    cfg = load_config("server", [])
    spec = dataclasses.replace(load_llm(model).with_overrides(
        {"layers": 2} | ({"kv_heads": kv_heads} if kv_heads else {}), "test"), **changes)
    reqs = [(i, Request(model=model, context=c, prompt=1, generate=2))
            for i, c in enumerate(contexts)]
    b = ProgramBuilder()
    srv = LlmServer(0, spec, reqs, cfg, b)
    srv.schedule(-1)
    monkeypatch.undo()
    return b.build(), srv.memo, b


def _tiles(p):
    """Each tile as what the kernels see: its instruction rows, layer, group and bases."""
    return [(p.inst[t[isa.T_INST_START]:t[isa.T_INST_START] + t[isa.T_INST_LEN]].tobytes(),
             t[isa.T_LAYER:].tobytes()) for t in p.tile]


@pytest.mark.parametrize("kv_heads", [8, 32])
def test_copied_attention_is_the_real_lowering(monkeypatch, kv_heads):
    copied, memo, b1 = _step(monkeypatch, kv_heads, True)
    real, _, b2 = _step(monkeypatch, kv_heads, False)
    # the attention of 2 layers x 5 requests: lowered twice (two context lengths), copied 8x
    attn = [k for k, r in memo._records.items() if r and k[0] == "GroupQueryAttention"]
    assert len(attn) == 2
    assert _tiles(copied) == _tiles(real)
    for f in ("group", "layer", "layer_succ", "release_order"):
        assert np.array_equal(getattr(copied, f), getattr(real, f)), f
    assert ([dataclasses.asdict(x) for x in copied.layers]
            == [dataclasses.asdict(x) for x in real.layers])
    assert b1.next_free_address == b2.next_free_address  # the same scratch space
    # the copies moved addresses: no two requests' attention tiles read the same KV rows
    names = [x.name for x in copied.layers]
    assert any("/r4/" in n for n in names) and len(set(names)) == len(names)


# GPT-2: layer 1's four projections (qkv, o, up, down: Gemm with a bias, which the
# accumulator reads at 4 bytes an element and which is stored so: ctx.bias_addr), its two
# norms and the final one, and its GELU are copies of layer 0's. Llama with biases (as
# Qwen's): layer 1's qkv, o and down; layer 0's up copies its gate (the same MatMul), layer
# 1's gate, up, SiLU, gating product and norms copy layer 0's, the final norm a norm.
@pytest.mark.parametrize("model, changes, copies", [
    ("gpt2", {}, {"Gemm": 4, "FastGelu": 1, "SkipLayerNormalization": 3}),
    ("llama3_8b", {"bias": True}, {"Gemm": 3, "MatMul": 3, "Silu": 1, "Mul": 1,
                                   "SkipSimplifiedLayerNormalization": 3}),
])
def test_copied_projections_with_biases_are_the_real_lowering(monkeypatch, model, changes,
                                                              copies):
    """Projections, norms and activations are copied from layer to layer; their outputs
    get their addresses from the lowering (its own allocation), and what is copied is
    what lowering it again gives."""
    done = []
    real_replay = replay._replay
    monkeypatch.setattr(replay, "_replay", lambda ctx, node, rec: (
        real_replay(ctx, node, rec) and not done.append(node.op_type)))
    copied, memo, b1 = _step(monkeypatch, None, True, model=model, **changes)
    real, _, b2 = _step(monkeypatch, None, False, model=model, **changes)
    assert {op: done.count(op) for op in copies} == copies
    assert _tiles(copied) == _tiles(real)
    for f in ("group", "layer", "layer_succ", "release_order"):
        assert np.array_equal(getattr(copied, f), getattr(real, f)), f
    assert ([dataclasses.asdict(x) for x in copied.layers]
            == [dataclasses.asdict(x) for x in real.layers])
    assert b1.next_free_address == b2.next_free_address


def test_an_address_in_two_tensors_that_move_apart_is_not_copied():
    """Two tensors share an address in the recorded op but not in the new one: no copy."""
    rec = replay._Where.of(np.array([[True, True], [True, False]]))
    assert rec.moves(np.array([4096, 4096])).tolist() == [4096, 4096]
    assert rec.moves(np.array([4096, 8192])) is None  # one address, two ways to move


def test_bias_loads_stay_inside_the_bias():
    """A projection's bias goes into the accumulator at 4 bytes an element and is stored so:
    every bias load of GPT-2's step reads inside the bias it belongs to (stored at 2 bytes
    an element, the loads of the wider projections ran up to 6 KiB into the next tensor)."""
    cfg = load_config("server", [])
    spec = load_llm("gpt2").with_overrides({"layers": 2}, "test")
    b = ProgramBuilder()
    srv = LlmServer(0, spec, [(0, Request(model="gpt2", prompt=8, generate=2))], cfg, b)
    srv.schedule(-1)
    prog = b.build()
    shapes = srv.mem.weight_shapes()
    names = [n for n in shapes if n.endswith(".bias")]
    assert all(srv.mem.weight_bytes[n] == 4 * np.prod(shapes[n]) for n in names)
    biases = [(srv.mem.weights[n], srv.mem.weights[n] + srv.mem.weight_bytes[n]) for n in names]
    checked = 0
    for t in prog.tile:
        rows = prog.inst[t[isa.T_INST_START]:t[isa.T_INST_START] + t[isa.T_INST_LEN]]
        for r in rows[(rows[:, isa.I_OP] == isa.OP_MVIN) & (rows[:, isa.I_TO_ACC] == 1)
                      & (rows[:, isa.I_SLOT] == 2)]:
            lo = t[isa.T_BASE0 + 2] + r[isa.I_OFFSET]
            hi = lo + (r[isa.I_N_OUTER] - 1) * r[isa.I_OUTER_STRIDE] + r[isa.I_RUN_BYTES]
            inside = [a <= lo and hi <= e for a, e in biases]
            assert sum(inside) == 1, (lo, hi)
            checked += 1
    assert checked >= 2 * 4  # every projection of both layers loads its bias
