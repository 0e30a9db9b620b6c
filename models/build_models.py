"""Build the small ONNX models bundled with npusim.

Run ``python models/build_models.py`` to regenerate every ``models/*.onnx`` (or pass
``--out DIR`` to write elsewhere). Output is byte-for-byte deterministic: the IR version and
opset are pinned and protobuf serialisation is deterministic, and a test checks that a fresh
build equals the committed files.

The models use only onnx.helper (no torch, no downloads). Weights are initializers with a
shape and dtype but no bytes: each points at an external data file
``<model>.weights.bin`` that is deliberately never written. That keeps the files tiny and
proves the loader never reads weight data (a simulator needs shapes, not values).

Small test models (ops limited to Conv, Gemm, MatMul, Flatten for the first lowering engine):

- tiny_cnn: [1,3,32,32] -> four Convs -> Flatten -> Gemm -> [1,10]; the quick first model
- mlp: [64,256] -> MatMul 512 -> MatMul 512 -> Gemm 128
- matmul_512x768x768: one MatMul [512,768] x [768,768] (benchmark)
- matmul_1024: one MatMul [1024,1024] x [1024,1024]
- conv_resnet18_layer1: one 3x3 Conv, 64 -> 64 channels on 56x56 (a validation case)
- bert_ffn: [seq,768] -> MatMul 3072 -> MatMul 768 with symbolic ``seq`` (needs --dim seq=N)

The model set: full networks as a framework exporter writes them (raw, not ORT-fused), built
from reusable blocks (:func:`conv_bn`, :func:`basic_block`, :func:`bottleneck`,
:func:`inverted_residual`, :func:`transformer_layer` with a :class:`TransformerConfig`).
Dims are symbolic (``batch``, ``seq``, ``past``); each graph's doc_string says what it holds.

- resnet18, resnet50, mobilenetv2: input [batch,3,224,224], torchvision architectures
- bert_base_layer (and bert_base_layer_decomp: LayerNorm as ReduceMean/Sub/Pow/...),
  bert_base: embeddings + 12 encoder layers + pooler
- gpt2_prompt, gpt2_decode: GPT-2 small, prompt phase and one step with a KV cache of ``past``
- llama3_8b_layer, llama3_8b_layer_decode: one Llama-3-8B decoder layer (GQA 32/8 heads)
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

from onnx import ModelProto, TensorProto, ValueInfoProto, helper

IR_VERSION = 8  # pinned so the bytes do not change with the installed onnx version
OPSET = 17
FLOAT = TensorProto.FLOAT


class Weights:
    """Hands out weight initializers that live in a (never written) external data file."""

    def __init__(self, model_name: str):
        self.location = f"{model_name}.weights.bin"
        self.offset = 0
        self.tensors: list[TensorProto] = []

    def add(self, name: str, shape: list[int], dtype: int = FLOAT) -> str:
        t = TensorProto()
        t.name = name
        t.data_type = dtype
        t.dims.extend(shape)
        t.data_location = TensorProto.EXTERNAL
        length = helper.tensor_dtype_to_np_dtype(dtype).itemsize
        for d in shape:
            length *= d
        for key, value in (("location", self.location), ("offset", self.offset), ("length", length)):
            entry = t.external_data.add()
            entry.key, entry.value = key, str(value)
        self.offset += length
        self.tensors.append(t)
        return name


def _model(name: str, doc: str, nodes, inputs, outputs, weights: Weights) -> ModelProto:
    graph = helper.make_graph(
        nodes, name, inputs, outputs, initializer=weights.tensors, doc_string=doc
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="npusim models/build_models.py",
        doc_string=doc,
    )
    return model


def _io(name: str, shape) -> ValueInfoProto:
    return helper.make_tensor_value_info(name, FLOAT, shape)


def tiny_cnn() -> ModelProto:
    w = Weights("tiny_cnn")
    convs = [  # (name, in_ch, out_ch, kernel, stride, pad)
        ("conv1", 3, 16, 3, 1, 1),
        ("conv2", 16, 32, 3, 2, 1),
        ("conv3", 32, 32, 3, 1, 1),
        ("conv4", 32, 64, 1, 1, 0),
    ]
    nodes, x = [], "input"
    for name, cin, cout, k, s, p in convs:
        wt = w.add(f"{name}.weight", [cout, cin, k, k])
        b = w.add(f"{name}.bias", [cout])
        nodes.append(
            helper.make_node(
                "Conv", [x, wt, b], [f"{name}.out"], name=name,
                kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p], group=1,
            )
        )
        x = f"{name}.out"
    nodes.append(helper.make_node("Flatten", [x], ["flat"], name="flatten", axis=1))
    fc_w = w.add("fc.weight", [10, 64 * 16 * 16])
    fc_b = w.add("fc.bias", [10])
    nodes.append(
        helper.make_node("Gemm", ["flat", fc_w, fc_b], ["logits"], name="fc", transB=1)
    )
    doc = ("Tiny CNN for a quick first simulation: [1,3,32,32] -> Conv 3->16 3x3 -> "
           "Conv 16->32 3x3/2 -> Conv 32->32 3x3 -> Conv 32->64 1x1 -> Flatten -> "
           "Gemm 16384->10. Weights are shapes only (external file never written).")
    return _model("tiny_cnn", doc, nodes, [_io("input", [1, 3, 32, 32])],
                  [_io("logits", [1, 10])], w)


def mlp() -> ModelProto:
    w = Weights("mlp")
    nodes = [
        helper.make_node("MatMul", ["input", w.add("fc1.weight", [256, 512])], ["h1"], name="fc1"),
        helper.make_node("MatMul", ["h1", w.add("fc2.weight", [512, 512])], ["h2"], name="fc2"),
        helper.make_node(
            "Gemm", ["h2", w.add("fc3.weight", [128, 512]), w.add("fc3.bias", [128])],
            ["output"], name="fc3", transB=1,
        ),
    ]
    doc = ("Three-layer MLP on a batch of 64: [64,256] -> MatMul 512 -> MatMul 512 -> "
           "Gemm 128 (transB, bias). Weights are shapes only.")
    return _model("mlp", doc, nodes, [_io("input", [64, 256])], [_io("output", [64, 128])], w)


def _single_matmul(name: str, m: int, k: int, n: int, doc: str) -> ModelProto:
    w = Weights(name)
    node = helper.make_node("MatMul", ["A", w.add("B", [k, n])], ["C"], name="matmul")
    return _model(name, doc, [node], [_io("A", [m, k])], [_io("C", [m, n])], w)


def matmul_512x768x768() -> ModelProto:
    return _single_matmul(
        "matmul_512x768x768", 512, 768, 768,
        "Benchmark: one MatMul [512,768] x [768,768] (weight is an initializer, shape only).",
    )


def matmul_1024() -> ModelProto:
    return _single_matmul(
        "matmul_1024", 1024, 1024, 1024,
        "One MatMul [1024,1024] x [1024,1024] (weight is an initializer, shape only).",
    )


def conv_resnet18_layer1() -> ModelProto:
    w = Weights("conv_resnet18_layer1")
    node = helper.make_node(
        "Conv", ["input", w.add("conv.weight", [64, 64, 3, 3])], ["output"], name="conv",
        kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], group=1,
    )
    doc = ("One ResNet-18 layer1 convolution: [1,64,56,56], 64 filters 3x3, stride 1, pad 1, "
           "no bias -> [1,64,56,56]. Matches a validation case. Weights are shapes only.")
    return _model("conv_resnet18_layer1", doc, [node], [_io("input", [1, 64, 56, 56])],
                  [_io("output", [1, 64, 56, 56])], w)


def bert_ffn() -> ModelProto:
    w = Weights("bert_ffn")
    nodes = [
        helper.make_node("MatMul", ["input", w.add("ffn.w1", [768, 3072])], ["hidden"], name="ffn_up"),
        helper.make_node("MatMul", ["hidden", w.add("ffn.w2", [3072, 768])], ["output"], name="ffn_down"),
    ]
    doc = ("BERT-base feed-forward block without activation: [seq,768] -> MatMul 3072 -> "
           "MatMul 768. 'seq' is symbolic: bind it with --dim seq=N. Weights are shapes only.")
    return _model("bert_ffn", doc, nodes, [_io("input", ["seq", 768])],
                  [_io("output", ["seq", 768])], w)


# =========================================================================== the model set
#
# Full networks, built from small reusable blocks. The graphs look like a framework exporter's
# raw output (no ONNX Runtime fusion): Conv + BatchNormalization + Relu, Add residuals,
# MatMul + Add(bias), Reshape/Transpose head splits, Softmax, LayerNormalization, Erf GELU,
# Gather embeddings, Concat KV caches. Learned weights are external (never written); the few
# small constants an exporter also stores inline (Reshape shapes, Unsqueeze/Slice indices,
# scalars such as sqrt(d), the Clip bounds) are inline initializers, because shape inference
# needs their values. Dimensions are symbolic (``batch``, ``seq``, ``past``); each model
# records the dims it is usually run with in the metadata entry ``npusim.default_dims``.

INT64 = TensorProto.INT64
BOOL = TensorProto.BOOL
FLOAT_MIN = -3.4028234663852886e38  # torch.finfo(float32).min, the exporters' mask value
SLICE_END = 9223372036854775807  # INT64_MAX: "to the end", as exporters write it


class GraphBuilder:
    """Collects nodes, external weights and inline constants of one model.

    ``op`` appends a node whose output is ``<node name>.out`` (the name must be unique);
    ``const`` returns a shared inline initializer holding the given values.
    """

    def __init__(self, model_name: str):
        self.weights = Weights(model_name)
        self.nodes: list = []
        self.constants: list[TensorProto] = []
        self._const_names: dict[tuple, str] = {}
        self._node_names: set[str] = set()

    def param(self, name: str, shape: list[int]) -> str:
        """A learned weight: external data, shape only."""
        return self.weights.add(name, shape)

    def const(self, values, dtype: int = INT64, shape: list[int] | None = None) -> str:
        """An inline constant: 1-D ``values``, or of ``shape`` (e.g. [] for a scalar)."""
        values = list(values)
        shape = [len(values)] if shape is None else list(shape)
        key = (dtype, tuple(shape), tuple(values))
        if key not in self._const_names:
            kind = "i64" if dtype == INT64 else "f32"
            text = "_".join(str(v) if dtype == INT64 else format(v, ".9g") for v in values)
            dims = "" if shape == [len(values)] else "[" + "x".join(map(str, shape)) + "]"
            name = f"const.{kind}{dims}.{text.replace('-', 'm')}"
            self.constants.append(helper.make_tensor(name, dtype, shape, values))
            self._const_names[key] = name
        return self._const_names[key]

    def ints(self, *values: int) -> str:
        return self.const(values, INT64)

    def scalar(self, value: float) -> str:
        return self.const([value], FLOAT, [])

    def op(self, op_type: str, inputs: list[str], name: str, outputs: int = 1, **attrs):
        """Append a node; returns its output name (a list when ``outputs`` > 1)."""
        if name in self._node_names:
            raise ValueError(f"duplicate node name {name!r}")
        self._node_names.add(name)
        outs = [f"{name}.out"] if outputs == 1 else [f"{name}.out{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0] if outputs == 1 else outs

    def rename(self, old: str, new: str) -> None:
        """Rename tensor ``old`` (e.g. to a graph output name) everywhere it appears."""
        for n in self.nodes:
            for field in (n.input, n.output):
                for i, t in enumerate(field):
                    if t == old:
                        field[i] = new

    def finish(self, name: str, doc: str, inputs: list[ValueInfoProto],
               outputs: list[tuple[str, str, int, list]], default_dims: str) -> ModelProto:
        """The model; ``outputs`` are (graph output name, tensor, elem type, shape)."""
        out_infos = []
        for out_name, tensor, elem, shape in outputs:
            self.rename(tensor, out_name)
            out_infos.append(helper.make_tensor_value_info(out_name, elem, shape))
        graph = helper.make_graph(self.nodes, name, inputs, out_infos,
                                  initializer=self.weights.tensors + self.constants,
                                  doc_string=doc)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="npusim models/build_models.py",
            doc_string=doc,
        )
        helper.set_model_props(model, {"npusim.default_dims": default_dims})
        return model


def _input(name: str, shape, elem: int = FLOAT) -> ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


# --------------------------------------------------------------------------- CNN blocks


def conv_bn(b: GraphBuilder, x: str, conv: str, bn: str, cin: int, cout: int, k: int,
            stride: int = 1, group: int = 1, act: str | None = None,
            act_name: str | None = None) -> str:
    """Conv (no bias, 'same' padding) -> BatchNormalization -> optional Relu / ReLU6 (Clip)."""
    pad = (k - 1) // 2
    y = b.op("Conv", [x, b.param(f"{conv}.weight", [cout, cin // group, k, k])], conv,
             dilations=[1, 1], group=group, kernel_shape=[k, k], pads=[pad] * 4,
             strides=[stride, stride])
    bn_inputs = [y] + [b.param(f"{bn}.{p}", [cout])
                       for p in ("weight", "bias", "running_mean", "running_var")]
    y = b.op("BatchNormalization", bn_inputs, bn, epsilon=1e-5, momentum=0.9)
    if act == "relu":
        y = b.op("Relu", [y], act_name)
    elif act == "relu6":
        y = b.op("Clip", [y, b.scalar(0.0), b.scalar(6.0)], act_name)
    elif act is not None:
        raise ValueError(f"unknown activation {act!r}")
    return y


def basic_block(b: GraphBuilder, x: str, p: str, cin: int, planes: int, stride: int) -> str:
    """ResNet-18/34 block: 3x3 -> 3x3, identity or 1x1 downsample, Add, Relu."""
    y = conv_bn(b, x, f"{p}.conv1", f"{p}.bn1", cin, planes, 3, stride, act="relu",
                act_name=f"{p}.relu1")
    y = conv_bn(b, y, f"{p}.conv2", f"{p}.bn2", planes, planes, 3)
    return _residual(b, x, y, p, cin, planes, stride)


def bottleneck(b: GraphBuilder, x: str, p: str, cin: int, planes: int, stride: int) -> str:
    """ResNet-50 block (torchvision v1.5: stride on the 3x3): 1x1 -> 3x3 -> 1x1 (x4)."""
    y = conv_bn(b, x, f"{p}.conv1", f"{p}.bn1", cin, planes, 1, act="relu",
                act_name=f"{p}.relu1")
    y = conv_bn(b, y, f"{p}.conv2", f"{p}.bn2", planes, planes, 3, stride, act="relu",
                act_name=f"{p}.relu2")
    y = conv_bn(b, y, f"{p}.conv3", f"{p}.bn3", planes, planes * 4, 1)
    return _residual(b, x, y, p, cin, planes * 4, stride)


def _residual(b: GraphBuilder, x: str, y: str, p: str, cin: int, cout: int, stride: int) -> str:
    if stride != 1 or cin != cout:
        x = conv_bn(b, x, f"{p}.downsample.0", f"{p}.downsample.1", cin, cout, 1, stride)
    return b.op("Relu", [b.op("Add", [y, x], f"{p}.add")], f"{p}.relu")


def inverted_residual(b: GraphBuilder, x: str, p: str, cin: int, cout: int, stride: int,
                      expand: int) -> str:
    """MobileNetV2 block: 1x1 expand (ReLU6) -> 3x3 depthwise (ReLU6) -> 1x1 project, Add."""
    hidden = cin * expand
    y, j = x, 0
    if expand != 1:
        y = conv_bn(b, y, f"{p}.conv.0.0", f"{p}.conv.0.1", cin, hidden, 1, act="relu6",
                    act_name=f"{p}.conv.0.2")
        j = 1
    y = conv_bn(b, y, f"{p}.conv.{j}.0", f"{p}.conv.{j}.1", hidden, hidden, 3, stride,
                group=hidden, act="relu6", act_name=f"{p}.conv.{j}.2")
    y = conv_bn(b, y, f"{p}.conv.{j + 1}", f"{p}.conv.{j + 2}", hidden, cout, 1)
    if stride == 1 and cin == cout:
        y = b.op("Add", [x, y], f"{p}.add")
    return y


def _classifier_head(b: GraphBuilder, x: str, channels: int, fc: str, classes: int = 1000) -> str:
    """GlobalAveragePool -> Flatten -> Gemm (Linear on 2-D input, as torch exports it)."""
    y = b.op("GlobalAveragePool", [x], "avgpool")
    y = b.op("Flatten", [y], "flatten", axis=1)
    return b.op("Gemm", [y, b.param(f"{fc}.weight", [classes, channels]),
                         b.param(f"{fc}.bias", [classes])], fc, alpha=1.0, beta=1.0, transB=1)


_IMAGE_INPUT = ["batch", 3, 224, 224]


def _resnet(name: str, block, layers: list[int], expansion: int, doc: str) -> ModelProto:
    b = GraphBuilder(name)
    y = conv_bn(b, "input", "conv1", "bn1", 3, 64, 7, 2, act="relu", act_name="relu")
    y = b.op("MaxPool", [y], "maxpool", ceil_mode=0, kernel_shape=[3, 3], pads=[1, 1, 1, 1],
             strides=[2, 2])
    cin = 64
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers), start=1):
        for i in range(blocks):
            stride = 2 if stage > 1 and i == 0 else 1
            y = block(b, y, f"layer{stage}.{i}", cin, planes, stride)
            cin = planes * expansion
    y = _classifier_head(b, y, cin, "fc")
    return b.finish(name, doc, [_input("input", _IMAGE_INPUT)],
                    [("logits", y, FLOAT, ["batch", 1000])], "batch=1")


def resnet18() -> ModelProto:
    return _resnet(
        "resnet18", basic_block, [2, 2, 2, 2], 1,
        "ResNet-18 (torchvision architecture, 1000 classes) as exported raw: Conv + "
        "BatchNormalization + Relu (no BN folding), Add + Relu for the residuals, MaxPool, "
        "GlobalAveragePool, Flatten, Gemm. Input [batch,3,224,224] with symbolic 'batch' "
        "(--dim batch=N). 20 Conv, 8 residual Adds, 11.69 M parameters (+ BN running stats), "
        "1.81 GMACs per image. Weights are shapes only (external file never written).")


def resnet50() -> ModelProto:
    return _resnet(
        "resnet50", bottleneck, [3, 4, 6, 3], 4,
        "ResNet-50 (torchvision v1.5 architecture: stride on the 3x3 conv of each bottleneck, "
        "1000 classes) as exported raw: Conv + BatchNormalization + Relu (no BN folding), Add + "
        "Relu for the residuals, MaxPool, GlobalAveragePool, Flatten, Gemm. Input "
        "[batch,3,224,224] with symbolic 'batch' (--dim batch=N). 53 Conv, 16 residual Adds, "
        "25.56 M parameters (+ BN running stats), 4.09 GMACs per image. Weights are shapes only.")


# torchvision MobileNetV2 inverted residual settings: expansion t, channels c, repeats n, stride s
_MOBILENETV2_SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                         (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def mobilenetv2() -> ModelProto:
    b = GraphBuilder("mobilenetv2")
    y = conv_bn(b, "input", "features.0.0", "features.0.1", 3, 32, 3, 2, act="relu6",
                act_name="features.0.2")
    cin, idx = 32, 1
    for t, c, n, s in _MOBILENETV2_SETTINGS:
        for i in range(n):
            y = inverted_residual(b, y, f"features.{idx}", cin, c, s if i == 0 else 1, t)
            cin, idx = c, idx + 1
    y = conv_bn(b, y, f"features.{idx}.0", f"features.{idx}.1", cin, 1280, 1, act="relu6",
                act_name=f"features.{idx}.2")
    y = _classifier_head(b, y, 1280, "classifier.1")
    doc = ("MobileNetV2, width 1.0 (torchvision architecture, 1000 classes) as exported raw: "
           "Conv + BatchNormalization + ReLU6 as Clip(0, 6); 17 inverted residual blocks with "
           "3x3 depthwise convs (group = channels), Add where stride 1 and channels match (10), "
           "1x1 conv to 1280, GlobalAveragePool, Flatten, Gemm (dropout is gone at inference). "
           "Input [batch,3,224,224] with symbolic 'batch'. 3.50 M parameters, 0.30 GMACs per "
           "image. Weights are shapes only.")
    return b.finish("mobilenetv2", doc, [_input("input", _IMAGE_INPUT)],
                    [("logits", y, FLOAT, ["batch", 1000])], "batch=1")


# --------------------------------------------------------------------------- transformer blocks


@dataclass(frozen=True)
class TransformerConfig:
    """One transformer layer's shape and the flavour of its exported graph.

    ``names`` maps a role (q, k, v, qkv, o, ln1, ln2, up, gate, down) to the weight-name
    suffix the framework uses, so weights carry Hugging Face-like names.
    """

    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    activation: str  # "gelu_erf" | "gelu_tanh" | "silu_gated"
    norm: str  # "layernorm" | "layernorm_decomposed" | "rmsnorm"
    pre_norm: bool  # GPT/Llama: norm before each sublayer; BERT: after the residual Add
    bias: bool  # projections have a bias (MatMul + Add)
    fused_qkv: bool  # one [hidden, 3*hidden] projection split three ways (GPT-2 c_attn)
    scale: str  # "div" by sqrt(d) (BERT, GPT-2) or "mul" by 1/sqrt(d) (Llama)
    eps: float
    names: tuple[tuple[str, str], ...]

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def name(self, role: str) -> str:
        return dict(self.names)[role]


BERT_BASE = TransformerConfig(
    hidden=768, heads=12, kv_heads=12, ffn=3072, activation="gelu_erf", norm="layernorm",
    pre_norm=False, bias=True, fused_qkv=False, scale="div", eps=1e-12,
    names=(("q", "attention.self.query"), ("k", "attention.self.key"),
           ("v", "attention.self.value"), ("o", "attention.output.dense"),
           ("ln1", "attention.output.LayerNorm"), ("up", "intermediate.dense"),
           ("down", "output.dense"), ("ln2", "output.LayerNorm")),
)

GPT2_SMALL = TransformerConfig(
    hidden=768, heads=12, kv_heads=12, ffn=3072, activation="gelu_tanh", norm="layernorm",
    pre_norm=True, bias=True, fused_qkv=True, scale="div", eps=1e-5,
    names=(("qkv", "attn.c_attn"), ("o", "attn.c_proj"), ("ln1", "ln_1"), ("ln2", "ln_2"),
           ("up", "mlp.c_fc"), ("down", "mlp.c_proj")),
)

LLAMA3_8B = TransformerConfig(
    hidden=4096, heads=32, kv_heads=8, ffn=14336, activation="silu_gated", norm="rmsnorm",
    pre_norm=True, bias=False, fused_qkv=False, scale="mul", eps=1e-5,
    names=(("q", "self_attn.q_proj"), ("k", "self_attn.k_proj"), ("v", "self_attn.v_proj"),
           ("o", "self_attn.o_proj"), ("ln1", "input_layernorm"),
           ("ln2", "post_attention_layernorm"), ("gate", "mlp.gate_proj"),
           ("up", "mlp.up_proj"), ("down", "mlp.down_proj")),
)


def linear(b: GraphBuilder, x: str, p: str, cin: int, cout: int, bias: bool) -> str:
    """nn.Linear on a 3-D activation as exported: MatMul by the [in, out] weight, Add bias."""
    y = b.op("MatMul", [x, b.param(f"{p}.weight", [cin, cout])], f"{p}.matmul")
    if bias:
        y = b.op("Add", [y, b.param(f"{p}.bias", [cout])], f"{p}.add_bias")
    return y


def norm(b: GraphBuilder, x: str, p: str, cfg: TransformerConfig) -> str:
    """LayerNormalization (opset 17), its decomposed exporter form, or decomposed RMSNorm."""
    h = cfg.hidden
    if cfg.norm == "layernorm":
        return b.op("LayerNormalization",
                    [x, b.param(f"{p}.weight", [h]), b.param(f"{p}.bias", [h])], p,
                    axis=-1, epsilon=cfg.eps)
    eps = b.scalar(cfg.eps)
    if cfg.norm == "layernorm_decomposed":
        mean = b.op("ReduceMean", [x], f"{p}.mean", axes=[-1], keepdims=1)
        d = b.op("Sub", [x, mean], f"{p}.sub")
        var = b.op("ReduceMean", [b.op("Pow", [d, b.scalar(2.0)], f"{p}.pow")], f"{p}.var",
                   axes=[-1], keepdims=1)
        std = b.op("Sqrt", [b.op("Add", [var, eps], f"{p}.add_eps")], f"{p}.sqrt")
        y = b.op("Mul", [b.op("Div", [d, std], f"{p}.div"), b.param(f"{p}.weight", [h])],
                 f"{p}.mul_weight")
        return b.op("Add", [y, b.param(f"{p}.bias", [h])], f"{p}.add_bias")
    if cfg.norm == "rmsnorm":
        ms = b.op("ReduceMean", [b.op("Pow", [x, b.scalar(2.0)], f"{p}.pow")], f"{p}.mean",
                  axes=[-1], keepdims=1)
        rms = b.op("Sqrt", [b.op("Add", [ms, eps], f"{p}.add_eps")], f"{p}.sqrt")
        y = b.op("Div", [x, rms], f"{p}.div")
        return b.op("Mul", [b.param(f"{p}.weight", [h]), y], f"{p}.mul_weight")
    raise ValueError(f"unknown norm {cfg.norm!r}")


def feed_forward(b: GraphBuilder, x: str, p: str, cfg: TransformerConfig) -> str:
    """FFN: Linear up -> activation -> Linear down (SwiGLU: SiLU(gate) * up -> down)."""
    h, f = cfg.hidden, cfg.ffn
    if cfg.activation == "silu_gated":
        g = linear(b, x, f"{p}.{cfg.name('gate')}", h, f, cfg.bias)
        g = b.op("Mul", [g, b.op("Sigmoid", [g], f"{p}.act.sigmoid")], f"{p}.act.silu")
        u = linear(b, x, f"{p}.{cfg.name('up')}", h, f, cfg.bias)
        y = b.op("Mul", [g, u], f"{p}.mlp.gate_mul_up")
    else:
        u = linear(b, x, f"{p}.{cfg.name('up')}", h, f, cfg.bias)
        y = gelu(b, u, f"{p}.act", cfg.activation)
    return linear(b, y, f"{p}.{cfg.name('down')}", f, h, cfg.bias)


def gelu(b: GraphBuilder, x: str, p: str, kind: str) -> str:
    """GELU as exporters write it: exact x*0.5*(1+erf(x/sqrt2)) or GPT-2's tanh form."""
    if kind == "gelu_erf":  # torch.nn.functional.gelu / HF "gelu": Div, Erf, Add, Mul, Mul
        e = b.op("Erf", [b.op("Div", [x, b.scalar(1.4142135381698608)], f"{p}.div")], f"{p}.erf")
        y = b.op("Mul", [x, b.op("Add", [e, b.scalar(1.0)], f"{p}.add")], f"{p}.mul")
        return b.op("Mul", [y, b.scalar(0.5)], f"{p}.mul_half")
    if kind == "gelu_tanh":  # HF "gelu_new": 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))
        half = b.op("Mul", [b.scalar(0.5), x], f"{p}.mul_half")
        cube = b.op("Mul", [b.op("Pow", [x, b.scalar(3.0)], f"{p}.pow"), b.scalar(0.044715)],
                    f"{p}.mul_coeff")
        inner = b.op("Mul", [b.op("Add", [x, cube], f"{p}.add"),
                             b.scalar(0.7978845608028654)], f"{p}.mul_sqrt_2_pi")
        t = b.op("Add", [b.op("Tanh", [inner], f"{p}.tanh"), b.scalar(1.0)], f"{p}.add_one")
        return b.op("Mul", [half, t], f"{p}.mul")
    raise ValueError(f"unknown activation {kind!r}")


