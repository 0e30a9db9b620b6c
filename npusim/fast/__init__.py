"""Fast mode (``fidelity = "fast"``): steady-state extrapolation of repeated work.

See :mod:`npusim.fast.regions` (what repeats) and :mod:`npusim.fast.forward` (when and how a
run skips it).
"""

from npusim.fast.forward import FastForward
from npusim.fast.regions import Region, find_regions

__all__ = ["FastForward", "Region", "find_regions"]
