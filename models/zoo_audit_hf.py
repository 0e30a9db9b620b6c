"""The second framework-export audit: 42 Hugging Face families models/zoo_audit.py does not
hold (decoders with and without a cache, MoE as batched matmuls and as eager expert loops,
Mamba, encoders, seq2seq, vision, speech; TorchScript, dynamo, dynamo at opset 23, ONNX
Runtime's optimizer), each file simulated through the CLI and its MACs compared with torch's.

Export step, in an environment with torch (2.13 CPU), transformers, onnxscript, onnxruntime:
    python models/zoo_audit_hf.py export --work DIR [--only NAME ...]   # a subprocess per case
Check step, in npusim's environment (the CLI, one run per file):
    python models/zoo_audit_hf.py check --work DIR [--only NAME ...] [--config mobile]
    python models/zoo_audit_hf.py macs NAME batch_size=1 sequence_length=16  # torch's count
Records: DIR/exports.json, DIR/checks-<config>.json, each run's JSON in DIR/out/.
Results: results/validation/hf_exports_audit.md. Builders from export_zoo / zoo_families.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
WORK = Path(".")  # --work: set by main()
ONNX_DIR, FULL, OUTS = WORK / "onnx", WORK / "full", WORK / "out"
NPUSIM = [sys.executable, "-m", "npusim"]
NPY = sys.executable

# data-sized nodes' counts (--dim, npusim.frontend.data_sized): Mixtral's eager expert loop
# finds which experts any token chose (4 of 4), then each expert's tokens: 32 tokens x 2
# choices spread evenly over 4 experts
COUNTS = {"mixtral_eager": {
    f"/lm/model/layers.{layer}/mlp/experts/NonZero{k}_output_0": 4 if k == "" else 16
    for layer in (0, 1) for k in ("", "_1", "_2", "_3", "_4")}}
RESULTS = HERE.parent / "results" / "validation" / "hf_exports_audit"

TOK = {0: "batch_size", 1: "sequence_length"}
tok = {"batch_size": 1, "sequence_length": 32}
dec = {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 24}
s2s = {"batch_size": 1, "sequence_length": 32, "decoder_sequence_length": 8}


# ----------------------------------------------------------------------------- builders
def _hf(cls_name, cfg_name, **cfg):
    import torch
    import transformers
    torch.manual_seed(0)
    config = getattr(transformers, cfg_name)(**cfg)
    return getattr(transformers, cls_name)(config).eval()


def build_causal_plain(cls_name, cfg_name, mask=True, **cfg):
    """Causal LM plain forward: input_ids (, attention_mask) -> logits (no cache); Mamba
    takes no attention mask (``mask=False``)."""
    import torch
    from export_zoo import Built
    lm = _hf(cls_name, cfg_name, **cfg)

    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, *attention_mask):
            masks = {"attention_mask": attention_mask[0]} if attention_mask else {}
            return self.lm(input_ids=input_ids, use_cache=False, **masks).logits

    names = ["input_ids", "attention_mask"][:1 + mask]

    def args(B, S):
        return (torch.randint(0, 1000, (B, S)),
                torch.ones(B, S, dtype=torch.long))[:1 + mask]

    return Built(Plain().eval(), args(2, 16), names, ["logits"], dict.fromkeys(names, TOK),
                 {"logits": TOK}, lambda d: args(d["batch_size"], d["sequence_length"]))


def build_causal_past(cls_name_, cfg_name_, kv_heads_, head_dim_, **cfg):
    import export_zoo as zoo
    lm = _hf(cls_name_, cfg_name_, **cfg)
    return zoo._decoder_with_past(lm, 2, kv_heads_, head_dim_, False)


def build_encoder(cls_name, cfg_name, token_type=False, **cfg):
    import zoo_families as f
    return f.build_hf_encoder(cls_name, cfg_name, token_type=token_type, **cfg)


def build_encoder_pooled(cls_name, cfg_name, **cfg):
    """An encoder whose forward calls its pooler unconditionally (SqueezeBERT): keep it and
    return both outputs."""
    import torch
    from export_zoo import Built
    model = _hf(cls_name, cfg_name, **cfg)

    class Enc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask):
            o = self.m(input_ids=input_ids, attention_mask=attention_mask)
            return o.last_hidden_state, o.pooler_output

    def args(B, S):
        return (torch.randint(0, 100, (B, S)), torch.ones(B, S, dtype=torch.long))

    return Built(Enc().eval(), args(2, 16), ["input_ids", "attention_mask"],
                 ["last_hidden_state", "pooler_output"], {"input_ids": TOK, "attention_mask": TOK},
                 {"last_hidden_state": TOK, "pooler_output": {0: "batch_size"}},
                 lambda d: args(d["batch_size"], d["sequence_length"]))


def build_seq2seq(cls_name, cfg_name, **cfg):
    import zoo_families as f
    return f.build_hf_seq2seq(cls_name, cfg_name, **cfg)


def build_vision(cls_name, cfg_name, image, out="last_hidden_state", dynamic=False, **cfg):
    import zoo_families as f
    return f.build_hf_vision(cls_name, cfg_name, image, dynamic, out=out, **cfg)


def build_audio(cls_name, cfg_name, samples=8000, **cfg):
    import torch
    import zoo_families as f
    from export_zoo import Built
    model = _hf(cls_name, cfg_name, **cfg)

    def args(B, S):
        return (torch.randn(B, S),)

    return Built(f._one_input(model, "input_values"), args(2, samples), ["input_values"],
                 ["last_hidden_state"], {"input_values": TOK},
                 {"last_hidden_state": {0: "batch_size"}},
                 lambda d: args(d["batch_size"], d["sequence_length"]))


def build_speech2text(**cfg):
    """Speech2TextModel: input_features (B, T, 80), attention_mask, decoder_input_ids."""
    import torch
    from export_zoo import Built
    model = _hf("Speech2TextModel", "Speech2TextConfig", **cfg)

    class S2T(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_features, decoder_input_ids):
            return self.m(input_features=input_features, decoder_input_ids=decoder_input_ids,
                          use_cache=False).last_hidden_state

    def args(B, T, D):
        return (torch.randn(B, T, cfg.get("input_feat_per_channel", 80)),
                torch.randint(0, 100, (B, D)))

    return Built(S2T().eval(), args(2, 64, 5), ["input_features", "decoder_input_ids"],
                 ["last_hidden_state"],
                 {"input_features": {0: "batch_size", 1: "sequence_length"},
                  "decoder_input_ids": {0: "batch_size", 1: "decoder_sequence_length"}},
                 {"last_hidden_state": {0: "batch_size", 1: "decoder_sequence_length"}},
                 lambda d: args(d["batch_size"], d["sequence_length"],
                                d["decoder_sequence_length"]))


def build_detr():
    import torch
    import zoo_families as f
    from export_zoo import Built
    model = _hf("DetrForObjectDetection", "DetrConfig", use_timm_backbone=False,
                use_pretrained_backbone=False, backbone=None,
                backbone_config={"model_type": "resnet", "depths": [1, 1, 1, 1],
                                 "hidden_sizes": [64, 128, 256, 512], "embedding_size": 32,
                                 "out_features": ["stage4"]},
                encoder_layers=2, decoder_layers=2, d_model=128, encoder_ffn_dim=256,
                decoder_ffn_dim=256, num_queries=20, encoder_attention_heads=4,
                decoder_attention_heads=4)

    class Det(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, pixel_values):
            o = self.m(pixel_values=pixel_values)
            return o.logits, o.pred_boxes

    def args(B):
        return (torch.randn(B, 3, 128, 128),)

    return Built(Det().eval(), args(2), ["pixel_values"], ["logits", "pred_boxes"],
                 {"pixel_values": {0: "batch_size"}},
                 {"logits": {0: "batch_size"}, "pred_boxes": {0: "batch_size"}},
                 lambda d: args(d["batch_size"]))


# ----------------------------------------------------------------------------- cases
SMALL = dict(hidden_size=256, intermediate_size=688, num_attention_heads=8,
             num_key_value_heads=2, num_hidden_layers=2, vocab_size=32000,
             max_position_embeddings=4096)
V = ("ts", "dynamo")


@dataclasses.dataclass
class Case:
    name: str
    family: str
    build: str          # python expression evaluated in this module
    dims: dict
    variants: tuple = V
    ort: str | None = None
    heads: int = 0
    hidden: int = 0
    example: dict | None = None  # export with example inputs at these dims (default B=2, S=16)


def cases() -> list[Case]:
    C = Case
    s = repr(SMALL)[1:-1].replace(": ", "=").replace("'", "")

    def plain(name, cls, cfg, extra="", **kw):
        return C(name, "hf-decoder", f"build_causal_plain('{cls}','{cfg}',**{{{repr(SMALL)[1:-1]}{extra}}})", tok, **kw)

    def past(name, cls, cfg, kv, hd, extra="", **kw):
        return C(name + "_past", "hf-decoder-past",
                 f"build_causal_past('{cls}','{cfg}',{kv},{hd},**{{{repr(SMALL)[1:-1]}{extra}}})", dec, **kw)

    return [
        # decoders (Llama-like small config)
        plain("gemma", "GemmaForCausalLM", "GemmaConfig", ",'head_dim':32", ort="gpt2", heads=8, hidden=256,
              variants=("ts", "dynamo", "ts-ort")),
        plain("gemma2", "Gemma2ForCausalLM", "Gemma2Config", ",'head_dim':32,'sliding_window':16"),
        past("gemma2", "Gemma2ForCausalLM", "Gemma2Config", 2, 32, ",'head_dim':32,'sliding_window':16"),
        plain("gemma3_text", "Gemma3ForCausalLM", "Gemma3TextConfig", ",'head_dim':32,'sliding_window':16"),
        past("gemma3_text", "Gemma3ForCausalLM", "Gemma3TextConfig", 2, 32, ",'head_dim':32,'sliding_window':16"),
        plain("phi3", "Phi3ForCausalLM", "Phi3Config", ",'vocab_size':32064,'pad_token_id':0"),
        past("phi3", "Phi3ForCausalLM", "Phi3Config", 2, 32, ",'vocab_size':32064,'pad_token_id':0"),
        plain("qwen3", "Qwen3ForCausalLM", "Qwen3Config", ",'head_dim':32"),
        past("qwen3", "Qwen3ForCausalLM", "Qwen3Config", 2, 32, ",'head_dim':32"),
        past("gemma", "GemmaForCausalLM", "GemmaConfig", 2, 32, ",'head_dim':32"),
        plain("qwen3_moe", "Qwen3MoeForCausalLM", "Qwen3MoeConfig",
              ",'head_dim':32,'moe_intermediate_size':128,'num_experts':4,'num_experts_per_tok':2,'decoder_sparse_step':1"),
        plain("mixtral", "MixtralForCausalLM", "MixtralConfig", ",'num_local_experts':4,'num_experts_per_tok':2"),
        past("mixtral", "MixtralForCausalLM", "MixtralConfig", 2, 32, ",'num_local_experts':4,'num_experts_per_tok':2"),
        plain("qwen3_moe_bmm", "Qwen3MoeForCausalLM", "Qwen3MoeConfig",
              ",'head_dim':32,'moe_intermediate_size':128,'num_experts':4,'num_experts_per_tok':2,'decoder_sparse_step':1,'experts_implementation':'batched_mm'"),
        plain("mixtral_bmm", "MixtralForCausalLM", "MixtralConfig", ",'num_local_experts':4,'num_experts_per_tok':2,'experts_implementation':'batched_mm'"),
        past("mixtral_bmm", "MixtralForCausalLM", "MixtralConfig", 2, 32, ",'num_local_experts':4,'num_experts_per_tok':2,'experts_implementation':'batched_mm'"),
        plain("mixtral_eager", "MixtralForCausalLM", "MixtralConfig", ",'num_local_experts':4,'num_experts_per_tok':2,'experts_implementation':'eager'", variants=("ts",)),
        plain("granite", "GraniteForCausalLM", "GraniteConfig"),
        plain("qwen3_op23", "Qwen3ForCausalLM", "Qwen3Config", ",'head_dim':32", variants=("dynamo23",)),
        past("qwen3_op23", "Qwen3ForCausalLM", "Qwen3Config", 2, 32, ",'head_dim':32", variants=("dynamo23",)),
        plain("gemma3_op23", "Gemma3ForCausalLM", "Gemma3TextConfig", ",'head_dim':32,'sliding_window':16", variants=("dynamo23",)),
        plain("olmo", "OlmoForCausalLM", "OlmoConfig"),
        plain("olmo2", "Olmo2ForCausalLM", "Olmo2Config"),
        plain("stablelm", "StableLmForCausalLM", "StableLmConfig"),
        C("falcon", "hf-decoder", "build_causal_plain('FalconForCausalLM','FalconConfig',hidden_size=256,num_attention_heads=8,num_hidden_layers=2,vocab_size=32000)", tok),
        C("falcon_past", "hf-decoder-past", "build_causal_past('FalconForCausalLM','FalconConfig',1,32,hidden_size=256,num_attention_heads=8,num_hidden_layers=2,vocab_size=32000)", dec),
        C("gptj", "hf-decoder", "build_causal_plain('GPTJForCausalLM','GPTJConfig',n_embd=256,n_head=8,n_layer=2,rotary_dim=16,vocab_size=32000)", tok),
        C("gptj_past", "hf-decoder-past", "build_causal_past('GPTJForCausalLM','GPTJConfig',8,32,n_embd=256,n_head=8,n_layer=2,rotary_dim=16,vocab_size=32000)", dec),
        C("gpt_bigcode", "hf-decoder", "build_causal_plain('GPTBigCodeForCausalLM','GPTBigCodeConfig',n_embd=256,n_head=8,n_layer=2,vocab_size=32000)", tok),
        C("codegen", "hf-decoder", "build_causal_plain('CodeGenForCausalLM','CodeGenConfig',n_embd=256,n_head=8,n_layer=2,rotary_dim=16,vocab_size=32000)", tok),
        C("mpt", "hf-decoder", "build_causal_plain('MptForCausalLM','MptConfig',d_model=256,n_heads=8,n_layers=2,vocab_size=32000)", tok),
        C("xglm", "hf-decoder", "build_causal_plain('XGLMForCausalLM','XGLMConfig',d_model=256,attention_heads=8,num_layers=2,ffn_dim=1024,vocab_size=32000)", tok),
        C("mamba", "hf-ssm", "build_causal_plain('MambaForCausalLM','MambaConfig',mask=False,hidden_size=256,num_hidden_layers=2,vocab_size=32000,state_size=16)", tok),
        # encoders
        C("mobilebert", "hf-encoder", "build_encoder('MobileBertModel','MobileBertConfig',token_type=True,num_hidden_layers=2)", tok,
          ("ts", "dynamo", "ts-ort"), ort="bert", heads=4, hidden=512),
        C("squeezebert", "hf-encoder", "build_encoder_pooled('SqueezeBertModel','SqueezeBertConfig',num_hidden_layers=2)", tok),
        C("funnel", "hf-encoder", "build_encoder('FunnelBaseModel','FunnelConfig',block_sizes=[1,1],num_decoder_layers=1,d_model=256,n_head=4,d_head=64,d_inner=1024)", tok),
        C("convbert", "hf-encoder", "build_encoder('ConvBertModel','ConvBertConfig',num_hidden_layers=2)", tok),
        C("longformer", "hf-encoder", "build_encoder('LongformerModel','LongformerConfig',num_hidden_layers=2,attention_window=[8,8],hidden_size=256,num_attention_heads=4,intermediate_size=1024)", tok),
        C("big_bird", "hf-encoder", "build_encoder('BigBirdModel','BigBirdConfig',num_hidden_layers=2,hidden_size=256,num_attention_heads=4,intermediate_size=1024,block_size=8,num_random_blocks=2)",
          {"batch_size": 1, "sequence_length": 128}),
        C("big_bird_sparse", "hf-encoder", "build_encoder('BigBirdModel','BigBirdConfig',num_hidden_layers=2,hidden_size=256,num_attention_heads=4,intermediate_size=1024,block_size=8,num_random_blocks=2)",
          {"batch_size": 1, "sequence_length": 128}, example={"batch_size": 2, "sequence_length": 128}),
        C("xlnet", "hf-encoder", "build_encoder('XLNetModel','XLNetConfig',n_layer=2,d_model=256,n_head=8,d_inner=1024)", tok),
        C("modernbert", "hf-encoder", "build_encoder('ModernBertModel','ModernBertConfig',num_hidden_layers=2,hidden_size=256,num_attention_heads=4,intermediate_size=512,local_attention=16)", tok),
        C("modernbert_op23", "hf-encoder", "build_encoder('ModernBertModel','ModernBertConfig',num_hidden_layers=2,hidden_size=256,num_attention_heads=4,intermediate_size=512,local_attention=16)", tok, ("dynamo23",)),
        C("mpnet", "hf-encoder", "build_encoder('MPNetModel','MPNetConfig',num_hidden_layers=2)", tok),
        # seq2seq
        C("marian", "hf-seq2seq", "build_seq2seq('MarianModel','MarianConfig',d_model=256,encoder_layers=2,decoder_layers=2,encoder_attention_heads=4,decoder_attention_heads=4,encoder_ffn_dim=1024,decoder_ffn_dim=1024,vocab_size=32000,decoder_start_token_id=0,pad_token_id=0)", s2s),
        C("pegasus", "hf-seq2seq", "build_seq2seq('PegasusModel','PegasusConfig',d_model=256,encoder_layers=2,decoder_layers=2,encoder_attention_heads=4,decoder_attention_heads=4,encoder_ffn_dim=1024,decoder_ffn_dim=1024,vocab_size=32000)", s2s),
        C("mbart", "hf-seq2seq", "build_seq2seq('MBartForConditionalGeneration','MBartConfig',d_model=256,encoder_layers=2,decoder_layers=2,encoder_attention_heads=4,decoder_attention_heads=4,encoder_ffn_dim=1024,decoder_ffn_dim=1024,vocab_size=32000)", s2s,
          ("ts", "dynamo", "ts-ort"), ort="bart", heads=4, hidden=256),
        # vision
        C("deit", "hf-vision", "build_vision('DeiTModel','DeiTConfig',64,image_size=64,patch_size=16,num_hidden_layers=2)", {"batch_size": 1},
          ("ts", "dynamo", "ts-ort"), ort="vit", heads=12, hidden=768),
        C("deit_op23", "hf-vision", "build_vision('DeiTModel','DeiTConfig',64,image_size=64,patch_size=16,num_hidden_layers=2)", {"batch_size": 1}, ("dynamo23",)),
        C("beit", "hf-vision", "build_vision('BeitModel','BeitConfig',64,image_size=64,patch_size=16,num_hidden_layers=2,use_relative_position_bias=True)", {"batch_size": 1}),
        C("dinov2", "hf-vision", "build_vision('Dinov2Model','Dinov2Config',56,image_size=56,patch_size=14,num_hidden_layers=2)", {"batch_size": 1}),
        C("convnextv2", "hf-vision", "build_vision('ConvNextV2Model','ConvNextV2Config',64,dynamic=True,depths=[1,1,1,1])", {"batch_size": 1, "height": 64, "width": 64}),
        C("levit", "hf-vision", "build_vision('LevitModel','LevitConfig',224)", {"batch_size": 1}),
        C("poolformer", "hf-vision", "build_vision('PoolFormerModel','PoolFormerConfig',64,dynamic=True,depths=[1,1,1,1])", {"batch_size": 1, "height": 64, "width": 64}),
        C("swinv2", "hf-vision", "build_vision('Swinv2Model','Swinv2Config',64,image_size=64,window_size=4,depths=[1,1,1,1])", {"batch_size": 1}),
        C("yolos", "hf-vision", "build_vision('YolosModel','YolosConfig',64,image_size=[64,64],num_hidden_layers=2,num_detection_tokens=10)", {"batch_size": 1}),
        C("detr", "hf-vision", "build_detr()", {"batch_size": 1}),
        # speech
        C("hubert", "hf-speech", "build_audio('HubertModel','HubertConfig',num_hidden_layers=2)", {"batch_size": 1, "sequence_length": 8000}),
        C("wavlm", "hf-speech", "build_audio('WavLMModel','WavLMConfig',num_hidden_layers=2)", {"batch_size": 1, "sequence_length": 8000}),
        C("speech_to_text", "hf-speech", "build_speech2text(d_model=256,encoder_layers=2,decoder_layers=2,encoder_attention_heads=4,decoder_attention_heads=4,encoder_ffn_dim=1024,decoder_ffn_dim=1024,vocab_size=10000)",
          {"batch_size": 1, "sequence_length": 64, "decoder_sequence_length": 8}),
    ]


# ----------------------------------------------------------------------------- export
def _short(e):
    text = [t for t in f"{type(e).__name__}: {e}".strip().splitlines() if t.strip()]
    return " / ".join(text[:2])[:400]


def export_one(case: Case) -> dict:
    import export_zoo as zoo
    zoo._hf_silence()
    FULL.mkdir(exist_ok=True)
    ONNX_DIR.mkdir(exist_ok=True)
    t0 = time.time()
    rec = {"family": case.family, "dims": case.dims, "files": {}}
    try:
        b = eval(case.build)
        if case.example:
            b = dataclasses.replace(b, args=b.test_args(case.example))
            rec["example"] = case.example
        rec["macs_torch_count"] = zoo.count_macs(b, case.dims)
    except Exception as e:  # noqa: BLE001
        rec["build_error"] = _short(e)
        traceback.print_exc(limit=3)
        return rec
    for variant in case.variants:
        exporter, _, opt = variant.partition("-")
        raw = FULL / f"{case.name}-{exporter}.onnx"
        fname = f"{case.name}-{variant}.onnx"
        entry = {"dims": zoo.dims_for(zoo.Entry(case.name, "", None, None, case.dims, None),
                                      "dynamo" if exporter.startswith("dynamo") else exporter)}
        t1 = time.time()
        try:
            if not raw.exists():
                try:
                    if exporter == "ts":
                        zoo.export_torchscript(b, raw, opset=17)
                    elif exporter.startswith("dynamo") and exporter != "dynamo":
                        zoo.export_dynamo(b, raw, opset=int(exporter[6:]))
                    else:
                        zoo.export_dynamo(b, raw)
                except Exception as e:  # noqa: BLE001
                    if not exporter.startswith("dynamo"):
                        raise
                    # dynamic shapes failed: export static (as a user would)
                    print(f"  {variant}: dynamic failed ({_short(e)[:200]}); static retry", flush=True)
                    entry["dynamic_error"] = _short(e)
                    import torch
                    with torch.no_grad():
                        torch.onnx.export(b.module, b.test_args(case.dims), str(raw), dynamo=True,
                                          input_names=b.inputs, output_names=b.outputs, verbose=False)
                    entry["static"] = True
                    entry["dims"] = {}
            src = raw
            if opt:
                src = FULL / fname
                e2 = zoo.Entry(case.name, "", None, None, case.dims, case.ort, heads=case.heads,
                               hidden=case.hidden)
                entry["optimized"] = zoo.ort_transformer_optimize(raw, src, e2)
            zoo._save_graph_only(src, ONNX_DIR / fname, fname[:-5])
            entry["file"] = fname
        except Exception as e:  # noqa: BLE001
            entry["export_error"] = _short(e)
            print(f"  {variant}: export failed: {_short(e)}", flush=True)
        entry["seconds"] = round(time.time() - t1, 1)
        rec["files"][variant] = entry
    rec["export_seconds"] = round(time.time() - t0, 1)
    return rec


def export(only, timeout):
    log = WORK / "exports.json"
    for case in cases():
        if only and case.name not in only:
            continue
        records = json.loads(log.read_text()) if log.is_file() else {}
        if case.name in records and not only:
            continue
        print(case.name, flush=True)
        tmp = WORK / f".rec-{case.name}.json"
        try:
            subprocess.run([sys.executable, __file__, "_one", case.name, str(tmp), "--work", str(WORK)], timeout=timeout,
                           check=False)
            rec = json.loads(tmp.read_text()) if tmp.is_file() else {"family": case.family,
                                                                       "build_error": "subprocess died"}
        except subprocess.TimeoutExpired:
            rec = {"family": case.family, "build_error": f"export timed out after {timeout}s"}
        tmp.unlink(missing_ok=True)
        records = json.loads(log.read_text()) if log.is_file() else {}
        records[case.name] = rec
        log.write_text(json.dumps(records, indent=1) + "\n")
        print(f"  -> {json.dumps(rec)[:300]}", flush=True)
    # keep disk small: the full-weight files are not needed after graph-only save


# ----------------------------------------------------------------------------- check
def check(only, config):
    records = json.loads((WORK / "exports.json").read_text())
    log = WORK / f"checks-{config}.json"
    rows = json.loads(log.read_text()) if log.is_file() else {}
    OUTS.mkdir(exist_ok=True)
    for name, rec in records.items():
        if only and name not in only:
            continue
        for variant, entry in rec.get("files", {}).items():
            if "file" not in entry:
                continue
            f = ONNX_DIR / entry["file"]
            names = json.loads(subprocess.run(
                [NPY, "-c", "import sys,json;from npusim.frontend import symbolic_dims;"
                 "print(json.dumps(sorted(symbolic_dims(sys.argv[1])[1])))", str(f)],
                capture_output=True, text=True).stdout or "[]")
            dims = dict(entry["dims"])
            if "total_sequence_length" in names and "total_sequence_length" not in dims and "past_sequence_length" in dims:
                dims["total_sequence_length"] = dims["past_sequence_length"] + dims["sequence_length"]
            dims = {k: v for k, v in dims.items() if k in names}
            dims.update(COUNTS.get(name, {}))
            out = OUTS / f"{entry['file'][:-5]}-{config}.json"
            out.unlink(missing_ok=True)
            cmd = [*NPUSIM, "simulate", str(f), "--config", config, "--json", str(out), "-q"]
            for k, v in dims.items():
                cmd += ["--dim", f"{k}={v}"]
            t0 = time.time()
            p = subprocess.run(cmd, capture_output=True, text=True)
            row = {"model": name, "variant": variant, "file": str(f), "symbolic": names,
                   "dims": dims, "cmd": " ".join(cmd), "rc": p.returncode,
                   "seconds": round(time.time() - t0, 1),
                   "traceback": "Traceback (most recent call last)" in (p.stderr + p.stdout),
                   "stderr": p.stderr[-3000:], "stdout": p.stdout[-1000:],
                   "macs_torch": rec.get("macs_torch_count")}
            if out.is_file():
                d = json.loads(out.read_text())
                row["macs"] = int(sum(int(l.get("macs", 0)) for l in d["layers"]))
                row["cycles"] = d["total_cycles"]
                row["warnings"] = d.get("warnings")
            rows[f"{name}/{variant}"] = row
            log.write_text(json.dumps(rows, indent=1) + "\n")
            print(f"{name}/{variant}: rc={p.returncode} macs={row.get('macs')} torch={row['macs_torch']} "
                  f"tb={row['traceback']} {p.stderr.strip().splitlines()[-1][:200] if p.stderr.strip() else ''}",
                  flush=True)


def _plain(text: str) -> str:
    """The first line of an exporter's message, without its terminal colours."""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text.splitlines()[0]).replace("|", "/")


