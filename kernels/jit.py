"""The one decorator every kernel uses.

``_nrt=False`` compiles without numba's reference-counting runtime. Kernels only read and
write preallocated arrays (they never allocate or return arrays), so there is nothing to
count, and counting cost more than the simulation itself: every call between kernels
incremented and decremented each state array with atomic instructions (measured: 15x
slower per event step). ``cache=True`` keeps compiled kernels on disk across processes.
"""

from numba import njit


def kernel(fn):
    """Compile ``fn`` as an npusim kernel (nopython, cached, no refcounting runtime)."""
    return njit(cache=True, _nrt=False)(fn)

