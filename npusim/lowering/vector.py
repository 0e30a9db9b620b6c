"""Element-wise, activation, normalization, reduction, pooling and data-moving ops on the
vector unit.

Every op here becomes one layer of tiles. A tile loads what it reads (MVIN), runs a few
VECTOR instructions over it and stores what it writes (MVOUT); a VECTOR instruction of
``elements`` elements and ``passes`` passes takes ``ceil(elements / (lanes * alus)) *
latency[op] * passes`` cycles (``kernels/core.py``), so an op's cost is its list of
*steps* below, applied to each tile. The vector unit is in order, so a tile's steps run one
after another.

Cost table (op -> steps; every step runs over all output elements of a tile unless marked
"per row", which runs over one value per reduced row; ``T = ceil(log2(L))`` reduce levels,
``L`` the reduced length):

=====================  ====================================================================
Relu                   max
Clip                   max, min
Sigmoid / Tanh         sigmoid / tanh
Gelu / Erf             gelu / erf
Silu, Swish            sigmoid, mul      (ONNX graphs spell it Sigmoid + Mul: two layers)
HardSigmoid            mul, add, max, min             (alpha*x + beta, clamped to [0, 1])
HardSwish              mul, add, max, min, mul
Add / Sub / Mul / Div  add / sub / mul / div
Pow                    mul if the exponent is the constant 2, sqrt if 0.5, else pow
Sqrt / Reciprocal      sqrt / recip
Exp / Log / Neg        exp / log / sub
Abs                    sub, max                       (max(x, -x))
LeakyRelu / PRelu      mul, max
Max / Min (n inputs)   max / min with n - 1 passes
Cast                   cast
Where                  max                            (a select: one compare-class pass)
Expand                 cast                           (a move that replicates the input)
Transpose              cast                           (an on-chip move; the DMA gathers)
BatchNormalization     mul, add           (scale and shift precomputed from scale, B,
                                           mean, var: loads X, scale and B)
ReduceSum              add; per row: reduce x T
ReduceMean             add; per row: reduce x T, mul
ReduceMax / ReduceMin  max / min; per row: reduce x T
GlobalAveragePool      as ReduceMean over H*W;  GlobalMaxPool as ReduceMax over H*W
Softmax                max; per row: reduce x T; sub, exp, add; per row: reduce x T; div
LogSoftmax             max; per row: reduce x T; sub, exp, add; per row: reduce x T, log; sub
LayerNormalization     add; per row: reduce x T, mul (mean);  sub, mul (square), add;
                       per row: reduce x T, mul (variance), add (eps), rsqrt;
                       mul (normalize), mul (gamma), add (beta, when B is given)
SimplifiedLayerNorm.   mul (square), add; per row: reduce x T, mul (mean), add (eps), rsqrt;
 / RMSNormalization    mul (normalize), mul (gamma)                       (RMS norm)
Instance/GroupNorm.    as LayerNormalization, per (image, channel) / (image, group) row
ReduceL1/L2/Prod/...,  ArgMax, Hardmax, CumSum (log-step scan), TopK (k selection rounds or
Lp/MeanVarianceNorm.   a bitonic sort), DynamicQuantizeLinear: see ROW_OPS
MaxPool                max with kh*kw passes      (every output element compares its window)
AveragePool            add with kh*kw passes, mul (the window sum, scaled)
Concat, Split, Slice   no vector step: DMA in, DMA out (a Concat whose inputs could be
                       written in place still costs one copy here)
Gather                 no vector step: load the indices, then the gathered rows, store them;
                       from a table whose load moves fewer bytes than the rows' requests:
                       the table loaded by each tile, a move pass (gathered on chip)
GatherBlockQuantized   sub, mul (DequantizeLinear's; none on an int8 config): as Gather, the
                       rows read packed with their blocks' scales (lowering/weights.py)
=====================  ====================================================================

Softmax and LogSoftmax follow opset 13 (one axis, default -1); LayerNormalization
normalizes over every axis from ``axis`` on. Reductions take their axes from the
attribute, a constant input, or (when the axes input's value is unknown) from comparing
the input and output shapes; axes kept between reduced ones count as inner ones (a row
per kept index of all its reduced values, as if transposed together).

A reduction of a row of ``L`` values costs one element pass of its combining op (every
value folded into the row's partial results) plus ``ceil(log2 L)`` passes of ``reduce``
(one level of the add/compare tree each) over the row results; the total is the same
however the rows are tiled.

Tiling. A tile must fit half the scratchpad (double buffering), counting everything it
holds: every input slice and the output slice, ``precision`` bytes per element.

- Element-wise ops (and Expand, Cast, Where, Transpose, Slice, Split, Concat, Gather) walk
  the output in row-major order: a tile is ``t`` consecutive indices of one axis ``a``
  times all of the axes after it (after merging axes that are contiguous for every
  operand). ``a`` is the outermost axis for which such a tile fits, and tiles are at most
  ``ceil(elements / num_cores)`` elements, so every core gets work when there is enough.
  Each operand loads exactly the part of it the tile reads: a broadcast operand (a bias of
  shape [C], a scalar) is loaded once per tile, never replicated in DRAM traffic.
- Reductions, Softmax, the normalizations, scans and TopK view their input as ``[O, L,
  I]`` (``L`` the reduced axes) and tile along ``O`` (and ``I``), whole rows per tile,
  through one emitter (``emit_row_layer``) that attention and the fused ops use too. A
  row too long for half the scratchpad is streamed in chunks by one group of tiles (in
  order on one core): a reduction (or TopK) accumulates chunk by chunk and stores what it
  keeps at the end; Softmax and LayerNormalization make three passes over the row
  (statistics, then the intermediate written to the output, then the final values), which
  costs the extra DRAM traffic a real spill costs.
- Pooling tiles ``p`` output rows (and ``c`` channels) of one image, loading the input rows
  their windows need (clipped at the padded borders).

Layout: tensors are row-major in their own shape (``ctx.addr``), except that pooling reads
NHWC activations, as ``conv.py`` writes them. Every element is ``precision`` bytes, also
for indices and booleans. Where a step needs more loaded operands than its two dependency
slots hold, a zero-element VECTOR (zero cycles) joins them first.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from functools import lru_cache
from math import ceil, prod
from typing import Callable

import numpy as np

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.kernels import isa
from npusim.frontend.quantized import INT8
from npusim.lowering.context import LoweringContext
from npusim.lowering.layout import lower_relabel
from npusim.lowering.weights import dequantized_weight, gather_block_weight
from npusim.lowering.conv import begin_pads  # the padding rule of Conv
from npusim.lowering.fusion import immediate
from npusim.program import Instr, LayerInfo

MOVE = "cast"  # a data move through the vector unit: one 1-cycle pass, no arithmetic

# --------------------------------------------------------------------------- cost tables

ELEMENTWISE: dict[str, list[tuple[str, int]]] = {
    "Relu": [("max", 1)],
    "Clip": [("max", 1), ("min", 1)],
    "Sigmoid": [("sigmoid", 1)],
    "Tanh": [("tanh", 1)],
    "Gelu": [("gelu", 1)],
    "Erf": [("erf", 1)],
    "Silu": [("sigmoid", 1), ("mul", 1)],
    "Swish": [("sigmoid", 1), ("mul", 1)],
    "HardSigmoid": [("mul", 1), ("add", 1), ("max", 1), ("min", 1)],
    "HardSwish": [("mul", 1), ("add", 1), ("max", 1), ("min", 1), ("mul", 1)],
    "Add": [("add", 1)],
    "Sub": [("sub", 1)],
    "Mul": [("mul", 1)],
    "Div": [("div", 1)],
    "Pow": [("pow", 1)],  # a constant exponent 2 or 0.5 is cheaper: see POW_CONST
    "Sqrt": [("sqrt", 1)],
    "Reciprocal": [("recip", 1)],
    "Exp": [("exp", 1)],
    "Log": [("log", 1)],
    "Neg": [("sub", 1)],
    "Abs": [("sub", 1), ("max", 1)],
    "LeakyRelu": [("mul", 1), ("max", 1)],
    "PRelu": [("mul", 1), ("max", 1)],
    "Max": [("max", 1)],  # n inputs: n - 1 passes
    "Min": [("min", 1)],
    "Cast": [("cast", 1)],
    "Where": [("max", 1)],
    "Expand": [(MOVE, 1)],
    "BatchNormalization": [("mul", 1), ("add", 1)],
    # comparisons and logic (exporters use them for masks and position ids): one
    # compare-class pass; rounding is a conversion
    "Equal": [("sub", 1)], "Less": [("sub", 1)], "Greater": [("sub", 1)],
    "LessOrEqual": [("sub", 1)], "GreaterOrEqual": [("sub", 1)], "IsNaN": [("sub", 1)],
    "IsInf": [("sub", 1)], "Not": [("sub", 1)], "And": [("min", 1)], "Or": [("max", 1)],
    "Sign": [("max", 1)], "Floor": [("cast", 1)], "Ceil": [("cast", 1)],
    "Round": [("cast", 1)],
    # GatherElements: reads the indices and one data element per output element; the
    # index values are unknown, so the data read is costed as the slice of data the
    # output lines up with (a data move through the vector unit)
    "GatherElements": [(MOVE, 1)],
    # activations with a negative branch: the branch, then a select (one compare pass)
    "Elu": [("exp", 1), ("sub", 1), ("mul", 1), ("max", 1)],  # alpha*(exp(x)-1) | x
    "Selu": [("exp", 1), ("sub", 1), ("mul", 1), ("max", 1), ("mul", 1)],  # ... * gamma
    "Celu": [("mul", 1), ("exp", 1), ("sub", 1), ("mul", 1), ("min", 1), ("max", 1),
             ("add", 1)],  # max(0,x) + min(0, alpha*(exp(x/alpha)-1))
    "ThresholdedRelu": [("sub", 1), ("max", 1)],  # compare with alpha, select
    "Shrink": [("sub", 1), ("sub", 1), ("add", 1), ("sub", 1), ("max", 1), ("max", 1)],
    "Softplus": [("exp", 1), ("add", 1), ("log", 1)],  # log(1 + exp(x))
    "Softsign": [("sub", 1), ("max", 1), ("add", 1), ("div", 1)],  # x / (1 + |x|)
    "Mish": [("exp", 1), ("add", 1), ("log", 1), ("tanh", 1), ("mul", 1)],
    "Sum": [("add", 1)],  # n inputs: n - 1 passes
    "Mean": [("add", 1), ("mul", 1)],  # n - 1 adds, one scale by 1/n
    "CastLike": [("cast", 1)],
    "Mod": [("div", 1), ("cast", 1), ("mul", 1), ("sub", 1)],  # x - floor(x/y)*y
    # integer logic: one ALU pass each (a shift is a multiply by a power of two)
    "BitShift": [("mul", 1)], "BitwiseAnd": [("min", 1)], "BitwiseOr": [("max", 1)],
    "BitwiseXor": [("sub", 1)], "BitwiseNot": [("sub", 1)], "Xor": [("sub", 1)],
    # trigonometry: the vector unit's function pipeline, charged at the exp latency
    "Sin": [("exp", 1)], "Cos": [("exp", 1)], "Asin": [("exp", 1)], "Acos": [("exp", 1)],
    "Atan": [("exp", 1)], "Tan": [("exp", 1), ("exp", 1), ("div", 1)],  # sin / cos
    "Sinh": [("exp", 1), ("recip", 1), ("sub", 1), ("mul", 1)],  # (e^x - e^-x) / 2
    "Cosh": [("exp", 1), ("recip", 1), ("add", 1), ("mul", 1)],
    "Asinh": [("mul", 1), ("add", 1), ("sqrt", 1), ("add", 1), ("log", 1)],
    "Acosh": [("mul", 1), ("sub", 1), ("sqrt", 1), ("add", 1), ("log", 1)],
    "Atanh": [("add", 1), ("sub", 1), ("div", 1), ("log", 1), ("mul", 1)],
    "Trilu": [("max", 1)],  # keep or zero each element: a select
    "SwiGLU": [("mul", 1), ("sigmoid", 1), ("mul", 1), ("mul", 1)],  # A*sigmoid(alpha*A)*B
    "ReverseSequence": [(MOVE, 1)],  # rows copied in reverse order
    # quantization: x / scale (a multiply by the reciprocal) + zero point, round, saturate
    "QuantizeLinear": [("mul", 1), ("add", 1), ("cast", 1), ("max", 1), ("min", 1)],
    "DequantizeLinear": [("sub", 1), ("mul", 1)],  # CONVERSIONS: free on an int8 config
    # local response normalization: square, the sum over `size` neighbouring channels,
    # scale, bias, ^beta, divide (the window sum costs `size` add passes)
    "LRN": [("mul", 1), ("add", 1), ("mul", 1), ("add", 1), ("pow", 1), ("div", 1)],
}
# element-wise ops that index, replicate or window their input: never in a shared pass
# (fusion.vector_groups); the others read one element of each input per output element
NOT_IN_PASSES = {"GatherElements", "Expand", "Trilu", "ReverseSequence", "LRN",
                 "QuantizeLinear", "DequantizeLinear"}
# conversions between the config's compute type and int8 (the ones frontend.quantized
# keeps: at a float boundary); DynamicQuantizeLinear also finds the scale, always charged
CONVERSIONS = ("QuantizeLinear", "DequantizeLinear")
POW_CONST = {2.0: [("mul", 1)], 0.5: [("sqrt", 1)]}  # Pow with a known constant exponent
VARIADIC = ("Max", "Min", "Sum", "Mean")  # the first step takes number of inputs - 1 passes
# inputs that are not data (a shape, a diagonal offset, a type template): not loaded
DATA_INPUTS = {"Expand": 1, "Trilu": 1, "CastLike": 1, "ReverseSequence": 1}

EL, ROW = "element", "row"  # a step over every element, or over one value per row
TREE = -1  # passes placeholder: ceil(log2(L)) levels of the reduce tree


@dataclass(frozen=True)
class Phase:
    """One pass over the rows. When a row fits a tile all phases run in that one tile;
    otherwise each phase streams the row in chunks (its ROW steps after the last chunk)."""

    steps: tuple[tuple[str, int, str], ...]  # (vector op, passes or TREE, EL or ROW)
    reads: str = "x"  # "x": the input; "y": what the previous phase wrote to the output
    writes: bool = False  # streams its element results to the output (when chunked)
    params: bool = False  # needs the per-column parameters (a norm's Scale, B)
    shift: bool = False  # its last step adds the optional shift B (dropped without one)


def _reduce_phase(op: str, *row_after: tuple[str, int, str]) -> list[Phase]:
    return [Phase(((op, 1, EL), ("reduce", TREE, ROW)) + row_after)]


_ABS = (("sub", 1, EL), ("max", 1, EL))  # |x| = max(x, -x)
_SQUARE_SUM = (("mul", 1, EL), ("add", 1, EL))
_MEAN = Phase((("add", 1, EL), ("reduce", TREE, ROW), ("mul", 1, ROW)))
_CENTRED_VARIANCE = Phase((("sub", 1, EL), ("mul", 1, EL), ("add", 1, EL),  # (x - mean)^2
                           ("reduce", TREE, ROW), ("mul", 1, ROW), ("add", 1, ROW),
                           ("rsqrt", 1, ROW)), writes=True)
_NORMALIZE = [_MEAN, _CENTRED_VARIANCE,  # normalize, gamma, beta (beta dropped without B)
              Phase((("mul", 1, EL), ("mul", 1, EL), ("add", 1, EL)), reads="y", writes=True,
                    params=True, shift=True)]
# RMS norm (ONNX's RMSNormalization, ONNX Runtime's SimplifiedLayerNormalization):
# x * rsqrt(mean(x^2) + eps) * scale
_RMS_NORMALIZE = [
    Phase(_SQUARE_SUM + (("reduce", TREE, ROW), ("mul", 1, ROW), ("add", 1, ROW),
                         ("rsqrt", 1, ROW))),  # mean of squares, + eps, rsqrt
    Phase((("mul", 1, EL), ("mul", 1, EL)), writes=True, params=True),  # normalize, scale
]

# op -> its phases, or (for an op whose steps depend on how many values it keeps per row,
# TopK) a function (kept values, row length) -> phases
ROW_OPS: dict[str, list[Phase] | Callable[[int, int], list[Phase]]] = {
    "ReduceSum": _reduce_phase("add"),
    "ReduceMean": _reduce_phase("add", ("mul", 1, ROW)),
    "ReduceMax": _reduce_phase("max"),
    "ReduceMin": _reduce_phase("min"),
    "ReduceProd": _reduce_phase("mul"),
    "ReduceLogSum": _reduce_phase("add", ("log", 1, ROW)),
    "ReduceL1": [Phase(_ABS + (("add", 1, EL), ("reduce", TREE, ROW)))],
    "ReduceL2": [Phase(_SQUARE_SUM + (("reduce", TREE, ROW), ("sqrt", 1, ROW)))],
    "ReduceSumSquare": [Phase(_SQUARE_SUM + (("reduce", TREE, ROW),))],
    "ReduceLogSumExp": [
        Phase((("max", 1, EL), ("reduce", TREE, ROW))),
        Phase((("sub", 1, EL), ("exp", 1, EL), ("add", 1, EL), ("reduce", TREE, ROW),
               ("log", 1, ROW), ("add", 1, ROW))),
    ],
    # the extreme value, then one compare pass over the row for its position
    "ArgMax": [Phase((("max", 1, EL), ("reduce", TREE, ROW), ("sub", 1, EL)))],
    "ArgMin": [Phase((("min", 1, EL), ("reduce", TREE, ROW), ("sub", 1, EL)))],
    "Hardmax": [Phase((("max", 1, EL), ("reduce", TREE, ROW), ("sub", 1, EL), ("max", 1, EL)),
                      writes=True)],
    # prefix sums: log2(L) shifted-add passes over the row (Hillis-Steele scan)
    "CumSum": [Phase((("add", TREE, EL),), writes=True)],
    "CumProd": [Phase((("mul", TREE, EL),), writes=True)],
    "Softmax": [
        Phase((("max", 1, EL), ("reduce", TREE, ROW))),
        Phase((("sub", 1, EL), ("exp", 1, EL), ("add", 1, EL), ("reduce", TREE, ROW)),
              writes=True),
        Phase((("div", 1, EL),), reads="y", writes=True),
    ],
    "LogSoftmax": [
        Phase((("max", 1, EL), ("reduce", TREE, ROW))),
        Phase((("sub", 1, EL), ("exp", 1, EL), ("add", 1, EL), ("reduce", TREE, ROW),
               ("log", 1, ROW)), writes=True),
        Phase((("sub", 1, EL),), reads="y", writes=True),
    ],
    "LayerNormalization": _NORMALIZE,
    "InstanceNormalization": _NORMALIZE,
    "GroupNormalization": _NORMALIZE,
    "MeanVarianceNormalization": [_MEAN, _CENTRED_VARIANCE,
                                  Phase((("mul", 1, EL),), reads="y", writes=True)],
    "RMSNormalization": _RMS_NORMALIZE,
    "SimplifiedLayerNormalization": _RMS_NORMALIZE,
    "LpNormalization": [  # p = 2 (p = 1: "LpNormalization/p1")
        Phase(_SQUARE_SUM + (("reduce", TREE, ROW), ("rsqrt", 1, ROW))),
        Phase((("mul", 1, EL),), writes=True),
    ],
    "LpNormalization/p1": [
        Phase(_ABS + (("add", 1, EL), ("reduce", TREE, ROW), ("recip", 1, ROW))),
        Phase((("mul", 1, EL),), writes=True),
    ],
    # min and max of the whole tensor, scale and zero point, then QuantizeLinear's steps
    "DynamicQuantizeLinear": [
        Phase((("min", 1, EL), ("reduce", TREE, ROW), ("max", 1, EL), ("reduce", TREE, ROW),
               ("sub", 1, ROW), ("div", 1, ROW), ("div", 1, ROW), ("cast", 1, ROW))),
        Phase(tuple((op, n, EL) for op, n in ELEMENTWISE["QuantizeLinear"]), writes=True),
    ],
}
ROW_OPS["GlobalAveragePool"] = ROW_OPS["ReduceMean"]
ROW_OPS["GlobalMaxPool"] = ROW_OPS["ReduceMax"]
ROW_OPS["GlobalLpPool"] = ROW_OPS["ReduceL2"]  # p = 2
ROW_OPS["GlobalLpPool/p1"] = ROW_OPS["ReduceL1"]
REDUCING = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSum",
            "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp", "ArgMax", "ArgMin",
            "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
# per-channel (or per-column) parameter inputs of the normalizations
PARAM_INPUTS = {"LayerNormalization": (1, 3), "InstanceNormalization": (1, 3),
                "GroupNormalization": (1, 3), "RMSNormalization": (1, 2),
                "SimplifiedLayerNormalization": (1, 2)}


def _topk_phases(k: int, L: int) -> list[Phase]:
    """TopK over rows of L: k selection rounds (the row maximum, then a compare pass that
    retires it) or a bitonic sort of the row (T (T + 1) / 2 compare-exchange passes,
    T = ceil(log2 L)), whichever makes fewer element passes."""
    T = tree_levels(L)
    if 2 * k <= T * (T + 1) // 2:
        steps = (("max", k, EL), ("reduce", k * T, ROW), ("sub", k, EL))
    else:
        steps = (("max", T * (T + 1) // 2, EL),)
    return [Phase(steps)]


ROW_OPS["TopK"] = _topk_phases


def _nms_phases(rounds: int, L: int) -> list[Phase]:
    """NonMaxSuppression over one class's L candidate scores keeping ``rounds`` boxes: the
    score threshold, then per round over every candidate the row's max (its element pass
    and T tree levels), the IoU with the box kept (corners: 2 max, 2 min; width, height: 2
    sub, 2 max clamps; intersection: a mul; union: an add and a sub; against the
    threshold: a mul and a sub) and the suppression (a select: max)."""
    s, T = rounds, tree_levels(L)
    return [Phase((("sub", 1, EL), ("max", 6 * s, EL), ("min", 2 * s, EL), ("sub", 4 * s, EL),
                   ("mul", 2 * s, EL), ("add", s, EL), ("reduce", s * T, ROW)))]


ROW_OPS["NonMaxSuppression"] = _nms_phases
# a class none of whose boxes survive: the threshold, and one max that finds no candidate
ROW_OPS["NonMaxSuppression/empty"] = [Phase((("sub", 1, EL), ("max", 1, EL),
                                             ("reduce", TREE, ROW)))]
# per box, a row of its 4 coordinates: the area ((x2 - x1) (y2 - y1)); from a centre and
# size, the corners (half sizes: 2 mul; 2 sub, 2 add) and the area (w h)
ROW_OPS["NonMaxSuppression/corners"] = [Phase((("sub", 2, ROW), ("mul", 1, ROW)))]
ROW_OPS["NonMaxSuppression/centres"] = [Phase((("mul", 3, ROW), ("sub", 2, ROW),
                                               ("add", 2, ROW)))]


POOL_STEPS = {  # K = the window size (kh * kw for 2-D); LpPool: see lower_pool
    "MaxPool": lambda K: [("max", K)],
    "AveragePool": lambda K: [("add", K), ("mul", 1)],
    # a depthwise convolution: one multiply and one add per tap (its weights are loaded
    # with the window; a bias adds one more add; weights stored narrower are widened
    # first, dequantize_steps over the channels' taps)
    "Conv": lambda K: [("mul", K), ("add", K)],
}

MAX_DMA_PER_OPERAND = 8  # DMA descriptors one operand of a tile may take
MAX_SLOTS = isa.N_TILE_SLOTS


def tree_levels(n: int) -> int:
    """ceil(log2(n)): levels of a binary add/compare tree reducing n values (0 for n <= 1)."""
    return max(0, int(n) - 1).bit_length()


# --------------------------------------------------------------------------- tile emission

@dataclass(frozen=True)
class Dma:
    """One DMA descriptor relative to the tile's base address in ``slot`` (bytes)."""

    slot: int
    offset: int
    n_outer: int
    outer_stride: int
    n_inner: int
    inner_stride: int
    run: int
    after: int = -1  # loads only: index (in the tile's load list) of a load to wait for


