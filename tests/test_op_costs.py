"""Costs of the ops issue 14 added, each against its formula.

Same conventions as test_vector_ops.py (whose helpers this file uses): the
gemmini_validation preset (one core, a vector unit of 8 elements per pass, ideal memory),
vector latencies set to distinct primes, and shapes that fit one tile, so the vector busy
cycles are exactly sum(ceil(elements / 8) * latency[op] * passes) over an op's steps.
The step lists here are written from the ops' definitions (see the tables in
lowering/vector.py and lowering/movement.py for the reasoning).
"""

from math import prod

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import npusim
from npusim.errors import NpusimError
from test_vector_ops import (OVERRIDES, I64, R, busy, const, cost, levels, loaded, model,
                             requests, sim, stored)

X = (4, 8, 16)
E = prod(X)


def macs(r):
    return sum(layer["macs"] for layer in r.layers)


# --------------------------------------------------------------------------- element-wise

@pytest.mark.parametrize("op,attrs,steps", [
    ("Elu", {}, [("exp", 1), ("sub", 1), ("mul", 1), ("max", 1)]),
    ("Selu", {}, [("exp", 1), ("sub", 1), ("mul", 1), ("max", 1), ("mul", 1)]),
    ("Celu", {}, [("mul", 1), ("exp", 1), ("sub", 1), ("mul", 1), ("min", 1), ("max", 1),
                  ("add", 1)]),
    ("ThresholdedRelu", {}, [("sub", 1), ("max", 1)]),
    ("Shrink", {}, [("sub", 2), ("add", 1), ("sub", 1), ("max", 2)]),
    ("Softplus", {}, [("exp", 1), ("add", 1), ("log", 1)]),
    ("Softsign", {}, [("sub", 1), ("max", 1), ("add", 1), ("div", 1)]),
    ("Mish", {}, [("exp", 1), ("add", 1), ("log", 1), ("tanh", 1), ("mul", 1)]),
    ("Sin", {}, [("exp", 1)]), ("Cos", {}, [("exp", 1)]), ("Atan", {}, [("exp", 1)]),
    ("Tan", {}, [("exp", 2), ("div", 1)]),
    ("Sinh", {}, [("exp", 1), ("recip", 1), ("sub", 1), ("mul", 1)]),
    ("Acosh", {}, [("mul", 1), ("sub", 1), ("sqrt", 1), ("add", 1), ("log", 1)]),
    ("Atanh", {}, [("add", 1), ("sub", 1), ("div", 1), ("log", 1), ("mul", 1)]),
    ("LRN", {"size": 5}, [("mul", 2), ("add", 5 + 1), ("pow", 1), ("div", 1)]),
])
def test_unary_op_steps(tmp_path, op, attrs, steps):
    x = (1, 8, 4, 16) if op == "LRN" else X
    path = model(tmp_path, [helper.make_node(op, ["x"], ["y"], **attrs)], [("x", x)], [("y", x)],
                 opset=18)
    r = sim(path)
    assert busy(r) == cost(r, [(o, prod(x), p) for o, p in steps])
    assert loaded(r) == prod(x) and stored(r) == prod(x)


@pytest.mark.parametrize("op,steps", [("Sum", [("add", 2)]), ("Mean", [("add", 2), ("mul", 1)]),
                                      ("Max", [("max", 2)])])
def test_variadic_ops_fold_every_input(tmp_path, op, steps):
    node = helper.make_node(op, ["a", "b", "c"], ["y"])
    r = sim(model(tmp_path, [node], [("a", X), ("b", X), ("c", (16,))], [("y", X)]))
    assert busy(r) == cost(r, [(o, E, p) for o, p in steps])
    assert r.cores[0]["tiles"] == 1  # the broadcast operand: once per tile, not per row
    assert loaded(r) == 2 * E + requests(16)


def test_quantize_and_dequantize(tmp_path):
    """A Q -> DQ round trip between a float input and a float output: two conversions on a
    2-byte config; on the int8 preset there is no float side, so neither costs anything."""
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1)
    d = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)
    nodes = [q, d]
    path = model(tmp_path, nodes, [("x", X), ("s", (8,)), ("z", (8,), TensorProto.INT8)],
                 [("y", X)])
    r = sim(path, extra=["precision=2"])
    quant = [("mul", 1), ("add", 1), ("cast", 1), ("max", 1), ("min", 1)]
    assert busy(r) == cost(r, [(o, E, p) for o, p in quant + [("sub", 1), ("mul", 1)]])
    # per-channel scale and zero point (axis 1): 8 values each, once per tile (one tile
    # per layer), not per element
    assert r.cores[0]["tiles"] == 2
    assert loaded(r) == 2 * 2 * E + 2 * 2 * requests(2 * 8)
    r = sim(path)
    assert r.config.precision == 1 and busy(r) == loaded(r) == stored(r) == 0
    assert [(lay["op_type"], lay["cycles"]) for lay in r.layers] == [
        ("QuantizeLinear", 0), ("DequantizeLinear", 0)]


def test_dynamic_quantize_linear_reduces_then_quantizes(tmp_path):
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "ys", "yz"])
    path = model(tmp_path, [node], [("x", X)],
                 [("y", X, TensorProto.UINT8), ("ys", ()), ("yz", (), TensorProto.UINT8)])
    r = sim(path)
    T = levels(E)
    steps = [("min", E, 1), ("reduce", 1, T), ("max", E, 1), ("reduce", 1, T),
             ("sub", 1, 1), ("div", 1, 1), ("div", 1, 1), ("cast", 1, 1),
             ("mul", E, 1), ("add", E, 1), ("cast", E, 1), ("max", E, 1), ("min", E, 1)]
    assert busy(r) == cost(r, steps)


# --------------------------------------------------------------------------- rows

def _norm(rows, L, elements, beta=True):
    """LayerNormalization's steps over ``rows`` rows of ``L`` (ceil(log2 L) tree levels)."""
    T = levels(L)
    steps = [("add", elements, 1), ("reduce", rows, T), ("mul", rows, 1),
             ("sub", elements, 1), ("mul", elements, 1), ("add", elements, 1),
             ("reduce", rows, T), ("mul", rows, 1), ("add", rows, 1), ("rsqrt", rows, 1),
             ("mul", elements, 1), ("mul", elements, 1)]
    return steps + ([("add", elements, 1)] if beta else [])


def test_instance_normalization_normalizes_each_channel_over_its_pixels(tmp_path):
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])
    r = sim(model(tmp_path, [node], [("x", (2, 4, 4, 4))], [("y", (2, 4, 4, 4))],
                  [("s", [4]), ("b", [4])]))
    assert busy(r) == cost(r, _norm(2 * 4, 16, 128))


def test_group_normalization_normalizes_each_group(tmp_path):
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)
    r = sim(model(tmp_path, [node], [("x", (1, 4, 4, 4))], [("y", (1, 4, 4, 4))],
                  [("s", [4]), ("b", [4])], opset=21))
    assert busy(r) == cost(r, _norm(2, 32, 64))


def test_group_normalization_groups_must_divide_channels(tmp_path):
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3,
                            name="gn")
    with pytest.raises(NpusimError, match=r"gn.*num_groups = 3.*4 channels"):
        sim(model(tmp_path, [node], [("x", (1, 4, 4, 4))], [("y", (1, 4, 4, 4))],
                  [("s", [4]), ("b", [4])], opset=21))


def test_rms_normalization(tmp_path):
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"])
    r = sim(model(tmp_path, [node], [("x", (4, 16))], [("y", (4, 16))], [("s", [16])],
                  opset=23))
    T = levels(16)
    assert busy(r) == cost(r, [("mul", 64, 1), ("add", 64, 1), ("reduce", 4, T),
                               ("mul", 4, 1), ("add", 4, 1), ("rsqrt", 4, 1),
                               ("mul", 64, 1), ("mul", 64, 1)])


