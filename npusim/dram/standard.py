"""DRAM standards as data: speed-bin files plus per-family timing-rule tables.

A *speed bin* (``configs/dram/<NAME>.toml``) gives the organisation and the timing values in
command-clock cycles; its *family* (``configs/dram/families/<FAMILY>.toml``) gives the timing
rules, each a row (level, prev commands, next commands, latency expression, window, sibling)
written in terms of the timing names. :func:`load_standard` joins the two, evaluates every
latency and expands the rows into one :class:`Rule` per (prev, next) command pair, which
:meth:`DramStandard.rule_arrays` turns into the dense int64 tables of the DRAM kernel.

Rule semantics (the kernel and :mod:`npusim.dram.checker` implement exactly these): when
command P issues at cycle t to bank (ch, rank, bg, bank), every rule with P in prev forbids
each command N in next on the rule's target nodes before t + latency. Target nodes: with
``sibling = false`` the node at ``level`` holding the issuing bank (a ``bankgroup`` rule hits
every bank of the group); with ``sibling = true`` every *other* node at ``level`` under the
same parent (other ranks of the channel, other bank groups of the rank, other banks of the
group). With ``window = k`` the bound is measured from the k-th most recent P at the node,
and only once k of them have issued (tFAW). PREA and REF are rank-wide: they issue to the
rank, and in a ``bankgroup`` or ``bank`` rule they stand for every bank group / bank of
that rank (as prev: all of them are targeted; as next: all of them must be ready).

Loader decisions (documented, enforced with a :class:`NpusimError` naming file and field):

* a latency must evaluate to >= 1 cycle. A derived expression that can go non-positive
  (e.g. a write-to-read turnaround between ranks, ``CWL + BL + RTRS - CL``) must say so
  with ``max(1, ...)``: a silent zero would hide a sign error in the table;
* ``window`` rules take exactly one prev command and no ``sibling``; rank-wide commands
  cannot be the prev of a window rule at the bank-group or bank level; ``sibling`` is not
  allowed at the channel level (channels are independent) nor with a rank-wide command at
  the bank-group or bank level;
* identical (level, prev, next, window, sibling) pairs from different rows are merged
  keeping the largest latency; plain rules get ``window = 1`` (the most recent prev), so
  ``window > 1`` marks exactly the windowed rules;
* timing sanity: all values are integers >= 0, the common keys (except RTRS) >= 1,
  RC >= RAS + RP, the _L value >= the _S value, REFI > RFC; the declared per-pin
  ``data_rate_mtps`` must match ``burst_bytes / BL`` bytes per command clock.

HBM2 pseudo channels: ``dq_bits`` is the JEDEC channel width (128 for HBM2) and
``pseudo_channels`` how many independent pseudo channels share it. Each pseudo channel
becomes its own npusim channel of ``channel_dq_bits = dq_bits / pseudo_channels`` bits with
its own data bus and banks, so ``sim_channels = channels * pseudo_channels`` and
``burst_bytes`` / ``bytes_per_cycle`` / ``columns`` are per npusim channel. (The two
pseudo channels of a real HBM2 channel share the row/column command buses; npusim does
not model that sharing.)
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from npusim.errors import NpusimError
from npusim.kernels.names import COMMANDS, LEVELS, RANK_WIDE  # the kernel's numbering
from npusim.paths import bundled_names, resolve_data_file
COMMON_TIMINGS = ("CL", "CWL", "RCD", "RP", "RAS", "RC", "BL", "CCD_S", "CCD_L", "RRD_S",
                  "RRD_L", "FAW", "WR", "WTR_S", "WTR_L", "RTP", "RTRS", "RFC", "REFI")
ORGANIZATION_KEYS = ("channels", "pseudo_channels", "ranks", "bank_groups", "banks_per_group",
                     "rows", "columns", "dq_bits", "burst_length")
MAX_CYCLES = 10_000_000  # no DRAM timing is anywhere near this many cycles
_TOP_REQUIRED = ("name", "family", "source", "freq_mhz", "data_rate_mtps", "organization",
                 "timing")
_TOP_OPTIONAL = ("notes", "wck_ck_ratio", "power")
_RULE_KEYS = ("level", "prev", "next", "latency", "window", "sibling", "note")
_ORG_LIMITS = {"channels": 1024, "pseudo_channels": 8, "ranks": 16, "bank_groups": 16,
               "banks_per_group": 64, "rows": 1 << 24, "columns": 1 << 16, "dq_bits": 4096,
               "burst_length": 64}


@dataclass(frozen=True)
class Rule:
    """One timing constraint between a pair of commands (indices into LEVELS / COMMANDS)."""

    level: int
    prev: int
    next: int
    latency: int
    window: int = 1
    sibling: bool = False
    expr: str = ""      # the latency expression it came from, for messages

    def describe(self) -> str:
        s = f"{COMMANDS[self.prev]}->{COMMANDS[self.next]} @{LEVELS[self.level]}"
        if self.sibling:
            s += " (other nodes)"
        if self.window > 1:
            s += f" window {self.window}"
        return f"{s}: {self.expr} = {self.latency}"


CURRENTS = ("idd0", "idd2n", "idd3n", "idd4r", "idd4w", "idd5b", "idd2p", "idd3p", "idd6",
            "ibeta")
"""IDD currents of a supply domain (mA per device); IDD2P/IDD3P/IDD6 are informational
(npusim does not power down) and ``ibeta`` (DRAMPower's split of IDD0 between activate and
precharge) defaults to IDD0."""
_DOMAIN_REQUIRED = ("volts",)
_POWER_KEYS = ("device_dq_bits", "io_pj_per_bit", "source")


@dataclass(frozen=True)
class SupplyDomain:
    """One supply (VDD, VPP, VDD1, VDD2...): its voltage and IDD currents in amperes."""

    name: str
    volts: float
    currents: dict[str, float] = field(hash=False)  # CURRENTS -> A per device

    def __getattr__(self, key: str) -> float:
        if key in CURRENTS:
            return self.currents[key]
        raise AttributeError(key)


@dataclass(frozen=True)
class DramPower:
    """The ``[power]`` section of a speed bin: supply domains, devices, I/O energy."""

    domains: tuple[SupplyDomain, ...]
    device_dq_bits: int
    io_pj_per_bit: float
    source: str


@dataclass(frozen=True)
class DramStandard:
    """One speed bin of one DRAM family, with its rules evaluated to cycles."""

    name: str
    family: str
    source: str
    freq_mhz: int             # command clock (CK)
    data_rate_mtps: int       # per data pin
    channels: int             # default JEDEC channels (an NPU config may override)
    pseudo_channels: int      # per channel; each is an npusim channel
    ranks: int
    bank_groups: int
    banks_per_group: int
    rows: int
    columns: int              # per row, in units of the npusim channel's data width
    dq_bits: int              # JEDEC channel data-bus width
    burst_length: int         # beats per burst
    timing: dict[str, int] = field(hash=False)
    rules: tuple[Rule, ...] = ()
    wck_ck_ratio: int = 1     # LPDDR5 / GDDR6: data clock over command clock (informational)
    notes: str = ""
    path: str = ""
    power: DramPower | None = field(default=None, hash=False)  # currents ([power]), if given

    # ---- derived organisation -------------------------------------------------------
    @property
    def sim_channels(self) -> int:
        """npusim channels of the default organisation (pseudo channels count separately)."""
        return self.channels * self.pseudo_channels

    @property
    def channel_dq_bits(self) -> int:
        """Data-bus width of one npusim channel (a pseudo channel for HBM2)."""
        return self.dq_bits // self.pseudo_channels

    @property
    def banks(self) -> int:
        """Banks per rank."""
        return self.bank_groups * self.banks_per_group

    @property
    def burst_bytes(self) -> int:
        """Bytes one RD/WR moves on one npusim channel."""
        return self.channel_dq_bits // 8 * self.burst_length

    @property
    def row_bytes(self) -> int:
        """Row (page) size seen by one npusim channel."""
        return self.columns * self.channel_dq_bits // 8

    def capacity_bytes(self, channels: int, ranks: int) -> int:
        """Bytes ``channels`` npusim channels of ``ranks`` ranks hold: what the address
        mapping covers (address bits above it are not decoded)."""
        return channels * ranks * self.banks * self.rows * self.row_bytes

    @property
    def bursts_per_row(self) -> int:
        return self.columns // self.burst_length

    @property
    def bytes_per_cycle(self) -> int:
        """Peak bytes per command-clock cycle of one npusim channel (burst_bytes / BL)."""
        return self.burst_bytes // self.timing["BL"]

    @property
    def peak_bytes_per_s(self) -> int:
        """Peak bandwidth of the default organisation (all npusim channels)."""
        return self.sim_channels * self.bytes_per_cycle * self.freq_mhz * 1_000_000

    def with_channels(self, channels: int) -> DramStandard:
        """The same standard with ``channels`` JEDEC channels (pseudo channels per channel kept)."""
        if not isinstance(channels, int) or channels < 1:
            raise NpusimError(f"{self.name}: channels = {channels!r} must be a positive integer")
        return replace(self, channels=channels)

    # ---- kernel tables ----------------------------------------------------------------
    def rule_arrays(self) -> dict[str, np.ndarray]:
        """int64 columns level, prev, next, latency, window, sibling sorted by prev, plus
        ``prev_start`` [len(COMMANDS) + 1]: rules of command c are rows prev_start[c] to
        prev_start[c + 1] (CSR by prev)."""
        order = sorted(range(len(self.rules)),
                       key=lambda i: (self.rules[i].prev, self.rules[i].next, self.rules[i].level,
                                      self.rules[i].sibling, self.rules[i].window))
        rs = [self.rules[i] for i in order]
        out = {
            "level": np.array([r.level for r in rs], dtype=np.int64),
            "prev": np.array([r.prev for r in rs], dtype=np.int64),
            "next": np.array([r.next for r in rs], dtype=np.int64),
            "latency": np.array([r.latency for r in rs], dtype=np.int64),
            "window": np.array([r.window for r in rs], dtype=np.int64),
            "sibling": np.array([int(r.sibling) for r in rs], dtype=np.int64),
        }
        counts = np.bincount(out["prev"], minlength=len(COMMANDS)) if rs else \
            np.zeros(len(COMMANDS), dtype=np.int64)
        out["prev_start"] = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return out

    def auto_precharge_cycles(self, column: str) -> int:
        """Cycles from a ``column`` command (RD or WR) with auto-precharge to the moment the
        bank precharges: the earliest PRE the standard allows after it at the same bank
        (tRTP after a read, write recovery after a write), as DRAMPower times it."""
        lat = [r.latency for r in self.rules_for(column, "PRE")
               if r.level == LEVELS.index("bank") and not r.sibling]
        if not lat:
            raise NpusimError(f"{self.name}: the family has no bank-level {column} -> PRE rule, "
                              f"so an auto-precharge has no time")
        return max(lat)

    def rules_for(self, prev: str | None = None, next: str | None = None) -> list[Rule]:
        """Rules filtered by command names (for inspection and tests)."""
        return [r for r in self.rules
                if (prev is None or COMMANDS[r.prev] == prev)
                and (next is None or COMMANDS[r.next] == next)]


# ---- locating files ---------------------------------------------------------------------
def dram_dir() -> Path:
    """Folder of the bundled speed-bin files (``configs/dram``)."""
    from npusim.paths import configs_dir

    return configs_dir() / "dram"


def list_standards() -> list[str]:
    """Names of the bundled speed bins."""
    return bundled_names(dram_dir())


def _resolve(name_or_path: str | Path) -> Path:
    return resolve_data_file(name_or_path, dram_dir(), "DRAM standard")


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise NpusimError(f"{path}: not valid TOML: {e}") from None


def _family_path(family: str, speed_bin: Path) -> Path:
    for d in (speed_bin.parent / "families", dram_dir() / "families"):
        p = d / f"{family}.toml"
        if p.is_file():
            return p
    known = sorted(q.stem for q in (dram_dir() / "families").glob("*.toml"))
    raise NpusimError(f"{speed_bin}: family = {family!r} has no rule file families/{family}.toml "
                      f"(known families: {', '.join(known)})")


# ---- validation helpers -----------------------------------------------------------------
def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_field(path: Path, where: str, v: Any, lo: int, hi: int) -> int:
    if not _is_int(v):
        raise NpusimError(f"{path}: field {where} = {v!r} must be an integer")
    if not lo <= v <= hi:
        raise NpusimError(f"{path}: field {where} = {v} is out of range [{lo}, {hi}]")
    return v


def _str_field(path: Path, where: str, v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise NpusimError(f"{path}: field {where} must be a non-empty string, got {v!r}")
    return v


def _check_keys(path: Path, where: str, table: dict, required, optional=()) -> None:
    missing = [k for k in required if k not in table]
    if missing:
        raise NpusimError(f"{path}: {where} is missing required field(s) {', '.join(missing)}")
    unknown = [k for k in table if k not in required and k not in optional]
    if unknown:
        raise NpusimError(f"{path}: {where} has unknown field(s) {', '.join(unknown)}; allowed: "
                          f"{', '.join(list(required) + list(optional))}")


# ---- latency expressions ----------------------------------------------------------------
def _eval_expr(expr: str | int, timing: dict[str, int], where: str) -> int:
    """Value of a latency expression: integers, timing names, + - *, max(), min(), ()."""
    if _is_int(expr):
        return expr
    if not isinstance(expr, str) or not expr.strip():
        raise NpusimError(f"{where}: latency must be an expression string or integer, "
                          f"got {expr!r}")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError:
        raise NpusimError(f"{where}: latency {expr!r} is not a valid expression "
                          f"(use timing names, integers, + - *, max(a, b), parentheses)") from None

    def ev(n: ast.AST) -> int:
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and _is_int(n.value):
            return n.value
        if isinstance(n, ast.Name):
            if n.id not in timing:
                raise NpusimError(f"{where}: latency {expr!r} uses unknown timing name {n.id!r} "
                                  f"(the speed bin defines {', '.join(sorted(timing))})")
            return timing[n.id]
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub, ast.Mult)):
            a, b = ev(n.left), ev(n.right)
            return a + b if isinstance(n.op, ast.Add) else a - b if isinstance(n.op, ast.Sub) \
                else a * b
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                and n.func.id in ("max", "min") and n.args and not n.keywords):
            vals = [ev(a) for a in n.args]
            return max(vals) if n.func.id == "max" else min(vals)
        raise NpusimError(f"{where}: latency {expr!r} has an unsupported construct "
                          f"({ast.dump(n)[:40]}...): use timing names, integers, + - *, "
                          f"max(a, b), min(a, b), parentheses")

    return ev(tree)


# ---- family rules -----------------------------------------------------------------------
def _command_list(path: Path, where: str, v: Any, allowed: tuple[str, ...]) -> list[str]:
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not items or not all(isinstance(c, str) for c in items):
        raise NpusimError(f"{path}: {where} must be a command name or a non-empty list of them, "
                          f"got {v!r}")
    for c in items:
        if c not in allowed:
            raise NpusimError(f"{path}: {where} names unknown command {c!r}; this family's "
                              f"commands are {', '.join(allowed)}")
    return items


def load_family_rules(path: Path, timing: dict[str, int]) -> tuple[tuple[str, ...], tuple[Rule, ...]]:
    """Commands and evaluated rules of a family file, for the given timing values."""
    doc = _read_toml(path)
    _check_keys(path, "the family file", doc, ("commands", "rule"), ("family", "source", "notes"))
    cmds = doc["commands"]
    if (not isinstance(cmds, list) or not cmds
            or not all(isinstance(c, str) and c in COMMANDS for c in cmds)):
        raise NpusimError(f"{path}: field commands = {cmds!r} must be a non-empty list drawn from "
                          f"{', '.join(COMMANDS)}")
    cmds = tuple(cmds)
    rows = doc["rule"]
    if not isinstance(rows, list) or not rows:
        raise NpusimError(f"{path}: needs at least one [[rule]] table")
    merged: dict[tuple, Rule] = {}
    for i, row in enumerate(rows):
        where = f"{path}: rule #{i + 1}"
        if not isinstance(row, dict):
            raise NpusimError(f"{where} must be a table")
        _check_keys(path, f"rule #{i + 1}", row, ("level", "prev", "next", "latency"),
                    ("window", "sibling", "note"))
        level = row["level"]
        if level not in LEVELS:
            raise NpusimError(f"{where}: level = {level!r} is not one of {', '.join(LEVELS)}")
        prev = _command_list(path, f"rule #{i + 1} field prev", row["prev"], cmds)
        nxt = _command_list(path, f"rule #{i + 1} field next", row["next"], cmds)
        window = row.get("window", 1)
        if not _is_int(window) or not 1 <= window <= 64:
            raise NpusimError(f"{where}: window = {window!r} must be an integer in [1, 64]")
        sibling = row.get("sibling", False)
        if not isinstance(sibling, bool):
            raise NpusimError(f"{where}: sibling = {sibling!r} must be true or false")
        if sibling and level == "channel":
            raise NpusimError(f"{where}: sibling = true is not allowed at level channel "
                              f"(channels are independent)")
        if window > 1 and (len(prev) != 1 or sibling):
            raise NpusimError(f"{where}: a window rule takes exactly one prev command and no "
                              f"sibling (got prev = {prev}, sibling = {sibling})")
        if level in ("bankgroup", "bank"):
            wide = [c for c in prev + nxt if c in RANK_WIDE]
            if wide and sibling:
                raise NpusimError(f"{where}: rank-wide command(s) {', '.join(wide)} cannot be "
                                  f"in a sibling rule at level {level}")
            if window > 1 and prev[0] in RANK_WIDE:
                raise NpusimError(f"{where}: rank-wide command {prev[0]} cannot open a window "
                                  f"rule at level {level}")
        expr = row["latency"]
        lat = _eval_expr(expr, timing, where)
        if lat < 1:
            raise NpusimError(f"{where} ({'/'.join(prev)} -> {'/'.join(nxt)} @{level}): latency "
                              f"{expr!r} evaluates to {lat} cycles; a rule must be >= 1 cycle "
                              f"(write max(1, ...) where a derived turnaround may vanish)")
        if lat > MAX_CYCLES:
            raise NpusimError(f"{where}: latency {expr!r} = {lat} cycles is implausibly large")
        for p in prev:
            for n in nxt:
                key = (LEVELS.index(level), COMMANDS.index(p), COMMANDS.index(n), window, sibling)
                r = Rule(key[0], key[1], key[2], lat, window, sibling, str(expr))
                if key not in merged or merged[key].latency < lat:
                    merged[key] = r
    return cmds, tuple(merged.values())


# ---- speed bins -------------------------------------------------------------------------
def _check_timing_sanity(path: Path, t: dict[str, int]) -> None:
    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise NpusimError(f"{path}: timing {msg}")

    need(t["RC"] >= t["RAS"] + t["RP"], f"RC = {t['RC']} must be >= RAS + RP = "
                                        f"{t['RAS'] + t['RP']}")
    for base in ("CCD", "RRD", "WTR"):
        need(t[f"{base}_L"] >= t[f"{base}_S"], f"{base}_L = {t[f'{base}_L']} must be >= "
                                               f"{base}_S = {t[f'{base}_S']}")
    need(t["REFI"] > t["RFC"], f"REFI = {t['REFI']} must be > RFC = {t['RFC']}")


def dram_standard(cfg) -> DramStandard | None:
    """The DRAM standard of an ``NpuConfig`` whose memory is "dram", else None."""
    return load_standard(cfg.memory.standard) if cfg.memory.type == "dram" else None


def decoded_bytes(cfg) -> int | None:
    """Bytes the address mapping of an ``NpuConfig``'s DRAM decodes (its channels and ranks
    of the standard: ``DramStandard.capacity_bytes``); an address above goes where its
    address modulo this would, as in Ramulator. None unless its memory is "dram"."""
    std = dram_standard(cfg)
    return None if std is None else std.capacity_bytes(cfg.memory.channels, cfg.memory.ranks)


def load_standard(name_or_path: str | Path) -> DramStandard:
    """A speed bin by bare name (``configs/dram/<name>.toml``) or by path to a TOML file.
    Parsed once per file version: a run asks for its standard several times (config checks,
    engine tables, energy), and the rule tables take milliseconds to build."""
    path = _resolve(name_or_path)
    key = (str(path.resolve()), _content(path))
    hit = _LOADED.get(key)
    if hit is not None and _content(hit[1]) == hit[2]:  # and its family file is unchanged
        return hit[0]
    std = _load_standard(path)
    family = _family_path(std.family, path)
    if len(_LOADED) > 64:
        _LOADED.clear()
    _LOADED[key] = (std, family, _content(family))
    return std


_LOADED: dict[tuple[str, bytes], tuple[DramStandard, Path, bytes]] = {}


def _content(path: Path) -> bytes:
    """The file's bytes (cache keys: a file rewritten within one clock tick keeps its mtime)."""
    try:
        return path.read_bytes()
    except OSError as e:
        raise NpusimError(f"cannot read {path}: {e.strerror}") from None


