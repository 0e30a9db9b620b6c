"""Index arithmetic of the fixed-size rings in the state tables (queues, round-robin
pointers) by comparison instead of the integer division of ``%``, which is the slowest
instruction on the hot path of every request."""

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
