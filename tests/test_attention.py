"""Attention and ONNX Runtime contrib ops (npusim/lowering/attention.py): MACs, K/V traffic
and vector cycles against formulas derived by hand.

Vector-cycle checks use a vector unit of one element per pass (lanes = alus = 1), so a
VECTOR instruction of e elements costs exactly e * latency cycles whatever the tiling, and
latencies set to distinct primes, so a wrong op in a step list shows.
"""

from math import ceil, log2

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

F, I32 = TensorProto.FLOAT, TensorProto.INT32
MS = "com.microsoft"
LAT = dict(add=1, sub=2, mul=3, div=5, max=7, min=11, exp=13, log=17, sqrt=19, rsqrt=23,
           recip=29, tanh=31, sigmoid=37, erf=41, gelu=43, pow=47, cast=53, reduce=59)
IDEAL = ["memory.type=ideal"]
SCALAR_VU = IDEAL + ["core.vector.lanes=1", "core.vector.alus=1"] + \
    [f"core.vector.latency.{k}={v}" for k, v in LAT.items()]


def T(n: int) -> int:
    """Levels of the reduce tree over n values: ceil(log2 n)."""
    return ceil(log2(n)) if n > 1 else 0



def vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def save(tmp_path, nodes, inputs, outputs, weights=(), name="m", opset=17, value_info=()):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=[weight(*w) for w in weights],
                          value_info=list(value_info))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                            helper.make_opsetid(MS, 1)])
    m.ir_version = 10 if opset >= 21 else 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(m, str(path))
    return str(path)


def macs(r) -> int:
    return sum(c["macs"] for c in r.cores)


def vector_busy(r) -> int:
    return sum(c["vector_busy_cycles"] for c in r.cores)


def by_name(r):
    return {l["name"]: l for l in r.layers}


def ms_attention(tmp_path, B=1, S=16, h=32, heads=2, past=0, name="attn", **attrs):
    """com.microsoft Attention: x [B, S, h], weights [h, 3h], bias [3h] (+ past/present)."""
    d = h // heads
    ins, names = [vi("x", [B, S, h])], ["x", "w", "b"]
    outs, out_names = [vi("y", [B, S, h])], ["y"]
    if past:
        ins.append(vi("past", [2, B, heads, past, d]))
        names += ["", "past"]
        outs.append(vi("present", [2, B, heads, past + S, d]))
        out_names.append("present")
    node = helper.make_node("Attention", names, out_names, name="attn", domain=MS,
                            num_heads=heads, **attrs)
    return save(tmp_path, [node], ins, outs, [("w", [h, 3 * h]), ("b", [3 * h])], name=name)


# --------------------------------------------------------------------------- Attention


def test_attention_macs_are_projection_plus_scores_plus_context(tmp_path):
    B, S, h, heads = 1, 16, 32, 2
    d, kv = h // heads, S
    r = npusim.simulate(ms_attention(tmp_path, B, S, h, heads), "mobile", overrides=IDEAL)
    assert macs(r) == 3 * S * h * h + 2 * heads * S * kv * d
    layers = by_name(r)
    assert [l["name"] for l in r.layers] == ["attn/qkv", "attn/scores", "attn/softmax",
                                             "attn/context"]
    assert layers["attn/qkv"]["macs"] == 3 * S * h * h
    assert layers["attn/scores"]["macs"] == layers["attn/context"]["macs"] == heads * S * kv * d
    assert layers["attn/qkv"]["fused"] == ["bias"]
    # each step waits for the one before
    order = [layers[f"attn/{s}"] for s in ("qkv", "scores", "softmax", "context")]
    for a, b in zip(order, order[1:]):
        assert b["start_cycle"] >= a["end_cycle"]


def test_qattention_projects_in_int8_and_attends_in_float(tmp_path):
    """ONNX Runtime's dynamic quantization of a fused Attention, on a config that computes
    in 2 bytes (server): the float op's layers and MACs; its projection moves what the
    float op's moves on a 1-byte config, its scores, softmax and context what the float
    op's move on this one."""
    B, S, h, heads = 1, 64, 64, 2
    U8, I8 = TensorProto.UINT8, TensorProto.INT8
    node = helper.make_node("QAttention", ["x", "w", "b", "xs", "ws"], ["y"], name="attn",
                            domain=MS, num_heads=heads)
    q = save(tmp_path, [node], [vi("x", [B, S, h], U8), vi("w", [h, 3 * h], I8),
                                vi("b", [3 * h]), vi("xs", []), vi("ws", [])],
             [vi("y", [B, S, h])], name="q")
    assert load_config("server").precision == 2
    r = by_name(npusim.simulate(q, "server", overrides=IDEAL))
    attn = ms_attention(tmp_path, B, S, h, heads)
    f2 = by_name(npusim.simulate(attn, "server", overrides=IDEAL))
    f1 = by_name(npusim.simulate(attn, "server", overrides=IDEAL + ["precision=1"]))
    assert list(r) == list(f2) == ["attn/qkv", "attn/scores", "attn/softmax", "attn/context"]
    for name in f2:
        assert r[name]["macs"] == f2[name]["macs"] and r[name]["op_type"] == "QAttention"
    assert r["attn/qkv"]["precision"] == 1 and r["attn/scores"]["precision"] == 2

    def moved(layer):
        return layer["bytes_loaded"], layer["bytes_stored"]

    assert moved(r["attn/qkv"]) == moved(f1["attn/qkv"]) != moved(f2["attn/qkv"])
    for part in ("scores", "softmax", "context"):
        assert moved(r[f"attn/{part}"]) == moved(f2[f"attn/{part}"])


