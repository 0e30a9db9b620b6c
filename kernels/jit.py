"""The one decorator every kernel uses.

``_nrt=False`` compiles without numba's reference-counting runtime. Kernels only read and
write preallocated arrays (they never allocate or return arrays), so there is nothing to
count, and counting cost more than the simulation itself: every call between kernels
incremented and decremented each state array with atomic instructions (measured: 15x
slower per event step). ``cache=True`` keeps compiled kernels on disk across processes.

``inline=True`` inlines a kernel into its callers at numba-IR level. A call between kernels
that LLVM does not inline passes every array of the State, MemTables and Params tuples
as separate arguments (about 450 machine words pushed per call), which cost more than the
work of a DRAM command. The per-event-step path (``dram_step``, ``noc_step``,
``cores_step`` and the DRAM controller below them) is therefore inlined: 2.2x faster
DRAM replay, at the price of compiling those kernels once per caller.
"""

from numba import njit


def kernel(fn=None, *, inline=False):
    """Compile ``fn`` as an npusim kernel (nopython, cached, no refcounting runtime)."""
    if fn is None:
        return lambda f: kernel(f, inline=inline)
    return njit(cache=True, _nrt=False, inline="always" if inline else "never")(fn)
