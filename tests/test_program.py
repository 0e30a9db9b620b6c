"""ProgramBuilder.build: an LLM server builds again after every step it appends, and each
build converts only what was added since the last one. What it returns must be what one
build of the same emissions returns."""

from __future__ import annotations

import numpy as np

from npusim.config import load_config
from npusim.kernels import isa
from npusim.program import Instr, LayerInfo, Program, ProgramBuilder
from npusim.serving.server import LlmServer
from npusim.serving.spec import load_llm
from npusim.workload import Request

FIELDS = ("inst", "tile", "group", "layer", "layer_succ", "release_order")


def _same(a: Program, b: Program) -> None:
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype == np.int64 and np.array_equal(x, y), f
    assert a.inst.flags.c_contiguous
    assert [x.name for x in a.layers] == [x.name for x in b.layers]
    assert a.max_template_len == b.max_template_len


def _emit_round(b: ProgramBuilder, k: int) -> None:
    """Round k: a root layer released at cycle 100 * (3 - k) (so later rounds wait less), a
    layer after it and after a layer of the first round (an old layer gains a successor),
    one template shared by every round and one new each round."""
    b.release = 100 * (3 - k)
    shared = b.template("shared", lambda: [Instr.dma(True, 0, 0, 2, 64, 1, 0, 64),
                                           Instr.vector("add", 64, deps=(0,))])
    own = b.template(("own", k), lambda: [Instr.vector("mul", 8 * (k + 1))] * (k + 1))
    root = b.begin_layer(LayerInfo(f"root{k}", "Test", [], (), 0, "", "hand"), [])
    for _ in range(k + 1):
        b.begin_group()
        b.add_tile(shared, (4096 * k, 0, 0, 0))
        b.add_tile(own, (0, 0, 0, 0))
    b.begin_layer(LayerInfo(f"next{k}", "Test", [], (), 0, "", "hand"),
                  [root] if k == 0 else [root, 1, root])  # a repeated predecessor
    b.begin_group()
    b.add_tile(own, (8192 * k, 0, 0, 0))


def test_building_after_every_round_gives_one_build():
    step, once = ProgramBuilder(), ProgramBuilder()
    for k in range(3):
        _emit_round(step, k)
        _emit_round(once, k)
        built = step.build()
        if k == 1:  # and again with nothing new
            _same(step.build(), built)
    _same(built, once.build())
    # by hand: layer 1 (next0) is followed by next1 and next2; the roots wait in release order
    s, n = built.layer[1, isa.L_SUCC_START], built.layer[1, isa.L_SUCC_LEN]
    assert built.layer_succ[s:s + n].tolist() == [3, 5]
    assert built.release_order.tolist() == [4, 2, 0]
    assert built.layer[3, isa.L_N_PREDS] == 2  # a predecessor named twice counts once


def test_a_group_still_open_at_a_build_keeps_growing():
    b = ProgramBuilder()
    _emit_round(b, 0)
    first = b.build()
    tpl = b.template(("own", 0), lambda: [])
    b.add_tile(tpl, (1, 0, 0, 0))  # the open group (of next0) gains a tile after the build
    again = b.build()
    assert again.group[-1, isa.G_TILE_LEN] == first.group[-1, isa.G_TILE_LEN] + 1
    assert again.tile.shape[0] == first.tile.shape[0] + 1
    assert first.tile.shape[0] == 3  # the first program is left as it was built


def test_serving_steps_built_one_by_one_give_one_build():
    cfg = load_config("server", [])
    spec = load_llm("gpt2").with_overrides({"layers": 2}, "test")
    builds = []
    for each_step in (True, False):
        b = ProgramBuilder()
        srv = LlmServer(0, spec, [(0, Request(model="gpt2", prompt=8, generate=4))], cfg, b)
        srv.schedule(-1)
        for cycle in (1000, 2000, 3000):
            if each_step:
                b.build()
            srv.iteration_ended(cycle)
            srv.schedule(cycle)
        builds.append(b.build())
    _same(*builds)
    assert len(builds[0].layers) > 4 * 2  # four steps of two layers at least


def test_fast_fidelity_looks_at_each_extension_once():
    """Fast fidelity sorts tiles by content and sizes its windows by each layer's work; it
    does both for the layers an extension adds only. The tile contents after every step are
    those of the whole program compared at once (same equal pairs), and the work is each
    layer's DMA bytes and compute rows counted by hand."""
    from npusim.fast.forward import _static_work
    from npusim.fast.regions import TileContents, tile_contents

    cfg = load_config("server", [])
    spec = load_llm("gpt2").with_overrides({"layers": 2}, "test")
    b = ProgramBuilder()
    srv = LlmServer(0, spec, [(0, Request(model="gpt2", prompt=8, generate=4))], cfg, b)
    srv.schedule(-1)
    contents, first = TileContents(), 0
    for cycle in (1000, 2000, 3000, None):
        prog = b.build()
        inc, once = contents.update(prog), tile_contents(prog)
        pairs = set(zip(inc.tolist(), once.tolist()))
        assert len(pairs) == len(set(inc.tolist())) == len(set(once.tolist()))
        work = _static_work(prog, first)
        for lid in range(prog.layer.shape[0]):
            rows = [prog.inst[t[isa.T_INST_START]:t[isa.T_INST_START] + t[isa.T_INST_LEN]]
                    for t in prog.tile[prog.tile[:, isa.T_LAYER] == lid]]
            dma = sum(int(r[isa.I_N_OUTER]) * int(r[isa.I_N_INNER]) * int(r[isa.I_RUN_BYTES])
                      for rs in rows for r in rs if r[isa.I_OP] in (isa.OP_MVIN, isa.OP_MVOUT))
            compute = sum(1 for rs in rows for r in rs if r[isa.I_OP] > isa.OP_MVOUT)
            expect = (dma, compute) if lid >= first else (0, 0)
            assert (work[0, lid], work[1, lid]) == expect, lid
        if cycle is not None:
            first = prog.layer.shape[0]
            srv.iteration_ended(cycle)
            srv.schedule(cycle)
    assert first > 0 and work[0, first:].sum() > 0


def test_templates_of_the_same_rows_share_them():
    """Keys name a layer's tiles; two keys whose rows are the same get the same rows (the
    copies of a model in a request file each had an instruction table of their own)."""
    b = ProgramBuilder()
    rows = [Instr.dma(True, 0, 0, 2, 64, 1, 0, 64), Instr.vector("add", 64, deps=(0,))]
    first = b.template(("conv", 3), lambda: rows)
    again = b.template(("conv", 9), lambda: list(rows))
    other = b.template(("conv", 10), lambda: rows[:1])
    assert again == first == (0, 2)
    assert other == (2, 1)
    assert len(b.build().inst) == 3
