"""DRAM statistics from the controller state: per channel and per bank."""

from __future__ import annotations

from typing import Any

import numpy as np

from npusim.kernels import state as ks


def percentile_from_histogram(hist: np.ndarray, q: float) -> int:
    """The smallest bin value at or below which a fraction q of the samples lie."""
    total = int(hist.sum())
    if total == 0:
        return 0
    return int(np.searchsorted(np.cumsum(hist), q * total))


def dram_stats(st, cfg, dram_cycles: int) -> dict[str, Any]:
    """Row-buffer outcomes, traffic, bandwidth utilization and read latency, from the
    memory unit's tables (``State.mem``)."""
    from npusim.dram.standard import dram_standard

    std = dram_standard(cfg)
    n_ch = cfg.memory.channels
    dch, dbank = st.dch, st.dbank
    seconds = dram_cycles / (std.freq_mhz * 1e6) if dram_cycles else 0.0
    channels = []
    for ch in range(n_ch):
        hist = st.lat_hist[ch]
        n_reads = int(dch[ks.DC_LAT_N, ch])
        rb, wb = int(dch[ks.DC_READ_BYTES, ch]), int(dch[ks.DC_WRITE_BYTES, ch])
        banks = []
        for b in range(dbank.shape[2]):
            banks.append({
                "bank": b,
                "row_hits": int(dbank[ks.B_HITS, ch, b]),
                "row_misses": int(dbank[ks.B_MISSES, ch, b]),
                "row_conflicts": int(dbank[ks.B_CONFLICTS, ch, b]),
                "reads": int(dbank[ks.B_READS, ch, b]),
                "writes": int(dbank[ks.B_WRITES, ch, b]),
            })
        channels.append({
            "channel": ch,
            "reads": int(dch[ks.DC_READS, ch]),
            "writes": int(dch[ks.DC_WRITES, ch]),
            "bytes_read": rb,
            "bytes_written": wb,
            "row_hits": int(dbank[ks.B_HITS, ch].sum()),
            "row_misses": int(dbank[ks.B_MISSES, ch].sum()),
            "row_conflicts": int(dbank[ks.B_CONFLICTS, ch].sum()),
            "activates": int(dch[ks.DC_ACTS, ch]),
            "precharges": int(dch[ks.DC_PRES, ch]),
            "refreshes": int(dch[ks.DC_REFS, ch]),
            "bandwidth_gbps": (rb + wb) / seconds / 1e9 if seconds else 0.0,
            "bandwidth_utilization": (int(dch[ks.DC_BUS_BUSY, ch]) / dram_cycles
                                      if dram_cycles else 0.0),
            "avg_read_latency_cycles": (int(dch[ks.DC_LAT_SUM, ch]) / n_reads) if n_reads else 0.0,
            "p99_read_latency_cycles": percentile_from_histogram(hist, 0.99),
            "banks": banks,
        })
    hist = st.lat_hist.sum(axis=0)
    n_reads = int(dch[ks.DC_LAT_N].sum())
    total = {k: sum(c[k] for c in channels) for k in
             ("reads", "writes", "bytes_read", "bytes_written", "row_hits", "row_misses",
              "row_conflicts", "activates", "precharges", "refreshes")}
    moved = total["bytes_read"] + total["bytes_written"]
    return {
        "standard": std.name,
        "dram_cycles": int(dram_cycles),
        **total,
        "bandwidth_gbps": moved / seconds / 1e9 if seconds else 0.0,
        "peak_gbps": cfg.memory.peak_gbps,
        "bandwidth_utilization": (int(dch[ks.DC_BUS_BUSY].sum()) / (dram_cycles * n_ch)
                                  if dram_cycles else 0.0),
        "avg_read_latency_cycles": int(dch[ks.DC_LAT_SUM].sum()) / n_reads if n_reads else 0.0,
        "p99_read_latency_cycles": percentile_from_histogram(hist, 0.99),
        "channels": channels,
    }
