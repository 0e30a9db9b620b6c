"""Reusing lowered programs (npusim.lowering.reuse): a program is reused only for a config
with the same value in every field the lowering read, and a reused program is the one a
fresh lowering would build; the tile choosers' memo and array evaluation change nothing."""

from __future__ import annotations

import pytest

import npusim
from npusim.config import load_config
from npusim.frontend import load_model, resolve_model_path, with_example_dims
from npusim.lowering import lower_graph, reuse
from npusim.lowering.tiling import Budget, ConvShape, choose_conv_tile, choose_gemm_tile
from npusim.sweep.spec import Workload
from npusim.sweep.worker import execute_point
from tests.benchmarks.bench_lowering import program_digest


def graph_of(model: str, dims: dict | None = None):
    path = resolve_model_path(model)
    return load_model(path, with_example_dims(path, dims)[0])


def fresh(model: str, config, dims: dict | None = None) -> str:
    """Digest of a lowering outside any reuse."""
    return program_digest(lower_graph(graph_of(model, dims), config))


@pytest.fixture
def cache():
    """An empty program cache, in use for the test."""
    saved = reuse._cache
    reuse._cache = reuse.ProgramCache(size=4)
    with reuse.reusing_programs() as c:
        yield c
    reuse._cache = saved


@pytest.mark.parametrize("model,config", [("tiny_cnn", "mobile"), ("bert_base_layer", "server"),
                                          ("mobilenetv2", "server")])
def test_a_lowering_through_the_read_log_builds_the_same_program(cache, model, config):
    cfg = load_config(config)
    logged = program_digest(lower_graph(graph_of(model), cfg))
    assert cache.misses == 1
    reuse._active = False
    try:
        assert logged == fresh(model, cfg)
    finally:
        reuse._active = True


# Fields the lowering reads (tile budgets, schedule, queue depth, capacity warning), each
# changed: none may reuse the program lowered for the base config.
READ = [["num_cores=2"], ["precision=1"], ["core.spad_kib=2048"], ["core.accum_kib=256"],
        ["core.systolic.width=64"], ["core.systolic.height=64"],
        ["core.systolic.min_gemm_cycles=8"], ["core.ld_queue=4"], ["dma.request_bytes=32"],
        ["memory.channels=2"], ["core_freq_mhz=500"], ["memory.capacity_gib=1"]]
# Fields it never reads: these reuse it.
UNREAD = [["memory.controller.page_policy=closed"], ["noc.latency=7"],
          ["scheduler.policy=time-shared"], ["fidelity=fast"], ["energy.datatype=int8"],
          ["core.st_queue=3"], ["dma.max_outstanding=16"]]


def test_a_changed_field_the_lowering_reads_never_reuses_the_program(cache):
    base = load_config("server")
    lower_graph(graph_of("resnet18"), base)
    reads = {".".join(p) for p in cache.entries[0][1]}
    assert {"num_cores", "precision", "core.spad_bytes", "core.accum_bytes",
            "core.systolic.width", "core.systolic.height", "core.systolic.min_gemm_cycles",
            "core.systolic.dataflow", "core.ld_queue", "dma.request_bytes",
            "memory.peak_bytes_per_s", "memory.type", "core_freq_mhz",
            "memory.capacity_gib"} == reads
    base_digest = program_digest(lower_graph(graph_of("resnet18"), base))
    assert (cache.hits, cache.misses) == (1, 1)
    for override in READ:
        cfg = load_config("server", override)
        cache.entries = cache.entries[:1]  # only the base program to (wrongly) reuse
        misses = cache.misses
        got = program_digest(lower_graph(graph_of("resnet18"), cfg))
        assert cache.misses == misses + 1, override
        reuse._active = False
        assert got == fresh("resnet18", cfg), override
        reuse._active = True
        # (the tiles of ResNet-18 on server stay the same for these two; read anyway)
        if override not in (["memory.capacity_gib=1"], ["core.systolic.min_gemm_cycles=8"]):
            assert got != base_digest, override


