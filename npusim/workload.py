"""Workloads of several requests: which model, its dims, when it arrives, where it runs.

A request file (TOML or JSON) lists requests; ``read_requests`` reads it::

    [[request]]
    model = "resnet50"          # an ONNX file or bundled model
    batch = 4                   # binds the model's "batch" dim (same as dims.batch)
    dims = { seq = 128 }        # other dynamic dims
    arrival_us = 20.0           # or arrival_cycles = 20000 (core cycles); default 0
    partition = 1               # optional: a core partition (scheduler.partitions)
    name = "cnn"                # optional label in the results
    count = 4                   # optional: this many copies,
    interval_us = 100.0         #   arriving this far apart (or interval_cycles)

    [[request]]
    model = "gpt2"              # an LLM (bundled gpt2, llama3_8b, or a language-model JSON)
    prompt = 512                # prompt tokens (prefill)
    generate = 32               # tokens to generate (the first comes from the prefill)
    context = 0                 # optional: tokens already in its KV cache on arrival
    llm = { kv_heads = 32 }     # optional architecture overrides (npusim.serving.spec)

JSON files hold ``{"requests": [{...}, ...]}`` with the same keys, or are ONNXim
models-list files (``{"models": [...]}``).

``read_models_list`` reads ONNXim's models-list JSON (``{"models": [{"name": ...,
"request_time": <ms>, "batch_size": ..., <dim name>: <value>, ...}]}``) so ONNXim users can
bring their experiments: a model is found by name among npusim's bundled models, or as
``<name>.onnx`` / ``<name>/<name>.onnx`` next to the list file; every other key binds the
model's symbolic dimension of that name (``batch_size`` binds ``batch``).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

from npusim.errors import NpusimError, NpusimWarning
from npusim.paths import existing_file, read_text

# The latest arrival a request may have (core cycles; 2**40 is 12.7 days at 1 GHz): the
# engine keeps times in int64 ticks of a fraction of a cycle, and the NoC packs a due
# cycle into 58 bits of a word, so later arrivals would overflow silently.
MAX_ARRIVAL_CYCLES = 1 << 40
MAX_COUNT = 1_000_000  # copies of one request a file's count may ask for

ONNXIM_RESERVED = ("name", "request_time", "batch_size", "partition_id")
REQUEST_KEYS = ("model", "batch", "dims", "arrival_us", "arrival_cycles", "partition", "name",
                "count", "interval_us", "interval_cycles", "prompt", "generate", "context", "llm")


@dataclass
class Request:
    """One inference request: a model, its dynamic dims and its arrival (core cycles).

    An LLM request (``generate`` > 0) names an architecture (``npusim.serving.spec``) and
    runs a prefill of ``prompt`` tokens after the ``context`` ones its KV cache already holds
    (``prompt = 1`` with a context is one generation step), then generates until
    ``generate`` tokens are out.
    """

    model: str
    dims: dict[str, int] = field(default_factory=dict)
    arrival_cycle: int = 0
    name: str = ""
    partition: int | None = None
    prompt: int = 0
    generate: int = 0
    context: int = 0
    llm: dict[str, int] = field(default_factory=dict)  # architecture overrides

    @property
    def is_llm(self) -> bool:
        return self.generate > 0

    @property
    def label(self) -> str:
        return self.name or Path(self.model).stem


def check_request(req, where: str):
    """What every request must hold, read from a file or built in Python (checked again by
    ``simulate_requests``): an arrival that is a whole cycle in range, token counts that
    are integers (an LLM request's context, prompt and generated tokens within its model's
    positions), positive dims. Returns an LLM request's architecture with its overrides
    (``npusim.serving.spec.LlmSpec``), else None."""
    from npusim.serving.spec import load_llm

    if not isinstance(req, Request):
        raise NpusimError(f"{where}: {req!r} is not a npusim.Request")
    if not isinstance(req.model, str) or not req.model:
        raise NpusimError(f"{where}: model = {req.model!r} must name an ONNX file, bundled "
                          f"model or LLM")
    if type(req.arrival_cycle) is not int or req.arrival_cycle < 0:
        raise NpusimError(f"{where}: arrival_cycle = {req.arrival_cycle!r} must be an integer "
                          f">= 0 (core cycles)")
    _arrival_in_range(req.arrival_cycle, f"{where}: arrival_cycle")
    for key in ("generate", "prompt", "context"):
        value = getattr(req, key)
        if type(value) is not int or value < 0:
            raise NpusimError(f"{where}: {key} = {value!r} must be an integer >= 0")
    if not isinstance(req.dims, dict) or any(type(v) is not int or v < 1
                                             for v in req.dims.values()):
        raise NpusimError(f"{where}: dims = {req.dims!r} must map names to positive integers")
    if not req.is_llm:
        for key in ("prompt", "context", "llm"):
            if getattr(req, key):
                raise NpusimError(f"{where}: {key} is only for LLM requests (generate >= 1)")
        return None
    if req.prompt < 1:
        raise NpusimError(f"{where}: prompt = {req.prompt} must be at least 1 token")
    if not isinstance(req.llm, dict):
        raise NpusimError(f"{where}: llm = {req.llm!r} must be a table of architecture "
                          f"overrides, e.g. llm = {{ kv_heads = 8 }}")
    spec = load_llm(req.model).with_overrides(req.llm, where)
    if req.context + req.prompt + req.generate - 1 > spec.max_positions:
        raise NpusimError(f"{where}: context {req.context} + prompt {req.prompt} + generate "
                          f"{req.generate} exceeds the {spec.max_positions} positions of "
                          f"{spec.name}")
    return spec


def _find_model(name: str, listing: Path) -> str:
    """The file of a models list's ``name``: next to the list (``NAME.onnx``,
    ``NAME/NAME.onnx``), else where ONNXim looks, ``models/NAME/NAME.onnx`` under
    ``$ONNXIM_HOME`` or the folder it runs in, and under the list's parent (ONNXim keeps its
    lists in ``example/`` and ``model_lists/`` beside ``models/``); else npusim's bundled
    model of that name, with a warning (another file than ONNXim would run), or a clear
    error listing them."""
    from npusim.frontend import resolve_model_path

    if Path(name).name != name or name in (".", ".."):
        raise NpusimError(f"{listing}: model name {name!r} is a path; a models list names "
                          f"models (NAME.onnx next to the list, ONNXim's models/NAME/, or a "
                          f"bundled one)")
    folder = listing.parent
    homes = [Path(os.environ["ONNXIM_HOME"])] if os.environ.get("ONNXIM_HOME") else []
    homes += [Path.cwd(), folder.parent]
    for candidate in (folder / f"{name}.onnx", folder / name / f"{name}.onnx", folder / name,
                      *(home / "models" / name / f"{name}.onnx" for home in homes)):
        if candidate.is_file():
            return str(candidate)
    bundled = resolve_model_path(name)
    warnings.warn(f"{listing}: no file for model {name!r} next to the list or "
                  f"in ONNXim's models/{name}/{name}.onnx (under $ONNXIM_HOME, the working "
                  f"folder or {folder.parent}); simulating npusim's bundled {bundled.name}",
                  NpusimWarning, stacklevel=3)
    return str(bundled)


def read_models_list(path: str | Path, core_freq_mhz: int) -> list[Request]:
    """Requests of an ONNXim models-list file; ``request_time`` is in milliseconds."""
    from npusim.frontend import data_sized_dims, symbolic_dims, value_inputs
    from npusim.frontend.data_sized import is_count_name

    path = existing_file(path, "models list")
    try:
        data = json.loads(read_text(path, "models list"))
    except json.JSONDecodeError as e:
        raise NpusimError(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
    entries = data.get("models") if isinstance(data, dict) else None
    if isinstance(entries, list) and not entries:
        raise NpusimError(f"{path}: the models list is empty; give at least one "
                          f"{{\"name\": ..., \"request_time\": ...}}")
    if not isinstance(entries, list):
        raise NpusimError(f"{path}: expected {{\"models\": [{{\"name\": ..., ...}}, ...]}}")
    requests = []
    for i, entry in enumerate(entries):
        where = f"{path}: models[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise NpusimError(f"{where} needs a \"name\" naming the model")
        try:
            model = _find_model(entry["name"], path)
        except NpusimError as err:
            raise NpusimError(f"{where}: {err}") from None
        model_dims = symbolic_dims(model)[1] + data_sized_dims(model) + value_inputs(model)
        dims = {}
        for key, value in entry.items():
            if key in ONNXIM_RESERVED and key != "batch_size":
                continue
            # ONNXim's batch_size binds a dim of that name (its own files' batch), else batch
            dim = "batch" if key == "batch_size" and key not in model_dims else key
            if dim not in model_dims and not is_count_name(dim, model_dims):
                if key == "batch_size" and value == 1:
                    continue  # a static model of batch 1
                raise NpusimError(f"{where}: key {key!r} binds no symbolic dim of "
                                  f"{entry['name']} (its dims: {', '.join(model_dims) or 'none'})")
            if type(value) is not int or value < 1:
                raise NpusimError(f"{where}: {key} = {value!r} must be a positive integer")
            dims[dim] = value
        ms = entry.get("request_time", 0)
        if not _finite_number(ms) or ms < 0:
            raise NpusimError(f"{where}: request_time = {ms!r} must be a finite number of "
                              f"ms >= 0")
        cycle = _arrival_in_range(round(ms * 1e-3 * core_freq_mhz * 1e6),
                                  f"{where}: request_time = {ms!r} ms")
        part = entry.get("partition_id")
        if part is not None and (type(part) is not int or part < 0):
            raise NpusimError(f"{where}: partition_id = {part!r} must be an integer >= 0")
        requests.append(Request(model=model, dims=dims, arrival_cycle=int(cycle),
                                name=f"{entry['name']}#{i}", partition=part))
    return requests


def read_requests(path: str | Path, core_freq_mhz: int) -> list[Request]:
    """Requests of a request file (see the module docstring), in file order."""
    import tomllib

    path = existing_file(path, "request file")
    text = read_text(path, "request file")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise NpusimError(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
        if isinstance(data, dict) and "models" in data:
            return read_models_list(path, core_freq_mhz)
        entries = data.get("requests") if isinstance(data, dict) else None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise NpusimError(f"{path}: not valid TOML: {e}") from None
        entries = data.get("request")
        extra = set(data) - {"request"}
        if extra:
            raise NpusimError(f"{path}: unknown top-level key(s) {sorted(extra)}; a request "
                              f"file holds [[request]] tables")
    if not isinstance(entries, list) or not entries:
        raise NpusimError(f"{path}: no requests (expected [[request]] tables in TOML, or "
                          f"{{\"requests\": [...]}} in JSON)")
    requests = []
    for i, entry in enumerate(entries):
        requests += _parse_request(entry, f"{path}: request {i + 1}", path.parent,
                                   core_freq_mhz)
    return requests


def _cycles(entry: dict, key: str, where: str, core_freq_mhz: int) -> int:
    """``<key>_us`` or ``<key>_cycles`` (exactly one, or neither: 0) in core cycles."""
    us, cyc = entry.get(f"{key}_us"), entry.get(f"{key}_cycles")
    if us is not None and cyc is not None:
        raise NpusimError(f"{where}: give {key}_us or {key}_cycles, not both")
    if cyc is not None:
        if type(cyc) is not int or cyc < 0:
            raise NpusimError(f"{where}: {key}_cycles = {cyc!r} must be an integer >= 0")
        return cyc
    if us is None:
        return 0
    if not _finite_number(us) or us < 0:
        raise NpusimError(f"{where}: {key}_us = {us!r} must be a finite number >= 0")
    return round(us * core_freq_mhz)


def _finite_number(x) -> bool:
    """An int or float that is not a bool, NaN or infinite."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _arrival_in_range(cycle: int, what: str) -> int:
    if cycle > MAX_ARRIVAL_CYCLES:
        shown = cycle if cycle < 10**16 else f"{float(cycle):.3g}"  # not 300 digits
        raise NpusimError(f"{what} is {shown} core cycles: must be at most "
                          f"{MAX_ARRIVAL_CYCLES} (2**40)")
    return cycle


