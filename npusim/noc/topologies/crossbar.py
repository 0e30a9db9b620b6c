"""One router that every endpoint attaches to: a crossbar.

In the engine, ``noc.type = "crossbar"`` keeps its own fast model (``kernels/noc.py``: a
fixed latency and one packet per destination port at a time); this topology is the same
crossbar as a cycle-level router, for ``npusim noc`` and for comparing the two.
"""

import numpy as np

from npusim.noc.topology import Topology


def build(noc, n_cores: int, n_channels: int):
    empty = np.zeros(0, dtype=np.int64)
    topo = Topology("crossbar", np.zeros((1, 1), dtype=np.int64), empty, empty, empty, empty,
                    empty, np.full((1, 1), -1, dtype=np.int64), np.zeros((1, 1), np.int64),
                    core_sites=[0], memory_sites=[0])
    topo.nodes = [0] * (n_cores + n_channels)
    return topo
