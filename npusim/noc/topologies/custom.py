"""A network read from a file in Booksim's ``anynet`` format (``noc.file``), routed along
shortest paths by link latency, paths of equal length chosen as Booksim chooses them
(``topology.shortest_path_routes``), and ports numbered as Booksim numbers them: a router's
endpoints first, in node order, then its links in the order of the routers they join.

Each line names a router, then what it connects to::

    router 0 node 0 node 1 router 1 router 2 4

``node N`` attaches endpoint N to the router; ``router M [latency]`` joins the two routers
both ways, this direction with ``latency`` cycles (default 1; the other direction keeps 1
unless its own line says otherwise), as Booksim reads it. By default cores sit on the
routers of nodes 0, 1, ... and memory channels on those of the nodes after them (ONNXim's
node order); ``npusim noc`` puts one traffic node on each listed node.
"""

from pathlib import Path

import numpy as np

from npusim.errors import NpusimError
from npusim.noc.topology import Topology, check_connected, make_links, shortest_path_routes
from npusim.paths import read_text


def read_anynet(path: str | Path) -> tuple[list[int], dict[tuple[int, int], int], dict[int, int]]:
    """Routers (ids as written), directed links {(a, b): latency} and {node: router}."""
    path = Path(path)
    if not str(path):
        raise NpusimError("config field noc.file is empty: noc.type = 'custom' needs a "
                          "network file in Booksim's anynet format")
    text = read_text(path, "noc.file")
    routers: list[int] = []
    links: dict[tuple[int, int], int] = {}
    nodes: dict[int, int] = {}

    def add_router(r):
        if r not in routers:
            routers.append(r)

    for no, line in enumerate(text.splitlines(), 1):
        words = line.split("//")[0].split()
        if not words:
            continue
        where = f"{path}:{no}"
        if words[0] != "router" or len(words) < 2 or not words[1].isdigit():
            raise NpusimError(f"{where}: a line must start with 'router <id>', got {line.strip()!r}")
        head = int(words[1])
        add_router(head)
        i = 2
        while i < len(words):
            kind = words[i]
            if kind not in ("router", "node") or i + 1 >= len(words) or not words[i + 1].isdigit():
                raise NpusimError(f"{where}: expected 'router <id> [latency]' or 'node <id>' "
                                  f"at {' '.join(words[i:i + 2])!r}")
            other = int(words[i + 1])
            i += 2
            latency = 1
            if i < len(words) and words[i].isdigit():
                latency = int(words[i])
                if latency < 1:
                    raise NpusimError(f"{where}: link latency {latency} must be at least 1")
                i += 1
            if kind == "node":
                if latency != 1:
                    raise NpusimError(f"{where}: node {other} has latency {latency}: npusim's "
                                      f"endpoint links take 1 cycle (Booksim's default); "
                                      f"give the node no latency")
                if other in nodes and nodes[other] != head:
                    raise NpusimError(f"{where}: node {other} is already attached to router "
                                      f"{nodes[other]}; a node attaches to one router")
                nodes[other] = head
            else:
                if other == head:
                    raise NpusimError(f"{where}: router {head} is linked to itself")
                add_router(other)
                links[(head, other)] = latency
                links.setdefault((other, head), 1)
    if not routers:
        raise NpusimError(f"{path}: no routers in the file")
    if not nodes:
        raise NpusimError(f"{path}: no nodes attached to any router")
    return routers, links, nodes


def build(noc, n_cores: int, n_channels: int):
    routers, links, nodes = read_anynet(noc.file)
    ids = sorted(routers)
    index = {r: i for i, r in enumerate(ids)}
    pairs = sorted((index[a], index[b]) for a, b in links)
    lat = [links[(ids[a], ids[b])] for a, b in pairs]
    src, dst, lat, wid, freq = make_links(pairs, lat, noc.link_bytes, noc.freq_mhz)
    R = len(ids)
    topo = Topology("custom", np.arange(R, dtype=np.int64).reshape(R, 1), src, dst, lat, wid,
                    freq, shortest_path_routes(R, src, dst, lat), np.zeros((R, R), np.int64),
                    names=[f"router{r}" for r in ids], endpoints_first=True)
    order = [index[nodes[n]] for n in sorted(nodes)]
    check_connected(topo, order, order, f"noc.file {noc.file}")
    topo.nodes = order
    ports = n_cores * noc.core_ports  # the cores' interfaces first (ONNXim's order)
    topo.core_sites = order[:ports]
    topo.memory_sites = order[ports:]
    return topo