def test_decoder_masked_mha_is_mha_with_its_inputs_reordered(tmp_path):
    """One decoding token with a KV cache and a bias: ONNX Runtime's DecoderMaskedMulti-
    HeadAttention (bias last, past at 5 and 6) costs what MultiHeadAttention (bias at 3,
    past at 6 and 7) costs on the same tensors, layer by layer."""
    B, N, d, P = 2, 4, 16, 31
    D = N * d
    ins = [vi("q", [B, 1, D]), vi("k", [B, 1, D]), vi("v", [B, 1, D]),
           vi("pk", [B, N, P, d]), vi("pv", [B, N, P, d])]
    outs = [vi("y", [B, 1, D]), vi("ck", [B, N, P + 1, d]), vi("cv", [B, N, P + 1, d])]
    runs = {}
    for op, names in (("DecoderMaskedMultiHeadAttention",
                       ["q", "k", "v", "", "", "pk", "pv", "", "", "", "b"]),
                      ("MultiHeadAttention", ["q", "k", "v", "b", "", "", "pk", "pv"])):
        node = helper.make_node(op, names, ["y", "ck", "cv"], name="attn", domain=MS,
                                num_heads=N)
        path = save(tmp_path, [node], ins, outs, [("b", [3 * D])], name=op)
        runs[op] = npusim.simulate(path, "server", overrides=IDEAL)
    dmmha, mha = runs["DecoderMaskedMultiHeadAttention"], runs["MultiHeadAttention"]

    def timeline(r):
        return [(lay["name"], lay["cycles"], lay["macs"], lay["bytes_loaded"])
                for lay in r.layers]

    assert timeline(dmmha) == timeline(mha)
    assert any(lay["name"].endswith("_prep") for lay in dmmha.layers)  # the bias is read
    assert macs(dmmha) == 2 * B * N * (P + 1) * d  # scores and context over past + new


def test_attention_with_a_kv_cache_attends_to_past_plus_new(tmp_path):
    B, S, h, heads, past = 1, 4, 32, 2, 12
    d, kv = h // heads, past + S
    r = npusim.simulate(ms_attention(tmp_path, B, S, h, heads, past=past), "mobile",
                        overrides=IDEAL)
    assert macs(r) == 3 * S * h * h + 2 * heads * S * kv * d


def test_softmax_vector_cycles_match_the_formula(tmp_path):
    B, S, h, heads = 1, 16, 32, 2
    L = S
    rows, E = B * heads * S, B * heads * S * L
    softmax = E * (LAT["max"] + LAT["sub"] + LAT["exp"] + LAT["add"] + LAT["div"]) \
        + 2 * rows * T(L) * LAT["reduce"]
    r = npusim.simulate(ms_attention(tmp_path, B, S, h, heads), "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == softmax  # the projection bias rides in the accumulator
    # a causal mask adds one add pass over the scores
    r = npusim.simulate(ms_attention(tmp_path, B, S, h, heads, name="causal", unidirectional=1),
                        "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == softmax + E * LAT["add"]


def test_attention_bias_input_is_loaded_and_added(tmp_path):
    B, S, h, heads = 1, 8, 32, 4
    node = helper.make_node("Attention", ["x", "w", "b", "", "", "ab"], ["y"], name="attn",
                            domain=MS, num_heads=heads)
    path = save(tmp_path, [node], [vi("x", [B, S, h]), vi("ab", [1, 1, S, S])],
                [vi("y", [B, S, h])], [("w", [h, 3 * h]), ("b", [3 * h])])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    rows, E = B * heads * S, B * heads * S * S
    assert vector_busy(r) == E * (LAT["add"] + LAT["max"] + LAT["sub"] + LAT["exp"] + LAT["add"]
                                  + LAT["div"]) + 2 * rows * T(S) * LAT["reduce"]


def _kv_bytes(path, cfg):
    """Bytes the attention GEMMs load as their second operand (K in scores, V in context)."""
    prog = lower_graph(load_graph(path), cfg)
    total = 0
    for t in range(prog.n_tiles):
        name = prog.layers[prog.tile[t, isa.T_LAYER]].name
        if not name.endswith(("/scores", "/context")):
            continue
        s, n = prog.tile[t, isa.T_INST_START], prog.tile[t, isa.T_INST_LEN]
        for row in prog.inst[s:s + n]:
            if row[isa.I_OP] == isa.OP_MVIN and row[isa.I_SLOT] == 1:
                total += int(row[isa.I_N_OUTER] * row[isa.I_N_INNER] * row[isa.I_RUN_BYTES])
    return total


def test_grouped_query_attention_loads_less_kv_than_multi_head(tmp_path):
    # one decoding step: 8 query heads of 64 over a cache of L positions
    B, S, heads, d, past = 1, 1, 8, 64, 63
    L = past + S
    cfg = load_config("mobile", IDEAL)
    prec = cfg.precision

    mha = helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "", "pk", "pv"],
                           ["y", "pres_k", "pres_v"], name="mha", domain=MS, num_heads=heads)
    mha_path = save(tmp_path, [mha],
                    [vi("q", [B, S, heads * d]), vi("k", [B, S, heads * d]),
                     vi("v", [B, S, heads * d]), vi("pk", [B, heads, past, d]),
                     vi("pv", [B, heads, past, d])],
                    [vi("y", [B, S, heads * d]), vi("pres_k", [B, heads, L, d]),
                     vi("pres_v", [B, heads, L, d])], name="mha")

    def gqa(kv):
        node = helper.make_node("GroupQueryAttention",
                                ["q", "k", "v", "pk", "pv", "seqlens_k", "total"],
                                ["y", "pres_k", "pres_v"], name="gqa", domain=MS,
                                num_heads=heads, kv_num_heads=kv)
        return save(tmp_path, [node],
                    [vi("q", [B, S, heads * d]), vi("k", [B, S, kv * d]), vi("v", [B, S, kv * d]),
                     vi("pk", [B, kv, past, d]), vi("pv", [B, kv, past, d]),
                     vi("seqlens_k", [B], I32), vi("total", [], I32)],
                    [vi("y", [B, S, heads * d]), vi("pres_k", [B, kv, L, d]),
                     vi("pres_v", [B, kv, L, d])], name=f"gqa{kv}")

    # K and V are read once per KV head: heads (MHA) versus kv_num_heads (GQA) blocks of L x d
    assert _kv_bytes(mha_path, cfg) == 2 * B * heads * L * d * prec
    assert _kv_bytes(gqa(heads), cfg) == 2 * B * heads * L * d * prec
    assert _kv_bytes(gqa(2), cfg) == 2 * B * 2 * L * d * prec
    r_mha = npusim.simulate(mha_path, cfg)
    r_gqa = npusim.simulate(gqa(2), cfg)
    assert macs(r_mha) == macs(r_gqa) == 2 * B * heads * S * L * d
    # simulated, in whole DMA requests: a quarter of the KV heads, less than half the bytes
    # (the K/V blocks are most of them; short rows of a tile round up to whole requests)
    loaded = [sum(c["bytes_loaded"] for c in r.cores) for r in (r_mha, r_gqa)]
    assert 2 * loaded[1] < loaded[0]


