"""Export the model zoo: real framework exports of real architectures, stored graph-only.

Run ``pip install -e '.[zoo]' && python models/export_zoo.py`` to rebuild
``tests/data/zoo/`` (``--only NAME`` for some models, ``--out DIR`` to write elsewhere,
``--bench`` for the two large loader-benchmark graphs as well). Nothing is downloaded:
every model is built from its configuration with random weights (only shapes matter).

Each model is written the ways a user gets an ONNX file:

- ``-ts``: ``torch.onnx.export(..., dynamo=False)`` (the TorchScript exporter, what Optimum
  and most tutorials use), with ``dynamic_axes`` named as Optimum names them
  (``batch_size``, ``sequence_length``, ``past_sequence_length``,
  ``past_sequence_length + sequence_length``; ``height``, ``width`` for images);
- ``-dynamo``: ``torch.onnx.export(..., dynamo=True)`` with ``torch.export.Dim`` of the
  same names (the attention mask of a decoder with a KV cache gets its own
  ``total_sequence_length``);
- ``-ort`` after either: ONNX Runtime's offline optimizer as ONNXim users run it, the
  transformer optimizer (``onnxruntime.transformers.optimizer.optimize_model`` with the
  model type) for transformers, the graph optimizer at ``ORT_ENABLE_EXTENDED`` for CNNs;
- ``-tf2onnx``: a Keras model converted by tf2onnx (``models/zoo_keras.py``, run in an
  environment with TensorFlow and tf2onnx but no torch).

Files are graph-only: every weight initializer keeps its name, dims and dtype but its data
points at an external file ``<name>.weights.bin`` that is never written (small integer and
scalar tensors that drive shapes stay inline), so the whole zoo is a few MB.

``manifest.json`` beside the files gives, per file, the model, exporter, optimizer, the dims
to bind for a test run and the MACs for those dims, computed by formula from the
architecture (functions ``*_macs`` below) and checked here against an independent count:
torch's ``FlopCounterMode`` over the same forward pass (FLOPs / 2; attention runs on the
math backend so its matmuls are seen). A MAC is one multiply-accumulate of a matrix product
or convolution: every MatMul/Gemm/Conv, including the attention score (Q.K^T) and context
(P.V) products, the LM head of causal language models, depthwise and 1x1 convolutions,
squeeze-excitation FCs; nothing element-wise (norms, softmax, activations, pooling, resize)
counts. That is what npusim reports as
``macs`` per layer.

Transformers keep their real widths (BERT-base, GPT-2 small, T5-small, ViT-B/16) with
``LAYERS`` layers instead of all of them, so each file simulates in about a second on the
small presets; the layers repeat, so two show every pattern a loader must handle. The
``--bench`` graphs are full depth (12-layer BERT-base, 32-layer Llama-3-8B).

The entries after the first twelve (``AUDIT_ENTRIES``) come from the framework-export audit
(``models/zoo_audit.py``, ``results/validation/framework_exports.md``): the exports that
exposed a bug (DeepLab's atrous convolutions, LSTM and GRU) and a few families the others
lack (BART's encoder-decoder, Whisper's Conv1d encoder, Qwen2's biased GQA decoder). Their
builders live in ``models/zoo_families.py``; where a formula would be long (DeepLab, BART,
Whisper, Qwen2), the manifest's MACs are torch's count, labelled ``macs_source``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
ZOO_DIR = ROOT / "tests" / "data" / "zoo"
LAYERS = 2  # transformer layers kept per model (widths are the real ones)

# Initializers that stay inline: integer/bool tensors up to this many elements (shape
# constants, position ids) and any tensor up to SMALL elements (scalars, eps, scales).
KEEP_INT_MAX = 1 << 16
SMALL = 16
# element types stored packed, several per byte: bits per element (INT4, UINT4, FLOAT4E2M1,
# UINT2, INT2): an external tensor's length is its packed size, as ONNX Runtime checks
PACKED_BITS = {TensorProto.UINT4: 4, TensorProto.INT4: 4, TensorProto.FLOAT4E2M1: 4,
               TensorProto.UINT2: 2, TensorProto.INT2: 2}

MAC_RULE = ("multiply-accumulates of every matrix product and convolution (MatMul, Gemm, "
            "Conv, grouped and depthwise too), including attention scores Q.K^T and context "
            "P.V and the LM head of causal LMs; "
            "nothing element-wise (norms, softmax, activations, pooling, resize, gathers)")


# --------------------------------------------------------------------------- graph-only files


def graph_only(model: onnx.ModelProto, name: str, drop=frozenset()) -> onnx.ModelProto:
    """Drop weight data: big initializers point at an external file that is never written.

    Large constants some exporters leave as ``Constant`` nodes become initializers first
    (the same graph), so they are dropped as well; so are the initializers named in
    ``drop`` (quantized weights, which are small integer tensors) of more than SMALL
    elements."""
    g = model.graph
    keep_nodes = []
    for node in g.node:
        if (node.op_type == "Constant" and node.domain in ("", "ai.onnx")
                and len(node.attribute) == 1 and node.attribute[0].name == "value"):
            t = node.attribute[0].t
            if _drop(t):
                init = TensorProto()
                init.CopyFrom(t)
                init.name = node.output[0]
                g.initializer.append(init)
                continue
        keep_nodes.append(node)
    if len(keep_nodes) != len(g.node):
        del g.node[:]
        g.node.extend(keep_nodes)
    offset = 0
    location = f"{name}.weights.bin"
    for t in g.initializer:
        if t.data_location == TensorProto.EXTERNAL or _drop(t) or (
                t.name in drop and math.prod(t.dims) > SMALL):
            n = math.prod(t.dims)
            if t.data_type in PACKED_BITS:
                nbytes = -(-n * PACKED_BITS[t.data_type] // 8)
            else:
                nbytes = n * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
            dims, dtype, tname = list(t.dims), t.data_type, t.name
            t.Clear()
            t.name, t.data_type = tname, dtype
            t.dims.extend(dims)
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", location), ("offset", str(offset)), ("length", str(nbytes))):
                e = t.external_data.add()
                e.key, e.value = k, v
            offset += (nbytes + 63) // 64 * 64
    return model


def _drop(t: TensorProto) -> bool:
    n = math.prod(t.dims)
    if n <= SMALL:
        return False
    integer = t.data_type in (TensorProto.INT64, TensorProto.INT32, TensorProto.INT8,
                              TensorProto.UINT8, TensorProto.BOOL, TensorProto.INT16)
    return not integer or n > KEEP_INT_MAX


def weights_as_initializers(model: onnx.ModelProto, weight_names: set[str]) -> onnx.ModelProto:
    """Turn graph inputs that are weights (a model saved without initializers) back into
    initializers with dims and dtype (their data is dropped by :func:`graph_only`)."""
    g = model.graph
    keep = []
    for vi in g.input:
        if vi.name not in weight_names:
            keep.append(vi)
            continue
        tt = vi.type.tensor_type
        t = TensorProto()
        t.name, t.data_type = vi.name, tt.elem_type
        t.dims.extend(d.dim_value for d in tt.shape.dim)
        t.data_location = TensorProto.EXTERNAL
        g.initializer.append(t)
    del g.input[:]
    g.input.extend(keep)
    return model


# --------------------------------------------------------------------------- the zoo's entries


@dataclass
class Entry:
    """One model of the zoo and how to export it."""

    name: str
    description: str
    build: Callable[[], "Built"]
    # analytic MACs for bound dims; None: torch's count is the manifest's (no formula)
    macs: Callable[[dict], int] | None
    dims: dict  # dims to bind for a test run
    ort: str | None  # transformer optimizer model type; None: ORT's graph optimizer (CNNs)
    variants: tuple[str, ...] = ("ts", "dynamo", "ts-ort", "dynamo-ort")
    heads: int = 0
    hidden: int = 0
    torch_misses: str = ""  # why torch's count falls short of the formula (not checked then)


@dataclass
class Built:
    module: object
    args: tuple  # example inputs, in input order
    inputs: list[str]
    outputs: list[str]
    in_axes: dict  # input name -> {axis: dim name}
    out_axes: dict
    test_args: Callable[[dict], tuple]  # inputs at the manifest's dims (for the MAC check)
    grouped_args: tuple | None = None  # structure for dynamo's dynamic_shapes (varargs)


def _hf_silence():
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore")
    _torchvision_importable()


_TORCHVISION_OPS = None


def _torchvision_importable() -> None:
    """PyPI's torchvision wheel carries C ops built for CUDA torch; with the CPU torch they
    do not load, and ``import torchvision`` (which transformers does when it is installed)
    then fails registering fake kernels for ``nms`` and ``qnms``. Their schemas are defined
    first (no model here calls them), so the pure-Python model definitions import."""
    global _TORCHVISION_OPS
    import importlib.util

    spec = importlib.util.find_spec("torchvision")
    if _TORCHVISION_OPS is not None or spec is None:
        return
    import torch

    for lib in Path(spec.origin).parent.glob("_C*.so"):
        try:
            torch.ops.load_library(str(lib))
            return  # its ops load: nothing to do
        except OSError:
            pass
    _TORCHVISION_OPS = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        _TORCHVISION_OPS.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) "
                                "-> Tensor")


# ----- BERT


BERT = dict(hidden=768, heads=12, inter=3072, vocab=30522)


def bert_macs(d: dict, layers: int = LAYERS, h: int = BERT["hidden"],
              i: int = BERT["inter"]) -> int:
    """Per layer 4*S*h^2 (Q, K, V, output) + 2*S^2*h (scores, context) + 2*S*h*i (FFN);
    the pooler h^2 on the first token; times the batch."""
    B, S = d["batch_size"], d["sequence_length"]
    return B * (layers * (4 * S * h * h + 2 * S * S * h + 2 * S * h * i) + h * h)


def build_bert(attn: str = "sdpa", layers: int = LAYERS) -> Built:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    bert = BertModel(BertConfig(num_hidden_layers=layers, attn_implementation=attn)).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            o = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids)
            return o.last_hidden_state, o.pooler_output

    def args(B, S):
        return (torch.randint(0, 1000, (B, S)), torch.ones(B, S, dtype=torch.long),
                torch.zeros(B, S, dtype=torch.long))

    names = ["input_ids", "attention_mask", "token_type_ids"]
    bs = {0: "batch_size", 1: "sequence_length"}
    return Built(Encoder().eval(), args(2, 16), names, ["last_hidden_state", "pooler_output"],
                 {n: bs for n in names},
                 {"last_hidden_state": bs, "pooler_output": {0: "batch_size"}},
                 lambda d: args(d["batch_size"], d["sequence_length"]))


# ----- decoders with a KV cache (GPT-2, Llama)


def _decoder_with_past(lm, layers: int, kv_heads: int, head_dim: int, position_ids: bool) -> Built:
    """A causal LM as Optimum's decoder-with-past: input ids, attention mask over past + new
    tokens, (position ids,) one key and one value per layer; logits and the present cache."""
    import torch
    from transformers import DynamicCache

    class DecoderWithPast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, attention_mask, *rest):
            pos = rest[0] if position_ids else None
            past = rest[1:] if position_ids else rest
            cache = DynamicCache()
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            o = self.lm(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos,
                        past_key_values=cache, use_cache=True)
            outs = [o.logits]
            for layer in o.past_key_values.layers[:layers]:
                outs += [layer.keys, layer.values]
            return tuple(outs)

    def args(B, S, P):
        a = [torch.randint(0, 1000, (B, S)), torch.ones(B, P + S, dtype=torch.long)]
        if position_ids:
            a.append(torch.arange(P, P + S).unsqueeze(0).expand(B, S).contiguous())
        return tuple(a) + tuple(torch.randn(B, kv_heads, P, head_dim) for _ in range(2 * layers))

    kv = [f"past_key_values.{i}.{w}" for i in range(layers) for w in ("key", "value")]
    inputs = ["input_ids", "attention_mask"] + (["position_ids"] if position_ids else []) + kv
    outputs = ["logits"] + [f"present.{i}.{w}" for i in range(layers) for w in ("key", "value")]
    bs = {0: "batch_size", 1: "sequence_length"}
    total = "past_sequence_length + sequence_length"
    in_axes = {"input_ids": bs, "attention_mask": {0: "batch_size", 1: total}}
    if position_ids:
        in_axes["position_ids"] = bs
    in_axes |= {n: {0: "batch_size", 2: "past_sequence_length"} for n in kv}
    out_axes = {"logits": bs} | {n: {0: "batch_size", 2: total} for n in outputs[1:]}
    return Built(DecoderWithPast().eval(), args(2, 5, 7), inputs, outputs, in_axes, out_axes,
                 lambda d: args(d["batch_size"], d["sequence_length"], d["past_sequence_length"]),
                 grouped_args=(2,))


GPT2 = dict(hidden=768, heads=12, vocab=50257)


def gpt2_macs(d: dict, layers: int = LAYERS) -> int:
    """Per layer 12*S*h^2 (QKV 3h^2, output h^2, MLP 8h^2 per token) + 2*S*L*h (scores and
    context over L = past + S keys); the LM head S*h*V; times the batch."""
    h, V = GPT2["hidden"], GPT2["vocab"]
    B, S, P = d["batch_size"], d["sequence_length"], d["past_sequence_length"]
    L = P + S
    return B * (layers * (12 * S * h * h + 2 * S * L * h) + S * h * V)


def build_gpt2(attn: str = "sdpa") -> Built:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    lm = GPT2LMHeadModel(GPT2Config(n_layer=LAYERS, attn_implementation=attn)).eval()
    return _decoder_with_past(lm, LAYERS, GPT2["heads"], GPT2["hidden"] // GPT2["heads"], False)


# a small Llama: the architecture of Llama 3 (RMSNorm, rotary, GQA 4:1, SwiGLU) at toy width
LLAMA = dict(hidden=256, inter=688, heads=8, kv_heads=2, vocab=32000, layers=LAYERS)
LLAMA3_8B = dict(hidden=4096, inter=14336, heads=32, kv_heads=8, vocab=128256, layers=32)


def llama_macs(d: dict, c: dict = LLAMA) -> int:
    """Per layer: Q and output projections 2*S*h^2, K and V 2*S*h*(Nkv*dh), scores and
    context 2*N*S*L*dh, SwiGLU MLP 3*S*h*i; the LM head S*h*V; times the batch. (The
    rotary frequencies are an element-wise product of positions and inverse frequencies
    in transformers 5, not a MatMul as in 4.x.)"""
    h, i, N, Nkv, V = c["hidden"], c["inter"], c["heads"], c["kv_heads"], c["vocab"]
    dh = h // N
    B, S, P = d["batch_size"], d["sequence_length"], d["past_sequence_length"]
    L = P + S
    per_layer = 2 * S * h * h + 2 * S * h * Nkv * dh + 2 * N * S * L * dh + 3 * S * h * i
    return B * (c["layers"] * per_layer + S * h * V)


def _llama_config(c: dict, attn: str):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=c["hidden"], intermediate_size=c["inter"],
                       num_attention_heads=c["heads"], num_key_value_heads=c["kv_heads"],
                       num_hidden_layers=c["layers"], vocab_size=c["vocab"],
                       max_position_embeddings=8192, rope_theta=500000.0,
                       attn_implementation=attn)


def build_llama(attn: str) -> Built:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    lm = LlamaForCausalLM(_llama_config(LLAMA, attn)).eval()
    return _decoder_with_past(lm, LLAMA["layers"], LLAMA["kv_heads"],
                              LLAMA["hidden"] // LLAMA["heads"], True)


# ----- ViT and the T5 encoder

VIT = dict(hidden=768, heads=12, inter=3072, patch=16, image=64)


def vit_macs(d: dict) -> int:
    """Patch embedding (a 16x16 stride-16 conv) T'*h*3*p^2 over T' = (image/p)^2 patches,
    then BERT's layer formula over T = T' + 1 tokens (CLS), and the pooler h^2."""
    h, p, img = VIT["hidden"], VIT["patch"], VIT["image"]
    T1 = (img // p) ** 2
    T = T1 + 1
    per_layer = 4 * T * h * h + 2 * T * T * h + 2 * T * h * VIT["inter"]
    return d["batch_size"] * (T1 * h * 3 * p * p + LAYERS * per_layer + h * h)


def build_vit() -> Built:
    import torch
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    vit = ViTModel(ViTConfig(num_hidden_layers=LAYERS, image_size=VIT["image"],
                             patch_size=VIT["patch"])).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.vit = vit

        def forward(self, pixel_values):
            o = self.vit(pixel_values=pixel_values)
            return o.last_hidden_state, o.pooler_output

    def args(B):
        return (torch.randn(B, 3, VIT["image"], VIT["image"]),)

    return Built(Encoder().eval(), args(2), ["pixel_values"],
                 ["last_hidden_state", "pooler_output"],
                 {"pixel_values": {0: "batch_size"}},
                 {"last_hidden_state": {0: "batch_size"}, "pooler_output": {0: "batch_size"}},
                 lambda d: args(d["batch_size"]))


T5 = dict(d_model=512, d_ff=2048, heads=8, d_kv=64, vocab=32128)  # T5-small


def t5_encoder_macs(d: dict) -> int:
    """Per layer 4*S*d*(N*dkv) (Q, K, V, output), 2*N*S^2*dkv (scores, context) and
    2*S*d*dff (ReLU FFN); the relative position bias is a gather (no MACs)."""
    B, S = d["batch_size"], d["sequence_length"]
    inner = T5["heads"] * T5["d_kv"]
    per_layer = (4 * S * T5["d_model"] * inner + 2 * T5["heads"] * S * S * T5["d_kv"]
                 + 2 * S * T5["d_model"] * T5["d_ff"])
    return B * LAYERS * per_layer


def build_t5_encoder() -> Built:
    import torch
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    cfg = T5Config(d_model=T5["d_model"], d_ff=T5["d_ff"], num_heads=T5["heads"],
                   d_kv=T5["d_kv"], num_layers=LAYERS, vocab_size=T5["vocab"])
    t5 = T5EncoderModel(cfg).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.t5 = t5

        def forward(self, input_ids, attention_mask):
            return self.t5(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def args(B, S):
        return torch.randint(0, 1000, (B, S)), torch.ones(B, S, dtype=torch.long)

    bs = {0: "batch_size", 1: "sequence_length"}
    return Built(Encoder().eval(), args(2, 16), ["input_ids", "attention_mask"],
                 ["last_hidden_state"], {"input_ids": bs, "attention_mask": bs},
                 {"last_hidden_state": bs}, lambda d: args(d["batch_size"], d["sequence_length"]))


# ----- CNNs (own definitions of the torchvision architectures, written when torchvision
# did not import here; the audit's entries below use torchvision itself)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoo_cnn  # noqa: E402  (architecture tables, torch modules and their MAC formulas)


def build_cnn(arch: str) -> Built:
    import torch

    torch.manual_seed(0)
    module = zoo_cnn.build(arch).eval()

    def args(B, H, W):
        return (torch.randn(B, 3, H, W),)

    axes = {0: "batch_size", 2: "height", 3: "width"}
    out_axes = {0: "batch_size"} if arch != "unet" else axes
    return Built(module, args(2, 96, 96), ["pixel_values"], ["output"], {"pixel_values": axes},
                 {"output": out_axes}, lambda d: args(d["batch_size"], d["height"], d["width"]))


def _cnn_entry(arch: str, description: str, size: int = 64) -> Entry:
    dims = {"batch_size": 1, "height": size, "width": size}
    return Entry(arch, description, lambda: build_cnn(arch),
                 lambda d: zoo_cnn.macs(arch, d["batch_size"], d["height"], d["width"]), dims,
                 ort=None)


# ----- families from the framework-export audit (models/zoo_audit.py): the exports that
# exposed a bug in npusim, and representatives of families the entries above lack


def _families():
    import zoo_families

    return zoo_families


RNN_DIMS = {"batch_size": 1, "sequence_length": 16}
BART = dict(d_model=768, encoder_attention_heads=12, decoder_attention_heads=12,
            encoder_ffn_dim=3072, decoder_ffn_dim=3072, encoder_layers=LAYERS,
            decoder_layers=LAYERS)  # BART-base widths
WHISPER = dict(num_mel_bins=80, max_source_positions=100, d_model=384, encoder_layers=LAYERS,
               encoder_attention_heads=6, encoder_ffn_dim=1536, decoder_layers=LAYERS,
               decoder_attention_heads=6, decoder_ffn_dim=1536)  # Whisper-tiny widths
QWEN2 = dict(hidden_size=256, intermediate_size=688, num_attention_heads=8,
             num_key_value_heads=2, num_hidden_layers=LAYERS, vocab_size=32000,
             max_position_embeddings=4096)
_NEW = ("ts", "dynamo", "ts-ort")

AUDIT_ENTRIES: list[Entry] = [
    Entry("deeplabv3", "torchvision deeplabv3_mobilenet_v3_large (21 classes), 64x64: "
          "atrous convolutions (dilation 12/24/36 in the pyramid, wider than the 4x4 map), "
          "bilinear resize", lambda: _families().build_torchvision(
              "deeplabv3_mobilenet_v3_large", 64), None,
          {"batch_size": 1, "height": 64, "width": 64}, ort=None, variants=_NEW),
    Entry("lstm", "nn.LSTM, 2 layers, input 128, hidden 256, batch first, + Linear(256, 10)",
          lambda: _families().build_rnn("LSTM"),
          lambda d: _families().rnn_macs("LSTM", d), RNN_DIMS, ort=None, variants=_NEW,
          torch_misses="FlopCounterMode counts no aten LSTM op, only the Linear head"),
    Entry("gru", "nn.GRU, 2 layers, input 128, hidden 256, batch first, + Linear(256, 10) "
          "(ONNX GRU with linear_before_reset)", lambda: _families().build_rnn("GRU"),
          lambda d: _families().rnn_macs("GRU", d), RNN_DIMS, ort=None, variants=_NEW),
    Entry("bart", f"HF BartModel, BART-base widths, {LAYERS}+{LAYERS} layers, encoder and "
          "decoder in one graph (cross attention), no cache",
          lambda: _families().build_hf_seq2seq("BartModel", "BartConfig", **BART), None,
          {"batch_size": 1, "sequence_length": 32, "decoder_sequence_length": 8},
          ort="bart", heads=12, hidden=768, variants=_NEW),
    Entry("whisper_encoder", f"HF Whisper encoder, Whisper-tiny widths, {LAYERS} layers, "
          "two Conv1d (stride 2) on 80 x 200 log-mel frames",
          lambda: _families().build_whisper_encoder(**WHISPER), None, {"batch_size": 1},
          ort="bart", heads=6, hidden=384, variants=_NEW),
    Entry("qwen2", f"HF Qwen2ForCausalLM, small config {QWEN2} (GQA 4:1, QKV bias), "
          "decoder with past, position ids from the cache length",
          lambda: _families().build_hf_decoder("Qwen2ForCausalLM", "Qwen2Config", LAYERS, 2,
                                               32, **QWEN2), None,
          {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 24}, ort="gpt2",
          heads=8, hidden=256, variants=_NEW),
]


# decoders with past: the mask's length "past_sequence_length + sequence_length" (the
# TorchScript files' dim name) is computed from these by npusim's front end
_DEC_DIMS = {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 24}

ENTRIES: list[Entry] = [
    Entry("bert", f"HF BertModel, BERT-base widths (768/12 heads/3072), {LAYERS} layers, "
          "SDPA attention (the default), last_hidden_state and pooler_output",
          lambda: build_bert("sdpa"), bert_macs, {"batch_size": 1, "sequence_length": 32},
          ort="bert", heads=12, hidden=768),
    Entry("bert_eager", "as bert, eager attention (the pattern ORT fuses into Attention)",
          lambda: build_bert("eager"), bert_macs, {"batch_size": 1, "sequence_length": 32},
          ort="bert", heads=12, hidden=768, variants=("ts", "ts-ort")),
    Entry("gpt2", f"HF GPT2LMHeadModel, GPT-2 small widths, {LAYERS} layers, SDPA, as "
          "Optimum's decoder with past (KV cache inputs and present outputs), LM head",
          lambda: build_gpt2("sdpa"), gpt2_macs, _DEC_DIMS, ort="gpt2", heads=12, hidden=768),
    Entry("gpt2_eager", "as gpt2, eager attention", lambda: build_gpt2("eager"), gpt2_macs,
          _DEC_DIMS, ort="gpt2", heads=12, hidden=768, variants=("ts", "ts-ort")),
    Entry("llama_eager", f"HF LlamaForCausalLM, small config {LLAMA}, eager attention, "
          "decoder with past and position_ids, LM head", lambda: build_llama("eager"),
          llama_macs, _DEC_DIMS, ort="gpt2", heads=LLAMA["heads"], hidden=LLAMA["hidden"]),
    Entry("llama_sdpa", "as llama_eager, SDPA attention", lambda: build_llama("sdpa"),
          llama_macs, _DEC_DIMS, ort="gpt2", heads=LLAMA["heads"], hidden=LLAMA["hidden"]),
    Entry("vit", f"HF ViTModel, ViT-B/16 widths, {LAYERS} layers, {VIT['image']}x"
          f"{VIT['image']} images (fixed by the position embeddings), pooler", build_vit,
          vit_macs, {"batch_size": 1}, ort="vit", heads=12, hidden=768),
    Entry("t5_encoder", f"HF T5EncoderModel, T5-small widths, {LAYERS} layers, relative "
          "position bias", build_t5_encoder, t5_encoder_macs,
          {"batch_size": 1, "sequence_length": 32}, ort="t5", heads=8, hidden=512),
    _cnn_entry("resnet50", "ResNet-50 v1.5 (torchvision's architecture), 1000 classes"),
    _cnn_entry("mobilenetv3", "MobileNetV3-Large (torchvision's), hardswish, squeeze-excitation"),
    _cnn_entry("efficientnet_b0", "EfficientNet-B0 (torchvision's), SiLU, squeeze-excitation"),
    _cnn_entry("unet", "UNet: 4-level encoder (max-pool) and decoder (nearest 2x upsample + "
               "conv, skip concat), GroupNorm + SiLU, 32..256 channels", size=32),
    *AUDIT_ENTRIES,
]


def dims_for(entry: Entry, exporter: str) -> dict:
    """The dims a file of ``entry`` written by ``exporter`` takes: the dynamo exporter names
    the attention mask's length ``total_sequence_length``, a dim of its own to bind (the
    TorchScript one names it by the expression, which npusim computes)."""
    d = dict(entry.dims)
    if exporter == "dynamo" and "past_sequence_length" in d:
        d["total_sequence_length"] = d["past_sequence_length"] + d["sequence_length"]
    return d


# --------------------------------------------------------------------------- exporting


def export_torchscript(b: Built, path: Path, opset: int = 17) -> None:
    import torch

    axes = {**b.in_axes, **b.out_axes}
    with torch.no_grad():
        torch.onnx.export(b.module, b.args, str(path), dynamo=False, input_names=b.inputs,
                          output_names=b.outputs, dynamic_axes=axes, opset_version=opset)


def export_dynamo(b: Built, path: Path | None, optimize: bool = True, opset: int | None = None):
    """The dynamo exporter; ``path`` None: return the ONNXProgram unsaved."""
    import torch

    dims: dict[str, object] = {}

    def dim(name):
        if name == "past_sequence_length + sequence_length":
            name = "total_sequence_length"
        return dims.setdefault(name, torch.export.Dim(name))

    per_input = [{axis: dim(n) for axis, n in b.in_axes.get(name, {}).items()} or None
                 for name in b.inputs]
    if b.grouped_args:  # forward(a, b, *rest): dynamic_shapes mirrors that structure
        k = b.grouped_args[0]
        shapes = tuple(per_input[:k]) + (tuple(per_input[k:]),)
    else:
        shapes = tuple(per_input)
    with torch.no_grad():
        program = torch.onnx.export(b.module, b.args, None if path is None else str(path),
                                    dynamo=True, input_names=b.inputs, output_names=b.outputs,
                                    dynamic_shapes=shapes, optimize=optimize, verbose=False,
                                    **({"opset_version": opset} if opset else {}))
    return program


def ort_transformer_optimize(src: Path, dst: Path, entry: Entry) -> str:
    """ORT's transformer optimizer; where it crashes on a graph (its GPT-2 fusions on the
    dynamo exporter's bias-less Gemm), ORT's graph optimizer, as a user would fall back to.
    Returns what ran."""
    from onnxruntime.transformers.optimizer import optimize_model

    what = (f"onnxruntime.transformers.optimizer(model_type={entry.ort}, "
            f"num_heads={entry.heads}, hidden_size={entry.hidden})")
    try:
        m = optimize_model(str(src), model_type=entry.ort, num_heads=entry.heads,
                           hidden_size=entry.hidden)
    except Exception as e:  # noqa: BLE001  (any failure of the optimizer: fall back)
        where = e.__traceback__
        while where.tb_next is not None:
            where = where.tb_next
        frame = f"{Path(where.tb_frame.f_code.co_filename).name}:{where.tb_lineno}"
        ort_graph_optimize(src, dst)
        return (f"onnxruntime graph optimizer, ORT_ENABLE_EXTENDED ({what} fails on this "
                f"graph: {type(e).__name__} at {frame})")
    m.save_model_to_file(str(dst), use_external_data_format=True)
    return what


def ort_graph_optimize(src: Path, dst: Path) -> None:
    """ONNX Runtime's offline graph optimizer at ORT_ENABLE_EXTENDED (FusedConv, FusedGemm,
    ...): a session that saves its optimized model, as ORT's documentation shows (npusim's
    ``--optimize extended`` runs the same); the weights go to an external file."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(dst)
    prefix = "session.optimized_model_external_initializers_"
    so.add_session_config_entry(prefix + "file_name", dst.name + ".data")
    so.add_session_config_entry(prefix + "min_size_in_bytes", "1024")
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])


