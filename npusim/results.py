"""The result of a simulation: headline numbers, per-core and per-layer statistics.

Everything is derived from the final kernel state once, after the run; the JSON form
(``Result.to_dict``) is what ``npusim simulate --json`` writes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npusim import __version__
from npusim.config import NpuConfig, config_to_dict
from npusim.energy import energy_report
from npusim.engine import RawRun
from npusim.kernels import state as ks
from npusim.program import Program


def _cycles(ticks: int, period: int) -> int:
    return int(_cycles_of(ticks, period))


def _cycles_of(ticks, period: int):
    """Core cycles begun by ``ticks`` (rounded up); elementwise over an array."""
    return -(-ticks // period)


@dataclass
class Result:
    model: str
    config: NpuConfig
    total_cycles: int
    cores: list[dict[str, Any]]
    layers: list[dict[str, Any]]
    memory: dict[str, Any]
    wall_seconds: float
    compile_seconds: float
    event_steps: int
    warnings: list[str] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    trace: Any = None  # the xarray.Dataset of a traced run (npusim.trace)
    energy: dict[str, Any] = field(default_factory=dict)  # npusim.energy.energy_report
    energy_seconds: float = 0.0  # host seconds the energy accounting took

    @property
    def energy_j(self) -> float:
        """Joules the run took (``energy["total_j"]``)."""
        return self.energy["total_j"]

    @property
    def seconds(self) -> float:
        """Simulated time at the core clock."""
        return self.total_cycles / (self.config.core_freq_mhz * 1e6)

    @property
    def bytes_moved(self) -> int:
        return int(sum(c["bytes_loaded"] + c["bytes_stored"] for c in self.cores))

    def to_dict(self) -> dict[str, Any]:
        return {
            "npusim_version": __version__,
            "model": self.model,
            "config_name": self.config.name,
            "total_cycles": self.total_cycles,
            "seconds": self.seconds,
            "bytes_moved": self.bytes_moved,
            "cores": self.cores,
            "layers": self.layers,
            "memory": self.memory,
            "simulation": {"wall_seconds": self.wall_seconds,
                           "compile_seconds": self.compile_seconds,
                           "event_steps": self.event_steps,
                           "energy_seconds": self.energy_seconds,
                           "cycles_per_second": (self.total_cycles / self.wall_seconds
                                                 if self.wall_seconds > 0 else None)},
            "config": config_to_dict(self.config),
            "warnings": self.warnings,
            "requests": self.requests,
            "energy": self.energy,
            **self.extra,
        }


def collect(model: str, cfg: NpuConfig, prog: Program, raw: RawRun) -> Result:
    st, tb = raw.state, raw.timebase
    P = tb.core_period
    total = _cycles(st.glob[ks.G_END], P)
    core = st.cores.core
    peak_macs = cfg.core.systolic.width * cfg.core.systolic.height
    cores = []
    for c in range(cfg.num_cores):
        n_reads = int(core[ks.C_READ_LAT_N, c])
        cores.append({
            "core": c,
            "tiles": int(core[ks.C_TILES, c]),
            "busy_cycles": _cycles(core[ks.C_BUSY, c], P),
            "macs": int(core[ks.C_SA_MACS, c]),
            "systolic_utilization": (int(core[ks.C_SA_MACS, c]) / (peak_macs * total)) if total else 0.0,
            "systolic_stream_cycles": int(core[ks.C_SA_STREAM, c]),
            "vector_busy_cycles": int(core[ks.C_VU_BUSY, c]),
            "vector_utilization": (int(core[ks.C_VU_BUSY, c]) / total) if total else 0.0,
            "load_requests": int(core[ks.C_LD_REQUESTS, c]),
            "store_requests": int(core[ks.C_ST_REQUESTS, c]),
            "bytes_loaded": int(core[ks.C_LD_BYTES, c]),
            "bytes_stored": int(core[ks.C_ST_BYTES, c]),
            "avg_read_latency_cycles": (int(core[ks.C_READ_LAT_SUM, c]) / P / n_reads) if n_reads else 0.0,
        })
    layers = _layer_stats(cfg, prog, st, P)
    memory = _memory_stats(cfg, raw, total)
    t0 = time.perf_counter()
    energy = energy_report(cfg, prog, st, tb, total, layers)
    energy_seconds = time.perf_counter() - t0
    extra = {"fidelity": raw.fast.report(prog) if raw.fast is not None else {"fidelity": "full"}}
    return Result(model=model, config=cfg, total_cycles=total, cores=cores, layers=layers,
                  memory=memory, wall_seconds=raw.wall_seconds,
                  compile_seconds=raw.compile_seconds, event_steps=int(st.glob[ks.G_STEPS]),
                  energy=energy, energy_seconds=energy_seconds, extra=extra)


def _memory_stats(cfg: NpuConfig, raw: RawRun, core_cycles: int) -> dict[str, Any]:
    """Traffic per channel; for the cycle-level DRAM also row-buffer and latency stats."""
    st = raw.state
    seconds = core_cycles / (cfg.core_freq_mhz * 1e6) if core_cycles else 0.0
    if cfg.memory.type == "dram":
        from npusim.dram.stats import dram_stats

        dram_cycles = -(-int(st.glob[ks.G_END]) // raw.timebase.mem_period)
        out = dram_stats(st.mem, cfg, dram_cycles)
        return {"type": "dram", **out}
    chan = st.mem.chan
    n_ch = cfg.memory.channels if cfg.memory.type != "ideal" else 1
    channels = []
    for ch in range(n_ch):
        rb, wb = int(chan[ks.H_READ_BYTES, ch]), int(chan[ks.H_WRITE_BYTES, ch])
        channels.append({"channel": ch, "reads": int(chan[ks.H_READS, ch]),
                         "writes": int(chan[ks.H_WRITES, ch]), "bytes_read": rb,
                         "bytes_written": wb,
                         "bandwidth_gbps": (rb + wb) / seconds / 1e9 if seconds else 0.0})
    total_bytes = sum(c["bytes_read"] + c["bytes_written"] for c in channels)
    return {
        "type": cfg.memory.type,
        "bytes_read": int(sum(c["bytes_read"] for c in channels)),
        "bytes_written": int(sum(c["bytes_written"] for c in channels)),
        "bandwidth_gbps": total_bytes / seconds / 1e9 if seconds else 0.0,
        "peak_gbps": cfg.memory.peak_gbps if cfg.memory.type != "ideal" else None,
        "channels": channels,
    }


def _layer_stats(cfg: NpuConfig, prog: Program, st, P: int) -> list[dict[str, Any]]:
    """Every layer's times, traffic and the unit that bounds it (a table at once: a Llama
    serving step has 25,000 layers).

    The bound is the unit with the largest demand relative to the layer's duration: array
    stream cycles and vector cycles per core used, and DRAM bytes over the memory's peak.
    """
    from npusim.kernels import isa

    n = len(prog.layers)
    ls = st.cores.layer_st[:, :n]
    start, end = _cycles_of(ls[ks.L_START], P), _cycles_of(ls[ks.L_END], P)
    cores_used = np.clip(prog.layer[:n, isa.L_GROUP_LEN], 1, cfg.num_cores)
    loaded, stored = ls[ks.L_LD_BYTES], ls[ks.L_ST_BYTES]
    if cfg.memory.type == "ideal":  # one load and one store request per core and cycle
        bytes_per_cycle = 2 * cfg.dma.request_bytes * cores_used
    else:
        bytes_per_cycle = cfg.memory.peak_bytes_per_s / (cfg.core_freq_mhz * 1e6)
    demand = np.stack([ls[ks.L_SA_CYCLES] / cores_used, ls[ks.L_VU_CYCLES] / cores_used,
                       (loaded + stored) / bytes_per_cycle])
    units = np.array(["systolic", "vector", "memory"])
    bound = np.where((end - start > 0) & (demand.max(axis=0) > 0),
                     units[demand.argmax(axis=0)], "none").tolist()
    columns = zip(prog.layers, start.tolist(), end.tolist(), loaded.tolist(), stored.tolist(),
                  ls[ks.L_SA_CYCLES].tolist(), ls[ks.L_VU_CYCLES].tolist(), bound)
    return [{
        "name": info.name, "op_type": info.op_type,
        "input_shapes": [list(s) for s in info.input_shapes],
        "output_shape": list(info.output_shape), "macs": info.macs,
        "start_cycle": a, "end_cycle": b, "cycles": b - a,
        "bytes_loaded": ld, "bytes_stored": sd,
        "systolic_cycles": sa, "vector_cycles": vu,
        "bound": bd,
        "mapping": info.mapping, "mapping_source": info.mapping_source,
        "fused": info.fused, "precision": info.precision or cfg.precision,
        "weight_bits": info.weight_bits,
    } for info, a, b, ld, sd, sa, vu, bd in columns]