def test_multi_head_attention_bias_adds_on_the_vector_unit(tmp_path):
    B, S, heads, d = 1, 8, 2, 16
    D = heads * d
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "bias"], ["y"], name="mha",
                            domain=MS, num_heads=heads)
    path = save(tmp_path, [node], [vi("q", [B, S, D]), vi("k", [B, S, D]), vi("v", [B, S, D])],
                [vi("y", [B, S, D])], [("bias", [3 * D])])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    rows, E = B * heads * S, B * heads * S * S
    softmax = E * (LAT["max"] + LAT["sub"] + LAT["exp"] + LAT["add"] + LAT["div"]) \
        + 2 * rows * T(S) * LAT["reduce"]
    assert vector_busy(r) == softmax + 3 * B * S * D * LAT["add"]
    assert [l["name"] for l in r.layers] == ["mha/q_prep", "mha/k_prep", "mha/v_prep",
                                             "mha/scores", "mha/softmax", "mha/context"]
    assert macs(r) == 2 * B * heads * S * S * d


def test_onnx_attention_with_fewer_kv_heads(tmp_path):
    B, heads, kv, S, d = 1, 4, 2, 8, 16
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], name="att", is_causal=1)
    path = save(tmp_path, [node], [vi("q", [B, heads, S, d]), vi("k", [B, kv, S, d]),
                                   vi("v", [B, kv, S, d])],
                [vi("y", [B, heads, S, d])], name="onnx_att", opset=23)
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert macs(r) == 2 * B * heads * S * S * d
    E, rows = B * heads * S * S, B * heads * S
    assert vector_busy(r) == E * (LAT["add"] + LAT["max"] + LAT["sub"] + LAT["exp"] + LAT["add"]
                                  + LAT["div"]) + 2 * rows * T(S) * LAT["reduce"]


def test_plain_onnx_gqa_broadcasts_kv_heads_in_matmul(tmp_path):
    # Q [B, Nkv, g, S, d] x K^T [B, Nkv, 1, d, L]: the KV-head dim broadcast over g
    B, kv, g, S, d = 1, 2, 4, 8, 16
    node = helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores")
    path = save(tmp_path, [node], [vi("q", [B, kv, g, S, d]), vi("kt", [B, kv, 1, d, S])],
                [vi("s", [B, kv, g, S, S])])
    r = npusim.simulate(path, "mobile", overrides=IDEAL)
    assert macs(r) == B * kv * g * S * d * S


def test_contrib_graph_without_shapes_gets_them_from_onnx_runtime(tmp_path):
    B, S, h, heads = 1, 8, 32, 2
    node = helper.make_node("Attention", ["x", "w", "b"], ["a"], name="attn", domain=MS,
                            num_heads=heads)
    relu = helper.make_node("Relu", ["a"], ["y"], name="relu")
    path = save(tmp_path, [node, relu], [vi("x", ["batch", S, h])], [vi("y", ["batch", S, h])],
                [("w", [h, 3 * h]), ("b", [3 * h])])
    graph = load_graph(path, {"batch": B})
    assert graph.shape("a") == (B, S, h)
    r = npusim.simulate(str(path), "mobile", overrides=IDEAL, dims={"batch": B})
    assert macs(r) == 3 * S * h * h + 2 * heads * S * S * (h // heads)


def test_bad_head_counts_are_a_clear_error(tmp_path):
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v"], ["y"], name="gqa",
                            domain=MS, num_heads=6, kv_num_heads=4)
    path = save(tmp_path, [node], [vi("q", [1, 4, 96]), vi("k", [1, 4, 64]),
                                   vi("v", [1, 4, 64])], [vi("y", [1, 4, 96])])
    with pytest.raises(NpusimError, match="gqa.*multiple of kv_num_heads"):
        npusim.simulate(path, "mobile", overrides=IDEAL)


