"""A NoC topology as data: routers, directed links and routes computed once.

A topology file in ``npusim/noc/topologies/`` (one per ``noc.type``) builds a
:class:`Topology`: the routers, every directed link between two routers with its latency,
width and clock, and for every pair of routers the link a packet takes next and the virtual
channel class of that hop (a torus needs two classes so that its rings cannot deadlock).
Endpoints (cores, memory channels, synthetic traffic nodes) attach to *sites*: a site
injects at one router and ejects at one router (the same one, except at a butterfly's
terminals). Placement (:mod:`npusim.noc.placement`) puts each core and memory channel on a
site; several endpoints may share one, each with its own router port.

Nothing here is stepped per cycle; :mod:`npusim.noc.tables` turns a topology with its
endpoints into the flat arrays the router kernel reads.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from npusim.errors import NpusimError


@dataclass
class Topology:
    """Routers and directed links; ``next_link[r, d]`` is the link a packet at router r
    takes towards router d (-1 when r == d) and ``hop_class[r, d]`` the VC class of that
    hop (0 .. vc_classes-1), or ``-1 - i`` where the class is the packet's own in dimension
    i of a torus: bit i of ``dateline[source router, d]`` (``vc_class``)."""

    kind: str
    coords: np.ndarray                # [router, dim]: position (names, placement, traces)
    link_src: np.ndarray              # [link]: router the link leaves
    link_dst: np.ndarray              # [link]: router it enters
    link_latency: np.ndarray          # [link]: cycles of the link's own clock
    link_bytes: np.ndarray            # [link]: bytes it carries per cycle of its clock
    link_freq_mhz: np.ndarray         # [link]: its clock
    next_link: np.ndarray             # [router, router]
    hop_class: np.ndarray             # [router, router]
    vc_classes: int = 1
    # fixed port numbers of each link at its two routers (None: links in order, per router);
    # endpoints take the ports after ``link_ports`` (the router's link port count)
    link_out_port: np.ndarray | None = None
    link_in_port: np.ndarray | None = None
    link_ports: int = 0
    site_in: np.ndarray | None = None   # [site]: router it injects at (None: site = router)
    site_out: np.ndarray | None = None  # [site]: router it ejects at
    core_sites: list[int] = field(default_factory=list)    # default placement of cores,
    memory_sites: list[int] = field(default_factory=list)  # and of memory channels
    nodes: list[int] = field(default_factory=list)  # synthetic traffic: the site of each node
    names: list[str] | None = None  # router names (default: coordinates)
    link_d2d: np.ndarray | None = None  # [link]: True for a die-to-die link (chiplets)
    # a router's endpoint ports before its link ports (Booksim's anynet numbering; the
    # round-robin order of the allocators), instead of after them
    endpoints_first: bool = False
    # [source router, router]: bit i set when a torus path crosses the wrap-around link of
    # dimension i (the VC class of its hops in that dimension; None: no such classes)
    dateline: np.ndarray | None = None

    def __post_init__(self):
        if self.site_in is None:
            self.site_in = np.arange(self.n_routers, dtype=np.int64)
            self.site_out = self.site_in
        if not self.nodes:
            self.nodes = list(range(len(self.site_in)))

    @property
    def n_routers(self) -> int:
        return self.coords.shape[0]

    @property
    def n_links(self) -> int:
        return self.link_src.shape[0]

    @property
    def n_sites(self) -> int:
        return len(self.site_in)

    def router_name(self, r: int) -> str:
        if self.names is not None:
            return self.names[r]
        return "(" + ",".join(str(int(c)) for c in self.coords[r]) + ")"

    def vc_class(self, src: int, r: int, d: int) -> int:
        """The VC class of the hop at router r of a packet from router src to router d."""
        c = int(self.hop_class[r, d])
        return c if c >= 0 else int(self.dateline[src, d]) >> (-1 - c) & 1

    def hops(self, src: int, dst: int) -> list[int]:
        """The links a packet takes from router src to router dst."""
        out = []
        r = src
        while r != dst:
            link = int(self.next_link[r, dst])
            out.append(link)
            r = int(self.link_dst[link])
            if len(out) > self.n_routers:
                raise AssertionError(f"routing loop from {src} to {dst}")
        return out


def make_links(pairs: list[tuple[int, int]], latency, width: int, freq_mhz: int):
    """Arrays of directed links (src, dst) with one latency (or a list), width and clock."""
    n = len(pairs)
    src = np.array([a for a, _ in pairs], dtype=np.int64).reshape(n)
    dst = np.array([b for _, b in pairs], dtype=np.int64).reshape(n)
    lat = np.broadcast_to(np.asarray(latency, dtype=np.int64), (n,)).copy()
    return (src, dst, lat, np.full(n, width, dtype=np.int64),
            np.full(n, freq_mhz, dtype=np.int64))


def shortest_path_routes(n_routers: int, link_src: np.ndarray, link_dst: np.ndarray,
                         weight: np.ndarray) -> np.ndarray:
    """``next_link[r, d]``: the first link of a shortest path by link weight from r to d,
    chosen as Booksim's anynet routing chooses it (``AnyNet::route``), so that paths of
    equal length agree with Booksim's: Dijkstra from each router r, taking the unreached
    router of least distance and among those the lowest-numbered, a router's predecessor
    being the first one to reach it at its final distance (neighbours in ascending order);
    the first hop towards d is then found by walking the predecessors back from d.
    Unreachable pairs are -1."""
    out: list[list[tuple[int, int, int]]] = [[] for _ in range(n_routers)]
    for k in range(len(link_src)):
        out[int(link_src[k])].append((int(link_dst[k]), int(weight[k]), k))
    for links in out:
        links.sort()  # neighbours in ascending order (the lightest of parallel links first)
    nxt = np.full((n_routers, n_routers), -1, dtype=np.int64)
    for r in range(n_routers):
        dist: list[int | None] = [None] * n_routers
        prev = [-1] * n_routers
        via = [-1] * n_routers  # the link prev[v] -> v
        dist[r] = 0
        heap = [(0, r)]
        done = [False] * n_routers
        while heap:
            du, u = heapq.heappop(heap)
            if done[u] or du != dist[u]:
                continue
            done[u] = True
            for v, w, k in out[u]:
                if not done[v] and (dist[v] is None or du + w < dist[v]):
                    dist[v] = du + w
                    prev[v], via[v] = u, k
                    heapq.heappush(heap, (du + w, v))
        for d in range(n_routers):
            if d == r or dist[d] is None:
                continue
            v = d
            while prev[v] != r:
                v = prev[v]
            nxt[r, d] = via[v]
    return nxt


def check_connected(topo: Topology, sources, targets, what: str) -> None:
    """Every router in ``sources`` must reach every router in ``targets``."""
    for a in sorted(set(sources)):
        for b in sorted(set(targets)):
            if a != b and topo.next_link[a, b] < 0:
                raise NpusimError(f"{what}: router {a} cannot reach router {b}; every "
                                  f"endpoint's router must reach every other one")


def kary_ncube(dims: list[int], wrap: bool, latency: int, width: int,
               freq_mhz: int) -> Topology:
    """A mesh (``wrap`` False) or torus of ``dims`` routers per dimension, routed in
    dimension order (lowest dimension first). Router id = x0 + dims[0] * (x1 + dims[1] * ...)
    and ports as Booksim numbers them: output 2i leads the positive way along dimension i,
    2i + 1 the negative way; input 2i comes from the positive neighbour, 2i + 1 from the
    negative one; endpoints after (a port left unused at a mesh's edge). The numbering sets
    the round-robin order of the allocators. A torus takes the shorter way round each ring (a tie goes the
    positive way from even coordinates and the negative way from odd ones, which balances
    the two directions deterministically; Booksim draws it at random) and uses two VC
    classes per ring, partitioned as Booksim's ``dim_order_torus`` (``dor_next_torus``)
    does: a packet takes class 1 on every hop of a dimension when its source's coordinate
    there is above its destination's, else class 0. Going the positive way, class 1 is the
    paths that cross the wrap-around link (between coordinate k-1 and 0); going the negative
    way, the paths that do not. Either way one class never uses the wrap-around link, and
    the other's paths, at most half a ring long and all through it, never use the link half
    a ring from it: neither class's channels form a cycle, so the rings cannot deadlock.
    The class is the packet's, not the router's (``hop_class`` -1 - i: bit i of
    ``dateline[source, destination]``): it depends on where the packet entered the ring."""
    D = len(dims)
    R = int(np.prod(dims))
    coords = np.zeros((R, D), dtype=np.int64)
    stride = 1
    for i, k in enumerate(dims):
        coords[:, i] = (np.arange(R) // stride) % k
        stride *= k
    strides = np.cumprod([1] + list(dims[:-1]))
    pairs: list[tuple[int, int]] = []
    out_port: list[int] = []
    in_port: list[int] = []
    index: dict[tuple[int, int, int], int] = {}  # (router, dim, +1/-1) -> link
    for r in range(R):
        for i, k in enumerate(dims):
            if k == 1:
                continue
            for step in (1, -1):
                c = coords[r, i] + step
                if not 0 <= c < k:
                    if not wrap:
                        continue
                    c %= k
                if wrap and k == 2 and step == -1:
                    continue  # a ring of two: one link each way is the whole ring
                other = r + (c - coords[r, i]) * strides[i]
                index[(r, i, step)] = len(pairs)
                pairs.append((r, int(other)))
                out_port.append(2 * i + (step < 0))
                in_port.append(2 * i + (step > 0))  # it arrives from the other side
    src, dst, lat, wid, freq = make_links(pairs, latency, width, freq_mhz)
    classes = 2 if wrap and max(dims) > 2 else 1

    def step_of(a: int, b: int, k: int) -> int:
        """The way round a ring of k from coordinate a to b."""
        fwd = (b - a) % k  # hops the positive way
        return 1 if k == 2 or 2 * fwd < k or (2 * fwd == k and a % 2 == 0) else -1

    nxt = np.full((R, R), -1, dtype=np.int64)
    cls = np.zeros((R, R), dtype=np.int64)
    for r in range(R):
        for d in range(R):
            if r == d:
                continue
            i = int(np.flatnonzero(coords[r] != coords[d])[0])
            a, b = int(coords[r, i]), int(coords[d, i])
            step = step_of(a, b, dims[i]) if wrap else (1 if b > a else -1)
            nxt[r, d] = index[(r, i, step)]
            if classes == 2:
                cls[r, d] = -1 - i  # the packet's class in dimension i
    dateline = None
    if classes == 2:  # class 1 in dimension i: the source's coordinate above the target's
        dateline = np.zeros((R, R), dtype=np.int64)
        for i in range(D):
            dateline |= (coords[:, i][:, None] > coords[:, i][None, :]).astype(np.int64) << i
    return Topology("torus" if wrap else "mesh", coords, src, dst, lat, wid, freq, nxt, cls,
                    vc_classes=classes, link_out_port=np.array(out_port, dtype=np.int64),
                    link_in_port=np.array(in_port, dtype=np.int64), link_ports=2 * D,
                    core_sites=list(range(R)), memory_sites=edge_routers(coords, dims),
                    dateline=dateline)


def edge_routers(coords: np.ndarray, dims: list[int]) -> list[int]:
    """The routers of the west (x = 0) and east (x = k-1) edges, alternating, each edge
    from y = 0 up: where a mesh's memory controllers go by default (HBM PHYs on two sides
    of the die). Channels are placed round robin over this list, so consecutive channels
    (consecutive address blocks) sit on alternate sides."""
    R = coords.shape[0]
    flat = [r for r in range(R) if not coords[r, 2:].any()]  # the z = 0 plane
    west = [r for r in flat if coords[r, 0] == 0]
    east = [r for r in flat if coords[r, 0] == dims[0] - 1]
    if dims[0] == 1:
        return west
    out = []
    for a, b in zip(west, east):
        out += [a, b]
    return out


def split_dies(topo: Topology, dims: list[int], dies: list[int], latency: int, width: int,
               freq_mhz: int) -> None:
    """Cut a mesh or torus into ``dies[i]`` dies along dimension i: every link between
    two dies becomes a die-to-die link with its own latency, width and clock."""
    if not dies:
        return
    die = np.zeros(topo.n_routers, dtype=np.int64)
    for i, (k, n) in enumerate(zip(dims, dies)):
        die = die * n + topo.coords[:, i] * n // k
    cross = die[topo.link_src] != die[topo.link_dst]
    topo.link_d2d = cross
    topo.link_latency[cross] = latency
    topo.link_bytes[cross] = width
    topo.link_freq_mhz[cross] = freq_mhz
