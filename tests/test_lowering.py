"""Lowering of MatMul / Gemm / Conv into tiles: shapes, MACs, bytes, capacity, errors."""


import onnx
import pytest
from onnx import TensorProto, helper

import npusim
from helpers import weight
from npusim.config import load_config
from npusim.errors import NpusimError
from npusim.frontend import load_graph
from npusim.kernels import isa
from npusim.lowering import lower_graph
from npusim.lowering.mapping import parse_mapping_line
from npusim.lowering.tiling import (ACC_BYTES, Budget, ConvShape, choose_conv_tile,
                                    choose_gemm_tile, padded)



def save(tmp_path, nodes, inputs, outputs, weights, name="m"):
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                          initializer=[weight(n, s) for n, s in weights])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(m, str(path))
    return path


def conv_model(tmp_path, c, m, hw, k, stride=1, pad=0, dil=1, group=1, bias=False):
    out = (hw + 2 * pad - dil * (k - 1) - 1) // stride + 1
    ins = ["x", "w"] + (["b"] if bias else [])
    node = helper.make_node("Conv", ins, ["y"], name="conv", kernel_shape=[k, k],
                            strides=[stride] * 2, pads=[pad] * 4, dilations=[dil] * 2, group=group)
    weights = [("w", [m, c // group, k, k])] + ([("b", [m])] if bias else [])
    return save(tmp_path, [node], [("x", [1, c, hw, hw])], [("y", [1, m, out, out])], weights), out


@pytest.mark.parametrize("c,m,hw,k,stride,pad,dil,group", [
    (3, 16, 20, 3, 1, 1, 1, 1),
    (16, 32, 15, 3, 2, 1, 1, 1),
    (8, 8, 12, 3, 1, 2, 2, 1),      # dilated
    (32, 32, 14, 3, 1, 1, 1, 32),   # depthwise
    (16, 24, 10, 1, 1, 0, 1, 4),    # grouped 1x1
])
def test_conv_macs_and_output_bytes(tmp_path, c, m, hw, k, stride, pad, dil, group):
    path, out = conv_model(tmp_path, c, m, hw, k, stride, pad, dil, group)
    r = npusim.simulate(str(path), "mobile", overrides=["memory.type=ideal"])
    macs = out * out * m * (c // group) * k * k
    assert r.layers[0]["macs"] == macs
    if group == c == m:  # depthwise: a window op on the vector unit, a mul and add per tap
        cfg = r.config
        width = cfg.core.vector.lanes * cfg.core.vector.alus
        per_el = k * k * (cfg.core.vector.latency["mul"] + cfg.core.vector.latency["add"])
        busy = sum(x["vector_busy_cycles"] for x in r.cores)
        assert sum(x["macs"] for x in r.cores) == 0
        assert busy >= -(-out * out * m // width) * per_el
        tiles = int(r.layers[0]["mapping_source"].split(":")[1].split()[0])  # "...: N tiles"
        assert busy <= (-(-out * out * m // width) + tiles) * per_el  # one partial pass a tile
    else:
        assert sum(x["macs"] for x in r.cores) == macs
    # every output element written once; a run shorter than a request costs a full request
    stored = sum(x["bytes_stored"] for x in r.cores)
    assert stored >= out * out * m * r.config.precision


def test_gemm_with_trans_b_and_bias_loads_weights_and_bias(tmp_path):
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1)
    path = save(tmp_path, [node], [("x", [16, 256])], [("y", [16, 96])], [("w", [96, 256]), ("b", [96])])
    r = npusim.simulate(str(path), "mobile", overrides=["memory.type=ideal"])
    assert r.layers[0]["macs"] == 16 * 256 * 96
    loaded = sum(x["bytes_loaded"] for x in r.cores)
    assert loaded >= 16 * 256 + 96 * 256 + 96 * ACC_BYTES


@pytest.mark.parametrize("trans_b", [0, 1])
def test_weights_stored_either_way_move_their_bytes_once(tmp_path, trans_b):
    """A [1, 64] x [64, 256] Gemm on gemmini_validation (8 x 8 array, 1-byte elements,
    32-byte requests), its weights stored C x M or transposed M x C (transB, what a Linear
    exports as): the weights' 16 KiB move once either way. Transposed, each column is one
    run per chunk of the reduction; a chunk cut below a request (8-byte blocks) made every
    run cost a whole request: twice the bytes."""
    node = helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=trans_b)
    w = [256, 64] if trans_b else [64, 256]
    path = save(tmp_path, [node], [("x", [1, 64])], [("y", [1, 256])], [("w", w)])
    r = npusim.simulate(str(path), "gemmini_validation", overrides=["memory.type=ideal"])
    assert r.layers[0]["bytes_loaded"] == 64 * 256 + 64  # the weights, and x's row


def test_transposed_weights_are_tiled_in_whole_requests(tmp_path):
    """A [1, 512] x [512, 2048] Gemm on `mobile` (1-byte elements, 64-byte requests) with its
    weights transposed (transB: a Linear, an LSTM's gates): the tile the chooser took for
    the untransposed layout (a 56-element reduction) reads each output column in 56-byte
    runs, most of them across two requests: twice the weights' bytes. Counting that, it
    takes a reduction tile of whole requests, and the weights move once, as untransposed."""
    loaded = {}
    for trans_b in (0, 1):
        node = helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=trans_b)
        w = [2048, 512] if trans_b else [512, 2048]
        path = save(tmp_path, [node], [("x", [1, 512])], [("y", [1, 2048])], [("w", w)],
                    name=f"t{trans_b}")
        r = npusim.simulate(str(path), "mobile")
        loaded[trans_b] = r.layers[0]["bytes_loaded"]
        if trans_b:
            assert r.layers[0]["mapping"].endswith("[I] N1 C64 M256")
    assert loaded[1] == 512 * 2048 + 8 * 512  # the weights once, x's row once per column tile
    assert loaded[0] <= loaded[1]


def test_transposed_weights_load_whole_columns_from_every_channel(tmp_path):
    """A [128, 4096] x [4096, 4096] Gemm on `server` (16 HBM2 channels interleaved by 256 B,
    2-byte elements), its weights stored C x M or transposed (transB). Transposed, a tile's
    weights load in chunks of whole columns, each column one 8 KiB run of the reduction.
    Cut into chunks of the reduction instead (the lowering before), every column's run was
    three requests at the same offset from an 8 KiB pitch, so all four cores read from 3
    of the 16 channels: 174,470 cycles against 75,506 stored C x M."""
    cycles = {}
    for trans_b in (0, 1):
        node = helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=trans_b)
        path = save(tmp_path, [node], [("x", [128, 4096])], [("y", [128, 4096])],
                    [("w", [4096, 4096])], name=f"t{trans_b}")
        r = npusim.simulate(str(path), "server")
        cycles[trans_b] = r.total_cycles
        assert r.layers[0]["mapping"].endswith("[I] N128 C4096 M1024")
    cfg = load_config("server")
    prog = lower_graph(load_graph(str(path)), cfg)
    weight_loads = prog.inst[(prog.inst[:, isa.I_OP] == isa.OP_MVIN)
                             & (prog.inst[:, isa.I_SLOT] == 1)]
    assert len(weight_loads) > 1
    assert set(weight_loads[:, isa.I_RUN_BYTES]) == {4096 * cfg.precision}
    assert weight_loads[:, isa.I_N_OUTER].sum() == 1024  # the tile's columns, once each
    assert cycles[1] < 1.1 * cycles[0]


@pytest.mark.parametrize("C, runs", [(2048, {4096}), (1280, {1024, 512})])
def test_a_transposed_tile_of_few_column_blocks_cuts_its_reduction_as_far_as_channels_allow(
        tmp_path, C, runs):
    """A [1, C] x [C, 1000] Gemm with its weights transposed on `server` (tiles of 256
    columns: two column blocks of 128, fewer than the load queue's six chunks; 2-byte
    elements, 256-byte requests over 16 channels: a 4 KiB interleave). C = 2048: the
    row pitch (4 KiB) starts every column on one channel, so the reduction is not cut,
    each column one 4 KiB run. C = 1280: a 2,560-byte pitch starts the columns 512 B
    apart in the interleave, so runs of 512 B or more keep every channel in use: the 10
    reduction blocks of 256 B are cut three ways (4, 4, 2 blocks), and compute starts
    after the first third."""
    node = helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=1)
    path = save(tmp_path, [node], [("x", [1, C])], [("y", [1, 1000])], [("w", [1000, C])])
    prog = lower_graph(load_graph(str(path)), load_config("server"))
    assert prog.layers[0].mapping.endswith(f"[I] N1 C{C} M256")
    weight_loads = prog.inst[(prog.inst[:, isa.I_OP] == isa.OP_MVIN)
                             & (prog.inst[:, isa.I_SLOT] == 1)]
    assert set(weight_loads[:, isa.I_RUN_BYTES]) == runs


def test_a_conv_over_a_dim_of_one_is_the_conv_over_the_others(tmp_path):
    """The same 1-D convolution (16 -> 32 channels, 9 taps, 200 positions) written as a
    Conv1d, as 1 x W and as H x 1 (magika's tf2onnx export): the same tiles and cycles. As
    H x 1 the array streamed the last spatial dim, one pixel long, as its rows."""
    forms = {"1d": ([1, 16, 200], [32, 16, 9], [1, 32, 192], [9]),
             "1xW": ([1, 16, 1, 200], [32, 16, 1, 9], [1, 32, 1, 192], [1, 9]),
             "Hx1": ([1, 16, 200, 1], [32, 16, 9, 1], [1, 32, 192, 1], [9, 1])}
    got = {}
    for name, (x, w, y, k) in forms.items():
        node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=k)
        path = save(tmp_path, [node], [("x", x)], [("y", y)], [("w", w)], name=name)
        r = npusim.simulate(str(path), "mobile")
        got[name] = (r.total_cycles, r.layers[0]["bytes_loaded"], r.layers[0]["bytes_stored"])
    assert got["Hx1"] == got["1xW"] == got["1d"]


def test_batched_matmul_runs_each_batch(tmp_path):
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="bmm")
    path = save(tmp_path, [node], [("a", [4, 32, 64]), ("b", [4, 64, 48])], [("y", [4, 32, 48])], [])
    r = npusim.simulate(str(path), "mobile", overrides=["memory.type=ideal"])
    assert sum(x["macs"] for x in r.cores) == 4 * 32 * 64 * 48
    # 48-byte output rows from a request-aligned base: each row touches the aligned
    # request blocks it overlaps
    R = r.config.dma.request_bytes
    blocks = sum((r0 * 48 + 47) // R - (r0 * 48) // R + 1 for r0 in range(4 * 32))
    assert sum(x["bytes_stored"] for x in r.cores) == blocks * R


def test_broadcast_matmul_shares_the_weights(tmp_path):
    node = helper.make_node("MatMul", ["a", "w"], ["y"], name="mm")
    path = save(tmp_path, [node], [("a", [2, 3, 16, 64])], [("y", [2, 3, 16, 40])], [("w", [64, 40])])
    r = npusim.simulate(str(path), "mobile", overrides=["memory.type=ideal"])
    assert sum(x["macs"] for x in r.cores) == 6 * 16 * 64 * 40


def test_heuristic_tiles_fit_half_the_scratchpad_and_accumulator():
    for preset in ("mobile", "server"):
        cfg = load_config(preset)
        b = Budget.of(cfg)
        for model in ("tiny_cnn", "mlp", "matmul_1024"):
            prog = lower_graph(load_graph(npusim.frontend.resolve_model_path(model)), cfg)
            for info in prog.layers:
                if not info.mapping:
                    continue
                inner = parse_mapping_line(info.mapping).inner
                if info.op_type == "Conv":
                    continue  # conv windows are checked by conv_tile_fits at lowering
                # rows of the array's width: a partial block still takes whole rows
                spad = (inner.N * padded(inner.C, b.height) + inner.C * padded(inner.M, b.width))
                assert spad * cfg.precision <= b.spad_half
                assert inner.N * padded(inner.M, b.width) * ACC_BYTES <= b.acc_half


def test_unsupported_ops_are_listed_with_their_nodes(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Det", ["h"], ["r"], name="det1")]
    path = save(tmp_path, nodes, [("x", [8, 8])], [("r", [])], [("w", [8, 8])])
    with pytest.raises(NpusimError) as e:
        npusim.simulate(str(path), "mobile")
    assert "Det" in str(e.value) and "det1" in str(e.value)


def test_an_op_that_is_no_onnx_op_is_said_to_be_one(tmp_path):
    """tf2onnx leaves exact GELU's Erfc in the default domain (ONNX has none): the listing
    said nothing of it, and called the shape arithmetic after it input-dependent."""
    nodes = [helper.make_node("Erfc", ["x"], ["e"], name="gelu/Erfc"),
             helper.make_node("Shape", ["e"], ["s"], name="after/Shape"),
             helper.make_node("Reshape", ["x", "s"], ["r"], name="after/Reshape")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [4, 8])],
                          [helper.make_tensor_value_info("r", 1, [4, 8])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "tf.onnx")  # unchecked: Erfc is no ONNX op
    with pytest.raises(NpusimError) as e:
        npusim.simulate(str(tmp_path / "tf.onnx"), "mobile")
    msg = str(e.value)
    assert "Erfc: gelu/Erfc (not an ONNX op, nor an ONNX Runtime contrib op" in msg
    assert "Shape: after/Shape (shape arithmetic on a shape npusim could not work out" in msg


def test_tile_that_cannot_fit_the_scratchpad_is_a_clear_error(tmp_path):
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    path = save(tmp_path, [node], [("x", [64, 64])], [("y", [64, 64])], [("w", [64, 64])])
    with pytest.raises(NpusimError) as e:
        npusim.simulate(str(path), "mobile", overrides=["core.accum_kib=1", "core.systolic.width=32",
                                                        "core.systolic.height=32"])
    assert "accumulator" in str(e.value) and "core.accum_kib" in str(e.value)


def test_mapping_line_that_does_not_fit_is_a_clear_error(tmp_path):
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    path = save(tmp_path, [node], [("x", [512, 512])], [("y", [512, 512])], [("w", [512, 512])])
    mapping = tmp_path / "big.mapping"
    mapping.write_text("[T] N512 C512 M512 - [O] N1 C1 M1 - [I] N512 C512 M512\n")
    with pytest.raises(NpusimError) as e:
        npusim.simulate(str(path), "gemmini_validation", mapping=str(mapping))
    msg = str(e.value)
    assert "big.mapping:1" in msg and "mm" in msg and "scratchpad" in msg


def test_mapping_file_changes_the_tiles(tmp_path):
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    path = save(tmp_path, [node], [("x", [64, 64])], [("y", [64, 64])], [("w", [64, 64])])
    mapping = tmp_path / "m.mapping"
    mapping.write_text("[T] N64 C64 M64 - [O] N8 C2 M8 - [I] N8 C32 M8\n")
    r = npusim.simulate(str(path), "gemmini_validation", mapping=str(mapping))
    assert r.layers[0]["mapping_source"].endswith("m.mapping:1")
    assert sum(c["tiles"] for c in r.cores) == 8 * 2 * 8


def test_unsupported_ops_can_be_treated_as_free_with_a_warning(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("RandomUniformLike", ["h"], ["y"], name="noise1")]
    path = save(tmp_path, nodes, [("x", [16, 64])], [("y", [16, 64])], [("w", [64, 64])])
    alone = npusim.simulate(str(path), "mobile", unsupported="zero-cost")
    assert any("RandomUniformLike" in w and "noise1" in w for w in alone.warnings)
    free = [l for l in alone.layers if l["name"] == "noise1"][0]
    assert free["cycles"] == 0 and free["bytes_loaded"] == 0
    # the free op adds nothing to the MatMul alone
    only_mm = save(tmp_path, nodes[:1], [("x", [16, 64])], [("h", [16, 64])], [("w", [64, 64])],
                   name="mm_only")
    assert npusim.simulate(str(only_mm), "mobile").total_cycles == alone.total_cycles


def test_per_layer_traffic_adds_up_and_names_the_bound_unit():
    r = npusim.simulate("tiny_cnn", "mobile")
    assert sum(l["bytes_loaded"] for l in r.layers) == sum(c["bytes_loaded"] for c in r.cores)
    assert sum(l["bytes_stored"] for l in r.layers) == sum(c["bytes_stored"] for c in r.cores)
    assert sum(l["systolic_cycles"] for l in r.layers) == sum(
        c["systolic_stream_cycles"] for c in r.cores)
    for l in r.layers:
        assert l["bound"] in (("none",) if l["cycles"] == 0 else ("systolic", "vector", "memory"))
    # the FC layer of a batch-1 CNN streams one row per weight block: memory-bound
    assert r.layers[-1]["bound"] == "memory"


def test_batchnorm_and_relu_after_a_conv_ride_in_its_output_path(tmp_path):
    conv = helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1])
    bn = helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn")
    relu = helper.make_node("Relu", ["n"], ["y"], name="relu")
    stats = [(k, [16]) for k in ("s", "b", "m", "v")]
    fused = save(tmp_path, [conv, bn, relu], [("x", [1, 8, 12, 12])], [("y", [1, 16, 12, 12])],
                 [("w", [16, 8, 3, 3])] + stats, name="fused")
    # folding the BatchNormalization leaves a conv with a bias: the same cost
    conv_b = helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1])
    plain = save(tmp_path, [conv_b], [("x", [1, 8, 12, 12])], [("c", [1, 16, 12, 12])],
                 [("w", [16, 8, 3, 3]), ("b", [16])], name="plain")
    rf = npusim.simulate(str(fused), "mobile")
    rp = npusim.simulate(str(plain), "mobile")
    assert [l["name"] for l in rf.layers] == ["conv"]
    assert rf.layers[0]["fused"] == ["bn", "relu"]
    assert rf.total_cycles == rp.total_cycles
    assert rf.layers[0]["bytes_loaded"] == rp.layers[0]["bytes_loaded"]


