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
its bell. The crossbar serves ``noc.type = "crossbar"``, the router network
(``router_network.py``) every topology of routers.

The model is chosen by type, not by a run-time test: each model has its own tables tuple
(``state.Crossbar``, ``state.RouterNetwork``; ``npusim.state`` builds the one the config
names), and ``noc_step`` calls the step of the model whose tuple it gets, chosen when
numba compiles the caller (``NOC_MODELS``; ``jit.MODEL_OPTIONS`` says how it compiles). So the main loop is compiled once per NoC
model a process uses, and a crossbar run never compiles the router network (which was a
third of the first run's compile). To add a model: write its file, give it a tuple in
``state.py`` (beginning with ``ctl``, ending with ``tr_noc``: ``noc_wake`` and the trace
read those), add it to ``NOC_MODELS`` and build it in ``npusim.state``.
"""

from numba.extending import overload

from .crossbar import crossbar_step
from .jit import MODEL_OPTIONS, kernel
from .ports import bell
from .router_network import router_network_step
from .state import *  # noqa: F403  (field indices of the state tables)

# each NoC model's tables tuple and its step
NOC_MODELS = {Crossbar: crossbar_step, RouterNetwork: router_network_step}  # noqa: F405


def noc_step(st, rg, p, t):
    """One NoC-clock edge at tick t, by the model whose tables ``st`` is (kernels only:
    numba resolves it, ``_noc_step_of``)."""
    raise TypeError("noc_step is called by kernels only")


@overload(noc_step, jit_options=MODEL_OPTIONS)
def _noc_step_of(st, rg, p, t):
    """The model's step, chosen by the class of the tuple ``st`` while numba types the
    caller (None: numba reports that no model has tables of this type)."""
    step = NOC_MODELS.get(getattr(st, "instance_class", None))
    if step is not None:
        return lambda st, rg, p, t: step(st, rg, p, t)
    return None


@kernel(inline=True)
def noc_wake(st, rg):
    """The first tick the NoC must run: its own wake or its bell."""
    return min(st.ctl[NC_WAKE], bell(rg, SIDE_NET))  # noqa: F405
