"""Ops that move or replicate data: Pad, Tile, Resize/Upsample, GridSample, AffineGrid, RoiAlign,
MaxUnpool, Col2Im, DepthToSpace, SpaceToDepth, GatherND, the Scatter family and OneHot.

Each is a view problem for :func:`npusim.lowering.vector.emit_views`: an iteration space,
the tensors read (``View``: element strides over that space, 0 where an operand repeats)
and the tensor written. Tiles load each source box once (a repeated operand is not read
again), run the vector steps over the tile's elements and store the box.

=================  =========================================================================
Pad,               the input copied into the interior (DMA in, DMA out); each border slab
                   written by one move pass over its elements (a constant; edge, reflect and
CenterCropPad      wrap values come from the interior on chip and cost the same pass)
Tile               one move pass over the output; each tile loads the input block once
Resize, Upsample   nearest: one move pass over the output; linear: ``2^k`` mul and
                   ``2^k - 1`` add passes, cubic: ``4^k`` and ``4^k - 1`` (``k`` resized
                   axes); an axis enlarged by an integer factor s reads each input row once
                   for its s output rows, one shrunk by s reads every s-th row; an axis
                   enlarged by a non-integer factor is read once per tile, one shrunk by a
                   non-integer factor every round(d/o)-th row (approximate traffic)
GridSample         two layers: per grid coordinate, unnormalize, keep in range and weigh
                   (``GRID_MODES``, ``GRID_PADDING``) into one packed word per position;
                   then per output element Resize's taps (``2^k`` or ``4^k``), the input
                   read as a resize to the output's size would read it (the grid's values
                   are never read: a smooth warp)
RoiAlign           two layers: per sample point of each box (``output_height x
                   sampling_ratio`` by ``output_width x sampling_ratio``), GridSample's
                   coordinate steps (bilinear, clamped) for its y and x into a packed word;
                   then per sample its 4 taps weighted (4 mul) and folded into the bin
                   (avg: 4 add, the 1/count folded into the weights, one more mul per
                   coordinate; max: 4 max). Each box reads a window of one input pixel per
                   sample (the resolution a feature pyramid picks a box's level for; the
                   boxes are data npusim never reads), windows spread over the input
AffineGrid         per grid element: its base coordinate and one row of theta: ``k + 1``
                   mul and add passes
MaxUnpool          the output zero-filled by one move pass, then a DMA store of each input
                   element (and a read of its index) into its pooling window
Col2Im             one add pass over the columns into the image, overlapping windows
                   charged per store (as ConvTranspose's col2im)
DepthToSpace,      one move pass over the output; the input is read through the block
SpaceToDepth       permutation (DCR or CRD), like a Transpose
GatherND           DMA only: the index rows, then the gathered slices (spread evenly over the
                   table: the index values are never read), stored contiguously
ScatterND,         DMA only: the updates (and their indices) stored into the output rows,
ScatterElements,   spread evenly as for a gather; the output is the data tensor updated in
TensorScatter      place when nothing else reads it, else a DMA copy of it comes first
OneHot             compare and select (sub, max) over the output; the indices are read once
                   per depth row
=================  =========================================================================
"""

from __future__ import annotations

from math import ceil, prod

import numpy as np

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.lowering.context import LoweringContext
from npusim.lowering.vector import (MOVE, LayerEmitter, View, _axis, _shape, const_value,
                                    emit_views, index_walks, row_major)


def _per_core(ctx, shape) -> int:
    return ceil(max(1, prod(shape)) / ctx.config.num_cores)


# --------------------------------------------------------------------------- Pad

def _pad_begins_ends(ctx, node, r: int) -> tuple[list[int], list[int]]:
    pads = node.attrs.get("pads")
    if pads is None and len(node.inputs) > 1 and node.inputs[1]:
        pads = const_value(ctx, node.inputs[1])
    x_shape, y_shape = _shape(ctx, node.inputs[0]), _shape(ctx, node.outputs[0])
    if pads is None:  # values unknown: the growth of each axis, all of it after the data
        return [0] * r, [y - x for x, y in zip(x_shape, y_shape)]
    pads = [int(v) for v in np.asarray(pads).reshape(-1)]
    axes = list(range(r))
    if len(node.inputs) > 3 and node.inputs[3]:
        given = const_value(ctx, node.inputs[3])
        if given is None:
            raise NpusimError(f"Pad '{node.name}': the axes input is not a constant")
        axes = [_axis(node, r, a) for a in np.asarray(given).reshape(-1)]
    begins, ends = [0] * r, [0] * r
    n = len(axes)
    for i, a in enumerate(axes):
        begins[a], ends[a] = pads[i], pads[n + i]
    return begins, ends