def rope(b: GraphBuilder, x: str, p: str, cos: str, sin: str, head_dim: int) -> str:
    """Rotary embedding x*cos + rotate_half(x)*sin on [batch, heads, seq, head_dim].

    rotate_half(x) = cat(-x2, x1); the sign is folded into the precomputed ``sin`` input
    (sin' = cat(-sin[:, :d/2], sin[:, d/2:])), so no Neg node is needed: Slice, Slice,
    Concat, Mul, Mul, Add.
    """
    half = head_dim // 2
    axis = b.ints(-1)
    x1 = b.op("Slice", [x, b.ints(0), b.ints(half), axis], f"{p}.slice_lo")
    x2 = b.op("Slice", [x, b.ints(half), b.ints(SLICE_END), axis], f"{p}.slice_hi")
    rot = b.op("Concat", [x2, x1], f"{p}.rotate_half", axis=-1)
    return b.op("Add", [b.op("Mul", [x, cos], f"{p}.mul_cos"),
                        b.op("Mul", [rot, sin], f"{p}.mul_sin")], f"{p}.add")


def attention(b: GraphBuilder, x: str, p: str, cfg: TransformerConfig, mask: str | None = None,
              mask_kind: str = "add", rope_cs: tuple[str, str] | None = None,
              past: tuple[str, str] | None = None, cache: bool = False):
    """Multi-head / grouped-query self-attention; returns (output, key, value).

    ``mask``: an additive mask (``mask_kind="add"``, broadcast onto the scores) or a boolean
    keep-mask for Where (``"where"``). ``rope_cs``: (cos, sin) inputs of shape [seq, head_dim].
    ``past``: past key/value [batch, kv_heads, past, head_dim], concatenated with the new ones.
    With ``cache`` (or ``past``) the key and value [batch, kv_heads, total, head_dim] are the
    layer's present tensors; otherwise they are None.
    """
    h, hd, nh, nkv = cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads
    if cfg.fused_qkv:
        qkv = linear(b, x, f"{p}.{cfg.name('qkv')}", h, 3 * h, cfg.bias)
        q, k, v = b.op("Split", [qkv, b.ints(h, h, h)], f"{p}.{cfg.name('qkv')}.split",
                       outputs=3, axis=2)
    else:
        q = linear(b, x, f"{p}.{cfg.name('q')}", h, nh * hd, cfg.bias)
        k = linear(b, x, f"{p}.{cfg.name('k')}", h, nkv * hd, cfg.bias)
        v = linear(b, x, f"{p}.{cfg.name('v')}", h, nkv * hd, cfg.bias)
    a = f"{p}.attn"
    cache = cache or past is not None
    direct_kt = not cache and rope_cs is None  # BERT: one Transpose straight to [b, h, d, s]

    def heads(t: str, n: int, role: str, perm: list[int]) -> str:
        t = b.op("Reshape", [t, b.ints(0, 0, n, hd)], f"{a}.{role}.split_heads")
        return b.op("Transpose", [t], f"{a}.{role}.transpose", perm=perm)

    q = heads(q, nh, "q", [0, 2, 1, 3])
    k = heads(k, nkv, "k", [0, 2, 3, 1] if direct_kt else [0, 2, 1, 3])
    v = heads(v, nkv, "v", [0, 2, 1, 3])
    if rope_cs is not None:
        q = rope(b, q, f"{a}.q.rope", *rope_cs, hd)
        k = rope(b, k, f"{a}.k.rope", *rope_cs, hd)
    if past is not None:
        k = b.op("Concat", [past[0], k], f"{a}.k.concat_past", axis=2)
        v = b.op("Concat", [past[1], v], f"{a}.v.concat_past", axis=2)
    present = (k, v) if cache else (None, None)
    if nkv != nh:  # GQA repeat_kv: Unsqueeze, Expand, Reshape [b, kv, t, d] -> [b, h, t, d]
        rep = nh // nkv

        def repeat(t: str, role: str) -> str:
            t = b.op("Unsqueeze", [t, b.ints(2)], f"{a}.{role}.repeat.unsqueeze")
            t = b.op("Expand", [t, b.ints(1, 1, rep, 1, 1)], f"{a}.{role}.repeat.expand")
            return b.op("Reshape", [t, b.ints(0, nh, -1, hd)], f"{a}.{role}.repeat.reshape")

        k, v = repeat(k, "k"), repeat(v, "v")
    if not direct_kt:
        k = b.op("Transpose", [k], f"{a}.k.transpose_last", perm=[0, 1, 3, 2])
    s = b.op("MatMul", [q, k], f"{a}.scores")
    if cfg.scale == "div":
        s = b.op("Div", [s, b.scalar(float(hd) ** 0.5)], f"{a}.scale")
    else:
        s = b.op("Mul", [s, b.scalar(float(hd) ** -0.5)], f"{a}.scale")
    if mask is not None:
        if mask_kind == "add":
            s = b.op("Add", [s, mask], f"{a}.mask")
        else:
            s = b.op("Where", [mask, s, b.scalar(FLOAT_MIN)], f"{a}.mask")
    s = b.op("Softmax", [s], f"{a}.softmax", axis=-1)
    y = b.op("MatMul", [s, v], f"{a}.context")
    y = b.op("Transpose", [y], f"{a}.context.transpose", perm=[0, 2, 1, 3])
    y = b.op("Reshape", [y, b.ints(0, 0, nh * hd)], f"{a}.context.merge_heads")
    return linear(b, y, f"{p}.{cfg.name('o')}", nh * hd, h, cfg.bias), present[0], present[1]


