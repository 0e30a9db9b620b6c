"""Workloads of several requests: which model, its dims, and when it arrives.

``read_models_list`` reads ONNXim's models-list JSON (``{"models": [{"name": ...,
"request_time": <ms>, "batch_size": ..., <dim name>: <value>, ...}]}``) so ONNXim users can
bring their experiments: a model is found by name among npusim's bundled models, or as
``<name>.onnx`` / ``<name>/<name>.onnx`` next to the list file; every other key binds the
model's symbolic dimension of that name (``batch_size`` binds ``batch``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from npusim.errors import NpusimError

ONNXIM_RESERVED = ("name", "request_time", "batch_size", "partition_id")


@dataclass
class Request:
    """One inference request: a model, its dynamic dims and its arrival (core cycles)."""

    model: str
    dims: dict[str, int] = field(default_factory=dict)
    arrival_cycle: int = 0
    name: str = ""


def _find_model(name: str, folder: Path) -> str:
    from npusim.frontend import resolve_model_path

    for candidate in (folder / f"{name}.onnx", folder / name / f"{name}.onnx", folder / name):
        if candidate.is_file():
            return str(candidate)
    return str(resolve_model_path(name))  # a bundled model, or a clear error listing them


def read_models_list(path: str | Path, core_freq_mhz: int) -> list[Request]:
    """Requests of an ONNXim models-list file; ``request_time`` is in milliseconds."""
    from npusim.frontend import symbolic_dims

    path = Path(path)
    if not path.is_file():
        raise NpusimError(f"models list not found: '{path}'")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise NpusimError(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
    entries = data.get("models") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise NpusimError(f"{path}: expected {{\"models\": [{{\"name\": ..., ...}}, ...]}}")
    requests = []
    for i, entry in enumerate(entries):
        where = f"{path}: models[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise NpusimError(f"{where} needs a \"name\" naming the model")
        model = _find_model(entry["name"], path.parent)
        _, model_dims = symbolic_dims(model)
        dims = {}
        for key, value in entry.items():
            if key in ONNXIM_RESERVED and key != "batch_size":
                continue
            dim = "batch" if key == "batch_size" else key
            if dim not in model_dims:
                if key == "batch_size" and value == 1:
                    continue  # a static model of batch 1
                raise NpusimError(f"{where}: key {key!r} binds no symbolic dim of "
                                  f"{entry['name']} (its dims: {', '.join(model_dims) or 'none'})")
            if type(value) is not int or value < 1:
                raise NpusimError(f"{where}: {key} = {value!r} must be a positive integer")
            dims[dim] = value
        ms = entry.get("request_time", 0)
        if not isinstance(ms, (int, float)) or ms < 0:
            raise NpusimError(f"{where}: request_time = {ms!r} must be a number of ms >= 0")
        cycle = round(ms * 1e-3 * core_freq_mhz * 1e6)
        requests.append(Request(model=model, dims=dims, arrival_cycle=int(cycle),
                                name=f"{entry['name']}#{i}"))
    return requests
