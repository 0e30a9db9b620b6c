"""Cycle counts of single instructions and short sequences, worked out by hand.

The reference points come from the issue (Gemmini-like 8x8 core, ideal memory):
one PRELOAD+GEMM of 8 rows completes 39 cycles after issue (weight read 7 + preload 8 +
multiply 8 + mesh 15 + accumulator write 1), two back to back take 47.
"""

import math

import pytest

from helpers import config, cycles, one_tile_program
from npusim.kernels.systolic import gemm_stream_cycles
from npusim.program import Instr

H = W = 8


def gemm_pair(rows, drain=True):
    return [Instr.preload(drain=drain), Instr.gemm(rows, 1, rows * H * W)]


def test_one_preload_gemm_takes_39_cycles():
    assert cycles(one_tile_program(gemm_pair(8)), config()) == 7 + 8 + 8 + 15 + 1 == 39


def test_two_preload_gemms_back_to_back_take_47_cycles():
    prog = one_tile_program(gemm_pair(8) + gemm_pair(8, drain=False))
    assert cycles(prog, config()) == 39 + 8 == 47


@pytest.mark.parametrize("rows", [1, 3, 8, 9, 17, 40, 100])
def test_gemm_completes_rows_plus_mesh_after_start(rows):
    # GEMM starts when the weights are in (7 + 8), streams its rows in chunks of <= 8, each
    # holding the input >= 4 cycles, and finishes w + h - 1 + 1 cycles after the stream
    full, rest = divmod(rows, H)
    stream = full * 8 + (max(rest, 4) if rest else 0)
    expected = 7 + 8 + stream + (W + H - 1) + 1
    assert cycles(one_tile_program(gemm_pair(rows)), config()) == expected


def test_consecutive_gemms_on_the_same_weights_pipeline():
    # the second GEMM enters the array right behind the first one's 16 rows
    prog = one_tile_program(gemm_pair(16) + [Instr.gemm(16, 1, 16 * 64)])
    assert cycles(prog, config()) == 15 + 16 + 16 + 16 == 63


def test_segments_stream_each_row_separately():
    # a conv GEMM streams P output rows of Q pixels: 3 segments of 17 rows = 3 * (8+8+4)
    assert gemm_stream_cycles(17, 3, 8, 4) == 60
    prog = one_tile_program([Instr.preload(drain=True), Instr.gemm(17, 3, 0)])
    assert cycles(prog, config()) == 15 + 60 + 16


def test_preload_hidden_behind_long_stream():
    # 4 weight blocks of 40 rows: each next preload overlaps the current stream (40 >= 8)
    rows = []
    for k in range(4):
        rows += gemm_pair(40, drain=k == 0)
    assert cycles(one_tile_program(rows), config()) == 15 + 4 * 40 + 16


def test_preload_bound_when_rows_are_few():
    # 1 row per block: the array waits for each 8-cycle preload (the FC-layer case)
    rows = []
    for k in range(10):
        rows += gemm_pair(1, drain=k == 0)
    assert cycles(one_tile_program(rows), config()) == 15 + 9 * 8 + 4 + 16


@pytest.mark.parametrize("op,elements", [("add", 1000), ("exp", 1000), ("gelu", 129), ("div", 1)])
def test_vector_op_takes_ceil_elements_over_width_times_latency(op, elements):
    cfg = config()
    width = cfg.core.vector.lanes * cfg.core.vector.alus
    expected = math.ceil(elements / width) * cfg.core.vector.latency[op]
    assert cycles(one_tile_program([Instr.vector(op, elements)]), cfg) == expected


def test_vector_ops_serialize_on_the_vector_unit_but_overlap_the_array():
    cfg = config()
    width = cfg.core.vector.lanes * cfg.core.vector.alus
    v = math.ceil(5000 / width) * cfg.core.vector.latency["exp"]
    both = one_tile_program([Instr.vector("exp", 5000), Instr.vector("exp", 5000)])
    assert cycles(both, cfg) == 2 * v
    # the array runs meanwhile: issue at cycles 0 and 1, array done at 1 + 39
    mixed = one_tile_program([Instr.vector("exp", 5000)] + gemm_pair(8))
    assert cycles(mixed, cfg) == max(v, 1 + 39)


def test_im2col_costs_one_cycle_per_vector_pass():
    cfg = config()
    width = cfg.core.vector.lanes * cfg.core.vector.alus
    assert cycles(one_tile_program([Instr.im2col(1000)]), cfg) == math.ceil(1000 / width)


def test_mvin_on_ideal_memory_one_request_per_cycle_answered_next_cycle():
    # 8 requests sent in cycles 0..7, the last answered in cycle 8
    mvin = Instr.dma(True, 0, 0, 8, 32, 1, 0, 32)
    assert cycles(one_tile_program([mvin]), config()) == 8


