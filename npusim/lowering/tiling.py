"""Choosing tile sizes: from an ONNXim mapping line, or by a small cost-model search.

A tile must fit one half of the scratchpad (its inputs and weights) and one half of the
accumulator (its outputs, 4 bytes per element), because each core holds two tiles at once.
Occupancy is counted as the array's memories hold it (Gemmini's ``tiled_conv_total_spad_rows``
and ``LoopMatmul``): a scratchpad row holds ``height`` reduction elements (an input pixel's
channels, a GEMM input row's reduction slice) or ``width`` output columns (a weight row),
and an accumulator row ``width`` columns, so a partial block occupies a whole row.

The heuristic searches tile shapes aligned to the array and keeps the one with the lowest
estimated time, counting array occupancy (the loop nest of ``lowering/array.py`` timed by
the rule of ``kernels/systolic.py``), memory traffic and how many cores get work. It
evaluates every candidate at once, as numpy arrays (the occupancy and estimate functions
work elementwise on arrays of tile sizes), and remembers each answer: the choosers are
pure functions of the budget and the shape, and networks repeat their layer shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import product
from math import ceil, lcm, prod

import numpy as np

from npusim.config import NpuConfig
from npusim.errors import NpusimError
from npusim.kernels.array_rows import gemm_stream_cycles, last_chunk_cycles

ACC_BYTES = 4  # accumulator elements are 32-bit (int32 / fp32), whatever the input precision


@dataclass(frozen=True)
class WeightFormat:
    """A weight operand stored narrower than the array computes: ``bits`` per element, and
    per ``block`` reduction elements of one output column a header of ``header_bits`` (the
    block's scale at the layer's precision, and its zero point at the stored width).

    Layout (a deployment's: a compiler lays a constant out in the order its tiles load it,
    and low-bit formats such as GGUF's keep each block's scale with the block): per tile of
    output columns, per reduction chunk the tile loads, the chunk's slice of each column,
    whose blocks each hold their header then their ``block`` packed elements. So every
    weight load is one contiguous run that carries the scales and zero points of the
    blocks it holds, and each weight and scale byte moves once per use. ``block`` 0: no
    per-column header (a per-tensor scale sits in a register).

    Dequantization (the one cost rule, here and in the README): free. Hardware that takes
    low-bit weights widens them between the scratchpad and the array (a weight decoder in
    front of the array, as Arm Ethos-U's and Intel's NPU weight decompression): a PRELOAD
    reads the block's rows at the stored width, and per array column one subtract of the
    zero point and one multiply by the block's scale feed the array at its width, in the
    pipeline of the preload's one row per cycle. So the weight moves and is held at
    ``bits``, and the array time is the float GEMM's. A gathered embedding row
    (GatherBlockQuantized, one column of this layout) never reaches the array: the vector
    unit dequantizes it (``vector.lower_gather_block_quantized``)."""

    bits: int
    block: int = 0
    header_bits: int = 0

    def position_bits(self, c):
        """Bit offset of reduction element ``c`` from its column's start (a block's first
        element: the block's header). Elementwise over arrays."""
        if not self.block:
            return c * self.bits
        whole, rest = c // self.block, c % self.block
        return (whole * (self.header_bits + self.block * self.bits)
                + np.where(rest > 0, self.header_bits + rest * self.bits, 0))

    def span_bytes(self, lo: int, hi: int) -> tuple[int, int]:
        """(byte offset, bytes) of reduction elements ``lo`` to ``hi`` of one column, with
        the headers of the blocks that start among them."""
        start = int(self.position_bits(lo)) // 8
        return start, -(-int(self.position_bits(hi)) // 8) - start

    def column_bytes(self, c):
        """Bytes ``c`` reduction elements of one column hold from a block's start (whole
        bytes). Elementwise over arrays."""
        return -(-self.position_bits(c) // 8)


@dataclass(frozen=True)
class Budget:
    """Per-tile capacity and the machine numbers the cost model needs."""

    spad_half: int
    acc_half: int
    height: int
    width: int
    min_cycles: int
    precision: int
    cores: int
    load_bytes_per_cycle: float  # DRAM bytes a core can load per core cycle
    request_bytes: int  # DMA granule: a shorter run still moves a whole request
    weight: WeightFormat | None = None  # None: weights at ``precision`` like the rest

    def run_bytes(self, elements: int) -> int:
        """DRAM bytes one contiguous run of ``elements`` costs, in whole requests."""
        return self.requests_of(elements * self.precision)

    def requests_of(self, nbytes):
        """``nbytes`` (one contiguous run) in whole requests, as bytes."""
        return -(-nbytes // self.request_bytes) * self.request_bytes

    def weight_bytes(self, c):
        """Bytes one output column of ``c`` reduction elements of weights takes (in DRAM
        and in the scratchpad). Elementwise over arrays."""
        return c * self.precision if self.weight is None else self.weight.column_bytes(c)

    @staticmethod
    def of(cfg: NpuConfig) -> "Budget":
        core = cfg.core
        if cfg.memory.type == "ideal":
            per_core = float(cfg.dma.request_bytes)  # one request per cycle
        else:
            total = cfg.memory.peak_bytes_per_s / (cfg.core_freq_mhz * 1e6)
            per_core = min(float(cfg.dma.request_bytes), total / cfg.num_cores)
        return Budget(core.spad_bytes // 2, core.accum_bytes // 2, core.systolic.height,
                      core.systolic.width, core.systolic.min_gemm_cycles, cfg.precision,
                      cfg.num_cores, per_core, cfg.dma.request_bytes)


def padded(n: int, to: int) -> int:
    """``n`` rounded up to a whole number of ``to``-wide memory rows."""
    return -(-n // to) * to


def block_cycles(b: Budget, rows: int, segs: int = 1) -> int:
    """Array cycles of one weight block streamed by ``segs`` segments of ``rows`` rows: the
    stream, plus what the next block's preload (``height`` cycles, fed beside the last
    chunk) adds when that chunk is shorter (``kernels/systolic.py``)."""
    stream = gemm_stream_cycles(rows, segs, b.height, b.min_cycles)
    return stream + max(0, b.height - last_chunk_cycles(rows, b.height, b.min_cycles))


def _aligned_options(total: int, step: int) -> list[int]:
    """Tile sizes to try: multiples of ``step`` (powers of two of it) and the whole."""
    opts = {total}
    k = 1
    while k * step < total:
        opts.add(k * step)
        k *= 2
    # also the near-even splits, which avoid a tiny last tile
    for parts in (2, 3, 4, 6, 8, 12, 16):
        size = ceil(ceil(total / parts) / step) * step
        if 0 < size < total:
            opts.add(size)
    return sorted(opts)


def _reduction_tile(total: int, c_max, h: int, fits):
    """The reduction tile: all of it, else the most whole ``h``-row blocks, else what fits;
    0 where nothing fits. Elementwise over an array of candidates (``c_max``, and ``fits``
    taking an array of reduction sizes)."""
    chosen = np.zeros(np.shape(c_max), np.int64)
    for c in (total, c_max // h * h, c_max):
        take = (chosen == 0) & (0 < c) & (c <= total) & fits(c)
        chosen = np.where(take, c, chosen)
    return chosen


def _ceil_div(n, d):
    return -(-n // d)


def _block_cycles_each(b: Budget, rows, segs) -> np.ndarray:
    """:func:`block_cycles` of every (rows, segs) pair of two arrays: the one rule, run once
    per distinct pair."""
    rows, segs = np.broadcast_arrays(rows, segs)
    span = int(segs.max()) + 1
    pairs, where = np.unique(rows * span + segs, return_inverse=True)
    cycles = [block_cycles(b, r, n) for r, n in zip(*(pairs // span, pairs % span))]
    return np.array(cycles, np.int64)[where.reshape(rows.shape)]


def _best(est, volume) -> int:
    """The candidate with the lowest estimate; on a tie the larger tile, then the first."""
    return int(np.lexsort((np.arange(len(est)), -volume, est))[0])


@dataclass(frozen=True)
class GemmTile:
    n: int
    c: int
    m: int

    def mapping(self, N: int, C: int, M: int) -> str:
        return (f"[T] N{N} C{C} M{M} - [O] N{ceil(N / self.n)} C{ceil(C / self.c)} "
                f"M{ceil(M / self.m)} - [I] N{self.n} C{self.c} M{self.m}")


def gemm_occupancy(b: Budget, n, c, m):
    """(scratchpad bytes, accumulator bytes) of a GEMM tile: ``n`` input rows of ``c`` (in
    rows of ``height``) and ``c`` weight rows of ``m`` columns (in rows of ``width``; at
    the weight's own width, ``Budget.weight``), and ``n`` accumulator rows of ``m``.
    Elementwise over arrays of candidates."""
    spad = n * padded(c, b.height) * b.precision + padded(m, b.width) * b.weight_bytes(c)
    return spad, n * padded(m, b.width) * ACC_BYTES


def _within(b: Budget, spad, acc):
    """Whether a tile's occupancy fits half the scratchpad and half the accumulator."""
    return (spad <= b.spad_half) & (acc <= b.acc_half)


def gemm_tile_fits(b: Budget, n: int, c: int, m: int) -> tuple[bool, str]:
    spad, acc = gemm_occupancy(b, n, c, m)
    if _within(b, spad, acc):
        return True, ""
    if spad > b.spad_half:
        return False, (f"inputs {n}x{c} and weights {c}x{m} need {spad} B, more than half "
                       f"the scratchpad ({b.spad_half} B)")
    return False, (f"outputs {n}x{m} need {acc} B of accumulator, more than half of it "
                   f"({b.acc_half} B)")


@lru_cache(maxsize=4096)
def choose_gemm_tile(b: Budget, N: int, C: int, M: int, batch: int = 1,
                     w_trans: bool = False) -> GemmTile:
    """The GEMM tile (n, c, m) with the lowest estimated time for Y[N,M] = X[N,C] W[C,M]
    (``w_trans``: W stored M x C, as Gemm's transB and attention's K).

    Every candidate (row tile, then column tile, each from :func:`_aligned_options`) is
    evaluated at once, as arrays; with W transposed each also with its reduction tile cut
    to whole DMA requests, as a column's run then starts and ends on a request boundary.
    A pure function of its arguments: a shape met again is looked up."""
    grid = np.meshgrid(np.array(_aligned_options(N, b.height), np.int64),
                       np.array(_aligned_options(M, b.width), np.int64), indexing="ij")
    n, m = (g.ravel() for g in grid)
    c_max = _reduction_bound(b, n * b.precision, padded(m, b.width))
    c = _reduction_tile(C, c_max, b.height, lambda c: _within(b, *gemm_occupancy(b, n, c, m)))
    ok = np.flatnonzero(c > 0)  # (a tile whose accumulator rows do not fit has no c either)
    if not len(ok):  # the smallest tile: one array block of each operand
        n0, c0, m0 = min(N, b.height), min(C, b.height), min(M, b.width)
        spad, acc = (int(v) for v in gemm_occupancy(b, n0, c0, m0))
        raise NpusimError(
            f"no GEMM tile fits: even the smallest ({n0}x{c0} inputs, {c0}x{m0} weights, "
            f"{n0}x{m0} outputs) needs {spad} B of scratchpad and {acc} B of accumulator, "
            f"more than the core's halves of {b.spad_half} B and {b.acc_half} B; raise "
            f"core.spad_kib / core.accum_kib")
    n, m, c = n[ok], m[ok], c[ok]
    if w_trans and b.weight is None:
        step = lcm(b.height, max(1, b.request_bytes // b.precision))
        whole = c // step * step
        more = (whole > 0) & (whole < c)
        n, m, c = (np.concatenate(pair) for pair in ((n, n[more]), (m, m[more]),
                                                      (c, whole[more])))
    best = _best(_gemm_estimate(b, N, C, M, batch, n, c, m, w_trans), n * m * c)
    return GemmTile(int(n[best]), int(c[best]), int(m[best]))


def _reduction_bound(b: Budget, input_bytes, weight_columns):
    """The most reduction elements a tile can hold when each costs ``input_bytes`` of
    inputs and ``weight_columns`` weight elements (their headers spread evenly): exact for
    weights at ``precision``, a bound the chooser then checks (``_reduction_tile``)."""
    if b.weight is None:
        return b.spad_half // (input_bytes + weight_columns * b.precision)
    w = b.weight
    per_block = w.block or 1
    bits = w.bits * per_block + w.header_bits
    return b.spad_half * 8 * per_block // (input_bytes * 8 * per_block + weight_columns * bits)


def _gemm_estimate(b: Budget, N: int, C: int, M: int, batch: int, n, c, m,
                   w_trans: bool = False) -> np.ndarray:
    """Estimated cycles of the whole GEMM tiled by (n, c, m) (arrays of candidate sizes):
    array time, memory traffic in whole requests and each tile's pipeline fill, spread
    over the cores. W stored M x C (``w_trans``) is read as one run per output column and
    reduction tile; a run that does not start on a request boundary touches one request
    more."""
    tn, tm, tc = _ceil_div(N, n), _ceil_div(M, m), _ceil_div(C, c)
    groups = batch * tn * tm
    par = np.minimum(b.cores, groups)
    c_last = C - (tc - 1) * c
    # array cycles of one group: every weight block of its C x m slice streams n rows
    blocks = ((tc - 1) * _ceil_div(c, b.height) + _ceil_div(c_last, b.height)) \
        * _ceil_div(m, b.width)
    compute = groups * blocks * _block_cycles_each(b, n, 1) / par
    # rows of X (c long) and W (m long) and of the output, in whole requests
    x_rows = n * ((tc - 1) * b.run_bytes(c) + b.run_bytes(c_last))
    if b.weight is None and w_trans:
        q = b.request_bytes
        pitch_aligned = C * b.precision % q == 0  # each column's first run starts aligned
        first = 0 if pitch_aligned else q
        later = np.where(pitch_aligned & (c * b.precision % q == 0), 0, q)
        column = np.where(tc == 1, b.run_bytes(C) + first,
                          b.run_bytes(c) + first + (tc - 2) * (b.run_bytes(c) + later)
                          + b.run_bytes(c_last) + later)
        w_rows = m * column
    elif b.weight is None:
        w_rows = C * b.run_bytes(m)
    else:  # one run per reduction tile (WeightFormat's layout)
        w_rows = ((tc - 1) * b.requests_of(m * b.weight_bytes(c))
                  + b.requests_of(m * b.weight_bytes(c_last)))
    traffic = groups * (x_rows + w_rows) + batch * N * tm * b.run_bytes(m)
    memory = traffic / (b.load_bytes_per_cycle * par)
    fill = b.width + b.height + b.height  # pipeline fill and drain of each tile
    return np.maximum(compute, memory) + fill * groups * tc / par


@dataclass(frozen=True)
class ConvShape:
    """A convolution's loop bounds, per group: ``N`` images, ``C`` input and ``M`` output
    channels of each of ``groups`` groups, and per spatial dim (1 to 3 of them, outermost
    first) the output extent, kernel, stride and dilation, and the input extent (empty:
    unbounded)."""

    N: int
    C: int
    M: int
    groups: int
    out: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    inputs: tuple[int, ...] = ()

    @property
    def kernel_positions(self) -> int:
        return prod(self.kernel)

    def window(self, d: int, t: int) -> int:
        """Input positions along dim ``d`` a tile of ``t`` outputs holds: with a kernel of
        one along ``d`` the DMA walks the input with the stride and loads only the ``t``
        positions used (Gemmini's ``downsample`` loads); otherwise the dense window, of at
        most the input's extent (padding is never loaded: a dilated window wider than a
        small feature map, as in DeepLab's atrous pyramid, holds only the map)."""
        if self.kernel[d] == 1:
            return t
        dense = self.span(d, t)
        return np.minimum(dense, self.inputs[d]) if self.inputs else dense

    def span(self, d: int, t: int) -> int:
        """Input positions from the first to the last a tile of ``t`` outputs reads along
        dim ``d`` (padding included)."""
        return (t - 1) * self.strides[d] + (self.kernel[d] - 1) * self.dilations[d] + 1


@dataclass(frozen=True)
class ConvTile:
    out: tuple[int, ...]  # output positions per spatial dim
    c: int  # input channels (per group)
    m: int  # output channels (per group)

    def mapping(self, s: ConvShape) -> str:
        """The tile in ONNXim's mapping syntax (P output rows, Q output columns, S/R the
        kernel's); a 3-D tile, which that syntax cannot state, as plain words."""
        C, M = s.C * s.groups, s.M * s.groups
        if len(s.out) == 3:
            return (f"3-D tile of {'x'.join(map(str, self.out))} outputs of "
                    f"{'x'.join(map(str, s.out))}, C{self.c} of {C}, M{self.m} of {M}")
        P, Q = ((1,) + s.out)[-2:]
        S, R = ((1,) + s.kernel)[-2:]
        p, q = ((1,) + self.out)[-2:]
        return (f"[T] N{s.N} C{C} M{M} P{P} Q{Q} S{S} R{R} - [O] N{s.N} C{ceil(s.C / self.c)} "
                f"M{ceil(s.M / self.m)} P{ceil(P / p)} Q{ceil(Q / q)} S1 R1 - "
                f"[I] N1 C{self.c} M{self.m} P{p} Q{q} S{S} R{R}")


def conv_occupancy(b: Budget, s: ConvShape, t: ConvTile) -> tuple[int, int, int]:
    """(input pixels held, scratchpad bytes, accumulator bytes) of a tile; of each candidate
    when the tile's sizes are arrays of candidates (the chooser's use)."""
    pixels = prod(s.window(d, n) for d, n in enumerate(t.out))
    spad = (pixels * padded(t.c, b.height) * b.precision
            + padded(t.m, b.width) * b.weight_bytes(s.kernel_positions * t.c))
    acc = prod(t.out) * padded(t.m, b.width) * ACC_BYTES
    return pixels, spad, acc


def conv_tile_fits(b: Budget, s: ConvShape, t: ConvTile) -> tuple[bool, str]:
    pixels, spad, acc = conv_occupancy(b, s, t)
    if _within(b, spad, acc):
        return True, ""
    if spad > b.spad_half:
        kernel = "x".join(map(str, s.kernel))
        return False, (f"{pixels} input pixels of {t.c} channels and weights "
                       f"{t.m}x{t.c}x{kernel} need {spad} B, more than half the scratchpad "
                       f"({b.spad_half} B)")
    return False, (f"outputs {'x'.join(map(str, t.out))}x{t.m} need {acc} B of "
                   f"accumulator, more than half of it ({b.acc_half} B)")


def _splits(total: int, size):
    """(tile size, how many) of cutting ``total`` into tiles of ``size``: the whole tiles,
    then the rest (how many: 0 when there is none). Elementwise over an array of sizes."""
    full, rest = total // size, total % size
    return [(size, full), (rest, (rest > 0) * 1)]


def _spatial_options(total: int) -> list[int]:
    return _aligned_options(total, 1) if total <= 64 else _aligned_options(total, 8)


@lru_cache(maxsize=4096)
def choose_conv_tile(b: Budget, s: ConvShape) -> ConvTile:
    """Output box and channel tile of a (per-group) convolution with the lowest estimated
    time: every tile runs the loop nest of ``conv.py`` (output-channel blocks, kernel
    positions, channel blocks; each block streams the tile's output rows).

    Every candidate (output-channel tile, then output box, each dim's sizes from
    :func:`_aligned_options`) is evaluated at once, as arrays; ties go to the larger tile,
    then to the first candidate in that order. A pure function of its arguments, so a
    layer shape met again (ResNet's repeated blocks, a sweep's other points) is looked up.
    """
    K = s.kernel_positions
    grid = np.meshgrid(np.array(_aligned_options(s.M, b.width), np.int64),
                       *(np.array(_spatial_options(o), np.int64) for o in s.out),
                       indexing="ij")
    m, *out = (g.ravel() for g in grid)
    pixels, _, acc = conv_occupancy(b, s, ConvTile(tuple(out), s.C, m))
    c_max = _reduction_bound(b, pixels * b.precision, K * padded(m, b.width))

    def fits(c):
        return _within(b, *conv_occupancy(b, s, ConvTile(tuple(out), c, m))[1:])

    c = _reduction_tile(s.C, c_max, b.height, fits)
    ok = np.flatnonzero((acc <= b.acc_half) & (c > 0))
    if not len(ok):
        raise NpusimError(
            f"no convolution tile fits: one output pixel of {min(s.M, b.width)} channels with "
            f"its {'x'.join(map(str, s.kernel))} window does not fit half the scratchpad "
            f"({b.spad_half} B) and accumulator ({b.acc_half} B); raise core.spad_kib / "
            f"core.accum_kib")
    tiles = ConvTile(tuple(o[ok] for o in out), c[ok], m[ok])
    est = _conv_estimate(b, s, tiles, pixels[ok])
    best = _best(est, prod(tiles.out) * tiles.m * tiles.c)
    return ConvTile(tuple(int(o[best]) for o in tiles.out), int(tiles.c[best]),
                    int(tiles.m[best]))


def _conv_estimate(b: Budget, s: ConvShape, t: ConvTile, pixels) -> np.ndarray:
    """Estimated cycles of the whole convolution tiled by ``t`` (arrays of candidate sizes):
    array time per tile summed exactly over the edge tiles, memory traffic, pipeline fill
    per tile, spread over cores."""
    K = s.kernel_positions
    c_tiles = _splits(s.C, t.c)
    m_tiles = _splits(s.M, t.m)
    # channel blocks of one output tile's reduction, and output-column blocks
    c_blocks = sum(_ceil_div(c, b.height) * n for c, n in c_tiles)
    m_blocks = sum(_ceil_div(m, b.width) * n for m, n in m_tiles)
    tc = sum(n for _, n in c_tiles)
    # the edge tiles: each combination of whole and rest tiles along the spatial dims
    boxes = list(product(*(_splits(o, n) for o, n in zip(s.out, t.out))))
    count = [prod(n for _, n in box) for box in boxes]
    # a block streams the box's last dim once per segment: per position of the other dims
    streamed = [box[-1][0] for box in boxes]
    segs = [prod(size for size, _ in box[:-1]) * np.ones_like(t.m) for box in boxes]
    per_block = _block_cycles_each(b, np.stack(streamed), np.stack(segs))
    compute = sum(n * per_block[i] for i, n in enumerate(count)) * m_blocks * K * c_blocks
    n_out_tiles = sum(count)
    groups = s.N * s.groups * n_out_tiles * sum(n for _, n in m_tiles)
    compute = compute * (s.N * s.groups)
    par = np.minimum(b.cores, groups)
    # per tile: the input window of each channel tile, the weights, the output
    cols = s.window(len(t.out) - 1, t.out[-1])
    rows = pixels // cols
    whole_rows = s.kernel[-1] > 1  # a full-depth window row is one contiguous run
    window = rows * sum(n * np.where(whole_rows & (c == s.C), b.run_bytes(cols * c),
                                     cols * b.run_bytes(c)) for c, n in c_tiles)
    weights = t.m * sum(n * b.run_bytes(c * K) for c, n in c_tiles)
    output = prod(t.out) * b.run_bytes(t.m)
    memory = groups * (window + weights + output) / (b.load_bytes_per_cycle * par)
    fill = b.width + 2 * b.height
    return np.maximum(compute / par, memory) + fill * groups * tc / par
