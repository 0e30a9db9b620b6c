"""Energy tables as data: what one action costs in a technology (``configs/energy/<name>.toml``).

A table has sections of entries, each ``{ value = ..., source = "..." }`` (a bare number is
accepted too, with no source): ``mac.<datatype>`` pJ per multiply-accumulate,
``register.pj_per_bit`` per PE register bit accessed, ``sram.*`` per-bit access energy as a
function of capacity (log-log interpolation between the listed capacities; the scratchpad and
the accumulator are priced from it by their own capacity and row width), ``vector.<class>`` pJ
per element of a vector pass, ``noc.*`` pJ per flit bit through a router's crossbar and
input buffer and along an on-die or a die-to-die link,
``static.*`` leakage in mW. ``spad.read_pj``/``write_pj``, ``accum.read_pj``/``write_pj`` and
``register.pj_per_access`` are optional fixed per-access energies (an imported Accelergy ERT
gives these) that replace the curve or the per-bit value.

:func:`load_energy_table` reads a bundled name, a ``.toml`` path, or an Accelergy/Timeloop
``ERT.yaml`` / ``ERT_summary.yaml`` (``npusim.energy.ert``), and applies a config's
``energy.override`` entries; every error names the file or the entry and what is valid.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from npusim.errors import NpusimError
from npusim.paths import bundled_names, resolve_data_file

DATATYPES = ("int8", "int16", "fp16", "bf16", "fp32")
AUTO_DATATYPE = {1: "int8", 2: "fp16", 4: "fp32"}  # by config precision (bytes per element)
VECTOR_CLASSES = ("alu", "mul", "div", "transcendental")
VECTOR_OP_CLASS = {
    "add": "alu", "sub": "alu", "max": "alu", "min": "alu", "cast": "alu", "reduce": "alu",
    "mul": "mul", "div": "div", "recip": "div", "sqrt": "div", "rsqrt": "div",
    "exp": "transcendental", "log": "transcendental", "tanh": "transcendental",
    "sigmoid": "transcendental", "erf": "transcendental", "gelu": "transcendental",
    "pow": "transcendental",
}
"""The class that prices each vector op (``npusim.config.VECTOR_OPS``); IM2COL is a copy
pass, priced as ``alu``."""

LIST = "list"
# section -> entry -> (kind, required); kinds: "number" (>= 0) or LIST (of numbers)
SCHEMA: dict[str, dict[str, tuple[str, bool]]] = {
    "mac": {d: ("number", True) for d in DATATYPES},
    "register": {"pj_per_bit": ("number", True), "pj_per_access": ("number", False)},
    "sram": {"capacity_kib": (LIST, True), "read_pj_per_bit": (LIST, True),
             "write_pj_per_bit": (LIST, True)},
    "spad": {"read_pj": ("number", False), "write_pj": ("number", False)},
    "accum": {"read_pj": ("number", False), "write_pj": ("number", False)},
    "vector": {c: ("number", True) for c in VECTOR_CLASSES},
    "noc": {"router_pj_per_bit": ("number", True), "buffer_pj_per_bit": ("number", True),
            "link_pj_per_bit": ("number", True), "d2d_link_pj_per_bit": ("number", True)},
    "static": {"mac_mw": ("number", True), "vector_alu_mw": ("number", True),
               "register_mw_per_bit": ("number", True), "sram_mw_per_kib": ("number", True)},
}
_TOP = ("name", "technology_nm", "description", "source")
ENTRY_NAMES = tuple(f"{s}.{e}" for s, entries in SCHEMA.items() for e in entries)


@dataclass(frozen=True)
class EnergyTable:
    """Per-action energies of one technology; ``values`` and ``sources`` are keyed by the
    dotted entry name (``mac.int8``)."""

    name: str
    description: str
    source: str
    values: dict[str, Any] = field(hash=False)
    sources: dict[str, str] = field(hash=False)
    path: str = ""
    technology_nm: float = 0.0

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def mac_pj(self, datatype: str) -> float:
        return self.values[f"mac.{datatype}"]

    def register_pj(self, bits: int) -> float:
        """One access of a PE register of ``bits`` bits."""
        fixed = self.values.get("register.pj_per_access")
        return fixed if fixed is not None else self.values["register.pj_per_bit"] * bits

    def sram_pj(self, unit: str, write: bool, capacity_kib: float, width_bits: int) -> float:
        """One access of ``width_bits`` to an SRAM of ``capacity_kib`` (``unit`` "spad" or
        "accum"): the unit's fixed per-access energy if the table has one, else the
        per-bit curve at that capacity (log-log interpolation, extrapolated past the ends)."""
        fixed = self.values.get(f"{unit}.{'write' if write else 'read'}_pj")
        if fixed is not None:
            return fixed
        caps = self.values["sram.capacity_kib"]
        per_bit = self.values["sram.write_pj_per_bit" if write else "sram.read_pj_per_bit"]
        return _loglog(caps, per_bit, capacity_kib) * width_bits

    def with_overrides(self, overrides: dict[str, Any], origin: str = "config") -> EnergyTable:
        """A copy with single entries replaced (``{"mac.int8": 0.25}`` or nested
        ``{"mac": {"int8": 0.25}}``); each is checked like a value in the file."""
        flat = _flatten(overrides)
        if not flat:
            return self
        values, sources = dict(self.values), dict(self.sources)
        for key, value in flat.items():
            where = f"energy.override.{key}"
            if key not in ENTRY_NAMES:
                raise NpusimError(f"config field {where}: unknown energy entry {key!r}; "
                                  f"entries are {', '.join(ENTRY_NAMES)}")
            values[key] = _check_value(where, key, value)
            sources[key] = f"{origin} override"
        _check_sram(values, "energy.override")
        return replace(self, values=values, sources=sources)


def _loglog(xs, ys, x: float) -> float:
    """y at x on the piecewise-linear curve through (log x, log y), extended at the ends."""
    if len(xs) == 1:
        return ys[0]
    lx = math.log(x)
    i = 1
    while i < len(xs) - 1 and lx > math.log(xs[i]):
        i += 1
    x0, x1, y0, y1 = math.log(xs[i - 1]), math.log(xs[i]), math.log(ys[i - 1]), math.log(ys[i])
    return math.exp(y0 + (y1 - y0) * (lx - x0) / (x1 - x0))


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and not _is_entry(v):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _is_entry(v: dict) -> bool:
    return "value" in v


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_value(where: str, key: str, value: Any) -> Any:
    section, entry = key.split(".", 1)
    kind = SCHEMA[section][entry][0]
    if kind == LIST:
        if (not isinstance(value, (list, tuple)) or not value
                or not all(_is_number(v) and v > 0 for v in value)):
            raise NpusimError(f"{where} = {value!r} must be a non-empty list of positive numbers")
        return tuple(float(v) for v in value)
    if not _is_number(value) or value < 0:
        raise NpusimError(f"{where} = {value!r} must be a number >= 0")
    return float(value)


def _check_sram(values: dict, where: str) -> None:
    caps = values["sram.capacity_kib"]
    if list(caps) != sorted(set(caps)):
        raise NpusimError(f"{where}: sram.capacity_kib = {list(caps)} must be strictly increasing")
    for key in ("sram.read_pj_per_bit", "sram.write_pj_per_bit"):
        if len(values[key]) != len(caps):
            raise NpusimError(f"{where}: {key} has {len(values[key])} values, sram.capacity_kib "
                              f"has {len(caps)}: give one per capacity")


def table_from_dict(doc: dict, where: str) -> EnergyTable:
    """Check a table's TOML dict (its sections and entries) and build it."""
    unknown = [k for k in doc if k not in _TOP and k not in SCHEMA]
    if unknown:
        raise NpusimError(f"{where}: unknown section(s) {', '.join(unknown)}; allowed: "
                          f"{', '.join(_TOP + tuple(SCHEMA))}")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for section, entries in SCHEMA.items():
        sec = doc.get(section, {})
        if not isinstance(sec, dict):
            raise NpusimError(f"{where}: [{section}] must be a table")
        bad = [k for k in sec if k not in entries]
        if bad:
            raise NpusimError(f"{where}: [{section}] has unknown entr(y/ies) {', '.join(bad)}; "
                              f"allowed: {', '.join(entries)}")
        for entry, (_, required) in entries.items():
            key = f"{section}.{entry}"
            if entry not in sec:
                if required:
                    raise NpusimError(f"{where}: entry {key} is missing")
                continue
            raw = sec[entry]
            if isinstance(raw, dict):
                extra = [k for k in raw if k not in ("value", "source")]
                if "value" not in raw or extra:
                    raise NpusimError(f"{where}: entry {key} must be a number or "
                                      f"{{ value = ..., source = \"...\" }}")
                src = raw.get("source", "")
                if not isinstance(src, str):
                    raise NpusimError(f"{where}: entry {key}: source must be a string")
                raw, sources[key] = raw["value"], src
            else:
                sources[key] = ""
            values[key] = _check_value(f"{where}: entry {key}", key, raw)
    _check_sram(values, where)
    name = doc.get("name", "")
    if not isinstance(name, str) or not name:
        raise NpusimError(f"{where}: field name must be a non-empty string")
    tech = doc.get("technology_nm", 0)
    if not _is_number(tech) or tech < 0:
        raise NpusimError(f"{where}: field technology_nm = {tech!r} must be a number >= 0")
    return EnergyTable(name=name, description=str(doc.get("description", "")),
                       source=str(doc.get("source", "")), values=values, sources=sources,
                       path=where, technology_nm=float(tech))


