"""The sweep file: parse it, check every axis, and expand it into points.

A sweep file is TOML::

    name = "resnet18_arrays"            # optional; the file's stem by default
    [base]
    config = "mobile"                   # preset, .toml or ONNXim .json (relative to this file)
    set = { "memory.controller.page_policy" = "closed" }   # optional fixed overrides
    [workload]
    model = "resnet18"                  # bundled name or .onnx path; or requests = "list.json"
    # dims = { batch = 1 }              # fixed symbolic dims (fixed here or an axis, not both)
    [axes]                              # the full grid of these, one dimension each
    num_cores = [2, 4]
    batch = [1, 2, 4]                   # shorthand for dim.batch
    [zip.array]                         # axes varied together: one dimension "array"
    labels = ["8x8", "32x32"]           # optional coordinate values (default 0, 1, ...)
    core.systolic.width = [8, 32]
    core.systolic.height = [8, 32]

An axis key is a dotted config field, ``dim.NAME`` (or ``batch``) for a symbolic dim of
the model, ``model`` or ``requests``. Every point is checked before anything runs: an axis
value that is wrong wherever it appears (unknown key, out of range, missing model) rejects
the sweep naming it; a combination that is invalid only together becomes a failed point.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from npusim import __version__
from npusim.config import NpuConfig, config_to_dict, load_config
from npusim.config.schema import check_value_key
from npusim.errors import NpusimError
from npusim.paths import existing_file

TOP_KEYS = ("name", "description", "base", "workload", "axes", "zip")
BASE_KEYS = ("config", "set")
WORKLOAD_KEYS = ("model", "requests", "dims", "optimize", "mapping", "unsupported")
ZIP_LABELS = "labels"
# Points a grid may have: each is expanded, configured and checked before anything runs
# (10,000 take about 15 s), and each is a simulation of its own
MAX_POINTS = 100_000


@dataclass
class Axis:
    """One dimension of the result: one key (grid axis) or several varied together (zip)."""

    name: str
    keys: list[str]
    values: list[list[Any]]  # values[i] is the list of values of keys[i]
    labels: list[Any]
    zipped: bool = False  # a [zip.NAME] group: its keys become coordinates along NAME

    def __len__(self) -> int:
        return len(self.labels)

    def setting(self, i: int) -> dict[str, Any]:
        return {key: vals[i] for key, vals in zip(self.keys, self.values)}


@dataclass
class Workload:
    """What one point simulates: a model with its dims, or a request file (as
    ``npusim simulate --requests``: TOML/JSON requests or an ONNXim models list)."""

    model: str | None = None
    requests: str | None = None
    dims: dict[str, int] = field(default_factory=dict)
    optimize: str = "none"
    mapping: str | None = None
    unsupported: str = "error"

    def describe(self) -> dict[str, Any]:
        """The workload as it enters the point hash: files by content, not by name."""
        out: dict[str, Any] = {"dims": dict(sorted(self.dims.items())),
                               "optimize": self.optimize, "unsupported": self.unsupported,
                               "mapping": _file_digest(self.mapping) if self.mapping else None}
        if self.model is not None:
            out["model"] = _file_digest(_model_path(self.model))
        else:
            out["requests"] = _file_digest(self.requests)
            out["request_models"] = [_file_digest(m) for m in _request_models(self.requests)]
        return out


@dataclass
class Point:
    """One simulation of the sweep: its place in the grid, inputs, and the key it is stored by."""

    index: tuple[int, ...]
    setting: dict[str, Any]  # axis key -> value, for humans and the journal
    config: NpuConfig | None
    workload: Workload
    hash: str = ""
    error: str | None = None  # an invalid combination: recorded as failed, never run


@dataclass
class Sweep:
    name: str
    path: Path | None
    base_config: str
    base_set: dict[str, Any]
    workload: Workload
    axes: list[Axis]
    raw: dict[str, Any]
    description: str = ""

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a) for a in self.axes)

    def points(self) -> list[Point]:
        """Every point of the grid (C order over the axes), checked and hashed."""
        cache: dict[str, Any] = {}
        out = []
        for index in itertools.product(*(range(len(a)) for a in self.axes)):
            setting: dict[str, Any] = {}
            for axis, i in zip(self.axes, index):
                setting.update(axis.setting(i))
            out.append(self._point(index, setting, cache))
        return out

    def _point(self, index, setting, cache) -> Point:
        overrides = dict(self.base_set)
        wl = dataclasses.replace(self.workload, dims=dict(self.workload.dims))
        for key, value in setting.items():
            if key == "model":
                wl.model, wl.requests = value, None
            elif key == "requests":
                wl.model, wl.requests = None, value
            elif key.startswith("dim."):
                wl.dims[key[4:]] = value
            else:
                overrides[key] = value
        point = Point(index, setting, None, wl)
        try:
            point.config = load_config(self.base_config, overrides)
            _check_workload(wl, point.config, cache)
            point.hash = point_hash(point.config, wl)
        except NpusimError as err:
            point.error = str(err)
        return point


def point_hash(cfg: NpuConfig, workload: Workload) -> str:
    """sha256 of everything that decides a point's numbers: the full resolved config, the
    workload (model and list files by content) and the npusim version."""
    doc = {"config": config_to_dict(cfg), "workload": workload.describe(),
           "npusim": __version__}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------- loading


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file; errors name the file and the offending key."""
    path = existing_file(path, "sweep file")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise NpusimError(f"{path}: malformed TOML: {err}") from None
    except OSError as err:
        raise NpusimError(f"cannot read sweep file {path}: {err.strerror or err}") from None
    try:
        return sweep_from_dict(raw, base_dir=path.resolve().parent, default_name=path.stem,
                               path=path)
    except NpusimError as err:
        raise NpusimError(f"{path}: {err}") from None