def transformer_layer(b: GraphBuilder, x: str, p: str, cfg: TransformerConfig, **attn_kwargs):
    """One encoder/decoder layer (post-norm BERT or pre-norm GPT/Llama); returns (out, k, v).

    ``attn_kwargs`` go to :func:`attention` (mask, mask_kind, rope_cs, past, cache).
    """
    if cfg.pre_norm:
        a, k, v = attention(b, norm(b, x, f"{p}.{cfg.name('ln1')}", cfg), p, cfg, **attn_kwargs)
        x = b.op("Add", [x, a], f"{p}.residual1")
        f = feed_forward(b, norm(b, x, f"{p}.{cfg.name('ln2')}", cfg), p, cfg)
        return b.op("Add", [x, f], f"{p}.residual2"), k, v
    a, k, v = attention(b, x, p, cfg, **attn_kwargs)
    x = norm(b, b.op("Add", [a, x], f"{p}.residual1"), f"{p}.{cfg.name('ln1')}", cfg)
    f = feed_forward(b, x, p, cfg)
    return norm(b, b.op("Add", [f, x], f"{p}.residual2"), f"{p}.{cfg.name('ln2')}", cfg), k, v


# --------------------------------------------------------------------------- BERT


def bert_base_layer(decomposed_layernorm: bool = False) -> ModelProto:
    """One BERT-base encoder layer; the flag writes LayerNorm in its decomposed form."""
    name = "bert_base_layer_decomp" if decomposed_layernorm else "bert_base_layer"
    cfg = replace(BERT_BASE, norm="layernorm_decomposed") if decomposed_layernorm else BERT_BASE
    b = GraphBuilder(name)
    y, _, _ = transformer_layer(b, "hidden_states", "encoder.layer.0", cfg, mask="attention_mask")
    ln = ("LayerNorm decomposed as exporters before opset 17 write it (ReduceMean, Sub, Pow, "
          "ReduceMean, Add eps, Sqrt, Div, Mul weight, Add bias)" if decomposed_layernorm
          else "LayerNormalization (opset 17)")
    doc = (f"One BERT-base encoder layer (hidden 768, 12 heads of 64, FFN 3072), exported raw: "
           f"Q/K/V/output projections as MatMul + Add bias, Reshape/Transpose into heads, "
           f"MatMul, Div by sqrt(64), Add of the extended attention mask, Softmax, MatMul, "
           f"residual Add, {ln}, exact GELU (Div, Erf, Add, Mul, Mul). Inputs hidden_states "
           f"[batch,seq,768] and the additive extended mask attention_mask [batch,1,1,seq] "
           f"(what BertLayer receives); symbolic 'batch' and 'seq'. 7.09 M parameters. "
           f"Weights are shapes only.")
    inputs = [_input("hidden_states", ["batch", "seq", 768]),
              _input("attention_mask", ["batch", 1, 1, "seq"])]
    return b.finish(name, doc, inputs, [("output", y, FLOAT, ["batch", "seq", 768])],
                    "batch=1,seq=128")


