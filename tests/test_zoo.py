"""The model zoo (``tests/data/zoo``, built by ``models/export_zoo.py``): real PyTorch,
Hugging Face and Keras exports, raw and after ONNX Runtime's optimizer, stored graph-only.

Needs no torch: the files are committed. Each one simulates on ``mobile`` and ``server`` at
its manifest dims, and its layers' MACs add up to the manifest's count, which the export
script computed by formula from the architecture and checked against torch's own count of
the same forward pass. A loader that drops, doubles or misshapes a layer changes the sum.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import onnx
import pytest

import npusim
from npusim.frontend import load_graph

ZOO = Path(__file__).resolve().parent / "data" / "zoo"
MANIFEST = json.loads((ZOO / "manifest.json").read_text())
FILES = MANIFEST["files"]
BENCH = ZOO / "bench"
BENCH_FILES = (json.loads((BENCH / "manifest.json").read_text())["files"]
               if (BENCH / "manifest.json").is_file() else [])


def test_manifest_lists_every_file():
    assert sorted(f["file"] for f in FILES) == sorted(p.name for p in ZOO.glob("*.onnx"))
    assert sorted(f["file"] for f in BENCH_FILES) == sorted(p.name for p in BENCH.glob("*.onnx"))


def test_zoo_covers_the_exporters_and_optimizers():
    """Every model comes through both torch exporters, and each also after ORT's optimizer."""
    by_model: dict[str, set[tuple[str, bool]]] = {}
    for f in FILES:
        by_model.setdefault(f["model"], set()).add((f["exporter"], f["optimized"] is not None))
    for model, kinds in by_model.items():
        assert any(opt for _, opt in kinds), model
        assert any(not opt for _, opt in kinds), model
    torch_models = {m for m, kinds in by_model.items() if any("dynamo=True" in e for e, _ in kinds)}
    assert {"bert", "gpt2", "llama_eager", "llama_sdpa", "vit", "t5_encoder", "resnet50",
            "mobilenetv3", "efficientnet_b0", "unet", "deeplabv3", "lstm", "gru", "bart",
            "whisper_encoder", "qwen2"} <= torch_models


def test_manifest_macs_agree_with_torch_or_say_why():
    """A file's MACs are its formula's, checked against torch's count at export, or (with no
    formula) torch's count, labelled; a formula may exceed torch's count only with the
    reason (torch counts no LSTM op)."""
    for f in FILES:
        if "macs_keras_count" in f:
            assert f["macs"] == f["macs_keras_count"], f["file"]
        elif "macs_torch_count" not in f:  # a Keras RNN: by formula, said so
            assert f["macs_source"].startswith("formula"), f["file"]
        elif f["macs"] != f["macs_torch_count"]:
            assert "falls short" in f.get("macs_source", ""), f["file"]
        assert f.get("macs_source", "formula").startswith(("formula", "torch")), f["file"]


def test_files_are_graph_only_and_small():
    """No weight data in the files (external data that is absent), the zoo under 20 MB."""
    total = 0
    for path in [*ZOO.glob("*.onnx"), *BENCH.glob("*.onnx")]:
        total += path.stat().st_size
        model = onnx.load(str(path), load_external_data=False)
        locations = set()
        for t in model.graph.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                locations.add(next(e.value for e in t.external_data if e.key == "location"))
            else:  # only small constants keep their bytes
                assert math.prod(t.dims) <= 1 << 16, (path.name, t.name)
        assert locations and not any((path.parent / loc).exists() for loc in locations), path.name
    assert total < 20e6


@pytest.mark.parametrize("config", ["mobile", "server"])
@pytest.mark.parametrize("entry", FILES, ids=[f["file"][:-5] for f in FILES])
def test_zoo_file_simulates_with_its_analytic_macs(entry, config):
    """On the presets as they are, cycle-level DRAM included (the CNNs at 64x64 images,
    UNet 32x32; transformers at 2 layers and 32 tokens): the first 92 runs take about 50 s
    of CPU on this 2-core machine (70 s wall at load 2; 25 s with ideal memory), the 36 of
    the audit's entries (DeepLab, LSTM, GRU, BART, Whisper, Qwen2) 26 s wall at load 3,
    within what the suite can spend, so no run is simplified."""
    r = npusim.simulate(str(ZOO / entry["file"]), config, dims=entry["dims"])
    assert r.total_cycles > 0
    assert sum(layer["macs"] for layer in r.layers) == entry["macs"]


def test_torchscript_decoders_bind_the_cache_length_from_its_expression():
    """The TorchScript exporter names the mask's length 'past_sequence_length +
    sequence_length'; the manifest binds only the names and the front end computes it."""
    files = [f for f in FILES if f["exporter"] == "torch.onnx.export(dynamo=False)"
             and "past_sequence_length" in f["dims"]]
    assert len(files) == 10
    for f in files:
        assert list(f["dims"]) == ["batch_size", "sequence_length", "past_sequence_length"]
        graph = load_graph(ZOO / f["file"], f["dims"])
        d = f["dims"]
        assert graph.shape("attention_mask") == (d["batch_size"], d["past_sequence_length"]
                                                 + d["sequence_length"])


@pytest.mark.parametrize("entry", BENCH_FILES, ids=[f["file"][:-5] for f in BENCH_FILES])
def test_bench_graph_loads_with_its_analytic_macs(entry):
    """The full-depth benchmark graphs load and lower (on ``server``) with the MACs of
    their formula; simulating 32 Llama-3-8B layers is the benchmark's business."""
    from npusim.config import load_config
    from npusim.frontend import load_model
    from npusim.lowering import lower_graph

    graph = load_model(BENCH / entry["file"], entry["dims"])
    program = lower_graph(graph, load_config("server", []))
    assert sum(int(info.macs) for info in program.layers) == entry["macs"]