def sweep_from_dict(raw: dict[str, Any], *, base_dir: Path = Path("."),
                    default_name: str = "sweep", path: Path | None = None) -> Sweep:
    """Build a sweep from the TOML-shaped dict; relative file names are from ``base_dir``
    (made absolute, so workers started elsewhere find them too)."""
    base_dir = base_dir.resolve()
    _only(raw, TOP_KEYS, "at the top level")
    base = _table(raw, "base")
    _only(base, BASE_KEYS, "in [base]")
    config = base.get("config", "mobile")
    if not isinstance(config, str):
        raise NpusimError(f"base.config = {config!r}: expected a preset name or a file name")
    if Path(config).suffix.lower() in (".toml", ".json"):
        config = str(_relative(config, base_dir))
    base_set = _flatten(_table(base, "set", "base.set"), "base.set")
    for key in base_set:
        _check_config_key(key, "base.set")
    try:
        load_config(config, base_set)
    except NpusimError as err:
        raise NpusimError(f"base: {err}") from None

    workload = _workload(_table(raw, "workload"), base_dir)
    axes = []
    for key, written in _flatten(_table(raw, "axes"), "axes").items():
        values = _axis_values(key, written, base_dir, f"axes.{key}")
        key = _axis_key(key)  # coordinates keep file names as written, not resolved
        axes.append(Axis(_dim_name(key), [key], [values], list(written)))
    for group, table in _table(raw, "zip").items():
        axes.append(_zip_axis(group, table, base_dir))
    _check_axis_names(axes, workload, base_set)
    size = math.prod(len(a) for a in axes)
    if size > MAX_POINTS:  # (10**7 points were expanded and checked for hours, silently)
        raise NpusimError(f"the grid has {size:,} points ("
                          f"{' x '.join(f'{len(a)} {a.name}' for a in axes)}): at most "
                          f"{MAX_POINTS:,}; split it into several sweeps")
    name = raw.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise NpusimError(f"name = {name!r}: expected a non-empty string")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise NpusimError(f"description = {description!r}: expected a string")
    return Sweep(name, path, config, base_set, workload, axes, raw, description)


def check_points(sweep: Sweep, points: list[Point]) -> None:
    """Reject the sweep when an axis value (or the base) fails at every point it is in:
    that is a bad value, not a bad combination."""
    if not points:
        return
    if all(p.error for p in points):
        bad = next(p for p in points if p.error)
        where = ", ".join(f"{k} = {v!r}" for k, v in bad.setting.items())
        raise NpusimError(f"every point is invalid, e.g. {where or 'the base'}: {bad.error}")
    for d, axis in enumerate(sweep.axes):
        for i in range(len(axis)):
            mine = [p for p in points if p.index[d] == i]
            if mine and all(p.error for p in mine):
                what = ", ".join(f"{k} = {v!r}" for k, v in axis.setting(i).items())
                raise NpusimError(f"axis {axis.name}: {what} is invalid: {mine[0].error}")


# --------------------------------------------------------------------------- pieces


def _only(table: dict, allowed, where: str) -> None:
    for key in table:
        if key not in allowed:
            raise NpusimError(f"unknown key {key!r} {where}; expected one of: "
                              f"{', '.join(allowed)}")


def _table(raw: dict, key: str, where: str | None = None) -> dict:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise NpusimError(f"{where or key} must be a table, got {value!r}")
    return value


