"""Choosing tile sizes: from an ONNXim mapping line, or by a small cost-model search.

A tile must fit one half of the scratchpad (its inputs and weights) and one half of the
accumulator (its outputs, 4 bytes per element), because each core holds two tiles at once.
Occupancy is counted as the array's memories hold it (Gemmini's ``tiled_conv_total_spad_rows``
and ``LoopMatmul``): a scratchpad row holds ``height`` reduction elements (an input pixel's
channels, a GEMM input row's reduction slice) or ``width`` output columns (a weight row),
and an accumulator row ``width`` columns, so a partial block occupies a whole row.

The heuristic searches tile shapes aligned to the array and keeps the one with the lowest
estimated time, counting array occupancy (the loop nest of ``lowering/array.py`` timed by
the rule of ``kernels/systolic.py``), memory traffic and how many cores get work.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from math import ceil, prod

from npusim.config import NpuConfig
from npusim.errors import NpusimError
from npusim.kernels.array_rows import gemm_stream_cycles, last_chunk_cycles

ACC_BYTES = 4  # accumulator elements are 32-bit (int32 / fp32), whatever the input precision


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

    def run_bytes(self, elements: int) -> int:
        """DRAM bytes one contiguous run of ``elements`` costs, in whole requests."""
        return -(-elements * self.precision // self.request_bytes) * self.request_bytes

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


def _reduction_tile(total: int, c_max: int, h: int, fits) -> int | None:
    """The reduction tile: all of it, else the most whole ``h``-row blocks, else what fits."""
    for c in (total, c_max // h * h, c_max):
        if 0 < c <= total and fits(c):
            return c
    return None


@dataclass(frozen=True)
class GemmTile:
    n: int
    c: int
    m: int

    def mapping(self, N: int, C: int, M: int) -> str:
        return (f"[T] N{N} C{C} M{M} - [O] N{ceil(N / self.n)} C{ceil(C / self.c)} "
                f"M{ceil(M / self.m)} - [I] N{self.n} C{self.c} M{self.m}")


def gemm_spad_bytes(b: Budget, n: int, c: int, m: int) -> int:
    """Scratchpad bytes of a GEMM tile: ``n`` input rows of ``c`` (in rows of ``height``)
    and ``c`` weight rows of ``m`` columns (in rows of ``width``)."""
    return (n * padded(c, b.height) + c * padded(m, b.width)) * b.precision


def gemm_tile_fits(b: Budget, n: int, c: int, m: int) -> tuple[bool, str]:
    spad = gemm_spad_bytes(b, n, c, m)
    acc = n * padded(m, b.width) * ACC_BYTES
    if spad > b.spad_half:
        return False, (f"inputs {n}x{c} and weights {c}x{m} need {spad} B, more than half "
                       f"the scratchpad ({b.spad_half} B)")
    if acc > b.acc_half:
        return False, (f"outputs {n}x{m} need {acc} B of accumulator, more than half of it "
                       f"({b.acc_half} B)")
    return True, ""


def choose_gemm_tile(b: Budget, N: int, C: int, M: int, batch: int = 1) -> GemmTile:
    """The GEMM tile (n, c, m) with the lowest estimated time for Y[N,M] = X[N,C] W[C,M]."""
    best = None
    for n in _aligned_options(N, b.height):
        for m in _aligned_options(M, b.width):
            if n * padded(m, b.width) * ACC_BYTES > b.acc_half:
                continue
            c_max = b.spad_half // ((n + padded(m, b.width)) * b.precision)
            c = _reduction_tile(C, c_max, b.height,
                                lambda c: gemm_tile_fits(b, n, c, m)[0])
            if c is None:
                continue
            tn, tm, tc = ceil(N / n), ceil(M / m), ceil(C / c)
            groups = batch * tn * tm
            c_last = C - (tc - 1) * c
            # array cycles of one group: every weight block of its C x m slice streams n rows
            blocks = ((tc - 1) * ceil(c / b.height) + ceil(c_last / b.height)) * ceil(m / b.width)
            compute = groups * blocks * block_cycles(b, n)
            compute /= min(b.cores, groups)
            # rows of X (c long) and W (m long) and of the output, in whole requests
            x_rows = n * ((tc - 1) * b.run_bytes(c) + b.run_bytes(c_last))
            traffic = groups * (x_rows + C * b.run_bytes(m)) + batch * N * tm * b.run_bytes(m)
            memory = traffic / (b.load_bytes_per_cycle * min(b.cores, groups))
            fill = b.width + b.height + b.height  # pipeline fill and drain of each tile
            est = max(compute, memory) + fill * groups * tc / min(b.cores, groups)
            key = (est, -n * m * c)
            if best is None or key < best[0]:
                best = (key, GemmTile(n, c, m))
    if best is None:
        need = (b.height * b.width * ACC_BYTES, (b.height + b.width) * b.precision)
        raise NpusimError(
            f"no GEMM tile fits: even a 1x1 block needs {need[1]} B of scratchpad and "
            f"{need[0]} B of accumulator per half, the core has {b.spad_half} B and "
            f"{b.acc_half} B; raise core.spad_kib / core.accum_kib")
    return best[1]


@dataclass(frozen=True)
class ConvShape:
    """A convolution's loop bounds, per group: ``N`` images, ``C`` input and ``M`` output
    channels of each of ``groups`` groups, and per spatial dim (1 to 3 of them, outermost
    first) the output extent, kernel, stride and dilation."""

    N: int
    C: int
    M: int
    groups: int
    out: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]

    @property
    def kernel_positions(self) -> int:
        return prod(self.kernel)

    def window(self, d: int, t: int) -> int:
        """Input positions along dim ``d`` a tile of ``t`` outputs holds: with a kernel of
        one along ``d`` the DMA walks the input with the stride and loads only the ``t``
        positions used (Gemmini's ``downsample`` loads); otherwise the dense window."""
        if self.kernel[d] == 1:
            return t
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
    """(input pixels held, scratchpad bytes, accumulator bytes) of a tile."""
    pixels = prod(s.window(d, n) for d, n in enumerate(t.out))
    spad = (pixels * padded(t.c, b.height)
            + s.kernel_positions * t.c * padded(t.m, b.width)) * b.precision
    acc = prod(t.out) * padded(t.m, b.width) * ACC_BYTES
    return pixels, spad, acc


def conv_tile_fits(b: Budget, s: ConvShape, t: ConvTile) -> tuple[bool, str]:
    pixels, spad, acc = conv_occupancy(b, s, t)
    if spad > b.spad_half:
        kernel = "x".join(map(str, s.kernel))
        return False, (f"{pixels} input pixels of {t.c} channels and weights "
                       f"{t.m}x{t.c}x{kernel} need {spad} B, more than half the scratchpad "
                       f"({b.spad_half} B)")
    if acc > b.acc_half:
        return False, (f"outputs {'x'.join(map(str, t.out))}x{t.m} need {acc} B of "
                       f"accumulator, more than half of it ({b.acc_half} B)")
    return True, ""


def _splits(total: int, size: int) -> list[tuple[int, int]]:
    """(tile size, how many) of cutting ``total`` into tiles of ``size``."""
    full, rest = divmod(total, size)
    return [(size, full)] + ([(rest, 1)] if rest else [])


def _spatial_options(total: int) -> list[int]:
    return _aligned_options(total, 1) if total <= 64 else _aligned_options(total, 8)


def choose_conv_tile(b: Budget, s: ConvShape) -> ConvTile:
    """Output box and channel tile of a (per-group) convolution with the lowest estimated
    time: every tile runs the loop nest of ``conv.py`` (output-channel blocks, kernel
    positions, channel blocks; each block streams the tile's output rows)."""
    best = None
    K = s.kernel_positions
    for m in _aligned_options(s.M, b.width):
        for out in product(*(_spatial_options(o) for o in s.out)):
            t = ConvTile(out, s.C, m)
            pixels, _, acc = conv_occupancy(b, s, t)
            if acc > b.acc_half:
                continue
            c_max = b.spad_half // (b.precision * (pixels + K * padded(m, b.width)))
            c = _reduction_tile(s.C, c_max, b.height,
                                lambda c: conv_tile_fits(b, s, ConvTile(out, c, m))[0])
            if c is None:
                continue
            t = ConvTile(out, c, m)
            est = _conv_estimate(b, s, t, pixels)
            key = (est, -prod(out) * m * c)
            if best is None or key < best[0]:
                best = (key, t)
    if best is None:
        raise NpusimError(
            f"no convolution tile fits: one output pixel of {min(s.M, b.width)} channels with "
            f"its {'x'.join(map(str, s.kernel))} window does not fit half the scratchpad "
            f"({b.spad_half} B) and accumulator ({b.acc_half} B); raise core.spad_kib / "
            f"core.accum_kib")
    return best[1]


def _conv_estimate(b: Budget, s: ConvShape, t: ConvTile, pixels: int) -> float:
    """Estimated cycles of the whole convolution tiled by ``t``: array time per tile summed
    exactly over the edge tiles, memory traffic, pipeline fill per tile, spread over cores."""
    K = s.kernel_positions
    c_tiles = _splits(s.C, t.c)
    m_tiles = _splits(s.M, t.m)
    # channel blocks of one output tile's reduction, and output-column blocks
    c_blocks = sum(ceil(c / b.height) * n for c, n in c_tiles)
    tc = sum(n for _, n in c_tiles)
    compute = 0
    n_out_tiles = 0
    for box in product(*(_splits(o, n) for o, n in zip(s.out, t.out))):
        count = prod(n for _, n in box)
        sizes = [size for size, _ in box]
        per_block = block_cycles(b, sizes[-1], prod(sizes[:-1]))
        for m, n in m_tiles:
            compute += count * n * ceil(m / b.width) * K * c_blocks * per_block
        n_out_tiles += count
    groups = s.N * s.groups * n_out_tiles * sum(n for _, n in m_tiles)
    compute *= s.N * s.groups
    par = min(b.cores, groups)
    # per tile: the input window of each channel tile, the weights, the output
    cols = s.window(len(t.out) - 1, t.out[-1])
    rows = pixels // cols
    window = rows * sum(n * (b.run_bytes(cols * c) if c == s.C and s.kernel[-1] > 1
                             else cols * b.run_bytes(c)) for c, n in c_tiles)
    weights = t.m * sum(n * b.run_bytes(c * K) for c, n in c_tiles)
    output = prod(t.out) * b.run_bytes(t.m)
    memory = groups * (window + weights + output) / (b.load_bytes_per_cycle * par)
    fill = b.width + 2 * b.height
    return max(compute / par, memory) + fill * groups * tc / par
