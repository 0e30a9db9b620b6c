"""Scheduling policies: which ready layer a free core of a partition takes work from next.

Cores are split into partitions (``scheduler.partitions``, or by the policy); each partition
keeps its own list of ready layers (layers whose predecessors have all finished, with
groups of tiles not yet handed out). When a core of the partition has a free tile slot, the
scheduler asks the policy for the ``priority`` of every ready layer of the partition and
hands out the next group of the layer with the lowest one (ties: the layer that became
ready first). So no core idles while its partition has a ready tile.

A policy is one file in this folder with:

- ``SPLITS_CORES``: whether, without ``scheduler.partitions`` in the config, the cores are
  split evenly between requests (True: spatial sharing) or form one partition (False);
- ``priority(st, prog, part, layer)``: a kernel returning an int64, lower first;
- ``started(st, prog, part, layer)``: a kernel called when a layer's first group is handed
  out (a policy with state keeps it in ``st.part_st``).

To add one: write the file, add its name to ``POLICIES`` in ``kernels/names.py`` (its
position is its id) and its module to ``MODULES`` and the two dispatchers below.
"""

from ..jit import kernel
from ..names import POLICIES, POLICY_SPATIAL, POLICY_TIME_SHARED
from . import fifo, spatial, time_shared

MODULES = (fifo, time_shared, spatial)  # in the order of names.POLICIES
assert tuple(m.__name__.rsplit(".", 1)[1].replace("_", "-") for m in MODULES) == POLICIES


@kernel
def layer_priority(st, prog, p, part, layer):
    if p.policy == POLICY_TIME_SHARED:
        return time_shared.priority(st, prog, part, layer)
    if p.policy == POLICY_SPATIAL:
        return spatial.priority(st, prog, part, layer)
    return fifo.priority(st, prog, part, layer)


@kernel
def layer_started(st, prog, p, part, layer):
    if p.policy == POLICY_TIME_SHARED:
        time_shared.started(st, prog, part, layer)
    elif p.policy == POLICY_SPATIAL:
        spatial.started(st, prog, part, layer)
    else:
        fifo.started(st, prog, part, layer)