def _flatten(table: dict, where: str, prefix: str = "") -> dict[str, Any]:
    """``{core = {systolic = {width = 8}}}`` and ``{"core.systolic.width" = 8}`` alike:
    TOML makes nested tables of unquoted dotted keys."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, where, dotted + "."))
        elif dotted in out:
            raise NpusimError(f"{where}: key {dotted} is given twice")
        else:
            out[dotted] = value
    return out


def _relative(name: str, base_dir: Path) -> Path:
    p = Path(name).expanduser()
    return p if p.is_absolute() else (base_dir / p)


def _check_config_key(key: str, where: str) -> None:
    try:
        check_value_key(key)
    except NpusimError as err:
        raise NpusimError(f"{where}: {err}") from None


def _workload(table: dict, base_dir: Path) -> Workload:
    _only(table, WORKLOAD_KEYS, "in [workload]")
    wl = Workload()
    for key in ("model", "requests", "optimize", "mapping", "unsupported"):
        if key in table:
            if not isinstance(table[key], str):
                raise NpusimError(f"workload.{key} = {table[key]!r}: expected a string")
            setattr(wl, key, table[key])
    if wl.model is not None:
        wl.model = _model_name(wl.model, base_dir)
    for key in ("requests", "mapping"):
        if getattr(wl, key) is not None:
            setattr(wl, key, str(_relative(getattr(wl, key), base_dir)))
    dims = _table(table, "dims", "workload.dims")
    for name, value in dims.items():
        _check_dim(f"workload.dims.{name}", value)
    wl.dims = dict(dims)
    from npusim.frontend.optimize import check_level

    try:
        check_level(wl.optimize)
    except NpusimError as err:
        raise NpusimError(f"workload.optimize: {err}") from None
    if wl.unsupported not in ("error", "zero-cost"):
        raise NpusimError(f"workload.unsupported = {wl.unsupported!r}: expected 'error' or "
                          f"'zero-cost'")
    return wl


def _model_name(model: str, base_dir: Path) -> str:
    """A bundled name stays a name (workers resolve it in their own install); a file name
    becomes a path relative to the sweep file."""
    if len(Path(model).parts) == 1 and not model.endswith(".onnx"):
        return model
    return str(_relative(model, base_dir))


def _check_dim(where: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise NpusimError(f"{where} = {value!r}: a dimension must be a positive integer")


def _axis_values(key: str, values: Any, base_dir: Path, where: str) -> list[Any]:
    if not isinstance(values, list) or not values:
        raise NpusimError(f"{where} = {values!r}: expected a non-empty list of values")
    key = _axis_key(key)
    if key.startswith("dim."):
        if not key[4:]:
            raise NpusimError(f"{where}: name the dimension, e.g. dim.seq")
        for v in values:
            _check_dim(where, v)
    elif key == "model":
        values = [_model_name(_string(where, v), base_dir) for v in values]
    elif key == "requests":
        values = [str(_relative(_string(where, v), base_dir)) for v in values]
    else:
        _check_config_key(key, where.split(".")[0])
        for v in values:
            if isinstance(v, (list, dict)):
                raise NpusimError(f"{where}: value {v!r} is not a single config value")
    kinds = {"number" if isinstance(v, (int, float)) and not isinstance(v, bool)
             else type(v).__name__ for v in values}
    if len(kinds) > 1:
        raise NpusimError(f"{where} = {values!r}: mixes value types ({', '.join(sorted(kinds))})")
    if len(set(map(repr, values))) != len(values):
        raise NpusimError(f"{where} = {values!r}: a value is given twice")
    return values


def _string(where: str, v: Any) -> str:
    if not isinstance(v, str):
        raise NpusimError(f"{where}: {v!r} is not a file or model name")
    return v


def _axis_key(key: str) -> str:
    return "dim.batch" if key == "batch" else key


def _dim_name(key: str) -> str:
    """The dataset dimension of a grid axis: the key, a symbolic dim by its bare name."""
    return key[4:] if key.startswith("dim.") else key


def _zip_axis(group: str, table: Any, base_dir: Path) -> Axis:
    where = f"zip.{group}"
    if not isinstance(table, dict):
        raise NpusimError(f"{where} must be a table of axes varied together")
    labels = table.get(ZIP_LABELS)
    members = _flatten({k: v for k, v in table.items() if k != ZIP_LABELS}, where)
    if not members:
        raise NpusimError(f"{where}: give at least one axis")
    values = [_axis_values(k, v, base_dir, f"{where}.{k}") for k, v in members.items()]
    keys = [_axis_key(k) for k in members]
    lengths = {k: len(v) for k, v in zip(keys, values)}
    if len(set(lengths.values())) > 1:
        raise NpusimError(f"{where}: zipped axes must have the same length, got "
                          + ", ".join(f"{k}: {n}" for k, n in lengths.items()))
    n = len(values[0])
    if labels is None:
        labels = list(range(n))
    elif not isinstance(labels, list) or len(labels) != n or len(set(map(repr, labels))) != n:
        raise NpusimError(f"{where}.labels must be a list of {n} distinct values")
    return Axis(group, keys, values, labels, zipped=True)


def _check_axis_names(axes: list[Axis], workload: Workload, base_set: dict[str, Any]) -> None:
    seen: dict[str, str] = {}
    for axis in axes:
        for key in axis.keys:
            if key in seen:
                raise NpusimError(f"axis key {key} appears twice ({seen[key]} and {axis.name})")
            seen[key] = axis.name
    for key, axis in seen.items():  # an axis would silently replace a fixed value
        fixed = (f"workload.dims.{key[4:]}" if key.startswith("dim.") and key[4:] in workload.dims
                 else f"base.set.{key}" if key in base_set else None)
        if fixed:
            raise NpusimError(f"{key} is both fixed ({fixed}) and varied (axis {axis}); "
                              f"keep one of them")
    names = [a.name for a in axes]
    for name in names:
        if names.count(name) > 1:
            raise NpusimError(f"two axes are named {name!r}")
    has_model_axis, has_requests_axis = "model" in seen, "requests" in seen
    if has_model_axis and has_requests_axis:
        raise NpusimError("axes 'model' and 'requests' exclude each other")
    has_model = has_model_axis or (workload.model is not None and not has_requests_axis)
    has_requests = has_requests_axis or (workload.requests is not None and not has_model_axis)
    if workload.model is not None and workload.requests is not None:
        raise NpusimError("workload: give either model or requests, not both")
    if not has_model and not has_requests:
        raise NpusimError("workload: give a model (workload.model or a 'model' axis) or a "
                          "requests file (workload.requests)")
    dim_axes = [k for k in seen if k.startswith("dim.")]
    if has_requests and (dim_axes or workload.dims):
        raise NpusimError(f"a requests workload takes its dims from the requests file; "
                          f"drop {', '.join(dim_axes) or 'workload.dims'}")


# --------------------------------------------------------------------------- workload checks


def _model_path(model: str) -> Path:
    from npusim.frontend import resolve_model_path

    return resolve_model_path(model)


def _file_digest(path: str | Path) -> dict[str, str]:
    p = Path(path)
    try:
        st = p.stat()
    except OSError as err:
        raise NpusimError(f"cannot read {p}: {err.strerror or err}") from None
    return {"name": p.name, "sha256": _sha256_of(str(p.resolve()), st.st_mtime_ns, st.st_size)}


@functools.lru_cache(maxsize=256)
def _sha256_of(path: str, mtime_ns: int, size: int) -> str:
    """Content hash, read once per file version (mtime and size are part of the key)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as err:
        raise NpusimError(f"cannot read {path}: {err.strerror or err}") from None


