"""Builders for the framework-export audit (``models/zoo_audit.py``) and the zoo entries
taken from it: torchvision classifiers and segmenters, Hugging Face encoders, seq2seq
models, decoders, speech and vision models, and plain torch recurrent and 1-D/transposed
convolution models. Random weights, small but real configurations (real widths where they
are small enough, 2 layers), dims named as Optimum names them.

Each builder returns an ``export_zoo.Built``; its MACs are counted by torch's
``FlopCounterMode`` (``export_zoo.count_macs``), the independent count the audit compares
npusim's with.
"""

from __future__ import annotations

import export_zoo as zoo
from export_zoo import Built

LAYERS = zoo.LAYERS
IMAGE_AXES = {0: "batch_size", 2: "height", 3: "width"}
TOKENS = {0: "batch_size", 1: "sequence_length"}


# --------------------------------------------------------------------------- torchvision


def build_torchvision(arch: str, size: int, dynamic_hw: bool = True, **kw) -> Built:
    """``torchvision.models.<arch>(weights=None)`` on ``size`` x ``size`` images; a
    segmentation model returns its ``out`` map."""
    import torch
    import torchvision

    torch.manual_seed(0)
    seg = arch.startswith(("deeplab", "fcn", "lraspp"))
    fn = (getattr(torchvision.models.segmentation, arch) if seg
          else getattr(torchvision.models, arch))
    extra = dict(weights_backbone=None) if seg else {}
    if arch in ("inception_v3", "googlenet"):
        extra["aux_logits"] = False
        extra["init_weights"] = False
    net = fn(weights=None, **extra, **kw).eval()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, pixel_values):
            y = self.net(pixel_values)
            return y["out"] if seg else y

    def args(B, H, W):
        return (torch.randn(B, 3, H, W),)

    axes = IMAGE_AXES if dynamic_hw else {0: "batch_size"}
    out_axes = axes if seg else {0: "batch_size"}
    return Built(Net().eval(), args(2, size, size), ["pixel_values"], ["output"],
                 {"pixel_values": axes}, {"output": out_axes},
                 lambda d: args(d["batch_size"], d.get("height", size), d.get("width", size)))


# --------------------------------------------------------------------------- Hugging Face


def _hf(cls_name: str, cfg_name: str, **cfg):
    import torch
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, cfg_name)(**cfg)
    return getattr(transformers, cls_name)(config).eval()


def build_hf_encoder(cls_name: str, cfg_name: str, token_type: bool = False, **cfg) -> Built:
    """A text encoder: input_ids, attention_mask (, token_type_ids) -> last_hidden_state.
    A pooler (BERT-style models' dense layer on the first token) is dropped: its output is
    not returned, so the exporters prune it while torch's count would include it."""
    import torch

    model = _hf(cls_name, cfg_name, **cfg)
    if getattr(model, "pooler", None) is not None:
        model.pooler = None

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask, *rest):
            kw = {"token_type_ids": rest[0]} if token_type else {}
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          **kw).last_hidden_state

    def args(B, S):
        a = (torch.randint(0, 100, (B, S)), torch.ones(B, S, dtype=torch.long))
        return a + ((torch.zeros(B, S, dtype=torch.long),) if token_type else ())

    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if token_type else [])
    return Built(Encoder().eval(), args(2, 16), names, ["last_hidden_state"],
                 {n: TOKENS for n in names}, {"last_hidden_state": TOKENS},
                 lambda d: args(d["batch_size"], d["sequence_length"]),
                 grouped_args=(2,) if token_type else None)


