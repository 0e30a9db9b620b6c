"""Loading hardware configs: bundled presets, TOML files, ONNXim JSON files, and overrides.

Everything goes through one path: read the file into a plain dict (TOML shape), apply the
``dotted.key=value`` overrides, then validate and build (:func:`config_from_dict`). So an
override is checked exactly like a value written in the file.
"""

import copy
import difflib
import json
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from npusim.config.onnxim import onnxim_to_dict
from npusim.config.schema import NpuConfig, build, check_value_key, normalise, to_plain_dict
from npusim.errors import NpusimError
from npusim.paths import configs_dir, note_input

DEFAULT_PRESET = "mobile"

Overrides = Iterable[str] | Mapping[str, Any]
"""Either ``["core.systolic.width=16", ...]`` (values parsed as TOML) or
``{"core.systolic.width": 16, ...}`` (values used as given, handy for sweeps)."""


def list_presets() -> list[str]:
    """Names of the bundled presets (``configs/<name>.toml``)."""
    return sorted(p.stem for p in configs_dir().glob("*.toml"))


def config_to_dict(cfg: NpuConfig) -> dict:
    """Plain nested dict with the same nesting as the TOML file (JSON/TOML serialisable)."""
    return to_plain_dict(cfg)


def config_from_dict(data: Mapping[str, Any]) -> NpuConfig:
    """Validate a TOML-shaped dict, fill defaults, and build the config."""
    return build(NpuConfig, normalise(data))


def load_config(name_or_path: str | Path | None = None, overrides: Overrides = ()) -> NpuConfig:
    """Load a preset name, a ``.toml`` file or an ONNXim ``.json`` file, then apply overrides.

    ``None`` means the default preset (``mobile``). Errors name the file, the dotted field
    and what would be valid."""
    raw, source = _read(DEFAULT_PRESET if name_or_path is None else name_or_path)
    raw = merge_overrides(raw, overrides)
    if overrides:
        source += " with overrides"
    try:
        return config_from_dict(raw)
    except NpusimError as err:
        raise NpusimError(f"{source}: {err}") from None


def apply_overrides(cfg: NpuConfig, overrides: Overrides) -> NpuConfig:
    """A copy of `cfg` with overrides applied and validated (e.g. one point of a sweep)."""
    return config_from_dict(merge_overrides(config_to_dict(cfg), overrides))


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``dotted.key=value``; the value is read as a TOML value (``16``, ``true``,
    ``"x"``), and anything that is not valid TOML is taken as a bare string (``ideal``)."""
    if not isinstance(text, str):
        raise NpusimError(f"override {text!r} is not a string: expected 'dotted.key=value'")
    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key:
        raise NpusimError(f"override {text!r} is malformed: expected dotted.key=value, "
                          f"e.g. core.systolic.width=16")
    try:
        return key, tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value


def merge_overrides(raw: Mapping[str, Any], overrides: Overrides) -> dict:
    """Return a copy of the TOML-shaped dict `raw` with each override set in place."""
    out = copy.deepcopy(dict(raw))
    if isinstance(overrides, str):
        overrides = [overrides]  # a lone string is one override, not a list of characters
    pairs = overrides.items() if isinstance(overrides, Mapping) else map(parse_override, overrides)
    for key, value in pairs:
        if not isinstance(key, str):
            raise NpusimError(f"override key {key!r} is not a string: expected 'dotted.key'")
        try:
            check_value_key(key)
        except NpusimError as err:
            raise NpusimError(f"override {key}: {err}") from None
        table = out
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                where = ".".join(parts[: i + 1])
                raise NpusimError(f"override {key}: config field {where} is not a table")
        table[parts[-1]] = value
    return out


def _presets_hint() -> str:
    return "available presets: " + ", ".join(list_presets())


def _read(name_or_path: str | Path) -> tuple[dict, str]:
    """Read a preset or file into a TOML-shaped dict; returns (dict, source for messages)."""
    text = str(name_or_path)
    path = Path(text)
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        if suffix or "/" in text or "\\" in text:
            raise NpusimError(f"config {text!r} is neither a preset name nor a .toml/.json "
                              f"file; {_presets_hint()}")
        path = configs_dir() / f"{text}.toml"
        if not path.is_file():
            close = difflib.get_close_matches(text, list_presets(), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise NpusimError(f"unknown preset {text!r}{hint}; {_presets_hint()}")
    elif not path.is_file():
        problem = "is a directory, not a file" if path.is_dir() else "not found"
        raise NpusimError(f"config file {text} {problem}; give an existing .toml/.json file "
                          f"or a preset name; {_presets_hint()}")
    note_input(path, "the config file")
    try:
        content = path.read_bytes()
    except OSError as err:
        raise NpusimError(f"cannot read config file {path}: {err.strerror}") from None

    if suffix == ".json":
        try:
            data = json.loads(content)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            where = (f"line {err.lineno}, column {err.colno}: {err.msg}"
                     if isinstance(err, json.JSONDecodeError) else str(err))
            raise NpusimError(f"{path}: malformed JSON at {where}") from None
        try:
            return (onnxim_to_dict(data, name=path.stem, source=str(path), base_dir=path.parent),
                    f"{path} (ONNXim import)")
        except NpusimError as err:
            raise NpusimError(f"{path}: {err}") from None

    try:
        data = tomllib.loads(content.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise NpusimError(f"{path}: malformed TOML: {err}") from None
    data.setdefault("name", path.stem)
    _files_beside(data, path.parent)
    return data, str(path)


# config fields naming a file: a relative name is looked up beside the config file first
# (as ONNXim's icnt_config_path and a sweep's base.config are), then from the working folder
FILE_FIELDS = (("noc", "file"), ("energy", "table"))


def _files_beside(data: dict, folder: Path) -> None:
    for section, key in FILE_FIELDS:
        table = data.get(section)
        value = table.get(key) if isinstance(table, dict) else None
        if isinstance(value, str) and value and not Path(value).is_absolute():
            beside = folder / value
            if beside.is_file():
                table[key] = str(beside)