def bert_base_layer_decomp() -> ModelProto:
    return bert_base_layer(decomposed_layernorm=True)


def bert_base(layers: int = 12, pooler: bool = True) -> ModelProto:
    cfg, h = BERT_BASE, BERT_BASE.hidden
    b = GraphBuilder("bert_base")
    e = "embeddings"
    words = b.op("Gather", [b.param(f"{e}.word_embeddings.weight", [30522, h]), "input_ids"],
                 f"{e}.word_embeddings", axis=0)
    types = b.op("Gather", [b.param(f"{e}.token_type_embeddings.weight", [2, h]),
                            "token_type_ids"], f"{e}.token_type_embeddings", axis=0)
    pos = b.op("Gather", [b.param(f"{e}.position_embeddings.weight", [512, h]), "position_ids"],
               f"{e}.position_embeddings", axis=0)
    y = b.op("Add", [b.op("Add", [words, types], f"{e}.add_token_type"), pos],
             f"{e}.add_position")
    y = norm(b, y, f"{e}.LayerNorm", cfg)
    # extended attention mask: (1 - mask[:, None, None, :]) * finfo.min, added to the scores
    m = b.op("Unsqueeze", ["attention_mask", b.ints(1, 2)], "extended_mask.unsqueeze")
    m = b.op("Cast", [m], "extended_mask.cast", to=FLOAT)
    m = b.op("Sub", [b.scalar(1.0), m], "extended_mask.invert")
    m = b.op("Mul", [m, b.scalar(FLOAT_MIN)], "extended_mask.scale")
    for i in range(layers):
        y, _, _ = transformer_layer(b, y, f"encoder.layer.{i}", cfg, mask=m)
    outputs = [("last_hidden_state", y, FLOAT, ["batch", "seq", h])]
    if pooler:
        first = b.op("Gather", [y, b.const([0], INT64, [])], "pooler.first_token", axis=1)
        pooled = b.op("Gemm", [first, b.param("pooler.dense.weight", [h, h]),
                               b.param("pooler.dense.bias", [h])], "pooler.dense",
                      alpha=1.0, beta=1.0, transB=1)
        outputs.append(("pooler_output", b.op("Tanh", [pooled], "pooler.tanh"), FLOAT,
                        ["batch", h]))
    doc = (f"BERT-base (uncased vocabulary 30522, hidden 768, 12 heads, FFN 3072): embeddings "
           f"(Gather from word [30522,768], token-type [2,768] and position [512,768] tables, "
           f"Add, LayerNormalization), extended attention mask (Unsqueeze, Cast, Sub, Mul), "
           f"{layers} encoder layers exported raw (MatMul + Add bias, Reshape/Transpose heads, "
           f"Div by sqrt(64), Add mask, Softmax, exact Erf GELU, LayerNormalization)"
           f"{' and the pooler (Gather of token 0, Gemm, Tanh)' if pooler else ''}. "
           f"Inputs input_ids, token_type_ids, position_ids and attention_mask, all int64 "
           f"[batch,seq] with symbolic 'batch' and 'seq' (position_ids is an input rather than "
           f"a Shape/Slice chain on a buffer). 109.48 M parameters. Weights are shapes only.")
    ids = ["batch", "seq"]
    inputs = [_input(n, ids, INT64)
              for n in ("input_ids", "token_type_ids", "position_ids", "attention_mask")]
    return b.finish("bert_base", doc, inputs, outputs, "batch=1,seq=128")


