"""Where cores and memory channels attach to the network.

``noc.core_routers`` and ``noc.memory_routers`` list a site (a router; a terminal of a
butterfly) for every core and every memory channel. Left empty, each topology's defaults
apply: cores on its core sites in order (router 0, 1, ...), memory channels round robin
over its memory sites (a mesh's west and east edges, alternating). Several endpoints may
share a site; each gets its own router port.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npusim.errors import NpusimError
from npusim.noc.topology import Topology, check_connected


@dataclass(frozen=True)
class Placement:
    """Site of every endpoint: the cores' network interfaces first (``core_ports`` per
    core, core by core), then memory channels."""

    core_sites: tuple[int, ...]
    memory_sites: tuple[int, ...]

    @property
    def sites(self) -> list[int]:
        return list(self.core_sites) + list(self.memory_sites)


def _round_robin(sites: list[int], n: int) -> tuple[int, ...]:
    return tuple(sites[i % len(sites)] for i in range(n)) if sites else ()


def place(topo: Topology, noc, n_cores: int, n_channels: int) -> Placement:
    """The placement of ``noc`` (config) on ``topo``, defaults filled in and checked.

    With ``noc.core_ports`` = k > 1 a core has k interfaces: on a butterfly or a custom
    network (terminals numbered as ONNXim numbers them) the k next core sites, elsewhere
    (and with ``noc.core_routers`` given) k ports of the core's own router."""
    k = noc.core_ports
    cores = tuple(noc.core_routers)
    mems = tuple(noc.memory_routers)
    if topo.kind == "custom" and (not cores or not mems):
        need = (0 if cores else n_cores * k) + (0 if mems else n_channels)
        if len(topo.nodes) < need:
            raise NpusimError(
                f"noc.file {noc.file} attaches {len(topo.nodes)} nodes, but placing "
                f"{n_cores} cores ({k} interface(s) each) and {n_channels} memory channels "
                f"on nodes in order needs {need}; list routers in noc.core_routers / "
                f"noc.memory_routers")
    if not cores and topo.kind in ("fly", "custom"):
        ports = _round_robin(topo.core_sites, n_cores * k)
        cores = ports[::k]
    else:
        cores = cores or _round_robin(topo.core_sites, n_cores)
        ports = tuple(s for s in cores for _ in range(k))
    mems = mems or _round_robin(topo.memory_sites or topo.core_sites, n_channels)
    for name, sites, n, what in (("core_routers", cores, n_cores, "core"),
                                 ("memory_routers", mems, n_channels, "memory channel")):
        if len(sites) != n:
            raise NpusimError(f"config field noc.{name} lists {len(sites)} sites but there "
                              f"are {n} {what}s: give one site per {what}")
        bad = [s for s in sites if not 0 <= s < topo.n_sites]
        if bad:
            raise NpusimError(f"config field noc.{name} = {list(sites)}: site {bad[0]} does "
                              f"not exist; the {topo.kind} has sites 0..{topo.n_sites - 1}")
    check_connected(topo, [int(topo.site_in[s]) for s in ports + mems],
                    [int(topo.site_out[s]) for s in ports + mems], f"noc.type = {topo.kind!r}")
    return Placement(tuple(int(s) for s in ports), tuple(int(s) for s in mems))


def synthetic_sites(topo: Topology) -> np.ndarray:
    """The site of each node of synthetic traffic (``npusim noc``): one per router of a
    mesh, torus or ring, one per terminal of a butterfly, the file's nodes of a custom
    network, one per core and memory channel on a crossbar (as Booksim counts nodes)."""
    return np.asarray(topo.nodes, dtype=np.int64)
