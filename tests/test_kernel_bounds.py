"""The kernels never index outside their arrays.

Kernels run without numba's bounds checks (and without its reference counting), so an
out-of-range index would silently corrupt memory. This test compiles them with
``NUMBA_BOUNDSCHECK=1`` in a separate process and cache, and runs every memory model,
the trace replay, multi-request workloads under every scheduling policy, LLM serving
(pauses that grow the program), traced runs (tiny trace rings, so they wrap and drain
often), fast fidelity's cuts (regions, runs of tiles, streams) and router networks (the
chiplet preset, a torus under back-pressure, synthetic traffic past saturation) through
them: any stray index raises.

The bounds-checked kernels are built by ``npusim compile`` into a cache of their own, kept
per version of the kernel sources (``npusim.kernels.kernel_cache_dir``) like the normal
one, so the suite pays that compile once per kernel change rather than on every run. The
runs then must find every kernel they call in that cache: the first time after a kernel
change, this checks that ``npusim compile`` builds everything a run can need.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from npusim.kernels import kernel_cache_dir
from npusim.kernels.jit import COMPILE_NOTICE

SCRIPT = textwrap.dedent("""
    import numpy as np
    import npusim
    from npusim.config import load_config
    from npusim.dram.replay import replay_requests
    from npusim.frontend import resolve_model_path
    from npusim.simulation import simulate_requests
    from npusim.trace import TraceOptions, record
    from npusim.workload import Request

    record.RING_BINS, record.LOG_ROWS, record.INTERVAL_ROWS = 1, 40, 40

    for preset, overrides in [("mobile", []), ("server", []),
                              ("gemmini_validation", []),
                              ("mobile", ["memory.type=simple", "memory.freq_mhz=800",
                                          "memory.latency=50",
                                          "memory.channel_bytes_per_cycle=16"]),
                              ("mobile", ["memory.ranks=2", "memory.channels=2",
                                          "memory.controller.page_policy=closed",
                                          "memory.controller.channel_hash=ipoly"])]:
        for skip in (True, False):
            npusim.simulate("tiny_cnn", preset, overrides=overrides, skip=skip)
        for trace in (TraceOptions(None, window=(1000, 4000), bin_cycles=7), TraceOptions(None)):
            npusim.simulate("tiny_cnn", preset, overrides=overrides, trace=trace)
    # router networks: the chiplet mesh (die-to-die links), a torus with few, small VCs
    # (back-pressure), traced with small rings; synthetic traffic past saturation
    for preset, overrides in [("chiplet", []),
                              ("mobile", ["noc.type=torus", "noc.dims=[4,2]",
                                          "memory.channels=2", "noc.router.vcs=4",
                                          "noc.router.vc_buffer_flits=2"])]:
        for skip in (True, False):
            npusim.simulate("tiny_cnn", preset, overrides=overrides, skip=skip)
        npusim.simulate("tiny_cnn", preset, overrides=overrides,
                        trace=TraceOptions(None, bin_cycles=7))
    from npusim.noc.run import run_noc
    run_noc("mobile", ["noc.type=mesh", "noc.dims=[4,4]"],
            traffic={"rate": 0.9, "packet_flits": 4}, measurement={"cycles": 3000})
    npusim.simulate("bert_base_layer", "server", dims={"batch": 1, "seq": 32})
    npusim.simulate("mobilenetv2", "server", dims={"batch": 1})  # depthwise on the vector unit
    # fast fidelity's cuts: a run of tiles (the 1024 MatMul), a region (BERT's blocks), a
    # stream inside tiles (one long load per core on the cycle-level DRAM)
    npusim.simulate("matmul_1024", "mobile", overrides=["fidelity=fast"])
    npusim.simulate("bert_base", "server", dims={"batch": 1, "seq": 32},
                    overrides=["fidelity=fast"])
    from npusim.engine import run_program
    from npusim.program import Instr, LayerInfo, ProgramBuilder
    b = ProgramBuilder()
    b.begin_layer(LayerInfo("stream", "Test", [], (), 0, "", "hand"), [])
    tpl = b.template("t", lambda: [Instr.dma(True, 0, 0, 40000, 64, 1, 0, 64)])
    for _ in range(2):
        b.begin_group()
        b.add_tile(tpl, (0, 0, 0, 0))
    prog = b.build()
    fast = run_program(prog, load_config("mobile", ["fidelity=fast"])).fast.report(prog)
    assert fast["stream_cuts"] and fast["tiles_extrapolated"] == 0, fast
    mlp = str(resolve_model_path("mlp"))
    for policy in ("fifo", "time-shared", "spatial"):
        simulate_requests([Request(mlp, name="a"), Request(mlp, arrival_cycle=5000, name="b"),
                           Request("gpt2", prompt=4, generate=3, llm={"layers": 1,
                                                                      "vocab": 256})],
                          "mobile", overrides=[f"scheduler.policy={policy}",
                                               "scheduler.max_batch=1"])
    rng = np.random.default_rng(0)
    for std, ch in (("DDR4-2400R_8Gb_x8", 1), ("HBM2-2400_8Gb_x128", 4),
                    ("LPDDR5-6400_16Gb_x16", 2)):
        cfg = load_config("mobile", [f"memory.standard={std}", f"memory.channels={ch}"])
        addrs = (rng.integers(0, 1 << 30, 3000) // 64 * 64).astype(np.int64)
        writes = (rng.random(3000) < 0.3).astype(np.int64)
        replay_requests(cfg, addrs, writes, log_commands=100)  # a full log must not overflow
    print("clean")
""")


@pytest.mark.long
def test_kernels_stay_in_bounds():
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1",
               NUMBA_CACHE_DIR=kernel_cache_dir("-boundscheck"))
    built = subprocess.run([sys.executable, "-m", "npusim", "compile"], env=env,
                           capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, built.stderr[-3000:]
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("clean")
    assert COMPILE_NOTICE not in out.stderr, "npusim compile left kernels for the run to build"
