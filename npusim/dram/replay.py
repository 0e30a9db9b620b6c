"""`npusim dram TRACE`: replay a memory trace in Ramulator's format on a DRAM config.

One request per line: ``0x<address> R`` or ``0x<address> W`` (decimal addresses work too;
blank lines and ``#`` comments are skipped). Each request is one DMA request of the
config's ``dma.request_bytes``.
"""

from __future__ import annotations

import time
import warnings
from array import array
from pathlib import Path
from typing import Any

import numpy as np

from npusim.config import NpuConfig
from npusim.errors import NpusimError, NpusimWarning
from npusim.paths import existing_file

CHUNK = 1 << 20


def read_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(addresses, is_write) of a trace file, or a clear error naming file:line. Read a
    line at a time into arrays of 8 bytes a request (the file as a list of lines and of
    Python ints took 133 bytes a request: about 14 GB for a trace of 10^8)."""
    path = existing_file(path, "memory trace")
    addrs, writes = array("q"), array("b")
    try:
        with path.open(encoding="utf-8") as lines:
            for no, line in enumerate(lines, 1):
                parts = line.split("#", 1)[0].split()
                if not parts:
                    continue
                kind = parts[1].upper() if len(parts) == 2 else ""
                if kind not in ("R", "W"):
                    raise NpusimError(f"{path}:{no}: expected '0x<address> R' or "
                                      f"'0x<address> W', got {line.strip()!r}")
                try:
                    addr = int(parts[0], 0)
                except ValueError:
                    raise NpusimError(f"{path}:{no}: bad address {parts[0]!r}") from None
                if not 0 <= addr < 2**63:
                    raise NpusimError(f"{path}:{no}: address {parts[0]!r} is out of range "
                                      f"(0 to 2^63 - 1)")
                addrs.append(addr)
                writes.append(kind == "W")
    except UnicodeDecodeError:
        raise NpusimError(f"memory trace '{path}' is not text: expected lines of "
                          f"'0x<address> R|W'") from None
    if not addrs:
        raise NpusimError(f"memory trace '{path}' has no requests")
    return np.frombuffer(addrs, np.int64), np.frombuffer(writes, np.int8).astype(np.int64)


def _warn_beyond_capacity(cfg: NpuConfig, addrs: np.ndarray) -> None:
    """A warning for addresses past the DRAM's capacity: the address mapping does not
    decode their high bits, so they alias addresses below it (as in Ramulator)."""
    from npusim.dram.standard import decoded_bytes

    size = decoded_bytes(cfg)
    beyond = np.flatnonzero(addrs >= size)
    if len(beyond):
        gib = f"{size / 2**30:g} GiB"
        warnings.warn(f"{len(beyond):,} of {len(addrs):,} requests lie beyond the DRAM's {gib} "
                      f"(the first: {hex(int(addrs[beyond[0]]))}); the address mapping does not "
                      f"decode the bits above it, so each goes where its address modulo "
                      f"{gib} would", NpusimWarning, stacklevel=3)


def replay_energy(mem, cfg, end: int) -> dict[str, Any] | None:
    """DRAM energy of a replay (``npusim.energy.dram``), None without [power] currents."""
    from npusim.energy.dram import counts_from_state, dram_energy
    from npusim.dram.standard import dram_standard

    std = dram_standard(cfg)
    if std.power is None:
        return None
    c = counts_from_state(mem, cfg, std, end)
    comps = dram_energy(std, c)
    total = sum(comps.values())
    seconds = end / (std.freq_mhz * 1e6)
    return {"total_j": total, "components_j": comps,
            "average_power_w": total / seconds if seconds else 0.0,
            "pj_per_bit": total / (c.bytes_moved * 8) * 1e12 if c.bytes_moved else None,
            "activates": c.activates, "precharges": c.bank_closes, "read_bursts": c.reads,
            "write_bursts": c.writes, "refreshes": c.refreshes,
            "rank_active_cycles": c.active_cycles, "rank_cycles": c.rank_cycles}


def replay_requests(cfg: NpuConfig, addrs: np.ndarray, writes: np.ndarray, skip: bool = True,
                    log_commands: int = 0) -> tuple[dict[str, Any], Any]:
    """Replay requests on ``cfg``'s DRAM; returns (stats, final state)."""
    from npusim.dram.stats import dram_stats
    from npusim.dram.tables import memory_tables
    from npusim.kernels import state as ks
    from npusim.kernels.replay import replay
    from npusim.params import TimeBase, make_params
    from npusim.program import ProgramBuilder
    from npusim.scheduling import place
    from npusim.state import make_state

    if cfg.memory.type != "dram":
        raise NpusimError(f"trace replay needs a cycle-level DRAM config (memory.type = 'dram'),"
                          f" config '{cfg.name}' has memory.type = '{cfg.memory.type}'")
    p = make_params(cfg, TimeBase.of(cfg), skip)
    mt = memory_tables(cfg)
    _warn_beyond_capacity(cfg, addrs)
    prog = ProgramBuilder().build()
    st = make_state(cfg, prog, p, mt, place(cfg, [0] * prog.n_requests),
                    log_commands=log_commands)
    cursor = np.zeros(2, dtype=np.int64)
    t0 = time.perf_counter()
    replay(st, mt, p, addrs[:0], writes[:0], cursor, 1)  # compile / load from cache
    compile_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    while True:
        code = replay(st, mt, p, addrs, writes, cursor, CHUNK)
        if code == 1:
            break
        if code == 2:
            raise NpusimError("trace replay stalled: this is an npusim bug, please report it")
    wall = time.perf_counter() - t1
    end = int(st.glob[ks.G_END])
    stats = dram_stats(st.mem, cfg, end)
    stats["energy"] = replay_energy(st.mem, cfg, end)
    stats.update({"requests": int(len(addrs)), "wall_seconds": wall,
                  "compile_seconds": compile_s,
                  "requests_per_second": len(addrs) / wall if wall > 0 else None})
    return stats, st
