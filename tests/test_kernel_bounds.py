"""The kernels never index outside their arrays.

Kernels run without numba's bounds checks (and without its reference counting), so an
out-of-range index would silently corrupt memory. This test compiles them with
``NUMBA_BOUNDSCHECK=1`` in a separate process and cache, and runs every kernel path through
them (``kernel_paths.exercise``: memory models, NoC models, traces, fast fidelity's cuts,
scheduling policies, LLM serving, the DRAM replay): any stray index raises.

Every run that has an untraced form is traced: the traced loop is the untraced loop with the
recorder's code added, so the bounds-checked build compiles one loop per NoC model (and the
fast loop) rather than two, about half of the 570 CPU seconds all ten `npusim compile` entry
points took bounds-checked. That cache is kept per version of the kernel sources
(``npusim.kernels.kernel_cache_dir``), so the suite pays the compile once per kernel change.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from npusim.kernels import kernel_cache_dir

SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from kernel_paths import exercise
    exercise(traced_only=True)
    print("clean")
""")


@pytest.mark.long
def test_kernels_stay_in_bounds():
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1",
               NUMBA_CACHE_DIR=kernel_cache_dir("-boundscheck"))
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(tests=str(Path(__file__).parent))],
                         env=env, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("clean")
