"""DFT and STFT as GEMMs with the transform's matrix.

A systolic NPU computes a short transform as a matrix product, not as FFT butterflies: each
row of ``n`` signal samples (real, or re/im pairs) times a constant matrix whose columns
are the output bins' cosine and sine terms. So a transform of ``rows`` signals is one GEMM
of ``N = rows``, ``C = n`` (real) or ``2n`` (complex), ``M = 2 * bins`` (re and im of each
bin; onesided keeps ``n // 2 + 1``), ``N * C * M`` MACs on the array. The matrix is a
constant the compiler builds and stores like a weight (an inverse transform's is another
constant of the same size); an STFT's window is folded into it (``diag(window) x DFT``),
so windowing costs nothing more.

DFT    over the axis just before the re/im axis: one GEMM, each row contiguous in memory;
       over an earlier axis: the signal moved to rows first and the result moved back (a
       move pass each way, as a Transpose costs); ``dft_length`` shorter than the axis
       reads its first samples, longer pads with zeros (which the GEMM skips)
STFT   one GEMM per batch entry whose rows are the frames: row ``t`` starts ``frame_step``
       samples after row ``t - 1`` (frames overlap in memory: each tile reads its rows)
"""

from __future__ import annotations

from math import prod

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.context import LoweringContext
from npusim.lowering.gemm import GemmProblem, emit_gemm
from npusim.lowering.vector import MOVE, LayerEmitter, View, _axis, emit_views, const_value
from npusim.program import LayerInfo


def _scalar(ctx: LoweringContext, node: Node, index: int) -> int | None:
    """An optional scalar input's value when it is a constant, else None."""
    if len(node.inputs) <= index or not node.inputs[index]:
        return None
    v = const_value(ctx, node.inputs[index])
    return None if v is None else int(v.reshape(-1)[0])


def _transform(ctx: LoweringContext, node: Node, name: str, *, N: int, C: int, M: int,
               x: str, x_row_stride: int, y: str, offsets=((0, 0, 0),)) -> None:
    """One GEMM of ``len(offsets)`` batches: signal rows times the transform's matrix."""
    matrix = ctx.scratch(f"{node.name}::matrix", (C, M))
    g = ctx.graph
    sub = Node(name=name, op_type=node.op_type, inputs=[x, matrix], outputs=[y])
    info = LayerInfo(name=name, op_type=node.op_type,
                     input_shapes=[g.shape(t) for t in node.inputs if t],
                     output_shape=g.shape(node.outputs[0]), macs=len(offsets) * N * C * M,
                     mapping="", mapping_source="")
    prob = GemmProblem(N=N, C=C, M=M, batch_offsets=list(offsets), x_addr=ctx.addr(x),
                       x_row_stride=x_row_stride, x_trans=False, w_addr=ctx.addr(matrix),
                       w_trans=False, y_addr=ctx.addr(y))
    emit_gemm(ctx, sub, prob, info)


def _move(ctx: LoweringContext, node: Node, name: str, src: str, dst: str, space,
          src_strides, dst_strides) -> None:
    sub = Node(name=name, op_type=node.op_type, inputs=[src], outputs=[dst])
    em = LayerEmitter(ctx, sub, "vector unit (transform axis moved)")
    emit_views(em, space, [View(ctx.addr(src), src_strides)], [View(ctx.addr(dst), dst_strides)],
               [(MOVE, 1)])
    em.finish()


def lower_dft(ctx: LoweringContext, node: Node) -> None:
    x, y = node.inputs[0], node.outputs[0]
    xs, ys = ctx.graph.shape(x), ctx.graph.shape(y)
    r = len(xs)
    if r < 2 or xs[-1] not in (1, 2) or len(ys) != r or ys[-1] not in (1, 2):
        raise NpusimError(f"DFT '{node.name}': needs an input [..., n, 1 or 2] and an output "
                          f"[..., bins, 1 or 2]; got {xs} and {ys}")
    given = _scalar(ctx, node, 2)  # opset 20: an input (default -2); opset 17: an attribute
    if given is None:
        given = node.attrs.get("axis")
    if given is None:  # the defaults differ by opset (17: 1, 20: -2): the axis whose size
        # changes, else (a full transform: every axis keeps its size) the one before re/im
        differ = [i for i in range(r - 1) if xs[i] != ys[i]]
        given = differ[0] if differ else r - 2
    a = _axis(node, r, given)
    if a == r - 1:
        raise NpusimError(f"DFT '{node.name}': the transform axis is the re/im axis; ONNX "
                          f"transforms one of the axes before it")
    n, c2, bins, o2 = xs[a], xs[-1], ys[a], ys[-1]
    length = _scalar(ctx, node, 1) or n
    C, M = min(n, length) * c2, o2 * bins  # an inverse onesided transform's output is real
    outer, inner = prod(xs[:a]), prod(xs[a + 1:r - 1])
    prec = ctx.precision
    if inner == 1:
        _transform(ctx, node, node.name, N=outer, C=C, M=M, x=x, x_row_stride=n * c2 * prec,
                   y=y)
        return
    # [outer, n, inner, c2] -> rows [outer, inner, n, c2], and the bins back
    rows = ctx.scratch(f"{node.name}::rows", (outer, inner, n, c2))
    out_rows = ctx.scratch(f"{node.name}::bins", (outer, inner, bins, o2))
    _move(ctx, node, f"{node.name}/to_rows", x, rows, (outer, inner, n, c2),
          [n * inner * c2, c2, inner * c2, 1], [inner * n * c2, n * c2, c2, 1])
    _transform(ctx, node, node.name, N=outer * inner, C=C, M=M, x=rows,
               x_row_stride=n * c2 * prec, y=out_rows)
    _move(ctx, node, f"{node.name}/from_rows", out_rows, y, (outer, inner, bins, o2),
          [inner * bins * o2, bins * o2, o2, 1], [bins * inner * o2, o2, inner * o2, 1])


def lower_stft(ctx: LoweringContext, node: Node) -> None:
    x, y = node.inputs[0], node.outputs[0]
    xs, ys = ctx.graph.shape(x), ctx.graph.shape(y)
    if len(xs) != 3 or xs[-1] not in (1, 2) or len(ys) != 4 or ys[-1] != 2:
        raise NpusimError(f"STFT '{node.name}': needs a signal [batch, length, 1 or 2] and an "
                          f"output [batch, frames, bins, 2]; got {xs} and {ys}")
    batch, length, c2 = xs
    frames, bins = ys[1], ys[2]
    window = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    frame = _scalar(ctx, node, 3) or (ctx.graph.shape(window)[0] if window else None)
    if frame is None:  # from the bins: onesided keeps frame // 2 + 1 (an even frame taken)
        frame = 2 * (bins - 1) if node.attrs.get("onesided", 1) else bins
    step = _scalar(ctx, node, 1)
    if step is None:  # from the shapes: frames = (length - frame) // step + 1
        step = (length - frame) // (frames - 1) if frames > 1 else frame
    prec = ctx.precision
    M = 2 * bins
    offsets = [(b * length * c2 * prec, 0, b * frames * M * prec) for b in range(batch)]
    _transform(ctx, node, node.name, N=frames, C=frame * c2, M=M, x=x,
               x_row_stride=step * c2 * prec, y=y, offsets=offsets)


LOWERINGS: dict = {"DFT": lower_dft, "STFT": lower_stft}