# --------------------------------------------------------------------------- fused GEMM / conv


def test_fused_conv_costs_the_conv_and_lists_the_activation(tmp_path):
    def conv(op, **kw):
        node = helper.make_node(op, ["x", "w", "b"], ["y"], name="conv", kernel_shape=[3, 3],
                                pads=[1, 1, 1, 1], **kw)
        return save(tmp_path, [node], [vi("x", [1, 8, 12, 12])], [vi("y", [1, 16, 12, 12])],
                    [("w", [16, 8, 3, 3]), ("b", [16])], name=op)

    plain = npusim.simulate(conv("Conv"), "mobile")
    fused = npusim.simulate(conv("FusedConv", domain=MS, activation="Relu"), "mobile")
    assert fused.total_cycles == plain.total_cycles
    assert macs(fused) == macs(plain) == 12 * 12 * 16 * 8 * 9
    assert fused.layers[0]["op_type"] == "FusedConv"
    assert any("Relu" in f for f in fused.layers[0]["fused"])


def test_fused_conv_sum_input_adds_on_the_vector_unit(tmp_path):
    node = helper.make_node("FusedConv", ["x", "w", "", "z"], ["y"], name="conv", domain=MS,
                            kernel_shape=[1, 1], activation="Relu")
    path = save(tmp_path, [node], [vi("x", [1, 8, 4, 4]), vi("z", [1, 16, 4, 4])],
                [vi("y", [1, 16, 4, 4])], [("w", [16, 8, 1, 1])])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == 16 * 16 * (LAT["add"] + LAT["max"])
    assert [l["name"] for l in r.layers] == ["conv", "conv/sum"]


def test_residual_add_and_relu_cost_what_a_fused_conv_with_a_sum_input_costs(tmp_path):
    # A raw export's Conv -> Add(residual) -> Relu and ONNX Runtime's FusedConv with the
    # residual as Z and activation Relu are the same work: the conv, then one vector pass
    # that adds and rectifies (the Relu is a step of the Add's pass, fusion.vector_groups)
    shapes = [vi("x", [1, 8, 6, 6]), vi("z", [1, 16, 6, 6])], [vi("y", [1, 16, 6, 6])]
    raw = save(tmp_path, [helper.make_node("Conv", ["x", "w"], ["c"], name="conv",
                                           kernel_shape=[1, 1]),
                          helper.make_node("Add", ["c", "z"], ["s"], name="add"),
                          helper.make_node("Relu", ["s"], ["y"], name="relu")],
               *shapes, [("w", [16, 8, 1, 1])], name="raw")
    ort = save(tmp_path, [helper.make_node("FusedConv", ["x", "w", "", "z"], ["y"], name="conv",
                                           domain=MS, kernel_shape=[1, 1], activation="Relu")],
               *shapes, [("w", [16, 8, 1, 1])], name="ort")
    a = npusim.simulate(raw, "mobile", overrides=SCALAR_VU)
    b = npusim.simulate(ort, "mobile", overrides=SCALAR_VU)
    assert [l["name"] for l in a.layers] == ["conv", "add"]
    assert a.layers[1]["fused"] == ["relu"]
    assert vector_busy(a) == vector_busy(b) == 36 * 16 * (LAT["add"] + LAT["max"])
    for key in ("bytes_loaded", "bytes_stored"):
        assert [l[key] for l in a.layers] == [l[key] for l in b.layers]
    assert a.total_cycles == b.total_cycles


def test_onnx_runtimes_nchwc_conv_with_a_sum_input_is_a_fused_conv(tmp_path):
    # ONNX Runtime's "all" level writes CNNs in its CPU layout (com.microsoft.nchwc), as
    # ONNXim's generator does: a Conv with an activation and a Sum input (the residual),
    # then ReorderOutput back to NCHW. The Sum was ignored (a ResNet's residual adds cost
    # nothing) and ReorderOutput refused; the Conv is now the FusedConv it computes and the
    # reorder moves nothing, so the file costs what ONNX Runtime's FusedConv file costs
    nchwc = "com.microsoft.nchwc"
    shapes = [vi("x", [1, 16, 6, 6]), vi("z", [1, 16, 6, 6])], [vi("y", [1, 16, 6, 6])]
    blocked = save(tmp_path, [helper.make_node("Conv", ["x", "w", "", "z"], ["c"], name="conv",
                                               domain=nchwc, kernel_shape=[1, 1],
                                               activation="Relu"),
                              helper.make_node("ReorderOutput", ["c"], ["y"], name="reorder",
                                               domain=nchwc, channels=16)],
                   *shapes, [("w", [16, 16, 1, 1])], name="nchwc")
    m = onnx.load(blocked, load_external_data=False)
    m.opset_import.append(helper.make_opsetid(nchwc, 1))
    onnx.save(m, blocked)
    ort = save(tmp_path, [helper.make_node("FusedConv", ["x", "w", "", "z"], ["y"], name="conv",
                                           domain=MS, kernel_shape=[1, 1], activation="Relu")],
               *shapes, [("w", [16, 16, 1, 1])], name="ort")
    a = npusim.simulate(blocked, "mobile", overrides=SCALAR_VU)
    b = npusim.simulate(ort, "mobile", overrides=SCALAR_VU)
    assert [l["name"] for l in a.layers] == ["conv", "conv/sum", "reorder"]
    assert a.layers[2]["cycles"] == a.layers[2]["bytes_loaded"] == 0
    assert vector_busy(a) == vector_busy(b) == 36 * 16 * (LAT["add"] + LAT["max"])
    assert a.total_cycles == b.total_cycles