def _num(v) -> str:
    return f"{v:,}" if isinstance(v, int) else ""


def report():
    """results/validation/hf_exports_audit.md: one row per file, from DIR's records and the
    notes kept beside the results (hf_exports_audit_notes.json)."""
    ex = json.loads((WORK / "exports.json").read_text())
    chk = {c: json.loads((WORK / f"checks-{c}.json").read_text())
           for c in ("mobile", "server") if (WORK / f"checks-{c}.json").is_file()}
    notes_file = RESULTS.with_name(RESULTS.name + "_notes.json")
    notes = json.loads(notes_file.read_text()) if notes_file.is_file() else {}
    lines = ["| model | file | mobile | npusim MACs | torch MACs | ratio | mobile cycles | "
             "server cycles | note |", "|---|---|---|---:|---:|---:|---:|---:|---|"]
    counts = {"files": 0, "ok": 0, "exact": 0, "traceback": 0}
    for name, rec in ex.items():
        for v, e in rec.get("files", {}).items():
            key = f"{name}/{v}"
            note = notes.get(key, notes.get(name, "")).replace("|", "/")
            if "export_error" in e:
                lines.append(f"| {name} | {v} | export failed in torch | | "
                             f"{rec.get('macs_torch_count', 0):,} | | | | "
                             f"{_plain(e['export_error'])[:100]} |")
                continue
            r, srv = chk.get("mobile", {}).get(key), chk.get("server", {}).get(key, {})
            if r is None:
                continue
            counts["files"] += 1
            counts["ok"] += r["rc"] == 0
            counts["traceback"] += bool(r["traceback"])
            macs, torch_macs = r.get("macs"), r.get("macs_torch")
            counts["exact"] += macs is not None and macs == torch_macs
            status = "ok" if r["rc"] == 0 else f"exit {r['rc']}"
            if r["rc"] != 0:
                note = "; ".join(x for x in ((r["stderr"].strip().splitlines() or [""])[0][:160]
                                             .replace("|", "/"), note) if x)
            ratio = f"{macs / torch_macs:.4f}" if macs and torch_macs else ""
            lines.append(f"| {name} | {e['file']} | {status} | {_num(macs)} | "
                         f"{_num(torch_macs)} | {ratio} | {_num(r.get('cycles'))} | "
                         f"{_num(srv.get('cycles'))} | {note} |")
    head = (f"{counts['files']} files simulated through the CLI: {counts['ok']} ok, "
            f"{counts['files'] - counts['ok']} stopped with one clear error, "
            f"{counts['traceback']} tracebacks; {counts['exact']} with exactly torch's MACs "
            f"(the others' notes say why).")
    text = RESULTS.with_suffix(".md")
    intro = text.read_text().split("\n## Table")[0] if text.is_file() else "# Audit\n"
    text.write_text(intro.rstrip() + "\n\n## Table\n\n" + head + "\n\n" + "\n".join(lines)
                    + "\n")
    print(f"written {text}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("step")
    p.add_argument("rest", nargs="*")
    p.add_argument("--only", action="append", default=[])
    p.add_argument("--config", default="mobile")
    p.add_argument("--timeout", type=int, default=420)
    p.add_argument("--work", default=".", help="folder of the exports and records")
    a = p.parse_args()
    global WORK, ONNX_DIR, FULL, OUTS
    WORK = Path(a.work).resolve()
    WORK.mkdir(parents=True, exist_ok=True)
    ONNX_DIR, FULL, OUTS = WORK / "onnx", WORK / "full", WORK / "out"
    if a.step == "_one":
        case = {c.name: c for c in cases()}[a.rest[0]]
        rec = export_one(case)
        Path(a.rest[1]).write_text(json.dumps(rec))
    elif a.step == "macs":  # torch's count of case NAME at dims k=v ...
        import export_zoo as zoo
        zoo._hf_silence()
        case = {c.name: c for c in cases()}[a.rest[0]]
        dims = {k: int(v) for k, v in (x.split("=") for x in a.rest[1:])}
        print(zoo.count_macs(eval(case.build), dims))
    elif a.step == "export":
        export(a.only, a.timeout)
    elif a.step == "check":
        check(a.only, a.config)
    elif a.step == "report":
        report()


if __name__ == "__main__":
    main()