def test_bias_add_after_matmul_is_fused_but_a_second_consumer_prevents_it(tmp_path):
    mm = helper.make_node("MatMul", ["x", "w"], ["h"], name="mm")
    add = helper.make_node("Add", ["h", "bias"], ["y"], name="bias_add")
    path = save(tmp_path, [mm, add], [("x", [16, 64])], [("y", [16, 32])],
                [("w", [64, 32]), ("bias", [32])], name="mm_bias")
    r = npusim.simulate(str(path), "mobile")
    assert r.layers[0]["fused"] == ["bias_add"] and len(r.layers) == 1
    # h also feeds a graph output: the Add cannot be folded into the MatMul
    path2 = save(tmp_path, [mm, add], [("x", [16, 64])], [("y", [16, 32]), ("h", [16, 32])],
                 [("w", [64, 32]), ("bias", [32])], name="mm_bias_out")
    from npusim.frontend import load_graph
    from npusim.lowering.fusion import plan_fusions
    assert plan_fusions(load_graph(path2)) == ({}, {})


def test_choosers_remember_answers_and_pick_the_same_tile_each_time():
    """The tile choosers are memoized pure functions (ResNet's repeated shapes are looked
    up): a remembered answer is the one a fresh evaluation gives, in plain ints."""
    b = Budget.of(load_config("server"))
    s = ConvShape(N=8, C=64, M=64, groups=1, out=(56, 56), kernel=(3, 3), strides=(1, 1),
                  dilations=(1, 1))
    choose_conv_tile.cache_clear()
    choose_gemm_tile.cache_clear()
    tile = choose_conv_tile(b, s)
    assert choose_conv_tile.__wrapped__(b, s) == tile  # the memo returns what it computed
    assert all(type(v) is int for v in (*tile.out, tile.c, tile.m))
    g = choose_gemm_tile(b, 512, 768, 768)
    assert choose_gemm_tile.__wrapped__(b, 512, 768, 768) == g
    assert choose_conv_tile.cache_info().misses == 1 and choose_gemm_tile.cache_info().misses == 1


