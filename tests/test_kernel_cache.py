"""The kernel cache: a compile says so on stderr, once, and only when it happens."""

import os
import subprocess
import sys
import textwrap

from npusim.kernels.jit import COMPILE_NOTICE

SCRIPT = textwrap.dedent("""
    from npusim.kernels.jit import entry, kernel

    @kernel
    def add_one(x):
        return x + 1

    @entry
    def add_two(x):
        return add_one(add_one(x))

    print(add_two(1))
""")


def test_compile_notice_only_when_compiling(tmp_path):
    script = tmp_path / "two_kernels.py"  # numba caches only functions defined in a file
    script.write_text(SCRIPT)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    first, second = (subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                                    capture_output=True, text=True) for _ in range(2))
    assert first.returncode == 0 and first.stdout.strip() == "3", first.stderr
    # two kernels compiled (the entry point and, while typing it, the kernel it calls): one
    # line, saying what and how long
    lines = first.stderr.strip().splitlines()
    assert lines == [COMPILE_NOTICE], first.stderr
    # the second process loads the entry point, with the kernel it calls, from the cache:
    # nothing compiled, nothing said
    assert second.returncode == 0 and second.stdout.strip() == "3"
    assert second.stderr == ""


def test_an_out_of_line_kernel_is_never_inlined():
    """``kernel(out_of_line=True)`` keeps a call of its own where LLVM would inline it (a
    one-line kernel always is): its caller's optimised code calls it, and the same kernel
    without the option is inlined."""
    import re

    from numba import njit

    from npusim.kernels.jit import kernel

    def add_one(x):
        return x + 1

    kept, inlined = kernel(add_one, out_of_line=True), kernel(add_one)

    @njit
    def calls_kept(x):
        return kept(x)

    @njit
    def calls_inlined(x):
        return inlined(x)

    assert calls_kept(1) == calls_inlined(1) == 2
    call = re.compile(r"call [^\n]*add_one")
    assert call.search(calls_kept.inspect_llvm(calls_kept.signatures[0]))
    assert not call.search(calls_inlined.inspect_llvm(calls_inlined.signatures[0]))
