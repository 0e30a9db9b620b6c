"""A torus: a mesh whose rows and columns close into rings, routed in dimension order the
shorter way round, with two VC classes per ring (a dateline) so the rings cannot
deadlock. Sizes, placement and dies as for the mesh."""

from npusim.noc.topology import kary_ncube, split_dies
from npusim.noc.topologies.mesh import dims_of


def build(noc, n_cores: int, n_channels: int):
    dims = dims_of(noc, n_cores)
    topo = kary_ncube(dims, True, noc.link_latency, noc.link_bytes, noc.freq_mhz)
    split_dies(topo, dims, list(noc.d2d.dies), noc.d2d.latency, noc.d2d.link_bytes,
               noc.d2d.freq_mhz)
    return topo