def test_fused_gemm_costs_the_gemm(tmp_path):
    def gemm(op, **kw):
        node = helper.make_node(op, ["x", "w", "b"], ["y"], name="fc", transB=1, **kw)
        return save(tmp_path, [node], [vi("x", [16, 64])], [vi("y", [16, 48])],
                    [("w", [48, 64]), ("b", [48])], name=op)

    plain = npusim.simulate(gemm("Gemm"), "mobile")
    fused = npusim.simulate(gemm("FusedGemm", domain=MS, activation="Relu"), "mobile")
    assert fused.total_cycles == plain.total_cycles
    assert macs(fused) == 16 * 64 * 48
    assert any("Relu" in f for f in fused.layers[0]["fused"])


@pytest.mark.parametrize("ta,tb", [(0, 1), (1, 0), (1, 1)])
def test_fused_matmul_transposes_its_operands(tmp_path, ta, tb):
    """FusedMatMul, and TransposeMatMul (its older name, in older optimized files): the same
    MACs and the same cycles."""
    Bt, N, C, M = 3, 16, 32, 24
    a = [Bt, C, N] if ta else [Bt, N, C]
    b = [Bt, M, C] if tb else [Bt, C, M]
    runs = []
    for op in ("FusedMatMul", "TransposeMatMul"):
        attrs = dict(transA=ta, transB=tb, alpha=0.125)
        node = helper.make_node(op, ["a", "b"], ["y"], name="fmm", domain=MS, **attrs)
        path = save(tmp_path, [node], [vi("a", a), vi("b", b)], [vi("y", [Bt, N, M])],
                    name=op)
        runs.append(npusim.simulate(path, "mobile", overrides=IDEAL))
    r = runs[0]
    assert macs(r) == Bt * N * C * M
    assert sum(c["bytes_stored"] for c in r.cores) >= Bt * N * M
    assert runs[1].total_cycles == r.total_cycles and macs(runs[1]) == macs(r)


# --------------------------------------------------------------------------- vector contrib ops


def _ln(H, rows, E, beta=True):
    """LayerNormalization's steps (as vector.py): mean, variance, normalize, gamma, beta."""
    return (E * (LAT["add"] + LAT["sub"] + LAT["mul"] + LAT["add"] + LAT["mul"] + LAT["mul"]
                 + (LAT["add"] if beta else 0))
            + rows * (2 * T(H) * LAT["reduce"] + LAT["mul"] + LAT["mul"] + LAT["add"]
                      + LAT["rsqrt"]))


def _rms(H, rows, E):
    return (E * (LAT["mul"] + LAT["add"] + LAT["mul"] + LAT["mul"])
            + rows * (T(H) * LAT["reduce"] + LAT["mul"] + LAT["add"] + LAT["rsqrt"]))


def test_skip_layer_norm_vector_cycles(tmp_path):
    B, S, H = 1, 8, 32
    rows, E = B * S, B * S * H
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "g", "be", "bias"],
                            ["y", "", "", "sum"], name="sln", domain=MS)
    path = save(tmp_path, [node], [vi("x", [B, S, H]), vi("skip", [B, S, H])],
                [vi("y", [B, S, H]), vi("sum", [B, S, H])],
                [("g", [H]), ("be", [H]), ("bias", [H])])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == E * 2 * LAT["add"] + _ln(H, rows, E)
    # the sum output is stored too: two outputs of E elements
    assert sum(c["bytes_stored"] for c in r.cores) >= 2 * E


def test_skip_simplified_layer_norm_and_rms_norm(tmp_path):
    B, S, H = 1, 8, 32
    rows, E = B * S, B * S * H
    skip = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "g"], ["h"],
                            name="ssln", domain=MS)
    rms = helper.make_node("SimplifiedLayerNormalization", ["h", "g2"], ["y"], name="rms",
                           domain=MS, axis=-1)
    path = save(tmp_path, [skip, rms], [vi("x", [B, S, H]), vi("skip", [S, H])],
                [vi("y", [B, S, H])], [("g", [H]), ("g2", [H])],
                value_info=[vi("h", [B, S, H])])  # contrib outputs: ONNX cannot infer them
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == E * LAT["add"] + 2 * _rms(H, rows, E)
    layers = by_name(r)
    assert layers["rms"]["start_cycle"] >= layers["ssln"]["end_cycle"]


def test_embed_layer_norm_gathers_rows_and_normalizes(tmp_path):
    B, S, H, V = 2, 8, 32, 1000
    rows, E = B * S, B * S * H
    node = helper.make_node("EmbedLayerNormalization",
                            ["ids", "seg", "we", "pe", "se", "g", "be"], ["y", "mask_index"],
                            name="emb", domain=MS)
    path = save(tmp_path, [node], [vi("ids", [B, S], I32), vi("seg", [B, S], I32)],
                [vi("y", [B, S, H]), vi("mask_index", [B], I32)],
                [("we", [V, H]), ("pe", [512, H]), ("se", [2, H]), ("g", [H]), ("be", [H])])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == E * 2 * LAT["add"] + _ln(H, rows, E)
    # every token's word and position row is read
    assert sum(c["bytes_loaded"] for c in r.cores) >= 2 * E


