"""numba kernels over the struct-of-arrays chip state (installed as ``npusim.kernels``).

numba's on-disk cache checks only the source file of the function it compiled, not the
files of the kernels it calls, so an edit to ``core.py`` would leave a stale ``run`` from
``loop.py`` in the cache. The cache therefore lives in a folder keyed by a hash of every
kernel source file: any kernel edit starts a fresh cache. ``NUMBA_CACHE_DIR`` set by the
user wins.
"""

import hashlib
import os
from pathlib import Path


def kernel_cache_dir(variant: str = "") -> str:
    """The cache folder of this version of the kernels (``variant``: a suffix for kernels
    compiled with other numba flags, e.g. bounds checks, which the cache does not key)."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for src in sorted(here.rglob("*.py")):  # policies/ too
        digest.update(str(src.relative_to(here)).encode())
        digest.update(src.read_bytes())
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return str(base / "npusim" / f"kernels-{digest.hexdigest()[:16]}{variant}")


if "NUMBA_CACHE_DIR" not in os.environ:
    _dir = kernel_cache_dir()
    os.environ["NUMBA_CACHE_DIR"] = _dir
    try:  # numba may already be imported by the caller: tell its config too
        import sys

        if "numba" in sys.modules:
            sys.modules["numba"].config.CACHE_DIR = _dir
    except Exception:  # pragma: no cover - best effort only
        pass
