"""A k-ary n-fly (butterfly): ``noc.stages`` stages of ``k^(stages-1)`` routers of
``noc.radix`` ports, ``k^stages`` terminals injecting at the first stage and ejecting at
the last, routed by destination tag (stage s takes output digit stages-1-s of the
destination). One stage is a single k-port crossbar router (ONNXim's ``fly`` configs).
Placement names terminals: cores on terminals 0, 1, ..., memory channels after them
(ONNXim's node order)."""

import numpy as np

from npusim.errors import NpusimError
from npusim.noc.topology import Topology, make_links, shortest_path_routes


def radix_for(terminals: int, stages: int) -> int:
    k = 2
    while k ** stages < terminals:
        k += 1
    return k


def build(noc, n_cores: int, n_channels: int):
    n = noc.stages
    ports = n_cores * noc.core_ports  # the cores' interfaces (ONNXim: cores x ports)
    k = noc.radix or radix_for(ports + n_channels, n)
    per_stage = k ** (n - 1)
    if per_stage * n > 4096:
        raise NpusimError(f"config fields noc.radix = {k}, noc.stages = {n}: a butterfly of "
                          f"{per_stage * n} routers is too large (at most 4096)")
    router = lambda s, a: s * per_stage + a  # noqa: E731
    pairs = []
    for s in range(n - 1):
        digit = k ** (n - 2 - s)
        for a in range(per_stage):
            here = (a // digit) % k
            for p in range(k):
                pairs.append((router(s, a), router(s + 1, a + (p - here) * digit)))
    src, dst, lat, wid, freq = make_links(pairs, noc.link_latency, noc.link_bytes, noc.freq_mhz)
    R = n * per_stage
    coords = np.array([[r // per_stage, r % per_stage] for r in range(R)], dtype=np.int64)
    terminals = np.arange(k * per_stage)
    topo = Topology("fly", coords, src, dst, lat, wid, freq,
                    shortest_path_routes(R, src, dst, np.ones(len(pairs), np.int64)),
                    np.zeros((R, R), np.int64),
                    site_in=router(0, terminals // k), site_out=router(n - 1, terminals // k),
                    names=[f"stage{r // per_stage}.{r % per_stage}" for r in range(R)])
    topo.core_sites = list(range(len(terminals)))
    topo.memory_sites = list(range(ports, len(terminals))) or [0]
    return topo