@pytest.mark.parametrize("preset,widen", [("mobile", 0), ("server", LAT["sub"] + LAT["mul"])])
def test_qembed_layer_norm_dequantizes_each_gathered_element(tmp_path, preset, widen):
    """ONNX Runtime's dynamic quantization of EmbedLayerNormalization: the float op's work
    plus a DequantizeLinear (sub, mul) per element of the word, position and segment rows
    read, on a config wider than int8 (server: 2 bytes); nothing more on an int8 one."""
    B, S, H, V = 2, 8, 32, 1000
    rows, E = B * S, B * S * H
    U8 = TensorProto.UINT8
    tables = ["we", "pe", "se", "g", "be"]
    scales = [f"{t}_scale" for t in tables] + [f"{t}_zp" for t in tables]
    node = helper.make_node("QEmbedLayerNormalization", ["ids", "seg"] + tables + [""] + scales,
                            ["y", "mask_index"], name="emb", domain=MS)
    shapes = {"we": [V, H], "pe": [512, H], "se": [2, H], "g": [H], "be": [H]}
    ins = [vi("ids", [B, S], I32), vi("seg", [B, S], I32)] + \
        [vi(t, shapes[t], U8) for t in tables] + [vi(f"{t}_scale", []) for t in tables] + \
        [vi(f"{t}_zp", [], U8) for t in tables]
    path = save(tmp_path, [node], ins, [vi("y", [B, S, H]), vi("mask_index", [B], I32)],
                name="q")
    r = npusim.simulate(path, preset, overrides=SCALAR_VU)
    assert vector_busy(r) == E * 2 * LAT["add"] + 3 * E * widen + _ln(H, rows, E)
    assert r.layers[0]["op_type"] == "QEmbedLayerNormalization"


@pytest.mark.parametrize("op,inputs,steps", [
    ("BiasGelu", ["x", "bias"], ["add", "gelu"]),
    ("FastGelu", ["x", "bias"], ["add", "gelu"]),
    ("FastGelu", ["x"], ["gelu"]),
    ("QuickGelu", ["x"], ["mul", "sigmoid", "mul"]),
    ("BiasAdd", ["x", "bias", "skip"], ["add", "add"]),
    ("ScaledSiLU", ["x"], ["mul", "sigmoid", "mul"]),
])
def test_elementwise_contrib_ops(tmp_path, op, inputs, steps):
    B, S, H = 1, 8, 32
    node = helper.make_node(op, inputs, ["y"], name="op", domain=MS)
    ins = [vi(n, [B, S, H]) for n in inputs if n != "bias"]
    path = save(tmp_path, [node], ins, [vi("y", [B, S, H])],
                [("bias", [H])] if "bias" in inputs else [])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == B * S * H * sum(LAT[s] for s in steps)


def test_bias_softmax(tmp_path):
    B, N, S = 1, 2, 16
    node = helper.make_node("BiasSoftmax", ["x", "bias"], ["y"], name="bsm", domain=MS, axis=3)
    path = save(tmp_path, [node], [vi("x", [B, N, S, S]), vi("bias", [1, 1, S, S])],
                [vi("y", [B, N, S, S])])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    rows, E = B * N * S, B * N * S * S
    assert vector_busy(r) == E * (LAT["add"] + LAT["max"] + LAT["sub"] + LAT["exp"] + LAT["add"]
                                  + LAT["div"]) + 2 * rows * T(S) * LAT["reduce"]


