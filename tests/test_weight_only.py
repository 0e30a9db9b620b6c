"""Weight-only quantized exports read their weights at the stored width (lowering/weights.py,
tiling.WeightFormat): MatMulNBits, a DequantizeLinear of a constant into a float op, and
GatherBlockQuantized's embedding rows.

``tests/data/zoo/quantized/llama_tiny-*``: a 1-layer Llama (hidden 128, SwiGLU 344, GQA 4/2
heads, vocabulary 512, 16 tokens) exported by torch, folded by ONNX Runtime's basic
optimizer and quantized by ``MatMulNBitsQuantizer`` (``models/zoo_weight_only.py``): 4 bits
block 32 as MatMulNBits and in the QDQ format, 8 bits as MatMulNBits, and 4 bits with the
token embedding as GatherBlockQuantized (``nbits4-gather``: a uint4 table with zero points).
"""

from __future__ import annotations

import re
from dataclasses import replace
from math import ceil
from pathlib import Path

import pytest
from onnx import TensorProto, helper

import npusim
from npusim.errors import NpusimError
from npusim.lowering.tiling import Budget, WeightFormat, choose_gemm_tile, gemm_occupancy
from tests.helpers import config, weight

ZOO = Path(__file__).resolve().parent / "data" / "zoo" / "quantized"
TINY = {fmt: str(ZOO / f"llama_tiny-{fmt}.onnx")
        for fmt in ("float", "nbits4", "qdq4", "nbits8", "nbits4-gather")}


