"""Index arithmetic for the hot path: the fixed-size rings in the state tables (queues,
round-robin pointers) by comparison instead of the integer division of ``%``, which is the
slowest instruction on the hot path of every request; and unsigned loop indices."""

import numpy as np

from .jit import kernel


@kernel(inline=True)
def ring_at(head, offset, size):
    """Slot ``offset`` places after ``head`` in a ring of ``size`` (0 <= offset <= size)."""
    i = head + offset
    return i - size if i >= size else i


@kernel(inline=True)
def ring_next(i, size):
    """The slot after i in a ring of ``size``."""
    return 0 if i + 1 >= size else i + 1


@kernel(inline=True)
def unsigned(i):
    """i (>= 0) as an unsigned index. numba wraps negative signed indices around, and that
    select hides from LLVM that a loop walks consecutive elements, so it vectorizes the loop
    with gathers; over an unsigned index it uses plain vector loads."""
    return np.uint64(i)