def _request_models(requests: str) -> list[str]:
    return _request_models_of(requests, _file_digest(requests)["sha256"])


@functools.lru_cache(maxsize=64)
def _request_models_of(requests: str, sha256: str) -> list[str]:
    """The model files a requests file names (they do not depend on the clock)."""
    from npusim.workload import read_requests

    from npusim.serving.spec import is_llm

    return sorted({r.model for r in read_requests(requests, 1000) if not is_llm(r.model)})


def _check_workload(wl: Workload, cfg: NpuConfig, cache: dict) -> None:
    """Everything about the workload that can be known without simulating it."""
    from npusim.frontend.data_sized import is_count_name

    if wl.mapping is not None and not Path(wl.mapping).is_file():
        raise NpusimError(f"mapping file {wl.mapping} not found")
    if wl.requests is not None:
        from npusim.workload import read_requests

        key = ("requests", wl.requests, cfg.core_freq_mhz)
        if key not in cache:
            cache[key] = read_requests(wl.requests, cfg.core_freq_mhz)
        return
    key = ("dims", wl.model)
    if key not in cache:
        from npusim.frontend import (data_sized_dims, symbolic_dims, value_inputs,
                                     with_example_dims)

        path = _model_path(wl.model)
        # a bundled model's example dims stand in for those not given, as in simulate()
        example = with_example_dims(path, None)[1]
        cache[key] = (symbolic_dims(path)[1], data_sized_dims(path), value_inputs(path),
                      example)
    wanted, counts, values, example = cache[key]
    unknown = sorted(d for d in set(wl.dims) - set(wanted) - set(values)
                     if not is_count_name(d, counts))
    if unknown:
        sized = f"; the sizes of its data-sized nodes: {', '.join(counts)}" if counts else ""
        valued = f"; its scalar integer inputs: {', '.join(values)}" if values else ""
        raise NpusimError(f"model {wl.model} has no dimension named "
                          f"{', '.join(map(repr, unknown))}; its symbolic dims are: "
                          f"{', '.join(wanted) or 'none'}{sized}{valued}")
    unbound = [d for d in wanted if d not in wl.dims and d not in example]
    if unbound:
        raise NpusimError(f"model {wl.model} has unbound symbolic dimension(s) "
                          f"{', '.join(map(repr, unbound))}; bind them in workload.dims or "
                          f"with dim.NAME axes")