def _positive(entry: dict, key: str, where: str, default: int, lo: int = 1) -> int:
    value = entry.get(key, default)
    if type(value) is not int or value < lo:
        raise NpusimError(f"{where}: {key} = {value!r} must be an integer >= {lo}")
    return value


def _parse_request(entry, where: str, folder: Path, core_freq_mhz: int) -> list[Request]:
    from npusim.serving.spec import is_llm

    if not isinstance(entry, dict):
        raise NpusimError(f"{where}: must be a table of keys ({', '.join(REQUEST_KEYS)})")
    unknown = sorted(set(entry) - set(REQUEST_KEYS))
    if unknown:
        raise NpusimError(f"{where}: unknown key(s) {unknown}; valid keys: "
                          f"{', '.join(REQUEST_KEYS)}")
    model = entry.get("model")
    if not isinstance(model, str) or not model:
        raise NpusimError(f"{where}: needs model = \"<ONNX file, bundled model or LLM>\"")
    local = folder / model
    if local.is_file():
        model = str(local)
    arrival = _cycles(entry, "arrival", where, core_freq_mhz)
    interval = _cycles(entry, "interval", where, core_freq_mhz)
    count = _positive(entry, "count", where, 1)
    if count > MAX_COUNT:  # (10**11 copies grew a list of requests until memory ran out)
        raise NpusimError(f"{where}: count = {count:,} copies is more than npusim simulates: "
                          f"at most {MAX_COUNT:,} (each copy is a request of its own)")
    _arrival_in_range(arrival + (count - 1) * interval,
                      f"{where}: the arrival of its last request (arrival + (count - 1) x "
                      f"interval)")
    part = entry.get("partition")
    if part is not None and (type(part) is not int or part < 0):
        raise NpusimError(f"{where}: partition = {part!r} must be an integer >= 0")
    name = entry.get("name", "")
    if not isinstance(name, str):
        raise NpusimError(f"{where}: name = {name!r} must be a string")
    generate = _positive(entry, "generate", where, 0, lo=0)
    dims = entry.get("dims", {})
    if not isinstance(dims, dict) or any(type(v) is not int or v < 1 for v in dims.values()):
        raise NpusimError(f"{where}: dims = {dims!r} must be a table of positive integers")
    dims = dict(dims)
    llm = entry.get("llm", {})
    if generate:
        for key in ("batch", "dims"):
            if key in entry:
                raise NpusimError(f"{where}: an LLM request takes prompt and generate, "
                                  f"not {key} (each request is one sequence)")
        if not is_llm(model):
            raise NpusimError(f"{where}: model = {model!r} is not a language model: give a "
                              f"bundled LLM or a language-model JSON (npusim models lists them)")
        prompt = _positive(entry, "prompt", where, 1)
        context = _positive(entry, "context", where, 0, lo=0)
    else:
        if "generate" in entry:  # given as 0
            raise NpusimError(f"{where}: generate = 0: an LLM request generates at least 1 "
                              f"token (without generate it is a plain model request)")
        for key in ("prompt", "context", "llm"):
            if key in entry:
                raise NpusimError(f"{where}: {key} is only for LLM requests (with generate)")
        if is_llm(model):
            raise NpusimError(f"{where}: model = {model!r} is a language model: an LLM "
                              f"request gives prompt and generate (tokens)")
        prompt = context = 0
        if "batch" in entry:
            dims["batch"] = _positive(entry, "batch", where, 1)
        from npusim.frontend import resolve_model_path

        try:
            model = str(resolve_model_path(model))
        except NpusimError as err:
            raise NpusimError(f"{where}: {err}") from None
    first = Request(model=model, dims=dims, arrival_cycle=arrival, name=name, partition=part,
                    prompt=prompt, generate=generate, context=context, llm=llm)
    check_request(first, where)
    return [replace(first, arrival_cycle=arrival + k * interval, llm=dict(llm),
                    name=f"{name}#{k}" if name and count > 1 else name)
            for k in range(count)]