def test_a_changed_field_the_lowering_never_reads_reuses_the_same_program(cache):
    base = load_config("server")
    lower_graph(graph_of("resnet18"), base)
    for override in UNREAD:
        cfg = load_config("server", override)
        hits = cache.hits
        got = lower_graph(graph_of("resnet18"), cfg)
        assert cache.hits == hits + 1, override
        reuse._active = False
        assert program_digest(got) == fresh("resnet18", cfg), override
        reuse._active = True
    assert cache.misses == 1


def test_another_graph_or_mode_is_lowered_afresh_and_a_reused_program_is_a_copy(cache):
    cfg = load_config("mobile")
    first = lower_graph(graph_of("resnet18", {"batch": 1}), cfg)
    first.inst[:] = -7  # what a caller does to its program cannot reach the next point
    first.layers[0].name = "changed"
    again = lower_graph(graph_of("resnet18", {"batch": 1}), cfg)
    assert cache.hits == 1 and (again.inst != -7).all() and again.layers[0].name != "changed"
    lower_graph(graph_of("resnet18", {"batch": 2}), cfg)
    lower_graph(graph_of("resnet18", {"batch": 1}), cfg, unsupported="zero-cost")
    assert (cache.hits, cache.misses) == (1, 3)


def test_lowering_outside_a_sweep_point_reuses_nothing():
    assert not reuse._active
    before = (reuse._cache.hits, reuse._cache.misses)
    lower_graph(graph_of("tiny_cnn"), load_config("mobile"))
    assert (reuse._cache.hits, reuse._cache.misses) == before


def test_sweep_points_differing_in_dram_page_policy_share_one_lowering(cache):
    wl = Workload(model="tiny_cnn")
    records = []
    for policy in ("open", "closed"):
        cfg = load_config("mobile", [f"memory.controller.page_policy={policy}"])
        records.append(execute_point({"hash": policy, "config": cfg, "workload": wl,
                                      "timeout": None, "version": npusim.__version__}))
    assert [r["status"] for r in records] == ["ok", "ok"]
    assert [r["lowering_reused"] for r in records] == [False, True]
    alone = npusim.simulate("tiny_cnn", load_config(
        "mobile", ["memory.controller.page_policy=closed"]))
    assert records[1]["stats"]["total_cycles"] == alone.total_cycles


def test_choosers_remember_answers_and_pick_the_same_tile_each_time():
    b = Budget.of(load_config("server"))
    s = ConvShape(N=8, C=64, M=64, groups=1, out=(56, 56), kernel=(3, 3), strides=(1, 1),
                  dilations=(1, 1))
    choose_conv_tile.cache_clear()
    choose_gemm_tile.cache_clear()
    tile = choose_conv_tile(b, s)
    assert choose_conv_tile.__wrapped__(b, s) == tile  # the memo returns what it computed
    assert all(type(v) is int for v in (*tile.out, tile.c, tile.m))
    g = choose_gemm_tile(b, 512, 768, 768)
    assert choose_gemm_tile.__wrapped__(b, 512, 768, 768) == g
    assert choose_conv_tile.cache_info().misses == 1 and choose_gemm_tile.cache_info().misses == 1


def test_another_mapping_file_is_lowered_afresh(cache, tmp_path):
    from npusim.lowering.mapping import parse_mapping_file

    cfg = load_config("server")
    digests = []
    for inner in ("N128 C768 M128", "N256 C768 M256", "N128 C768 M128"):
        path = tmp_path / f"{inner.replace(' ', '_')}.map"
        n, m = int(inner.split()[0][1:]), int(inner.split()[2][1:])
        path.write_text(f"[T] N512 C768 M768 - [O] N{512 // n} C1 M{768 // m} - [I] {inner}\n")
        prog = lower_graph(graph_of("matmul_512x768x768"), cfg, parse_mapping_file(path))
        assert prog.layers[0].mapping_source.endswith(":1")
        digests.append(program_digest(prog))
    assert digests[0] != digests[1] and digests[2] == digests[0]
    assert (cache.hits, cache.misses) == (1, 2)  # the first file again: reused
