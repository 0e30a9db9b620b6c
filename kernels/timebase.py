"""Small helpers on the global time base shared by every kernel."""

from .jit import kernel


@kernel
def align_up(t, period):
    """The first edge of a clock with this period at or after tick ``t``."""
    return ((t + period - 1) // period) * period
