"""Tuples of tables passed by reference (kernels/tables_type.py): a kernel gets one pointer
per tuple however many tables it holds, reads nested tuples' members through it, and the
pointer carries the promises LLVM needs to keep table addresses out of the loop."""

import re
from collections import namedtuple

import numpy as np
from numba import typeof

from npusim.kernels.jit import entry, kernel
from npusim.kernels.tables_type import TablesTuple, UniformTablesTuple, by_reference

Inner = namedtuple("Inner", ("vec", "grid"))
Scalars = namedtuple("Scalars", ("scale", "offset"))
Outer = namedtuple("Outer", ("out", "inner", "p"))
by_reference(Inner, Scalars, Outer)


@kernel(out_of_line=True)
def _weigh(t, k):
    """A call of its own (out_of_line), so its signature stays visible in the entry's code."""
    return t.inner.vec[k] * t.p.scale + t.inner.grid[k, 1] + t.p.offset


@entry(cache=False)  # its LLVM is read below, and numba has none for cached code
def _weigh_all(t):
    for k in range(t.out.shape[0]):
        t.out[k] = _weigh(t, k)


def _tables(n=5):
    return Outer(out=np.zeros(n, dtype=np.int64),
                 inner=Inner(vec=np.arange(n, dtype=np.int64) + 3,
                             grid=np.arange(2 * n, dtype=np.int64).reshape(n, 2) * 10),
                 p=Scalars(scale=7, offset=-2))


def test_registered_tuples_are_typed_by_reference():
    t = _tables()
    assert isinstance(typeof(t), TablesTuple)
    assert isinstance(typeof(t.inner), TablesTuple)  # two arrays of different ndim
    assert isinstance(typeof(t.p), UniformTablesTuple)  # two int64
    assert typeof(t).fields == ("out", "inner", "p")


def test_a_kernel_reads_nested_members_through_the_pointer():
    t = _tables()
    _weigh_all(t)
    want = [(k + 3) * 7 + (2 * k + 1) * 10 - 2 for k in range(5)]
    assert t.out.tolist() == want


def test_a_call_passes_one_pointer_per_tuple():
    t = _tables()
    _weigh_all(t)
    (llvm,) = _weigh_all.inspect_llvm().values()
    define = next(line for line in llvm.splitlines()
                  if line.startswith("define") and "_weigh" in line and "_weigh_all" not in line)
    params = define[define.index("(") + 1:define.rindex(")")].split(", ")
    # the return slot, numba's exception slot, the tuple and k: passed as its leaves, the
    # tuple alone was three arrays of 7-9 words each and two integers
    assert len(params) == 4, define
    tables = next(p for p in params if "%arg.t" in p)
    for promise in ("noalias", "readonly", "nonnull", "dereferenceable("):
        assert promise in tables, tables
    size = int(re.search(r"dereferenceable\((\d+)\)", tables).group(1))
    assert size == 8 * (7 + (7 + 9) + 2)  # out and vec: 1-d arrays, grid: 2-d, 2 scalars
