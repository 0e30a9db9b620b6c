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


# GPT-2: layer 1's qkv, o and down projections copy layer 0's; its up projection reads its
# bias (3072 elements at 4 bytes) past the pages the bias was given (at 2 bytes), so it is
# lowered for real; layer 1's two norms and the final one, and its GELU, are copies. Llama
# with biases (as Qwen's): every biased projection (qkv, o, down) reads past its pages and
# is lowered for real; layer 0's up copies its gate (the same MatMul), layer 1's gate, up,
# SiLU, gating product and norms copy layer 0's, and the final norm copies a norm.
@pytest.mark.parametrize("model, changes, copies", [
    ("gpt2", {}, {"Gemm": 3, "FastGelu": 1, "SkipLayerNormalization": 3}),
    ("llama3_8b", {"bias": True}, {"Gemm": 0, "MatMul": 3, "Silu": 1, "Mul": 1,
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
