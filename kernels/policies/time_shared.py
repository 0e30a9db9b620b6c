"""time-shared: round-robin between the active requests, layer by layer.

A layer whose groups are being handed out is finished first (so the partition works on one
layer at a time, as in ``fifo``); the next layer to start is the ready one whose request
comes next in arrival order after the request of the layer started last, wrapping around.
"""

from ..jit import kernel
from .. import isa
from ..state import L_NEXT_GROUP, PT_LAST_RANK, R_RANK

SPLITS_CORES = False


@kernel
def priority(st, prog, part, layer):
    if st.layer_st[L_NEXT_GROUP, layer] > prog.layer[layer, isa.L_GROUP_START]:
        return 0  # already started
    n = prog.req.shape[0]
    rank = prog.req[prog.layer[layer, isa.L_REQUEST], R_RANK]
    return 1 + (rank - st.part_st[PT_LAST_RANK, part] - 1 + n) % n


@kernel
def started(st, prog, part, layer):
    st.part_st[PT_LAST_RANK, part] = prog.req[prog.layer[layer, isa.L_REQUEST], R_RANK]

