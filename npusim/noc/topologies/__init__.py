"""One file per ``noc.type``, each with ``build(noc, n_cores, n_channels) -> Topology``.

Adding a topology is adding a file here: :data:`NOC_TYPES` lists the files, and the config
schema takes its choices from it.
"""

import importlib
import pkgutil
from pathlib import Path

NOC_TYPES = ("crossbar",) + tuple(sorted(
    m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name != "crossbar"))


def topology_module(kind: str):
    """The module of ``noc.type = kind``."""
    return importlib.import_module(f"{__name__}.{kind}")