def _save(tmp_path, nodes, inits, x_shape, y_shape, name="m", opset=21):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", 1, x_shape)],
                          [helper.make_tensor_value_info("y", 1, y_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(m.SerializeToString())
    return str(path)


def _nbits(tmp_path, M, K, N, bits, block=32, zero_points=False, g_idx=False, name="nbits",
           **attrs):
    """x [M, K] -> MatMulNBits -> y [M, N], as MatMulNBitsQuantizer writes it."""
    blocks, blob = ceil(K / block), ceil(block * bits / 8)
    inits = [weight("B", [N, blocks, blob], TensorProto.UINT8),
             weight("scales", [N * blocks])]
    inputs = ["x", "B", "scales"]
    if zero_points:
        inits.append(weight("zp", [N, ceil(blocks * bits / 8)], TensorProto.UINT8))
        inputs.append("zp")
    if g_idx:
        inits.append(weight("g_idx", [K], TensorProto.INT32))
        inputs += [""] * (4 - len(inputs)) + ["g_idx"]
    node = helper.make_node("MatMulNBits", inputs, ["y"], name="q", domain="com.microsoft",
                            K=K, N=N, bits=bits, block_size=block, **attrs)
    return _save(tmp_path, [node], inits, [M, K], [M, N], name)


def _dq_matmul(tmp_path, M, K, N, elem=None, name="dq"):
    """x [M, K] -> MatMul with a constant [K, N]: float, or ``elem`` through a per-tensor
    DequantizeLinear."""
    if elem is None:
        return _save(tmp_path, [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
                     [weight("W", [K, N])], [M, K], [M, N], name)
    nodes = [helper.make_node("DequantizeLinear", ["Wq", "s"], ["W"], name="dq"),
             helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")]
    inits = [weight("Wq", [K, N], elem), helper.make_tensor("s", 1, [], [0.5])]
    return _save(tmp_path, nodes, inits, [M, K], [M, N], name)


def _layer(path, cfg="server", *overrides):
    r = npusim.simulate(path, cfg, overrides=overrides)
    assert len(r.layers) == 1
    return r.layers[0], r


@pytest.mark.parametrize("bits,zero_points", [(4, True), (8, False), (2, False)])
def test_a_matmulnbits_layer_loads_its_packed_weights_and_block_scales_exactly(
        tmp_path, bits, zero_points):
    """One decode row x [1, 256] times a 256 x 128 weight on server (bf16, 256 B requests):
    the layer loads x (256 x 2 B), the packed weights (N K bits / 8), one bf16 scale per
    block of 32 of each column and, with zero points, one per block at ``bits``; all in
    whole requests here, so exactly. Before: MatMulNBits was an unsupported op."""
    K, N = 256, 128
    lay, _ = _layer(_nbits(tmp_path, 1, K, N, bits, zero_points=zero_points))
    zp_bits = bits if zero_points else 0
    expected = K * 2 + N * K * bits // 8 + N * (K // 32) * (16 + zp_bits) // 8
    assert expected == {4: 512 + 16384 + 2048 + 512, 8: 512 + 32768 + 2048,
                        2: 512 + 8192 + 2048}[bits]
    assert lay["bytes_loaded"] == expected
    assert lay["bytes_stored"] == N * 2
    assert lay["weight_bits"] == bits and lay["op_type"] == "MatMulNBits"
    assert lay["macs"] == K * N


@pytest.mark.parametrize("op,attrs,block,zp_bits", [
    ("MatMulBnb4", dict(block_size=64, quant_type=1), 64, 0),
    ("MatMulFpQ4", dict(blk_quant_type=0), 32, 0),
    ("MatMulFpQ4", dict(blk_quant_type=1), 32, 8),
    ("MatMulFpQ4", dict(blk_quant_type=2), 64, 0),
])
def test_other_four_bit_matmuls_load_their_weights_and_block_headers(tmp_path, op, attrs,
                                                                     block, zp_bits):
    """MatMulBnb4 (NF4/FP4: one absmax per block) and MatMulFpQ4 (MLAS's blocks: 32 or 64
    values, with or without an 8-bit offset) on the decode row of the test above: x, the
    4-bit weights and a bf16 scale (+ offset) per block of each column, exactly."""
    K, N = 256, 128
    if op == "MatMulBnb4":
        inits = [weight("B", [N * K // 2], TensorProto.UINT8), weight("absmax", [N * K // block])]
        node = helper.make_node(op, ["x", "B", "absmax"], ["y"], name="q",
                                domain="com.microsoft", K=K, N=N, **attrs)
    else:
        inits = [weight("B", [N * K // 2 + N * (K // block) * (2 + zp_bits // 8)],
                        TensorProto.UINT8),
                 helper.make_tensor("B_shape", TensorProto.INT64, [2], [K, N])]
        node = helper.make_node(op, ["x", "B", "B_shape"], ["y"], name="q",
                                domain="com.microsoft", **attrs)
    lay, _ = _layer(_save(tmp_path, [node], inits, [1, K], [1, N]))
    assert lay["bytes_loaded"] == K * 2 + N * K // 2 + N * (K // block) * (16 + zp_bits) // 8
    assert lay["weight_bits"] == 4 and lay["op_type"] == op and lay["macs"] == K * N


def test_four_bit_weights_move_a_quarter_of_fp16_and_half_of_int8(tmp_path):
    """The same GEMM (x [1, 256] . W [256, 128]) on server with W float (read at bf16), and
    W an int4 or a uint8 constant through a per-tensor DequantizeLinear (one scale: a
    register, no header): the weight bytes are 65,536, 16,384 (1/4) and 32,768 (1/2).
    Before, a dequantized constant was read at the float width (65,536 in all three)."""
    K, N, x_bytes = 256, 128, 256 * 2
    got = {}
    for elem in (None, TensorProto.INT4, TensorProto.UINT8):
        lay, _ = _layer(_dq_matmul(tmp_path, 1, K, N, elem, name=f"w{elem}"))
        got[elem] = (lay["bytes_loaded"] - x_bytes, lay["weight_bits"])
    assert got == {None: (65536, 16), TensorProto.INT4: (16384, 4),
                   TensorProto.UINT8: (32768, 8)}


def test_a_quantized_conv_weight_is_read_at_its_width(tmp_path):
    """A 1x1 conv of 128 -> 128 channels over a 4x4 map on server, its weight an int4
    constant through DequantizeLinear: the input stays bf16 (16 x 128 x 2 B), each tile
    (the map is split over the cores) loads the weights in 128 x 128 / 2 B instead of
    128 x 128 x 2 B."""
    loaded = {}
    for elem in (None, TensorProto.INT4):
        nodes = [helper.make_node("Conv", ["x", "W"], ["y"], name="conv")]
        inits = [weight("W", [128, 128, 1, 1])]
        if elem is not None:
            nodes.insert(0, helper.make_node("DequantizeLinear", ["Wq", "s"], ["W"], name="dq"))
            inits = [weight("Wq", [128, 128, 1, 1], elem), helper.make_tensor("s", 1, [], [1.0])]
        lay, _ = _layer(_save(tmp_path, nodes, inits, [1, 128, 4, 4], [1, 128, 4, 4],
                              f"conv{elem}"))
        loaded[elem] = lay["bytes_loaded"]
    x_bytes = 16 * 128 * 2
    tiles = (loaded[None] - x_bytes) // (128 * 128 * 2)  # each loads the whole weight
    assert tiles >= 1 and loaded[None] == x_bytes + tiles * 128 * 128 * 2
    assert loaded[TensorProto.INT4] == x_bytes + tiles * 128 * 128 // 2


def test_a_quantized_depthwise_conv_weight_is_read_at_its_width_and_widened(tmp_path):
    """A depthwise 3x3 conv of 64 channels over an 8x8 map on server (8-byte requests),
    its weight float or int4 with one bf16 scale per channel (DequantizeLinear, axis 0):
    each tile loads its channels' 9 taps, 9 x 2 B a channel in bf16, ceil((16 + 9 x 4) /
    8) = 7 B in int4 (the scale beside its channel's taps), and the vector unit widens
    the 64 x 9 taps first (DequantizeLinear's sub and mul, one 2,048-lane cycle each per
    tile). The map's loads and stores are the same. Before, the int4 taps were read at
    the float width (1,152 B a tile)."""
    got = {}
    for elem in (None, TensorProto.INT4):
        conv = helper.make_node("Conv", ["x", "W"], ["y"], name="dw", group=64,
                                pads=[1, 1, 1, 1])
        nodes, inits = [conv], [weight("W", [64, 1, 3, 3])]
        if elem is not None:
            nodes.insert(0, helper.make_node("DequantizeLinear", ["Wq", "s"], ["W"],
                                             name="dq", axis=0))
            inits = [weight("Wq", [64, 1, 3, 3], elem), weight("s", [64])]
        got[elem], _ = _layer(_save(tmp_path, nodes, inits, [1, 64, 8, 8], [1, 64, 8, 8],
                                    f"dw{elem}"), "server", "dma.request_bytes=8")
    flt, q = got[None], got[TensorProto.INT4]
    tiles = int(re.search(r"(\d+) tiles", flt["mapping_source"]).group(1))
    assert tiles == int(re.search(r"(\d+) tiles", q["mapping_source"]).group(1)) >= 1
    assert flt["bytes_loaded"] - q["bytes_loaded"] == tiles * 64 * (9 * 2 - 7)
    assert q["bytes_stored"] == flt["bytes_stored"] == 64 * 8 * 8 * 2
    assert (flt["weight_bits"], q["weight_bits"]) == (16, 4)
    assert q["vector_cycles"] - flt["vector_cycles"] == tiles * 2


def test_a_memory_bound_decode_gemm_speeds_up_by_its_byte_ratio(tmp_path):
    """A decode step's GEMM (one row, 2048 x 2048) on mobile's DDR4 (12.8 B per cycle for
    four cores) is bound by its weight bytes: 4 bits with an int8-wide scale and a 4-bit
    zero point per block of 32 (4.375 bits) load about 4.375 / 8 of the int8 bytes (plus
    the requests' rounding of each chunk), 8 bits (8.375) about 8.375 / 8; the cycles
    follow the bytes within 3%."""
    K = N = 2048
    flt, _ = _layer(_dq_matmul(tmp_path, 1, K, N), "mobile")
    for bits in (4, 8):
        q, _ = _layer(_nbits(tmp_path, 1, K, N, bits, zero_points=True, name=f"d{bits}"),
                      "mobile")
        assert q["bound"] == flt["bound"] == "memory"
        byte_ratio = q["bytes_loaded"] / flt["bytes_loaded"]
        assert byte_ratio == pytest.approx((bits + 12 / 32) / 8, rel=0.05)
        assert q["cycles"] / flt["cycles"] == pytest.approx(byte_ratio, rel=0.03)


def test_a_four_bit_decode_gemm_on_server_is_bound_by_the_preloads(tmp_path):
    """The same GEMM on server: HBM's 614 B per cycle bound the bf16 weights (8 MiB: at
    least 13,653 cycles); in 4 bits they would take 4,000, but a weight-stationary array
    uses each preloaded weight once for one row, and four 128 x 128 arrays preload 4 x 128
    weights per cycle: at least 2048 x 2048 / 512 = 8,192 cycles."""
    K = N = 2048
    flt, _ = _layer(_dq_matmul(tmp_path, 1, K, N), "server")
    q, _ = _layer(_nbits(tmp_path, 1, K, N, 4, zero_points=True), "server")
    assert flt["cycles"] >= K * N * 2 / 614.4
    assert K * N / 512 <= q["cycles"] < 1.25 * K * N / 512
    assert q["bytes_loaded"] < 0.3 * flt["bytes_loaded"]


def test_the_tile_chooser_sizes_the_scratchpad_for_the_narrow_weight():
    """mobile (int8, 32 KiB per scratchpad half), 8 rows x K 4096 x 8 columns (one array
    block of each): in int8 a tile holds 8 c + 8 c bytes, so 2,048 of the reduction; with
    4-bit weights and their block headers (a 12-bit header per block of 32) 8 c + 8 x
    1,445 B at c = 2,640 (32,680 B), and c = 2,648 would need 32,776 B: the chooser takes
    the most whole array rows that fit."""
    b = Budget.of(config(preset="mobile"))
    bq = replace(b, weight=WeightFormat(4, 32, 12))
    t, tq = choose_gemm_tile(b, 8, 4096, 8), choose_gemm_tile(bq, 8, 4096, 8)
    assert (t.n, t.c, t.m) == (8, 2048, 8)
    assert (tq.n, tq.c, tq.m) == (8, 2640, 8)
    assert gemm_occupancy(bq, 8, 2640, 8)[0] == 8 * 2640 + 8 * 1445 == 32680
    assert gemm_occupancy(bq, 8, 2648, 8)[0] == 32776 > b.spad_half


def _gemm_timeline(r):
    return [(lay["cycles"], lay["bytes_loaded"], lay["bytes_stored"], lay["macs"],
             lay["weight_bits"]) for lay in r.layers if lay["weight_bits"] is not None]


@pytest.mark.parametrize("cfg", ["mobile", "server"])
def test_qdq_and_matmulnbits_forms_are_the_same_work(cfg):
    """The same weights as MatMulNBits and as an int4 constant through a blocked
    DequantizeLinear into a float MatMul (what ONNX Runtime fuses into MatMulNBits): every
    GEMM loads the same bytes in the same cycles, and the model's cycles are equal."""
    nb, qdq = npusim.simulate(TINY["nbits4"], cfg), npusim.simulate(TINY["qdq4"], cfg)
    assert nb.total_cycles == qdq.total_cycles
    assert _gemm_timeline(nb) == _gemm_timeline(qdq)
    ops = [lay["op_type"] for lay in nb.layers if lay["weight_bits"] == 4]
    assert ops == ["MatMulNBits"] * 8  # q, k, v, o, gate, up, down, LM head
    assert [lay["op_type"] for lay in qdq.layers if lay["weight_bits"] == 4] == ["MatMul"] * 8


def test_onnx_runtime_fuses_the_qdq_form_into_the_same_matmulnbits():
    """ONNX Runtime's own optimizer (``--optimize extended``) turns each blocked
    DequantizeLinear + MatMul of the QDQ file into MatMulNBits: the same 8 layers and
    cycles as the MatMulNBits file through the same optimizer (whose int4 external data
    must be sized packed, 2 elements a byte, or ONNX Runtime refuses the file)."""
    nb = npusim.simulate(TINY["nbits4"], "server", optimize="extended")
    qdq = npusim.simulate(TINY["qdq4"], "server", optimize="extended")
    assert [lay["op_type"] for lay in qdq.layers if lay["weight_bits"] == 4] == \
        ["MatMulNBits"] * 8
    assert nb.total_cycles == qdq.total_cycles
    assert _gemm_timeline(nb) == _gemm_timeline(qdq)


def test_the_llama_files_move_their_weights_at_the_stored_width():
    """On server (bf16) the 8 weight GEMMs (q, k, v, o, gate, up, down, LM head) of the float
    file read 16-bit weights, the 4-bit file's 4 + 20 / 32 bits per weight (a bf16 scale
    and a 4-bit zero point per block of 32), the 8-bit file's 8 + 24 / 32: each layer's
    loads are its tiles' rows of x (16 tokens x K x 2 B per column tile) plus those bits
    of its K x N weights, each row and each loaded chunk rounded up to whole 256 B
    requests. The attention products stay bf16."""
    shapes = {"q_proj": (128, 128), "k_proj": (128, 64), "v_proj": (128, 64),
              "o_proj": (128, 128), "gate_proj": (128, 344), "up_proj": (128, 344),
              "down_proj": (344, 128), "lm_head": (128, 512)}
    for fmt, bits, header in (("nbits4", 4, 20), ("nbits8", 8, 24)):
        r = npusim.simulate(TINY[fmt], "server")
        gemms = [lay for lay in r.layers if lay["op_type"] == "MatMulNBits"]
        assert sorted(lay["name"].split("/")[-2] for lay in gemms) == sorted(shapes)
        for lay in gemms:
            K, N = shapes[lay["name"].split("/")[-2]]
            m_tiles = int(re.search(r"\[O\] N1 C1 M(\d+)", lay["mapping"]).group(1))
            x_exact = m_tiles * 16 * K * 2  # and each row in whole requests, at most:
            x_requests = m_tiles * 16 * (ceil(K * 2 / 256) + 1) * 256
            exact = N * K * bits / 8 + N * ceil(K / 32) * header / 8
            rounding = 256 * m_tiles * ceil(K / 128)
            assert x_exact + exact <= lay["bytes_loaded"] < x_requests + exact + rounding
            assert lay["weight_bits"] == bits
    attention = [lay for lay in r.layers if lay["op_type"] == "MatMul"]
    assert len(attention) == 2 and {lay["weight_bits"] for lay in attention} == {16}


def test_unsupported_matmulnbits_forms_are_named(tmp_path):
    """g_idx (GPTQ's act-order groups), a width other than 2, 4, 8, and a B whose shape
    disagrees with K, N, bits and block_size stop the run with a message naming the node
    and what would be valid."""
    with pytest.raises(NpusimError, match="MatMulNBits 'q': g_idx .* not supported"):
        npusim.simulate(_nbits(tmp_path, 1, 64, 64, 4, g_idx=True, name="g"), "server")
    with pytest.raises(NpusimError, match=r"MatMulNBits 'q': bits = 3; npusim lowers bits = "
                                          r"2, 4 or 8"):
        npusim.simulate(_nbits(tmp_path, 1, 64, 64, 3, name="b3"), "server")
    path = _nbits(tmp_path, 1, 64, 64, 4, name="k")
    bad = path.replace("k.onnx", "bad.onnx")
    import onnx

    m = onnx.load(path, load_external_data=False)
    m.graph.node[0].attribute[0].i = 96  # K
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 96
    onnx.save(m, bad)
    with pytest.raises(NpusimError, match=r"B has shape \[64, 2, 16\]; K=96, N=64, bits=4, "
                                          r"block_size=32 need \[64, 3, 16\]"):
        npusim.simulate(bad, "server")


def _gbq(tmp_path, V, D, K, elem=None, bits=None, zero_points=False, block=32, name="gbq",
         **attrs):
    """x [K] int64 -> y [K, D]: a float Gather of a [V, D] table (``elem`` None), or
    GatherBlockQuantized of it in ``elem`` (uint8: packed at ``bits``), as ONNX Runtime's
    quantizer writes it: scales [V, D / block], zero points of the data's type."""
    if elem is None:
        node = helper.make_node("Gather", ["W", "x"], ["y"], name="emb")
        inits = [weight("W", [V, D])]
    else:
        packed = TensorProto.UINT8 == elem
        per = 8 // bits if packed else 1  # elements a stored element holds
        blocks = D // block if block else 1  # 0: one block a row (FP8, FP4)
        inits = [weight("W", [V, D // per], elem), weight("s", [V, blocks])]
        if zero_points:
            inits.append(weight("zp", [V, ceil(blocks / per)], elem))
        node = helper.make_node("GatherBlockQuantized", ["W", "x", "s"] + ["zp"] * zero_points,
                                ["y"], name="emb", domain="com.microsoft", block_size=block,
                                **({"bits": bits} if bits else {}), **attrs)
    g = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.INT64,
                                                                       [K])],
                          [helper.make_tensor_value_info("y", 1, [K, D])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(m.SerializeToString())
    return str(path)


# (element type, bits attribute, zero points) -> bytes of one stored row of 1,024 on server
# (bf16 scales): the packed elements, then per block of 32 a 16-bit scale and a zero point
# at the stored width
_GBQ_ROWS = {(TensorProto.UINT4, None, True): 1024 // 2 + 32 * (16 + 4) // 8,  # 592
             (TensorProto.INT4, None, False): 1024 // 2 + 32 * 2,  # 576
             (TensorProto.UINT8, 8, False): 1024 + 32 * 2,  # 1,088
             (TensorProto.UINT8, 2, True): 1024 // 4 + 32 * (16 + 2) // 8}  # 328


@pytest.mark.parametrize("elem,bits,zero_points", list(_GBQ_ROWS))
def test_a_gather_block_quantized_reads_its_packed_rows_and_block_scales_exactly(
        tmp_path, elem, bits, zero_points):
    """32 rows of a [64, 1024] table on server with 8-byte DMA requests (every run here
    is whole requests): the float Gather loads the 32 indices (2 B each, as every element
    of a vector layer) and 32 rows of 1,024 x 2 B; GatherBlockQuantized the same indices
    and 32 rows at the stored width, each with its blocks' scales and zero points (one run
    per row), both store the 32 x 1,024 bf16 rows. The dequantization is DequantizeLinear's
    sub and mul over the tile's elements (2,048 a vector pass: 4 tiles of 8 rows, 2 x 4
    cycles each); the float Gather has no vector step. Before: an unsupported op."""
    V, D, K = 64, 1024, 32
    flt, _ = _layer(_gbq(tmp_path, V, D, K, name="f"), "server", "dma.request_bytes=8")
    q, _ = _layer(_gbq(tmp_path, V, D, K, elem, bits, zero_points), "server",
                  "dma.request_bytes=8")
    row = _GBQ_ROWS[(elem, bits, zero_points)]
    assert flt["bytes_loaded"] == K * 2 + K * D * 2
    assert q["bytes_loaded"] == K * 2 + K * row
    assert q["bytes_stored"] == flt["bytes_stored"] == K * D * 2
    assert q["weight_bits"] == (bits or 4) and q["op_type"] == "GatherBlockQuantized"
    assert flt["vector_cycles"] == 0 and q["vector_cycles"] == 4 * 2 * ceil(8 * D / 2048)


@pytest.mark.parametrize("cfg", ["mobile", "server"])
def test_a_four_bit_table_reads_fewer_bytes_than_eight_bits_than_float(tmp_path, cfg):
    """16 tokens of a [32000, 2048] table with default requests: the rows' bytes fall with
    the width (4 bits with zero points: 4 + (scale + 4) / 32 bits an element, 8 bits: 8 +
    (scale + 8) / 32, float: the precision, 8 or 16 bits), so on server 4 bits < 8 bits <
    bf16; on mobile (int8) the 8-bit table's scales make it 1/32 wider than the int8 one,
    where no vector pass dequantizes (a change of scale on an int8 config, as every
    DequantizeLinear)."""
    V, D, K = 32000, 2048, 16
    lay = {}
    for elem, bits in ((None, None), (TensorProto.UINT4, None), (TensorProto.UINT8, 8)):
        lay[bits or elem], _ = _layer(_gbq(tmp_path, V, D, K, elem, bits, True,
                                          name=f"t{elem}"), cfg)
    flt, q4, q8 = lay[None], lay[TensorProto.UINT4], lay[8]
    prec_bits = 8 if cfg == "mobile" else 16
    for q, bits in ((q4, 4), (q8, 8)):
        rows = K * D * (bits + (prec_bits + bits) / 32) / 8
        assert rows <= q["bytes_loaded"] - K * prec_bits // 8 <= rows + K * 2 * 256
    assert q4["bytes_loaded"] < q8["bytes_loaded"]
    if cfg == "server":
        assert q8["bytes_loaded"] < flt["bytes_loaded"]
        assert q4["cycles"] < flt["cycles"]
    else:
        assert q8["bytes_loaded"] > flt["bytes_loaded"]
        assert q4["vector_cycles"] == q8["vector_cycles"] == 0


def test_an_fp8_table_with_one_scale_per_row_reads_a_byte_an_element(tmp_path):
    """FP8 data (float8e4m3fn, ``bits`` ignored) with ``block_size`` 0: one block per row,
    so rows of 1,022 elements take 1,022 B plus one bf16 scale, 1,024 B; 32 rows of a
    [64, 1022] table on server with 8-byte requests load 32 x 2 B of indices and 32 x
    1,024 B, as 8 bits."""
    path = _gbq(tmp_path, 64, 1022, 32, TensorProto.FLOAT8E4M3FN, block=0, name="fp8")
    q, _ = _layer(path, "server", "dma.request_bytes=8")
    assert q["bytes_loaded"] == 32 * 2 + 32 * 1024 and q["weight_bits"] == 8


def test_unsupported_gather_block_quantized_forms_are_named(tmp_path):
    """A GatherBlockQuantized that gathers along another axis than 0, or blocks along
    another axis than the row, is listed up front with the form npusim lowers; a block
    size that is not a power of 2 stops the run naming the node and what is valid."""
    path = _gbq(tmp_path, 64, 256, 4, TensorProto.UINT4, name="axis", quantize_axis=0)
    with pytest.raises(NpusimError, match=r"GatherBlockQuantized: emb \(npusim lowers "
                                          r"gather_axis = 0 with quantize_axis = the table's "
                                          r"last axis"):
        npusim.simulate(path, "server")
    path = _gbq(tmp_path, 64, 256, 4, TensorProto.UINT4, block=24, name="block")
    with pytest.raises(NpusimError, match=r"GatherBlockQuantized 'emb': block_size = 24; it "
                                          r"must be a power of 2 of at least 16"):
        npusim.simulate(path, "server")


def test_the_llama_file_with_a_quantized_embedding_gathers_74_byte_rows():
    """ONNX Runtime's quantizer with ``op_types_to_quantize=("MatMul", "Gather")`` on
    llama_tiny: the embedding [512, 128] becomes GatherBlockQuantized (uint4, block 32,
    zero points). On server each row is 64 B of packed elements plus 4 blocks x (16 + 4)
    bits = 74 B; the 16 tokens' rows lie 512 / 16 = 32 rows (2,368 B) apart from the
    table's page-aligned start, and a row costs the 256 B requests it touches (rows 3, 7,
    11 and 15 start 192 B into one and cross into the next); each of the 4 tiles loads its
    4 indices in one request. Every other layer loads what the nbits4 file's does."""
    q, nb = npusim.simulate(TINY["nbits4-gather"], "server"), npusim.simulate(TINY["nbits4"],
                                                                               "server")
    emb = [lay for lay in q.layers if lay["op_type"] == "GatherBlockQuantized"]
    assert len(emb) == 1 and emb[0]["input_shapes"][0] == [512, 128]
    assert emb[0]["weight_bits"] == 4
    pitch, stride = 64 + 4 * 20 // 8, 32 * 74
    rows = sum(ceil((k * stride % 256 + pitch) / 256) for k in range(16))
    assert rows == 20 and emb[0]["bytes_loaded"] == (rows + 4) * 256
    assert emb[0]["bytes_stored"] == 16 * 128 * 2
    others = [(lay["op_type"], lay["bytes_loaded"]) for lay in q.layers if lay not in emb]
    assert others == [(lay["op_type"], lay["bytes_loaded"]) for lay in nb.layers
                      if "/embed_tokens/" not in lay["name"]]