# --------------------------------------------------------------------------- GPT-2


def _gpt2(decode: bool, layers: int = 12) -> ModelProto:
    cfg, h, hd, nh = GPT2_SMALL, GPT2_SMALL.hidden, GPT2_SMALL.head_dim, GPT2_SMALL.heads
    name = "gpt2_decode" if decode else "gpt2_prompt"
    b = GraphBuilder(name)
    seq = 1 if decode else "seq"
    total = "past + 1" if decode else "seq"
    words = b.op("Gather", [b.param("transformer.wte.weight", [50257, h]), "input_ids"],
                 "transformer.wte", axis=0)
    pos = b.op("Gather", [b.param("transformer.wpe.weight", [1024, h]), "position_ids"],
               "transformer.wpe", axis=0)
    y = b.op("Add", [words, pos], "transformer.add_position")
    inputs = [_input("input_ids", ["batch", seq], INT64),
              _input("position_ids", ["batch", seq], INT64)]
    if not decode:
        inputs.append(_input("causal_mask", [1, 1, "seq", "seq"], BOOL))
    outputs = []
    for i in range(layers):
        kw = dict(cache=True)
        if decode:
            past = (f"past_key_values.{i}.key", f"past_key_values.{i}.value")
            inputs += [_input(t, ["batch", nh, "past", hd]) for t in past]
            kw["past"] = past
        else:
            kw.update(mask="causal_mask", mask_kind="where")
        y, k, v = transformer_layer(b, y, f"transformer.h.{i}", cfg, **kw)
        outputs += [(f"present.{i}.key", k, FLOAT, ["batch", nh, total, hd]),
                    (f"present.{i}.value", v, FLOAT, ["batch", nh, total, hd])]
    y = norm(b, y, "transformer.ln_f", cfg)
    logits = b.op("MatMul", [y, b.param("lm_head.weight", [h, 50257])], "lm_head")
    outputs.insert(0, ("logits", logits, FLOAT, ["batch", seq, 50257]))
    if decode:
        phase = ("One generation step with a KV cache: input_ids and position_ids [batch,1], "
                 "past_key_values.{i}.key/value [batch,12,past,64] per layer with symbolic "
                 "'past'; the new K/V are Concat'ed after the past ones and attention runs "
                 "over past+1 positions (no mask needed for a single query). Outputs logits "
                 "[batch,1,50257] and present.{i}.key/value [batch,12,past+1,64].")
        dims = "batch=1,past=127"
    else:
        phase = ("Prompt phase: input_ids and position_ids int64 [batch,seq]; causal "
                 "attention as HF writes it, Where(causal_mask, scores, finfo.min), with the "
                 "sliced bias buffer given as the bool input causal_mask [1,1,seq,seq] instead "
                 "of a Shape/Slice chain. Outputs logits [batch,seq,50257] and "
                 "present.{i}.key/value [batch,12,seq,64] per layer.")
        dims = "batch=1,seq=128"
    doc = (f"GPT-2 small ({layers} layers, hidden 768, 12 heads of 64, FFN 3072, vocabulary "
           f"50257, context 1024) exported raw. {phase} Each layer: LayerNormalization, c_attn "
           f"MatMul + Add bias -> Split into Q/K/V, Reshape/Transpose heads, MatMul, Div by "
           f"sqrt(64), Softmax, MatMul, c_proj, residual Add, LayerNormalization, c_fc, GPT-2's "
           f"tanh GELU ('gelu_new': Mul, Pow, Mul, Add, Mul, Tanh, Add, Mul), c_proj, residual "
           f"Add; then ln_f and the lm_head MatMul. Embeddings Gather from wte [50257,768] and "
           f"wpe [1024,768]. 124.44 M parameters; lm_head.weight [768,50257] is tied to wte in "
           f"GPT-2 but stored as its own (transposed) initializer, as exporters write it, so "
           f"the file lists 163.04 M. Weights are shapes only.")
    return b.finish(name, doc, inputs, outputs, dims)


