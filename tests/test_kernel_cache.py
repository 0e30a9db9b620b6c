"""The kernel cache: a compile says so on stderr, once, and only when it happens; `npusim
compile` builds every variant runs use."""

import os
import subprocess
import sys
import textwrap

import pytest

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


PRECOMPILED = textwrap.dedent("""
    import importlib, pkgutil, sys
    sys.path.insert(0, {tests!r})
    import npusim.kernels
    from npusim.precompile import compile_kernels
    from kernel_paths import exercise

    compile_kernels()
    entries = {{}}
    for mod in pkgutil.walk_packages(npusim.kernels.__path__, "npusim.kernels."):
        for name, obj in vars(importlib.import_module(mod.name)).items():
            if getattr(obj, "npusim_entry", False):
                entries[f"{{mod.name}}.{{name}}"] = obj
    before = {{name: set(d.signatures) for name, d in entries.items()}}
    exercise(traced_only=False)
    after = {{name: set(d.signatures) for name, d in entries.items()}}
    print({{name: len(after[name] - before[name]) for name in entries if after[name] != before[name]}})
""")


@pytest.mark.long
def test_npusim_compile_builds_every_variant_a_run_uses():
    """After `npusim compile` (precompile.compile_kernels), taking every kernel path
    (kernel_paths.exercise: crossbar and router networks, full, fast and traced, the DRAM
    replay, the NoC's synthetic traffic and packet replay) adds no compiled variant to any
    kernel entry point: a container built with `npusim compile` compiles nothing at run
    time. (On the suite's own kernel cache; marked long so that on a cold cache it starts
    first and leaves every variant cached for the tests after it.)"""
    from pathlib import Path

    out = subprocess.run([sys.executable, "-c",
                          PRECOMPILED.format(tests=str(Path(__file__).parent))],
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "{}", out.stdout
