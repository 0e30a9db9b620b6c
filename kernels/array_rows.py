"""How a GEMM's rows occupy the systolic array's input: plain arithmetic without numba, so
the lowering's cost estimates (``npusim.lowering.tiling``) and the timing kernel
(``systolic.py``, which compiles these) share one rule."""


def gemm_stream_cycles(rows, segs, h, min_cycles):
    """Cycles a GEMM occupies the array input: rows in chunks of <= h, each >= min_cycles."""
    full = rows // h
    rest = rows - full * h
    per_seg = full * max(h, min_cycles)
    if rest > 0:
        per_seg += max(rest, min_cycles)
    return segs * per_seg


def last_chunk_cycles(rows, h, min_cycles):
    """Cycles the last chunk of a GEMM segment of ``rows`` rows holds the array input."""
    rest = rows % h
    return max(rest if rest > 0 else h, min_cycles)
