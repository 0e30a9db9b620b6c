"""A run's fixed parameters: the global time base and the kernels' scalar ``Params``."""

from __future__ import annotations

import math
from dataclasses import dataclass

from npusim.config import NpuConfig
from npusim.kernels.isa import DATAFLOWS
from npusim.kernels.names import MEMORY_TYPES
from npusim.kernels.state import PARAM_FIELDS, Params, params_class


@dataclass(frozen=True)
class TimeBase:
    """One global tick in which every clock domain has an integer period.

    With ideal memory there is no NoC and the memory answers on the next core cycle, so the
    NoC and memory domains run on the core clock (their configured clocks are nominal)."""

    ticks_per_us: int  # lcm of the domain frequencies in MHz
    core_period: int
    noc_period: int
    mem_period: int

    @staticmethod
    def of(cfg: NpuConfig) -> "TimeBase":
        f = (cfg.core_freq_mhz, cfg.noc.freq_mhz, cfg.memory.freq_mhz)
        if cfg.memory.type == "ideal":
            f = (f[0], f[0], f[0])
        lcm = math.lcm(*f)
        return TimeBase(lcm, lcm // f[0], lcm // f[1], lcm // f[2])


def make_params(cfg: NpuConfig, tb: TimeBase, skip: bool, trace=None) -> Params:
    """The kernels' Params for ``cfg``; ``trace`` (a ``npusim.trace.TraceRecorder``) turns
    tracing on. Fidelity and tracing choose the class (``state.params_class``), which
    chooses the loop numba compiles."""
    from npusim.dram.tables import dram_params
    from npusim.scheduling import policy_id

    core = cfg.core
    values = dict(
        n_cores=cfg.num_cores, core_period=tb.core_period, noc_period=tb.noc_period,
        mem_period=tb.mem_period, skip=int(skip),
        sa_dataflow=DATAFLOWS.index(core.systolic.dataflow), sa_width=core.systolic.width, sa_height=core.systolic.height,
        sa_min_cycles=core.systolic.min_gemm_cycles, acc_latency=1,
        vec_width=core.vector.lanes * core.vector.alus,
        ld_queue=core.ld_queue, st_queue=core.st_queue, ex_queue=core.ex_queue,
        req_bytes=cfg.dma.request_bytes,
        max_outstanding=1 if cfg.memory.type == "ideal" else cfg.dma.max_outstanding,
        core_ports=1 if cfg.memory.type == "ideal" else cfg.noc.core_ports,
        noc_latency=cfg.noc.latency,
        flit_bytes=cfg.noc.flit_bytes,
        mem_type=MEMORY_TYPES.index(cfg.memory.type), n_channels=cfg.memory.channels,
        mem_latency=cfg.memory.latency, ch_bytes_per_cycle=cfg.memory.channel_bytes_per_cycle,
        policy=policy_id(cfg),
        trace_bin=1, trace_log_from=0, trace_log_to=0,
    )
    values.update(dram_params(cfg))
    if trace is not None:
        values.update(trace.params())
    assert set(values) == set(PARAM_FIELDS)
    kind = params_class(cfg.fidelity == "fast", trace is not None)
    return kind(**{k: int(values[k]) for k in PARAM_FIELDS})
