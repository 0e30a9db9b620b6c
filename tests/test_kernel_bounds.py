"""The kernels never index outside their arrays.

Kernels run without numba's bounds checks (and without its reference counting), so an
out-of-range index would silently corrupt memory. This test compiles them with
``NUMBA_BOUNDSCHECK=1`` in a separate process and cache, and runs every kernel path through
them (``kernel_paths.exercise``: memory models, NoC models, traces, fast fidelity's cuts,
scheduling policies, LLM serving, the DRAM replay): any stray index raises.

Every run that has a traced and a fast form is traced and fast: that loop is the plain loop
with the recorder's code and fast fidelity's windows added, and a fast run simulates in full
whatever it does not cut, so the bounds-checked build compiles one loop per NoC model rather
than four. That cache is kept per version of the kernel sources
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