def test_mean_variance_normalization_over_batch_and_pixels(tmp_path):
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"])
    r = sim(model(tmp_path, [node], [("x", (2, 4, 2, 4))], [("y", (2, 4, 2, 4))]))
    # per channel: 4 rows of 2 * 2 * 4 = 16 values
    steps = _norm(4, 16, 64)[:-2]  # normalize only: no gamma, no beta
    assert busy(r) == cost(r, steps)


@pytest.mark.parametrize("p,steps", [
    (2, [("mul", "E"), ("add", "E"), ("reduce", "T"), ("rsqrt", "r"), ("mul", "E")]),
    (1, [("sub", "E"), ("max", "E"), ("add", "E"), ("reduce", "T"), ("recip", "r"),
         ("mul", "E")]),
])
def test_lp_normalization(tmp_path, p, steps):
    node = helper.make_node("LpNormalization", ["x"], ["y"], p=p)
    r = sim(model(tmp_path, [node], [("x", X)], [("y", X)]))
    rows, L = 32, 16
    expand = {"E": (E, 1), "r": (rows, 1), "T": (rows, levels(L))}
    assert busy(r) == cost(r, [(o, *expand[k]) for o, k in steps])


@pytest.mark.parametrize("op,el,row", [
    ("ReduceL2", [("mul", 1), ("add", 1)], [("sqrt", 1)]),
    ("ReduceL1", [("sub", 1), ("max", 1), ("add", 1)], []),
    ("ReduceSumSquare", [("mul", 1), ("add", 1)], []),
    ("ReduceProd", [("mul", 1)], []),
    ("ReduceLogSum", [("add", 1)], [("log", 1)]),
])
def test_other_reductions(tmp_path, op, el, row):
    node = helper.make_node(op, ["x"], ["y"], axes=[2], keepdims=0)
    r = sim(model(tmp_path, [node], [("x", X)], [("y", (4, 8))], opset=13))
    rows = 32
    assert busy(r) == cost(r, [(o, E, k) for o, k in el] + [("reduce", rows, levels(16))]
                           + [(o, rows, k) for o, k in row])


def test_reduce_log_sum_exp_is_a_stable_two_pass_reduction(tmp_path):
    node = helper.make_node("ReduceLogSumExp", ["x"], ["y"], axes=[2], keepdims=0)
    r = sim(model(tmp_path, [node], [("x", X)], [("y", (4, 8))], opset=13))
    T = levels(16)
    assert busy(r) == cost(r, [("max", E, 1), ("reduce", 32, T), ("sub", E, 1), ("exp", E, 1),
                               ("add", E, 1), ("reduce", 32, T), ("log", 32, 1),
                               ("add", 32, 1)])


def test_argmax_finds_the_extreme_then_its_position(tmp_path):
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=2, keepdims=0)
    r = sim(model(tmp_path, [node], [("x", X)], [("y", (4, 8), I64)]))
    assert busy(r) == cost(r, [("max", E, 1), ("reduce", 32, levels(16)), ("sub", E, 1)])
    assert stored(r) == 32


def test_hardmax_writes_every_element(tmp_path):
    node = helper.make_node("Hardmax", ["x"], ["y"])
    r = sim(model(tmp_path, [node], [("x", X)], [("y", X)]))
    assert busy(r) == cost(r, [("max", E, 1), ("reduce", 32, levels(16)), ("sub", E, 1),
                               ("max", E, 1)])


def test_cumsum_is_a_log_step_scan(tmp_path):
    nodes = [const("ax", 1), helper.make_node("CumSum", ["x", "ax"], ["y"])]
    r = sim(model(tmp_path, nodes, [("x", X)], [("y", X)]))
    assert busy(r) == cost(r, [("add", E, levels(8))])


def test_cumsum_with_an_unknown_axis_is_a_clear_error(tmp_path):
    node = helper.make_node("CumSum", ["x", "ax"], ["y"], name="scan")
    with pytest.raises(NpusimError, match=r"CumSum 'scan': the axis input is not a constant"):
        sim(model(tmp_path, [node], [("x", X), ("ax", (), I64)], [("y", X)]))