def test_rotary_embedding(tmp_path):
    B, N, S, Hd = 1, 2, 8, 16
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"], name="rope")
    path = save(tmp_path, [node], [vi("x", [B, N, S, Hd]), vi("cos", [B, S, Hd // 2]),
                                   vi("sin", [B, S, Hd // 2])],
                [vi("y", [B, N, S, Hd])], opset=23)
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == B * N * S * Hd * (LAT["mul"] + LAT["mul"] + LAT["add"])


def test_mrotary_embedding_costs_the_rotation_of_rotary_embedding(tmp_path):
    """M-RoPE takes its cos/sin half row from three position streams: the same rotation."""
    B, S, N, Hd = 1, 8, 2, 16
    node = helper.make_node("MRotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="mrope",
                            domain=MS, num_heads=N, mrope_section=[4, 2, 2])
    path = save(tmp_path, [node], [vi("x", [B, S, N * Hd]), vi("pos", [3, B, S],
                                                                TensorProto.INT64)],
                [vi("y", [B, S, N * Hd])], [("cos", [64, Hd // 2]), ("sin", [64, Hd // 2])])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == B * S * N * Hd * (LAT["mul"] + LAT["mul"] + LAT["add"])


@pytest.mark.parametrize("projected", [False, True])
def test_gated_add_scales_by_a_per_row_gate(tmp_path, projected):
    """X + Y * gate: a mul and an add per element; projected, the gate is first each row's
    K activations times gate_weight on the array (K MACs a row) and a sigmoid per row."""
    B, S, H, K = 2, 8, 32, 16
    rows = B * S
    ins = [vi("x", [B, S, H]), vi("y", [B, S, H]), vi("g", [B, S, K if projected else 1])]
    node = helper.make_node("GatedAdd", ["x", "y", "g"] + (["w"] if projected else []), ["o"],
                            name="ga", domain=MS)
    path = save(tmp_path, [node], ins, [vi("o", [B, S, H])], [("w", [K, 1])] if projected else [])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == rows * H * (LAT["mul"] + LAT["add"]) + \
        (rows * LAT["sigmoid"] if projected else 0)
    assert macs(r) == (rows * K if projected else 0)
    if projected:
        layers = by_name(r)
        assert layers["ga"]["start_cycle"] >= layers["ga/sigmoid"]["end_cycle"] \
            >= layers["ga/gate"]["end_cycle"]


@pytest.mark.parametrize("act,steps", [("silu", ["sigmoid", "mul"]), ("sigmoid", ["sigmoid"])])
def test_gated_rms_norm_normalizes_each_head_and_gates_it(tmp_path, act, steps):
    """A packed (B, T, H * C) tensor is B * T * H rows of C: an RMS norm each, and per element
    the gate's activation and one product."""
    B, T_, H, C = 2, 4, 3, 16
    rows, E = B * T_ * H, B * T_ * H * C
    node = helper.make_node("GatedRMSNorm", ["x", "scale", "z"], ["y"], name="grn", domain=MS,
                            activation=act, epsilon=1e-6)
    path = save(tmp_path, [node], [vi("x", [B, T_, H * C]), vi("z", [B, T_, H * C])],
                [vi("y", [B, T_, H * C])], [("scale", [C])])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == E * (sum(LAT[s] for s in steps) + LAT["mul"]) + _rms(C, rows, E)


def test_branchwise_rms_norm_reads_a_scale_per_branch_and_column(tmp_path):
    """A (C, H) scale is H values a row, repeating every C rows, also when the rows
    number C x H (B x T = H): the layer reads X and a scale row per row."""
    B, T_, C, H = 1, 16, 4, 16
    E = B * T_ * C * H
    node = helper.make_node("BranchwiseRMSNorm", ["x", "scale"], ["y"], name="brn", domain=MS,
                            num_branches=C)
    path = save(tmp_path, [node], [vi("x", [B, T_, C * H])], [vi("y", [B, T_, C * H])],
                [("scale", [C, H])])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert r.layers[0]["bytes_loaded"] >= 2 * E


@pytest.mark.parametrize("flat", [False, True])
def test_branchwise_rms_norm_normalizes_each_branch(tmp_path, flat):
    """Each branch's H values are a row; a scale of C * H values costs a multiply an element
    on the way (flattened form), one of H values is the norm's own (grouped form)."""
    B, T_, C, H = 2, 4, 3, 16
    rows, E = B * T_ * C, B * T_ * C * H
    shape = [B, T_, C * H] if flat else [B, T_, C, H]
    node = helper.make_node("BranchwiseRMSNorm", ["x", "scale"], ["y"], name="brn", domain=MS,
                            **({"num_branches": C} if flat else {}))
    path = save(tmp_path, [node], [vi("x", shape)], [vi("y", shape)],
                [("scale", [C * H] if flat else [H])])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == (E * LAT["mul"] if flat else 0) + _rms(H, rows, E)


def test_linear_attention_gate_is_two_elementwise_passes(tmp_path):
    """decay = decay_scale * Softplus(a + dt_bias): add, exp, add, log, mul an element;
    beta = Sigmoid(b)."""
    B, T_, H = 2, 8, 4
    E = B * T_ * H
    node = helper.make_node("LinearAttentionGate", ["a", "dt", "ds", "b"], ["decay", "beta"],
                            name="lag", domain=MS)
    path = save(tmp_path, [node], [vi("a", [B, T_, H]), vi("b", [B, T_, H])],
                [vi("decay", [B, T_, H]), vi("beta", [B, T_, H])], [("dt", [H]), ("ds", [H])])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == E * (LAT["add"] + LAT["exp"] + LAT["add"] + LAT["log"]
                                  + LAT["mul"] + LAT["sigmoid"])
    assert [l["name"] for l in r.layers] == ["lag", "lag/beta"]


def test_inverse_is_gauss_jordan_on_the_vector_unit(tmp_path):
    """3 matrices of 8 x 8: per element a div and 7 mul and sub (n^3 multiply-adds a
    matrix)."""
    node = helper.make_node("Inverse", ["x"], ["y"], name="inv", domain=MS)
    path = save(tmp_path, [node], [vi("x", [3, 8, 8])], [vi("y", [3, 8, 8])])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == 3 * 64 * (LAT["div"] + 7 * LAT["mul"] + 7 * LAT["sub"])


@pytest.mark.parametrize("mix_shape", [[2, 4, 4, 1], [2, 4, 4, 16]])
def test_hyper_connection_pre_mix_reduces_the_streams(tmp_path, mix_shape):
    """4 streams of 16 for 2 x 4 tokens, a gate per branch or per element: a multiply and
    an add per stream element; the one output row per token stored once."""
    T, C, H = 8, 4, 16
    node = helper.make_node("HyperConnectionPreMix", ["x", "m"], ["y"], name="pre",
                            domain=MS, reduction_scale=0.5)
    path = save(tmp_path, [node], [vi("x", [2, 4, C, H]), vi("m", mix_shape)],
                [vi("y", [2, 4, H])])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    assert vector_busy(r) == T * C * H * (LAT["mul"] + LAT["add"])
    assert sum(c["bytes_stored"] for c in r.cores) < C * T * H  # once, not once a branch


@pytest.mark.parametrize("stream_mix", [False, True])
def test_hyper_connection_post_mix_mixes_then_injects(tmp_path, stream_mix):
    """Flattened streams (num_branches 4): with a stream mix, C multiply-adds per output
    element (layer pst/mix) before the injection's multiply and add per element."""
    T, C, H = 8, 4, 16
    inputs = ["x", "b", "p"] + (["s"] if stream_mix else [])
    node = helper.make_node("HyperConnectionPostMix", inputs, ["y"], name="pst", domain=MS,
                            num_branches=C)
    ins = [vi("x", [T, C * H]), vi("b", [T, H]), vi("p", [T, C, 1])]
    if stream_mix:
        ins.append(vi("s", [T, C, C]))
    path = save(tmp_path, [node], ins, [vi("y", [T, C * H])])
    r = npusim.simulate(path, "mobile", overrides=SCALAR_VU)
    per = LAT["mul"] + LAT["add"]
    assert vector_busy(r) == T * C * H * per * ((C + 1) if stream_mix else 1)
    assert [l["name"] for l in r.layers] == (["pst/mix"] if stream_mix else []) + ["pst"]


def test_expand_dims_is_a_relabel(tmp_path):
    node = helper.make_node("ExpandDims", ["x", "axis"], ["y"], name="ed", domain=MS)
    axis = helper.make_tensor("axis", TensorProto.INT32, [], [1])
    g = helper.make_graph([node], "m", [vi("x", [4, 8])], [vi("y", [4, 1, 8])],
                          initializer=[axis])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "ed.onnx"))
    r = npusim.simulate(str(tmp_path / "ed.onnx"), "mobile", overrides=IDEAL)
    assert r.layers[0]["output_shape"] == [4, 1, 8]
    assert r.total_cycles == 0 and r.layers[0]["mapping_source"].startswith("relabel")


def test_generation_loops_get_a_reason(tmp_path):
    """ONNX Runtime's BeamSearch wraps a decoder in a data-dependent loop: the error says
    so and where to go instead, before any work."""
    dec = helper.make_graph([helper.make_node("Identity", ["a"], ["b"])], "decoder",
                            [vi("a", [1])], [vi("b", [1])])
    node = helper.make_node("BeamSearch", ["ids", "max_len"], ["seq"], name="bs", domain=MS,
                            decoder=dec, eos_token_id=2, pad_token_id=0)
    path = save(tmp_path, [node], [vi("ids", [1, 4], I32), vi("max_len", [1], I32)],
                [vi("seq", [1, 1, 8], I32)])
    with pytest.raises(NpusimError, match="BeamSearch: bs .*generation loop.*LLM request"):
        lower_graph(load_graph(path), load_config("mobile"))


# --------------------------------------------------------------------------- one cost per op


def _layer_cost(layer):
    return layer["vector_cycles"], layer["bytes_loaded"], layer["bytes_stored"]


@pytest.mark.parametrize("spad_kib", [64, 1])  # whole rows; rows of 600 streamed in chunks
def test_softmax_inside_attention_costs_what_a_softmax_node_costs(tmp_path, spad_kib):
    B, heads, S, L, d = 1, 2, 8, 600, 16
    D = heads * d
    mha = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], name="mha", domain=MS,
                           num_heads=heads)
    attn = save(tmp_path, [mha], [vi("q", [B, S, D]), vi("k", [B, L, D]), vi("v", [B, L, D])],
                [vi("y", [B, S, D])], name="attn")
    softmax = save(tmp_path, [helper.make_node("Softmax", ["x"], ["p"], name="sm", axis=-1)],
                   [vi("x", [B, heads, S, L])], [vi("p", [B, heads, S, L])], name="softmax")
    over = SCALAR_VU + [f"core.spad_kib={spad_kib}"]
    inside = by_name(npusim.simulate(attn, "gemmini_validation", overrides=over))["mha/softmax"]
    alone = by_name(npusim.simulate(softmax, "gemmini_validation", overrides=over))["sm"]
    assert _layer_cost(inside) == _layer_cost(alone)
    rows = B * heads * S
    assert alone["vector_cycles"] == rows * L * (
        LAT["max"] + LAT["sub"] + LAT["exp"] + LAT["add"] + LAT["div"]) \
        + 2 * rows * T(L) * LAT["reduce"]
    if spad_kib == 1:  # statistics pass, exp pass (written), normalizing pass (read back)
        assert "chunks" in alone["mapping_source"] and "chunks" in inside["mapping_source"]
        # (rows of 600 B start off the 32-byte request grid: a few partial requests more)
        assert 3 * rows * L <= alone["bytes_loaded"] < 4 * rows * L
        assert 2 * rows * L <= alone["bytes_stored"] < 3 * rows * L


@pytest.mark.parametrize("H,spad_kib", [(64, 64), (600, 1)])  # the second streams chunks
def test_skip_layer_norm_costs_an_add_plus_a_layer_norm_node(tmp_path, H, spad_kib):
    B, S = 1, 4
    sln = helper.make_node("SkipLayerNormalization", ["x", "skip", "g", "be"], ["y"],
                           name="sln", domain=MS)
    skip = save(tmp_path, [sln], [vi("x", [B, S, H]), vi("skip", [B, S, H])],
                [vi("y", [B, S, H])], [("g", [H]), ("be", [H])], name="skip")
    ln = helper.make_node("LayerNormalization", ["x", "g", "be"], ["y"], name="ln", axis=-1)
    plain = save(tmp_path, [ln], [vi("x", [B, S, H])], [vi("y", [B, S, H])],
                 [("g", [H]), ("be", [H])], name="plain")
    over = SCALAR_VU + [f"core.spad_kib={spad_kib}"]
    fused = by_name(npusim.simulate(skip, "gemmini_validation", overrides=over))["sln"]
    alone = by_name(npusim.simulate(plain, "gemmini_validation", overrides=over))["ln"]
    E = B * S * H
    assert fused["vector_cycles"] == alone["vector_cycles"] + E * LAT["add"]
    assert alone["vector_cycles"] == _ln(H, B * S, E)
