"""The bundled model set (ResNet, MobileNetV2, BERT, GPT-2, Llama 3): every graph loads with
its dims bound, has the architecture's op counts, MACs and parameter counts, stays small, and
rebuilds byte for byte. Where onnxruntime is installed, the transformer blocks are also run on
random weights against a numpy reference, so the graphs compute what their names say."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections import Counter
from dataclasses import replace
from math import prod
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from npusim.errors import NpusimError
from npusim.frontend import Graph, load_graph, load_model
from npusim.paths import models_dir

REPO = Path(__file__).resolve().parents[1]


def _load_builder():
    source = REPO / "models" / "build_models.py"
    spec = importlib.util.spec_from_file_location("build_models", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


bm = _load_builder()

NEW_MODELS = ["resnet18", "resnet50", "mobilenetv2", "bert_base_layer",
              "bert_base_layer_decomp", "bert_base", "gpt2_prompt", "gpt2_decode",
              "llama3_8b_layer", "llama3_8b_layer_decode"]

# The symbolic input dims of each model (and values the tests bind them to).
DIMS = {
    "resnet18": {"batch": 1}, "resnet50": {"batch": 1}, "mobilenetv2": {"batch": 1},
    "bert_base_layer": {"batch": 1, "seq": 128},
    "bert_base_layer_decomp": {"batch": 1, "seq": 128},
    "bert_base": {"batch": 1, "seq": 128},
    "gpt2_prompt": {"batch": 1, "seq": 128}, "gpt2_decode": {"batch": 1, "past": 127},
    "llama3_8b_layer": {"batch": 1, "seq": 128},
    "llama3_8b_layer_decode": {"batch": 1, "past": 127},
}


def path(name: str) -> Path:
    return models_dir() / f"{name}.onnx"


def proto(name: str) -> onnx.ModelProto:
    return onnx.load(str(path(name)), load_external_data=False)


def op_counts(g: Graph) -> dict[str, int]:
    return dict(Counter(n.op_type for n in g.nodes))


def macs(g: Graph) -> int:
    """Multiply-accumulates of every Conv, Gemm and MatMul, from the inferred shapes."""
    total = 0
    for n in g.nodes:
        out = g.shape(n.outputs[0])
        if n.op_type == "Conv":  # each output element: (Cin / group) * kh * kw MACs
            total += prod(out) * prod(g.shape(n.inputs[1])[1:])
        elif n.op_type == "Gemm":
            a = g.shape(n.inputs[0])
            total += prod(out) * (a[0] if n.attrs.get("transA") else a[1])
        elif n.op_type == "MatMul":
            total += prod(out) * g.shape(n.inputs[0])[-1]
    return total


def external_params(name: str) -> dict[str, int]:
    """Element count of every external (weight) initializer."""
    return {t.name: prod(t.dims) for t in proto(name).graph.initializer
            if t.data_location == TensorProto.EXTERNAL}


def learned_params(name: str) -> int:
    """Parameters as frameworks count them: no BN running statistics, tied lm_head once."""
    return sum(n for t, n in external_params(name).items()
               if not t.endswith(("running_mean", "running_var")) and t != "lm_head.weight")


# --------------------------------------------------------------------------- analytic values


def resnet_macs(bottleneck: bool, layers: list[int], batch: int = 1) -> int:
    total, h, cin = 64 * 112 * 112 * 3 * 7 * 7, 56, 64  # conv1 7x7/2 -> 112, maxpool -> 56
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers)):
        for i in range(blocks):
            s = 2 if stage > 0 and i == 0 else 1
            o = h // s
            if bottleneck:
                cout = 4 * planes
                total += h * h * planes * cin + o * o * planes * planes * 9 + o * o * cout * planes
            else:
                cout = planes
                total += o * o * planes * cin * 9 + o * o * planes * planes * 9
            if s != 1 or cin != cout:
                total += o * o * cout * cin
            cin, h = cout, o
    return batch * (total + cin * 1000)


def mobilenetv2_macs() -> int:
    total, h, cin = 32 * 112 * 112 * 3 * 9, 112, 32
    for t, c, n, s in bm._MOBILENETV2_SETTINGS:
        for i in range(n):
            stride = s if i == 0 else 1
            hid, o = cin * t, h // stride
            total += (h * h * hid * cin if t != 1 else 0) + o * o * hid * 9 + o * o * c * hid
            cin, h = c, o
    return total + h * h * 1280 * cin + 1280 * 1000


def layer_macs(cfg, batch: int, seq: int, total: int) -> int:
    """Projections, FFN and the two attention matmuls of one transformer layer."""
    h, hd, nh, nkv, f = cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads, cfg.ffn
    proj = h * nh * hd * 2 + 2 * h * nkv * hd  # Q, O and K, V
    ffn = (3 if cfg.activation == "silu_gated" else 2) * h * f
    return batch * seq * (proj + ffn) + 2 * batch * nh * seq * total * hd


def transformer_params(cfg) -> int:
    h, hd, nh, nkv, f = cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads, cfg.ffn
    ffn = (3 if cfg.activation == "silu_gated" else 2) * h * f
    weights = 2 * h * nh * hd + 2 * h * nkv * hd + ffn
    biases = (nh * hd * 2 + 2 * nkv * hd + h + f) if cfg.bias else 0  # q,k,v,o(=h),up,down(=h)
    norms = 2 * h * (1 if cfg.norm == "rmsnorm" else 2)
    return weights + biases + norms


# --------------------------------------------------------------------------- all models


def test_every_model_is_built():
    assert list(bm.MODELS)[-len(NEW_MODELS):] == NEW_MODELS
    for name in NEW_MODELS:
        assert path(name).is_file(), name


@pytest.mark.parametrize("name", NEW_MODELS)
def test_loads_with_dims_bound_and_every_tensor_shaped(name):
    g = load_model(name, DIMS[name])
    assert g.nodes
    for n in g.nodes:
        for t in n.inputs + n.outputs:
            if t:
                assert all(d >= 1 for d in g.shape(t)), (n.name, t)
    assert g.doc_string and len(g.doc_string) > 200


@pytest.mark.parametrize("name", NEW_MODELS)
def test_symbolic_dims_are_named_and_required(name):
    m = proto(name)
    weights = {t.name for t in m.graph.initializer}
    names = {d.dim_param for vi in m.graph.input if vi.name not in weights
             for d in vi.type.tensor_type.shape.dim if d.HasField("dim_param")}
    assert names == set(DIMS[name])
    with pytest.raises(NpusimError, match="unbound symbolic dimension"):
        load_model(name)
    # the dims the model says it is usually run with load too
    props = {p.key: p.value for p in m.metadata_props}
    defaults = dict(kv.split("=") for kv in props["npusim.default_dims"].split(","))
    assert set(defaults) == set(DIMS[name])
    load_model(name, {k: int(v) for k, v in defaults.items()})


@pytest.mark.parametrize("name", NEW_MODELS)
def test_small_file_external_absent_weights_tiny_constants(name):
    p = path(name)
    assert p.stat().st_size < 1_000_000
    m = proto(name)
    assert m.ir_version == 8 and [(o.domain, o.version) for o in m.opset_import] == [("", 17)]
    assert m.graph.doc_string == m.doc_string != ""
    for t in m.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            location = dict((e.key, e.value) for e in t.external_data)["location"]
            assert location == f"{name}.weights.bin" and not t.raw_data
        else:  # Reshape shapes, axes, scalars: what exporters keep inline
            assert prod(t.dims) <= 8, t.name
            assert t.data_type in (TensorProto.INT64, TensorProto.FLOAT), t.name
            assert t.data_type == TensorProto.INT64 or list(t.dims) == [], t.name
    assert not (p.parent / f"{name}.weights.bin").exists()


def test_rebuild_is_byte_identical(tmp_path):
    first = bm.build_all(tmp_path / "a")
    second = bm.build_all(tmp_path / "b")
    for a, b in zip(first, second):
        assert a.read_bytes() == b.read_bytes(), a.name
        assert a.read_bytes() == (models_dir() / a.name).read_bytes(), a.name


def test_block_names_are_unique():
    b = bm.GraphBuilder("x")
    b.op("Relu", ["x"], "r")
    with pytest.raises(ValueError, match="duplicate node name 'r'"):
        b.op("Relu", ["x"], "r")


# --------------------------------------------------------------------------- CNNs


def test_resnet50():
    g = load_model("resnet50", {"batch": 1})
    assert op_counts(g) == {"Conv": 53, "BatchNormalization": 53, "Relu": 49, "Add": 16,
                            "MaxPool": 1, "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1}
    assert macs(g) == resnet_macs(True, [3, 4, 6, 3]) == 4_089_184_256
    assert abs(macs(g) / 4.09e9 - 1) < 0.01  # torchvision: 4.09 GFLOPS (MACs)
    assert learned_params("resnet50") == 25_557_032  # torchvision resnet50
    assert sum(external_params("resnet50").values()) == 25_557_032 + 2 * 26_560  # + BN stats
    assert g.shape("layer4.2.conv3.out") == (1, 2048, 7, 7)
    assert g.shape("layer2.0.conv2.out") == (1, 128, 28, 28)  # v1.5: stride on the 3x3
    assert g.shape("layer2.0.conv1.out") == (1, 128, 56, 56)
    assert load_model("resnet50", {"batch": 8}).shape("logits") == (8, 1000)
    assert macs(load_model("resnet50", {"batch": 8})) == 8 * macs(g)


def test_resnet18():
    g = load_model("resnet18", {"batch": 1})
    assert op_counts(g) == {"Conv": 20, "BatchNormalization": 20, "Relu": 17, "Add": 8,
                            "MaxPool": 1, "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1}
    assert macs(g) == resnet_macs(False, [2, 2, 2, 2]) == 1_814_073_344
    assert abs(macs(g) / 1.81e9 - 1) < 0.01  # torchvision: 1.81 GFLOPS (MACs)
    assert learned_params("resnet18") == 11_689_512  # torchvision resnet18
    conv1 = g.node("layer1.0.conv1")
    assert conv1.attrs == {"dilations": [1, 1], "group": 1, "kernel_shape": [3, 3],
                           "pads": [1, 1, 1, 1], "strides": [1, 1]}
    assert [g.shape(t) for t in conv1.inputs] == [(1, 64, 56, 56), (64, 64, 3, 3)]
    assert g.node("maxpool").attrs["strides"] == [2, 2]
    assert g.shape("maxpool.out") == (1, 64, 56, 56)
    assert g.node("fc").attrs["transB"] == 1 and g.shape("fc.weight") == (1000, 512)


def test_mobilenetv2():
    g = load_model("mobilenetv2", {"batch": 1})
    assert op_counts(g) == {"Conv": 52, "BatchNormalization": 52, "Clip": 35, "Add": 10,
                            "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1}
    depthwise = [n for n in g.nodes if n.op_type == "Conv" and n.attrs["group"] > 1]
    assert len(depthwise) == 17
    for n in depthwise:
        channels = g.shape(n.inputs[0])[1]
        assert n.attrs["group"] == channels == g.shape(n.outputs[0])[1]
        assert g.shape(n.inputs[1]) == (channels, 1, 3, 3)
    for n in g.nodes:
        if n.op_type == "Clip":  # ReLU6
            assert [g.tensor(t).numel for t in n.inputs[1:]] == [1, 1]
    assert macs(g) == mobilenetv2_macs() == 300_774_272
    assert abs(macs(g) / 0.30e9 - 1) < 0.01  # torchvision: 0.30 GFLOPS (MACs)
    assert learned_params("mobilenetv2") == 3_504_872  # torchvision mobilenet_v2
    assert g.shape("features.18.2.out") == (1, 1280, 7, 7)


# --------------------------------------------------------------------------- BERT


BERT_LAYER_OPS = {"MatMul": 8, "Add": 10, "Reshape": 4, "Transpose": 4, "Div": 2, "Softmax": 1,
                  "LayerNormalization": 2, "Erf": 1, "Mul": 2}


def test_bert_base_layer():
    g = load_model("bert_base_layer", {"batch": 2, "seq": 128})
    assert op_counts(g) == BERT_LAYER_OPS
    assert macs(g) == layer_macs(bm.BERT_BASE, 2, 128, 128)
    assert macs(g) == 2 * (128 * 7_077_888 + 1536 * 128 ** 2)
    assert learned_params("bert_base_layer") == transformer_params(bm.BERT_BASE) == 7_087_872
    a = "encoder.layer.0.attn"
    assert g.shape(f"{a}.q.transpose.out") == (2, 12, 128, 64)
    assert g.shape(f"{a}.k.transpose.out") == (2, 12, 64, 128)  # one Transpose to K^T
    assert g.shape(f"{a}.scores.out") == (2, 12, 128, 128)
    assert g.node(f"{a}.softmax").attrs == {"axis": -1}
    assert g.shape("output") == (2, 128, 768)


def test_bert_base_layer_decomp_layernorm():
    g = load_model("bert_base_layer_decomp", {"batch": 2, "seq": 128})
    expected = dict(BERT_LAYER_OPS)
    del expected["LayerNormalization"]
    # per LayerNorm: ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div, Mul, Add
    expected.update(ReduceMean=4, Sub=2, Pow=2, Sqrt=2, Add=10 + 4, Div=2 + 2, Mul=2 + 2)
    assert op_counts(g) == expected
    assert macs(g) == macs(load_model("bert_base_layer", {"batch": 2, "seq": 128}))
    assert external_params("bert_base_layer_decomp") == external_params("bert_base_layer")
    p = "encoder.layer.0.output.LayerNorm"
    assert [n.op_type for n in g.nodes if n.name.startswith(p + ".")] == [
        "ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add"]
    assert g.shape(f"{p}.mean.out") == (2, 128, 1)


def test_bert_base():
    g = load_model("bert_base", {"batch": 1, "seq": 128})
    counts = op_counts(g)
    assert counts == {
        "Gather": 3 + 1, "Add": 2 + 12 * 10, "LayerNormalization": 1 + 12 * 2,
        "Unsqueeze": 1, "Cast": 1, "Sub": 1, "Mul": 1 + 12 * 2, "MatMul": 12 * 8,
        "Reshape": 12 * 4, "Transpose": 12 * 4, "Div": 12 * 2, "Softmax": 12, "Erf": 12,
        "Gemm": 1, "Tanh": 1}
    per_layer = layer_macs(bm.BERT_BASE, 1, 128, 128)
    assert per_layer == 931_135_488
    assert macs(g) == 12 * per_layer + 768 * 768  # + pooler
    assert learned_params("bert_base") == 109_482_240  # bert-base-uncased
    assert g.shape("embeddings.word_embeddings.weight") == (30522, 768)
    assert g.shape("embeddings.word_embeddings.out") == (1, 128, 768)
    assert g.shape("extended_mask.scale.out") == (1, 1, 1, 128)
    assert g.shape("last_hidden_state") == (1, 128, 768) and g.shape("pooler_output") == (1, 768)
    assert load_model("bert_base", {"batch": 4, "seq": 512}).shape("pooler_output") == (4, 768)


# --------------------------------------------------------------------------- GPT-2


GPT2_PARAMS = 124_439_808


def test_gpt2_prompt():
    g = load_model("gpt2_prompt", {"batch": 2, "seq": 64})
    assert op_counts(g) == {
        "Gather": 2, "Add": 1 + 12 * 8, "LayerNormalization": 25, "MatMul": 12 * 6 + 1,
        "Split": 12, "Reshape": 12 * 4, "Transpose": 12 * 5, "Div": 12, "Where": 12,
        "Softmax": 12, "Pow": 12, "Mul": 12 * 4, "Tanh": 12}
    assert macs(g) == 12 * layer_macs(bm.GPT2_SMALL, 2, 64, 64) + 2 * 64 * 768 * 50257
    assert learned_params("gpt2_prompt") == 12 * transformer_params(bm.GPT2_SMALL) + (
        50257 + 1024 + 2) * 768 == GPT2_PARAMS
    assert external_params("gpt2_prompt")["lm_head.weight"] == 768 * 50257
    assert g.shape("logits") == (2, 64, 50257)
    for i in range(12):
        assert g.shape(f"present.{i}.key") == g.shape(f"present.{i}.value") == (2, 12, 64, 64)
    a = "transformer.h.0.attn"
    assert g.shape(f"{a}.scores.out") == (2, 12, 64, 64)
    assert g.node(f"{a}.mask").inputs[0] == "causal_mask"
    assert g.shape("causal_mask") == (1, 1, 64, 64)
    assert g.tensor("causal_mask").elem_type == TensorProto.BOOL


def test_gpt2_decode():
    past = 100
    g = load_model("gpt2_decode", {"batch": 3, "past": past})
    counts = op_counts(g)
    assert counts["Concat"] == 24 and "Where" not in counts
    assert counts["MatMul"] == 12 * 6 + 1 and counts["Softmax"] == 12
    assert macs(g) == 12 * layer_macs(bm.GPT2_SMALL, 3, 1, past + 1) + 3 * 768 * 50257
    assert learned_params("gpt2_decode") == GPT2_PARAMS
    assert g.shape("input_ids") == (3, 1) and g.shape("logits") == (3, 1, 50257)
    for i in range(12):
        assert g.shape(f"past_key_values.{i}.key") == (3, 12, past, 64)
        assert g.shape(f"present.{i}.key") == g.shape(f"present.{i}.value") == (3, 12, past + 1, 64)
    assert g.node("transformer.h.5.attn.k.concat_past").inputs[0] == "past_key_values.5.key"
    assert g.shape("transformer.h.0.attn.scores.out") == (3, 12, 1, past + 1)


# --------------------------------------------------------------------------- Llama 3


LLAMA_LAYER_PARAMS = 4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336 + 2 * 4096
LLAMA_OPS = {"Pow": 2, "ReduceMean": 2, "Sqrt": 2, "Div": 2, "MatMul": 9, "Reshape": 6,
             "Transpose": 5, "Slice": 4, "Concat": 2, "Unsqueeze": 2, "Expand": 2, "Softmax": 1,
             "Sigmoid": 1, "Mul": 2 + 4 + 1 + 2, "Add": 2 + 2 + 1 + 2}


def test_llama3_8b_layer_prompt():
    g = load_model("llama3_8b_layer", {"batch": 2, "seq": 128})
    assert op_counts(g) == LLAMA_OPS
    assert macs(g) == layer_macs(bm.LLAMA3_8B, 2, 128, 128)
    assert macs(g) == 2 * (128 * 218_103_808 + 2 * 32 * 128 * 128 * 128)
    assert learned_params("llama3_8b_layer") == LLAMA_LAYER_PARAMS == 218_112_000
    p = "model.layers.0"
    assert g.shape(f"{p}.self_attn.k_proj.weight") == (4096, 1024)
    assert g.shape(f"{p}.self_attn.v_proj.weight") == (4096, 1024)
    assert g.shape(f"{p}.mlp.gate_proj.weight") == (4096, 14336)
    assert g.shape(f"{p}.mlp.down_proj.weight") == (14336, 4096)
    assert g.shape("present.0.key") == g.shape("present.0.value") == (2, 8, 128, 128)
    assert g.shape(f"{p}.attn.k.repeat.expand.out") == (2, 8, 4, 128, 128)
    assert g.shape(f"{p}.attn.k.repeat.reshape.out") == (2, 32, 128, 128)
    assert g.shape(f"{p}.attn.scores.out") == (2, 32, 128, 128)
    assert g.shape(f"{p}.attn.q.rope.add.out") == (2, 32, 128, 128)
    assert g.shape("cos") == g.shape("sin") == (128, 128)
    assert g.shape("output") == (2, 128, 4096)
    assert "rotary embedding" in g.doc_string
    assert "cos/sin tables [seq,128] precomputed" in g.doc_string


def test_llama3_8b_layer_decode():
    past = 511
    g = load_model("llama3_8b_layer_decode", {"batch": 4, "past": past})
    expected = dict(LLAMA_OPS, Concat=4, Add=LLAMA_OPS["Add"] - 1)  # + KV concat, no mask
    assert op_counts(g) == expected
    assert macs(g) == layer_macs(bm.LLAMA3_8B, 4, 1, past + 1)
    assert learned_params("llama3_8b_layer_decode") == LLAMA_LAYER_PARAMS
    assert g.shape("past_key_values.0.key") == (4, 8, past, 128)
    assert g.shape("present.0.key") == g.shape("present.0.value") == (4, 8, past + 1, 128)
    assert g.shape("model.layers.0.attn.scores.out") == (4, 32, 1, past + 1)
    assert g.shape("cos") == (1, 128)


def test_llama_layers_parameter():
    m = bm.llama3_8b_layers(decode=True, layers=3)  # built in memory only
    g_inputs = [vi.name for vi in m.graph.input]
    assert g_inputs[:3] == ["hidden_states", "cos", "sin"]
    assert [n for n in g_inputs if n.startswith("past_key_values")] == [
        f"past_key_values.{i}.{kv}" for i in range(3) for kv in ("key", "value")]
    assert sum(prod(t.dims) for t in m.graph.initializer
               if t.data_location == TensorProto.EXTERNAL) == 3 * LLAMA_LAYER_PARAMS


# --------------------------------------------------------------------------- numerics (ORT)


def materialize(model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Give every external initializer random data in place; returns the arrays by name."""
    arrays = {}
    for t in model.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL:
            continue
        a = (rng.standard_normal(tuple(t.dims)) * 0.2).astype(np.float32)
        if t.name.endswith("running_var"):
            a = np.abs(a) + 0.5
        arrays[t.name] = a
        t.CopyFrom(numpy_helper.from_array(a, t.name))
    return arrays


