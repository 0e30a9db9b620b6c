"""Power over time: the run's energy by component spread over the trace's time bins.

Each component's joules go to the bins in proportion to the binned activity that causes them
(the trace's own counters), so the bins add up to the run's totals exactly:

- ``mac``: systolic busy cycles; ``vector``: vector busy cycles; ``spad``, ``accum``: busy
  cycles of every unit (the array, the vector unit and DMA all touch the SRAMs)
- ``noc``: flits granted (request and response networks)
- ``dram_activate``: ACT, PRE and PREA commands; ``dram_read`` / ``dram_write``: reads /
  writes served; ``dram_io``: both; ``dram_refresh``: REF commands
- ``dram_background``, ``static``: time (the part of each bin inside the run)

A component with energy but no activity in any bin (say DRAM energy without a DRAM trace)
is spread over time as well.
"""

from __future__ import annotations

import numpy as np

from npusim.energy.account import COMPONENTS
from npusim.trace.record import UNITS


def _sum(data: dict, name: str, n: int, keep: int | None = None) -> np.ndarray:
    """A trace variable summed over every dimension but time (and ``unit`` index ``keep``)."""
    if name not in data:
        return np.zeros(n)
    v = np.asarray(data[name].values, dtype=np.float64)
    if keep is not None:
        v = v[..., keep]
    return v.reshape(n, -1).sum(axis=1)


def binned_power(energy: dict, data: dict, n: int, width: int, total_cycles: int,
                 f_core_hz: float) -> np.ndarray:
    """Watts per bin and component, [n, len(COMPONENTS)]; ``data`` holds the trace's
    binned variables (xarray Variables), ``width`` the bin width in core cycles."""
    inside = np.clip(total_cycles - np.arange(n) * width, 0, width).astype(np.float64)
    busy = {u: _sum(data, "unit_busy_cycles", n, keep=i) for i, u in enumerate(UNITS)}
    all_units = sum(busy.values())
    dram_cmds = (_sum(data, "activates", n) + _sum(data, "precharges", n)
                 + _sum(data, "all_bank_precharges", n))
    reads, writes = _sum(data, "reads", n), _sum(data, "writes", n)
    weights = {
        "mac": busy["systolic"], "vector": busy["vector"], "spad": all_units,
        "accum": all_units,
        "noc": _sum(data, "noc_request_flits", n) + _sum(data, "noc_response_flits", n),
        "dram_activate": dram_cmds, "dram_read": reads, "dram_write": writes,
        "dram_io": reads + writes, "dram_refresh": _sum(data, "refreshes", n),
        "dram_background": inside, "static": inside,
    }
    out = np.zeros((n, len(COMPONENTS)))
    seconds = width / f_core_hz
    for j, comp in enumerate(COMPONENTS):
        joules = energy["components_j"][comp]
        w = weights[comp]
        if w.sum() <= 0:
            w = inside if inside.sum() > 0 else np.ones(n)
        out[:, j] = joules * w / w.sum() / seconds
    return out
