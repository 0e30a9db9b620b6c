"""MoE (com.microsoft, npusim/lowering/moe.py): the experts a routing evenly spread over
them runs, their GEMMs' MACs and weight traffic, and the vector passes, against formulas."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

import npusim
from npusim.errors import NpusimError

F, MS = TensorProto.FLOAT, "com.microsoft"
LAT = dict(add=1, sub=2, mul=3, div=5, max=7, min=11, exp=13, log=17, sqrt=19, rsqrt=23,
           recip=29, tanh=31, sigmoid=37, erf=41, gelu=43, pow=47, cast=53, reduce=59)
SCALAR_VU = ["memory.type=ideal", "core.vector.lanes=1", "core.vector.alus=1"] + \
    [f"core.vector.latency.{k}={v}" for k, v in LAT.items()]


def _vi(name, shape):
    return helper.make_tensor_value_info(name, F, shape)


def _save(tmp_path, nodes, inputs, outputs, name):
    g = helper.make_graph(nodes, name, inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(m, str(path))
    return str(path)


def moe(tmp_path, T, h=64, inner=128, E=8, k=2, fusion=1, act="swiglu", biases=None,
        **attrs):
    """``biases``: the shapes of fc1's and fc2's biases (None: no biases)."""
    f = 2 if act == "swiglu" and fusion else 1
    ins = [_vi("x", [T, h]), _vi("probs", [T, E]), _vi("w1", [E, f * inner, h]),
           _vi("w2", [E, h, inner])]
    names = ["x", "probs", "w1", "", "w2"]
    if biases:
        ins += [_vi("b1", biases[0]), _vi("b2", biases[1])]
        names = ["x", "probs", "w1", "b1", "w2", "b2"]
    if act == "swiglu" and not fusion:
        ins.append(_vi("w3", [E, inner, h]))
        names += ["", "w3"]
    node = helper.make_node("MoE", names, ["y"], domain=MS, k=k, activation_type=act,
                            swiglu_fusion=fusion, name="moe", **attrs)
    tmp_path.mkdir(parents=True, exist_ok=True)
    return _save(tmp_path, [node], ins, [_vi("y", [T, h])], f"moe{T}")


def test_a_decode_step_runs_and_reads_only_its_k_experts(tmp_path):
    """One token, top 2 of 8 experts, SwiGLU fused: fc1 [1, 64] x [64, 256] and fc2
    [1, 128] x [128, 64] for 2 experts, which move a quarter of what the same token sent
    to all 8 experts moves."""
    h, inner = 64, 128
    runs = {k: npusim.simulate(moe(tmp_path / str(k), 1, k=k), "gemmini_validation",
                               overrides=SCALAR_VU) for k in (2, 8)}
    by = {lay["name"]: lay for lay in runs[2].layers}
    assert list(by) == ["moe/route", "moe/dispatch", "moe/fc1", "moe/act", "moe/fc2",
                        "moe/combine"]
    assert by["moe/fc1"]["macs"] == 2 * h * 2 * inner
    assert by["moe/fc2"]["macs"] == 2 * inner * h
    every = {lay["name"]: lay for lay in runs[8].layers}
    for gemm in ("moe/fc1", "moe/fc2"):
        assert 4 * by[gemm]["bytes_loaded"] == every[gemm]["bytes_loaded"]


def test_a_prefill_spreads_its_tokens_over_every_expert(tmp_path):
    """64 tokens, top 2 of 8: 128 token-expert pairs, 16 tokens on each of the 8 experts;
    the MACs are the dense FFN's times k. Vector: SwiGLU (3 mul, sigmoid, add) on every
    expert's 16 x 128 inner elements; the combine a mul and an add per pair element; the
    routing what a TopK node with k = 2 costs on the router probabilities."""
    T, h, inner, E, k = 64, 64, 128, 8, 2
    r = npusim.simulate(moe(tmp_path, T), "gemmini_validation", overrides=SCALAR_VU)
    by = {lay["name"]: lay for lay in r.layers}
    assert by["moe/fc1"]["macs"] == T * k * h * 2 * inner
    assert by["moe/fc2"]["macs"] == T * k * inner * h
    assert by["moe/fc1"]["bytes_loaded"] >= E * 2 * inner * h  # every expert's weights
    topk = helper.make_node("TopK", ["probs", "kk"], ["v", "i"], name="topk")
    kk = helper.make_node("Constant", [], ["kk"], value=helper.make_tensor(
        "kk", TensorProto.INT64, [1], [k]))
    t = npusim.simulate(_save(tmp_path, [kk, topk], [_vi("probs", [T, E])],
                              [_vi("v", [T, k]), helper.make_tensor_value_info(
                                  "i", TensorProto.INT64, [T, k])], "topk"),
                        "gemmini_validation", overrides=SCALAR_VU)
    assert by["moe/route"]["vector_cycles"] == t.layers[0]["vector_cycles"] > 0
    swiglu = E * 16 * inner * (3 * LAT["mul"] + LAT["sigmoid"] + LAT["add"])
    assert by["moe/act"]["vector_cycles"] == swiglu
    assert by["moe/combine"]["vector_cycles"] == T * k * h * (LAT["mul"] + LAT["add"])


@pytest.mark.parametrize("fusion", [0, 1, 2])
def test_swiglu_costs_the_same_fused_or_not(tmp_path, fusion):
    """Gate and up in one GEMM (interleaved or in halves) or two: the same MACs and the
    same activation pass."""
    r = npusim.simulate(moe(tmp_path, 16, fusion=fusion), "gemmini_validation",
                        overrides=SCALAR_VU)
    assert sum(lay["macs"] for lay in r.layers) == 16 * 2 * (64 * 256 + 128 * 64)
    act = next(lay for lay in r.layers if lay["name"] == "moe/act")
    assert act["vector_cycles"] == 4 * 8 * 128 * (3 * LAT["mul"] + LAT["sigmoid"] + LAT["add"])


def test_each_active_expert_loads_its_bias_row_at_the_accumulators_width(tmp_path):
    """One token to 2 of 8 experts: fc1 and fc2 each load their 2 experts' bias rows once
    (f x inner and h elements, 4 bytes each: the accumulator's D matrix), nothing more."""
    h, inner, E = 64, 128, 8
    plain = npusim.simulate(moe(tmp_path / "plain", 1), "gemmini_validation",
                            overrides=SCALAR_VU)
    biased = npusim.simulate(moe(tmp_path / "bias", 1, biases=([E, 2 * inner], [E, h])),
                             "gemmini_validation", overrides=SCALAR_VU)
    a = {lay["name"]: lay for lay in plain.layers}
    b = {lay["name"]: lay for lay in biased.layers}
    assert b["moe/fc1"]["bytes_loaded"] - a["moe/fc1"]["bytes_loaded"] == 2 * 2 * inner * 4
    assert b["moe/fc2"]["bytes_loaded"] - a["moe/fc2"]["bytes_loaded"] == 2 * h * 4


def test_a_bias_of_the_wrong_shape_is_a_clear_error(tmp_path):
    with pytest.raises(NpusimError, match=r"MoE 'moe'.*biases \(E, out\).*got.*biases \[\(8, 64\)"):
        npusim.simulate(moe(tmp_path, 4, biases=([8, 64], [8, 64])), "gemmini_validation")


def test_an_activation_moe_does_not_define_is_a_clear_error(tmp_path):
    with pytest.raises(NpusimError, match="MoE 'moe'.*relu2"):
        npusim.simulate(moe(tmp_path, 4, act="relu2"), "gemmini_validation")


def qmoe(tmp_path, T, bits, block, h=64, inner=128, E=8, k=2):
    U8 = TensorProto.UINT8
    ins = [_vi("x", [T, h]), _vi("probs", [T, E]),
           helper.make_tensor_value_info("w1", U8, [E, 2 * inner, h * bits // 8]),
           _vi("s1", [E, 2 * inner, h // block]),
           helper.make_tensor_value_info("w2", U8, [E, h, inner * bits // 8]),
           _vi("s2", [E, h, inner // block])]
    node = helper.make_node("QMoE", ["x", "probs", "w1", "s1", "", "w2", "s2"], ["y"],
                            domain=MS, k=k, activation_type="swiglu", swiglu_fusion=1,
                            expert_weight_bits=bits, block_size=block, name="moe")
    tmp_path.mkdir(parents=True, exist_ok=True)
    return _save(tmp_path, [node], ins, [_vi("y", [T, h])], f"qmoe{T}")


def test_qmoe_reads_its_experts_in_their_stored_width(tmp_path):
    """4-bit experts, a scale per 32 elements (at 1 byte on gemmini_validation): a column of
    64 is 2 blocks of 1 + 16 bytes. One token to 2 experts: fc1 reads 2 x 256 such columns,
    and the MoE's MACs and layers are the float MoE's."""
    q = npusim.simulate(qmoe(tmp_path / "q", 1, 4, 32), "gemmini_validation",
                        overrides=SCALAR_VU)
    f = npusim.simulate(moe(tmp_path / "f", 1), "gemmini_validation", overrides=SCALAR_VU)
    assert [(lay["name"], lay["macs"]) for lay in q.layers] == \
        [(lay["name"], lay["macs"]) for lay in f.layers]
    fc1 = next(lay for lay in q.layers if lay["name"] == "moe/fc1")
    assert fc1["weight_bits"] == 4
    assert fc1["bytes_loaded"] == 2 * 256 * 2 * (1 + 16) + 2 * 64  # weights, each token row


def test_an_uneven_split_runs_exactly_its_pairs(tmp_path):
    """5 tokens, top 2 of 8: 10 pairs on 8 experts, 2 experts with 2 pairs (fc1/more) and 6
    with 1: the MACs are the dense FFN's times k, not 8 experts x 2 rows."""
    T, h, inner, k = 5, 64, 128, 2
    r = npusim.simulate(moe(tmp_path, T), "gemmini_validation", overrides=SCALAR_VU)
    by = {lay["name"]: lay for lay in r.layers}
    assert by["moe/fc1"]["macs"] == 6 * 1 * h * 2 * inner
    assert by["moe/fc1/more"]["macs"] == 2 * 2 * h * 2 * inner
    assert sum(lay["macs"] for lay in r.layers) == T * k * (h * 2 * inner + inner * h)
    assert by["moe/act"]["start_cycle"] >= max(by["moe/fc1"]["end_cycle"],
                                               by["moe/fc1/more"]["end_cycle"])


def test_silu_with_an_up_projection_is_gated(tmp_path):
    """Mixtral's form: activation silu with fc3 given: the up GEMM runs and the activation
    multiplies by it (sigmoid, mul, mul per inner element)."""
    T, h, inner, E, k = 16, 64, 128, 8, 2
    ins = [_vi("x", [T, h]), _vi("probs", [T, E]), _vi("w1", [E, inner, h]),
           _vi("w2", [E, h, inner]), _vi("w3", [E, inner, h])]
    node = helper.make_node("MoE", ["x", "probs", "w1", "", "w2", "", "w3"], ["y"], domain=MS,
                            k=k, activation_type="silu", name="moe")
    r = npusim.simulate(_save(tmp_path, [node], ins, [_vi("y", [T, h])], "mixtral"),
                        "gemmini_validation", overrides=SCALAR_VU)
    by = {lay["name"]: lay for lay in r.layers}
    assert by["moe/fc3"]["macs"] == T * k * h * inner
    assert by["moe/act"]["vector_cycles"] == T * k * inner * (LAT["sigmoid"] + 2 * LAT["mul"])


def test_a_decode_combine_keeps_each_token_in_one_tile(tmp_path):
    """On 4 cores one token's k expert rows are summed in one tile: no two tiles of the
    combine store the same output row."""
    from npusim.config import load_config
    from npusim.frontend import load_graph
    from npusim.kernels import isa
    from npusim.lowering import lower_graph

    path = moe(tmp_path, 2, h=256, k=4)
    prog = lower_graph(load_graph(path), load_config("server"))
    layer = [info.name for info in prog.layers].index("moe/combine")
    tiles = prog.tile[prog.tile[:, isa.T_LAYER] == layer]
    stores = tiles[:, isa.T_BASE0 + 2]  # (slots: the expert rows, the routing values, y)
    assert len(set(stores)) == len(stores)