def test_dependent_gemm_waits_for_its_load():
    mvin = Instr.dma(True, 0, 0, 8, 32, 1, 0, 32)
    rows = [mvin, Instr.preload(deps=(0,), drain=True), Instr.gemm(8, 1, 512, deps=(0,))]
    assert cycles(one_tile_program(rows), config()) == 8 + 39


def test_load_and_store_run_in_parallel_one_request_each_per_cycle():
    load = Instr.dma(True, 0, 0, 10, 32, 1, 0, 32)
    store = Instr.dma(False, 1, 0, 10, 32, 1, 0, 32)
    # issued in cycles 0 and 1, each sends 10 requests, one per cycle
    assert cycles(one_tile_program([load, store]), config()) == 1 + 10


def test_unaligned_run_touches_every_request_block_it_overlaps():
    # 40 bytes starting at byte 16: blocks [0,32) and [32,64) -> 2 requests per run
    rows = [Instr.dma(True, 0, 16, 5, 64, 1, 0, 40)]
    assert cycles(one_tile_program(rows), config()) == 10


def test_simple_memory_round_trip_is_noc_plus_latency():
    cfg = config("memory.type=simple", "memory.latency=20", "memory.freq_mhz=1000",
                 "noc.freq_mhz=1000", "noc.latency=4", "noc.flit_bytes=8",
                 "memory.channel_bytes_per_cycle=32")
    # send at cycle 0; NoC grants at 1, the 1-flit request arrives at 1 + 4; the channel
    # answers 20 cycles later; the 32/8 = 4-flit response arrives 4 + 4 - 1 later
    expected = 1 + 4 + 20 + (4 + 4 - 1)
    assert cycles(one_tile_program([Instr.dma(True, 0, 0, 1, 32, 1, 0, 32)]), cfg) == expected


@pytest.mark.parametrize("ports", [1, 2, 4])
def test_a_core_with_more_noc_ports_sends_and_takes_that_many_requests_a_cycle(ports):
    """noc.core_ports (ONNXim's icnt_injection_ports_per_core) on the crossbar: the DMA
    sends `ports` requests a cycle, and responses come back on port ch % ports. 400
    requests over 4 channels that each serve one a cycle: the last is sent in cycle
    400 / ports - 1 and takes the one-request round trip, 1 + 4 + 20 + (4 + 1 - 1) = 29."""
    n = 400
    cfg = config("memory.type=simple", "memory.latency=20", "memory.freq_mhz=1000",
                 "noc.freq_mhz=1000", "noc.latency=4", "noc.flit_bytes=32",
                 "memory.channel_bytes_per_cycle=32", "memory.channels=4",
                 f"noc.core_ports={ports}", "dma.max_outstanding=1024")
    prog = one_tile_program([Instr.dma(True, 0, 0, n, 32, 1, 0, 32)])
    assert cycles(prog, cfg) == cycles(prog, cfg, skip=False) == n // ports - 1 + 29


def test_a_load_and_a_store_each_have_their_own_tags():
    """dma.max_outstanding = m tags per DMA engine (Gemmini's reader and writer each own
    their transaction ids). With memory to spare, n requests of one engine take n / m round
    trips of 29 cycles (the one-request round trip above, plus the cycle a freed tag waits
    to be used), the last round staggered by m - 1 cycles; a store of n beside a load of
    n takes as long, up to a cycle per tag where the two meet at the core's NoC port.
    With tags shared by both engines and loads first, the store waited for the load:
    about twice as long."""
    n, m, rtt = 400, 8, 29
    cfg = config("memory.type=simple", "memory.latency=20", "memory.freq_mhz=1000",
                 "noc.freq_mhz=1000", "noc.latency=4", "noc.flit_bytes=32",
                 "memory.channel_bytes_per_cycle=32", "memory.channels=4",
                 f"dma.max_outstanding={m}")
    load = Instr.dma(True, 0, 0, n, 32, 1, 0, 32)
    store = Instr.dma(False, 1, 0, n, 32, 1, 0, 32)
    alone = n // m * rtt + m - 1
    assert cycles(one_tile_program([load]), cfg) == alone
    assert cycles(one_tile_program([store]), cfg) == alone
    both = one_tile_program([load, store])
    assert alone <= cycles(both, cfg) == cycles(both, cfg, skip=False) <= alone + m


def test_simple_memory_channel_bandwidth_limits_throughput():
    # 16 B per memory cycle and 32 B requests: one request every 2 cycles
    n = 200
    cfg = config("memory.type=simple", "memory.latency=10", "memory.freq_mhz=1000",
                 "noc.freq_mhz=1000", "noc.latency=1", "noc.flit_bytes=64",
                 "memory.channel_bytes_per_cycle=16", "memory.channels=1")
    total = cycles(one_tile_program([Instr.dma(True, 0, 0, n, 32, 1, 0, 32)]), cfg)
    assert 2 * n <= total <= 2 * n + 30
