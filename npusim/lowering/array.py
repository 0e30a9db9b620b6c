"""The systolic array's schedule: the PRELOAD/GEMM rows every array op emits.

GEMM, convolution and attention describe their array work the same way: a sequence of
weight *blocks* (at most ``height`` reduction rows by ``width`` output columns, in the order
of the op's loop nest) each streamed by the same rows of the moving operand (a *stream*).
:func:`emit_schedule` turns that into instructions for the configured dataflow
(``core.systolic.dataflow``, one function per entry of :data:`SCHEDULES`); the matching
timing rule is in ``kernels/systolic.py``. A second dataflow is one more function here and
one more rule there.

The block orders follow Gemmini's loop unrollers: a GEMM walks reduction blocks outside
output-column blocks (``LoopMatmul.scala``: k, j, i), a convolution output-channel blocks
outside kernel positions outside channel blocks (``LoopConv.scala``: och, krow, kcol, kch),
and both stream every row of the tile through each block before the next. A GEMM whose
weights are stored transposed walks them as a convolution does, output-column blocks
outside reduction blocks, as its weights load a column block at a time (``gemm.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from npusim.kernels import isa
from npusim.program import Instr


@dataclass(frozen=True)
class Block:
    """One weight block: ``k`` reduction rows (<= height) by ``n`` output columns
    (<= width), in the scratchpad once instruction ``weights`` of the template completes."""

    k: int
    n: int
    weights: int


@dataclass(frozen=True)
class Stream:
    """The moving operand: ``segs`` segments of ``rows`` rows each (a GEMM: one segment of
    its tile's rows; a convolution: one segment per output row, of that row's pixels),
    readable once the instructions ``deps`` complete (at most two, see :func:`wait_for`)."""

    rows: int
    segs: int = 1
    deps: tuple[int, ...] = ()


def weight_stationary(out: list[np.ndarray], blocks: Iterable[Block], stream: Stream) -> None:
    """Per block: PRELOAD its weights (after their load), then one GEMM streaming every row
    of the tile through them. The first PRELOAD of a tile drains the array first.

    The rows are written as one table (a convolution tile has hundreds of blocks): the
    PRELOAD and GEMM rows the :class:`Instr` builders make, with each block's own fields
    (its weights' load, its MACs) filled in."""
    blocks = list(blocks)
    if not blocks:
        return
    table = np.empty((2 * len(blocks), isa.N_INST_COLS), np.int64)
    table[0::2] = Instr.preload(deps=(blocks[0].weights,))
    table[0::2, isa.I_DEP0] = [b.weights for b in blocks]
    table[0, isa.I_DRAIN] = 1
    table[1::2] = Instr.gemm(stream.rows, stream.segs, 0, deps=stream.deps)
    table[1::2, isa.I_MACS] = [stream.rows * stream.segs * b.k * b.n for b in blocks]
    out.extend(table)


SCHEDULES: dict[str, Callable[[list, Iterable[Block], Stream], None]] = {
    "ws": weight_stationary,
}
"""Dataflow (``core.systolic.dataflow``, ``isa.DATAFLOWS``) -> schedule."""


def emit_schedule(dataflow: str, out: list[np.ndarray], blocks: Iterable[Block],
                  stream: Stream) -> None:
    """Append the array instructions of ``blocks`` streamed by ``stream`` to ``out``."""
    SCHEDULES[dataflow](out, blocks, stream)


def wait_for(out: list[np.ndarray], deps: list[int]) -> tuple[int, ...]:
    """At most two dependencies standing for all of ``deps``: when there are more, a
    zero-element VECTOR (no cycles) that waits for them joins them first."""
    deps = list(deps)
    while len(deps) > 2:
        out.append(Instr.vector("add", 0, deps=(deps.pop(0), deps.pop(0))))
        deps.insert(0, len(out) - 1)
    return tuple(deps)