def run_ort(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


_erf = np.vectorize(math.erf)


def ref_layer(W, x, p, cfg, mask=None, mask_kind="add", cos=None, sin=None, past=None):
    """numpy (float64) reference of one transformer layer as the frameworks define it."""
    h, hd, nh, nkv = cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads

    def lin(t, role):
        y = t @ W[f"{p}.{cfg.name(role)}.weight"]
        return y + W[f"{p}.{cfg.name(role)}.bias"] if cfg.bias else y

    def norm(t, role):
        n = f"{p}.{cfg.name(role)}"
        if cfg.norm == "rmsnorm":
            return t / np.sqrt((t ** 2).mean(-1, keepdims=True) + cfg.eps) * W[n + ".weight"]
        mu = t.mean(-1, keepdims=True)
        var = ((t - mu) ** 2).mean(-1, keepdims=True)
        return (t - mu) / np.sqrt(var + cfg.eps) * W[n + ".weight"] + W[n + ".bias"]

    def rot(t):
        return t * cos + np.concatenate([-t[..., hd // 2:], t[..., :hd // 2]], -1) * sin

    def attn(t):
        if cfg.fused_qkv:
            q, k, v = np.split(lin(t, "qkv"), 3, axis=-1)
        else:
            q, k, v = lin(t, "q"), lin(t, "k"), lin(t, "v")
        B, S, _ = t.shape
        q = q.reshape(B, S, nh, hd).transpose(0, 2, 1, 3)
        k = k.reshape(B, S, nkv, hd).transpose(0, 2, 1, 3)
        v = v.reshape(B, S, nkv, hd).transpose(0, 2, 1, 3)
        if cos is not None:
            q, k = rot(q), rot(k)
        if past is not None:
            k, v = np.concatenate([past[0], k], 2), np.concatenate([past[1], v], 2)
        kk, vv = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
        s = q @ kk.transpose(0, 1, 3, 2) / math.sqrt(hd)
        if mask is not None:
            s = s + mask if mask_kind == "add" else np.where(mask, s, bm.FLOAT_MIN)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = (s @ vv).transpose(0, 2, 1, 3).reshape(B, S, nh * hd)
        return lin(o, "o"), k, v

    def ffn(t):
        if cfg.activation == "silu_gated":
            g = lin(t, "gate")
            return lin(g / (1 + np.exp(-g)) * lin(t, "up"), "down")
        u = lin(t, "up")
        if cfg.activation == "gelu_erf":
            a = 0.5 * u * (1 + _erf(u / math.sqrt(2)))
        else:
            a = 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))
        return lin(a, "down")

    if cfg.pre_norm:
        a, k, v = attn(norm(x, "ln1"))
        x = x + a
        return x + ffn(norm(x, "ln2")), k, v
    a, k, v = attn(x)
    x = norm(a + x, "ln1")
    return norm(ffn(x) + x, "ln2"), k, v


def rope_tables(seq: int, hd: int, start: int = 0):
    inv = 1.0 / 500000.0 ** (np.arange(0, hd, 2) / hd)
    f = np.outer(np.arange(start, start + seq), inv)
    emb = np.concatenate([f, f], -1)
    cos, sin = np.cos(emb), np.sin(emb)
    folded = np.concatenate([-sin[:, :hd // 2], sin[:, hd // 2:]], -1)  # what the graph takes
    return cos, sin, folded


TINY = {
    "bert": replace(bm.BERT_BASE, hidden=32, heads=4, kv_heads=4, ffn=48),
    "bert_decomposed": replace(bm.BERT_BASE, hidden=32, heads=4, kv_heads=4, ffn=48,
                             norm="layernorm_decomposed"),
    "gpt2": replace(bm.GPT2_SMALL, hidden=32, heads=4, kv_heads=4, ffn=48),
    "llama": replace(bm.LLAMA3_8B, hidden=32, heads=4, kv_heads=2, ffn=48),
}


@pytest.mark.parametrize("kind", ["bert", "bert_decomposed", "gpt2", "gpt2_decode", "llama",
                                  "llama_decode"])
def test_transformer_layer_numerics(kind):
    pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(7)
    decode = kind.endswith("_decode")
    cfg = TINY[kind.removesuffix("_decode")]
    B, S, P = 2, (1 if decode else 5), 3
    T = P + S if decode else S
    nkv, hd, h = cfg.kv_heads, cfg.head_dim, cfg.hidden
    x = rng.standard_normal((B, S, h)).astype(np.float32)
    b = bm.GraphBuilder("tiny")
    inputs = [bm._input("x", [B, S, h])]
    feeds = {"x": x}
    kw, ref_kw = {}, {}
    if kind.startswith("bert"):
        mask = np.where(rng.random((B, 1, 1, S)) < 0.3, -1e4, 0.0).astype(np.float32)
        inputs.append(bm._input("mask", [B, 1, 1, S]))
        feeds["mask"], kw["mask"], ref_kw["mask"] = mask, "mask", mask
    elif not decode:
        causal = np.tril(np.ones((S, S), bool))[None, None]
        if kind == "gpt2":
            inputs.append(bm._input("mask", [1, 1, S, S], bm.BOOL))
            feeds["mask"] = causal
            kw.update(mask="mask", mask_kind="where")
            ref_kw.update(mask=causal, mask_kind="where")
        else:
            add = np.where(causal, 0.0, bm.FLOAT_MIN).astype(np.float32)
            inputs.append(bm._input("mask", [1, 1, S, S]))
            feeds["mask"], kw["mask"], ref_kw["mask"] = add, "mask", add
    if kind.startswith("llama"):
        cos, sin, folded = rope_tables(S, hd, P if decode else 0)
        inputs += [bm._input("cos", [S, hd]), bm._input("sin", [S, hd])]
        feeds.update(cos=cos.astype(np.float32), sin=folded.astype(np.float32))
        kw["rope_cs"] = ("cos", "sin")
        ref_kw.update(cos=cos, sin=sin)
    if not kind.startswith("bert"):
        kw["cache"] = True
    if decode:
        past = [rng.standard_normal((B, nkv, P, hd)).astype(np.float32) for _ in range(2)]
        inputs += [bm._input(n, [B, nkv, P, hd]) for n in ("pk", "pv")]
        feeds.update(pk=past[0], pv=past[1])
        kw["past"], ref_kw["past"] = ("pk", "pv"), past
    y, k, v = bm.transformer_layer(b, "x", "l", cfg, **kw)
    outputs = [("y", y, bm.FLOAT, [B, S, h])]
    if k is not None:
        outputs += [("k", k, bm.FLOAT, [B, nkv, T, hd]), ("v", v, bm.FLOAT, [B, nkv, T, hd])]
    model = b.finish("tiny", "tiny test layer", inputs, outputs, "")
    W = materialize(model, rng)
    got = run_ort(model, feeds)
    want_y, want_k, want_v = ref_layer({n: a.astype(np.float64) for n, a in W.items()},
                                       x.astype(np.float64), "l", cfg, **ref_kw)
    np.testing.assert_allclose(got["y"], want_y, rtol=1e-4, atol=1e-4)
    if k is not None:
        np.testing.assert_allclose(got["k"], want_k, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got["v"], want_v, rtol=1e-4, atol=1e-4)


def test_bundled_bert_layer_runs_like_the_reference():
    pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(3)
    model = proto("bert_base_layer")
    W = materialize(model, rng)
    x = rng.standard_normal((2, 8, 768)).astype(np.float32)
    mask = np.zeros((2, 1, 1, 8), np.float32)
    mask[1, ..., 6:] = bm.FLOAT_MIN
    got = run_ort(model, {"hidden_states": x, "attention_mask": mask})["output"]
    want, _, _ = ref_layer({n: a.astype(np.float64) for n, a in W.items()}, x.astype(np.float64),
                           "encoder.layer.0", bm.BERT_BASE, mask=mask)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", ["resnet18", "mobilenetv2"])
def test_bundled_cnn_runs(name):
    pytest.importorskip("onnxruntime")
    model = proto(name)
    materialize(model, np.random.default_rng(0))
    x = np.random.default_rng(1).standard_normal((2, 3, 224, 224)).astype(np.float32)
    out = run_ort(model, {"input": x})["logits"]
    assert out.shape == (2, 1000) and np.isfinite(out).all()


def test_resnet18_moves_every_weight_and_its_input_at_least_once():
    import npusim
    from npusim.frontend import load_model

    graph = load_model("resnet18", {"batch": 1})
    r = npusim.simulate("resnet18", "server", dims={"batch": 1})
    prec = r.config.precision
    weights = sum(t.numel for t in graph.tensors.values() if t.is_initializer)
    inputs = sum(graph.tensor(n).numel for n in graph.inputs)
    assert sum(c["bytes_loaded"] for c in r.cores) >= (weights + inputs) * prec
