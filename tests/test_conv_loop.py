"""Convolution loop nest, worked out by hand on the Gemmini-like core (8x8, int8, ideal memory
answering one 32-byte request per cycle, one core).

Each case runs one tile. Its loads go out back to back, the input then the weights (a run
costs one request per 32-byte block it touches); the first PRELOAD waits for the weights and
drains the array (7 + 8 cycles); then every weight block — per kernel position (all spatial
dims) per block of up to 8 input channels, per block of 8 output channels — streams every
output row of the tile: a row of q pixels takes 8 cycles per 8 pixels and max(rest, 4) for
the rest, and the next block's preload (8 cycles) rides beside the last chunk, adding
8 - (that chunk) when it is shorter. The last GEMM's results reach the accumulator
8 + 8 - 1 + 1 = 16 cycles after its stream; then the output moves out.

A change to the loop nest (dense packing of the reduction, another block order, blocks of
the wrong size) changes these counts.
"""

from __future__ import annotations

from math import prod

import onnx
import pytest
from onnx import TensorProto, helper

import npusim
from helpers import weight
from npusim.config import load_config
from npusim.errors import NpusimError
from npusim.frontend import load_graph
from npusim.lowering import lower_graph
from npusim.lowering.mapping import parse_mapping_file

CONFIG = "gemmini_validation"
FILL = 7 + 8  # weight read + shift of the first preload, after the array drained
DRAIN = 8 + 8 - 1 + 1  # the last GEMM's results reach the accumulator


