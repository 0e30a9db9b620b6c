"""Lowering an op like an earlier one of the same kind: copy what that one emitted.

An LLM serving iteration lowers the same op many times over: the attention of every request
of every decoder layer (4,096 GroupQueryAttention nodes in a Llama-3-8B step at batch 128),
the same projections in every layer. Their layers, groups, tiles and templates are the same;
only the DRAM addresses, the layer numbers and the names differ. :class:`LoweringMemo`
lowers the first node of a kind for real and records what it emitted; a later node of the
same kind gets a copy with

- every tile base address moved by the distance between the tensor it points into in the
  recorded node and the same tensor of the new node (the node's inputs and outputs, and the
  scratch space the lowering allocated, which is allocated again, same sizes, same order),
- predecessors inside the copy moved to the new layers, outside it mapped to the producers
  of the new node's inputs,
- layer and scratch tensor names renamed from the recorded node's name to the new one.

A copy is taken only when that is exact: every address moved by whole pages (no lowering
decision can depend on where inside a page a tensor starts: none does today, and this keeps
it so), every base address inside the pages of exactly one of those tensors or all of them
agreeing, every outside predecessor the producer of an input. Outputs that get their address
from the lowering (a projection's result) lie in its allocation and move with it. Otherwise
the node is lowered for real. Tests build serving steps both ways (Llama's attention,
GPT-2's projections and norms) and compare the programs table by table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npusim.frontend.graph import Node
from npusim.kernels import isa
from npusim.lowering.context import LoweringContext

PAGE = 4096  # an address moves by whole pages, or the node is lowered for real


@dataclass
class _Record:
    """What lowering one node emitted, relative to that node."""

    node_name: str
    tensors: list[str | None]  # the node's inputs then outputs ("" / absent: None)
    unplaced: list[bool]  # outputs the lowering gave their address (in its allocation)
    regions: np.ndarray  # [tensor, (start, end)] of each of those, in recorded addresses
    alloc: tuple[int, int]  # [start, end) the lowering allocated
    layers: tuple[int, int, int]  # first layer, group, tile of the recorded span
    n: tuple[int, int, int]  # layers, groups, tiles emitted
    preds: list[list[tuple[str, int]]]  # per layer: ("in", k) input k's producer, ("own", j)
    tiles: np.ndarray  # the recorded tile rows
    base_where: "_Where"  # [tile, slot]: the region a slot's base address lies in
    row_where: "_Where"  # [row]: the region a DMA row's address (in its own offset) lies in
    row_tile: np.ndarray  # [row]: the tile whose template the row is in
    row_at: np.ndarray  # [tile + 1]: where each tile's rows begin (and the last ends)
    new_tensors: list[tuple[str, object, int | None, int | None]]  # suffix, info, addr, layer


class LoweringMemo:
    """Per builder: nodes already lowered, by a key saying they lower the same way."""

    def __init__(self) -> None:
        self._records: dict[object, _Record | None] = {}

    def lower(self, ctx: LoweringContext, node: Node, key: object, lower) -> None:
        """``lower(ctx, node)``, or a copy of what it emitted for an earlier node of ``key``."""
        rec = self._records.get(key, False)
        if rec and _replay(ctx, node, rec):
            return
        if rec is None:  # this kind cannot be copied: lower for real
            lower(ctx, node)
            return
        self._records[key] = _record(ctx, node, lower)


def _tensors(node: Node) -> list[str | None]:
    return [t or None for t in list(node.inputs) + list(node.outputs)]


def _regions(ctx: LoweringContext, names: list[str | None],
             unplaced: list[bool]) -> np.ndarray | None:
    """[start, end) of each named tensor in DRAM (-1, -1: absent, or one of the ``unplaced``
    outputs, which the lowering places in its own allocation); None if another has no
    address yet, or an unplaced one has."""
    out = np.full((len(names), 2), -1, np.int64)
    for k, t in enumerate(names):
        if t is None:
            continue
        if (t not in ctx.address) != unplaced[k]:
            return None
        if unplaced[k]:
            continue
        a = ctx.address[t]
        size = ctx.nbytes.get(t, ctx.graph.tensor(t).numel * ctx.precision)
        out[k] = a, -(-(a + size) // PAGE) * PAGE  # the pages given to it
    return out


def _inside(addr: np.ndarray, regions: np.ndarray) -> np.ndarray:
    """[..., region]: ``addr`` lies in the region."""
    a = addr[..., None]
    return (a >= regions[:, 0]) & (a < regions[:, 1])


@dataclass
class _Where:
    """Which of the recorded regions each address lies in: ``first`` (-1: none), and each
    set of regions some address lies in together (they must move alike: a KV cache's past
    and present tensors share their pages, so every address in it is in both)."""

    first: np.ndarray
    together: list[np.ndarray]  # each distinct set of two or more regions, once

    @classmethod
    def of(cls, inside: np.ndarray) -> "_Where":
        first = np.where(inside.any(axis=-1), inside.argmax(axis=-1), -1)
        # the distinct rows of regions, each packed into one value (np.unique over rows of
        # booleans sorts them column by column: 0.3 ms a call, 6,000 calls in a GPT-2
        # generation, whose growing KV caches record most attention nodes anew)
        packed = np.ascontiguousarray(np.packbits(inside[inside.sum(axis=-1) > 1], axis=-1))
        width = packed.shape[-1]
        distinct = np.unique(packed.view(np.dtype((np.void, width))).ravel())
        sets = np.unpackbits(distinct.view(np.uint8).reshape(len(distinct), width), axis=-1,
                             count=inside.shape[-1])
        return cls(first, [np.flatnonzero(row) for row in sets])

    def moves(self, delta: np.ndarray) -> np.ndarray | None:
        """How far each address moves: the delta of its region (0 where in none); None if
        the regions of one address would move it differently."""
        for regions in self.together:
            if (delta[regions] != delta[regions[0]]).any():
                return None
        return np.where(self.first >= 0, delta[self.first], 0)


def _moved_rows(b, start: int, move: np.ndarray) -> np.ndarray:
    rows = b.template_rows(start).copy()
    rows[:, isa.I_OFFSET] += move
    return rows


def _record(ctx: LoweringContext, node: Node, lower) -> _Record | None:
    b = ctx.builder
    names = _tensors(node)
    # outputs without an address yet get one from the lowering, inside its allocation
    n_in = len(node.inputs)
    unplaced = [k >= n_in and t is not None and t not in ctx.address
                for k, t in enumerate(names)]
    regions = _regions(ctx, names, unplaced)
    addr_before, tensors_before = dict(ctx.address), set(ctx.graph.tensors)
    producers_before = dict(ctx.producer_layer)
    span0 = b.span()
    a0 = b.next_free_address
    lower(ctx, node)
    if regions is None:  # an input got its address from this lowering: not copyable
        return None
    span1 = b.span()
    a1 = b.next_free_address
    n = tuple(y - x for x, y in zip(span0, span1))
    L0 = span0[0]
    inputs = {producers_before[t]: k for k, t in enumerate(node.inputs)
              if t and t in producers_before}
    preds = []
    for lid in range(L0, span1[0]):
        row = []
        for p in b.preds_of(lid):
            if p >= L0:
                row.append(("own", p - L0))
            elif p in inputs:
                row.append(("in", inputs[p]))
            else:
                return None
        preds.append(row)
    # scratch space: the block the lowering allocated is one more region
    all_regions = np.concatenate([regions, [[a0, a1]]])
    tiles = b.tiles_of(span0[2], span1[2])
    bases = tiles[:, isa.T_BASE0:]
    base_where = _inside(bases, all_regions)
    # DMA rows whose tile base is no address (an offset, or 0): the row holds the address
    rows = [b.template_rows(int(t)) for t in tiles[:, isa.T_INST_START]]
    row_tile = np.repeat(np.arange(len(tiles)), [len(r) for r in rows])
    flat = np.concatenate(rows) if rows else np.zeros((0, isa.N_INST_COLS), np.int64)
    dma = flat[:, isa.I_OP] <= isa.OP_MVOUT
    slot = flat[:, isa.I_SLOT]
    by_row = dma & ~base_where[row_tile, slot].any(axis=1)
    row_where = _inside(bases[row_tile, slot] + flat[:, isa.I_OFFSET], all_regions)
    row_where &= by_row[:, None]
    if (by_row & ~row_where.any(axis=1)).any():
        return None
    new_tensors = []
    for t in ctx.graph.tensors:
        if t in tensors_before:
            continue
        if not t.startswith(node.name):
            return None
        new_tensors.append((t[len(node.name):], ctx.graph.tensors[t], None, None))
    for t, a in ctx.address.items():
        if addr_before.get(t) == a:
            continue
        if not a0 <= a < a1:
            return None
        if t in names and unplaced[names.index(t)]:
            new_tensors.append((f"#{names.index(t)}", None, a - a0, None))
        elif t in names or not t.startswith(node.name):
            return None
        else:
            new_tensors.append((t[len(node.name):], None, a - a0, None))
    for t, lid in ctx.producer_layer.items():
        if producers_before.get(t) == lid:
            continue
        if lid < L0:
            return None
        if t in names:
            new_tensors.append((f"#{names.index(t)}", None, None, lid - L0))
        elif t.startswith(node.name):
            new_tensors.append((t[len(node.name):], None, None, lid - L0))
        else:
            return None
    for lid in range(L0, span1[0]):
        if not b.layer_info(lid).name.startswith(node.name):
            return None
    row_at = np.concatenate([[0], np.cumsum([len(r) for r in rows], dtype=np.int64)])
    return _Record(node.name, names, unplaced, all_regions, (a0, a1), span0, n, preds,
                   tiles, _Where.of(base_where), _Where.of(row_where), row_tile, row_at,
                   new_tensors)


def _renamed(record, name: str, **changes):
    """A copy of the dataclass instance ``record`` (a layer's or a tensor's info, whose
    fields are plain values) named ``name``, with ``changes``: its fields copied as they
    are, without ``dataclasses.replace``'s call of ``__init__`` (5 us against 1.5, 33,000
    times in a Llama-3-8B step)."""
    new = object.__new__(type(record))
    new.__dict__.update(record.__dict__, name=name, **changes)
    return new


def _replay(ctx: LoweringContext, node: Node, rec: _Record) -> bool:
    """Emit ``rec`` again for ``node``; False (nothing emitted) if that would not be exact."""
    names = _tensors(node)
    if [t is None for t in names] != [t is None for t in rec.tensors]:
        return False
    regions = _regions(ctx, names, rec.unplaced)
    if regions is None:
        return False
    b = ctx.builder
    a0 = b.next_free_address
    new_regions = np.concatenate([regions, [[a0, a0 + rec.alloc[1] - rec.alloc[0]]]])
    delta = new_regions[:, 0] - rec.regions[:, 0]
    used = rec.regions[:, 0] >= 0
    if (delta[used] % PAGE).any():
        return False
    base_move = rec.base_where.moves(delta)
    row_move = rec.row_where.moves(delta)
    if base_move is None or row_move is None:
        return False
    tiles = rec.tiles.copy()
    tiles[:, isa.T_BASE0:] += base_move
    # only the tiles with a row that moves get another template (a Llama attention node:
    # about 7 of its 40 tiles)
    for t in np.unique(rec.row_tile[row_move != 0]).tolist():
        start = int(tiles[t, isa.T_INST_START])
        move = row_move[rec.row_at[t]:rec.row_at[t + 1]]
        tiles[t, isa.T_INST_START] = b.template(
            ("moved", start, move.tobytes()), lambda: _moved_rows(b, start, move))[0]
    producers = [ctx.producer_layer.get(t) if t else None for t in node.inputs]
    L0 = b.n_layers
    preds = []
    for row in rec.preds:
        out = []
        for kind, k in row:
            if kind == "own":
                out.append(L0 + k)
            elif producers[k] is None:
                return False
            else:
                out.append(producers[k])
        preds.append(out)
    # exact: emit
    if rec.alloc[1] > rec.alloc[0]:
        b.allocate(rec.alloc[1] - rec.alloc[0])
    infos = []
    for lid in range(rec.layers[0], rec.layers[0] + rec.n[0]):
        info = b.layer_info(lid)
        infos.append(_renamed(info, node.name + info.name[len(rec.node_name):],
                              fused=list(info.fused)))
    b.copy_span(rec.layers, rec.n, preds, infos, tiles)
    for suffix, info, addr, layer in rec.new_tensors:
        if suffix.startswith("#"):
            name = names[int(suffix[1:])]
        else:
            name = node.name + suffix
        if info is not None:
            ctx.graph.tensors[name] = _renamed(info, name)
        if addr is not None:
            ctx.address[name] = a0 + addr
        if layer is not None:
            ctx.producer_layer[name] = L0 + layer
    return True