def gpt2_prompt() -> ModelProto:
    return _gpt2(decode=False)


def gpt2_decode() -> ModelProto:
    return _gpt2(decode=True)


# --------------------------------------------------------------------------- Llama 3


def llama3_8b_layers(decode: bool, layers: int = 1) -> ModelProto:
    """``layers`` Llama-3-8B decoder layers, prompt phase or one decode step."""
    cfg, h, hd, nkv = LLAMA3_8B, LLAMA3_8B.hidden, LLAMA3_8B.head_dim, LLAMA3_8B.kv_heads
    name = "llama3_8b_layer_decode" if decode else "llama3_8b_layer"
    if layers != 1:
        name = f"llama3_8b_{layers}layers" + ("_decode" if decode else "")
    b = GraphBuilder(name)
    seq = 1 if decode else "seq"
    total = "past + 1" if decode else "seq"
    inputs = [_input("hidden_states", ["batch", seq, h]), _input("cos", [seq, hd]),
              _input("sin", [seq, hd])]
    if not decode:
        inputs.append(_input("attention_mask", ["batch", 1, "seq", "seq"]))
    outputs, y = [], "hidden_states"
    for i in range(layers):
        kw = dict(cache=True, rope_cs=("cos", "sin"))
        if decode:
            past = (f"past_key_values.{i}.key", f"past_key_values.{i}.value")
            inputs += [_input(t, ["batch", nkv, "past", hd]) for t in past]
            kw["past"] = past
        else:
            kw["mask"] = "attention_mask"
        y, k, v = transformer_layer(b, y, f"model.layers.{i}", cfg, **kw)
        outputs += [(f"present.{i}.key", k, FLOAT, ["batch", nkv, total, hd]),
                    (f"present.{i}.value", v, FLOAT, ["batch", nkv, total, hd])]
    outputs.insert(0, ("output", y, FLOAT, ["batch", seq, h]))
    if decode:
        phase = ("One decode step: hidden_states [batch,1,4096], cos/sin [1,128], "
                 "past_key_values.{i}.key/value [batch,8,past,128] with symbolic 'past'; "
                 "new K/V Concat'ed after the past, attention over past+1 positions, no mask; "
                 "present.{i}.key/value [batch,8,past+1,128].")
        dims = "batch=1,past=127"
    else:
        phase = ("Prompt phase: hidden_states [batch,seq,4096], cos/sin [seq,128], additive "
                 "causal attention_mask [batch,1,seq,seq] (as the HF layer receives it); "
                 "present.{i}.key/value [batch,8,seq,128].")
        dims = "batch=1,seq=128"
    doc = (f"{layers} Llama-3-8B decoder layer(s) (hidden 4096, 32 query heads and 8 KV heads "
           f"of 128 (GQA: K/V projections 4096->1024), FFN 14336 SwiGLU, RMSNorm eps 1e-5, no "
           f"biases), exported raw. {phase} Each layer: RMSNorm decomposed (Pow, ReduceMean, "
           f"Add eps, Sqrt, Div, Mul weight), q/k/v_proj MatMul, Reshape/Transpose heads, "
           f"rotary embedding on Q and K as x*cos + rotate_half(x)*sin (Slice, Slice, Concat, "
           f"Mul, Mul, Add) with the cos/sin tables [seq,128] precomputed and passed as inputs "
           f"and the sign of rotate_half folded into sin (no Neg), repeat_kv for GQA (Unsqueeze, "
           f"Expand, Reshape of K and V to 32 heads), MatMul, Mul by 1/sqrt(128), Softmax, "
           f"MatMul, o_proj, residual Add, RMSNorm, gate/up_proj, SiLU as Sigmoid * x, gate * "
           f"up, down_proj, residual Add. 218.11 M parameters per layer. Weights are shapes "
           f"only; embeddings, final norm and lm_head are not included.")
    return b.finish(name, doc, inputs, outputs, dims)


