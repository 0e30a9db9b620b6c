"""Whole-engine invariants: skip-ahead changes nothing, runs are deterministic, every byte
the layers need is moved, and the scheduler spreads tiles over the cores."""

import math

import pytest

from helpers import config
import npusim
from npusim.config import load_config
from npusim.lowering.mapping import parse_mapping_line


CASES = [
    ("tiny_cnn", "gemmini_validation", []),
    ("tiny_cnn", "mobile", []),
    ("mlp", "mobile", ["num_cores=2"]),
    ("mlp", "mobile", ["num_cores=3", "memory.type=ideal"]),
    ("conv_resnet18_layer1", "mobile", ["num_cores=4", "memory.channels=2"]),
    ("mlp", "server", ["memory.freq_mhz=1200", "noc.freq_mhz=700"]),
]


@pytest.mark.parametrize("model,preset,overrides", CASES)
def test_skip_ahead_gives_the_same_cycles_as_stepping_every_cycle(model, preset, overrides):
    fast = npusim.simulate(model, preset, overrides=overrides, skip=True)
    slow = npusim.simulate(model, preset, overrides=overrides, skip=False)
    assert fast.total_cycles == slow.total_cycles
    assert fast.layers == slow.layers
    assert fast.cores == slow.cores
    assert fast.memory == slow.memory
    assert fast.event_steps <= slow.event_steps


def test_skip_ahead_skips_over_compute():
    fast = npusim.simulate("conv_resnet18_layer1", "gemmini_validation")
    assert fast.event_steps < fast.total_cycles / 2


def test_same_inputs_same_result_bit_for_bit():
    a = npusim.simulate("tiny_cnn", "mobile").to_dict()
    b = npusim.simulate("tiny_cnn", "mobile").to_dict()
    for d in (a, b):
        d.pop("simulation")
    assert a == b


