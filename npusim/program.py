"""The Program: a workload lowered into flat integer tables the kernels execute.

Lowering (``npusim.lowering``) emits, per layer, tile *templates* (instruction lists that
are identical for every tile of the same shape) and tiles (a template plus base addresses).
Templates are deduplicated, so memory grows with the number of distinct tile shapes and
tiles, never with simulated cycles.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npusim.kernels import isa


@dataclass
class LayerInfo:
    """What a layer is, for results: one ONNX node or a fused group of nodes."""

    name: str
    op_type: str
    input_shapes: list[tuple[int, ...]]
    output_shape: tuple[int, ...]
    macs: int
    mapping: str  # the tiling used, in ONNXim mapping syntax
    mapping_source: str  # "heuristic" or "file:line"
    fused: list[str] = field(default_factory=list)  # names of nodes folded into this layer
    request: int = 0  # which request (model instance) of the workload it belongs to
    precision: int | None = None  # bytes per element when not the config's (quantized ops)
    weight_bits: int | None = None  # bits per weight element read (GEMM and conv layers)


@dataclass
class Program:
    """Flat int64 tables; column meanings are in ``npusim.kernels.isa``."""

    inst: np.ndarray  # [n_inst, N_INST_COLS]
    tile: np.ndarray  # [n_tiles, N_TILE_COLS]
    group: np.ndarray  # [n_groups, N_GROUP_COLS]
    layer: np.ndarray  # [n_layers, N_LAYER_COLS]
    layer_succ: np.ndarray  # [n_edges] successor layer ids, indexed by L_SUCC_START/LEN
    release_order: np.ndarray  # layers waiting for their release cycle, earliest first
    layers: list[LayerInfo]
    max_template_len: int
    warnings: list[str] = field(default_factory=list)  # shown to the user with the result

    @property
    def n_tiles(self) -> int:
        return int(self.tile.shape[0])

    def edge_sources(self) -> np.ndarray:
        """The layer each entry of ``layer_succ`` comes from: ``edge_sources()[layer_succ ==
        x]`` are the predecessors of layer x."""
        return np.repeat(np.arange(self.layer.shape[0]), self.layer[:, isa.L_SUCC_LEN])

    @property
    def n_requests(self) -> int:
        """Requests (rows of the scheduler's request table) the layers are tagged with."""
        return int(self.layer[:, isa.L_REQUEST].max()) + 1 if self.layer.shape[0] else 1


class Instr:
    """Builders for one instruction row each (keyword names follow the ISA columns)."""

    @staticmethod
    def _row(op: int, unit: int, deps: tuple[int, ...]) -> np.ndarray:
        row = np.zeros(isa.N_INST_COLS, dtype=np.int64)
        row[isa.I_OP] = op
        row[isa.I_UNIT] = unit
        row[isa.I_DEP0] = deps[0] if len(deps) > 0 else -1
        row[isa.I_DEP1] = deps[1] if len(deps) > 1 else -1
        row[isa.I_SEGS] = 1
        row[isa.I_PASSES] = 1
        return row

    @staticmethod
    def dma(load: bool, slot: int, offset: int, n_outer: int, outer_stride: int,
            n_inner: int, inner_stride: int, run_bytes: int, to_acc: bool = False,
            deps: tuple[int, ...] = ()) -> np.ndarray:
        """MVIN (load=True) or MVOUT of ``n_outer * n_inner`` runs of ``run_bytes``."""
        op, unit = (isa.OP_MVIN, isa.UNIT_LOAD) if load else (isa.OP_MVOUT, isa.UNIT_STORE)
        row = Instr._row(op, unit, deps)
        row[isa.I_SLOT] = slot
        row[isa.I_OFFSET] = offset
        row[isa.I_N_OUTER] = max(1, n_outer)
        row[isa.I_OUTER_STRIDE] = outer_stride
        row[isa.I_N_INNER] = max(1, n_inner)
        row[isa.I_INNER_STRIDE] = inner_stride
        row[isa.I_RUN_BYTES] = run_bytes
        row[isa.I_TO_ACC] = int(to_acc)
        return row

    @staticmethod
    def preload(deps: tuple[int, ...] = (), drain: bool = False) -> np.ndarray:
        row = Instr._row(isa.OP_PRELOAD, isa.UNIT_SYSTOLIC, deps)
        row[isa.I_DRAIN] = int(drain)
        return row

    @staticmethod
    def gemm(rows: int, segs: int, macs: int, deps: tuple[int, ...] = ()) -> np.ndarray:
        row = Instr._row(isa.OP_GEMM, isa.UNIT_SYSTOLIC, deps)
        row[isa.I_ROWS] = rows
        row[isa.I_SEGS] = segs
        row[isa.I_MACS] = macs
        return row

    @staticmethod
    def vector(op_name: str, elements: int, passes: int = 1,
               deps: tuple[int, ...] = ()) -> np.ndarray:
        row = Instr._row(isa.OP_VECTOR, isa.UNIT_VECTOR, deps)
        row[isa.I_VOP] = isa.VECTOR_OPS.index(op_name)
        row[isa.I_ELEMENTS] = elements
        row[isa.I_PASSES] = passes
        row[isa.I_MACS] = elements * passes
        return row

    @staticmethod
    def im2col(elements: int, deps: tuple[int, ...] = ()) -> np.ndarray:
        row = Instr._row(isa.OP_IM2COL, isa.UNIT_VECTOR, deps)
        row[isa.I_ELEMENTS] = elements
        return row


TILES_CHECKED_EVERY = 1 << 20  # tiles between two checks that their table still fits


class ProgramBuilder:
    """Collects templates, tiles, groups and layers, then freezes them into a Program."""

    def __init__(self) -> None:
        self._inst: list[np.ndarray] = []
        self._n_inst = 0
        self._templates: dict[object, tuple[int, int]] = {}
        self._rows_at: dict[int, np.ndarray] = {}  # first row -> the template's rows
        self._by_rows: dict[bytes, tuple[int, int]] = {}  # the rows' bytes -> (first, n)
        self._tiles: list[list[int]] = []
        self._groups: list[list[int]] = []
        self._layers: list[list[int]] = []
        self._layer_info: list[LayerInfo] = []
        self._preds: list[list[int]] = []
        self._open_layer: int | None = None
        self._open_group: int | None = None
        self.max_template_len = 0
        self.request = 0  # request tag given to the layers begun from now on
        self.release = 0  # core cycle before which root layers begun from now on wait
        self.next_free_address = 4096  # DRAM bump allocator shared by every model
        self._frozen = _Frozen()  # what earlier builds already turned into arrays

    PAGE = 4096  # allocations start on page boundaries in the flat DRAM address space

    def allocate(self, nbytes: int) -> int:
        """A DRAM base address for ``nbytes`` (weights, activations, KV caches)."""
        addr = self.next_free_address
        self.next_free_address += -(-max(nbytes, 1) // self.PAGE) * self.PAGE
        return addr

    # templates --------------------------------------------------------------------
    def template(self, key: object, build) -> tuple[int, int]:
        """Rows of the template named ``key``, building them with ``build()`` (a list of
        rows, or a table) once. Templates of other keys with the same rows share them: the
        keys name a layer's tiles, and the copies of one model in a request file (``count``)
        had one instruction table each (10,000 copies of tiny_cnn on ``mobile``: about 14 GB)."""
        if key not in self._templates:
            rows = build()
            if len(rows) == 0:
                raise ValueError("a tile template needs at least one instruction")
            table = np.ascontiguousarray(rows if isinstance(rows, np.ndarray)
                                         else np.stack(rows), dtype=np.int64)
            content = table.tobytes()
            same = self._by_rows.get(content)
            if same is None:
                same = self._by_rows[content] = (self._n_inst, len(table))
                self._rows_at[self._n_inst] = table
                self._inst.append(table)
                self._n_inst += len(table)
                self.max_template_len = max(self.max_template_len, len(table))
            self._templates[key] = same
        return self._templates[key]

    # layers, groups, tiles ---------------------------------------------------------
    def begin_layer(self, info: LayerInfo, preds: list[int]) -> int:
        lid = len(self._layers)
        release = self.release if not preds else 0
        self._layers.append([len(self._groups), 0, len(set(preds)), 0, 0, release,
                             self.request])
        info.request = self.request
        self._layer_info.append(info)
        self._preds.append(sorted(set(preds)))
        self._open_layer = lid
        return lid

    @property
    def n_layers(self) -> int:
        return len(self._layers)

    def layer_info(self, layer: int) -> LayerInfo:
        return self._layer_info[layer]

    def prefix_names(self, first: int, prefix: str) -> None:
        """Prefix the names of layers ``first``.. (to tell several requests apart)."""
        for info in self._layer_info[first:]:
            info.name = prefix + info.name

    def begin_group(self) -> None:
        assert self._open_layer is not None
        self._groups.append([len(self._tiles), 0, self._open_layer])
        self._layers[self._open_layer][isa.L_GROUP_LEN] += 1
        self._open_group = len(self._groups) - 1

    def add_tile(self, template: tuple[int, int], bases: tuple[int, ...]) -> None:
        assert self._open_group is not None
        row = [template[0], template[1], self._open_layer, self._open_group]
        row += list(bases) + [0] * (isa.N_TILE_SLOTS - len(bases))
        self._tiles.append(row)
        self._groups[self._open_group][isa.G_TILE_LEN] += 1
        if len(self._tiles) % TILES_CHECKED_EVERY == 0:
            self._check_room()

    def _check_room(self) -> None:
        """A MemoryError naming the layer when the tiles so far could not be made into the
        program's table (and the run's copy of it) in the memory still free: a workload
        of too many tiles (ResNet-18 at batch 1,000,000) otherwise grew a list of rows
        until the out-of-memory killer ended it, 24 GB later and without a word."""
        from npusim.state import ensure_free

        n, g = len(self._tiles), len(self._groups)
        # their tile and group tables, twice (the program's arrays, and the run's state
        # and the rows being converted beside them)
        ensure_free(2 * 8 * (n * isa.N_TILE_COLS + g * isa.N_GROUP_COLS),
                    f"the program's {n:,} tiles so far (up to layer "
                    f"'{self._layer_info[self._open_layer].name}')")

    # copies (npusim.lowering.replay) -----------------------------------------------
    def span(self) -> tuple[int, int, int]:
        """Layers, groups and tiles emitted so far."""
        return len(self._layers), len(self._groups), len(self._tiles)

    def preds_of(self, layer: int) -> list[int]:
        return self._preds[layer]

    def tiles_of(self, first: int, end: int) -> np.ndarray:
        """Rows of the tile table from ``first`` to ``end``."""
        return np.array(self._tiles[first:end], np.int64).reshape(-1, isa.N_TILE_COLS)

    def template_rows(self, start: int) -> np.ndarray:
        """The instruction rows of the template that starts at row ``start``."""
        return self._rows_at[start]

    def copy_span(self, first: tuple[int, int, int], n: tuple[int, int, int],
                  preds: list[list[int]], infos: list[LayerInfo], tiles: np.ndarray) -> None:
        """Append a copy of ``n`` layers, groups and tiles emitted from ``first`` on, with
        the layers' predecessors and infos, and the tiles' templates and base addresses
        (columns up to T_LAYER and from T_BASE0 of ``tiles``)."""
        L0, G0, T0 = self.span()
        dl, dg, dt = L0 - first[0], G0 - first[1], T0 - first[2]
        for k, (info, p) in enumerate(zip(infos, preds)):
            row = list(self._layers[first[0] + k])
            row[isa.L_GROUP_START] += dg
            row[isa.L_N_PREDS] = len(set(p))
            row[isa.L_RELEASE] = self.release if not p else 0
            row[isa.L_REQUEST] = self.request
            info.request = self.request
            self._layers.append(row)
            self._layer_info.append(info)
            self._preds.append(sorted(set(p)))
        for g in self._groups[first[1]:first[1] + n[1]]:
            self._groups.append([g[0] + dt, g[1], g[2] + dl])
        for t, new in zip(self._tiles[first[2]:first[2] + n[2]], tiles.tolist()):
            self._tiles.append(new[:isa.T_LAYER] + [t[isa.T_LAYER] + dl, t[isa.T_GROUP] + dg]
                               + new[isa.T_BASE0:])
        if n[0]:
            self._open_layer = len(self._layers) - 1
        if n[1]:
            self._open_group = len(self._groups) - 1

    def build(self) -> Program:
        """The Program of everything emitted so far. An LLM server builds again after every
        step it appends, so the rows an earlier build froze are not converted again (only
        the open layer and group can still change): a build costs the new rows, not the
        whole program (GPT-2 generating 256 tokens spent 49 of 205 profiled CPU s rebuilding)."""
        f = self._frozen
        inst = f.extend_inst(self._inst)
        tile = f.tile.extend(self._tiles)
        group = f.group.extend(self._groups)
        layer = f.layer.extend(self._layers)
        src, dst = f.extend_edges(self._preds)
        # successors: each layer's in ascending order, the layers one after the other
        order = np.argsort(src, kind="stable")
        n_succ = np.bincount(src, minlength=layer.shape[0])
        layer[:, isa.L_SUCC_LEN] = n_succ
        layer[:, isa.L_SUCC_START] = np.cumsum(n_succ) - n_succ
        waiting = np.flatnonzero((layer[:, isa.L_RELEASE] > 0) & (f.n_preds == 0))
        waiting = waiting[np.lexsort((waiting, layer[waiting, isa.L_RELEASE]))]
        return Program(
            inst=inst,
            tile=tile,
            group=group,
            layer=layer,
            layer_succ=np.ascontiguousarray(dst[order]),
            release_order=waiting.astype(np.int64),
            layers=self._layer_info,
            max_template_len=max(1, self.max_template_len),
        )


class _Rows:
    """A list of table rows as an array, converting only the rows added since the last call
    (the last row stays open: the builder may still add to the open layer or group)."""

    def __init__(self, cols: int) -> None:
        self.cols = cols
        self.frozen = np.zeros((0, cols), np.int64)

    def extend(self, rows: list[list[int]]) -> np.ndarray:
        n = len(self.frozen)
        keep = max(n, len(rows) - 1)
        if keep > n:
            self.frozen = np.concatenate([self.frozen, self._array(rows[n:keep])])
        return np.concatenate([self.frozen, self._array(rows[keep:])])

    def _array(self, rows: list[list[int]]) -> np.ndarray:
        return np.array(rows, dtype=np.int64).reshape(-1, self.cols)


class _Frozen:
    """The parts of a ProgramBuilder's tables that earlier builds turned into arrays."""

    def __init__(self) -> None:
        self.tile = _Rows(isa.N_TILE_COLS)
        self.group = _Rows(isa.N_GROUP_COLS)
        self.layer = _Rows(isa.N_LAYER_COLS)
        self.inst = np.zeros((0, isa.N_INST_COLS), np.int64)  # rows beyond n_inst: room
        self.n_inst = 0
        self.templates = 0
        self.src = np.zeros(0, np.int64)
        self.dst = np.zeros(0, np.int64)
        self.n_preds = np.zeros(0, np.int64)

    def extend_inst(self, tables: list[np.ndarray]) -> np.ndarray:
        """The instruction table: a view of a buffer that doubles when full, as templates
        only ever get appended (each build would otherwise copy every row again)."""
        for table in tables[self.templates:]:
            n = self.n_inst + len(table)
            if n > len(self.inst):
                grown = np.zeros((max(n, 2 * len(self.inst)), isa.N_INST_COLS), np.int64)
                grown[:self.n_inst] = self.inst[:self.n_inst]
                self.inst = grown
            self.inst[self.n_inst:n] = table
            self.n_inst = n
        self.templates = len(tables)
        return self.inst[:self.n_inst]

    def extend_edges(self, preds: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """(predecessor, layer) of every dependency, in the order of the layers."""
        n = len(self.n_preds)
        if len(preds) > n:
            new = preds[n:]
            counts = np.array([len(p) for p in new], np.int64)
            self.src = np.concatenate([self.src, np.array([x for p in new for x in p],
                                                          np.int64)])
            self.dst = np.concatenate([self.dst, np.repeat(np.arange(n, len(preds)), counts)])
            self.n_preds = np.concatenate([self.n_preds, counts])
        return self.src, self.dst