@pytest.mark.parametrize("k", [2, 8])
def test_topk_selects_or_sorts_whichever_is_cheaper(tmp_path, k):
    nodes = [const("k", [k]), helper.make_node("TopK", ["x", "k"], ["v", "i"])]
    r = sim(model(tmp_path, nodes, [("x", X)], [("v", (4, 8, k)), ("i", (4, 8, k), I64)]))
    T = levels(16)
    if 2 * k <= T * (T + 1) // 2:  # k = 2: two rounds of max, retire
        steps = [("max", E, k), ("reduce", 32, k * T), ("sub", E, k)]
    else:  # k = 8: a bitonic sort of the 16 values, 10 compare-exchange passes
        steps = [("max", E, T * (T + 1) // 2)]
    assert busy(r) == cost(r, steps)
    assert stored(r) == 2 * 32 * k  # values and indices


def test_global_lp_pool(tmp_path):
    node = helper.make_node("GlobalLpPool", ["x"], ["y"], p=2)
    r = sim(model(tmp_path, [node], [("x", (1, 8, 4, 4))], [("y", (1, 8, 1, 1))]))
    assert busy(r) == cost(r, [("mul", 128, 1), ("add", 128, 1), ("reduce", 8, levels(16)),
                               ("sqrt", 8, 1)])


# --------------------------------------------------------------------------- data movement

def test_pad_fills_each_border_slab_once(tmp_path):
    nodes = [const("pads", [1, 2, 0, 3]), helper.make_node("Pad", ["x", "pads"], ["y"])]
    r = sim(model(tmp_path, nodes, [("x", (4, 8))], [("y", (5, 13))]))
    # border slabs: 1 row of 13 before, then 4 rows x (2 before + 3 after) columns
    assert busy(r) == cost(r, [("cast", e, 1) for e in (13, 4 * 2, 4 * 3)])


def test_pad_copies_the_interior_once(tmp_path):
    nodes = [const("pads", [1, 0, 2, 0]), helper.make_node("Pad", ["x", "pads"], ["y"])]
    r = sim(model(tmp_path, nodes, [("x", (4, 32))], [("y", (7, 32))]))
    assert busy(r) == cost(r, [("cast", 32, 1), ("cast", 64, 1)])
    assert loaded(r) == 4 * 32 and stored(r) == 7 * 32  # rows of one whole request each


def test_center_crop_pad(tmp_path):
    nodes = [const("shape", [2, 12]), helper.make_node("CenterCropPad", ["x", "shape"], ["y"])]
    r = sim(model(tmp_path, nodes, [("x", (4, 8))], [("y", (2, 12))], opset=18))
    # rows 1..2 of the input into columns 2..9; columns 0-1 and 10-11 filled
    assert busy(r) == cost(r, [("cast", 4, 1), ("cast", 4, 1)])


def test_tile_loads_its_input_once_per_tile(tmp_path):
    nodes = [const("reps", [3, 2]), helper.make_node("Tile", ["x", "reps"], ["y"])]
    r = sim(model(tmp_path, nodes, [("x", (4, 8))], [("y", (12, 16))]))
    assert busy(r) == cost(r, [("cast", 192, 1)])
    assert loaded(r) == 32 and stored(r) == 192


@pytest.mark.parametrize("mode,steps", [("nearest", [("cast", 1)]),
                                        ("linear", [("mul", 4), ("add", 3)])])
def test_resize_by_two(tmp_path, mode, steps):
    nodes = [const("scales", [1.0, 1.0, 2.0, 2.0], TensorProto.FLOAT),
             helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode)]
    r = sim(model(tmp_path, nodes, [("x", (1, 2, 4, 4))], [("y", (1, 2, 8, 8))]))
    assert busy(r) == cost(r, [(o, 128, p) for o, p in steps])
    assert loaded(r) == 32 and stored(r) == 128  # each input row read once for its 2 rows


def test_resize_down_reads_every_other_row(tmp_path):
    nodes = [const("sizes", [1, 2, 4, 4]),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y"])]
    r = sim(model(tmp_path, nodes, [("x", (1, 2, 8, 8))], [("y", (1, 2, 4, 4))]))
    assert busy(r) == cost(r, [("cast", 32, 1)])
    assert stored(r) == 32


@pytest.mark.parametrize("op,x,y,attrs", [
    ("DepthToSpace", (1, 8, 2, 2), (1, 2, 4, 4), {"blocksize": 2}),
    ("DepthToSpace", (1, 8, 2, 2), (1, 2, 4, 4), {"blocksize": 2, "mode": "CRD"}),
    ("SpaceToDepth", (1, 2, 4, 4), (1, 8, 2, 2), {"blocksize": 2}),
])
def test_depth_space_permutations_move_every_element_once(tmp_path, op, x, y, attrs):
    r = sim(model(tmp_path, [helper.make_node(op, ["x"], ["y"], **attrs)], [("x", x)],
                  [("y", y)]))
    assert busy(r) == cost(r, [("cast", 32, 1)])
    assert loaded(r) == 32 and stored(r) == 32


def test_one_hot(tmp_path):
    nodes = [const("depth", 10), const("values", [0, 1]),
             helper.make_node("OneHot", ["i", "depth", "values"], ["y"])]
    r = sim(model(tmp_path, nodes, [("i", (4,), I64)], [("y", (4, 10), I64)]))
    assert busy(r) == cost(r, [("sub", 40, 1), ("max", 40, 1)])


# A spatial transformer's sampler, 2-D: x (1, 2, 4, 4) sampled at a grid of 8 x 8 positions.
# Per grid coordinate (128 of them): unnormalize (mul, add), keep in range, weigh; per
# output element (128): the taps weighted and summed. Written from ONNX's GridSample.
GRID_PADDING_STEPS = {"zeros": [("max", 1), ("min", 1)], "border": [("max", 1), ("min", 1)],
                      "reflection": [("sub", 2), ("max", 1), ("min", 1)]}


@pytest.mark.parametrize("mode,weigh,taps", [
    ("bilinear", [("cast", 1), ("sub", 2), ("mul", 2)], 4),  # 4 tap weights: 1 mul each
    ("nearest", [("cast", 1)], 0),  # rounds; the output a copy of one input element
    ("bicubic", [("cast", 1), ("sub", 1), ("mul", 12), ("add", 12), ("mul", 8)], 16),
])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_steps_and_traffic(tmp_path, mode, weigh, taps, padding):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="sample", mode=mode,
                            padding_mode=padding)
    r = sim(model(tmp_path, [node], [("x", (1, 2, 4, 4)), ("grid", (1, 8, 8, 2))],
                  [("y", (1, 2, 8, 8))], opset=16))
    coordinate = [("mul", 1), ("add", 1)] + GRID_PADDING_STEPS[padding] + weigh
    sample = [("mul", taps), ("add", taps - 1)] if taps else [("cast", 1)]
    assert [layer["name"] for layer in r.layers] == ["sample/coordinates", "sample"]
    assert busy(r) == (cost(r, [(o, 128, p) for o, p in coordinate])
                       + cost(r, [(o, 128, p) for o, p in sample if p]))
    # the grid (128 B), its 64 packed words, and the input once (each row serves two
    # output rows, as a resize by two reads it); stored: the words and the output
    assert loaded(r) == 128 + 64 + 32
    assert stored(r) == 64 + 128


def test_grid_sample_in_three_dimensions(tmp_path):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode="linear")
    r = sim(model(tmp_path, [node], [("x", (1, 1, 4, 4, 4)), ("grid", (1, 4, 4, 4, 3))],
                  [("y", (1, 1, 4, 4, 4))], opset=20))
    # 8 taps, their weights products of 3 axis weights: 8 * 2 muls over 3 coordinates
    coordinate = [("mul", 1), ("add", 1), ("max", 1), ("min", 1), ("cast", 1), ("sub", 2),
                  ("mul", 6)]
    assert busy(r) == (cost(r, [(o, 192, p) for o, p in coordinate])
                       + cost(r, [("mul", 64, 8), ("add", 64, 7)]))


def test_affine_grid_applies_theta_to_every_position(tmp_path):
    nodes = [const("size", [1, 2, 8, 8]),
             helper.make_node("AffineGrid", ["theta", "size"], ["grid"])]
    r = sim(model(tmp_path, nodes, [("theta", (1, 2, 3))], [("grid", (1, 8, 8, 2))], opset=20))
    assert busy(r) == cost(r, [("mul", 128, 3), ("add", 128, 3)])
    assert stored(r) == 128


def test_spatial_transformer_samples_with_the_grid_it_builds(tmp_path):
    """AffineGrid then GridSample, as torch exports F.affine_grid + F.grid_sample: the
    sampler waits for the grid."""
    nodes = [const("size", [1, 3, 16, 16]),
             helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="affine"),
             helper.make_node("GridSample", ["x", "grid"], ["y"], name="sample")]
    r = sim(model(tmp_path, nodes, [("x", (1, 3, 16, 16)), ("theta", (1, 2, 3))],
                  [("y", (1, 3, 16, 16))], opset=20))
    affine, coords, sample = r.layers
    assert coords["start_cycle"] >= affine["end_cycle"]
    assert sample["start_cycle"] >= coords["end_cycle"]
    assert r.total_cycles == sample["end_cycle"]


def test_grid_sample_names_an_unknown_mode(tmp_path):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="warp", mode="area")
    path = model(tmp_path, [node], [("x", (1, 2, 4, 4)), ("grid", (1, 8, 8, 2))],
                 [("y", (1, 2, 8, 8))], opset=16)
    with pytest.raises(NpusimError, match="GridSample 'warp': mode 'area'.*bilinear"):
        sim(path)


# DFT and STFT: a GEMM of the signal rows with the transform's matrix, N * C * M MACs with
# C = n (real) or 2n (complex) samples per row and M = bins * (2, or 1 for a real output)

@pytest.mark.parametrize("x,y,attrs,layers,macs", [
    # over the axis before re/im: one GEMM, rows of 10 contiguous samples
    ((2, 4, 10, 1), (2, 4, 10, 2), {"axis": 2}, ["dft"], 8 * 10 * 20),
    ((2, 4, 10, 2), (2, 4, 10, 2), {"axis": 2, "inverse": 1}, ["dft"], 8 * 20 * 20),
    ((2, 4, 10, 1), (2, 4, 6, 2), {"axis": 2, "onesided": 1}, ["dft"], 8 * 10 * 12),
    # over an earlier axis: the signal moved to rows and the bins back
    ((2, 10, 4, 1), (2, 6, 4, 2), {"axis": 1, "onesided": 1},
     ["dft/to_rows", "dft", "dft/from_rows"], 8 * 10 * 12),
    # inverse of a onesided transform: 6 complex bins in, 10 real samples out
    ((2, 6, 4, 2), (2, 10, 4, 1), {"axis": 1, "onesided": 1, "inverse": 1},
     ["dft/to_rows", "dft", "dft/from_rows"], 8 * 12 * 10),
])
def test_dft_is_a_gemm_with_the_transform_matrix(tmp_path, x, y, attrs, layers, macs):
    nodes = [const("length", x[attrs["axis"]] if not attrs.get("inverse") or x[-1] == y[-1]
                   else y[attrs["axis"]]),
             helper.make_node("DFT", ["x", "length"], ["y"], name="dft", **attrs)]
    r = sim(model(tmp_path, nodes, [("x", x)], [("y", y)], opset=17))
    assert [layer["name"] for layer in r.layers] == layers
    assert [layer["macs"] for layer in r.layers if layer["name"] == "dft"] == [macs]
    assert r.layers[layers.index("dft")]["systolic_cycles"] > 0


