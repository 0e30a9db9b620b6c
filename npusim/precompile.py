"""Build the kernel cache ahead of time (``npusim compile``).

A run compiles the numba kernels it calls on first use and keeps them in the on-disk cache
(``npusim.kernels``). Container images and CI jobs would pay that compile in every fresh
container; ``npusim compile`` pays it once, at build time, by calling every kernel entry
point (the simulation loop, the trace sync, the DRAM request replay) the way a run does,
on an empty program, so the cache holds exactly the variants runs look up: the loop once
per NoC model (``kernels/noc.py``: the model is part of the state's type) and again for
fast fidelity and for a trace (``kernels/state.py: params_class``: a fast or traced run's
Params are a type of their own). A fast run with a trace compiles its loop on first use.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np

from npusim.config import load_config


@dataclass
class Built:
    """One kernel entry point: compiled now, or already in the cache."""

    name: str
    what: str
    compiled: bool
    seconds: float  # wall
    cpu_seconds: float


def _loop(preset: str | None, fidelity: str):
    """The simulation loop a run on ``preset`` in ``fidelity`` uses."""
    def build(cfg) -> None:
        from npusim.engine import EngineRun
        from npusim.program import ProgramBuilder

        EngineRun(ProgramBuilder().build(), load_config(preset, [f"fidelity={fidelity}"]))
    return build


@functools.cache
def _fast_run():
    """A fast-fidelity run (crossbar) of one layer of one tile, not started: the state its
    cuts are typed with."""
    from npusim.engine import EngineRun
    from npusim.program import Instr, LayerInfo, ProgramBuilder

    b = ProgramBuilder()
    b.begin_layer(LayerInfo("one", "Test", [], (), 0, "", "precompile"), [])
    b.begin_group()
    b.add_tile(b.template("t", lambda: [Instr.dma(True, 0, 0, 1, 64, 1, 0, 64)]), (0, 0, 0, 0))
    return EngineRun(b.build(), load_config(None, ["fidelity=fast"]))


def _fast_cuts(cfg) -> None:
    """Fast fidelity's cuts, each called so that it changes nothing (no layer, group,
    span or request to skip)."""
    from npusim.kernels.cores import cores_cut, cores_streams
    from npusim.kernels.scheduler import skip_groups, skip_layers

    run = _fast_run()
    cs, pa, p, t = run.st.cores, run.pa, run.p, np.int64(0)
    skip_layers(cs, pa, np.zeros(0, np.int64), t)
    skip_groups(cs, pa, np.int64(0), np.int64(0), t)
    none = np.zeros((cs.core.shape[1], 2), np.int64)
    cores_cut(cs, pa, p, t, np.int64(0), none)
    cores_streams(cs, pa, p, t, none.copy(), none.copy())


def _trace_sync(cfg) -> None:
    from npusim.engine import EngineRun
    from npusim.program import ProgramBuilder
    from npusim.trace import TraceOptions

    EngineRun(ProgramBuilder().build(), cfg, trace=TraceOptions(None))


def _router_trace_sync(cfg) -> None:
    from npusim.engine import EngineRun
    from npusim.program import ProgramBuilder
    from npusim.trace import TraceOptions

    EngineRun(ProgramBuilder().build(), load_config("chiplet"), trace=TraceOptions(None))


def _dram_replay(cfg) -> None:
    from npusim.dram.replay import replay_requests

    none = np.zeros(0, dtype=np.int64)
    replay_requests(cfg, none, none)


def _noc_synthetic(cfg) -> None:
    from npusim.noc.run import run_noc

    run_noc(None, ["noc.type=mesh", "noc.dims=[2,2]"], measurement={"cycles": 1})


def _noc_packets(cfg) -> None:
    from npusim.noc.run import network_for, replay_packets

    replay_packets(network_for(load_config(None, ["noc.type=mesh", "noc.dims=[2,2]"])),
                   [[0, 1, 1, 0]])  # one 1-flit packet from node 0 to node 1 at cycle 0


# (kernel, module, what it is, how a run first calls it)
ENTRY_POINTS = (
    ("run", "loop", "the simulation loop with the crossbar (every memory model)",
     _loop(None, "full")),
    ("run", "loop", "the simulation loop with a router network (every memory model)",
     _loop("chiplet", "full")),
    ("run", "loop", "the simulation loop of fast fidelity, crossbar", _loop(None, "fast")),
    ("run", "loop", "the simulation loop of fast fidelity, router network",
     _loop("chiplet", "fast")),
    ("cores_cut", "cores", "fast fidelity's cuts (regions, runs of tiles, streams)",
     _fast_cuts),
    ("trace_sync", "trace", "the trace recorder's sync of DRAM bank state (and the traced "
     "loop, crossbar)", _trace_sync),
    ("router_network_trace_sync", "router_network", "the trace recorder's sync of a router "
     "network's links and buffers (and the traced loop, router network)", _router_trace_sync),
    ("replay", "replay", "the DRAM request replay (npusim dram)", _dram_replay),
    ("run_synthetic", "network.synthetic", "a network under synthetic traffic (npusim noc)",
     _noc_synthetic),
    ("run_packets", "network.replay", "a packet list through a network (bench_noc)",
     _noc_packets),
)


def compile_kernels(report=None) -> list[Built]:
    """Compile (or find in the cache) every kernel entry point; ``report(Built)`` after each."""
    import importlib

    cfg = load_config(None)  # the default preset: cycle-level DRAM, so every unit is typed
    built = []
    for name, module, what, call in ENTRY_POINTS:
        dispatcher = getattr(importlib.import_module(f"npusim.kernels.{module}"), name)
        misses = sum(dispatcher.stats.cache_misses.values())
        t, c = time.perf_counter(), time.process_time()
        call(cfg)
        b = Built(name, what, sum(dispatcher.stats.cache_misses.values()) > misses,
                  time.perf_counter() - t, time.process_time() - c)
        built.append(b)
        if report is not None:
            report(b)
    return built
