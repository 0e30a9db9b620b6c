"""The memory unit: whichever memory model the config names (``memory.type``), behind the
same rings.

- ``ideal`` (ideal_memory.py): answers every request on the next core cycle. It has no
  NoC in front of it: it serves the network side of the cores' rings itself, on the core
  clock (``npusim.params.TimeBase``).
- ``simple`` (simple_memory.py): each channel serves its input ring in order, at its
  bandwidth, and answers after a fixed latency.
- ``dram`` (dram.py): a cycle-level DRAM controller per channel.

Its tables are ``State.mem`` (``st``), its rings the channels' input and output rings
(``rg``; ideal memory: the cores' rings). A model provides ``<model>_step(st, rg, mt, p, t)``,
which does one memory-clock edge and sets the unit's wake tick (``MC_WAKE``) and resets its
bell; to add one, write its file and add a branch to ``memory_step`` and ``memory_wake``
and its name to ``names.MEMORY_TYPES``.
"""

from .addrmap import dram_channel
from .dram import dram_step
from .ideal_memory import ideal_memory_step
from .jit import kernel
from .names import MEM_DRAM, MEM_IDEAL
from .ports import bell
from .simple_memory import simple_memory_step
from .state import *  # noqa: F403  (field indices of the state tables)


@kernel
def channel_of(addr, p, mt):
    """The memory channel an address belongs to: the DRAM's address mapping, or for
    simple and ideal memory the channels interleaved at request granularity."""
    if p.mem_type == MEM_DRAM:
        return dram_channel(addr, p, mt)
    return (addr // p.req_bytes) % p.n_channels


@kernel(inline=True)
def memory_step(st, rg, mt, p, t):
    """One memory-clock edge at tick t."""
    if p.mem_type == MEM_DRAM:
        dram_step(st, rg, mt, p, t)
    elif p.mem_type == MEM_IDEAL:
        ideal_memory_step(st, rg, p, t)
    else:
        simple_memory_step(st, rg, p, t)


@kernel(inline=True)
def memory_wake(st, rg, p):
    """The first tick the memory must run: its own wake or its bell (ideal memory stands
    on the network side of the cores' rings and listens to that bell)."""
    return min(st.ctl[MC_WAKE], bell(rg, SIDE_NET if p.mem_type == MEM_IDEAL else SIDE_MEM))
