"""The router network of a chip: every core and memory channel an endpoint of the
topology its config names, placed by ``noc.core_routers`` / ``noc.memory_routers`` (or the
topology's defaults), with requests and responses in two message classes.

Endpoint ``c`` is core c, endpoint ``n_cores + ch`` memory channel ch
(``kernels/router_network.py`` steps it between the rings).
"""

from __future__ import annotations

from npusim.noc.placement import place
from npusim.noc.tables import Network, build_network
from npusim.noc.topologies import topology_module

MESSAGE_CLASSES = 2  # requests, responses: separate VCs, so the protocol cannot deadlock


def chip_network(cfg, *, skip: bool = True, trace_ring: int = 0, trace_bin: int = 1,
                 period: int = 1) -> Network:
    """The network of ``cfg`` (a router topology: ``cfg.noc.type`` is not "crossbar")."""
    noc = cfg.noc
    topo = topology_module(noc.type).build(noc, cfg.num_cores, cfg.memory.channels)
    placement = place(topo, noc, cfg.num_cores, cfg.memory.channels)
    return build_network(topo, placement.sites, noc, msg_classes=MESSAGE_CLASSES, skip=skip,
                         trace_ring=trace_ring, trace_bin=trace_bin, period=period)