def build_tile(loads, steps, stores, early_stores=()) -> list[np.ndarray]:
    """Instruction rows of a tile: every load, the vector steps in a chain (the first waits
    for the loads, two dependency slots at a time), then the stores after the last step;
    ``early_stores`` = ((step index, stores), ...) store after an earlier step too."""
    rows = []
    for d in loads:
        rows.append(Instr.dma(True, d.slot, d.offset, d.n_outer, d.outer_stride, d.n_inner,
                              d.inner_stride, d.run, deps=(d.after,) if d.after >= 0 else ()))
    awaited = {d.after for d in loads if d.after >= 0}
    pending = [i for i in range(len(loads)) if i not in awaited]
    chain = [s for s in steps if s[1] > 0 and s[2] > 0]
    if chain:
        joins = max(0, len(pending) - len(chain) - 1)
    else:
        joins = len(pending) - 1 if len(pending) > 2 else 0
    chain = [("add", 0, 1)] * joins + chain  # zero-element VECTOR: waits, takes no cycles
    last = None
    step_rows = []
    for op, elements, passes in chain:
        deps = [last] if last is not None else []
        while len(deps) < 2 and pending:
            deps.append(pending.pop(0))
        rows.append(Instr.vector(op, elements, passes, deps=tuple(deps)))
        last = len(rows) - 1
        step_rows.append(last)
    final = (last,) if last is not None else tuple(pending)
    live = [k for k, s in enumerate(steps) if s[1] > 0 and s[2] > 0]  # steps kept in chain
    for k, early in early_stores:
        after = (step_rows[joins + live.index(k)],) if k in live else final
        for d in early:
            rows.append(Instr.dma(False, d.slot, d.offset, d.n_outer, d.outer_stride,
                                  d.n_inner, d.inner_stride, d.run, deps=after))
    for d in stores:
        rows.append(Instr.dma(False, d.slot, d.offset, d.n_outer, d.outer_stride, d.n_inner,
                              d.inner_stride, d.run, deps=final))
    return rows


