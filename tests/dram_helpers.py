"""DRAM test helpers: configs per standard, a bare controller state, trace replay."""

from __future__ import annotations

import numpy as np

from npusim.config import load_config
from npusim.dram import list_standards, load_standard
from npusim.dram.replay import replay_requests
from npusim.dram.tables import memory_tables
from npusim.params import TimeBase, make_params
from npusim.program import ProgramBuilder
from npusim.scheduling import place
from npusim.state import make_state

STANDARDS = list_standards()


def dram_config(standard: str, *overrides: str, channels: int = 1):
    """The mobile preset with ``standard`` as its memory, requests of one burst."""
    std = load_standard(standard)
    return load_config("mobile", [f"memory.standard={standard}", f"memory.channels={channels}",
                                  f"dma.request_bytes={max(8, std.burst_bytes)}", *overrides])


def bare_state(cfg):
    """(State, mt, p) of a chip with nothing in flight, for calling the kernels directly
    (the DRAM's on ``State.mem``, the rings on ``State.rings``)."""
    p = make_params(cfg, TimeBase.of(cfg), True)
    mt = memory_tables(cfg)
    return make_state(cfg, ProgramBuilder().build(), p, mt, place(cfg, [])), mt, p


def replay(cfg, addrs, writes=None, **kw):
    addrs = np.asarray(addrs, dtype=np.int64)
    writes = np.zeros_like(addrs) if writes is None else np.asarray(writes, dtype=np.int64)
    return replay_requests(cfg, addrs, writes, **kw)


def random_traffic(n: int, read_fraction: float = 0.8, seed: int = 0, span_bits: int = 32,
                   granule: int = 64):
    rng = np.random.default_rng(seed)
    addrs = (rng.integers(0, 1 << span_bits, n) // granule) * granule
    writes = (rng.random(n) >= read_fraction).astype(np.int64)
    return addrs.astype(np.int64), writes
