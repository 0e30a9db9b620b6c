"""Choosing tile sizes: from an ONNXim mapping line, or by a small cost-model search.

A tile must fit one half of the scratchpad (its inputs and weights) and one half of the
accumulator (its outputs, 4 bytes per element), because each core holds two tiles at once.
The heuristic searches tile shapes aligned to the array and keeps the one with the lowest
estimated time, counting array occupancy, memory traffic and how many cores get work.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from npusim.config import NpuConfig
from npusim.errors import NpusimError

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


def stream_cycles(rows: int, h: int, min_cycles: int) -> int:
    full, rest = divmod(rows, h)
    return full * max(h, min_cycles) + (max(rest, min_cycles) if rest else 0)


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


@dataclass(frozen=True)
class GemmTile:
    n: int
    c: int
    m: int

    def mapping(self, N: int, C: int, M: int) -> str:
        return (f"[T] N{N} C{C} M{M} - [O] N{ceil(N / self.n)} C{ceil(C / self.c)} "
                f"M{ceil(M / self.m)} - [I] N{self.n} C{self.c} M{self.m}")


def gemm_tile_fits(b: Budget, n: int, c: int, m: int) -> tuple[bool, str]:
    spad = (n * c + c * m) * b.precision
    acc = n * m * ACC_BYTES
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
            if n * m * ACC_BYTES > b.acc_half:
                continue
            c_max = b.spad_half // ((n + m) * b.precision)
            if c_max <= 0:
                continue
            c = C if c_max >= C else (c_max // b.height) * b.height
            if c <= 0:
                c = min(C, c_max)
            tn, tm, tc = ceil(N / n), ceil(M / m), ceil(C / c)
            groups = batch * tn * tm
            c_last = C - (tc - 1) * c
            # array cycles of one group: every weight block of its C x m slice streams n rows
            blocks = ((tc - 1) * ceil(c / b.height) + ceil(c_last / b.height)) * ceil(m / b.width)
            compute = groups * blocks * max(stream_cycles(n, b.height, b.min_cycles), b.height)
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
class ConvTile:
    p: int  # output rows
    q: int  # output columns
    c: int  # input channels (per group)
    m: int  # output channels (per group)

    def mapping(self, N, C, M, P, Q, S, R) -> str:
        return (f"[T] N{N} C{C} M{M} P{P} Q{Q} S{S} R{R} - [O] N{N} C{ceil(C / self.c)} "
                f"M{ceil(M / self.m)} P{ceil(P / self.p)} Q{ceil(Q / self.q)} S1 R1 - "
                f"[I] N1 C{self.c} M{self.m} P{self.p} Q{self.q} S{S} R{R}")


def conv_input_extent(out: int, stride: int, dilation: int, kernel: int) -> int:
    return (out - 1) * stride + (kernel - 1) * dilation + 1


def conv_tile_fits(b: Budget, t: ConvTile, S: int, R: int, stride: tuple[int, int],
                   dilation: tuple[int, int]) -> tuple[bool, str]:
    rows = conv_input_extent(t.p, stride[0], dilation[0], S)
    cols = conv_input_extent(t.q, stride[1], dilation[1], R)
    spad = (rows * cols * t.c + t.c * S * R * t.m) * b.precision
    acc = t.p * t.q * t.m * ACC_BYTES
    if spad > b.spad_half:
        return False, (f"input window {rows}x{cols}x{t.c} and weights {t.m}x{t.c}x{S}x{R} "
                       f"need {spad} B, more than half the scratchpad ({b.spad_half} B)")
    if acc > b.acc_half:
        return False, (f"outputs {t.p}x{t.q}x{t.m} need {acc} B of accumulator, more than "
                       f"half of it ({b.acc_half} B)")
    return True, ""


def choose_conv_tile(b: Budget, N: int, C: int, M: int, P: int, Q: int, S: int, R: int,
                     stride: tuple[int, int], dilation: tuple[int, int], groups: int) -> ConvTile:
    """Output-row/column and channel tile of a (per-group) convolution."""
    best = None
    for m in _aligned_options(M, b.width):
        for q in _aligned_options(Q, 1) if Q <= 64 else _aligned_options(Q, 8):
            for p in _aligned_options(P, 1) if P <= 64 else _aligned_options(P, 8):
                if p * q * m * ACC_BYTES > b.acc_half:
                    continue
                rows = conv_input_extent(p, stride[0], dilation[0], S)
                cols = conv_input_extent(q, stride[1], dilation[1], R)
                c_max = b.spad_half // (b.precision * (rows * cols + S * R * m))
                if c_max <= 0:
                    continue
                c = C if c_max >= C else (c_max // b.height * b.height if c_max >= b.height else c_max)
                t = ConvTile(p, q, c, m)
                tp, tq, tm, tc = ceil(P / p), ceil(Q / q), ceil(M / m), ceil(C / c)
                ngroups = N * groups * tp * tq * tm
                c_last = C - (tc - 1) * c
                blocks = ((tc - 1) * ceil(c * S * R / b.height) + ceil(c_last * S * R / b.height))
                blocks *= ceil(m / b.width)
                par = min(b.cores, ngroups)
                compute = ngroups * blocks * max(p * stream_cycles(q, b.height, b.min_cycles),
                                                 b.height) / par
                window = rows * ((tc - 1) * cols * b.run_bytes(c) + cols * b.run_bytes(c_last))
                traffic = ngroups * (window + m * b.run_bytes(C * S * R))
                memory = traffic / (b.load_bytes_per_cycle * par)
                fill = b.width + 2 * b.height
                est = max(compute, memory) + fill * ngroups * tc / par
                key = (est, -p * q * m * c)
                if best is None or key < best[0]:
                    best = (key, t)
    if best is None:
        raise NpusimError(
            f"no convolution tile fits: one output pixel of {min(M, b.width)} channels with "
            f"its {S}x{R} window does not fit half the scratchpad ({b.spad_half} B) and "
            f"accumulator ({b.acc_half} B); raise core.spad_kib / core.accum_kib")
    return best[1]
