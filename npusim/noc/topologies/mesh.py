"""A 2-D (or n-D) mesh routed in dimension order, optionally cut into chiplets.

``noc.dims`` gives the routers per dimension (``[8, 8]``, Booksim's ``k = 8, n = 2``); left
empty, the mesh is the most nearly square grid that gives every core its own router.
Cores go on routers 0, 1, ... (Booksim's numbering: x fastest); memory channels on the west
and east edges. ``noc.d2d.dies`` cuts it into dies joined by die-to-die links.
"""

import math

from npusim.noc.topology import kary_ncube, split_dies


def grid_for(n: int) -> list[int]:
    """The most nearly square 2-D grid with at least n routers (x >= y)."""
    y = max(1, math.isqrt(n))
    x = -(-n // y)
    return [x, y]


def dims_of(noc, n_cores: int) -> list[int]:
    return list(noc.dims) or grid_for(n_cores)


def build(noc, n_cores: int, n_channels: int):
    dims = dims_of(noc, n_cores)
    topo = kary_ncube(dims, False, noc.link_latency, noc.link_bytes, noc.freq_mhz)
    split_dies(topo, dims, list(noc.d2d.dies), noc.d2d.latency, noc.d2d.link_bytes,
               noc.d2d.freq_mhz)
    return topo
