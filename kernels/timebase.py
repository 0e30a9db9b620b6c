"""Small helpers on the global time base shared by every kernel."""

from .jit import kernel


@kernel(inline=True)
def align_up(t, period):
    """The first edge of a clock with this period at or after tick ``t``."""
    return ((t + period - 1) // period) * period


@kernel(inline=True)
def on_edge(t, edge, period):
    """Whether tick t is an edge of a clock, given ``edge``, its first edge at or after the
    previous tick looked at; returns that and the edge to pass next time. Ticks come in
    increasing order, so this divides only after a jump past an edge."""
    if t > edge:
        edge = align_up(t, period)
    if t == edge:
        return True, edge + period
    return False, edge