def _load_standard(path: Path) -> DramStandard:
    doc = _read_toml(path)
    _check_keys(path, "the speed-bin file", doc, _TOP_REQUIRED, _TOP_OPTIONAL)
    name = _str_field(path, "name", doc["name"])
    if name != path.stem:
        raise NpusimError(f"{path}: field name = {name!r} must equal the file name stem "
                          f"{path.stem!r}")
    family = _str_field(path, "family", doc["family"])
    source = _str_field(path, "source", doc["source"])
    freq = doc["freq_mhz"]
    if not _is_int(freq):
        raise NpusimError(f"{path}: field freq_mhz = {freq!r} must be an integer MHz (npusim "
                          f"clock domains are integer MHz)")
    _int_field(path, "freq_mhz", freq, 1, 100_000)
    rate = _int_field(path, "data_rate_mtps", doc["data_rate_mtps"], 1, 1_000_000)
    wck = _int_field(path, "wck_ck_ratio", doc.get("wck_ck_ratio", 1), 1, 16)
    notes = doc.get("notes", "")
    if not isinstance(notes, str):
        raise NpusimError(f"{path}: field notes must be a string")

    org = doc["organization"]
    if not isinstance(org, dict):
        raise NpusimError(f"{path}: [organization] must be a table")
    _check_keys(path, "[organization]", org, ORGANIZATION_KEYS)
    o = {k: _int_field(path, f"organization.{k}", org[k], 1, _ORG_LIMITS[k])
         for k in ORGANIZATION_KEYS}
    if o["dq_bits"] % o["pseudo_channels"] or (o["dq_bits"] // o["pseudo_channels"]) % 8:
        raise NpusimError(f"{path}: organization.dq_bits = {o['dq_bits']} must split into "
                          f"pseudo_channels = {o['pseudo_channels']} whole bytes")
    if o["columns"] % o["burst_length"]:
        raise NpusimError(f"{path}: organization.columns = {o['columns']} must be a multiple of "
                          f"burst_length = {o['burst_length']}")

    tim = doc["timing"]
    if not isinstance(tim, dict):
        raise NpusimError(f"{path}: [timing] must be a table")
    missing = [k for k in COMMON_TIMINGS if k not in tim]
    if missing:
        raise NpusimError(f"{path}: [timing] is missing required field(s) {', '.join(missing)}")
    timing: dict[str, int] = {}
    for k, v in tim.items():
        lo = 0 if (k not in COMMON_TIMINGS or k == "RTRS") else 1
        timing[k] = _int_field(path, f"timing.{k}", v, lo, MAX_CYCLES)
    _check_timing_sanity(path, timing)

    burst_bytes = o["dq_bits"] // o["pseudo_channels"] // 8 * o["burst_length"]
    if burst_bytes % timing["BL"]:
        raise NpusimError(f"{path}: timing.BL = {timing['BL']} cycles must divide the burst of "
                          f"{burst_bytes} B")
    # per-pin data rate x npusim channel width == bytes per command clock x clock
    lhs = rate * (o["dq_bits"] // o["pseudo_channels"])
    rhs = burst_bytes // timing["BL"] * 8 * freq
    if lhs != rhs:
        raise NpusimError(f"{path}: data_rate_mtps = {rate} does not match the burst timing: "
                          f"{burst_bytes} B every BL = {timing['BL']} cycles at {freq} MHz is "
                          f"{rhs // (o['dq_bits'] // o['pseudo_channels'])} MT/s per pin")

    fam_path = _family_path(family, path)
    _, rules = load_family_rules(fam_path, timing)
    power = _load_power(path, doc["power"]) if "power" in doc else None
    return DramStandard(
        name=name, family=family, source=source, freq_mhz=freq, data_rate_mtps=rate,
        timing=timing, rules=rules, wck_ck_ratio=wck, notes=notes, path=str(path), power=power,
        **o)


def _number(path: Path, where: str, v: Any, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise NpusimError(f"{path}: field {where} = {v!r} must be a number")
    if not lo <= v <= hi:
        raise NpusimError(f"{path}: field {where} = {v} is out of range [{lo}, {hi}]")
    return float(v)


def _load_power(path: Path, sec: Any) -> DramPower:
    """The ``[power]`` section: ``device_dq_bits``, ``io_pj_per_bit``, ``source`` and one
    table per supply domain (``[power.vdd]``: ``volts`` plus IDD currents in mA)."""
    if not isinstance(sec, dict):
        raise NpusimError(f"{path}: [power] must be a table")
    domains = []
    for key, value in sec.items():
        if key in _POWER_KEYS:
            continue
        if not isinstance(value, dict):
            raise NpusimError(f"{path}: power.{key} is not one of {', '.join(_POWER_KEYS)} "
                              f"nor a supply-domain table ([power.vdd]: volts, idd0, ...)")
        _check_keys(path, f"[power.{key}]", value, _DOMAIN_REQUIRED, CURRENTS)
        volts = _number(path, f"power.{key}.volts", value["volts"], 0.1, 5.0)
        amps = {c: _number(path, f"power.{key}.{c}", value.get(c, 0), 0, 100_000) / 1000
                for c in CURRENTS}
        if "ibeta" not in value:
            amps["ibeta"] = amps["idd0"]
        domains.append(SupplyDomain(key, volts, amps))
    missing = [k for k in _POWER_KEYS if k not in sec]
    if missing or not domains:
        raise NpusimError(f"{path}: [power] needs {', '.join(_POWER_KEYS)} and at least one "
                          f"supply-domain table such as [power.vdd] (missing: "
                          f"{', '.join(missing) or 'a domain'})")
    if not any(d.idd0 > 0 and d.idd3n > 0 for d in domains):
        raise NpusimError(f"{path}: [power] has no domain with idd0 and idd3n: the activate and "
                          f"background currents are needed")
    return DramPower(
        domains=tuple(domains),
        device_dq_bits=int(_int_field(path, "power.device_dq_bits", sec["device_dq_bits"], 1,
                                      4096)),
        io_pj_per_bit=_number(path, "power.io_pj_per_bit", sec["io_pj_per_bit"], 0, 1000),
        source=_str_field(path, "power.source", sec["source"]))
