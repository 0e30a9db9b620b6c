"""Language-model architectures for serving, in ONNXim's language-model JSON.

LLM serving does not replay an exported graph: each iteration batches a different set of
requests with different KV-cache lengths, so npusim builds the iteration's graph from the
architecture (:mod:`npusim.serving.iteration`). The architecture is a JSON file with
ONNXim's keys (Hugging Face's ``num_key_value_heads`` is accepted for ``num_kv_heads``)::

    num_hidden_layers, hidden_size, num_attention_heads, num_kv_heads, intermediate_size,
    vocab_size, [head_dim], [max_position_embeddings]

plus npusim's own keys for what ONNXim assumes: ``norm`` ("layernorm" | "rmsnorm"),
``activation`` ("gelu": up, GELU, down | "swiglu": SiLU(gate) * up, down), ``bias`` and
``rotary``. Bundled: ``gpt2`` and ``llama3_8b`` (``models/llm/``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from npusim.errors import NpusimError
from npusim.paths import models_dir, read_text

ALIASES = {"num_key_value_heads": "num_kv_heads", "n_layer": "num_hidden_layers",
           "name": "model_name"}
INT_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
            "intermediate_size", "vocab_size", "head_dim", "max_position_embeddings")
CHOICES = {"norm": ("layernorm", "rmsnorm"), "activation": ("gelu", "swiglu")}
OTHER_KEYS = ("model_name", "source", "bias", "rotary")
# spec fields a request may override, e.g. {layers = 2, kv_heads = 32}
OVERRIDABLE = ("layers", "kv_heads", "heads", "hidden", "intermediate", "vocab")


@dataclass(frozen=True)
class LlmSpec:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_positions: int
    norm: str
    activation: str
    bias: bool
    rotary: bool

    def describe(self) -> str:
        kind = "MHA" if self.kv_heads == self.heads else f"GQA {self.heads}/{self.kv_heads}"
        return (f"{self.name}: {self.layers} layers, hidden {self.hidden}, {kind} heads of "
                f"{self.head_dim}, FFN {self.intermediate} {self.activation}")

    def with_overrides(self, overrides: dict, where: str) -> "LlmSpec":
        for key, value in overrides.items():
            if key not in OVERRIDABLE:
                raise NpusimError(f"{where}: llm.{key} cannot be overridden; valid: "
                                  f"{', '.join(OVERRIDABLE)}")
            if type(value) is not int or value < 1:
                raise NpusimError(f"{where}: llm.{key} = {value!r} must be a positive integer")
        spec = replace(self, **overrides)
        _check(spec, where)
        return spec


def bundled_llms() -> list[str]:
    return sorted(p.stem for p in (models_dir() / "llm").glob("*.json"))


def is_llm(name_or_path: str) -> bool:
    """True for a bundled LLM name or a language-model JSON file."""
    path = Path(name_or_path)
    return name_or_path in bundled_llms() or (path.suffix == ".json" and path.is_file())


def load_llm(name_or_path: str) -> LlmSpec:
    """A bundled architecture (``gpt2``, ``llama3_8b``) or a language-model JSON file."""
    path = Path(name_or_path)
    if name_or_path in bundled_llms():
        path = models_dir() / "llm" / f"{name_or_path}.json"
    elif not path.is_file():
        raise NpusimError(f"LLM '{name_or_path}' not found: give a language-model JSON file "
                          f"or a bundled one ({', '.join(bundled_llms())})")
    try:
        data = json.loads(read_text(path, "language model"))
    except json.JSONDecodeError as e:
        raise NpusimError(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise NpusimError(f"{path}: a language model must be a JSON object")
    data = {ALIASES.get(k, k): v for k, v in data.items()}
    for key in data:
        if key not in INT_KEYS + tuple(CHOICES) + OTHER_KEYS:
            raise NpusimError(f"{path}: unknown key {key!r}; valid keys: "
                              f"{', '.join(INT_KEYS + tuple(CHOICES) + OTHER_KEYS)}")
    for key in INT_KEYS[:5]:
        if key not in data:
            raise NpusimError(f"{path}: {key} is missing")
    for key in INT_KEYS:
        if key in data and (type(data[key]) is not int or data[key] < 1):
            raise NpusimError(f"{path}: {key} = {data[key]!r} must be a positive integer")
    for key, choices in CHOICES.items():
        if data.get(key, choices[0]) not in choices:
            raise NpusimError(f"{path}: {key} = {data[key]!r} must be one of {choices}")
    for key in ("bias", "rotary"):
        if key in data and type(data[key]) is not bool:
            raise NpusimError(f"{path}: {key} = {data[key]!r} must be true or false")
    heads = data["num_attention_heads"]
    if "head_dim" not in data and data["hidden_size"] % heads:
        raise NpusimError(f"{path}: hidden_size {data['hidden_size']} is not a multiple of "
                          f"num_attention_heads {heads}: give head_dim")
    spec = LlmSpec(
        name=str(data.get("model_name", path.stem)), layers=data["num_hidden_layers"],
        hidden=data["hidden_size"], heads=heads, kv_heads=data["num_kv_heads"],
        head_dim=data.get("head_dim", data["hidden_size"] // heads),
        intermediate=data["intermediate_size"], vocab=data.get("vocab_size", 32000),
        max_positions=data.get("max_position_embeddings", 1 << 20),
        norm=data.get("norm", "rmsnorm"), activation=data.get("activation", "swiglu"),
        bias=bool(data.get("bias", False)), rotary=bool(data.get("rotary", True)))
    _check(spec, str(path))
    return spec


def _check(spec: LlmSpec, where: str) -> None:
    from npusim.lowering import MAX_TENSOR_BYTES

    if spec.heads % spec.kv_heads:
        raise NpusimError(f"{where}: {spec.heads} attention heads cannot share "
                          f"{spec.kv_heads} KV heads (must divide them)")
    if spec.rotary and spec.head_dim % 2:
        raise NpusimError(f"{where}: rotary embedding needs an even head_dim, got {spec.head_dim}")
    # the largest weight, at one byte an element, within what the ONNX path takes
    largest = max(spec.vocab * spec.hidden, spec.hidden * spec.intermediate,
                  spec.hidden * spec.heads * spec.head_dim)
    if largest > MAX_TENSOR_BYTES:
        raise NpusimError(f"{where}: its largest weight holds {largest:,} elements, more than "
                          f"npusim simulates ({MAX_TENSOR_BYTES // 2**40} TiB at one byte each)")
