"""spatial: each request (or request group) owns a partition of the cores.

Without ``scheduler.partitions`` the cores are split evenly between the requests' partition
ids (or between the requests, when none is given); inside a partition, requests run in
arrival order as in ``fifo``.
"""

from ..jit import kernel
from . import fifo

SPLITS_CORES = True


@kernel
def priority(st, prog, part, layer):
    return fifo.priority(st, prog, part, layer)


@kernel
def started(st, prog, part, layer):
    pass