def build_hf_seq2seq(cls_name: str, cfg_name: str, **cfg) -> Built:
    """An encoder-decoder in one graph (no cache): input_ids, attention_mask,
    decoder_input_ids -> the decoder's last hidden state (a ...ForConditionalGeneration:
    its logits)."""
    import torch

    model = _hf(cls_name, cfg_name, **cfg)
    lm = "ForConditionalGeneration" in cls_name

    class Seq2Seq(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask, decoder_input_ids):
            o = self.m(input_ids=input_ids, attention_mask=attention_mask,
                       decoder_input_ids=decoder_input_ids, use_cache=False)
            return o.logits if lm else o.last_hidden_state

    def args(B, S, T):
        return (torch.randint(0, 100, (B, S)), torch.ones(B, S, dtype=torch.long),
                torch.randint(0, 100, (B, T)))

    dec = {0: "batch_size", 1: "decoder_sequence_length"}
    out = "logits" if lm else "last_hidden_state"
    return Built(Seq2Seq().eval(), args(2, 16, 5),
                 ["input_ids", "attention_mask", "decoder_input_ids"], [out],
                 {"input_ids": TOKENS, "attention_mask": TOKENS, "decoder_input_ids": dec},
                 {out: dec},
                 lambda d: args(d["batch_size"], d["sequence_length"],
                                d["decoder_sequence_length"]))


def build_hf_decoder(cls_name: str, cfg_name: str, n_layers: int, kv_heads: int,
                     head_dim: int, **cfg) -> Built:
    """A causal LM as Optimum's decoder with past (position ids from the cache length, as
    transformers computes them when none are given)."""
    lm = _hf(cls_name, cfg_name, **cfg)
    return zoo._decoder_with_past(lm, n_layers, kv_heads, head_dim, False)


