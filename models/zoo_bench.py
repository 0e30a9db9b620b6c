"""The zoo's two full-depth graphs for the loader benchmark (``export_zoo.py --bench``).

- ``bert_base-ts-ort.onnx``: BERT-base, all 12 layers, TorchScript export with dynamic axes
  and ONNX Runtime's transformer optimizer (EmbedLayerNormalization, Attention,
  SkipLayerNormalization, BiasGelu): the ONNXim users' flow.
- ``llama3_8b-dynamo.onnx``: Llama-3-8B (32 layers, 4096 wide, GQA 32/8 heads, vocab
  128256) as a decoder with a KV cache, through the dynamo exporter without ever
  materialising its 8 billion weights: the model is built on the ``meta`` device (shapes, no
  storage), exported with ``optimize=False`` and saved without initializers (the
  exporter's own optimizer would read weight values), then optimized by onnxscript's
  optimizer (what the exporter runs) with the weights as graph inputs, so nothing folds
  into them; finally the weights become data-less initializers and a ``Transpose`` of a
  weight becomes a transposed initializer, as constant folding does with real weights.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx

import export_zoo as zoo

BERT_DIMS = {"batch_size": 1, "sequence_length": 128}
LLAMA_DIMS = {"batch_size": 1, "sequence_length": 128, "past_sequence_length": 128,
              "total_sequence_length": 256}


def fold_weight_transposes(model: onnx.ModelProto) -> int:
    """``Transpose(W)`` of a data-less initializer used only there -> one transposed
    initializer (what constant folding does when the data is there). Returns how many."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    uses: dict[str, int] = {}
    for node in g.node:
        for t in node.input:
            uses[t] = uses.get(t, 0) + 1
    keep, folded = [], 0
    for node in g.node:
        w = inits.get(node.input[0]) if node.op_type == "Transpose" and node.input else None
        if w is None or uses.get(w.name) != 1:
            keep.append(node)
            continue
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"),
                    list(reversed(range(len(w.dims)))))
        dims = [w.dims[p] for p in perm]
        del w.dims[:]
        w.dims.extend(dims)
        w.name = node.output[0]
        folded += 1
    del g.node[:]
    g.node.extend(keep)
    return folded


def export_bert_base(out: Path, publish: list[Path], work: Path, manifest: zoo.Manifest) -> None:
    entry = zoo.Entry("bert_base", "HF BertModel, BERT-base (12 layers), eager attention, "
                      "TorchScript export + ORT transformer optimizer (fully fused)",
                      lambda: zoo.build_bert("eager", layers=12),
                      lambda d: zoo.bert_macs(d, layers=12), BERT_DIMS, ort="bert", heads=12,
                      hidden=768, variants=("ts-ort",))
    zoo.export_entry(entry, out, manifest, publish, work)


def export_llama3_8b(out: Path, publish: list[Path], work: Path, manifest: zoo.Manifest) -> None:
    import onnxscript
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    c = zoo.LLAMA3_8B
    with torch.device("meta"):
        lm = LlamaForCausalLM(zoo._llama_config(c, "sdpa")).eval()
    dh = c["hidden"] // c["heads"]
    b = zoo._decoder_with_past(lm, c["layers"], c["kv_heads"], dh, True)
    dims = dict(LLAMA_DIMS)
    count_dims = {k: v for k, v in dims.items() if k != "total_sequence_length"}
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        b.module(*(a.to("meta") for a in b.test_args(count_dims)))
    counted = fc.get_total_flops() // 2
    analytic = zoo.llama_macs(count_dims, c)
    if counted != analytic:
        raise SystemExit(f"llama3_8b: analytic MACs {analytic} != torch's count {counted}")

    # the rotary frequencies are a buffer computed at construction: real, so the export
    # can trace them (the weights stay meta)
    lm.model.rotary_emb = LlamaRotaryEmbedding(lm.config)
    b.args = tuple(a.to("meta") for a in b.args)
    print("  llama3_8b: dynamo export on meta tensors", flush=True)
    program = zoo.export_dynamo(b, None, optimize=False)
    raw = work / "llama3_8b-dynamo-raw.onnx"
    program.save(str(raw), include_initializers=False, keep_initializers_as_inputs=True)
    model = onnx.load(str(raw))
    weight_inputs = {vi.name for vi in model.graph.input} - set(b.inputs)
    model = onnxscript.optimizer.optimize(model)
    model = zoo.weights_as_initializers(model, weight_inputs)
    folded = fold_weight_transposes(model)
    src = work / "llama3_8b-dynamo.onnx"
    onnx.save(model, str(src))
    fname = "llama3_8b-dynamo.onnx"
    size = zoo._save_graph_only(src, out / fname, fname[:-5])
    manifest.add({"file": fname, "model": "llama3_8b",
                  "description": f"HF LlamaForCausalLM, Llama-3-8B config {c}, SDPA, decoder "
                                 "with past and position_ids, LM head; exported on meta "
                                 f"tensors ({len(weight_inputs)} weights, {folded} weight "
                                 "transposes folded)",
                  "exporter": "torch.onnx.export(dynamo=True, optimize=False) on meta "
                              "tensors + onnxscript.optimizer.optimize",
                  "optimized": None, "dims": dims, "macs": analytic,
                  "macs_torch_count": counted, "bytes": size, "versions": zoo._versions()})
    for d in publish:
        d.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / fname, d / fname)
    print(f"  wrote {fname} ({size / 1e3:.0f} kB, {analytic:,} MACs at {dims})", flush=True)


def export_all(out: Path, publish: list[Path], work: Path) -> None:
    manifest = zoo.Manifest([out, *publish])
    export_llama3_8b(out, publish, work, manifest)
    export_bert_base(out, publish, work, manifest)