class LayerEmitter:
    """Begins the layer of ``node`` and adds its groups and tiles (templates deduplicated).

    A layer that is one part of a node (attention's softmax) passes ``info`` and ``preds``;
    it then produces ``outputs`` instead of the node's outputs."""

    def __init__(self, ctx: LoweringContext, node: Node, how: str, *,
                 info: LayerInfo | None = None, preds: list[int] | None = None,
                 outputs: list[str] | None = None):
        g = ctx.graph
        self.ctx, self.node = ctx, node
        out = next((t for t in node.outputs if t), None)
        self.info = info or LayerInfo(name=node.name, op_type=node.op_type,
                                      input_shapes=[g.shape(t) for t in node.inputs if t],
                                      output_shape=g.shape(out) if out else (), macs=0,
                                      mapping="", mapping_source="")
        self.info.mapping_source = how
        self.outputs = list(node.outputs if outputs is None else outputs)
        self.layer = ctx.builder.begin_layer(self.info,
                                             ctx.preds(node) if preds is None else preds)
        self.n_tiles = 0

    def group(self) -> None:
        self.ctx.builder.begin_group()

    def tile(self, bases, loads, steps, stores, early_stores=()) -> None:
        loads, steps, stores = tuple(loads), tuple(steps), tuple(stores)
        early = tuple((k, tuple(d)) for k, d in early_stores)
        key = ("vector", self.layer, loads, steps, stores, early)
        tpl = self.ctx.builder.template(key, lambda: build_tile(loads, steps, stores, early))
        self.ctx.builder.add_tile(tpl, tuple(bases))
        self.n_tiles += 1

    def finish(self) -> int:
        self.info.mapping_source += f": {self.n_tiles} tiles"
        for out in self.outputs:
            if out:
                self.ctx.producer_layer[out] = self.layer
        return self.layer


# --------------------------------------------------------------------------- boxes -> DMA

def box_dims(counts, strides, keep_repeats=False):
    """The DRAM shape of a box of ``counts`` indices with element ``strides``.

    Returns (element offset of the lowest address, levels [(count, stride)] outer to inner,
    contiguous run length, elements moved). Broadcast (stride 0) axes read the same data
    again and are dropped, unless ``keep_repeats`` (a gather that re-reads a row).
    """
    dims, adj = [], 0
    for c, s in zip(counts, strides):
        if c <= 1 or (s == 0 and not keep_repeats):
            continue
        if s < 0:  # walk a reversed axis from its low end
            adj += (c - 1) * s
            s = -s
        dims.append((c, s))
    dims.sort(key=lambda d: -d[1] if d[1] else -float("inf"))  # repeats outermost
    merged: list[tuple[int, int]] = []
    for c, s in dims:
        if merged and merged[-1][1] == c * s:
            merged[-1] = (merged[-1][0] * c, s)
        else:
            merged.append((c, s))
    run = merged.pop()[0] if merged and merged[-1][1] == 1 else 1
    return adj, merged, run, run * prod(c for c, _ in merged)


def box_dmas(slot, counts, strides, prec, keep_repeats=False, after=-1):
    """DMA descriptors moving one box (at most two strided levels each); and its elements."""
    adj, levels, run, elements = box_dims(counts, strides, keep_repeats)
    extra, last2 = levels[:-2], levels[-2:]
    last2 = [(1, 0)] * (2 - len(last2)) + last2
    out = []
    for idx in itertools.product(*(range(c) for c, _ in extra)):
        off = adj + sum(i * s for i, (_, s) in zip(idx, extra))
        out.append(Dma(slot, off * prec, last2[0][0], last2[0][1] * prec, last2[1][0],
                       last2[1][1] * prec, run * prec, after))
    return out, elements


def _n_dmas(counts, strides, keep_repeats=False) -> int:
    _, levels, _, _ = box_dims(counts, strides, keep_repeats)
    return prod(c for c, _ in levels[:-2])


# --------------------------------------------------------------------------- views

@dataclass
class View:
    """A tensor seen over the layer's iteration space: element ``offset`` plus index times
    ``strides`` (0 along broadcast axes)."""

    addr: int
    strides: list[int]
    offset: int = 0
    keep_repeats: bool = False
    after: int = -1  # index of the view whose load must complete first (gather indices)


def row_major(shape) -> list[int]:
    strides, acc = [], 1
    for d in reversed(list(shape)):
        strides.append(acc)
        acc *= d
    return list(reversed(strides))