def _one_at_a_time(b, s):
    """The conv chooser's pick found the slow way: each candidate (output-channel tile, then
    output box) evaluated on its own, the first strictly better estimate kept (ties: the
    larger tile). The chooser evaluates them all at once as arrays, which must not change
    which one wins."""
    from itertools import product
    from math import prod

    import numpy as np

    from npusim.lowering import tiling as T

    def one(v):
        return np.array([v], np.int64)

    best = None
    for m in T._aligned_options(s.M, b.width):
        for out in product(*(T._spatial_options(o) for o in s.out)):
            box = tuple(one(o) for o in out)
            pixels, _, acc = T.conv_occupancy(b, s, T.ConvTile(box, s.C, one(m)))
            if acc[0] > b.acc_half:
                continue
            c_max = b.spad_half // (b.precision * (pixels + s.kernel_positions
                                                   * padded(one(m), b.width)))
            c = T._reduction_tile(s.C, c_max, b.height, lambda c: T._within(
                b, *T.conv_occupancy(b, s, T.ConvTile(box, c, one(m)))[1:]))
            if c[0] == 0:
                continue
            est = T._conv_estimate(b, s, T.ConvTile(box, c, one(m)), pixels)[0]
            key = (est, -prod(out) * m * int(c[0]))
            if best is None or key < best[0]:
                best = (key, (tuple(out), int(c[0]), m))
    return best[1]


