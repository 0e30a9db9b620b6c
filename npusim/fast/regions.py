"""Repeated work in a lowered program, found once per program: runs of identical layers
(regions) and, inside a layer, runs of identical tile groups (:class:`TileRun`).

Two layers are *identical* when they would run the same way given the same chip state: the
same op type, input and output shapes and mapping, the same tile templates in the same
groups (templates are compared by their instruction rows, addresses left out: equal rows mean equal instruction
streams over other data), the same number of predecessors and the same
request. A *region* is a stretch of the layer sequence that repeats with a period of ``P``
layers at least ``min_iterations`` times: ``P = 1`` for a run of identical layers,
``P`` = the layers of one decoder block for the blocks of a transformer. Regions may nest
(a per-request attention pattern inside a decoder block); each is extrapolated on its own.

Iterations either follow each other (each waits on the one before) or run side by side
(all wait on one layer in front of them); see :class:`Region`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from npusim.kernels import isa
from npusim.program import Program

MIN_ITERATIONS = 4  # a region is worth watching from this many iterations on
MAX_CANDIDATE_PERIODS = 64  # periods tried, most frequent signature gaps first


@dataclass(frozen=True)
class Region:
    """``iterations`` repeats of a pattern of ``stride`` layers; iteration ``k`` is the
    layers ``first + k * stride + o`` for ``o`` in ``offsets``.

    ``offsets == range(stride)``: iterations follow each other and each waits on the one
    before (decoder blocks). Otherwise the repeats all wait on a layer in front of them
    (the per-request attention of one decoder block waits on the QKV projection) and run
    side by side, in the order their layers became ready: an iteration is then one *wave*
    of a repeat, the layers released at the same time (every request's Q, K and V
    preparation first, then every request's scores, ...), and each wave is a region.
    """

    first: int
    stride: int
    iterations: int
    offsets: tuple[int, ...]

    @property
    def period(self) -> int:
        """Layers per iteration."""
        return len(self.offsets)

    @property
    def sequential(self) -> bool:
        return self.offsets == tuple(range(self.stride))

    @property
    def end(self) -> int:
        """One past the region's last layer."""
        return self.layer(self.iterations - 1, self.period - 1) + 1

    def layer(self, iteration: int, index: int = 0) -> int:
        return self.first + iteration * self.stride + self.offsets[index]

    def __repr__(self) -> str:
        offs = (f"{self.stride} layers" if self.sequential
                else "offsets " + ",".join(map(str, self.offsets)) + f" of {self.stride}")
        return f"Region(first={self.first}, {self.iterations} x {offs})"

    def layers(self) -> np.ndarray:
        """Every layer of the region, iteration by iteration."""
        return (self.first + np.arange(self.iterations)[:, None] * self.stride
                + np.asarray(self.offsets)[None, :]).ravel()


def tile_templates(tiles: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The templates ``tiles`` (rows of a tile table) run: their first rows and lengths,
    and for each tile the index of its template among them."""
    starts, where = np.unique(tiles[:, isa.T_INST_START], return_inverse=True)
    lengths = np.zeros(len(starts), dtype=np.int64)
    lengths[where] = tiles[:, isa.T_INST_LEN]
    return starts, lengths, where.ravel()


def tile_row_sums(prog: Program, tiles: np.ndarray, row_values) -> np.ndarray:
    """Per tile (rows of a tile table), ``row_values`` summed over its instructions:
    ``row_values(inst)`` gives a column per quantity for each row of ``inst``. One pass over
    the instruction rows the tiles use (a Llama step skips 89,900 tiles of thousands of
    templates at a cut: a loop over templates took a tenth of a second a call)."""
    if not len(tiles):
        return np.zeros((0, row_values(prog.inst[:0]).shape[1]), np.int64)
    first = tiles[:, isa.T_INST_START]
    lo, hi = int(first.min()), int((first + tiles[:, isa.T_INST_LEN]).max())
    values = np.asarray(row_values(prog.inst[lo:hi]), np.int64)
    running = np.zeros((hi - lo + 1, values.shape[1]), np.int64)
    np.cumsum(values, axis=0, out=running[1:])
    return running[first - lo + tiles[:, isa.T_INST_LEN]] - running[first - lo]


class TileContents:
    """One integer per tile: equal integers mean the same instruction rows, addresses left
    out (the same work on other data). Kept across a run's program extensions: each
    template is compared once, and :meth:`update` looks only at the tiles added since."""

    def __init__(self) -> None:
        self.ids: dict[bytes, int] = {}  # a template's rows without addresses -> id
        self.of_template: dict[int, int] = {}  # first row of a template -> id
        self.of_tile = np.zeros(0, np.int64)

    def update(self, prog: Program) -> np.ndarray:
        """``of_tile`` for every tile of ``prog`` (the program seen before, extended)."""
        starts, lengths, where = tile_templates(prog.tile[len(self.of_tile):])
        for s, n in zip(starts.tolist(), lengths.tolist()):
            if s not in self.of_template:
                rows = prog.inst[s:s + n].copy()
                rows[:, isa.I_OFFSET] = 0  # addresses left out
                rows = rows.tobytes()
                self.of_template[s] = self.ids.setdefault(rows, len(self.ids))
        content = np.array([self.of_template[s] for s in starts.tolist()], np.int64)
        self.of_tile = np.concatenate([self.of_tile, content[where]])
        return self.of_tile


def tile_contents(prog: Program) -> np.ndarray:
    """:class:`TileContents` of a whole program, at once."""
    return TileContents().update(prog)


def layer_signatures(prog: Program, first: int = 0,
                     tile_content: np.ndarray | None = None,
                     ids: dict[tuple, int] | None = None) -> np.ndarray:
    """One integer per layer from ``first`` on; equal integers mean identical layers.
    ``ids`` (signature to integer, filled in) keeps the integers across calls."""
    n_layers = prog.layer.shape[0]
    groups = prog.group
    if tile_content is None:
        tile_content = tile_contents(prog)
    if ids is None:
        ids = {}
    out = np.empty(n_layers - first, dtype=np.int64)
    for lid in range(first, n_layers):
        row = prog.layer[lid]
        info = prog.layers[lid]
        g0, gn = int(row[isa.L_GROUP_START]), int(row[isa.L_GROUP_LEN])
        lens = groups[g0:g0 + gn, isa.G_TILE_LEN]
        t0 = int(groups[g0, isa.G_TILE_START]) if gn else 0
        shape = lens.tobytes() + tile_content[t0:t0 + int(lens.sum())].tobytes()
        key = (info.op_type, tuple(map(tuple, info.input_shapes)), tuple(info.output_shape),
               info.mapping, int(row[isa.L_N_PREDS]), int(row[isa.L_REQUEST]), shape)
        out[lid - first] = ids.setdefault(key, len(ids))
    return out


@dataclass(frozen=True)
class TileRun:
    """Groups ``first_group`` to ``end_group`` (exclusive) of ``layer``: a run of identical
    groups (the same tiles, addresses aside), handed out to the cores one after the other.
    ``tiles_before`` of the layer's tiles come in the groups before it, ``tiles_after`` in
    the groups after it.

    ``span``: the run's first tiles that share the operand it steps through slowest (its
    outer loop's first iteration: a GEMM's first block of input rows while the weights'
    columns go by). Its later blocks lie elsewhere in the DRAM's banks and rows, and can
    meet the other operands' streams differently (BERT's FFN on LPDDR5: row hits 0.72 over
    the first block of rows, 0.63 over every later one), so the run is measured past it,
    and the first block, when long, as a run of its own (``first_block``)."""

    layer: int
    first_group: int
    end_group: int
    tiles_per_group: int
    tiles_before: int
    span: int = 0
    tiles_after: int = 0

    @property
    def groups(self) -> int:
        return self.end_group - self.first_group

    @property
    def tiles(self) -> int:
        return self.groups * self.tiles_per_group

    def first_block(self) -> "TileRun | None":
        """The groups of the outer loop's first iteration (``span``) as a run of their own:
        alike among themselves, unlike the rest (None if the run has no such step)."""
        groups = self.span // self.tiles_per_group
        if not 0 < groups < self.groups:
            return None
        return TileRun(self.layer, self.first_group, self.first_group + groups,
                       self.tiles_per_group, self.tiles_before,
                       tiles_after=self.tiles_after + self.tiles - self.span)


def find_tile_runs(prog: Program, first: int, min_groups: int,
                   tile_content: np.ndarray | None = None) -> list[TileRun]:
    """Per layer from ``first`` on, its longest run of identical groups, if it holds at least
    ``min_groups`` groups."""
    if tile_content is None:
        tile_content = tile_contents(prog)
    groups = prog.group
    out = []
    for lid in np.flatnonzero(prog.layer[first:, isa.L_GROUP_LEN] > 1) + first:
        g0, gn = (int(x) for x in prog.layer[lid, [isa.L_GROUP_START, isa.L_GROUP_LEN]])
        t0 = groups[g0:g0 + gn, isa.G_TILE_START]
        tn = groups[g0:g0 + gn, isa.G_TILE_LEN]
        if gn < min_groups:
            continue
        ids: dict[bytes, int] = {}
        sig = np.array([ids.setdefault(tile_content[a:a + n].tobytes(), len(ids))
                        for a, n in zip(t0.tolist(), tn.tolist())])
        edges = np.flatnonzero(np.diff(sig)) + 1
        starts = np.concatenate([[0], edges])
        ends = np.concatenate([edges, [gn]])
        k = int(np.argmax(ends - starts))
        a, b = int(starts[k]), int(ends[k])
        if b - a >= min_groups:
            bases = prog.tile[t0[a:b], isa.T_BASE0:isa.T_BASE0 + 4]  # each group's first
            out.append(TileRun(int(lid), g0 + a, g0 + b, int(tn[a]), int(tn[:a].sum()),
                               span=_outer_span(bases) * int(tn[a]),
                               tiles_after=int(tn[b:].sum())))
    return out


def _outer_span(bases: np.ndarray) -> int:
    """Groups (rows of ``bases``, a column per base address) before the base that changes
    last first changes: 0 if none changes."""
    changed = bases[1:] != bases[:1]
    first = np.where(changed.any(axis=0), changed.argmax(axis=0) + 1, 0)
    return int(first.max()) if len(first) else 0


def _candidate_periods(sig: np.ndarray, min_iterations: int) -> list[int]:
    """Gaps between consecutive occurrences of a signature, the most frequent first."""
    order = np.argsort(sig, kind="stable")
    same = sig[order[1:]] == sig[order[:-1]]
    gaps = (order[1:] - order[:-1])[same]
    counts = Counter(gaps.tolist())
    return [p for p, n in counts.most_common(MAX_CANDIDATE_PERIODS) if n >= min_iterations - 1]


def _stretches(sig: np.ndarray, period: int, min_iterations: int) -> list[tuple[int, int]]:
    """Maximal ``[start, end)`` with ``sig[i] == sig[i + period]`` for start <= i < end - period,
    holding at least ``min_iterations`` whole periods."""
    if period >= len(sig):
        return []
    eq = np.concatenate([[False], sig[:-period] == sig[period:], [False]])
    edges = np.flatnonzero(eq[1:] != eq[:-1])
    out = []
    for a, b in zip(edges[::2], edges[1::2]):  # eq[a+1 .. b] true: positions a .. b-1
        start, end = int(a), int(b) + period
        if (end - start) // period >= min_iterations:
            out.append((start, end))
    return out


def _predecessors(prog: Program, first: int) -> list[list[int]]:
    """Predecessors of each layer from ``first`` on (index ``lid - first``)."""
    preds: list[list[int]] = [[] for _ in range(prog.layer.shape[0] - first)]
    src = prog.edge_sources()
    keep = prog.layer_succ >= first
    for s, d in zip(src[keep].tolist(), prog.layer_succ[keep].tolist()):
        preds[d - first].append(s)
    return preds


def _waves(preds: list[list[int]], first: int, start: int, period: int) -> list[int] | None:
    """For a stretch whose repeats run side by side: the release wave of each layer of the
    first repeat (0: waits only on layers in front of the stretch, w + 1: on a layer of
    wave w of its own repeat). None if the repeats wait on each other (a sequential
    stretch)."""
    waves: list[int] = []
    for o in range(period):
        p = preds[start + o - first]
        if any(start + period <= q for q in p):
            return None
        inside = [waves[q - start] for q in p if q >= start]
        waves.append(1 + max(inside) if inside else 0)
    for o in range(period):  # the second repeat must wait on nothing of the first
        if any(start <= q < start + period for q in preds[start + period + o - first]):
            return None
    return waves


def find_regions(prog: Program, first: int = 0, min_iterations: int = MIN_ITERATIONS,
                 tile_content: np.ndarray | None = None,
                 signatures: np.ndarray | None = None) -> list[Region]:
    """The repeated regions among layers ``first ..`` (a program extended by an LLM server
    is searched again from its new layers on), largest first. A stretch is reported with its
    smallest period only; a stretch whose repeats run side by side becomes one region per
    release wave. ``signatures``: those layers' ``layer_signatures``, if already known."""
    sig = layer_signatures(prog, first, tile_content) if signatures is None else signatures
    preds = _predecessors(prog, first)
    stretches: list[tuple[int, int, int]] = []
    found: list[Region] = []
    for period in sorted(_candidate_periods(sig, min_iterations)):
        for start, end in _stretches(sig, period, min_iterations):
            start, end = first + start, first + end
            if any(s <= start and end <= e and period % p == 0 for s, e, p in stretches):
                continue  # a multiple of a period already found over the same layers
            stretches.append((start, end, period))
            n = (end - start) // period
            waves = _waves(preds, first, start, period)
            if waves is None:
                found.append(Region(start, period, n, tuple(range(period))))
            else:
                found += [Region(start, period, n, tuple(o for o in range(period)
                                                         if waves[o] == w))
                          for w in sorted(set(waves))]
    found.sort(key=lambda r: -(r.period * r.iterations))
    return found