def lower_pad(ctx: LoweringContext, node: Node) -> None:
    """Pad, and CenterCropPad (each axis cropped or padded around its centre)."""
    x, y = node.inputs[0], node.outputs[0]
    x_shape, y_shape = _shape(ctx, x), _shape(ctx, y)
    r = len(y_shape)
    if node.op_type == "CenterCropPad":
        begins = [(o - i) // 2 if o >= i else -((i - o) // 2) for i, o in zip(x_shape, y_shape)]
    else:
        begins, _ = _pad_begins_ends(ctx, node, r)
    out0 = [max(0, b) for b in begins]
    in0 = [max(0, -b) for b in begins]
    extent = [max(0, min(xd - i, yd - o)) for xd, yd, i, o in zip(x_shape, y_shape, in0, out0)]
    xs, ys = row_major(x_shape), row_major(y_shape)
    per_core = _per_core(ctx, y_shape)
    em = LayerEmitter(ctx, node, "DMA copy, border filled by the vector unit")
    ya = ctx.addr(y)
    if prod(extent):
        emit_views(em, extent, [View(ctx.addr(x), xs, offset=sum(i * s for i, s in zip(in0, xs)))],
                   [View(ya, ys, offset=sum(o * s for o, s in zip(out0, ys)))], [], per_core)
    for k in range(r):  # border slabs: the output minus the interior, without overlaps
        for start, width in ((0, out0[k]), (out0[k] + extent[k],
                                            y_shape[k] - out0[k] - extent[k])):
            if width <= 0:
                continue
            shape = extent[:k] + [width] + list(y_shape[k + 1:])
            offset = sum(o * s for o, s in zip(out0[:k], ys[:k])) + start * ys[k]
            emit_views(em, shape, [], [View(ya, ys, offset=offset)], [(MOVE, 1)], per_core)
    em.finish()


# --------------------------------------------------------------------------- Tile

def lower_tile(ctx: LoweringContext, node: Node) -> None:
    """Output axis k of length repeats*d viewed as [repeats, d]: the input repeats along the
    first (stride 0, loaded once per tile) and runs along the second."""
    x, y = node.inputs[0], node.outputs[0]
    x_shape, y_shape = _shape(ctx, x), _shape(ctx, y)
    xs, ys = row_major(x_shape), row_major(y_shape)
    space, src, dst = [], [], []
    for d, o, sx, sy in zip(x_shape, y_shape, xs, ys):
        reps = o // d if d else 1
        space += [reps, d]
        src += [0, sx]
        dst += [d * sy, sy]
    em = LayerEmitter(ctx, node, "vector unit (replicating move)")
    emit_views(em, space, [View(ctx.addr(x), src)], [View(ctx.addr(y), dst)], [(MOVE, 1)])
    em.finish()


# --------------------------------------------------------------------------- Resize

def _resampled(x_shape, y_shape) -> tuple[list[int], list[int], list[int], int]:
    """Reading ``x_shape`` resampled to ``y_shape`` axis by axis (Resize; GridSample, whose
    grid is taken as a smooth warp): the iteration space, the input's and the output's
    element strides over it, and how many axes change size. An axis enlarged by an integer
    factor s reads each input row once for its s output rows, one shrunk by s every s-th
    row; a non-integer enlargement reads the input once per tile, a non-integer shrink every
    round(d/o)-th row."""
    space, src, dst = [], [], []
    resized = 0
    for d, o, sx, sy in zip(x_shape, y_shape, row_major(x_shape), row_major(y_shape)):
        if d == o:
            space.append(o), src.append(sx), dst.append(sy)
            continue
        resized += 1
        if o > d:  # up by s (the nearest integer factor): each input row serves s outputs
            s = max(1, round(o / d))
            rows = ceil(o / s)
            space += [rows, s]
            src += [sx, 0]
            dst += [s * sy, sy]
            if rows * s != o:  # a non-integer factor: the last block is cut short
                space, src, dst = space[:-2] + [o], src[:-2] + [0], dst[:-2] + [sy]
        else:  # down by s: every s-th input row
            s = max(1, round(d / o))
            space.append(o), src.append(sx * s), dst.append(sy)
    return space, src, dst, resized


def _interpolation_steps(taps: int) -> list[tuple[str, int]]:
    """Vector steps per output element that combines ``taps`` weighted inputs (0: a copy)."""
    if taps == 0:
        return [(MOVE, 1)]
    return [("mul", taps)] + ([("add", taps - 1)] if taps > 1 else [])


def lower_resize(ctx: LoweringContext, node: Node) -> None:
    x, y = node.inputs[0], node.outputs[0]
    space, src, dst, resized = _resampled(_shape(ctx, x), _shape(ctx, y))
    mode = node.attrs.get("mode", "nearest")
    if mode in ("linear", "bilinear"):
        taps = 2 ** resized
    elif mode == "cubic":
        taps = 4 ** resized
    elif mode == "nearest":
        taps = 0
    else:
        raise NpusimError(f"{node.op_type} '{node.name}': mode {mode!r} is not an ONNX resize "
                          f"mode (nearest, linear, cubic)")
    em = LayerEmitter(ctx, node, f"vector unit ({mode} interpolation)")
    emit_views(em, space, [View(ctx.addr(x), src)], [View(ctx.addr(y), dst)],
               _interpolation_steps(taps))
    em.finish()


# --------------------------------------------------------------------------- sampling grids

# GridSample's modes (opset 16 and 20 spellings): taps per spatial axis, and the vector steps
# that turn one unnormalized coordinate into its index and per-tap weights: nearest rounds;
# linear takes floor, fraction w and 1 - w; cubic takes floor and fraction, then its four
# Keys coefficients (A = -0.75), cubic polynomials in the fraction: 3 mul + 3 add each.
GRID_MODES = {
    "nearest": (1, [(MOVE, 1)]),
    "linear": (2, [(MOVE, 1), ("sub", 2)]),
    "cubic": (4, [(MOVE, 1), ("sub", 1), ("mul", 12), ("add", 12)]),
}
GRID_MODE_NAMES = {"bilinear": "linear", "bicubic": "cubic"}
# per coordinate, what keeps a sample's taps inside the input (ONNX padding_mode): zeros
# tests each tap's index against both bounds (its weight is zeroed outside), border clamps
# the coordinate, reflection folds it back (distance past the edge, twice, then a clamp)
GRID_PADDING = {
    "zeros": [("max", 1), ("min", 1)],
    "border": [("max", 1), ("min", 1)],
    "reflection": [("sub", 2), ("max", 1), ("min", 1)],
}


def lower_grid_sample(ctx: LoweringContext, node: Node) -> None:
    """GridSample: each output position samples the input at the point its grid row names.

    Two layers. ``name/coordinates``, over the grid ([N, *out, k], k spatial axes): each
    coordinate is unnormalized (((g + 1) * size - 1) / 2, or (g + 1) * (size - 1) / 2 with
    align_corners: a mul and an add), kept in range (``GRID_PADDING``) and turned into its
    index and weights (``GRID_MODES``); a sample's taps^k weights are products of its k axis
    weights (k - 1 muls each, spread over its coordinates); each position's index and
    weights are stored as one packed word. ``name``, over the output ([N, C, *out]): the taps
    of each element weighted and summed (Resize's steps), the packed words read once per tile
    for all its channels. The input is read as a resize from its size to the output's reads
    it: the grid is data npusim never reads, taken as a smooth warp (neighbouring outputs
    sample neighbouring inputs).
    """
    x, grid, y = node.inputs[0], node.inputs[1], node.outputs[0]
    x_shape, g_shape, y_shape = _shape(ctx, x), _shape(ctx, grid), _shape(ctx, y)
    k = len(x_shape) - 2
    if k < 1 or len(g_shape) != k + 2 or g_shape[-1] != k or len(y_shape) != k + 2:
        raise NpusimError(f"GridSample '{node.name}': needs an input (N, C, *spatial), a grid "
                          f"(N, *out, {max(k, 1)}) and an output (N, C, *out); got {x_shape}, "
                          f"{g_shape}, {y_shape}")
    mode = node.attrs.get("mode", "linear")  # opset 16's "bilinear", opset 20's "linear"
    mode = GRID_MODE_NAMES.get(mode, mode)
    padding = node.attrs.get("padding_mode", "zeros")
    if mode not in GRID_MODES or padding not in GRID_PADDING:
        raise NpusimError(f"GridSample '{node.name}': mode {mode!r}, padding_mode {padding!r}: "
                          f"ONNX's modes are bilinear (linear), nearest, bicubic (cubic); its "
                          f"padding modes {', '.join(GRID_PADDING)}")
    per_axis, weigh = GRID_MODES[mode]
    coordinate = [("mul", 1), ("add", 1), *GRID_PADDING[padding], *weigh]
    taps = 0 if mode == "nearest" else per_axis ** k
    if k > 1 and taps:
        coordinate.append(("mul", ceil(taps * (k - 1) / k)))
    positions = (g_shape[0], *g_shape[1:-1])
    packed = ctx.scratch(f"{node.name}::samples", positions)
    sub = Node(name=f"{node.name}/coordinates", op_type=node.op_type, inputs=[grid],
               outputs=[packed])
    em = LayerEmitter(ctx, sub, f"vector unit (grid coordinates, {padding} padding)")
    emit_views(em, g_shape, [View(ctx.addr(grid), row_major(g_shape))],
               [View(ctx.addr(packed), row_major(positions) + [0])], coordinate)
    em.finish()

    space, src, dst, _ = _resampled(x_shape, y_shape)
    # the packed words over the same space: per batch and output position, not per channel
    P, C = prod(positions[1:]), y_shape[1]
    words = [0 if P <= sy < C * P else (sy // (C * P)) * P + sy % (C * P) for sy in dst]
    main = Node(name=node.name, op_type=node.op_type, inputs=[x, packed], outputs=[y])
    em = LayerEmitter(ctx, main, f"vector unit ({mode} sampling)")
    emit_views(em, space, [View(ctx.addr(x), src), View(ctx.addr(packed), words)],
               [View(ctx.addr(y), dst)], _interpolation_steps(taps))
    em.finish()


def lower_affine_grid(ctx: LoweringContext, node: Node) -> None:
    """AffineGrid: the grid (N, *size, k) of theta (N, k, k + 1) applied to every output
    position's normalized base coordinates. Per grid element: its position's base coordinate
    along one axis (index * step + start: a mul and an add, k per position, one per element)
    and one row of theta times (base, 1): k mul, k add."""
    theta, y = node.inputs[0], node.outputs[0]
    t_shape, y_shape = _shape(ctx, theta), _shape(ctx, y)
    k = y_shape[-1]
    if len(t_shape) != 3 or t_shape[1:] != (k, k + 1) or len(y_shape) != k + 2:
        raise NpusimError(f"AffineGrid '{node.name}': needs theta (N, k, k + 1) and a grid "
                          f"(N, *size, k); got {t_shape}, {y_shape}")
    em = LayerEmitter(ctx, node, "vector unit (affine grid)")
    # theta's row for the coordinate, the same for every position of a batch entry
    src = [k * (k + 1)] + [0] * k + [k + 1]
    emit_views(em, y_shape, [View(ctx.addr(theta), src)], [View(ctx.addr(y), row_major(y_shape))],
               [("mul", k + 1), ("add", k + 1)])
    em.finish()


def _sampled_strides(bins: int, samples: int, extent: int) -> tuple[int, int]:
    """Element strides of a box's bins and of their samples along an axis of ``extent``
    pixels: one pixel per sample while they fit, else the bins spread over the axis."""
    if bins * samples <= extent:
        return samples, 1
    return extent // bins, 0


def lower_roi_align(ctx: LoweringContext, node: Node) -> None:
    """RoiAlign with a fixed ``sampling_ratio`` (see the table above); the adaptive one (0)
    samples as many points as each box covers, which depends on the boxes (data)."""
    x, rois, y = node.inputs[0], node.inputs[1], node.outputs[0]
    x_shape, r_shape, y_shape = _shape(ctx, x), _shape(ctx, rois), _shape(ctx, y)
    if len(x_shape) != 4 or len(r_shape) != 2 or r_shape[1] != 4 or len(y_shape) != 4:
        raise NpusimError(f"RoiAlign '{node.name}': needs an input (N, C, H, W), rois (R, 4) "
                          f"and an output (R, C, h, w); got {x_shape}, {r_shape}, {y_shape}")
    N, C, H, W = x_shape
    R, _, oh, ow = y_shape
    s = int(node.attrs.get("sampling_ratio", 0))
    mode = node.attrs.get("mode", "avg")
    if s <= 0 or mode not in ("avg", "max"):
        raise NpusimError(f"RoiAlign '{node.name}': sampling_ratio {s}, mode {mode!r}: npusim "
                          f"lowers a sampling_ratio >= 1 (0 samples as many points as each box "
                          f"covers: the boxes are data it never reads) and modes avg, max")
    per_box = (oh * s, ow * s)
    words = ctx.scratch(f"{node.name}::samples", (R, *per_box))
    coordinate = [("mul", 1), ("add", 1), *GRID_PADDING["border"], *GRID_MODES["linear"][1],
                  ("mul", 2 if mode == "avg" else 1)]  # the 4 weights (and 1/count: avg)
    sub = Node(name=f"{node.name}/samples", op_type=node.op_type, inputs=[rois],
               outputs=[words])
    em = LayerEmitter(ctx, sub, "vector unit (sample coordinates)")
    emit_views(em, (R, *per_box, 2), [View(ctx.addr(rois), [4, 0, 0, 1])],
               [View(ctx.addr(words), row_major((R, *per_box)) + [0])], coordinate)
    em.finish()

    by, sy = _sampled_strides(oh, s, H)
    bx, sx = _sampled_strides(ow, s, W)
    span = ((oh - 1) * by + (s - 1) * sy) * W + (ow - 1) * bx + (s - 1) * sx + 1
    step = max(0, (N * C * H * W - (C - 1) * H * W - span) // R)  # boxes spread over x
    space = (R, C, oh, s, ow, s)
    ys = row_major(y_shape)
    main = Node(name=node.name, op_type=node.op_type, inputs=[x, words], outputs=[y])
    em = LayerEmitter(ctx, main, f"vector unit (bilinear samples, {mode})")
    emit_views(em, space,
               [View(ctx.addr(x), [step, H * W, by * W, sy * W, bx, sx]),
                View(ctx.addr(words), [prod(per_box), 0, s * ow * s, ow * s, s, 1])],
               [View(ctx.addr(y), [ys[0], ys[1], ys[2], 0, 1, 0])],
               [("mul", 4), ("add" if mode == "avg" else "max", 4)])
    em.finish()


# --------------------------------------------------------------------------- unpool / fold

def lower_max_unpool(ctx: LoweringContext, node: Node) -> None:
    """MaxUnpool: the output zero-filled (``name/zeros``: one move pass over it), then each
    input element stored at the position its index names (``name``: the element and its
    index read, a DMA store). The index lies in the element's pooling window, whose first
    position stands for it: the stores cover the rows the window covers (the index values
    are never read)."""
    x, idx, y = node.inputs[0], node.inputs[1], node.outputs[0]
    x_shape, y_shape = _shape(ctx, x), _shape(ctx, y)
    k = len(x_shape) - 2
    if k < 1 or len(y_shape) != k + 2:
        raise NpusimError(f"MaxUnpool '{node.name}': needs an input (N, C, *spatial) and an "
                          f"output of the same rank; got {x_shape}, {y_shape}")
    strides = [int(v) for v in node.attrs.get("strides", [1] * k)]
    ys = row_major(y_shape)
    ctx.alias(f"{node.name}::zeroed", y)  # the output's bytes: the scatter waits for the fill
    zeros = ctx.scratch(f"{node.name}::zeroed", y_shape)
    sub = Node(name=f"{node.name}/zeros", op_type=node.op_type, inputs=[], outputs=[zeros])
    em = LayerEmitter(ctx, sub, "vector unit (zero fill)", preds=[])
    emit_views(em, y_shape, [], [View(ctx.addr(y), ys)], [(MOVE, 1)])
    em.finish()
    window = ys[:2] + [s * st for s, st in zip(ys[2:], strides)]
    main = Node(name=node.name, op_type=node.op_type, inputs=[x, idx, zeros], outputs=[y])
    em = LayerEmitter(ctx, main, "DMA scatter")
    rm = row_major(x_shape)
    emit_views(em, x_shape, [View(ctx.addr(x), rm), View(ctx.addr(idx), rm)],
               [View(ctx.addr(y), window)], [])
    em.finish()


def lower_col2im(ctx: LoweringContext, node: Node) -> None:
    """Col2Im (torch's ``fold``): each column element added into its image position, one add
    pass over the columns; windows of neighbouring blocks overlap where the block is larger
    than the stride, each overlapping store charged (as ConvTranspose's col2im: windows
    placed from the image's first element, padding cropping none of the traffic)."""
    x, y = node.inputs[0], node.outputs[0]
    x_shape, y_shape = _shape(ctx, x), _shape(ctx, y)
    image = y_shape[2:]
    k = len(image)
    block = const_value(ctx, node.inputs[2]) if len(node.inputs) > 2 else None
    if block is None or len(x_shape) != 3 or k < 1:
        raise NpusimError(f"Col2Im '{node.name}': needs columns (N, C * prod(block), L), a "
                          f"constant block_shape and an image (N, C, *image); got {x_shape}, "
                          f"{y_shape}")
    block = [int(v) for v in np.asarray(block).reshape(-1)]
    strides = [int(v) for v in node.attrs.get("strides", [1] * k)]
    dil = [int(v) for v in node.attrs.get("dilations", [1] * k)]
    pads = [int(v) for v in node.attrs.get("pads", [0] * 2 * k)]
    grid = [(image[i] + pads[i] + pads[k + i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
            for i in range(k)]
    N, C = y_shape[:2]
    if prod(grid) != x_shape[2] or C * prod(block) != x_shape[1]:
        raise NpusimError(f"Col2Im '{node.name}': columns {x_shape} do not match {C} channels "
                          f"of blocks {block} over a {grid} grid of the image {image}")
    L, K = x_shape[2], prod(block)
    out = row_major(y_shape)
    space = [N, C, *block, *grid]
    src = [C * K * L, K * L, *[s * L for s in row_major(block)], *row_major(grid)]
    dst = [out[0], out[1], *[out[2 + i] * dil[i] for i in range(k)],
           *[out[2 + i] * strides[i] for i in range(k)]]
    em = LayerEmitter(ctx, node, "vector unit (col2im)")
    emit_views(em, space, [View(ctx.addr(x), src)], [View(ctx.addr(y), dst)], [("add", 1)])
    em.finish()


# --------------------------------------------------------------------------- depth <-> space

def lower_depth_to_space(ctx: LoweringContext, node: Node) -> None:
    x, y = node.inputs[0], node.outputs[0]
    x_shape = _shape(ctx, x)
    if len(x_shape) != 4:
        raise NpusimError(f"{node.op_type} '{node.name}': needs a 4-D input (N, C, H, W), "
                          f"got {x_shape}")
    N, C, H, W = x_shape
    b = int(node.attrs["blocksize"])
    if node.op_type == "DepthToSpace":
        Cp = C // (b * b)
        # output (n, c', h, i, w, j) reads input channel (i*b + j)*C' + c' (DCR) or
        # c'*b*b + i*b + j (CRD), pixel (h, w)
        if node.attrs.get("mode", "DCR") == "CRD":
            c_s, i_s, j_s = b * b * H * W, b * H * W, H * W
        else:
            c_s, i_s, j_s = H * W, b * Cp * H * W, Cp * H * W
        space = [N, Cp, H, b, W, b]
        src = [C * H * W, c_s, W, i_s, 1, j_s]
        dst = [Cp * H * b * W * b, H * b * W * b, b * W * b, W * b, b, 1]
    else:  # SpaceToDepth: output channel (i*b + j)*C + c, pixel (h', w')
        Hp, Wp = H // b, W // b
        space = [N, b, b, C, Hp, Wp]
        src = [C * H * W, W, 1, H * W, b * W, b]
        dst = row_major(space)
    em = LayerEmitter(ctx, node, "vector unit (block permutation)")
    emit_views(em, space, [View(ctx.addr(x), src)], [View(ctx.addr(y), dst)], [(MOVE, 1)])
    em.finish()


# --------------------------------------------------------------------------- gather / scatter

def lower_gather_nd(ctx: LoweringContext, node: Node) -> None:
    data, idx = node.inputs[0], node.inputs[1]
    y = node.outputs[0]
    d_shape, i_shape = _shape(ctx, data), _shape(ctx, idx)
    b = int(node.attrs.get("batch_dims", 0))
    k = i_shape[-1]
    batch, q_shape, piece = list(d_shape[:b]), i_shape[b:-1], list(d_shape[b + k:])
    row = prod(piece)
    ds, irm = row_major(d_shape), row_major(i_shape)
    ys = row_major(batch + [max(1, prod(q_shape))] + piece)  # y: batch, index rows flat, slice
    em = LayerEmitter(ctx, node, "DMA gather")
    for dims, in_idx, rows, first in index_walks(q_shape, prod(d_shape[b:b + k])):
        sources = [View(ctx.addr(idx), irm[:b] + [s * k for s in in_idx] + [0] * len(piece),
                        first * k),
                   View(ctx.addr(data), ds[:b] + [r * row for r in rows] + ds[b + k:],
                        keep_repeats=True, after=0)]
        out = View(ctx.addr(y), ys[:b] + [s * ys[b] for s in in_idx] + ys[b + 1:],
                   first * ys[b])
        emit_views(em, batch + dims + piece, sources, [out], [])
    em.finish()


def lower_scatter(ctx: LoweringContext, node: Node) -> None:
    op = node.op_type
    y = node.outputs[0]
    data = node.inputs[0]
    y_shape = _shape(ctx, y)
    ys = row_major(y_shape)
    if op == "TensorScatter":  # (past_cache, update, write_indices)
        updates, idx = node.inputs[1], None
    else:  # (data, indices, updates)
        updates, idx = node.inputs[2], node.inputs[1]
    u_shape = _shape(ctx, updates)
    em = LayerEmitter(ctx, node, "DMA scatter")
    if ctx.graph.consumers(data) == [node] and data not in ctx.graph.outputs:
        ctx.alias(y, data)  # updated in place
    else:
        emit_views(em, y_shape, [View(ctx.addr(data), ys)], [View(ctx.addr(y), ys)], [],
                   _per_core(ctx, y_shape))
    if op == "ScatterND":
        i_shape = _shape(ctx, idx)
        k = i_shape[-1]
        piece = list(y_shape[k:])
        row, pz = prod(piece), [0] * len(piece)
        for dims, in_idx, rows, first in index_walks(i_shape[:-1], prod(y_shape[:k])):
            sources = [View(ctx.addr(idx), [s * k for s in in_idx] + pz, first * k),
                       View(ctx.addr(updates), [s * row for s in in_idx] + row_major(piece),
                            first * row)]
            dst = View(ctx.addr(y), [r * row for r in rows] + ys[k:], keep_repeats=True)
            emit_views(em, dims + piece, sources, [dst], [])
    else:  # element-wise scatter / cache rows: the updates land on the slice they line up with
        sources = [View(ctx.addr(updates), row_major(u_shape))]
        if idx:
            sources.insert(0, View(ctx.addr(idx), row_major(_shape(ctx, idx))))
        dst = [s for s in ys[len(ys) - len(u_shape):]]
        emit_views(em, u_shape, sources, [View(ctx.addr(y), dst)], [])
    em.finish()


def lower_one_hot(ctx: LoweringContext, node: Node) -> None:
    idx, y = node.inputs[0], node.outputs[0]
    i_shape, y_shape = _shape(ctx, idx), _shape(ctx, y)
    axis = _axis(node, len(y_shape), node.attrs.get("axis", -1))
    irm = row_major(i_shape)
    src = irm[:axis] + [0] + irm[axis:]
    em = LayerEmitter(ctx, node, "vector unit")
    emit_views(em, y_shape, [View(ctx.addr(idx), src)], [View(ctx.addr(y), row_major(y_shape))],
               [("sub", 1), ("max", 1)])
    em.finish()


LOWERINGS: dict = {
    "Pad": lower_pad,
    "CenterCropPad": lower_pad,
    "Tile": lower_tile,
    "Resize": lower_resize,
    "Upsample": lower_resize,
    "DepthToSpace": lower_depth_to_space,
    "SpaceToDepth": lower_depth_to_space,
    "GatherND": lower_gather_nd,
    "ScatterND": lower_scatter,
    "ScatterElements": lower_scatter,
    "Scatter": lower_scatter,
    "TensorScatter": lower_scatter,
    "OneHot": lower_one_hot,
    "GridSample": lower_grid_sample,
    "AffineGrid": lower_affine_grid,
    "RoiAlign": lower_roi_align,
    "MaxUnpool": lower_max_unpool,
    "Col2Im": lower_col2im,
}
