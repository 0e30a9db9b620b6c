"""Quantized models in the QDQ format read as int8 work (frontend/quantized.fold_qdq).

``tests/data/zoo/quantized``: a small CNN (conv 3->16, conv 16->32 stride 2, mean, fc)
exported by torch and quantized by ONNX Runtime 1.32 (``models/zoo_quantized.py``): the
float file, ``quantize_static`` in the QDQ and the QOperator format, ``quantize_dynamic``.
ORT keeps the mean in float, so both quantized forms convert around it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import npusim
from npusim.frontend import load_graph

ZOO = Path(__file__).resolve().parent / "data" / "zoo" / "quantized"
TOY = {fmt: str(ZOO / f"toy_cnn-{fmt}.onnx") for fmt in ("float", "qdq", "qoperator", "dynamic")}


def _sim(fmt, config, optimize="none"):
    return npusim.simulate(TOY[fmt], config, optimize=optimize)


def _timeline(r):
    """Per layer: what it costs and computes in (names and op types differ by format)."""
    return [(lay["cycles"], lay["macs"], lay["precision"], lay["bytes_loaded"],
             lay["bytes_stored"]) for lay in r.layers]


def test_qdq_on_an_int8_config_is_the_float_model():
    """mobile computes in int8: a float model runs there as its int8 deployment, so the QDQ
    form (every activation a Q -> DQ pair) is the same work, cycle for cycle; so is the
    QOperator form. Before fold_qdq the QDQ file took 28,951 cycles (each Q and DQ a layer)."""
    f, q, op = _sim("float", "mobile"), _sim("qdq", "mobile"), _sim("qoperator", "mobile")
    assert q.total_cycles == f.total_cycles == op.total_cycles
    compute = [lay for lay in q.layers if lay["cycles"]]
    assert [lay["op_type"] for lay in compute] == ["Conv", "Conv", "ReduceMean", "Gemm"]
    assert _timeline(f) == [t for t in _timeline(q) if t[0]]


def test_qdq_is_its_qoperator_form_on_a_bf16_config():
    """server computes in bf16: the convs and the fc compute in int8 in all three forms, and
    the conversions around the float mean and at the model's input and output are charged
    the same: QDQ, QOperator and QDQ after ORT's own fusion (--optimize extended) give the
    same layers, bytes and cycles."""
    q, op = _sim("qdq", "server"), _sim("qoperator", "server")
    ext = _sim("qdq", "server", "extended")
    assert q.total_cycles == op.total_cycles == ext.total_cycles
    assert _timeline(q) == _timeline(op) == _timeline(ext)
    assert [lay["op_type"] for lay in op.layers] == [
        "QuantizeLinear", "QLinearConv", "QLinearConv", "DequantizeLinear", "ReduceMean",
        "QuantizeLinear", "QGemm", "DequantizeLinear"]
    assert [lay["op_type"] for lay in q.layers] == [
        "QuantizeLinear", "Conv", "Conv", "DequantizeLinear", "ReduceMean",
        "QuantizeLinear", "Gemm", "DequantizeLinear"]
    f = _sim("float", "server")
    assert sum(lay["macs"] for lay in q.layers) == sum(lay["macs"] for lay in f.layers)


def test_boundary_conversions_are_charged_and_units_compute_in_int8():
    """On server the Q of the float input, the DQ into the float mean, the Q after it and
    the DQ of the output are vector layers at 2 bytes per element; the units are int8 and
    list the Q/DQ nodes they absorbed; on mobile the same conversions cost nothing."""
    q = _sim("qdq", "server")
    first = q.layers[0]
    assert first["op_type"] == "QuantizeLinear" and first["vector_cycles"] > 0
    assert first["precision"] == 2 and first["input_shapes"][0] == [1, 3, 32, 32]
    assert [lay["precision"] for lay in q.layers] == [2, 1, 1, 2, 2, 2, 1, 2]
    conv1, conv2, gemm = q.layers[1], q.layers[2], q.layers[6]
    assert [n.split("_")[-1] for n in conv1["fused"]] == ["DequantizeLinear", "QuantizeLinear"]
    assert any("DequantizeLinear" in n for n in gemm["fused"])
    assert conv2["bytes_stored"] == 32 * 16 * 16  # one byte per output element
    m = _sim("qdq", "mobile")
    conversions = [lay for lay in m.layers
                   if lay["op_type"] in ("QuantizeLinear", "DequantizeLinear")]
    assert len(conversions) == 4 and all(lay["cycles"] == 0 for lay in conversions)
    assert all(lay["mapping_source"].startswith("int8 config") for lay in conversions)


def test_dynamic_quantization_stays_charged():
    """DynamicQuantizeLinear finds its scale at run time (min and max of the tensor): a real
    vector layer on every config, int8 too."""
    r = _sim("dynamic", "mobile")
    dql = [lay for lay in r.layers if lay["op_type"] == "DynamicQuantizeLinear"]
    assert len(dql) == 3 and all(lay["vector_cycles"] > 0 for lay in dql)


def test_an_integer_accumulator_is_dequantized_in_its_output_path():
    """quantize_dynamic writes ConvInteger -> Cast -> Mul(scale) -> Add(bias) -> Relu: the
    accumulator's output stage does all four (fusion.plan_fusions), as for a bias and an
    activation. Before, each was a vector layer: 43,217 cycles on mobile, now 22,033 (the
    float file 15,998; the rest is the three DynamicQuantizeLinear passes). The scale is the
    input's scale times the weight's, computed at run time: each integer layer starts only
    when its scale is there."""
    r = _sim("dynamic", "mobile")
    assert [lay["op_type"] for lay in r.layers] == [
        "DynamicQuantizeLinear", "Mul", "ConvInteger", "DynamicQuantizeLinear", "Mul",
        "ConvInteger", "ReduceMean", "DynamicQuantizeLinear", "Mul", "MatMulInteger"]
    integer = [i for i, lay in enumerate(r.layers) if lay["op_type"].endswith("Integer")]
    op_of = {n.name: n.op_type for n in load_graph(TOY["dynamic"]).nodes}
    assert [[op_of[n] for n in r.layers[i]["fused"]] for i in integer] == [
        ["Cast", "Mul", "Add", "Relu"], ["Cast", "Mul", "Add", "Relu"], ["Cast", "Mul", "Add"]]
    for i in integer:  # the scale's Mul is the layer just before
        assert r.layers[i]["start_cycle"] >= r.layers[i - 1]["end_cycle"]
    # the convs' MACs and bytes are the float convs': the stage adds no pass (the FC is
    # compared by MACs only: the float file stores its weight transposed, Gemm's transB,
    # the integer one as MatMulInteger's C x M, and the two layouts may tile differently)
    f = _sim("float", "mobile")
    assert [(lay["macs"], lay["bytes_stored"] if lay["op_type"].startswith("Conv") else 0)
            for lay in r.layers if lay["macs"]] == [
        (lay["macs"], lay["bytes_stored"] if lay["op_type"].startswith("Conv") else 0)
        for lay in f.layers if lay["macs"]]


def test_only_an_integer_accumulator_takes_a_cast_and_a_scale(tmp_path):
    """A float conv's Cast and Mul stay layers (a float result has no dequantization), and
    an integer conv's Mul by a per-pixel tensor is not a per-channel scale."""
    from npusim.lowering.fusion import plan_fusions

    def graph(conv_op, scale_shape):
        ins = ["x", "w"] if conv_op == "Conv" else ["xi", "wi"]
        nodes = [helper.make_node(conv_op, ins, ["c"], name="conv"),
                 helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT, name="cast"),
                 helper.make_node("Mul", ["cf", "k"], ["y"], name="scale")]
        inits = [helper.make_tensor("w", TensorProto.FLOAT, [8, 8, 1, 1], np.zeros(64)),
                 helper.make_tensor("wi", TensorProto.INT8, [8, 8, 1, 1], np.zeros(64, np.int8)),
                 helper.make_tensor("k", TensorProto.FLOAT, scale_shape,
                                    np.zeros(int(np.prod(scale_shape))))]
        g = helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4]),
                         helper.make_tensor_value_info("xi", TensorProto.INT8, [1, 8, 4, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
        m.ir_version = 9
        path = tmp_path / f"{conv_op}_{len(scale_shape)}.onnx"
        onnx.save(m, str(path))
        return plan_fusions(load_graph(path))[0]

    assert graph("ConvInteger", [8, 1, 1]) == {"cast": "conv", "scale": "conv"}
    assert graph("ConvInteger", [1, 1, 4, 4]) == {"cast": "conv"}
    assert graph("Conv", [8, 1, 1]) == {}


# --------------------------------------------------------------------------- the rule


def _qdq_model(tmp_path, body, outputs, name="m"):
    """x [1, 8, 8, 8] -> Q -> DQ -> body; w an int8 weight behind a DQ (folded)."""
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [0.1]),
             helper.make_tensor("z", TensorProto.INT8, [], [0]),
             helper.make_tensor("axes", TensorProto.INT64, [2], [2, 3]),
             helper.make_tensor("wq", TensorProto.INT8, [8, 8, 1, 1], np.zeros(64, np.int8))]
    nodes = [helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["w"], name="w_dq"),
             helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="x_q"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="x_dq")]
    g = helper.make_graph(nodes + body, name,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                          [helper.make_tensor_value_info(*out) for out in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    path = tmp_path / f"{name}.onnx"
    onnx.save(m, str(path))
    return load_graph(path)


def test_relu_between_conv_and_q_joins_the_unit(tmp_path):
    """DQ -> Conv -> Relu -> Q -> DQ (a QAT export): the conv and the Relu compute in int8,
    the DQs and the Q are gone, the output DQ (a float output) stays."""
    body = [helper.make_node("Conv", ["xd", "w"], ["c"], name="conv"),
            helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node("QuantizeLinear", ["r", "s", "z"], ["rq"], name="r_q"),
            helper.make_node("DequantizeLinear", ["rq", "s", "z"], ["y"], name="y_dq")]
    g = _qdq_model(tmp_path, body, [("y", TensorProto.FLOAT, [1, 8, 8, 8])])
    assert [(n.name, n.precision) for n in g.nodes] == [
        ("x_q", None), ("conv", 1), ("relu", 1), ("y_dq", None)]
    assert g.node("conv").inputs[0] == "xq"  # the int8 tensor the Q wrote
    assert g.node("conv").fused == ["x_dq", "r_q"]
    assert g.node("y_dq").inputs[0] == "r"  # the unit's output, requantized in place


def test_float_op_between_dq_and_q_stays_float(tmp_path):
    """DQ -> ReduceMean -> Q: ReduceMean has no integer form in ONNX Runtime, so it stays
    float and both conversions stay; a DQ read by a float op and an int8 conv at once
    stays for the float reader while the conv reads the integers."""
    body = [helper.make_node("ReduceMean", ["xd", "axes"], ["m"], name="mean"),
            helper.make_node("QuantizeLinear", ["m", "s", "z"], ["mq"], name="m_q"),
            helper.make_node("Conv", ["xd", "w"], ["c"], name="conv"),
            helper.make_node("QuantizeLinear", ["c", "s", "z"], ["y"], name="c_q")]
    g = _qdq_model(tmp_path, body, [("mq", TensorProto.INT8, [1, 8, 1, 1]),
                                          ("y", TensorProto.INT8, [1, 8, 8, 8])])
    prec = {n.name: n.precision for n in g.nodes}
    assert prec == {"x_q": None, "x_dq": None, "mean": None, "m_q": None, "conv": 1,
                    "c_q": None}  # c_q writes a graph output: kept
    assert g.node("mean").inputs == ["xd", "axes"] and g.node("conv").inputs[0] == "xq"
    assert g.node("conv").fused == []  # x_dq stays a layer: not absorbed


@pytest.mark.parametrize("inputs", [["xd", "x"], ["x", "x"]])
def test_a_float_input_keeps_the_op_float(tmp_path, inputs):
    """An Add with a float activation input (not through a DQ) is not a unit."""
    node = helper.make_node("Add", inputs, ["a"], name="unit")
    body = [node, helper.make_node("QuantizeLinear", ["a", "s", "z"], ["y"], name="a_q")]
    g = _qdq_model(tmp_path, body, [("y", TensorProto.INT8, [1, 8, 8, 8])])
    assert g.node("unit").precision is None
    assert "x_dq" in [n.name for n in g.nodes]  # read by a float op (or by nothing)


def test_qoperator_ops_on_stored_integers_compute_in_int8(tmp_path):
    """The QOperator format runs MaxPool, Reshape, Transpose straight on uint8 tensors (ORT's
    fusion turns DQ -> MaxPool -> Q into the same): they compute at one byte, as the QDQ
    form's unit does, on any config."""
    u8 = TensorProto.UINT8
    pool = helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], name="pool")
    g = helper.make_graph([pool], "m", [helper.make_tensor_value_info("x", u8, [1, 8, 8, 8])],
                          [helper.make_tensor_value_info("p", u8, [1, 8, 7, 7])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    onnx.save(m, str(tmp_path / "m.onnx"))
    assert load_graph(tmp_path / "m.onnx").node("pool").precision == 1
    r = npusim.simulate(str(tmp_path / "m.onnx"), "server")
    assert r.layers[0]["precision"] == 1 and r.config.precision == 2


# --------------------------------------------------------------------------- ORT's dynamic
# quantization of fused graphs: the contrib ops it writes (QAttention, QEmbedLayerNormalization,
# DynamicQuantizeLSTM) load and compute their GEMMs in int8, run through the installed
# onnxruntime's own quantizer (random weights; the files are written at test time)

def _quantized_by_ort(tmp_path, nodes, inputs, outputs, weights):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in weights]
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    src, dst = tmp_path / "float.onnx", tmp_path / "dynamic.onnx"
    onnx.save(m, str(src))
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    return str(src), str(dst), {n.op_type for n in onnx.load(str(dst)).graph.node}


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def test_ort_dynamic_quantization_of_fused_bert_ops_loads(tmp_path):
    """EmbedLayerNormalization and Attention become QEmbedLayerNormalization and QAttention;
    the quantized file has the float file's MACs, its QKV projection in int8."""
    B, S, H, V = 1, 32, 64, 500
    ms = "com.microsoft"
    nodes = [helper.make_node("EmbedLayerNormalization",
                              ["ids", "segs", "word", "pos", "seg", "gamma", "beta"],
                              ["emb", "mask_index"], domain=ms, name="emb"),
             helper.make_node("Attention", ["emb", "w", "b", "mask_index"], ["y"], domain=ms,
                              num_heads=4, name="attn")]
    src, dst, ops = _quantized_by_ort(
        tmp_path, nodes, [_vi("ids", [B, S], TensorProto.INT32),
                          _vi("segs", [B, S], TensorProto.INT32)], [_vi("y", [B, S, H])],
        [("word", (V, H)), ("pos", (512, H)), ("seg", (2, H)), ("gamma", (H,)),
         ("beta", (H,)), ("w", (H, 3 * H)), ("b", (3 * H,))])
    assert {"QEmbedLayerNormalization", "QAttention"} <= ops
    f, q = npusim.simulate(src, "server"), npusim.simulate(dst, "server")
    assert sum(lay["macs"] for lay in q.layers) == sum(lay["macs"] for lay in f.layers) > 0
    by = {lay["name"]: lay for lay in q.layers}
    qkv = next(lay for name, lay in by.items() if name.endswith("/qkv"))
    assert qkv["op_type"] == "QAttention" and qkv["precision"] == 1


def test_ort_dynamic_quantization_of_an_lstm_loads(tmp_path):
    S, B, I, H = 6, 2, 32, 16
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y"], hidden_size=H, name="lstm")
    src, dst, ops = _quantized_by_ort(
        tmp_path, [node], [_vi("x", [S, B, I])], [_vi("Y", [S, 1, B, H])],
        [("W", (1, 4 * H, I)), ("R", (1, 4 * H, H)), ("B", (1, 8 * H))])
    assert "DynamicQuantizeLSTM" in ops
    f, q = npusim.simulate(src, "server"), npusim.simulate(dst, "server")
    assert [lay["macs"] for lay in q.layers] == [lay["macs"] for lay in f.layers]
    assert {lay["precision"] for lay in q.layers if lay["macs"]} == {1}