@lru_cache(maxsize=1)
def energy_dir() -> Path:
    from npusim.paths import configs_dir

    return configs_dir() / "energy"


def list_energy_tables() -> list[str]:
    """Names of the bundled tables (``configs/energy/*.toml``)."""
    return bundled_names(energy_dir())


def _resolve(name: str) -> Path:
    return resolve_data_file(name, energy_dir(), "energy table", (".toml", ".yaml", ".yml"),
                             ", or give a .toml file or an Accelergy ERT.yaml / ERT_summary.yaml")


@lru_cache(maxsize=32)
def _load_cached(path: str, content: bytes) -> EnergyTable:
    p = Path(path)
    if p.suffix.lower() in (".yaml", ".yml"):
        from npusim.energy.ert import table_from_ert

        return table_from_ert(p)
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise NpusimError(f"{p}: not valid TOML: {e}") from None
    return replace(table_from_dict(doc, str(p)), path=str(p))


def load_energy_table(name: str, overrides: dict[str, Any] | None = None) -> EnergyTable:
    """A bundled table by name, a ``.toml`` file, or an Accelergy ``ERT.yaml`` /
    ``ERT_summary.yaml``, with a config's ``energy.override`` entries applied."""
    path = _resolve(str(name))
    try:
        content = path.read_bytes()  # the cache key: a rewritten file is read again
    except OSError as e:
        raise NpusimError(f"cannot read energy table {path}: {e.strerror}") from None
    return _load_cached(str(path), content).with_overrides(overrides or {})


def mac_datatype(cfg) -> str:
    """The MAC datatype a config prices: ``energy.datatype``, or by precision."""
    dt = cfg.energy.datatype
    return AUTO_DATATYPE[cfg.precision] if dt == "auto" else dt