@pytest.mark.parametrize("preset", ["mobile", "server"])
@pytest.mark.parametrize("shape", [
    (8, 3, 64, (112, 112), (7, 7), (2, 2)),  # ResNet's stem
    (1, 64, 64, (56, 56), (3, 3), (1, 1)),
    (8, 1024, 2048, (7, 7), (1, 1), (2, 2)),  # a strided 1x1 downsample
    (2, 512, 512, (7, 7), (3, 3), (1, 1)),
])
def test_the_conv_chooser_picks_what_one_candidate_at_a_time_would(preset, shape):
    N, C, M, out, kernel, strides = shape
    b = Budget.of(load_config(preset))
    s = ConvShape(N=N, C=C, M=M, groups=1, out=out, kernel=kernel, strides=strides,
                  dilations=(1, 1))
    tile = choose_conv_tile.__wrapped__(b, s)
    assert (tile.out, tile.c, tile.m) == _one_at_a_time(b, s)


@pytest.mark.parametrize("preset", ["mobile", "server"])
@pytest.mark.parametrize("N,C,M,batch", [(512, 768, 768, 1), (128, 1024, 4096, 1),
                                         (8, 4096, 1024, 1), (512, 64, 512, 12)])
def test_the_gemm_chooser_picks_what_one_candidate_at_a_time_would(preset, N, C, M, batch):
    """As for convolutions: each (row tile, column tile) on its own, through the same
    occupancy and estimate, the first strictly better kept (ties: the larger tile)."""
    import numpy as np

    from npusim.lowering import tiling as T

    b = Budget.of(load_config(preset))
    best = None
    for n in T._aligned_options(N, b.height):
        for m in T._aligned_options(M, b.width):
            nn, mm = np.array([n]), np.array([m])
            c_max = b.spad_half // ((nn + padded(mm, b.width)) * b.precision)
            c = T._reduction_tile(C, c_max, b.height,
                                  lambda c: T._within(b, *T.gemm_occupancy(b, nn, c, mm)))
            if c[0] == 0:
                continue
            est = T._gemm_estimate(b, N, C, M, batch, nn, c, mm)[0]
            key = (est, -n * m * int(c[0]))
            if best is None or key < best[0]:
                best = (key, (n, int(c[0]), m))
    got = T.choose_gemm_tile.__wrapped__(b, N, C, M, batch)
    assert (got.n, got.c, got.m) == best[1]