def test_stft_frames_are_gemm_rows_with_the_window_folded_in(tmp_path):
    """128 samples, frames of 32 every 16: (128 - 32) / 16 + 1 = 7 frames, 17 bins
    (onesided omitted means its default, 1, which ONNX's own inference reads as 0: 32 bins)."""
    nodes = [const("step", 16),
             helper.make_node("STFT", ["x", "step", "window"], ["y"], name="stft")]
    r = sim(model(tmp_path, nodes, [("x", (2, 128, 1)), ("window", (32,))],
                  [("y", (2, 7, 17, 2))], opset=17))
    (layer,) = r.layers
    assert layer["macs"] == 2 * 7 * 32 * 34
    assert busy(r) == 0  # no vector pass: the window is part of the constant matrix


def test_max_unpool_zero_fills_then_stores_each_element_in_its_window(tmp_path):
    node = helper.make_node("MaxUnpool", ["x", "i"], ["y"], name="unpool", kernel_shape=[2, 2],
                            strides=[2, 2])
    r = sim(model(tmp_path, [node], [("x", (1, 2, 4, 4)), ("i", (1, 2, 4, 4), I64)],
                  [("y", (1, 2, 8, 8))]))
    zeros, unpool = r.layers
    assert (zeros["name"], unpool["name"]) == ("unpool/zeros", "unpool")
    assert unpool["start_cycle"] >= zeros["end_cycle"]  # the stores land on the zeroed output
    assert busy(r) == cost(r, [("cast", 128, 1)])  # the fill; the scatter is DMA only
    assert zeros["bytes_stored"] == 128 and unpool["bytes_loaded"] == 32 + 32
    # 32 elements, each alone in its 2 x 2 window's first position: one request each
    assert unpool["bytes_stored"] == 32 * R


@pytest.mark.parametrize("block,strides,dil,grid", [
    ([2, 2], [2, 2], [1, 1], [2, 2]),  # fold without overlap: every image element once
    ([3, 3], [1, 1], [1, 1], [2, 2]),  # overlapping windows
    ([2, 2], [1, 1], [2, 2], [2, 2]),  # dilated
])
def test_col2im_adds_every_column_element_into_the_image(tmp_path, block, strides, dil, grid):
    image = [(g - 1) * s + d * (b - 1) + 1 for g, s, d, b in zip(grid, strides, dil, block)]
    K, L = prod(block), prod(grid)
    nodes = [const("image", image), const("block", block),
             helper.make_node("Col2Im", ["x", "image", "block"], ["y"], name="fold",
                              strides=strides, dilations=dil)]
    r = sim(model(tmp_path, nodes, [("x", (1, 3 * K, L))], [("y", (1, 3, *image))], opset=18))
    assert busy(r) == cost(r, [("add", 3 * K * L, 1)])
    # the columns read once: their bytes, rounded up to whole requests in each tile
    tiles = r.cores[0]["tiles"]
    assert 3 * K * L <= loaded(r) <= requests(3 * K * L) + R * tiles


@pytest.mark.parametrize("masked", [False, True])
def test_deform_conv_samples_its_columns_then_runs_the_gemm(tmp_path, masked):
    """x (1, 4, 6, 6), 8 filters of 3 x 3, no padding: 16 output positions, 9 taps. The
    offsets: 16 x 9 taps x 2 coordinates = 288, each an add, a move, two subs and half of
    its tap's 4 bilinear weight products (with a mask, 4 more to scale them); the columns:
    16 x 4 channels x 9 taps = 576 elements, 4 muls and 3 adds each; the GEMM the conv's
    16 x 8 x 36 MACs."""
    inputs = [("x", (1, 4, 6, 6)), ("w", (8, 4, 3, 3)), ("offset", (1, 18, 4, 4))]
    names = ["x", "w", "offset"]
    if masked:
        inputs.append(("mask", (1, 9, 4, 4)))
        names += ["", "mask"]
    node = helper.make_node("DeformConv", names, ["y"], name="dcn", kernel_shape=[3, 3])
    r = sim(model(tmp_path, [node], inputs, [("y", (1, 8, 4, 4))], opset=19))
    assert [layer["name"] for layer in r.layers] == ["dcn/offsets", "dcn/columns", "dcn"]
    offsets, columns, gemm = r.layers
    assert columns["start_cycle"] >= offsets["end_cycle"]
    assert gemm["start_cycle"] >= columns["end_cycle"]
    assert gemm["macs"] == 16 * 8 * 36 and gemm["systolic_cycles"] > 0
    coordinate = [("add", 1), ("cast", 1), ("sub", 2), ("mul", 4 if masked else 2)]
    assert busy(r) == (cost(r, [(o, 288, p) for o, p in coordinate])
                       + cost(r, [("mul", 576, 4), ("add", 576, 3)]))


def test_gather_nd_moves_the_selected_slices(tmp_path):
    node = helper.make_node("GatherND", ["d", "i"], ["y"])
    r = sim(model(tmp_path, [node], [("d", (8, 4, 16)), ("i", (3, 2), I64)], [("y", (3, 16))]))
    assert busy(r) == 0
    assert stored(r) == requests(48)  # the three gathered rows, contiguous


def test_scatter_nd_updates_in_place(tmp_path):
    node = helper.make_node("ScatterND", ["d", "i", "u"], ["y"])
    r = sim(model(tmp_path, [node], [("d", (8, 64)), ("i", (3, 1), I64), ("u", (3, 64))],
                  [("y", (8, 64))]))
    assert stored(r) == 3 * 64  # the three rows, not the whole tensor: updated in place


# --------------------------------------------------------------------------- contractions

@pytest.mark.parametrize("eq,a,b,y,layers", [
    ("bhqd,bhkd->bhqk", (2, 3, 16, 8), (2, 3, 32, 8), (2, 3, 16, 32), 1),  # Q.K^T
    ("bij,bjk->bik", (2, 16, 8), (2, 8, 32), (2, 16, 32), 1),
    ("ij,jk->ki", (16, 8), (8, 32), (32, 16), 2),  # output needs a layout move
    ("ik,jk->ij", (16, 8), (32, 8), (16, 32), 1),  # B read transposed
    ("kib,kj->ijb", (8, 16, 2), (8, 32), (16, 32, 2), 2),  # A read transposed, out reordered
    ("bki,kj->ijb", (2, 8, 16), (8, 32), (16, 32, 2), 3),  # A reordered, output reordered
])
def test_einsum_is_a_batched_gemm(tmp_path, eq, a, b, y, layers):
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation=eq)
    r = npusim.simulate(str(model(tmp_path, [node], [("a", a), ("b", b)], [("y", y)])),
                        "mobile")
    letters = dict(zip(eq.split("->")[0].replace(",", ""), a + b))
    assert macs(r) == prod(letters.values())  # every letter once: batch * N * C * M
    assert len(r.layers) == layers


@pytest.mark.parametrize("eq,a,b,y", [
    ("bi,bj->bij", (2, 16), (2, 32), (2, 16, 32)),  # an outer product per batch
    ("bcxd,bcyd->bcxy", (1, 3, 16, 1), (1, 3, 8, 1), (1, 3, 16, 8)),  # a sum over d = 1
])
def test_einsum_without_a_sum_is_a_multiply_pass(tmp_path, eq, a, b, y):
    """Nothing to sum: one product per output element on the vector unit, no MACs on the
    array (a GEMM of K = 1 would stream through one row of it)."""
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation=eq)
    r = sim(model(tmp_path, [node], [("a", a), ("b", b)], [("y", y)]))
    assert busy(r) == cost(r, [("mul", prod(y), 1)])
    assert macs(r) == 0 and sum(c["systolic_stream_cycles"] for c in r.cores) == 0
    assert stored(r) == prod(y)