def conv_model(tmp_path, x_shape, w_shape, y_shape, strides, name="conv", group=1):
    node = helper.make_node("Conv", ["x", "w"], ["y"], name=name,
                            kernel_shape=list(w_shape[2:]), strides=list(strides), group=group)
    graph = helper.make_graph(
        [node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))],
        initializer=[weight("w", list(w_shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def run(tmp_path, x_shape, w_shape, y_shape, strides, mapping=None, **kw):
    path = conv_model(tmp_path, x_shape, w_shape, y_shape, strides, **kw)
    mfile = None
    if mapping:
        mfile = tmp_path / "one_tile.mapping"
        mfile.write_text(mapping + "\n")
    r = npusim.simulate(str(path), CONFIG, mapping=str(mfile) if mfile else None)
    assert sum(c["tiles"] for c in r.cores) == 1  # the whole layer is one tile
    return r


# (x NCHW, w MCHW, y NCHW, strides, requests of input / weights / output,
#  array stream cycles, cycles the next preloads add)
CASES = {
    # C=3 3x3 stride 1: 9 kernel positions, each one block using 3 of 8 rows; 8 rows of 8
    # pixels per block = 64 cycles; 10x10x3 = 300 B input, 8 weight runs of 27 B touch 14
    # request blocks, 8x8x8 = 512 B output
    "c3_3x3_s1": ((1, 3, 10, 10), (8, 3, 3, 3), (1, 8, 8, 8), (1, 1), (10, 14, 16), 9 * 64, 0),
    # the same with stride 2: the dense 17x17 window is loaded (867 B), same array work
    "c3_3x3_s2": ((1, 3, 17, 17), (8, 3, 3, 3), (1, 8, 8, 8), (2, 2), (28, 14, 16), 9 * 64, 0),
    # 1x1 stride 2 (a ResNet downsample): only the 8x8 strided pixels are loaded, 64 runs
    # of 16 channels; 16 channels = 2 blocks of 8 rows, 64 cycles each
    "1x1_s2": ((1, 16, 16, 16), (8, 16, 1, 1), (1, 8, 8, 8), (2, 2), (64, 8, 16), 2 * 64, 0),
    # output rows of 10 pixels: 8 + max(2, 4) = 12 cycles each, 4 rows = 48 a block; the
    # last chunk (4 cycles) leaves the next preload 4 more: 9 * 48 + 8 * 4
    "rows_of_10": ((1, 3, 6, 12), (8, 3, 3, 3), (1, 8, 4, 10), (1, 1), (7, 14, 10),
                   9 * 48, 8 * 4),
    # 12 input channels: a block of 8 rows and one of 4 (C not a multiple of the height)
    "c12_1x1": ((1, 12, 4, 8), (8, 12, 1, 1), (1, 8, 4, 8), (1, 1), (12, 10, 8), 2 * 32, 0),
}


def one_tile_mapping(x, w, y):
    (N, C, *_), (M, _, S, R), (_, _, P, Q) = x, w, y
    return (f"[T] N{N} C{C} M{M} P{P} Q{Q} S{S} R{R} - [O] N1 C1 M1 P1 Q1 S1 R1 - "
            f"[I] N1 C{C} M{M} P{P} Q{Q} S{S} R{R}")


@pytest.mark.parametrize("name", list(CASES))
def test_conv_cycles_follow_the_loop_nest(tmp_path, name):
    x, w, y, strides, (n_x, n_w, n_y), stream, extra = CASES[name]
    r = run(tmp_path, x, w, y, strides, mapping=one_tile_mapping(x, w, y))
    assert r.total_cycles == n_x + n_w + FILL + stream + extra + DRAIN + n_y
    assert r.layers[0]["systolic_cycles"] == stream
    macs = y[1] * y[2] * y[3] * w[1] * w[2] * w[3]
    assert r.layers[0]["macs"] == sum(c["macs"] for c in r.cores) == macs


def test_strided_1x1_conv_loads_only_the_pixels_it_uses(tmp_path):
    x, w, y, strides, (n_x, _, _), _, _ = CASES["1x1_s2"]
    r = run(tmp_path, x, w, y, strides, mapping=one_tile_mapping(x, w, y))
    # 64 input pixels of 16 B (one 32-B request each), 8 weight rows, nothing else
    assert r.layers[0]["bytes_loaded"] == (n_x + 8) * 32


# The loop nest in 1, 2 and 3 spatial dims: (x, w, y, strides, mapping or None for the
# heuristic's one tile, requests of input / weights / output, array stream cycles, cycles
# the next preloads add)
RANKS = {
    # Conv1d: 3 channels, 20 positions, kernel 5 -> 16 outputs of 8 channels. One segment
    # of 16 pixels per block (8 + 8 cycles), 5 kernel positions of one block each.
    # Requests: input 60 B -> 2; weights 8 runs of 15 B -> 11 blocks; output 128 B -> 4.
    1: ((1, 3, 20), (8, 3, 5), (1, 8, 16), (1,),
        "[T] N1 C3 M8 P1 Q16 S1 R5 - [O] N1 C1 M1 P1 Q1 S1 R1 - [I] N1 C3 M8 P1 Q16 S1 R5",
        (2, 11, 4), 5 * 16, 0),
    2: CASES["c3_3x3_s1"][:4] + (one_tile_mapping(*CASES["c3_3x3_s1"][:3]),)
    + CASES["c3_3x3_s1"][4:],
    # Conv3d: 4 channels, 4x6x6 input, 3x3x3 kernel -> 2x4x4 outputs of 8 channels, one tile
    # (the heuristic's choice). 27 kernel positions of one block (4 rows used); each streams
    # 2*4 = 8 output rows of 4 pixels (max(4, 4) = 4 cycles) = 32 cycles, and the next
    # preload adds 8 - 4 = 4: 27 * 32 + 26 * 4. Requests: input 576 B -> 18; weights 8 runs
    # of 108 B -> 34 blocks; output 256 B -> 8.
    3: ((1, 4, 4, 6, 6), (8, 4, 3, 3, 3), (1, 8, 2, 4, 4), (1, 1, 1), None, (18, 34, 8),
        27 * 32, 26 * 4),
}


def conv_form_model(tmp_path, op, x_shape, w_shape, y_shape, strides):
    """A Conv, or a quantized convolution of the same shapes: ConvInteger (uint8 x int8 ->
    int32) or QLinearConv (with its scales and zero points)."""
    u8, i8, f32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.FLOAT
    x_type, w_type, y_type = {"Conv": (f32, f32, f32), "ConvInteger": (u8, i8, TensorProto.INT32),
                              "QLinearConv": (u8, i8, u8)}[op]
    inits = [weight("w", list(w_shape), w_type)]
    inputs = ["x", "w"]
    if op == "QLinearConv":
        inputs = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
        inits += [weight(n, [], f32) for n in ("xs", "ws", "ys")]
        inits += [weight("xz", [], u8), weight("wz", [], i8), weight("yz", [], u8)]
    node = helper.make_node(op, inputs, ["y"], name="conv", kernel_shape=list(w_shape[2:]),
                            strides=list(strides))
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info("x", x_type, list(x_shape))],
        [helper.make_tensor_value_info("y", y_type, list(y_shape))], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / f"{op}_{len(x_shape) - 2}d.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("op", ["Conv", "ConvInteger", "QLinearConv"])
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_every_convolution_form_runs_the_loop_nest(tmp_path, op, rank):
    # 1-D and 3-D convolutions and the quantized ones (int8 on the array, as the float conv
    # is on this 1-byte config: the same cycles; scales and zero points are not loaded)
    x, w, y, strides, mapping, (n_x, n_w, n_y), stream, extra = RANKS[rank]
    path = conv_form_model(tmp_path, op, x, w, y, strides)
    mfile = None
    if mapping:
        mfile = tmp_path / "one_tile.mapping"
        mfile.write_text(mapping + "\n")
    r = npusim.simulate(str(path), CONFIG, mapping=str(mfile) if mfile else None)
    assert sum(c["tiles"] for c in r.cores) == 1
    layer = r.layers[0]
    assert layer["op_type"] == op
    assert r.total_cycles == n_x + n_w + FILL + stream + extra + DRAIN + n_y
    assert layer["systolic_cycles"] == stream
    assert layer["macs"] == sum(c["macs"] for c in r.cores) == prod(y[1:]) * prod(w[1:])
    assert layer["bytes_loaded"] == (n_x + n_w) * 32


def test_convolution_over_four_spatial_dims_is_listed_up_front(tmp_path):
    path = conv_form_model(tmp_path, "Conv", (1, 2, 3, 3, 3, 3), (4, 2, 1, 1, 1, 1),
                           (1, 4, 3, 3, 3, 3), (1, 1, 1, 1))
    with pytest.raises(NpusimError, match=r"Conv: conv \(the convolution loop nest takes "
                                          r"1, 2 or 3 spatial dims\)"):
        npusim.simulate(str(path), CONFIG)


def test_depthwise_convolutions_of_every_rank_run_on_the_vector_unit(tmp_path):
    # one 3-tap filter per channel over 16 positions: a mul and an add per tap and output
    # element on the vector unit, no array work
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="dw", kernel_shape=[3], group=8)
    graph = helper.make_graph(
        [node], "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 18])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16])],
        initializer=[weight("w", [8, 1, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "dw.onnx"))
    r = npusim.simulate(str(tmp_path / "dw.onnx"), CONFIG)
    v = r.config.core.vector
    passes = -(-16 * 8 // (v.lanes * v.alus))
    assert r.layers[0]["macs"] == 16 * 8 * 3 and sum(c["macs"] for c in r.cores) == 0
    assert r.layers[0]["systolic_cycles"] == 0
    assert sum(c["vector_busy_cycles"] for c in r.cores) == \
        passes * 3 * (v.latency["mul"] + v.latency["add"])


def test_grouped_conv_runs_each_group_on_its_channels(tmp_path):
    # 2 groups of 4 input and 8 output channels, 3x3 over 6x6 -> 4x4: each group is its own
    # tile with 9 blocks of 4 rows; the MACs count each group's channels only
    path = conv_model(tmp_path, (1, 8, 6, 6), (16, 4, 3, 3), (1, 16, 4, 4), (1, 1), group=2)
    r = npusim.simulate(str(path), CONFIG)
    assert r.layers[0]["macs"] == sum(c["macs"] for c in r.cores) == 16 * 16 * 4 * 9
    assert sum(c["tiles"] for c in r.cores) == 2


def test_every_mapping_the_rtl_ran_fits(tmp_path):
    # Gemmini's own tiler chose these tiles for a 64 KiB scratchpad and 16 KiB accumulator
    # (tiled_conv_auto); the fit check counts what the hardware holds, so each is accepted
    import gemmini_cases as gc

    ref = gc.load_reference()
    for case in ref["cases"]:
        if case["op"] != "conv":
            continue
        model, mapping = gc.write_case(case, tmp_path)
        overrides = [o for o in gc.case_overrides(ref, case) if not o.startswith("core.spad")]
        cfg = load_config(CONFIG, overrides + ["core.spad_kib=64"])
        program = lower_graph(load_graph(str(model)), cfg, parse_mapping_file(mapping))
        assert program.layers[0].mapping_source.endswith(":1")


def test_the_next_tile_computes_while_the_output_moves_out(tmp_path):
    # 16 output channels in two tiles of 8 (one core, both tiles held at once). Tile 1 as
    # c3_3x3_s1 up to its results in the accumulator (10 + 14 + 15 + 576 + 16 = 631); tile
    # 2's loads ran ahead, its first preload drains the array (15 more), it computes 576 and
    # drains 16 while tile 1's output moves out; then tile 2's output: 64 pixels of 8
    # channels, 8-byte runs 16 bytes apart, one request each
    x, w, y = (1, 3, 10, 10), (16, 3, 3, 3), (1, 16, 8, 8)
    mapping = ("[T] N1 C3 M16 P8 Q8 S3 R3 - [O] N1 C1 M2 P1 Q1 S1 R1 - "
               "[I] N1 C3 M8 P8 Q8 S3 R3")
    path = conv_model(tmp_path, x, w, y, (1, 1))
    mfile = tmp_path / "two_tiles.mapping"
    mfile.write_text(mapping + "\n")
    r = npusim.simulate(str(path), CONFIG, mapping=str(mfile))
    assert sum(c["tiles"] for c in r.cores) == 2
    first = 10 + 14 + FILL + 9 * 64 + DRAIN
    assert r.total_cycles == first + FILL + 9 * 64 + DRAIN + 64


def test_line_in_onnxim_convws_orientation_names_the_width_p(tmp_path):
    # ONNXim's ConvWS keys a layer by Q = height, P = width. The rows_of_10 layer (4 output
    # rows of 10) written that way round, "P10 Q4", is found and runs as the same one tile
    x, w, y, strides, (n_x, n_w, n_y), stream, extra = CASES["rows_of_10"]
    r = run(tmp_path, x, w, y, strides,
            mapping="[T] N1 C3 M8 P10 Q4 S3 R3 - [O] N1 C1 M1 P1 Q1 S1 R1 - "
                    "[I] N1 C3 M8 P10 Q4 S3 R3")
    assert r.layers[0]["mapping_source"].endswith(":1")
    assert r.total_cycles == n_x + n_w + FILL + stream + extra + DRAIN + n_y


def test_inner_tile_read_in_the_orientation_its_total_matched(tmp_path):
    # the same layer cut in two along its width, ONNXim's way round: [I] P5 Q4 is 4 rows of
    # 5 pixels (read as 5 rows of 4 it would take three tiles). Each tile: 9 blocks of 4 rows
    # of max(5, 4) = 5 cycles, and the next preload adds 8 - 5 = 3 after each but the last
    x, w, y = (1, 3, 6, 12), (8, 3, 3, 3), (1, 8, 4, 10)
    path = conv_model(tmp_path, x, w, y, (1, 1))
    mfile = tmp_path / "by_width.mapping"
    mfile.write_text("[T] N1 C3 M8 P10 Q4 S3 R3 - [O] N1 C1 M1 P2 Q1 S1 R1 - "
                     "[I] N1 C3 M8 P5 Q4 S3 R3\n")
    r = npusim.simulate(str(path), CONFIG, mapping=str(mfile))
    assert r.layers[0]["mapping_source"].endswith(":1")
    assert sum(c["tiles"] for c in r.cores) == 2
    assert r.layers[0]["systolic_cycles"] == 2 * 9 * 4 * 5
