"""A bidirectional ring of ``noc.dims = [n]`` routers (default: one per core), each packet
going the shorter way round, with a dateline VC class like the torus. Memory channels are
spread round robin over all routers."""

from npusim.noc.topology import kary_ncube


def build(noc, n_cores: int, n_channels: int):
    n = noc.dims[0] if noc.dims else max(2, n_cores)
    topo = kary_ncube([n], True, noc.link_latency, noc.link_bytes, noc.freq_mhz)
    topo.memory_sites = list(range(n))
    return topo