def test_matmul_moves_every_operand_and_writes_the_output_exactly_once():
    r = npusim.simulate("matmul_512x768x768", "mobile", overrides=["memory.type=ideal"])
    prec, R = r.config.precision, r.config.dma.request_bytes
    loaded = sum(c["bytes_loaded"] for c in r.cores)
    stored = sum(c["bytes_stored"] for c in r.cores)
    assert loaded >= (512 * 768 + 768 * 768) * prec
    # each output tile row is one run of m_t elements; a run costs the aligned requests it
    # touches (the output tensor starts on a page boundary)
    inner = parse_mapping_line(r.layers[0]["mapping"]).inner
    expected = 0
    for row in range(512):
        for m0 in range(0, 768, inner.M):
            start = (row * 768 + m0) * prec
            end = start + min(inner.M, 768 - m0) * prec
            expected += ((end - 1) // R - start // R + 1) * R
    assert stored == expected
    assert r.memory["bytes_read"] == loaded and r.memory["bytes_written"] == stored


def test_macs_done_equal_the_layers_macs():
    r = npusim.simulate("tiny_cnn", "mobile")
    assert sum(c["macs"] for c in r.cores) == sum(l["macs"] for l in r.layers)
    # tiny_cnn: conv1 3->16 3x3 on 32x32, conv2 16->32 s2 on 16x16, conv3 32->32 3x3,
    # conv4 32->64 1x1 on 16x16, fc 16384->10
    expected = (32 * 32 * 16 * 3 * 9 + 16 * 16 * 32 * 16 * 9 + 16 * 16 * 32 * 32 * 9
                + 16 * 16 * 64 * 32 + 16384 * 10)
    assert sum(l["macs"] for l in r.layers) == expected


def test_layers_run_in_dependency_order():
    r = npusim.simulate("tiny_cnn", "mobile")
    layers = r.layers
    for prev, cur in zip(layers, layers[1:]):
        assert cur["start_cycle"] >= prev["end_cycle"]
    assert layers[-1]["end_cycle"] == r.total_cycles


def test_every_core_gets_work_when_the_layer_allows_it():
    r = npusim.simulate("matmul_1024", "server")
    assert all(c["tiles"] > 0 for c in r.cores)
    busy = [c["busy_cycles"] for c in r.cores]
    assert min(busy) > 0.8 * max(busy)


def test_more_cores_finish_a_compute_bound_layer_sooner():
    one = npusim.simulate("matmul_512x768x768", "mobile", overrides=["num_cores=1", "memory.type=ideal"])
    four = npusim.simulate("matmul_512x768x768", "mobile", overrides=["num_cores=4", "memory.type=ideal"])
    assert four.total_cycles < one.total_cycles / 3


def test_systolic_utilization_is_macs_over_peak():
    r = npusim.simulate("conv_resnet18_layer1", "gemmini_validation")
    c = r.cores[0]
    assert c["systolic_utilization"] == pytest.approx(c["macs"] / (64 * r.total_cycles))
    assert 0.5 < c["systolic_utilization"] <= 1.0


def test_clock_domains_at_their_own_frequencies():
    # the same memory-bound run with a 2x faster memory clock takes fewer core cycles
    simple = ["memory.type=simple", "memory.latency=50", "memory.channel_bytes_per_cycle=16"]
    slow = npusim.simulate("mlp", "mobile", overrides=simple + ["memory.freq_mhz=400"])
    fast = npusim.simulate("mlp", "mobile", overrides=simple + ["memory.freq_mhz=800"])
    assert fast.total_cycles < slow.total_cycles


def test_a_layer_behind_a_free_root_runs_exactly_once(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Flatten", ["x"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "w"], ["y"], name="mm")]
    w = TensorProto()
    w.name, w.data_type = "w", TensorProto.FLOAT
    w.dims.extend([64, 128])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "none.bin"), ("offset", "0"), ("length", str(4 * 64 * 128))):
        e = w.external_data.add()
        e.key, e.value = k, v
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1, 4, 4, 4])],
                          [helper.make_tensor_value_info("y", 1, [1, 128])], initializer=[w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "flat_mm.onnx"
    onnx.save(m, str(path))
    r = npusim.simulate(str(path), "mobile")
    assert sum(c["macs"] for c in r.cores) == 64 * 128


def test_a_run_paces_the_garbage_collector_and_restores_its_pace():
    """Young collections ``YOUNG_COLLECTION_EVERY`` allocations apart during a run (the run's
    long-lived objects are not rescanned every 700), the caller's pace back after it, also
    when the run stops with an error."""
    import gc

    from npusim.errors import NpusimError
    from npusim.simulation import YOUNG_COLLECTION_EVERY

    before = gc.get_threshold()
    seen = []
    npusim.simulate("tiny_cnn", "mobile", progress=lambda *a: seen.append(gc.get_threshold()))
    assert seen and all(t == (YOUNG_COLLECTION_EVERY, *before[1:]) for t in seen)
    assert gc.get_threshold() == before
    with pytest.raises(NpusimError):
        npusim.simulate("tiny_cnn", "mobile", overrides=["num_cores=0"])
    assert gc.get_threshold() == before


def test_runs_in_threads_leave_the_callers_garbage_collector_pace():
    """Overlapping runs (a sweep's threads): the pace in force before the first began is the
    one left when the last has ended, also when the first to begin ends first (a run that
    put back the pace it found would leave the run's own pace behind)."""
    import gc
    import threading

    before = gc.get_threshold()
    a_inside, b_inside, a_done = threading.Event(), threading.Event(), threading.Event()

    def run_a():
        npusim.simulate("tiny_cnn", "mobile",
                        progress=lambda *_: (a_inside.set(), b_inside.wait(60)))
        a_done.set()

    a = threading.Thread(target=run_a)
    a.start()
    assert a_inside.wait(60)
    # b begins while a runs, and ends after it
    npusim.simulate("tiny_cnn", "mobile", progress=lambda *_: (b_inside.set(), a_done.wait(60)))
    a.join(60)
    assert a_done.is_set() and gc.get_threshold() == before
