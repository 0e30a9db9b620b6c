"""Quantized exports: the same float model as ONNX Runtime's quantization tools write it,
to check that npusim reads every form as the same int8 work.

Two steps, in two environments (as ``models/zoo_audit.py``):

1. ``python models/zoo_quantized.py export --work DIR`` with torch 2.13 CPU, torchvision,
   transformers and onnxruntime 1.32: each model is exported by torch (TorchScript
   exporter, static shapes, random weights), run through ORT's ``quant_pre_process``, then
   quantized by ``quantize_static`` (random calibration data) in the QDQ and the
   QOperator format and by ``quantize_dynamic``; every file is written graph-only.
2. ``python models/zoo_quantized.py check --work DIR`` in npusim's environment: each file
   is simulated on ``mobile`` and ``server`` (the QDQ file also with ``--optimize
   extended``, ORT's own QDQ -> QOperator fusion) and the cycles, MACs and layer counts
   go to ``results/validation/quantized_exports.json`` and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "results" / "validation" / "quantized_exports.json"
FORMATS = ("float", "qdq", "qoperator", "dynamic")
CONFIGS = ("mobile", "server")


def _models():
    """name -> (torch module, example args, input names, calibration feeds)."""
    import numpy as np
    import torch

    from export_zoo import _torchvision_importable

    _torchvision_importable()
    import torchvision
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    out = {}

    class ToyCnn(torch.nn.Module):  # tests/data/zoo/quantized: conv, conv s2, mean, fc
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.c2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
            self.fc = torch.nn.Linear(32, 10)

        def forward(self, x):
            y = torch.relu(self.c2(torch.relu(self.c1(x))))
            return self.fc(y.mean(dim=(2, 3)))

    feeds = [{"input": rng.standard_normal((1, 3, 32, 32), np.float32)} for _ in range(4)]
    out["toy_cnn"] = (ToyCnn().eval(), (torch.randn(1, 3, 32, 32),), ["input"], feeds)
    for arch in ("resnet18", "mobilenet_v2"):
        net = getattr(torchvision.models, arch)(weights=None).eval()
        x = torch.randn(1, 3, 224, 224)
        feeds = [{"pixel_values": rng.standard_normal((1, 3, 224, 224), np.float32)}
                 for _ in range(4)]
        out[arch] = (net, (x,), ["pixel_values"], feeds)
    # BERT-tiny's shape (google/bert_uncased_L-2_H-128_A-2), built from its configuration
    cfg = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=512, vocab_size=30522)
    bert = BertModel(cfg, add_pooling_layer=False).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = bert

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    S = 128
    ids = torch.randint(0, 1000, (1, S))
    feeds = [{"input_ids": rng.integers(0, 1000, (1, S), dtype=np.int64),
              "attention_mask": np.ones((1, S), np.int64)} for _ in range(4)]
    out["bert_tiny"] = (Encoder().eval(), (ids, torch.ones(1, S, dtype=torch.long)),
                        ["input_ids", "attention_mask"], feeds)
    return out


def export(work: Path, only: list[str]) -> None:
    import torch
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat,
                                          quantize_dynamic, quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from export_zoo import _save_graph_only

    class Feeds(CalibrationDataReader):
        def __init__(self, feeds):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    work.mkdir(parents=True, exist_ok=True)
    for name, (module, args, inputs, feeds) in _models().items():
        if only and name not in only:
            continue
        raw, pre = work / f"{name}-raw.onnx", work / f"{name}-pre.onnx"
        torch.onnx.export(module, args, str(raw), input_names=inputs, output_names=["output"],
                          opset_version=17, dynamo=False)
        quant_pre_process(str(raw), str(pre))
        files = {"float": pre}
        for fmt, qf in (("qdq", QuantFormat.QDQ), ("qoperator", QuantFormat.QOperator)):
            files[fmt] = work / f"{name}-{fmt}-full.onnx"
            quantize_static(str(pre), str(files[fmt]), Feeds(feeds), quant_format=qf)
        files["dynamic"] = work / f"{name}-dynamic-full.onnx"
        quantize_dynamic(str(pre), str(files["dynamic"]))
        for fmt, src in files.items():
            size = _save_graph_only(src, work / f"{name}-{fmt}.onnx", f"{name}-{fmt}")
            print(f"{name}-{fmt}.onnx: {size} bytes", flush=True)


def _run(path: Path, config: str, optimize: str = "none") -> dict:
    import npusim

    t = time.perf_counter()
    r = npusim.simulate(str(path), config, optimize=optimize)
    vector = [lay for lay in r.layers if lay["op_type"] in
              ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear")]
    return {"cycles": r.total_cycles, "macs": sum(lay["macs"] for lay in r.layers),
            "layers": len(r.layers), "conversion_layers": len(vector),
            "conversion_cycles": sum(lay["cycles"] for lay in vector),
            "int8_layers": sum(lay["precision"] == 1 for lay in r.layers),
            "wall_s": round(time.perf_counter() - t, 2)}


def check(work: Path) -> None:
    from npusim.errors import NpusimError

    rows = []
    names = sorted({p.name.split("-")[0] for p in work.glob("*-float.onnx")})
    for name in names:
        for fmt in FORMATS + ("qdq+extended",):
            path = work / f"{name}-{fmt.split('+')[0]}.onnx"
            for config in CONFIGS:
                row = {"model": name, "format": fmt, "config": config}
                try:
                    row.update(_run(path, config, "extended" if "+" in fmt else "none"))
                except NpusimError as e:
                    row["error"] = str(e).splitlines()[0][:300]
                rows.append(row)
                print(row, flush=True)
    RESULT.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print(report(rows))


def report(rows: list[dict]) -> str:
    lines = ["| model | format | mobile cycles | server cycles | MACs | layers (int8) | "
             "Q/DQ layers (server cycles) |", "|---|---|---|---|---|---|---|"]
    by = {(r["model"], r["format"], r["config"]): r for r in rows}
    for (model, fmt, config), r in by.items():
        if config != "mobile":
            continue
        s = by[(model, fmt, "server")]
        if "error" in r:
            lines.append(f"| {model} | {fmt} | error: {r['error'][:120]} | | | | |")
            continue
        lines.append(f"| {model} | {fmt} | {r['cycles']:,} | {s['cycles']:,} | {r['macs']:,} | "
                     f"{s['layers']} ({s['int8_layers']}) | {s['conversion_layers']} "
                     f"({s['conversion_cycles']:,}) |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=["export", "check", "report"])
    p.add_argument("--work", type=Path, default=Path("/tmp/npusim-quantized"))
    p.add_argument("--only", action="append", default=[], help="export only this model")
    a = p.parse_args()
    if a.step == "export":
        export(a.work, a.only)
    elif a.step == "check":
        check(a.work)
    else:
        print(report(json.loads(RESULT.read_text())["rows"]))


if __name__ == "__main__":
    main()
