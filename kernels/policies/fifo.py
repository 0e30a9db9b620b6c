"""fifo: requests in arrival order; within a request, layers in the order they became ready.

All cores of a partition work on the earliest request's ready layers (one layer at a time
when the model is a chain); a later request only gets cores its elders leave idle.
"""

from ..jit import kernel
from .. import isa
from ..state import R_RANK

SPLITS_CORES = False


@kernel
def priority(st, prog, part, layer):
    return prog.req[prog.layer[layer, isa.L_REQUEST], R_RANK]


@kernel
def started(st, prog, part, layer):
    pass
