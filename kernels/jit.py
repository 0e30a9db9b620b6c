"""The one decorator every kernel uses.

``_nrt=False`` compiles without numba's reference-counting runtime. Kernels only read and
write preallocated arrays (they never allocate or return arrays), so there is nothing to
count, and counting cost more than the simulation itself: every call between kernels
incremented and decremented each state array with atomic instructions (measured: 15x
slower per event step). ``cache=True`` keeps compiled kernels on disk across processes.

``inline=True`` inlines a kernel into its callers at numba-IR level. A call between kernels
that LLVM does not inline passes every array of its tuple arguments as separate
arguments (a few hundred machine words pushed per call), which cost more than the work of
a DRAM command. The per-event-step path (``dram_step``, ``noc_step``, ``cores_step`` and
what they call every step: the DRAM controller, the crossbar's grants, ``core_issue``,
``next_tile_for_core``) is therefore inlined: 2.2x faster DRAM replay, at the price of
compiling those kernels once per caller. Do not leave it to LLVM: its inliner counts the
words a call passes in favour of inlining, so it inlined these kernels by itself only while
every call passed the whole chip state; once a unit's kernels took just their own tables
and the rings, it kept them out of line and the engine ran 2-3x slower.
"""

from numba import njit


def kernel(fn=None, *, inline=False):
    """Compile ``fn`` as an npusim kernel (nopython, cached, no refcounting runtime)."""
    if fn is None:
        return lambda f: kernel(f, inline=inline)
    return njit(cache=True, _nrt=False, inline="always" if inline else "never")(fn)