def _one_input(model, name: str, out: str = "last_hidden_state"):
    """``model`` called with one keyword input ``name``, returning its output ``out``: the
    plain-tensor signature the exporters take."""
    import torch

    class OneInput(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            return getattr(self.m(**{name: x}), out)

    return OneInput().eval()


def build_hf_vision(cls_name: str, cfg_name: str, image: int, dynamic_hw: bool,
                    out: str = "last_hidden_state", **cfg) -> Built:
    """An image model: pixel_values -> ``out`` (``logits`` for heads)."""
    import torch

    model = _hf(cls_name, cfg_name, **cfg)

    def args(B, H, W):
        return (torch.randn(B, cfg.get("num_channels", 3), H, W),)

    axes = IMAGE_AXES if dynamic_hw else {0: "batch_size"}
    return Built(_one_input(model, "pixel_values", out), args(2, image, image),
                 ["pixel_values"], [out],
                 {"pixel_values": axes}, {out: {0: "batch_size"}},
                 lambda d: args(d["batch_size"], d.get("height", image), d.get("width", image)))


def build_whisper_encoder(**cfg) -> Built:
    """Whisper's encoder (two Conv1d, then transformer layers) on log-mel features; the
    frame count is fixed by the position embeddings (2 x max_source_positions)."""
    import torch

    model = _hf("WhisperModel", "WhisperConfig", **cfg).get_encoder()
    frames = 2 * cfg["max_source_positions"]

    def args(B):
        return (torch.randn(B, cfg["num_mel_bins"], frames),)

    return Built(_one_input(model, "input_features"), args(2), ["input_features"],
                 ["last_hidden_state"],
                 {"input_features": {0: "batch_size"}}, {"last_hidden_state": {0: "batch_size"}},
                 lambda d: args(d["batch_size"]))


def build_wav2vec2(**cfg) -> Built:
    """Wav2Vec2Model on raw audio: a 7-conv feature extractor (group norm on the first),
    a grouped positional conv, transformer layers."""
    import torch

    model = _hf("Wav2Vec2Model", "Wav2Vec2Config", **cfg)

    def args(B, S):
        return (torch.randn(B, S),)

    return Built(_one_input(model, "input_values"), args(2, 8000), ["input_values"],
                 ["last_hidden_state"],
                 {"input_values": TOKENS}, {"last_hidden_state": {0: "batch_size"}},
                 lambda d: args(d["batch_size"], d["sequence_length"]))


# --------------------------------------------------------------------------- plain torch


def rnn_macs(kind: str, d: dict, layers: int = 2, hidden: int = 256, inp: int = 128,
             bidirectional: bool = False, classes: int = 10) -> int:
    """MACs of :func:`build_rnn`'s model: per layer, direction and step ``G * H * (I + H)``
    (``G`` gates: LSTM 4, GRU 3; ``I`` the layer's input width), then the Linear head.
    torch's FlopCounterMode counts no recurrent op (its LSTM/GRU kernels are not
    decomposed into matmuls), so this formula is the reference."""
    G = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    D = 2 if bidirectional else 1
    B, S = d["batch_size"], d["sequence_length"]
    total, width = 0, inp
    for _ in range(layers):
        total += D * S * G * hidden * (width + hidden)
        width = D * hidden
    return B * (total + S * width * classes)


def build_rnn(kind: str, layers: int = 2, hidden: int = 256, inp: int = 128,
              bidirectional: bool = False) -> Built:
    """nn.LSTM / nn.GRU over a sequence (batch first), the last output through a Linear."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Recurrent(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(nn, kind)(inp, hidden, layers, batch_first=True,
                                         bidirectional=bidirectional)
            self.head = nn.Linear(hidden * (2 if bidirectional else 1), 10)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.head(y)

    def args(B, S):
        return (torch.randn(B, S, inp),)

    return Built(Recurrent().eval(), args(2, 12), ["input"], ["output"], {"input": TOKENS},
                 {"output": TOKENS}, lambda d: args(d["batch_size"], d["sequence_length"]))


def build_conv1d_convtranspose() -> Built:
    """A 1-D conv encoder (strided, dilated, depthwise Conv1d) and a ConvTranspose2d decoder
    (stride 2, output_padding), the shapes of audio front ends and image decoders."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Sequential(
                nn.Conv1d(16, 64, 5, stride=2, padding=2), nn.ReLU(),
                nn.Conv1d(64, 64, 3, padding=2, dilation=2, groups=64), nn.ReLU(),
                nn.Conv1d(64, 128, 3, stride=2, padding=1), nn.ReLU())
            self.dec = nn.Sequential(
                nn.ConvTranspose2d(8, 32, 4, stride=2, padding=1), nn.ReLU(),
                nn.ConvTranspose2d(32, 16, 3, stride=2, padding=1, output_padding=1),
                nn.ReLU(), nn.ConvTranspose2d(16, 3, 3, stride=1, padding=1))

        def forward(self, x):
            y = self.enc(x)  # (B, 128, L/4)
            B, C, L = y.shape
            img = y.reshape(B, 8, 16, L * C // 128)  # 16 channels of 8: a small image
            return self.dec(img)

    def args(B, L):
        return (torch.randn(B, 16, L),)

    return Built(Net().eval(), args(2, 64), ["input"], ["output"], {"input": {0: "batch_size"}},
                 {"output": {0: "batch_size"}}, lambda d: args(d["batch_size"], 64))


def build_spatial_transformer() -> Built:
    """A spatial transformer: a small CNN predicts an affine transform, ``grid_sample``
    resamples the image with it (ONNX GridSample, and AffineGrid in the TorchScript
    export at opset 20)."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class STN(nn.Module):
        def __init__(self):
            super().__init__()
            self.loc = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                     nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 6))

        def forward(self, x):
            theta = self.loc(x).view(-1, 2, 3)
            grid = nn.functional.affine_grid(theta, list(x.shape), align_corners=False)
            return nn.functional.grid_sample(x, grid, align_corners=False)

    def args(B):
        return (torch.randn(B, 3, 32, 32),)

    return Built(STN().eval(), args(2), ["pixel_values"], ["output"],
                 {"pixel_values": {0: "batch_size"}}, {"output": {0: "batch_size"}},
                 lambda d: args(d["batch_size"]))