def count_macs(b: Built, dims: dict) -> int:
    """Independent count: torch's FLOP counter over a forward pass at ``dims`` (FLOPs / 2),
    attention on the math backend so its matmuls are counted."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        b.module(*b.test_args(dims))
    return fc.get_total_flops() // 2


def _save_graph_only(src: Path, dst: Path, name: str) -> int:
    """``src`` without its weight data at ``dst``, otherwise as the exporter wrote it (no
    npusim metadata either: a zoo file is a user's file, its dims are bound with --dim)."""
    model = onnx.load(str(src), load_external_data=False)
    model = graph_only(model, name)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(".tmp")
    onnx.save(model, str(tmp))
    tmp.replace(dst)
    return dst.stat().st_size


class Manifest:
    """``manifest.json``: one record per file, rewritten after every file (so a reader of a
    published copy always sees complete JSON)."""

    def __init__(self, dirs: list[Path]):
        self.dirs = dirs
        self.path = dirs[0] / "manifest.json"

    def add(self, record: dict) -> None:
        """Add or replace ``record`` (read the file anew: another exporter, e.g. the Keras
        one in its own environment, may have added records meanwhile)."""
        files = {}
        if self.path.is_file():
            files = {f["file"]: f for f in json.loads(self.path.read_text())["files"]}
        files[record["file"]] = record
        doc = {"description": "npusim's model zoo: graph-only framework exports "
                              "(models/export_zoo.py rebuilds them)",
               "mac_rule": MAC_RULE,
               "files": [files[k] for k in sorted(files)]}
        text = json.dumps(doc, indent=1) + "\n"
        for d in self.dirs:
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / "manifest.json.tmp"
            tmp.write_text(text)
            tmp.replace(d / "manifest.json")


def _versions() -> dict:
    import onnxruntime
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def export_entry(entry: Entry, out: Path, manifest: Manifest, publish: list[Path], work: Path,
                 log=print) -> None:
    """Export ``entry``'s variants into ``out`` (graph-only) and the manifest, after checking
    its MAC formula against torch's count."""
    b = entry.build()
    versions = _versions()
    counted = count_macs(b, entry.dims)
    analytic = counted if entry.macs is None else entry.macs(entry.dims)
    if counted != analytic and not entry.torch_misses:
        raise SystemExit(f"{entry.name}: analytic MACs {analytic} != torch's count {counted} "
                         f"at {entry.dims}")
    source = {}
    if entry.macs is None:
        source["macs_source"] = "torch FlopCounterMode (FLOPs / 2): no formula"
    elif entry.torch_misses:
        source["macs_source"] = f"formula (torch's count falls short: {entry.torch_misses})"
    for variant in entry.variants:
        exporter, _, opt = variant.partition("-")
        dims = dims_for(entry, exporter)
        raw = work / f"{entry.name}-{exporter}.onnx"
        if not raw.exists():
            log(f"  {entry.name}: {exporter} export")
            (export_torchscript if exporter == "ts" else export_dynamo)(b, raw)
        src = raw
        if opt:
            src = work / f"{entry.name}-{variant}.onnx"
            log(f"  {entry.name}: {variant}")
            if entry.ort:
                optimizer = ort_transformer_optimize(raw, src, entry)
            else:
                ort_graph_optimize(raw, src)
                optimizer = "onnxruntime graph optimizer, ORT_ENABLE_EXTENDED"
        else:
            optimizer = None
        fname = f"{entry.name}-{variant}.onnx"
        size = _save_graph_only(src, out / fname, fname[:-5])
        record = {"file": fname, "model": entry.name, "description": entry.description,
                  "exporter": {"ts": "torch.onnx.export(dynamo=False)",
                               "dynamo": "torch.onnx.export(dynamo=True)"}[exporter],
                  "optimized": optimizer, "dims": dims, "macs": analytic, **source,
                  "macs_torch_count": counted, "bytes": size, "versions": versions}
        manifest.add(record)
        for d in publish:
            shutil.copyfile(out / fname, d / fname)
        log(f"  wrote {fname} ({size / 1e3:.0f} kB, {analytic:,} MACs at {dims})")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ZOO_DIR)
    p.add_argument("--only", action="append", default=[], help="model name (repeatable)")
    p.add_argument("--publish", type=Path, action="append", default=[],
                   help="also copy every file and the manifest here as soon as it is written")
    p.add_argument("--bench", action="store_true", help="also the full-depth benchmark graphs")
    p.add_argument("--keep-work", type=Path, help="keep the full-weight exports here")
    a = p.parse_args(argv)
    _hf_silence()
    known = {e.name for e in ENTRIES} | {"bench"}
    for n in a.only:
        if n not in known:
            raise SystemExit(f"--only {n}: unknown model; known: {', '.join(sorted(known))}")
    manifest = Manifest([a.out, *a.publish])
    work_ctx = (contextlib.nullcontext(a.keep_work) if a.keep_work
                else tempfile.TemporaryDirectory(prefix="npusim-zoo-"))
    with work_ctx as work:
        work = Path(work)
        work.mkdir(parents=True, exist_ok=True)
        for entry in ENTRIES:
            if a.only and entry.name not in a.only:
                continue
            print(f"{entry.name}: {entry.description}", flush=True)
            export_entry(entry, a.out, manifest, a.publish, work)
        if a.bench or "bench" in a.only:
            import zoo_bench

            zoo_bench.export_all(a.out / "bench", [d / "bench" for d in a.publish], work)


if __name__ == "__main__":
    main()
