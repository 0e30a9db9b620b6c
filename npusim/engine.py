"""Builds the chip state from a config, drives the kernels, and collects the result.

Python does per-run and per-chunk work only: the kernel ``run`` advances the simulation by a
bounded number of loop iterations and returns, so a progress bar can update in between;
chunk boundaries never change results.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from npusim.config import NpuConfig
from npusim.errors import NpusimError
from npusim.kernels import isa
from npusim.kernels import state as ks
from npusim.kernels.state import PARAM_FIELDS, Params, ProgramArrays, State
from npusim.program import Program

MEMORY_TYPES = {"ideal": 0, "simple": 1}
INJECTION_QUEUE = 16  # requests a core's network interface buffers
CHANNEL_QUEUE = 32  # requests a memory channel buffers (its controller queue)
CHANNEL_OUT_QUEUE = 32  # responses a channel holds while the NoC is busy
ITERATIONS_PER_CALL = 1 << 18  # event steps between progress updates


@dataclass(frozen=True)
class TimeBase:
    """One global tick in which every clock domain has an integer period."""

    ticks_per_us: int  # lcm of the domain frequencies in MHz
    core_period: int
    noc_period: int
    mem_period: int

    @staticmethod
    def of(cfg: NpuConfig) -> "TimeBase":
        f = (cfg.core_freq_mhz, cfg.noc.freq_mhz, cfg.memory.freq_mhz)
        lcm = math.lcm(*f)
        return TimeBase(lcm, lcm // f[0], lcm // f[1], lcm // f[2])


def make_params(cfg: NpuConfig, tb: TimeBase, skip: bool) -> Params:
    core = cfg.core
    values = dict(
        n_cores=cfg.num_cores, core_period=tb.core_period, noc_period=tb.noc_period,
        mem_period=tb.mem_period, skip=int(skip),
        sa_width=core.systolic.width, sa_height=core.systolic.height,
        sa_min_cycles=core.systolic.min_gemm_cycles, acc_latency=1,
        vec_width=core.vector.lanes * core.vector.alus,
        ld_queue=core.ld_queue, st_queue=core.st_queue, ex_queue=core.ex_queue,
        req_bytes=cfg.dma.request_bytes,
        max_outstanding=2 if cfg.memory.type == "ideal" else cfg.dma.max_outstanding,
        mem_type=MEMORY_TYPES[cfg.memory.type], n_channels=cfg.memory.channels,
        mem_latency=cfg.memory.latency, ch_bytes_per_cycle=cfg.memory.channel_bytes_per_cycle,
        ch_queue=CHANNEL_QUEUE, noc_latency=cfg.noc.latency, flit_bytes=cfg.noc.flit_bytes,
        inj_queue=INJECTION_QUEUE,
    )
    assert set(values) == set(PARAM_FIELDS)
    return Params(**{k: int(values[k]) for k in PARAM_FIELDS})


def make_state(cfg: NpuConfig, prog: Program, p: Params) -> State:
    """Zeroed state tables sized for this config and program."""
    C = cfg.num_cores
    ch = cfg.memory.channels
    L = prog.layer.shape[0]
    q = max(p.ld_queue, p.st_queue)

    def z(*shape, fill=0):
        return np.full(shape, fill, dtype=np.int64)

    glob = z(ks.N_GLOB)
    glob[ks.G_LAYERS_LEFT] = L
    glob[ks.G_WAKE_NOC] = isa.NEVER  # nothing in flight yet
    glob[ks.G_WAKE_MEM] = isa.NEVER
    layer_st = z(ks.N_LAYER_FIELDS, L)
    layer_st[ks.L_PREDS_LEFT] = prog.layer[:, isa.L_N_PREDS]
    if prog.n_tiles:
        np.add.at(layer_st[ks.L_TILES_LEFT], prog.tile[:, isa.T_LAYER], 1)
    layer_st[ks.L_START] = -1
    layer_st[ks.L_END] = -1
    slot = z(ks.N_SLOT_FIELDS, C, 2)
    slot[ks.S_TILE] = -1
    return State(
        glob=glob,
        ready_groups=z(max(1, prog.group.shape[0])),
        layer_st=layer_st,
        layer_stack=z(L + 1),
        core=z(ks.N_CORE_FIELDS, C),
        slot=slot,
        done=z(C, 2, prog.max_template_len, fill=isa.NEVER),
        ex_ring=z(C, p.ex_queue),
        dq=z(ks.N_DQ_FIELDS, C, 2, q),
        dq_ctl=z(ks.N_DQ_CTL_FIELDS, C, 2),
        arr=z(ks.N_ARR_FIELDS, C, p.max_outstanding + 1),
        inj=z(ks.N_INJ_FIELDS, C, p.inj_queue),
        chan=z(ks.N_CHAN_FIELDS, ch),
        ch_in=z(ks.N_PACKET_FIELDS, ch, p.ch_queue),
        ch_out=z(ks.N_PACKET_FIELDS, ch, CHANNEL_OUT_QUEUE),
    )


def program_arrays(prog: Program, cfg: NpuConfig) -> ProgramArrays:
    vlat = np.array([cfg.core.vector.latency[op] for op in isa.VECTOR_OPS], dtype=np.int64)
    return ProgramArrays(prog.inst, prog.tile, prog.group, prog.layer, prog.layer_succ, vlat)


@dataclass
class RawRun:
    """What a run leaves behind: the final state plus how long it took."""

    state: State
    params: Params
    timebase: TimeBase
    wall_seconds: float
    compile_seconds: float


def run_program(prog: Program, cfg: NpuConfig, skip: bool = True,
                progress: Callable[[int, int, int], None] | None = None) -> RawRun:
    """Simulate ``prog`` on ``cfg`` to completion.

    ``progress(layers_done, layers_total, core_cycles)`` is called between kernel chunks.
    """
    from npusim.kernels.loop import run  # imported here: numba loads only when simulating

    tb = TimeBase.of(cfg)
    p = make_params(cfg, tb, skip)
    st = make_state(cfg, prog, p)
    pa = program_arrays(prog, cfg)
    t0 = time.perf_counter()
    _ensure_compiled(run, st, pa, p)
    t1 = time.perf_counter()
    total = prog.layer.shape[0]
    while True:
        code = run(st, pa, p, ITERATIONS_PER_CALL)
        if code != 0:
            raise NpusimError(_deadlock_message(st, prog, tb))
        if st.glob[ks.G_FINISHED] or total == 0:
            break
        if progress is not None:
            done = total - int(st.glob[ks.G_LAYERS_LEFT])
            progress(done, total, int(st.glob[ks.G_NOW] // tb.core_period))
    if progress is not None:
        progress(total, total, int(st.glob[ks.G_END] // tb.core_period))
    wall = time.perf_counter() - t1
    return RawRun(st, p, tb, wall, t1 - t0)


_compiled: set[tuple] = set()


def _ensure_compiled(run, st, pa, p) -> float:
    """Compile (or load from cache) the kernel for these argument types; returns seconds."""
    key = (type(st), type(pa), type(p))
    if key in _compiled:
        return 0.0
    t = time.perf_counter()
    run.compile((numba_typeof(st), numba_typeof(pa), numba_typeof(p), numba_typeof(np.int64(0))))
    _compiled.add(key)
    return time.perf_counter() - t


def numba_typeof(x):
    from numba import typeof
    return typeof(x)


def _deadlock_message(st: State, prog: Program, tb: TimeBase) -> str:
    stuck = [prog.layers[i].name for i in range(prog.layer.shape[0])
             if st.layer_st[ks.L_END, i] < 0]
    return (f"simulation stalled at core cycle {int(st.glob[ks.G_NOW] // tb.core_period)} with "
            f"{len(stuck)} layers unfinished (first: {stuck[:3]}); this is an npusim bug, "
            f"please report it with the model and config")