def test_einsum_single_operand_transpose_and_sum(tmp_path):
    t = helper.make_node("Einsum", ["a"], ["t"], equation="ijk->kji")
    s = helper.make_node("Einsum", ["t"], ["y"], equation="kji->k")
    r = sim(model(tmp_path, [t, s], [("a", (2, 4, 8))], [("y", (8,))]))
    assert busy(r) == cost(r, [("cast", 64, 1), ("add", 64, 1)])


def test_einsum_diagonal_is_a_clear_error(tmp_path):
    node = helper.make_node("Einsum", ["a"], ["y"], equation="ii->i", name="diag")
    with pytest.raises(NpusimError, match=r"Einsum 'diag': repeated letters"):
        sim(model(tmp_path, [node], [("a", (4, 4))], [("y", (4,))]))


@pytest.mark.parametrize("k,s,pads,groups", [(2, 2, [0, 0, 0, 0], 1), (3, 2, [1, 1, 1, 1], 1),
                                             (4, 2, [1, 1, 1, 1], 2)])
def test_conv_transpose_gemm_and_col2im(tmp_path, k, s, pads, groups):
    H, Cin, Cout = 8, 16, 8
    out = (H - 1) * s - 2 * pads[0] + k
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[s, s],
                            kernel_shape=[k, k], pads=pads, group=groups)
    path = model(tmp_path, [node], [("x", (1, Cin, H, H))], [("y", (1, Cout, out, out))],
                 [("w", [Cin, Cout // groups, k, k]), ("b", [Cout])])
    r = sim(path)
    assert macs(r) == H * H * Cin * (Cout // groups) * k * k  # per input pixel, the kernel
    col = [layer for layer in r.layers if layer["name"] == "ConvTranspose_0"][0]
    assert col["macs"] == 0
    # col2im: every column element added into the output once, and the bias once
    assert busy(r) == cost(r, [("add", H * H * Cout * k * k, 2)])


# --------------------------------------------------------------------------- quantized

def _qconv(tmp_path, quantized: bool, name: str):
    x = (1, 16, 8, 8)
    w = [32, 16, 3, 3]
    if quantized:
        u8, i8 = TensorProto.UINT8, TensorProto.INT8
        scalars = [helper.make_tensor(n, TensorProto.FLOAT, [], [0.1]) for n in ("xs", "ws", "ys")]
        zps = [helper.make_tensor("xz", u8, [], [0]), helper.make_tensor("wz", i8, [], [0]),
               helper.make_tensor("yz", u8, [], [0])]
        wt = helper.make_tensor("w", i8, w, np.zeros(prod(w), np.int8).tolist())
        node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
                                ["y"], pads=[1, 1, 1, 1], name="conv")
        g = helper.make_graph([node], name, [helper.make_tensor_value_info("x", u8, x)],
                              [helper.make_tensor_value_info("y", u8, [1, 32, 8, 8])],
                              [wt] + scalars + zps)
    else:
        wt = helper.make_tensor("w", TensorProto.FLOAT, w, np.zeros(prod(w), np.float32))
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")
        g = helper.make_graph([node], name, [helper.make_tensor_value_info("x", 1, x)],
                              [helper.make_tensor_value_info("y", 1, [1, 32, 8, 8])], [wt])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(m, str(path))
    return npusim.simulate(str(path), "server", overrides=["memory.type=ideal"])


def test_qlinear_conv_is_a_conv_on_one_byte_elements(tmp_path):
    q, f = _qconv(tmp_path, True, "q"), _qconv(tmp_path, False, "f")
    assert q.config.precision == 2  # server: the float conv moves 2-byte elements
    assert q.layers[0]["op_type"] == "QLinearConv" and f.layers[0]["op_type"] == "Conv"
    assert macs(q) == macs(f) == 64 * 32 * 16 * 9
    assert q.layers[0]["bytes_loaded"] < f.layers[0]["bytes_loaded"]
    assert q.layers[0]["bytes_stored"] * 2 == f.layers[0]["bytes_stored"] == 64 * 32 * 2


def test_matmul_integer_is_a_matmul(tmp_path):
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    g = helper.make_graph([node], "mi", [helper.make_tensor_value_info("a", TensorProto.UINT8,
                                                                     [16, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [16, 64])],
                          [helper.make_tensor("b", TensorProto.UINT8, [32, 64],
                                              np.zeros(2048, np.uint8).tolist())])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "mi.onnx"))
    r = npusim.simulate(str(tmp_path / "mi.onnx"), "mobile", overrides=OVERRIDES[:1])
    assert r.layers[0]["op_type"] == "MatMulInteger" and macs(r) == 16 * 32 * 64


# ------------------------------------------------------ opset 27: linear-recurrent LLM ops

@pytest.mark.parametrize("past", [False, True])
def test_causal_conv_with_state_is_a_depthwise_conv_over_state_and_input(tmp_path, past):
    """x (2, 4, 8), 4 taps, bias, silu: 64 outputs, each 4 muls, 4 adds, the bias's add and
    silu's sigmoid and mul; 2 x 8 x 4 x 4 MACs. With a past state each batch's first tile
    also loads its 3 x 4 state rows (one 32 B request); present_state is the input's last 3
    rows per batch (a request loaded each), stored as one run of 2 x 12 bytes."""
    names = ["x", "w", "b"] + (["past"] if past else [])
    inputs = [("x", (2, 4, 8)), ("w", (4, 1, 4)), ("b", (4,))] + \
        ([("past", (2, 4, 3))] if past else [])
    node = helper.make_node("CausalConvWithState", names, ["y", "present"], name="cc",
                            activation="silu")
    r = sim(model(tmp_path, [node], inputs, [("y", (2, 4, 8)), ("present", (2, 4, 3))],
                  opset=27))
    conv, state = r.layers
    assert (conv["name"], state["name"]) == ("cc", "cc/state")
    assert conv["macs"] == 2 * 8 * 4 * 4
    assert busy(r) == cost(r, [("mul", 64, 4), ("add", 64, 4), ("add", 64, 1),
                               ("sigmoid", 64, 1), ("mul", 64, 1)])
    # per batch: 32 input bytes, the 16 weight bytes and 16 of bias (4 at accumulator width)
    # in whole requests; and the state rows with a past state
    assert conv["bytes_loaded"] == 2 * (R + R + R) + (2 * R if past else 0)
    assert state["bytes_loaded"] == 2 * R and state["bytes_stored"] == R


def test_causal_conv_with_state_waits_for_the_past_state_it_reads(tmp_path):
    """The past state computed by a layer before it (here a Relu): the convolution's first
    tiles read its rows, so the convolution waits for it."""
    nodes = [helper.make_node("Relu", ["p0"], ["past"], name="relu"),
             helper.make_node("CausalConvWithState", ["x", "w", "", "past"], ["y", "present"],
                              name="cc")]
    r = sim(model(tmp_path, nodes, [("x", (2, 64, 4)), ("w", (64, 1, 4)), ("p0", (2, 64, 3))],
                  [("y", (2, 64, 4)), ("present", (2, 64, 3))], opset=27))
    by = {layer["name"]: layer for layer in r.layers}
    assert by["cc"]["start_cycle"] >= by["relu"]["end_cycle"]


def test_causal_conv_with_state_shorter_than_its_state(tmp_path):
    """A 2-token input and 5 taps: present_state's last 2 rows are the input, the 2 before
    them the zero padding (stored, nothing loaded for them)."""
    node = helper.make_node("CausalConvWithState", ["x", "w"], ["y", "present"], name="cc")
    r = sim(model(tmp_path, [node], [("x", (1, 2, 2)), ("w", (2, 1, 5))],
                  [("y", (1, 2, 2)), ("present", (1, 2, 4))], opset=27))
    conv, state = r.layers
    assert conv["macs"] == 2 * 2 * 5
    assert busy(r) == cost(r, [("mul", 4, 5), ("add", 4, 5)])
    assert state["bytes_loaded"] == R and state["bytes_stored"] == 2 * R


def test_causal_conv_with_state_names_an_unknown_activation(tmp_path):
    """(ONNX's own inference names it first; the lowering checks again for graphs that
    skip it.)"""
    node = helper.make_node("CausalConvWithState", ["x", "w"], ["y", "present"], name="cc",
                            activation="gelu")
    with pytest.raises(NpusimError, match="node 'cc'.*activation value 'gelu'"):
        sim(model(tmp_path, [node], [("x", (1, 2, 4)), ("w", (2, 1, 3))],
                  [("y", (1, 2, 4)), ("present", (1, 2, 2))], opset=27))


def _varlen_conv(tmp_path, total, B, C, k, dilation=1, capacity=0):
    keep = (k - 1) * dilation
    outs = [("y", (total, C)), ("s1", (B, C, keep))] + \
        ([("su", (B, capacity, C))] if capacity else [])
    node = helper.make_node("VarlenCausalConvWithState", ["x", "w", "cu", "b", "s0"],
                            [o[0] for o in outs], name="vc", domain="com.microsoft",
                            activation="silu", dilation=dilation,
                            **({"state_update_capacity": capacity} if capacity else {}))
    return sim(model(tmp_path, [node], [("x", (total, C)), ("w", (C, 1, k)), ("b", (C,)),
                                         ("cu", (B + 1,), TensorProto.INT32),
                                         ("s0", (B, C, keep))], outs,
                     domains=["com.microsoft"], name=f"vc{total}_{B}_{dilation}"))


def test_varlen_causal_conv_is_causal_conv_with_state_on_each_sequence(tmp_path):
    """Packed (total, C) tokens of B equal sequences cost what CausalConvWithState costs on
    (B, C, T) with a past state (test above: 2 x 8 tokens, 4 channels, 4 taps)."""
    r = _varlen_conv(tmp_path, 16, 2, 4, 4)
    conv, state = r.layers
    assert (conv["name"], state["name"]) == ("vc", "vc/state")
    assert conv["macs"] == 2 * 8 * 4 * 4
    assert busy(r) == cost(r, [("mul", 64, 4), ("add", 64, 4), ("add", 64, 1),
                               ("sigmoid", 64, 1), ("mul", 64, 1)])
    assert conv["bytes_loaded"] == 2 * (R + R + R) + 2 * R
    assert state["bytes_loaded"] == 2 * R and state["bytes_stored"] == R


def test_varlen_causal_conv_takes_ragged_sequences_as_the_even_spread(tmp_path):
    """11 tokens over 3 sequences: two of 4 tokens and one of 3, a conv each, and a layer
    joining them."""
    r = _varlen_conv(tmp_path, 11, 3, 4, 4)
    assert [layer["name"] for layer in r.layers] == ["vc/g0", "vc/g0/state", "vc/g1",
                                                     "vc/g1/state", "vc"]
    assert [layer["macs"] for layer in r.layers] == [2 * 4 * 4 * 4, 0, 3 * 4 * 4, 0, 0]
    by = {layer["name"]: layer for layer in r.layers}
    assert by["vc"]["start_cycle"] >= max(by[n]["end_cycle"] for n in by if n != "vc")


def test_varlen_causal_conv_dilation_spaces_the_taps(tmp_path):
    """Dilation 2: the same 4 taps a token, a state of (4 - 1) x 2 = 6 positions (each
    sequence's first tile loads 6 x 4 state bytes, one request) and present_state the
    input's last 6 rows."""
    r = _varlen_conv(tmp_path, 16, 2, 4, 4, dilation=2)
    conv, state = r.layers
    assert busy(r) == cost(r, [("mul", 64, 4), ("add", 64, 4), ("add", 64, 1),
                               ("sigmoid", 64, 1), ("mul", 64, 1)])
    assert state["bytes_stored"] == requests(2 * 6 * 4)


def test_varlen_causal_conv_state_must_fit_the_taps(tmp_path):
    """4 taps at dilation 2 reach 6 positions back: a state of 3 is refused, naming it."""
    node = helper.make_node("VarlenCausalConvWithState", ["x", "w", "cu", "", "s0"],
                            ["y", "s1"], name="vc", domain="com.microsoft", dilation=2)
    with pytest.raises(NpusimError, match=r"initial_state \(2, 4, 3\) must be .*kernel 4"):
        sim(model(tmp_path, [node], [("x", (8, 4)), ("w", (4, 1, 4)),
                                     ("cu", (3,), TensorProto.INT32), ("s0", (2, 4, 3))],
                  [("y", (8, 4)), ("s1", (2, 4, 3))], domains=["com.microsoft"]))


def test_varlen_causal_conv_captures_the_first_tokens(tmp_path):
    """state_update_capacity 2: each sequence's first 2 input rows copied out."""
    r = _varlen_conv(tmp_path, 16, 2, 4, 4, capacity=2)
    capture = r.layers[-1]
    assert capture["name"] == "vc/capture"
    assert capture["bytes_stored"] == requests(2 * 2 * 4)


def _linear_attention(tmp_path, rule, B, T, Hq, Hkv, dk, dv, chunk, past=False,
                      decay_width=None, beta_width=None, extra=()):
    inputs = [("q", (B, T, Hq * dk)), ("k", (B, T, Hkv * dk)), ("v", (B, T, Hkv * dv))]
    names = ["q", "k", "v", "past" if past else "", "", ""]
    if past:
        inputs.append(("past", (B, Hkv, dk, dv)))
    if decay_width:
        inputs.append(("decay", (B, T, decay_width)))
        names[4] = "decay"
    if beta_width:
        inputs.append(("beta", (B, T, beta_width)))
        names[5] = "beta"
    while names[-1] == "":
        names.pop()
    node = helper.make_node("LinearAttention", names, ["y", "present"], name="la",
                            q_num_heads=Hq, kv_num_heads=Hkv, update_rule=rule,
                            chunk_size=chunk)
    return sim(model(tmp_path, [node], inputs,
                     [("y", (B, T, Hq * dv)), ("present", (B, Hkv, dk, dv))], opset=27),
               extra=extra)


def test_linear_attention_gated_delta_chunks_follow_each_other_through_the_state(tmp_path):
    """Gated DeltaNet, grouped (2 query heads on 1 KV head), d_k = d_v = 4, 8 tokens in 2
    chunks of 4, a decay and an update rate per head. Per chunk (c = 4), MACs:
    scores 2 x 4 x 4 x 4, kk 4 x 4 x 4, w and u 4 x 4 x 4 each, delta 4 x 4 x 4,
    inter 2 x 4 x 4 x 4, out 2 x 4 x 4 x 4, state 4 x 4 x 4. Vector: the decay applied to
    32 Q elements (add, exp, mul) and 16 K elements (add, 2 exp, sub, 2 mul), the causal
    mask on 32 scores, beta, the mask and the c^3/6 inverse on 16 (mul 3, add 1), the
    state's 16 elements decayed (mul)."""
    r = _linear_attention(tmp_path, "gated_delta", 1, 8, 2, 1, 4, 4, 4, decay_width=1,
                          beta_width=1)
    parts = ["gates", "scores", "kk", "masks", "w", "u", "delta", "inter", "out", "decay",
             "state"]
    names = [f"la/c{i}/{p}" for i in range(2) for p in parts] + ["la"]
    assert [layer["name"] for layer in r.layers] == names
    by = {layer["name"]: layer for layer in r.layers}
    per_chunk = {"scores": 128, "kk": 64, "w": 64, "u": 64, "delta": 64, "inter": 128,
                 "out": 128, "state": 64}
    for i in range(2):
        for p, n in per_chunk.items():
            assert by[f"la/c{i}/{p}"]["macs"] == n, (i, p)
    assert macs(r) == 2 * sum(per_chunk.values())
    one_chunk = (cost(r, [("add", 32, 1), ("exp", 32, 1), ("mul", 32, 1)])
                 + cost(r, [("add", 16, 1), ("exp", 16, 2), ("sub", 16, 1), ("mul", 16, 2)])
                 + cost(r, [("mul", 32, 1)]) + cost(r, [("mul", 16, 3), ("add", 16, 1)])
                 + cost(r, [("mul", 16, 1)]))
    assert busy(r) == 2 * one_chunk
    # the second chunk reads the state the first one wrote; each update waits for the
    # chunk's readers of the state it replaces
    for reader in ("delta", "inter", "decay"):
        assert by[f"la/c1/{reader}"]["start_cycle"] >= by["la/c0/state"]["end_cycle"]
        for i in range(2):
            assert by[f"la/c{i}/state"]["start_cycle"] >= by[f"la/c{i}/{reader}"]["end_cycle"]
    assert by["la"]["start_cycle"] >= by["la/c1/out"]["end_cycle"]


def test_linear_attention_decode_step_is_one_chunk_of_one_token(tmp_path):
    """The plain linear rule, one token, 2 batches x 2 heads, d_k = d_v = 8, a past state:
    scores 2 x 2 x 8, inter and state 2 x 2 x 8 x 8 each, out 2 x 2 x 8; no vector work
    but the causal mask on the 4 one-element score blocks."""
    r = _linear_attention(tmp_path, "linear", 2, 1, 2, 2, 8, 8, 64, past=True)
    assert [layer["name"] for layer in r.layers] == [
        "la/c0/scores", "la/c0/masks", "la/c0/inter", "la/c0/out", "la/c0/state", "la"]
    assert [layer["macs"] for layer in r.layers] == [32, 0, 256, 32, 256, 0]
    assert busy(r) == cost(r, [("mul", 4, 1)])


def test_linear_attention_state_update_waits_for_the_chunks_readers(tmp_path):
    """The plain rule on 4 cores: a chunk's state update needs nothing the readers of the
    old state produce, but it overwrites that state in place, so it waits for them."""
    r = _linear_attention(tmp_path, "linear", 2, 64, 4, 4, 32, 32, 16,
                          extra=["num_cores=4"])
    by = {layer["name"]: layer for layer in r.layers}
    for i in range(4):
        assert by[f"la/c{i}/state"]["start_cycle"] >= by[f"la/c{i}/inter"]["end_cycle"]
        if i:
            assert by[f"la/c{i}/inter"]["start_cycle"] >= by[f"la/c{i - 1}/state"]["end_cycle"]


def test_linear_attention_gated_needs_its_decay(tmp_path):
    with pytest.raises(NpusimError, match="node 'la'.*update_rule 'gated' requires decay"):
        _linear_attention(tmp_path, "gated", 1, 4, 1, 1, 4, 4, 64)


@pytest.mark.parametrize("T", [1, 8])
def test_linear_attention_heads_read_and_write_their_own_blocks(tmp_path, T):
    """Every (batch, head) GEMM of a chunk reads its own addend, state and weight block and
    writes its own output block, for a decode step (one-row addends) as for a prefill
    chunk: per slot (x, weights, addend, output) as many distinct base addresses as
    (batch, head) pairs, but the weights of a query-head layer, which the 2 query heads of
    a KV head share; and the blocks written by `out` do not overlap."""
    from npusim.config import load_config
    from npusim.frontend import load_graph
    from npusim.kernels import isa
    from npusim.lowering import lower_graph

    B, Hq, Hkv, dk, dv = 2, 4, 2, 8, 8
    r = _linear_attention(tmp_path, "delta", B, T, Hq, Hkv, dk, dv, 64, beta_width=Hkv)
    prog = lower_graph(load_graph(tmp_path / "m.onnx"), load_config("gemmini_validation"))
    names = [info.name for info in prog.layers]
    for part, heads in (("delta", Hkv), ("inter", Hq), ("out", Hq), ("state", Hkv)):
        tiles = prog.tile[prog.tile[:, isa.T_LAYER] == names.index(f"la/c0/{part}")]
        assert len(tiles) == B * heads
        for slot in range(isa.N_TILE_SLOTS):
            bases = tiles[:, isa.T_BASE0 + slot]
            if not bases.any():
                continue  # a slot the layer does not use (no addend)
            shared = slot == 1 and heads == Hq  # a KV head's state or U' for its 2 heads
            distinct = len(set(bases))
            assert distinct == B * (Hkv if shared else heads), (part, slot)
    out = prog.tile[prog.tile[:, isa.T_LAYER] == names.index("la/c0/out")]
    starts = sorted(out[:, isa.T_BASE0 + 3])
    assert all(b - a >= T * dv for a, b in zip(starts, starts[1:]))  # 1-byte elements
    assert r.total_cycles > 0


def _gated_delta_net(tmp_path, total, Hq, dk, Hv, dv, B, *, lead=None, cu=False,
                     packed=False, decay_width=None, name="gdn", **attrs):
    """ONNX Runtime's GatedDeltaNet: token-major (total, H, d) operands (or ``lead`` dims
    (B, S)), an initial state (B, H_v, d_v, d_k)."""
    lead = list(lead or [total])
    dw = decay_width or Hv
    inputs = ([("q", (*lead, 2 * Hq * dk + Hv * dv))] if packed else
              [("q", (*lead, Hq, dk)), ("k", (*lead, Hq, dk)), ("v", (*lead, Hv, dv))])
    names = ["q", "", ""] if packed else ["q", "k", "v"]
    names.append("cu" if cu else "")
    if cu:
        inputs.append(("cu", (B + 1,), TensorProto.INT32))
    inputs += [("decay", (*lead, Hv) if dw == Hv else (*lead, Hv, dk)), ("beta", (*lead, Hv)),
               ("s0", (B, Hv, dv, dk))]
    names += ["decay", "beta", "s0"]
    node = helper.make_node("GatedDeltaNet", names, ["y", "s1"], name=name,
                            domain="com.microsoft", **attrs)
    return model(tmp_path, [node], inputs, [("y", (*lead, Hv, dv)), ("s1", (B, Hv, dv, dk))],
                 domains=["com.microsoft"])


def _gdn_macs(c, dk, dv):
    """One chunk of c tokens, one head: scores, K K^T (c x dk x c), W (c x c x dk), U and
    out (c x c x dv), delta, inter (c x dk x dv) and the state (dv x c x dk)."""
    return 2 * c * c * dk + c * c * dk + 2 * c * c * dv + 3 * c * dk * dv


def test_gated_delta_net_decode_step_value_heads_share_their_query_head(tmp_path):
    """A decode step of 2 sequences, 2 query/key heads shared by 4 value heads (inverse
    grouped-query), d_k = d_v = 8, a decay and an update rate per value head: every GEMM
    runs per value head; vector work as LinearAttention's, at 4 heads: Q' and K'' of 64
    elements each, the masks on 8 one-element blocks, 512 state elements decayed."""
    r = sim(_gated_delta_net(tmp_path, 2, 2, 8, 4, 8, 2))
    parts = ["gates", "scores", "kk", "masks", "w", "u", "delta", "inter", "out", "decay",
             "state"]
    assert [layer["name"] for layer in r.layers] == [f"gdn/c0/{p}" for p in parts] + ["gdn"]
    heads = 2 * 4
    assert [layer["macs"] for layer in r.layers] == [
        0, heads * 8, heads * 8, 0, heads * 8, heads * 8, heads * 64, heads * 64, heads * 8,
        0, heads * 64, 0]
    assert busy(r) == (cost(r, [("add", 64, 1), ("exp", 64, 1), ("mul", 64, 1)])
                       + cost(r, [("add", 64, 1), ("exp", 64, 2), ("sub", 64, 1),
                                  ("mul", 64, 2)])
                       + cost(r, [("mul", 8, 1)]) + cost(r, [("mul", 8, 3), ("add", 8, 1)])
                       + cost(r, [("mul", 512, 1)]))


def test_gated_delta_net_reads_the_shared_query_and_its_own_state(tmp_path):
    """Per value head, the scores read the query rows of its query head (2 value heads
    share each) and write their own block; inter reads the value head's own state."""
    from npusim.config import load_config
    from npusim.frontend import load_graph
    from npusim.kernels import isa
    from npusim.lowering import lower_graph

    B, Hq, Hv = 2, 2, 4
    path = _gated_delta_net(tmp_path, B, Hq, 8, Hv, 8, B, update_rule="delta")
    prog = lower_graph(load_graph(path), load_config("gemmini_validation"))
    names = [info.name for info in prog.layers]

    def distinct(part, slot):
        tiles = prog.tile[prog.tile[:, isa.T_LAYER] == names.index(f"gdn/c0/{part}")]
        assert len(tiles) == B * Hv
        return len(set(tiles[:, isa.T_BASE0 + slot]))

    assert distinct("scores", 0) == B * Hq  # Q rows: shared by 2 value heads
    assert distinct("scores", 3) == B * Hv
    assert distinct("inter", 1) == B * Hv  # each value head's state
    assert distinct("state", 3) == B * Hv


def test_gated_delta_net_costs_what_linear_attention_costs_without_head_sharing(tmp_path):
    """With as many value heads as query heads, GatedDeltaNet on (B, S, H, d) is
    LinearAttention on (B, S, H * d) with a transposed state: the same MACs per layer and
    the same vector work."""
    B, S, H, dk, dv = 2, 6, 2, 8, 4
    gdn = sim(_gated_delta_net(tmp_path, B * S, H, dk, H, dv, B, lead=(B, S), chunk_size=4,
                               decay_width=H * dk))
    la = _linear_attention(tmp_path, "gated_delta", B, S, H, H, dk, dv, 4,
                           decay_width=H * dk, beta_width=H, past=True)
    def parts(r):
        return [(layer["name"].partition("/")[2], layer["macs"]) for layer in r.layers]

    assert parts(gdn) == parts(la)
    assert busy(gdn) == busy(la)


def test_gated_delta_net_takes_ragged_sequences_as_the_even_spread(tmp_path):
    """cu_seqlens makes the lengths data: 10 tokens over 3 sequences are one of 4 tokens
    and two of 3, each chunked on its own (chunk_size 64: one chunk each)."""
    r = sim(_gated_delta_net(tmp_path, 10, 1, 8, 2, 8, 3, cu=True))
    assert {layer["name"].split("/c0")[0] for layer in r.layers} == {"gdn/g0", "gdn/g1",
                                                                      "gdn"}
    assert macs(r) == 2 * (1 * _gdn_macs(4, 8, 8) + 2 * _gdn_macs(3, 8, 8))


def test_gated_delta_net_final_state_waits_for_every_group(tmp_path):
    """With ragged sequences each group's last chunk writes its part of final_state: a
    reader of final_state waits for all of them."""
    path = _gated_delta_net(tmp_path, 10, 1, 8, 2, 8, 3, cu=True)
    m = onnx.load(str(path))
    m.graph.node.append(helper.make_node("Relu", ["s1"], ["r"], name="relu"))
    m.graph.output.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [3, 2, 8, 8]))
    onnx.save(m, str(path))
    from npusim.config import load_config
    from npusim.frontend import load_graph
    from npusim.lowering import lower_into
    from npusim.program import ProgramBuilder

    b = ProgramBuilder()
    lower_into(b, load_graph(path), load_config("gemmini_validation"))
    names = [b.layer_info(i).name for i in range(b.n_layers)]

    def waits_for(layer, other):  # through the layers' predecessors
        seen, todo = set(), [layer]
        while todo:
            for p in b.preds_of(todo.pop()):
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        return other in seen

    states = [i for i, n in enumerate(names) if n.endswith("/state")]
    assert len(states) == 2
    assert all(waits_for(names.index("relu"), s) for s in states)


def test_gated_delta_net_packed_qkv_reads_the_normalized_keys(tmp_path):
    """Packed QKV with the L2 norm: the norm writes the Q rows, then the K rows, into its
    copy; the recurrence reads Q and K there: K K^T's rows start total x W bytes after
    the scores' (K's first column), not at K's column in the packed layout."""
    from npusim.config import load_config
    from npusim.frontend import load_graph
    from npusim.kernels import isa
    from npusim.lowering import lower_graph

    total, Hq, dk, Hv, dv = 4, 2, 8, 2, 8
    W = 2 * Hq * dk + Hv * dv
    path = _gated_delta_net(tmp_path, total, Hq, dk, Hv, dv, 1, packed=True, qk_l2_norm=1,
                            update_rule="delta")
    prog = lower_graph(load_graph(path), load_config("gemmini_validation"))
    names = [info.name for info in prog.layers]

    def first_x(part):
        tiles = prog.tile[prog.tile[:, isa.T_LAYER] == names.index(f"gdn/c0/{part}")]
        return int(tiles[0, isa.T_BASE0])

    assert first_x("kk") - first_x("scores") == total * W  # 1-byte elements


def test_gated_delta_net_packed_qkv_with_its_gates_on_the_vector_unit(tmp_path):
    """Packed QKV, the Qwen3.5 gate (-exp(a_log) Softplus(decay + dt_bias): add, exp, add,
    log, mul per decay value), a sigmoid on beta and the L2 norm of every query and key
    head: three vector layers first; the recurrence's MACs are the unpacked ones."""
    total, Hq, dk, Hv, dv = 4, 2, 8, 4, 8
    r = sim(_gated_delta_net(tmp_path, total, Hq, dk, Hv, dv, 1, packed=True,
                             gate_activation="softplus", beta_activation="sigmoid",
                             qk_l2_norm=1))
    by = {layer["name"]: layer for layer in r.layers}
    assert [layer["name"] for layer in r.layers[:3]] == ["gdn/gate", "gdn/beta", "gdn/l2norm"]
    E = total * Hv
    assert by["gdn/gate"]["vector_cycles"] == cost(r, [("add", E, 2), ("exp", E, 1),
                                                       ("log", E, 1), ("mul", E, 1)])
    assert by["gdn/beta"]["vector_cycles"] == cost(r, [("sigmoid", E, 1)])
    # the norm reads each query and key head's row once (a DMA request each), not the values
    assert by["gdn/l2norm"]["bytes_loaded"] == 2 * total * Hq * requests(dk)
    assert macs(r) == Hv * _gdn_macs(total, dk, dv)
    assert by["gdn/c0/gates"]["start_cycle"] >= by["gdn/l2norm"]["end_cycle"]


@pytest.mark.parametrize("kw,match", [
    (dict(Hv=3), "H_v a multiple of H_q"),
    (dict(total=5, B=2), "5 tokens do not split evenly over initial_state's batch of 2 "
                         r"\(give cu_seqlens"),
])
def test_gated_delta_net_bad_heads_are_a_clear_error(tmp_path, kw, match):
    args = dict(total=4, Hq=2, dk=8, Hv=4, dv=8, B=1)
    args.update(kw)
    with pytest.raises(NpusimError, match=match):
        sim(_gated_delta_net(tmp_path, **args))
