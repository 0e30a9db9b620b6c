"""The NoC unit: whichever network the config names (``noc.type``), between the cores'
rings and the memory channels' rings.

Its tables are ``State.noc`` (``st``), its rings the network side of all four kinds
(``rg``, ``ports.py``): it takes requests from the cores' injection rings and delivers them
to the channels' input rings, and takes responses from the channels' output rings and
delivers them to the cores' arrival rings, with back-pressure (it never pushes into a full
ring: the packet waits in the network). A model provides
``<model>_step(st, rg, p, t)``: one NoC-clock edge at tick t, which takes note of the
rings in ``rg.fresh``, moves packets, sets the unit's wake tick (``NC_WAKE``: the next
edge at which it can do anything without being rung, ``isa.NEVER`` when idle) and resets
its bell. To add a model: write its file, add a branch to ``noc_step`` and its name to
``names.NOC_MODELS``; its tables go into ``state.Noc`` (``npusim.state`` sizes them).
The crossbar serves ``noc.type = "crossbar"``, the router network (``router_network.py``)
every topology of routers.
"""

from .crossbar import crossbar_step
from .jit import kernel
from .names import NOC_CROSSBAR, NOC_ROUTERS
from .ports import bell
from .router_network import router_network_step
from .state import *  # noqa: F403  (field indices of the state tables)


@kernel(inline=True)
def noc_step(st, rg, p, t):
    """One NoC-clock edge at tick t."""
    if p.noc_model == NOC_CROSSBAR:
        crossbar_step(st, rg, p, t)
    elif p.noc_model == NOC_ROUTERS:
        router_network_step(st, rg, p, t)


@kernel(inline=True)
def noc_wake(st, rg):
    """The first tick the NoC must run: its own wake or its bell."""
    return min(st.ctl[NC_WAKE], bell(rg, SIDE_NET))