def llama3_8b_layer() -> ModelProto:
    return llama3_8b_layers(decode=False)


def llama3_8b_layer_decode() -> ModelProto:
    return llama3_8b_layers(decode=True)


MODELS = {
    "tiny_cnn": tiny_cnn,
    "mlp": mlp,
    "matmul_512x768x768": matmul_512x768x768,
    "matmul_1024": matmul_1024,
    "conv_resnet18_layer1": conv_resnet18_layer1,
    "bert_ffn": bert_ffn,
    "resnet18": resnet18,
    "resnet50": resnet50,
    "mobilenetv2": mobilenetv2,
    "bert_base_layer": bert_base_layer,
    "bert_base_layer_decomp": bert_base_layer_decomp,
    "bert_base": bert_base,
    "gpt2_prompt": gpt2_prompt,
    "gpt2_decode": gpt2_decode,
    "llama3_8b_layer": llama3_8b_layer,
    "llama3_8b_layer_decode": llama3_8b_layer_decode,
}


def build_all(out_dir: str | Path) -> list[Path]:
    """Write every bundled model into ``out_dir``; returns the written paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in MODELS.items():
        path = out / f"{name}.onnx"
        path.write_bytes(build().SerializeToString(deterministic=True))
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent),
                        help="folder to write the .onnx files into (default: models/)")
    args = parser.parse_args()
    for path in build_all(args.out):
        print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
