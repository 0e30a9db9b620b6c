"""Runs that take every kernel entry point down its paths: every memory model, skip-ahead on
and off, traced runs (tiny trace rings, so they wrap and drain often), router networks (the
chiplet preset, a torus under back-pressure, synthetic traffic past saturation), fast
fidelity's cuts (regions, runs of tiles, streams), multi-request workloads under every
scheduling policy, LLM serving (pauses that grow the program) and the DRAM request replay.

Used by test_kernel_bounds.py (in a bounds-checked build, every run traced and in fast
fidelity: the loop of a fast traced run is the plain loop with the recorder's code and fast
fidelity's windows added, and a fast run simulates whatever it does not cut in full, so one
bounds-checked compile per NoC model covers all four) and test_kernel_cache.py (every
variant a run uses is one `npusim compile` built).
"""

import numpy as np

import npusim
from npusim.config import load_config
from npusim.dram.replay import replay_requests
from npusim.frontend import resolve_model_path
from npusim.simulation import simulate_requests
from npusim.trace import TraceOptions, record
from npusim.workload import Request

CROSSBAR = [("mobile", []), ("server", []), ("gemmini_validation", []),
            ("mobile", ["memory.type=simple", "memory.freq_mhz=800", "memory.latency=50",
                        "memory.channel_bytes_per_cycle=16"]),
            ("mobile", ["memory.ranks=2", "memory.channels=2",
                        "memory.controller.page_policy=closed",
                        "memory.controller.channel_hash=ipoly"])]
# the chiplet mesh (die-to-die links); a torus with few, small VCs (back-pressure)
ROUTERS = [("chiplet", []),
           ("mobile", ["noc.type=torus", "noc.dims=[4,2]", "memory.channels=2",
                       "noc.router.vcs=4", "noc.router.vc_buffer_flits=2"])]


def exercise(traced_only: bool) -> None:
    """Run every path. ``traced_only`` (the bounds-checked build): every run that has a
    traced and a fast form is traced and fast (``also``), the first configuration of each
    NoC model with tiny trace rings (they wrap and drain often: the same recorder code for
    every configuration, and draining is Python's time); else (the variants check) every
    run also untraced and in full fidelity, each configuration traced once with the usual
    rings and run fast once (a variant is a type: what the trace records does not change
    it)."""
    windowed = TraceOptions(None, window=(1000, 4000), bin_cycles=7)
    usual = record.RING_BINS, record.LOG_ROWS, record.INTERVAL_ROWS
    also = ["fidelity=fast"] if traced_only else []
    for preset, overrides in CROSSBAR + ROUTERS:
        tiny = traced_only and (preset, overrides) in (CROSSBAR[0], ROUTERS[0])
        record.RING_BINS, record.LOG_ROWS, record.INTERVAL_ROWS = (1, 40, 40) if tiny else usual
        for skip in (True, False):
            traces = ([windowed if skip else TraceOptions(None)] if traced_only
                      else [None] + ([windowed] if skip else []))
            for trace in traces:
                npusim.simulate("tiny_cnn", preset, overrides=overrides + also, skip=skip,
                                trace=trace)
        if not traced_only:
            npusim.simulate("tiny_cnn", preset, overrides=overrides + ["fidelity=fast"])
    if traced_only:  # the other traced runs below with tiny rings too
        record.RING_BINS, record.LOG_ROWS, record.INTERVAL_ROWS = 1, 40, 40
    from npusim.noc.run import network_for, replay_packets, run_noc
    run_noc("mobile", ["noc.type=mesh", "noc.dims=[4,4]"],
            traffic={"rate": 0.9, "packet_flits": 4}, measurement={"cycles": 3000})
    replay_packets(network_for(load_config(None, ["noc.type=mesh", "noc.dims=[2,2]"])),
                   [[0, 1, 1, 0], [1, 0, 3, 5]])
    one = TraceOptions(None) if traced_only else None
    npusim.simulate("bert_base_layer", "server", dims={"batch": 1, "seq": 32}, trace=one,
                    overrides=also)
    npusim.simulate("mobilenetv2", "server", dims={"batch": 1}, trace=one,
                    overrides=also)  # depthwise
    # fast fidelity's cuts: a run of tiles (the 1024 MatMul), a region (BERT's blocks), a
    # stream inside tiles (one long load per core on the cycle-level DRAM)
    npusim.simulate("matmul_1024", "mobile", overrides=["fidelity=fast"], trace=one)
    npusim.simulate("bert_base", "server", dims={"batch": 1, "seq": 32},
                    overrides=["fidelity=fast"], trace=one)
    from npusim.engine import run_program
    from npusim.program import Instr, LayerInfo, ProgramBuilder
    b = ProgramBuilder()
    b.begin_layer(LayerInfo("stream", "Test", [], (), 0, "", "hand"), [])
    tpl = b.template("t", lambda: [Instr.dma(True, 0, 0, 40000, 64, 1, 0, 64)])
    for _ in range(2):
        b.begin_group()
        b.add_tile(tpl, (0, 0, 0, 0))
    prog = b.build()
    raw = run_program(prog, load_config("mobile", ["fidelity=fast"]), trace=one)
    fast = raw.fast.report(prog)
    assert fast["stream_cuts"] and fast["tiles_extrapolated"] == 0, fast
    mlp = str(resolve_model_path("mlp"))
    for policy in ("fifo", "time-shared", "spatial"):
        simulate_requests([Request(mlp, name="a"), Request(mlp, arrival_cycle=5000, name="b"),
                           Request("gpt2", prompt=4, generate=3, llm={"layers": 1,
                                                                      "vocab": 256})],
                          "mobile", overrides=[f"scheduler.policy={policy}",
                                               "scheduler.max_batch=1"] + also, trace=one)
    rng = np.random.default_rng(0)
    for std, ch in (("DDR4-2400R_8Gb_x8", 1), ("HBM2-2400_8Gb_x128", 4),
                    ("LPDDR5-6400_16Gb_x16", 2)):
        cfg = load_config("mobile", [f"memory.standard={std}", f"memory.channels={ch}"])
        addrs = (rng.integers(0, 1 << 30, 3000) // 64 * 64).astype(np.int64)
        writes = (rng.random(3000) < 0.3).astype(np.int64)
        replay_requests(cfg, addrs, writes, log_commands=100)  # a full log must not overflow