def index_walks(index_shape, table: int) -> list[tuple[list[int], list[int], list[int], int]]:
    """Which rows of a ``table``-row table ``K = prod(index_shape)`` indices of unknown
    value pick (gathers, scatters): spread evenly, index ``k`` row ``k * (table // K)``; with
    more indices than rows, the whole table ``K // table`` times, then the rest spread
    evenly (each row ``K // table`` or ``K // table + 1`` times). As walks ``(dims, index
    strides, row strides, first index)``: the indices from ``first`` in their flat order,
    over ``dims`` (the index dims, or passes x rows), ``index strides`` apart in that order
    and ``row strides`` rows apart in the table."""
    K = max(1, prod(index_shape))
    if K <= table:
        flat = row_major(index_shape)
        return [(list(index_shape), flat, [(table // K) * s for s in flat], 0)]
    walks = [([K // table, table], [table, 1], [0, 1], 0)]
    if K % table:
        rest = K % table
        walks.append(([rest], [1], [table // rest], K - rest))
    return walks


def broadcast_view(addr: int, shape, out_shape) -> View:
    """The view of an operand of ``shape`` broadcast (numpy rules) to ``out_shape``."""
    r = len(out_shape)
    padded = (1,) * (r - len(shape)) + tuple(shape)
    rm = row_major(padded)
    return View(addr, [0 if (p == 1 and o != 1) else s for p, o, s in zip(padded, out_shape, rm)])


def coalesce(shape, views: list[View]):
    """Drop size-1 axes and merge neighbours that are contiguous for every view."""
    D: list[int] = []
    S: list[list[int]] = [[] for _ in views]
    for j, d in enumerate(shape):
        if d == 1:
            continue
        if D and all(sv[-1] == v.strides[j] * d for sv, v in zip(S, views)):
            D[-1] *= d
            for sv, v in zip(S, views):
                sv[-1] = v.strides[j]
            continue
        D.append(d)
        for sv, v in zip(S, views):
            sv.append(v.strides[j])
    if not D:
        return [1], [[0] for _ in views]
    return D, S


@lru_cache(maxsize=4096)
def _split_axis(D: tuple[int, ...], S: tuple[tuple[int, ...], ...], keeps: tuple[bool, ...],
                per_core: int, cap: int, q: int) -> tuple[int, int] | None:
    """Where :func:`emit_views` cuts the coalesced iteration space ``D`` (element strides
    ``S`` of each view): the outermost axis ``a`` whose inner axes fit, and the tile ``t``
    along it, the largest that keeps a tile within ``per_core`` elements, ``cap`` scratchpad
    elements and MAX_DMA_PER_OPERAND descriptors per operand, split near-evenly and (on the
    innermost axis) in whole DMA requests of ``q`` elements. None: nothing fits. A pure
    function of the shapes, remembered: a network repeats its element-wise layers."""
    k = len(D) - 1

    def feasible(a, t):
        inner = prod(D[a + 1:])
        if t > 1 and t * inner > per_core:
            return False
        c = [t] + list(D[a + 1:])
        used = 0
        for keep, sv in zip(keeps, S):
            if _n_dmas(c, sv[a:], keep) > MAX_DMA_PER_OPERAND:
                return False
            used += box_dims(c, sv[a:], keep)[3]
        return used <= cap

    for a in range(k + 1):
        if prod(D[a + 1:]) > per_core or not feasible(a, 1):
            continue
        lo, hi = 1, D[a]
        while lo < hi:  # the largest feasible t
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if feasible(a, mid) else (lo, mid - 1)
        n = ceil(D[a] / lo)
        t = ceil(D[a] / n)  # near-even split: no tiny last tile
        if a == k and q <= t < D[a]:
            t = t // q * q  # whole DMA requests
        return a, t
    return None


def _walks(shape, views: list[View], block: int) -> list[tuple[list[int], list[list[int]]]]:
    """The iteration spaces :func:`emit_views` may walk ``shape`` as, each ``(dims, every
    view's strides)``: in the output's order; in each other view's storage order (its
    strides descending); and blocked: the axes along which some view is contiguous moved
    innermost (in each order of them), each cut to ``block`` elements (a DMA request's)
    when longer, its outer part left in place. A transpose's source read in the output's
    order is runs of one element where its own order reads whole rows; where each side is
    contiguous along another axis (NHWC <-> NCHW, a square transpose), only a block of both
    axes reads and writes whole requests on both sides. The walk taken is the one whose
    tiles move the fewest DMA requests."""
    r = len(shape)

    def walk(order, cut=()):
        dims = [shape[j] // (block if j in cut else 1) for j in order]
        return dims, [[v.strides[j] * (block if j in cut else 1) for j in order]
                      for v in views]

    # a broadcast or gathered view has no storage order of its own
    own = [v for v in views if not v.keep_repeats
           and not any(s == 0 for s, d in zip(v.strides, shape) if d > 1)]
    orders = [tuple(range(r))]
    for v in own:
        order = tuple(sorted(range(r), key=lambda j: -abs(v.strides[j])))
        if order not in orders:
            orders.append(order)
    walks = [walk(o) for o in orders]
    units = sorted({j for v in own
                    for j, (st, d) in enumerate(zip(v.strides, shape)) if abs(st) == 1 and d > 1})
    if len(units) < 2:
        return walks  # one contiguous axis: a storage order has it innermost already
    cut = [j for j in units if shape[j] > block and shape[j] % block == 0]
    inners = (itertools.permutations(units) if len(units) <= 3  # (a transpose: 2)
              else [tuple(units), tuple(reversed(units))])
    for inner in inners:
        rest = [j for j in range(r) if j not in units or j in cut]
        dims, strides = walk(rest, cut)
        for j in inner:  # the blocks (or whole axes), innermost
            dims.append(block if j in cut else shape[j])
            for sv, v in zip(strides, views):
                sv.append(v.strides[j])
        walks.append((dims, strides))
    return walks


def _requests(D, S, keeps, a, t, prec: int, request_bytes: int) -> int:
    """DMA requests of every view over the tiles of the split ``(a, t)`` of ``D``."""
    outer = prod(D[:a])
    total = 0
    for tc, n in ((t, D[a] // t), (D[a] % t, 1)):
        if tc == 0 or n == 0:
            continue
        for keep, sv in zip(keeps, S):
            _, _, run, elements = box_dims([tc] + list(D[a + 1:]), sv[a:], keep)
            total += outer * n * (elements // run) * ceil(run * prec / request_bytes)
    return total


def emit_views(em: LayerEmitter, shape, sources: list[View], dests: list[View],
               steps: list[tuple[str, int]], per_core_elements: int | None = None) -> None:
    """Tile the iteration space ``shape``: each tile loads every source's box, runs
    ``steps`` (vector op, passes) over the tile's elements and stores every dest's box."""
    ctx = em.ctx
    prec = ctx.precision
    views = sources + dests
    if len(views) > MAX_SLOTS:
        raise NpusimError(f"{em.node.op_type} '{em.node.name}': {len(views)} distinct tensors; "
                          f"npusim supports at most {MAX_SLOTS} (inputs plus output) per "
                          f"vector op")
    total = prod(shape)
    if total == 0:
        return
    cap = ctx.budget.spad_half // prec
    per_core = per_core_elements or ceil(total / ctx.config.num_cores)
    q = max(1, ctx.config.dma.request_bytes // prec)
    keeps = tuple(v.keep_repeats for v in views)
    walks = []  # (DMA requests, walk number: ties go to the output's order, space, strides, split)
    space, strides = coalesce(shape, views)  # axes that are one for every view, merged
    merged = [replace(v, strides=sv) for v, sv in zip(views, strides)]
    for dims, strides in _walks(space, merged, q):
        D, S = coalesce(dims, [replace(v, strides=sv) for v, sv in zip(views, strides)])
        choice = _split_axis(tuple(D), tuple(map(tuple, S)), keeps, per_core, cap, q)
        if choice is not None:
            walks.append((_requests(D, S, keeps, *choice, prec, ctx.config.dma.request_bytes),
                          len(walks), D, S, choice))
    choice = None
    if walks:
        _, _, D, S, choice = min(walks)

    def counts(a, t):
        return [t] + D[a + 1:]

    if choice is None:
        raise NpusimError(f"{em.node.op_type} '{em.node.name}': not even one element of each "
                          f"operand fits half the scratchpad ({ctx.budget.spad_half} B); raise "
                          f"core.spad_kib")
    a, t = choice
    inner = prod(D[a + 1:])
    shapes: dict[int, tuple] = {}

    def tile_shape(tc):
        if tc not in shapes:
            c = counts(a, tc)
            loads, last_load = [], []
            for i, (v, sv) in enumerate(zip(sources, S)):
                after = last_load[v.after] if v.after >= 0 else -1
                loads += box_dmas(i, c, sv[a:], prec, v.keep_repeats, after)[0]
                last_load.append(len(loads) - 1)
            stores = []
            for i, (v, sv) in enumerate(zip(dests, S[len(sources):])):
                stores += box_dmas(len(sources) + i, c, sv[a:], prec, v.keep_repeats)[0]
            el = tc * inner
            shapes[tc] = (loads, [(op, el, p) for op, p in steps], stores)
        return shapes[tc]

    for idx in itertools.product(*(range(d) for d in D[:a])):
        outer = [sum(i * s for i, s in zip(idx, sv[:a])) for sv in S]
        for s0 in range(0, D[a], t):
            tc = min(t, D[a] - s0)
            bases = [v.addr + (v.offset + o + s0 * sv[a]) * prec
                     for v, sv, o in zip(views, S, outer)]
            em.group()
            em.tile(bases, *tile_shape(tc))


# --------------------------------------------------------------------------- helpers

def _shape(ctx: LoweringContext, t: str) -> tuple[int, ...]:
    return ctx.graph.shape(t)


def const_value(ctx: LoweringContext, tensor: str):
    """The value of a small constant tensor (an initializer with data, a Constant, a folded
    shape computation: the front end keeps them), else None."""
    info = ctx.graph.tensors.get(tensor) if tensor else None
    return None if info is None or info.value is None else np.asarray(info.value)


def _axis(node: Node, rank: int, value, what: str = "axis") -> int:
    ax = int(value)
    if not -rank <= ax < max(rank, 1):
        raise NpusimError(f"{node.op_type} '{node.name}': {what} {ax} is out of range for a "
                          f"rank-{rank} input")
    return ax % max(rank, 1)


def _operand_views(ctx, names, out_shape) -> list[View]:
    seen, views = [], []
    for t in names:
        if t and t not in seen:
            seen.append(t)
            views.append(broadcast_view(ctx.addr(t), _shape(ctx, t), out_shape))
    return views


# --------------------------------------------------------------------------- element-wise

def lower_elementwise(ctx: LoweringContext, node: Node) -> None:
    """Element-wise ops with numpy broadcasting: see ELEMENTWISE for the steps. A node that
    heads a group of element-wise nodes (``fusion.vector_groups``) runs the whole group as
    one pass: every node's steps per element, each outside input loaded once, only the
    tensors read outside the group stored."""
    op = node.op_type
    if op in CONVERSIONS and ctx.config.precision == INT8:
        # float ops compute in int8 on this config: no float side to convert from or to,
        # only a change of scale, which the neighbouring op's output path applies
        return lower_relabel(ctx, node, "int8 config: a change of scale only")
    y_shape = _shape(ctx, node.outputs[0])
    group = ctx.groups.get(node.name)
    if group is None:
        steps, reads = elementwise_pass(ctx, node, y_shape)
        sources = list(dict(reads).values())  # (each tensor once, in order)
        how = ("vector unit (scale/shift precomputed)" if op == "BatchNormalization"
               else "vector unit")
        return emit_elementwise(ctx, node, steps, sources, how)
    steps, sources = [], {}
    for n in group.nodes:
        n_steps, reads = elementwise_pass(ctx, n, y_shape)
        steps += n_steps
        for t, view in reads:
            if t in group.inputs:
                sources.setdefault(t, view)
    info = LayerInfo(name=node.name, op_type=op, macs=0, mapping="", mapping_source="",
                     input_shapes=[_shape(ctx, t) for t in group.inputs], output_shape=y_shape)
    em = LayerEmitter(ctx, node, "vector unit", info=info, outputs=group.outputs,
                      preds=sorted({ctx.producer_layer[t] for t in group.inputs
                                    if t in ctx.producer_layer}))
    emit_views(em, y_shape, list(sources.values()),
               [View(ctx.addr(t), row_major(y_shape)) for t in group.outputs], steps)
    em.finish()


def elementwise_pass(ctx: LoweringContext, node: Node, out_shape
                     ) -> tuple[list[tuple[str, int]], list[tuple[str, View]]]:
    """What ``node`` does per element of ``out_shape``: its steps, and each tensor it reads
    with its view (broadcast to ``out_shape``)."""
    op = node.op_type
    steps = list(ELEMENTWISE[op])
    operands = [t for t in list(node.inputs)[:DATA_INPUTS.get(op)] if t]
    if op == "GatherElements":
        data, idx = operands[0], operands[1]
        same = _shape(ctx, data) == _shape(ctx, idx)
        operands = [idx, data] if same else [idx]  # a differently shaped table: indices only
    elif op == "Pow":
        e = const_value(ctx, node.inputs[1])
        if e is not None and e.size == 1 and float(e.reshape(-1)[0]) in POW_CONST:
            steps = list(POW_CONST[float(e.reshape(-1)[0])])
            operands = operands[:1]  # x*x or sqrt(x): the exponent is not loaded
    elif op in VARIADIC:
        steps = [(steps[0][0], max(1, len(operands) - 1))] + steps[1:]
    elif op == "LRN":
        steps[1] = ("add", int(node.attrs["size"]))
    elif op == "BatchNormalization":
        return steps, _batchnorm_reads(ctx, node)
    elif op in ("QuantizeLinear", "DequantizeLinear"):
        names = [node.inputs[0]] + [t for t in node.inputs[1:3] if t]
        return steps, [(t, v) for t, v in zip(names, _quant_views(ctx, node, out_shape))
                       if t == names[0] or not immediate(ctx.graph, t)]
    return steps, [(t, broadcast_view(ctx.addr(t), _shape(ctx, t), out_shape))
                   for t in operands if not immediate(ctx.graph, t)]


def emit_elementwise(ctx: LoweringContext, node: Node, steps: list[tuple[str, int]],
                     sources: list[View] | None = None, how: str = "vector unit") -> None:
    """One vector-unit layer of ``steps`` per element of the node's output, reading
    ``sources`` (default: the node's inputs, broadcast to the output's shape)."""
    y = node.outputs[0]
    y_shape = _shape(ctx, y)
    if sources is None:
        sources = _operand_views(ctx, [t for t in node.inputs if t], y_shape)
    em = LayerEmitter(ctx, node, how)
    emit_views(em, y_shape, sources, [View(ctx.addr(y), row_major(y_shape))], steps)
    em.finish()


def _quant_views(ctx, node, y_shape) -> list[View]:
    """x, and the scale and zero point: one value, one per channel of ``axis``, or blocks
    along ``axis`` (blocked quantization: block_size elements share one)."""
    r = len(y_shape)
    views = [broadcast_view(ctx.addr(node.inputs[0]), _shape(ctx, node.inputs[0]), y_shape)]
    for t in node.inputs[1:3]:
        if not t:
            continue
        shape = _shape(ctx, t)
        if len(shape) == r and r:  # blocked: same rank, the axis divided into blocks
            views.append(broadcast_view(ctx.addr(t), shape, y_shape))
        elif prod(shape) > 1:  # per axis
            strides = [0] * r
            strides[_axis(node, r, node.attrs.get("axis", 1))] = 1
            views.append(View(ctx.addr(t), strides))
        else:
            views.append(View(ctx.addr(t), [0] * r))
    return views


def _check_batchnorm(ctx, node):
    if int(node.attrs.get("training_mode", 0)) or any(node.outputs[1:]):
        raise NpusimError(f"BatchNormalization '{node.name}': training mode (running mean and "
                          f"variance outputs) is not supported; npusim lowers inference "
                          f"BatchNormalization only")
    if len(_shape(ctx, node.inputs[0])) < 2:
        raise NpusimError(f"BatchNormalization '{node.name}': the input needs a channel axis "
                          f"(rank >= 2), got shape {_shape(ctx, node.inputs[0])}")


def _batchnorm_reads(ctx, node) -> list[tuple[str, View]]:
    """y = x * scale' + shift' with scale', shift' (per channel) folded from the four
    parameters ahead of time: reads X and two [C] vectors (Scale's and B's space)."""
    _check_batchnorm(ctx, node)
    x = node.inputs[0]
    shape = _shape(ctx, x)
    per_channel = [0] * len(shape)
    per_channel[1] = 1
    return [(x, View(ctx.addr(x), row_major(shape)))] + [
        (p, View(ctx.addr(p), list(per_channel))) for p in node.inputs[1:3]]


# --------------------------------------------------------------------------- data movement

def lower_transpose(ctx: LoweringContext, node: Node) -> None:
    x, y = node.inputs[0], node.outputs[0]
    x_shape, y_shape = _shape(ctx, x), _shape(ctx, y)
    perm = list(node.attrs.get("perm", list(reversed(range(len(x_shape))))))
    xs = row_major(x_shape)
    em = LayerEmitter(ctx, node, "vector unit (on-chip transpose)")
    emit_views(em, y_shape, [View(ctx.addr(x), [xs[p] for p in perm])],
               [View(ctx.addr(y), row_major(y_shape))], [(MOVE, 1)])
    em.finish()


def lower_concat(ctx: LoweringContext, node: Node) -> None:
    """Each input is copied (DMA in, DMA out) into its place along the axis."""
    y = node.outputs[0]
    y_shape = _shape(ctx, y)
    axis = _axis(node, len(y_shape), node.attrs.get("axis", 0))
    ys = row_major(y_shape)
    per_core = ceil(max(1, prod(y_shape)) / ctx.config.num_cores)
    em = LayerEmitter(ctx, node, "DMA copy")
    offset = 0
    for t in node.inputs:
        if not t:
            continue
        s = _shape(ctx, t)
        emit_views(em, s, [View(ctx.addr(t), row_major(s))],
                   [View(ctx.addr(y), ys, offset=offset * ys[axis])], [], per_core)
        offset += s[axis]
    em.finish()


def lower_split(ctx: LoweringContext, node: Node) -> None:
    """Each output is copied out of its part of the input along the axis."""
    x = node.inputs[0]
    x_shape = _shape(ctx, x)
    axis = _axis(node, len(x_shape), node.attrs.get("axis", 0))
    xs = row_major(x_shape)
    per_core = ceil(max(1, prod(x_shape)) / ctx.config.num_cores)
    em = LayerEmitter(ctx, node, "DMA copy")
    offset = 0
    for t in node.outputs:
        if not t:
            continue
        s = _shape(ctx, t)
        emit_views(em, s, [View(ctx.addr(x), xs, offset=offset * xs[axis])],
                   [View(ctx.addr(t), row_major(s))], [], per_core)
        offset += s[axis]
    em.finish()


def lower_slice(ctx: LoweringContext, node: Node) -> None:
    """Reads the sliced box (strided DMA), writes it contiguously. Starts and steps come
    from constant inputs when known; otherwise each sliced axis is assumed to start at 0
    with step 1 (the traffic is the same, only the addresses differ)."""
    x, y = node.inputs[0], node.outputs[0]
    x_shape, y_shape = _shape(ctx, x), _shape(ctx, y)
    r = len(x_shape)
    start = [0] * r
    step = [1] * r
    ins = list(node.inputs) + [""] * 5
    if "starts" in node.attrs:  # opset < 10: attributes
        starts, axes, steps = node.attrs["starts"], node.attrs.get("axes"), None
    else:
        starts, axes, steps = (const_value(ctx, ins[1]), const_value(ctx, ins[3]),
                               const_value(ctx, ins[4]))
    if starts is not None:
        starts = [int(v) for v in np.asarray(starts).reshape(-1)]
        axes = list(range(len(starts))) if axes is None else [
            int(v) for v in np.asarray(axes).reshape(-1)]
        steps = [1] * len(starts) if steps is None else [
            int(v) for v in np.asarray(steps).reshape(-1)]
        for s0, ax, st in zip(starts, axes, steps):
            ax = _axis(node, r, ax, "axis")
            d = x_shape[ax]
            if st > 0:
                s0 = min(max(s0 + d if s0 < 0 else s0, 0), d)
            else:
                s0 = min(max(s0 + d if s0 < 0 else s0, -1), d - 1)
            start[ax], step[ax] = s0, st
    xs = row_major(x_shape)
    src = View(ctx.addr(x), [s * k for s, k in zip(xs, step)],
               offset=sum(s * k for s, k in zip(xs, start)))
    em = LayerEmitter(ctx, node, "DMA copy")
    emit_views(em, y_shape, [src], [View(ctx.addr(y), row_major(y_shape))], [])
    em.finish()


def lower_gather(ctx: LoweringContext, node: Node) -> None:
    """Gather (embedding lookups): load the indices, then every gathered row (a DMA whose
    addresses come from the indices), store the rows. The index values are never known
    (no weight or input data is read), so the rows are taken spread evenly over the table
    (:func:`index_walks`; more indices than rows walk the whole table). When loading the
    whole table moves fewer bytes than the gathered rows' requests (short rows of a small
    table: an unfold's or a relative position's element gathers), each tile loads the table
    and gathers on chip instead (:func:`_gather_on_chip`), as a compiler would choose."""
    data, idx = node.inputs[0], node.inputs[1]
    y = node.outputs[0]
    d_shape, i_shape, y_shape = _shape(ctx, data), _shape(ctx, idx), _shape(ctx, y)
    axis = _axis(node, len(d_shape), node.attrs.get("axis", 0))
    if _gather_on_chip(ctx, node, prod(d_shape), prod(i_shape), prod(d_shape[axis + 1:]),
                       prod(y_shape)):
        return
    ds = row_major(d_shape)
    pre, post = list(d_shape[:axis]), list(d_shape[axis + 1:])
    ys = row_major(pre + [max(1, prod(i_shape))] + post)  # y with its index dims flat
    em = LayerEmitter(ctx, node, "DMA gather")
    for dims, in_idx, rows, first in index_walks(i_shape, d_shape[axis]):
        sources = [View(ctx.addr(idx), [0] * len(pre) + in_idx + [0] * len(post), first),
                   View(ctx.addr(data), ds[:axis] + [r * ds[axis] for r in rows] + ds[axis + 1:],
                        keep_repeats=True, after=0)]
        out = View(ctx.addr(y), ys[:axis] + [s * ys[axis] for s in in_idx] + ys[axis + 1:],
                   first * ys[axis])
        emit_views(em, pre + dims + post, sources, [out], [])
    em.finish()


def _gather_on_chip(ctx: LoweringContext, node: Node, table: int, indices: int, row: int,
                    out: int) -> bool:
    """Gather from a table held on chip: each core's tile loads the whole table and its
    share of the indices, moves its output elements through the vector unit (one pass) and
    stores them. Taken (True) when the table and a tile fit half the scratchpad and the
    tiles' table loads move fewer bytes than the DMA gather's requests (one per row, a
    whole request each)."""
    prec, q = ctx.precision, ctx.config.dma.request_bytes
    room = ctx.budget.spad_half // prec - table  # for a tile's indices and outputs
    if room < 2:
        return False
    tiles = min(out, max(ctx.config.num_cores, ceil((indices + out) / room)))
    per_tile = ceil(out / tiles)
    share = ceil(indices / tiles)
    if share + per_tile > room:
        return False
    rows = out // max(row, 1)
    if tiles * table * prec >= rows * ceil(row * prec / q) * q:
        return False
    data, idx, y = node.inputs[0], node.inputs[1], node.outputs[0]
    em = LayerEmitter(ctx, node, "vector unit (gather from the table on chip)")
    for t in range(tiles):
        n = min(per_tile, out - t * per_tile)
        k = min(share, indices - t * share)
        if n <= 0:
            break
        loads = box_dmas(0, [table], [1], prec)[0] + box_dmas(1, [max(k, 1)], [1], prec)[0]
        em.group()
        em.tile([ctx.addr(data), ctx.addr(idx) + t * share * prec,
                 ctx.addr(y) + t * per_tile * prec],
                loads, [(MOVE, n, 1)], box_dmas(2, [n], [1], prec)[0])
    em.finish()
    return True


def dequantize_steps(ctx: LoweringContext) -> list[tuple[str, int]]:
    """What the vector unit does per element to widen a narrow weight that never passes
    the array's weight decoder (tiling.WeightFormat): a DequantizeLinear's steps, none on
    an int8 config (a change of scale there, CONVERSIONS)."""
    return [] if ctx.config.precision == INT8 else list(ELEMENTWISE["DequantizeLinear"])


def lower_gather_block_quantized(ctx: LoweringContext, node: Node) -> None:
    """ONNX Runtime's GatherBlockQuantized (an embedding table in 2 to 8 bits, a scale per
    block of each row): the float Gather's tiles (:func:`lower_gather`: the indices first,
    then the rows, taken spread over the table), each row read as one run at its stored
    width with its blocks' scales and zero points beside them (one WeightFormat column:
    the layout MatMulNBits' columns have), then DequantizeLinear's steps over the tile's
    elements, and the rows stored at the precision.

    The dequantization is a vector pass here, not free as in a GEMM: the weight decoder
    that widens MatMulNBits' weights sits in front of the array, and a gathered row never
    passes it. It costs what a DequantizeLinear costs (free on an int8 config: a change
    of scale). Tiles hold whole rows, about ``K / num_cores`` of them."""
    wf, D = gather_block_weight(ctx, node)
    data, idx, y = node.inputs[0], node.inputs[1], node.outputs[0]
    V, K = _shape(ctx, data)[0], max(1, prod(_shape(ctx, idx)))
    L = max(1, prod(_shape(ctx, y))) // K  # elements of one gathered row
    pitch = L // D * int(wf.column_bytes(D))  # its bytes in the table
    spread = V // K if K <= V else 0
    prec = ctx.precision
    steps = dequantize_steps(ctx)
    held = prec + pitch + L * prec  # per row: its index, its packed row, the float row
    fit = ctx.budget.spad_half // held
    if fit < 1:
        raise NpusimError(f"GatherBlockQuantized '{node.name}': one row ({held} B: index, "
                          f"packed row and dequantized row) does not fit half the "
                          f"scratchpad ({ctx.budget.spad_half} B); raise core.spad_kib")
    n = ceil(K / min(fit, ceil(K / ctx.config.num_cores)))
    t = ceil(K / n)  # near-even split
    bases = (ctx.addr(idx), ctx.addr(data, V * pitch), ctx.addr(y))
    em = LayerEmitter(ctx, node, "DMA gather, vector unit dequantizes")
    em.info.weight_bits = wf.bits
    for k0 in range(0, K, t):
        tc = min(t, K - k0)
        loads = [Dma(0, 0, 1, 0, 1, 0, tc * prec),  # the indices, then the rows they name
                 Dma(1, 0, 1, 0, tc, spread * pitch, pitch, after=0)]
        em.group()
        em.tile([bases[0] + k0 * prec, bases[1] + k0 * spread * pitch,
                 bases[2] + k0 * L * prec], loads, [(op, tc * L, p) for op, p in steps],
                [Dma(2, 0, 1, 0, 1, 0, tc * L * prec)])
    em.finish()


# --------------------------------------------------------------------------- rows

# where each row op reduces: one axis (attribute, default), every axis from one on, ...
_ONE_AXIS = {"Softmax": -1, "LogSoftmax": -1, "Hardmax": -1, "LpNormalization": -1,
             "ArgMax": 0, "ArgMin": 0, "TopK": -1}
_TAIL = ("LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization")


def _row_geometry(ctx, node):
    """(O, L, I): the input seen as [O, L, I] with the L axis reduced."""
    op = node.op_type
    x = node.inputs[0]
    shape = _shape(ctx, x)
    r = len(shape)
    if op in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "InstanceNormalization",
              "GroupNormalization"):
        if r < 3:
            raise NpusimError(f"{op} '{node.name}': needs an input with spatial axes "
                              f"(N, C, ...), got shape {shape}")
        if op == "InstanceNormalization":  # per image and channel, over the spatial axes
            return shape[0] * shape[1], prod(shape[2:]), 1
        if op == "GroupNormalization":  # per image and group of channels
            groups = int(node.attrs["num_groups"])
            if groups < 1 or shape[1] % groups:
                raise NpusimError(f"GroupNormalization '{node.name}': num_groups = {groups} "
                                  f"does not divide the {shape[1]} channels")
            return shape[0] * groups, prod(shape[1:]) // groups, 1
        # NHWC in DRAM (as conv.py writes it): [N, H*W, C]
        return shape[0], prod(shape[2:]), shape[1]
    if op == "DynamicQuantizeLinear":
        return 1, max(1, prod(shape)), 1
    if op in _ONE_AXIS or op in ("CumSum", "CumProd"):
        if op in _ONE_AXIS:
            value = node.attrs.get("axis", _ONE_AXIS[op])
        else:
            value = const_value(ctx, node.inputs[1])
            if value is None:
                raise NpusimError(f"{op} '{node.name}': the axis input is not a constant")
            value = np.asarray(value).reshape(-1)[0]
        ax = _axis(node, r, value)
        return prod(shape[:ax]), shape[ax] if r else 1, prod(shape[ax + 1:])
    if op in _TAIL:
        ax = _axis(node, r, node.attrs.get("axis", -1))
        return prod(shape[:ax]), prod(shape[ax:]), 1
    # ReduceX and MeanVarianceNormalization: axes from the attribute (ReduceX before opset
    # 18), a constant input, or the shapes
    axes = node.attrs.get("axes", [0, 2, 3] if op == "MeanVarianceNormalization" else None)
    from_shapes = False
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        axes = const_value(ctx, node.inputs[1])
        if axes is None:
            axes = _reduced_axes_from_shapes(shape, _shape(ctx, node.outputs[0]),
                                             int(node.attrs.get("keepdims", 1)))
            from_shapes = True
    if axes is None or len(np.asarray(axes).reshape(-1)) == 0:
        if from_shapes or int(node.attrs.get("noop_with_empty_axes", 0)):
            axes = []
        else:
            axes = list(range(r))
    axes = sorted({_axis(node, r, a, "axis") for a in np.asarray(axes).reshape(-1)})
    if op == "MeanVarianceNormalization" and r == 4 and axes == [0, 2, 3]:
        # per channel over batch and pixels: adjacent in channels-last activations
        return 1, shape[0] * shape[2] * shape[3], shape[1]
    red = [a for a in axes if shape[a] > 1]
    if not red:
        return prod(shape), 1, 1
    # axes kept between reduced ones (tf2onnx's GroupNormalization reduces [1, 2, 4] of
    # [N, H, W, G, C/G]) count with the inner ones: a row per kept index of all its reduced
    # values, as once transposed together (what ONNX Runtime's optimizer does); the passes
    # are exact, the walk over the tensor is its own order's
    kept_inside = [j for j in range(red[0], len(shape)) if j not in axes]
    return (prod(shape[:red[0]]), prod(shape[a] for a in red),
            prod(shape[j] for j in kept_inside))


def _reduced_axes_from_shapes(x_shape, y_shape, keepdims):
    if keepdims:
        return [j for j, (a, b) in enumerate(zip(x_shape, y_shape)) if b == 1 and a != 1]
    axes, k = [], 0
    for j, d in enumerate(x_shape):
        if k < len(y_shape) and y_shape[k] == d:
            k += 1
        else:
            axes.append(j)
    return axes


@dataclass(frozen=True)
class RowInput:
    """An operand of a row layer besides its input rows.

    ``rows``: one value per element, laid out like the output rows (a skip, a residual);
    ``bcast``: one value per column, the same for every row (a bias added by the prefix);
    ``params``: the row op's per-column parameters (a norm's Scale and B), loaded by the
    pass that applies them; both are loaded once per tile, ``elems`` of them when shorter
    than a row (loaded whole). ``gather``: ``elems`` values per row (default: the row's
    length) from the byte offset ``base_of(first row of the tile)``, rows ``row_stride``
    bytes apart (attention bias rows, rotary tables, embedding rows; a stride of 0 repeats
    one row, loaded once; at most two distinct ``base_of`` per layer)."""

    addr: int
    kind: str = "rows"
    elems: int | None = None
    row_stride: int = 0
    base_of: Callable[[int], int] | None = None


def _streamed_passes(phases, n_full: int, n_out: int, keep, prefix) -> int:
    """Rows moved between DRAM and the scratchpad when a row is streamed in chunks: every
    phase reads its rows (the first also the other full-length inputs), and every phase
    that writes stores the outputs (a kept value is stored once, after the last pass)."""
    reads = n_full + len(phases) - 1
    if keep:
        return reads
    return reads + n_out * sum(1 for pi, (ph, _) in enumerate(phases)
                               if ph.writes or (bool(prefix) and pi == 0))


def _short_runs_cost_more(u: int, u_burst: int, prec: int, request: int, *, whole: int,
                          streamed: int) -> bool:
    """Whether whole rows of ``u`` columns each (DMA runs of ``u`` elements, one per row
    element, when the columns are the innermost axis) move more DMA requests than streaming
    the rows in chunks ``u_burst`` columns wide (runs of a whole request), which reads a
    row once per phase. A run shorter than a request still costs a whole request."""
    if u >= u_burst:
        return False
    # requests per element: streamed * ceil(u_burst * prec / request) / u_burst against
    # whole * ceil(u * prec / request) / u, cross-multiplied to stay in integers
    return (streamed * ceil(u_burst * prec / request) * u
            < whole * ceil(u * prec / request) * u_burst)


def emit_row_layer(em: LayerEmitter, *, O: int, L: int, I: int = 1, x: int | None,
                   y: int | tuple[int, ...], pitch: int | None = None, keep: int | None = None,
                   prefix: tuple[str, ...] = (), op: str | None = None,
                   inputs: tuple[RowInput, ...] = (), sum_out: int | None = None) -> None:
    """The one vector-row emitter: ``O * I`` rows of ``L`` values (element (o, l, i) of the
    input at ``x + ((o * L + l) * I + i) * precision``, or ``x + (o * pitch + l) *
    precision`` with a ``pitch`` when ``I == 1``) through the element steps ``prefix`` (fused
    adds, masks, activations) and then the row op ``op`` (a :data:`ROW_OPS` entry) into
    ``y``: laid out like the input, or, when the op keeps ``keep`` values per row (1 for a
    reduction, k for TopK), ``[O, keep, I]``. ``y`` may name several outputs stored alike
    (TopK's values and indices). ``sum_out`` also stores the rows after ``prefix``
    (SkipLayerNormalization's sum). ``x=None``: the rows come from ``inputs`` alone
    (gathered embedding rows) and the prefix combines them. ``rows`` inputs share the
    input's layout.

    Whole rows per tile when they fit half the scratchpad, at most ``ceil(O / cores)`` per
    tile (and the ``I`` columns split when there are fewer rows than cores). A longer row,
    or rows whose ``I`` columns would be split into DMA runs shorter than a request when
    streaming them a request wide moves fewer requests (a channels-last GlobalAveragePool:
    3,136 pixels a row leave room for 10 channels), is streamed in chunks by one group of
    tiles, one pass per phase of the op (its row steps
    after the last chunk, the kept values held on chip and stored after the last pass; when
    there is a ``prefix``, the first pass writes its result, which later passes read back).
    The same op therefore costs the same wherever it appears: as its own node or inside
    attention and ONNX Runtime's fused ops."""
    ctx = em.ctx
    prec = ctx.precision
    cap = ctx.budget.spad_half // prec
    cores = ctx.config.num_cores
    q = max(1, ctx.config.dma.request_bytes // prec)
    ys = (y,) if isinstance(y, int) else tuple(y)
    rows_in = [v for v in inputs if v.kind == "rows"]
    bcast = [v for v in inputs if v.kind == "bcast"]
    params = [v for v in inputs if v.kind == "params"]
    gathers = [v for v in inputs if v.kind == "gather"]
    if (gathers or pitch) and I != 1:
        raise ValueError("row gathers and a row pitch need I == 1")
    if (params or bcast or prefix) and keep:  # (a long row's prefix result has no home)
        raise ValueError("a row op that keeps values per row takes no per-column operands "
                         "and no prefix")
    if x is None and not prefix:
        raise ValueError("rows made of inputs alone need a prefix that combines them")
    el_prefix = tuple((o, 1, EL) for o in prefix)
    table = ROW_OPS[op] if op else [Phase((), writes=True)]
    phases = []
    for ph in (table(keep, L) if callable(table) else table):
        steps = [(o, tree_levels(L) if p == TREE else p, on) for o, p, on in ph.steps]
        if ph.shift and len(params) < 2:
            steps = steps[:-1]
        phases.append((ph, steps))
    phases[0] = (phases[0][0], list(el_prefix) + phases[0][1])
    x_strides = [L * I, I, 1] if pitch is None else [pitch, 1, 0]
    y_strides = [keep * I, I, 1] if keep else x_strides
    out_per_row = (keep or L) * len(ys)
    n_full = (x is not None) + len(rows_in) + (sum_out is not None)  # L-long rows
    fixed = sum(v.elems or L for v in params + bcast)
    per_u = n_full * L + out_per_row + sum(v.elems or L for v in gathers)

    chunked = fixed + per_u > cap
    if not chunked:  # whole rows fit: tile along O (and I)
        l = L
        u = min(I, max(1, (cap - fixed) // per_u))
        if O < cores:  # too few rows for every core: split the columns too
            u = min(u, ceil(I / ceil(cores / O)))
        t = max(1, min(O, (cap - fixed) // (per_u * u), ceil(O / cores)))
        t = ceil(O / ceil(O / t))
        u = ceil(I / ceil(I / u))
        chunked = _short_runs_cost_more(u, min(I, q), prec, ctx.config.dma.request_bytes,
                                        whole=n_full + (0 if keep else len(ys)),
                                        streamed=_streamed_passes(phases, n_full, len(ys),
                                                                  keep, prefix))
    if chunked:  # stream each row in chunks of l
        chunked = True
        t, u = 1, min(I, q)
        streamed = n_full + (0 if keep else len(ys))  # rows moved chunk by chunk
        kept = out_per_row * u if keep else 0  # results held on chip to the last chunk
        l = (cap - kept - sum(v.elems or 0 for v in gathers + params + bcast)
             ) // (u * streamed + sum(1 for v in gathers + params + bcast if v.elems is None))
        if I == 1 and l >= q:
            l = l // q * q
        if l < 1:
            raise NpusimError(f"{em.info.op_type} '{em.info.name}': not even one column of a "
                              f"row fits half the scratchpad ({ctx.budget.spad_half} B); "
                              f"raise core.spad_kib")
        em.info.mapping_source += " (rows streamed in chunks)"
    slots: dict[int, int] = {}  # gather base function -> tile slot (2 or 3)
    for v in gathers:
        slots.setdefault(id(v.base_of), 2 + len(slots))
    if len(slots) > 2:
        raise ValueError("at most two gather bases per row layer")

    def rows_box(addr, c, strides, slot=0):
        return [Dma(d.slot, d.offset + addr, d.n_outer, d.outer_stride, d.n_inner,
                    d.inner_stride, d.run) for d in box_dmas(slot, c, strides, prec)[0]]

    def out_box(c, first_only=False):
        """Every output's box (slot 0: like the input; slot 1: the kept values)."""
        if keep:
            c = [c[0], keep, c[2]]
        return [d for a in ys[:1 if first_only else None]
                for d in rows_box(a, c, y_strides, 1 if keep else 0)]

    def loads_of(c, lc, src, extra: bool, with_params: bool):
        loads = []
        if src == "y":
            loads = out_box(c, first_only=True)
        elif x is not None:
            loads = rows_box(x, c, x_strides)
        if extra:
            for v in rows_in:
                loads += rows_box(v.addr, c, x_strides)
            for v in gathers:
                n = v.elems or lc
                loads += rows_box(v.addr, [c[0], n], [v.row_stride // prec, 1],
                                  slots[id(v.base_of)])
            for v in bcast:
                loads += rows_box(v.addr, [v.elems or lc], [1], 1)
        if with_params:
            for v in params:
                loads += rows_box(v.addr, [v.elems or lc], [1], 1)
        return loads

    def steps_of(steps, rows, elements, with_row):
        return [(o, elements if on == EL else rows, p) for o, p, on in steps
                if on == EL or with_row]

    for o0 in range(0, O, t):
        tc = min(t, O - o0)
        for i0 in range(0, I, u):
            uc = min(u, I - i0)
            rows = tc * uc
            em.group()
            for pi, (ph, ph_steps) in enumerate(phases if chunked else phases[:1]):
                for l0 in range(0, L, l):
                    lc = min(l, L - l0)
                    c = [tc, lc, uc]
                    last_chunk = l0 + lc >= L
                    bases = [(o0 * x_strides[0] + l0 * x_strides[1] + i0 * x_strides[2]) * prec,
                             (o0 * keep * I + i0) * prec if keep else l0 * prec]
                    bases += [v.base_of(o0) + l0 * prec for v in
                              {id(v.base_of): v for v in gathers}.values()]
                    if not chunked:
                        loads = loads_of(c, lc, "x", True, True)
                        steps = [s for _, st in phases for s in steps_of(st, rows, rows * lc, True)]
                        stores = out_box(c)
                    else:
                        src = "x" if ph.reads == "x" and not (prefix and pi > 0) else "y"
                        loads = loads_of(c, lc, src, pi == 0, ph.params)
                        steps = steps_of(ph_steps, rows, rows * lc, last_chunk)
                        if keep:  # the kept values, once, after the last pass
                            done = last_chunk and pi == len(phases) - 1
                            stores = out_box(c) if done else []
                        else:
                            writes = ph.writes or (bool(prefix) and pi == 0)
                            stores = out_box(c) if writes else []
                    early = ()
                    if sum_out is not None and (not chunked or pi == 0):
                        early = ((len(prefix) - 1, rows_box(sum_out, c, x_strides)),)
                    em.tile(bases, loads, steps, stores, early)
                if not chunked:
                    break


def _row_op(node: Node) -> str:
    """The ROW_OPS entry of a node: its op type, or the p = 1 form of the Lp ops."""
    op = node.op_type
    if op in ("LpNormalization", "GlobalLpPool"):
        p = int(node.attrs.get("p", 2))
        if p not in (1, 2):
            raise NpusimError(f"{op} '{node.name}': p = {p}; ONNX defines p = 1 or 2")
        return op if p == 2 else f"{op}/p1"
    return op


def _topk_k(ctx, node) -> int:
    k = const_value(ctx, node.inputs[1]) if len(node.inputs) > 1 else None
    if k is None:  # opset 1 attribute, else the output shape tells
        k = node.attrs.get("k")
    if k is None:
        x_shape, y_shape = _shape(ctx, node.inputs[0]), _shape(ctx, node.outputs[0])
        ax = _axis(node, len(x_shape), node.attrs.get("axis", -1))
        k = y_shape[ax]
    return int(np.asarray(k).reshape(-1)[0])


def lower_rows(ctx: LoweringContext, node: Node) -> None:
    """Reductions, Softmax, normalizations, scans, TopK, global pooling: the row emitter
    over the input viewed as [O, L, I] (``L`` the reduced axes).

    A reduction keeps one value per row, TopK k (values and indices, stored alike);
    DynamicQuantizeLinear's scalar scale and zero point stay on chip (their consumers read
    them from DRAM for free)."""
    op = node.op_type
    O, L, I = _row_geometry(ctx, node)
    if O * L * I == 0:  # an empty input: the outputs are the reduction's identity, written
        em = LayerEmitter(ctx, node, "vector unit (fill)")
        for out in node.outputs:
            if out and ctx.graph.tensor(out).numel:
                shape = _shape(ctx, out)
                emit_views(em, shape, [], [View(ctx.addr(out), row_major(shape))], [(MOVE, 1)])
        em.finish()
        return
    lo, hi = PARAM_INPUTS.get(op, (0, 0))
    params = tuple(RowInput(ctx.addr(t), "params",
                            elems=None if ctx.graph.tensor(t).numel == L
                            else ctx.graph.tensor(t).numel)
                   for t in node.inputs[lo:hi] if t)
    outs = [node.outputs[0]] + ([t for t in node.outputs[1:2] if t] if op == "TopK" else [])
    for extra in node.outputs[1:]:  # outputs not stored (or stored alike): give them space
        if extra:
            ctx.addr(extra)
    keep = 1 if op in REDUCING else _topk_k(ctx, node) if op == "TopK" else None
    em = LayerEmitter(ctx, node, "vector unit")
    emit_row_layer(em, O=O, L=L, I=I, x=ctx.addr(node.inputs[0]),
                   y=tuple(ctx.addr(t) for t in outs), keep=keep, op=_row_op(node),
                   inputs=params)
    em.finish()


# --------------------------------------------------------------------------- pooling

def lower_pool(ctx: LoweringContext, node: Node, *, carried: str | None = None,
               after: list[tuple[str, int]] = ()) -> None:
    """MaxPool / AveragePool / LpPool over 1, 2 or 3 spatial axes, and depthwise Conv (one
    filter per channel: no reduction across channels, so it runs on the vector unit rather
    than the array), over channels-last activations: a tile is ``p`` output rows of the
    first spatial axis (everything of the other spatial axes, ``c`` channels) of one image;
    it loads the input rows their windows need.

    ``carried``: rows that precede the input along the first spatial axis (N x the
    padding before it x the other axes x C, channels-last: a causal convolution's state),
    read by windows reaching before row 0 instead of padding. ``after``: vector steps per
    output element after the window's (a fused activation)."""
    op = node.op_type
    x, y = node.inputs[0], node.outputs[0]
    x_shape, y_shape = _shape(ctx, x), _shape(ctx, y)
    if not 3 <= len(x_shape) <= 5:
        raise NpusimError(f"{op} '{node.name}': pooling needs 1 to 3 spatial axes (input "
                          f"N, C, ...), got input shape {x_shape}")
    if len(node.outputs) > 1 and node.outputs[1]:
        raise NpusimError(f"{op} '{node.name}': the Indices output is not supported; npusim "
                          f"lowers MaxPool with its values output only")
    N, C, H = x_shape[:3]
    W = prod(x_shape[3:])  # the other spatial axes, whole in every tile
    P, Q = y_shape[2], prod(y_shape[3:])
    n_sp = len(x_shape) - 2
    # (conv.py hands depthwise convolutions here; causal_conv.py its stateful causal form)
    depthwise = op in ("Conv", "FusedConv", "CausalConvWithState",
                       "VarlenCausalConvWithState")
    kernel = list(_shape(ctx, node.inputs[1])[2:]) if depthwise \
        else list(node.attrs["kernel_shape"])
    strides = list(node.attrs.get("strides", [1] * n_sp))
    dil = list(node.attrs.get("dilations", [1] * n_sp))
    pad_t = begin_pads(node, x_shape[2:], y_shape[2:], kernel, strides, dil)[0]
    kh = kernel[0]
    prec = ctx.precision
    cap = ctx.budget.spad_half // prec
    cores = ctx.config.num_cores
    K = prod(kernel)
    if op == "LpPool":
        p_norm = int(node.attrs.get("p", 2))
        steps = ([("mul", K), ("add", K), ("sqrt", 1)] if p_norm == 2
                 else [("sub", K), ("max", K), ("add", K)])
    else:
        steps = POOL_STEPS["Conv" if depthwise else op](K)
    bias = node.inputs[2] if depthwise and len(node.inputs) > 2 and node.inputs[2] else None
    bias = bias or (ctx.folded_bias.get(node.name) if depthwise else None)
    if bias:
        steps = steps + [("add", 1)]
    steps = steps + list(after)

    def rows_in(p):  # (carried rows stand in for padding: the whole window is loaded)
        window = (p - 1) * strides[0] + (kh - 1) * dil[0] + 1
        return window if carried else min(H, window)

    def fits(p, c):
        return (rows_in(p) * W + p * Q) * c <= cap

    ct = C
    if not fits(1, C):
        ct = max(1, cap // (rows_in(1) * W + Q))
        if not fits(1, ct):
            raise NpusimError(f"{op} '{node.name}': one output row with its input window does "
                              f"not fit half the scratchpad ({ctx.budget.spad_half} B); raise "
                              f"core.spad_kib")
        ct = ceil(C / ceil(C / ct))
    p_max = P if N * ceil(C / ct) >= cores else ceil(P / ceil(cores / (N * ceil(C / ct))))
    pt = 1
    while pt < p_max and fits(pt + 1, ct):
        pt += 1
    pt = ceil(P / ceil(P / pt))
    x_strides = [W * C, C, 1]
    y_strides = [Q * C, C, 1]
    xa, ya = ctx.addr(x), ctx.addr(y)
    em = LayerEmitter(ctx, node, "vector unit")
    widen = []
    if depthwise:
        em.info.macs = N * P * Q * C * K
        # each channel's K taps: one column of a narrow weight's layout (weights.py), or
        # K elements at the precision; a narrow one is widened by the vector unit
        wf = dequantized_weight(ctx, node, node.inputs[1], tuple(range(1, n_sp + 2)), 0)
        em.info.weight_bits = prec * 8 if wf is None else wf.bits
        pitch = K * prec if wf is None else int(wf.column_bytes(K))
        widen = [] if wf is None else dequantize_steps(ctx)
        wa = ctx.addr(node.inputs[1], C * pitch)
        ba = ctx.addr(bias) if bias else 0
    for n in range(N):
        for p0 in range(0, P, pt):
            pc = min(pt, P - p0)
            h_lo = p0 * strides[0] - pad_t
            h_hi = h_lo + (pc - 1) * strides[0] + (kh - 1) * dil[0] + 1
            h_lo, h_hi = max(h_lo, 0), min(h_hi, H)
            rows = max(h_hi - h_lo, 1)
            for c0 in range(0, C, ct):
                cc = min(ct, C - c0)
                loads = box_dmas(0, [rows, W, cc], x_strides, prec)[0]
                stores = box_dmas(1, [pc, Q, cc], y_strides, prec)[0]
                el = pc * Q * cc
                bases = [xa + ((n * H + h_lo) * W * C + c0) * prec,
                         ya + ((n * P + p0) * Q * C + c0) * prec]
                if depthwise:  # the channels' window weights (and bias) come along
                    loads = loads + [Dma(2, 0, 1, 0, 1, 0, cc * pitch)]
                    bases.append(wa + c0 * pitch)
                    if bias:
                        loads = loads + box_dmas(3, [cc], [1], 4)[0]
                        bases.append(ba + c0 * 4)
                before = pad_t - p0 * strides[0] if carried else 0
                if before > 0:  # the carried rows these windows reach (the tile's slots
                    # are taken: addressed from the input's base)
                    at = ctx.addr(carried) + ((n * pad_t + pad_t - before) * W * C + c0) * prec
                    loads = loads + [replace(d, offset=d.offset + at - bases[0]) for d in
                                     box_dmas(0, [before, W, cc], x_strides, prec)[0]]
                em.group()
                em.tile(bases, loads, [(o, cc * K, k) for o, k in widen]
                        + [(o, el, k) for o, k in steps], stores)
    em.finish()


# --------------------------------------------------------------------------- registry

LOWERINGS: dict = {
    **{op: lower_elementwise for op in ELEMENTWISE},
    **{op: lower_rows for op in ROW_OPS if "/" not in op},
    "MaxPool": lower_pool,
    "AveragePool": lower_pool,
    "LpPool": lower_pool,
    "Transpose": lower_transpose,
    "Concat": lower_concat,
    "Split": lower_split,
    "Slice": lower_slice,
    "Gather": lower_gather,
    "GatherBlockQuantized": lower_gather_block_quantized,  # ONNX Runtime's quantized table
}
