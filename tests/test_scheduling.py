"""Scheduling policies and core partitions (kernels/policies/, npusim/scheduling.py)."""

import pytest

import npusim
from npusim.config import load_config
from npusim.errors import NpusimError
from npusim.frontend import resolve_model_path
from npusim.scheduling import place
from npusim.simulation import simulate_requests
from npusim.workload import Request

MATMUL = str(resolve_model_path("matmul_512x768x768"))
SIMPLE = ["memory.type=simple", "memory.freq_mhz=1000", "memory.latency=40",
          "memory.channel_bytes_per_cycle=16"]


def _two(policy, *extra, model=MATMUL, memory=SIMPLE):
    reqs = [Request(model, name="a"), Request(model, name="b")]
    return simulate_requests(reqs, "mobile",
                             overrides=[f"scheduler.policy={policy}", *memory, *extra])


def test_spatial_gives_two_identical_requests_two_cores_each_and_the_same_finish():
    # with nothing shared (ideal memory: every core has its own port) exactly the same
    res = _two("spatial", memory=["memory.type=ideal"])
    a, b = res.requests
    assert a["finish_cycle"] == b["finish_cycle"]
    assert [p["cores"] for p in res.extra["partitions"]] == [[0, 1], [2, 3]]
    assert (a["partition"], b["partition"]) == (0, 1)
    # each ran on its own two cores only, at the speed of a two-core NPU
    tiles = [c["tiles"] for c in res.cores]
    assert tiles[0] + tiles[1] == tiles[2] + tiles[3] == sum(tiles) // 2
    two_cores = npusim.simulate(MATMUL, "mobile", overrides=["memory.type=ideal",
                                                             "num_cores=2"]).total_cycles
    assert a["latency_cycles"] == two_cores


@pytest.mark.parametrize("memory", [SIMPLE, []], ids=["simple", "dram"])
def test_spatial_with_shared_memory_finishes_within_one_percent(memory):
    a, b = _two("spatial", memory=memory).requests
    assert abs(a["finish_cycle"] - b["finish_cycle"]) <= 0.01 * a["finish_cycle"]


def test_fifo_runs_the_first_arrival_first_and_the_second_waits():
    solo = npusim.simulate(MATMUL, "mobile", overrides=SIMPLE).total_cycles
    a, b = _two("fifo").requests
    assert a["latency_cycles"] == pytest.approx(solo, rel=0.03)
    assert b["latency_cycles"] / a["latency_cycles"] == pytest.approx(2.0, rel=0.1)


def test_time_shared_alternates_between_requests_layer_by_layer():
    model = str(resolve_model_path("mlp"))
    res = _two("time-shared", model=model)
    layers = sorted(res.layers, key=lambda l: (l["start_cycle"], l["name"]))
    order = [l["name"].split("/")[0] for l in layers if l["cycles"] > 0]
    # round-robin: the owner changes at every started layer (a, b, a, b, ...)
    assert order[:4] == ["a", "b", "a", "b"]
    a, b = res.requests
    fifo_b = _two("fifo", model=model).requests[1]
    # sharing makes both finish late, the second earlier than under fifo's strict order
    assert b["finish_cycle"] <= fifo_b["finish_cycle"]
    assert a["latency_cycles"] > npusim.simulate(model, "mobile", overrides=SIMPLE).total_cycles


def test_a_partition_from_the_config_confines_a_request_to_its_cores():
    req = Request(MATMUL, name="only", partition=1)
    res = simulate_requests([req], "mobile", overrides=[
        "scheduler.partitions=[[0, 1, 2], [3]]", *SIMPLE])
    tiles = [c["tiles"] for c in res.cores]
    assert tiles[:3] == [0, 0, 0] and tiles[3] > 0
    assert res.extra["partitions"][0]["utilization"] == 0.0


def test_place_deals_partitions_in_arrival_order_and_ranks_by_arrival():
    cfg = load_config("mobile", ["scheduler.policy=spatial"])
    p = place(cfg, [30, 10, 20, 0])
    assert p.partitions == [[0], [1], [2], [3]]
    assert [int(r) for r in p.req[:, 0]] == [3, 1, 2, 0]  # ranks
    assert p.request_partition == [3, 1, 2, 0]
    # requests naming partitions: the even split has as many as the largest id + 1
    p = place(cfg, [0, 0, 0], [0, 1, 1])
    assert p.partitions == [[0, 1], [2, 3]] and p.request_partition == [0, 1, 1]


def test_a_partition_that_does_not_exist_is_a_clear_error():
    cfg = load_config("mobile")
    with pytest.raises(NpusimError, match="asks for partition 2, but the cores form 1"):
        place(cfg, [0], [2])
