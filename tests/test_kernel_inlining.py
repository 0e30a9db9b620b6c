"""How kernels are inlined (kernels/jit.py): the size that decides numba-IR inlining counts
the kernels inlined into a kernel, and a kernel inlined at several call sites from the one
IR built per process computes at each of them."""

import dis

import numpy as np

from npusim.kernels.jit import IR_INLINE_INSTRUCTIONS, entry, kernel


# A leaf of about 200 bytecode instructions, small enough for numba-IR inlining: one sum of
# 24 weighted terms, written out (a loop would be a few instructions)
_TERMS = [(k % 4, k + 1) for k in range(24)]
exec("def _weighted(a, i):\n    return " + " + ".join(f"a[i + {o}] * {w}" for o, w in _TERMS))
_weighted = kernel(inline=True)(_weighted)  # noqa: F821 (defined by the exec above)


@kernel(inline=True)
def _two_windows(a, i):
    """Small itself, but with two copies of ``_weighted`` over the threshold."""
    return _weighted(a, i) - _weighted(a, i + 1)


@entry
def _run_two_windows(a, out):
    for i in range(out.shape[0]):
        out[i] = _two_windows(a, i)


def _own(fn):
    return len(list(dis.get_instructions(fn)))


def _weighted_py(a, i):
    return sum(a[i + o] * w for o, w in _TERMS)


def test_size_counts_each_call_of_an_ir_inlined_kernel():
    assert _weighted.ir_size == _own(_weighted.py_func) <= IR_INLINE_INSTRUCTIONS
    assert _weighted.targetoptions["inline"] == "always"  # numba-IR inlining
    assert _own(_two_windows.py_func) <= IR_INLINE_INSTRUCTIONS
    assert _two_windows.ir_size == _own(_two_windows.py_func) + 2 * _weighted.ir_size
    assert _two_windows.ir_size > IR_INLINE_INSTRUCTIONS
    # so it is compiled once and inlined by LLVM
    assert _two_windows.targetoptions["inline"] == "never"
    assert _two_windows.targetoptions["forceinline"] is True


def test_a_kernel_inlined_twice_from_one_ir_computes_at_both_sites():
    a = np.arange(1, 13, dtype=np.int64) ** 2
    out = np.zeros(6, dtype=np.int64)
    _run_two_windows(a, out)
    want = [_weighted_py(a, i) - _weighted_py(a, i + 1) for i in range(6)]
    assert out.tolist() == want
