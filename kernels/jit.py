"""The one decorator every kernel uses, and the notice shown while kernels compile.

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

import sys

from numba import njit
from numba.core import event

# What a cold compile of every kernel a run needs usually costs (tests/benchmarks/
# bench_compile.py, CPU seconds on one core of the 2-core reference machine); the notice
# quotes it so that a silent first run does not look hung.
USUAL_COMPILE_SECONDS = 120
COMPILE_NOTICE = (f"npusim: compiling the simulation kernels, once per install (usually about "
                  f"{USUAL_COMPILE_SECONDS} s; `npusim compile` does it ahead of time)")


def kernel(fn=None, *, inline=False):
    """Compile ``fn`` as an npusim kernel (nopython, cached, no refcounting runtime)."""
    if fn is None:
        return lambda f: kernel(f, inline=inline)
    dispatcher = njit(cache=True, _nrt=False, inline="always" if inline else "never")(fn)
    dispatcher.npusim_kernel = True  # the compile notice speaks of these only
    return dispatcher


class _CompileNotice(event.Listener):
    """One line on stderr, once per process, when an npusim kernel is compiled.

    numba broadcasts ``numba:compile`` only on a cache miss (a load from the on-disk cache
    broadcasts nothing), so the line appears exactly when a run is about to wait for
    the compiler: the first run after an install or a kernel edit.
    """

    def __init__(self):
        self.said = False

    def on_start(self, ev):
        if self.said or not getattr(ev.data["dispatcher"], "npusim_kernel", False):
            return
        self.said = True
        print(COMPILE_NOTICE, file=sys.stderr, flush=True)

    def on_end(self, ev):
        pass


event.register("numba:compile", _CompileNotice())
