"""Import ONNXim hardware configs (github.com/PSAL-POSTECH/ONNXim, folder ``configs/``).

ONNXim keys and units, as read by its ``SimulationConfig.h``, ``Common.cc`` and ``Sram.cc``:

====================  =======================================  ==============================
ONNXim key            unit                                     npusim field
====================  =======================================  ==============================
num_cores             count                                    num_cores
core_freq             MHz                                      core_freq_mhz
core_width            PEs (array columns)                      core.systolic.width
core_height           PEs (array rows)                         core.systolic.height
spad_size             KiB per core (ONNXim: ``spad_size KB``)  core.spad_kib
accum_spad_size       KiB per core                             core.accum_kib
vector_process_bit    bits per vector pass                     core.vector.lanes * alus
*_latency             core cycles per vector pass              core.vector.latency.<op>
dram_type             simple / ramulator / ramulator2 / ideal  memory.type (simple / dram / ideal)
dram_config_path      Ramulator 2 YAML / Ramulator .cfg        memory.standard (family, density)
dram_freq             MHz                                      memory.freq_mhz (picks standard)
dram_channels         count                                    memory.channels (x pseudo chans)
dram_latency          DRAM cycles (ONNXim SimpleDram)          memory.latency
dram_req_size         bytes per memory request                 dma.request_bytes
dram_nbl              DRAM cycles per request (burst)          memory.channel_bytes_per_cycle
dram_size             GB (ONNXim's language scheduler checks)  memory.capacity_gib
icnt_type             simple / booksim2                        noc.type (crossbar / the
                                                               icnt_config_path network)
icnt_config_path      Booksim2 file (booksim2)                 noc.* (npusim.noc.booksim)
icnt_injection_ports  count                                    noc.core_ports
  _per_core
(none: a core's requests  unbounded                                dma.max_outstanding = 65536
  in flight)
icnt_freq             MHz                                      noc.freq_mhz
icnt_latency          interconnect cycles                      noc.latency
precision             bytes per element                        precision
scheduler             simple / time_multiplex / spatial_split  scheduler.policy
partition             {"core_N": partition id}                 scheduler.partitions
====================  =======================================  ==============================

Both layouts ONNXim has used are accepted: per-core tables under ``core_config.core_N``
(current) and core keys at the top level (older configs). The result is a TOML-shaped dict
that goes through the same validation as a preset. Keys that only steer ONNXim's logging,
or that ONNXim reads and never uses, are accepted with no effect (SILENT_KEYS); hardware
keys npusim cannot model yet (UNMODELLED: mac_latency, ...) are one warning each when they
differ from ONNXim's default.
"""

import dataclasses
import difflib
import math
import re
import warnings
from pathlib import Path
from typing import Any

from npusim.config.schema import MHZ_RANGE, PRECISIONS, Rule, VectorConfig
from npusim.errors import NpusimError, NpusimWarning

# Keys that only steer ONNXim's logging, or that ONNXim itself reads and never uses: accepted
# with no effect.
SILENT_KEYS = {
    "core_print_interval", "dram_print_interval", "icnt_print_interval",  # logging
    "sram_width", "scalar_add_latency",  # read by ONNXim's parser, used nowhere in it
    "layernorm_latency", "softmax_latency",  # in ONNXim's struct, never read from the file
    "sram_size",  # the single SRAM of older configs (spad_size since)
    "layout",  # NHWC/NCHW: npusim's lowering decides the layout
    "dram_config_path", "icnt_config_path",  # read below where they matter
}
# Hardware keys npusim cannot model yet, with ONNXim's default: a value other than the
# default is one warning naming the key (the run goes on with npusim's behaviour); a value
# of the wrong type or out of range is an error, as for any other key.
UNMODELLED = {
    "mac_latency": (1, Rule("int", 1, 10000), "a vector multiply-accumulate is a mul and an add"),
    "scalar_mul_latency": (1, Rule("int", 1, 10000),
                           "per-row scalar steps use the vector latencies"),
    "full_precision": (4, Rule("int", 1, 16), "accumulators are 32-bit"),
}

MAX_OUTSTANDING = 65536  # dma.max_outstanding's largest value: ONNXim has no bound

# ONNXim vector latency key -> npusim vector ops it sets. Ops not listed here (log, tanh,
# sigmoid, erf, pow, cast) keep npusim's defaults, since ONNXim has no key for them.
LATENCY_KEYS = {
    "add_latency": ("add", "sub", "max", "min"),
    "mul_latency": ("mul",),
    "div_latency": ("div", "recip"),
    "exp_latency": ("exp",),
    "gelu_latency": ("gelu",),
    "add_tree_latency": ("reduce",),
    "scalar_sqrt_latency": ("sqrt", "rsqrt"),
}
CORE_KEYS = ("core_type", "core_width", "core_height", "spad_size", "accum_spad_size",
             "vector_process_bit", "sram_width", "scalar_add_latency", "layernorm_latency",
             "softmax_latency", "sram_size", "mac_latency", "scalar_mul_latency",
             *LATENCY_KEYS)
TOP_KEYS = ("num_cores", "core_freq", "core_config", "dram_type", "dram_freq",
            "dram_channels", "dram_req_size", "dram_latency", "dram_nbl", "dram_size",
            "icnt_type", "icnt_latency", "icnt_freq", "icnt_injection_ports_per_core",
            "precision", "scheduler", "partition",
            *(k for k in SILENT_KEYS | set(UNMODELLED) if k not in CORE_KEYS))

# ONNXim's core types -> core.systolic.dataflow, which the config's validation checks
# against the dataflows npusim models (kernels/isa.py DATAFLOWS)
CORE_TYPES = {"systolic_ws": "ws", "systolic_os": "os"}
# "ideal" is npusim's own extra value; "ramulator"/"ramulator2" are the cycle-level DRAM
# of the standard their dram_config_path describes (see _dram_memory)
DRAM_TYPES = ("simple", "ramulator", "ramulator2", "ideal")
# ONNXim's simple interconnect is npusim's crossbar; booksim2's network lives in the
# icnt_config_path file (_booksim_network), the crossbar standing in only when it has none.
ICNT_TYPES = {"simple": "crossbar", "booksim2": "crossbar"}
# ONNXim "simple" runs one layer at a time, requests in arrival order: npusim's fifo;
# "time_multiplex" round-robins between requests; "spatial_split" (two halves) and
# "partition_cpu" (the cores of each "partition" entry serve the requests of that
# partition) give each partition its own cores: npusim's spatial policy.
SCHEDULERS = {"simple": "fifo", "fifo": "fifo", "time_multiplex": "time-shared",
              "spatial_split": "spatial", "partition_cpu": "spatial"}

# Values for keys a config leaves out: ONNXim's own defaults where it has them
# (SimulationConfig.h: dram_nbl 1, icnt_injection_ports_per_core 1, every vector latency
# 1), else the value every ONNXim sample config uses.
DEFAULTS = {
    "core_type": "systolic_ws",
    "dram_req_size": 32,     # every ONNXim sample config uses 32 B
    "dram_latency": 10,      # every ONNXim sample config uses 10 DRAM cycles
    "dram_nbl": 1,           # ONNXim's default
    "icnt_type": "simple",
    "icnt_latency": 1,       # ONNXim sample configs use 1
    "scheduler": "simple",
}
ONNXIM_LATENCY_DEFAULT = 1  # CoreConfig in SimulationConfig.h
REQUIRED = ("num_cores", "core_freq", "core_width", "core_height", "spad_size",
            "dram_type", "dram_freq", "dram_channels", "precision")

# The DRAM description files ONNXim's current configs name, as ONNXim ships them (used when
# the file is not next to the JSON): (Ramulator standard, org preset, timing preset)
ONNXIM_DRAM_FILES = {
    "HBM2.yaml": ("HBM2", "HBM2_8Gb", "HBM2_2.5Gbps"),
    "DDR4.yaml": ("DDR4", "DDR4_16Gb_x4", "DDR4_1600J"),
    "HBM-config.cfg": ("HBM", "HBM_4Gb", "HBM_2_5Gbps"),
}
# Ramulator standard -> npusim DRAM family (HBM, the first generation, is nearest HBM2)
RAMULATOR_FAMILIES = {"HBM2": "HBM2", "HBM": "HBM2", "DDR4": "DDR4", "LPDDR4": "LPDDR4",
                      "LPDDR5": "LPDDR5", "GDDR6": "GDDR6"}


def _warn(text: str) -> None:
    warnings.warn(text, NpusimWarning, stacklevel=3)


def onnxim_to_dict(data: Any, name: str = "onnxim", source: str = "ONNXim config",
                   base_dir: str | Path | None = None) -> dict:
    """Translate a parsed ONNXim JSON config into an npusim TOML-shaped dict (unvalidated).

    ``base_dir``: where relative ``dram_config_path`` files are looked up (the JSON file's
    folder). Hardware keys npusim cannot model yet are one :class:`NpusimWarning` each.

    Derived values:
      * vector: ``vector_process_bit / (8 * precision)`` elements per pass, split as
        lanes = core_width and alus = elements / core_width (one lane per array column),
        or lanes = elements, alus = 1 when that does not divide evenly. Only the product
        matters for throughput, as in ONNXim.
      * memory: ``simple`` (ONNXim's fixed-latency DRAM) keeps ``channel_bytes_per_cycle =
        dram_req_size / dram_nbl``, matching ONNXim's own peak bandwidth (``dram_freq *
        dram_channels * dram_req_size / dram_nbl``); ``ramulator``/``ramulator2`` become
        npusim's cycle-level DRAM with the standard of the file's DRAM family and density
        clocked at ``dram_freq`` (the nearest one, with a warning, when there is no such
        standard), one npusim channel per pseudo channel of each of ``dram_channels``.
      * noc.flit_bytes = dram_req_size (at most 1024): ONNXim's simple interconnect moves
        one whole request per cycle per port. noc.freq_mhz defaults to core_freq.
      * icnt_type = booksim2: the network ``icnt_config_path`` describes (read by
        ``npusim.noc.booksim``: topology, routers, allocators, flit_size), found next to
        the JSON as ONNXim resolves it, else ONNXim's own file of that name; cores have
        ``icnt_injection_ports_per_core`` interfaces each (noc.core_ports), placed as
        ONNXim numbers its nodes. A file found nowhere leaves the crossbar in its place,
        with a warning.
      * missing vector latencies are ONNXim's default, 1 cycle; a missing accum_spad_size
        is spad_size (ONNXim read both from one sram_size before it split them), with a
        warning.
    """
    if not isinstance(data, dict):
        raise NpusimError(f"ONNXim config must be a JSON object, got {type(data).__name__}")
    _check_keys(data, TOP_KEYS + CORE_KEYS, "")
    cfg = {**DEFAULTS, **data}
    num_cores = _get(cfg, "num_cores", Rule("int", 1, 1024))
    cores = _core_table(cfg, num_cores)
    merged = {**cfg, **(cores[0] if cores else {})}
    for key in REQUIRED:
        if key not in merged:
            where = (" (in core_config.core_N, or at the top level)" if key in CORE_KEYS
                     and "core_config" not in cfg else "")
            raise NpusimError(f"ONNXim key {key} is missing{where} (needed by {source})")
    if "accum_spad_size" not in merged:
        merged["accum_spad_size"] = merged["spad_size"]
        _warn(f"ONNXim config {source} has no accum_spad_size: using spad_size = "
              f"{merged['spad_size']} KB, as ONNXim did when one sram_size set both")

    precision = _get(merged, "precision", Rule("choice", choices=PRECISIONS))
    width = _get(merged, "core_width", Rule("int", 1, 4096))
    req = _get(merged, "dram_req_size", Rule("pow2", 8, 4096))
    nbl = _get(merged, "dram_nbl", Rule("int", 1, 4096))
    if req % nbl:
        raise NpusimError(f"ONNXim keys dram_req_size = {req} and dram_nbl = {nbl}: "
                          f"dram_req_size must be a multiple of dram_nbl")
    lanes, alus = _vector_shape(merged, precision, width)

    latency = {}
    for key, ops in LATENCY_KEYS.items():
        value = merged.get(key, ONNXIM_LATENCY_DEFAULT)
        value = _get({key: value}, key, Rule("int", 1, 10000))
        latency.update({op: value for op in ops})
    noc = {
        "type": _lookup(merged, "icnt_type", ICNT_TYPES),
        "freq_mhz": merged.get("icnt_freq", merged["core_freq"]),
        "latency": merged["icnt_latency"],
        "flit_bytes": min(req, 1024),
        # each port moves a request a cycle each way (Simulator.cc pushes one per port)
        "core_ports": _get(merged, "icnt_injection_ports_per_core", Rule("int", 1, 64))
        if "icnt_injection_ports_per_core" in merged else 1,
    }
    if merged["icnt_type"] == "booksim2":
        network = _booksim_network(merged, base_dir)
        if network is not None:
            noc.update(network)
    for key, (default, rule, npusim_does) in UNMODELLED.items():
        if key in merged and _get(merged, key, rule) != default:
            _warn(f"ONNXim key {key} = {merged[key]!r} is not modelled yet (ONNXim's default "
                  f"is {default}): npusim runs as if it were {default}: {npusim_does}")

    out = {
        "name": name,
        "description": f"imported from ONNXim config {source}",
        "num_cores": num_cores,
        "core_freq_mhz": merged["core_freq"],
        "precision": precision,
        "scheduler": {"policy": _lookup(merged, "scheduler", SCHEDULERS),
                      "partitions": _partitions(merged, num_cores)},
        "core": {
            "systolic": {"width": width, "height": merged["core_height"],
                         "dataflow": _lookup(merged, "core_type", CORE_TYPES)},
            "vector": {"lanes": lanes, "alus": alus, "latency": latency},
            "spad_kib": merged["spad_size"],
            "accum_kib": merged["accum_spad_size"],
        },
        # ONNXim's cores put no bound on their requests in flight
        "dma": {"request_bytes": req, "max_outstanding": MAX_OUTSTANDING},
        "noc": noc,
        "memory": _memory(merged, req, nbl, base_dir, source),
    }
    if merged.get("dram_size"):
        out["memory"]["capacity_gib"] = _get(merged, "dram_size", Rule("int", 0, 1 << 20))
    _check_homogeneous(cores)
    return out


def _booksim_network(cfg: dict, base_dir) -> dict | None:
    """The ``noc`` table of the Booksim2 network ``icnt_config_path`` names (the file next
    to the JSON, as ONNXim resolves it, else ONNXim's own file of that name); None, with a
    warning, when there is no such file (npusim's crossbar stands in)."""
    from npusim.noc.booksim import onnxim_booksim_text, read_booksim

    given = _file_key(cfg, "icnt_config_path", base_dir)
    if given is None:
        _warn("ONNXim key icnt_type = 'booksim2' without icnt_config_path: npusim uses its "
              "crossbar with icnt_latency and icnt_freq")
        return None
    path, p = given
    if p.is_file():
        bf = read_booksim(p)
    else:
        text = onnxim_booksim_text(Path(path).name)
        if text is None:
            _warn(f"ONNXim key icnt_config_path = {path!r}: no such file next to the config "
                  f"({p}) and ONNXim ships none of that name: npusim uses its crossbar with "
                  f"icnt_latency and icnt_freq (put the Booksim file there to run its "
                  f"network)")
            return None
        bf = read_booksim(Path(path).name, text=text)
    noc: dict = {}
    for key, value in bf.noc.items():  # dotted noc.* keys
        table = noc
        *parents, leaf = key.split(".")[1:]
        for part in parents:
            table = table.setdefault(part, {})
        table[leaf] = value
    return noc


def _memory(cfg: dict, req: int, nbl: int, base_dir, source: str) -> dict:
    kind = _lookup(cfg, "dram_type", {k: k for k in DRAM_TYPES})
    freq = _get(cfg, "dram_freq", Rule("int", *MHZ_RANGE))
    simple = {"type": "ideal" if kind == "ideal" else "simple", "freq_mhz": freq,
              "channels": cfg["dram_channels"], "latency": cfg["dram_latency"],
              "channel_bytes_per_cycle": req // nbl}
    if kind in ("simple", "ideal"):
        return simple
    _get(cfg, "dram_channels", Rule("int", 1, 1024))
    fallback = ("using its fixed-latency memory with dram_freq, dram_channels and "
                "dram_latency")
    given = _file_key(cfg, "dram_config_path", base_dir)
    spec = _dram_file(*given) if given else None
    if spec is None:
        what = (f"with dram_config_path = {given[0]!r}: no such file next to the config "
                f"({given[1]}) and ONNXim ships none of that name" if given
                else "without dram_config_path")
        _warn(f"ONNXim key dram_type = {kind!r} {what}: npusim does not know which DRAM "
              f"standard to model; {fallback}")
        return simple
    family = RAMULATOR_FAMILIES.get(spec[0])
    if family is None:
        _warn(f"ONNXim key dram_type = {kind!r} with {spec[0]} ({given[0]}): npusim has no "
              f"such DRAM standard; {fallback}")
        return simple
    std, exact = _nearest_standard(family, spec, freq)
    if not exact:
        _warn(f"ONNXim key dram_type = {kind!r} with {spec[0]} {spec[1]} at dram_freq = "
              f"{freq} MHz ({given[0]}): npusim has no such standard; using the nearest, "
              f"{std.name} ({std.freq_mhz} MHz)")
    channels = cfg["dram_channels"] * std.pseudo_channels
    return {"type": "dram", "standard": std.name, "channels": channels}


def _dram_file(name: str, path: Path) -> tuple[str, str, str] | None:
    """(Ramulator standard, org preset, timing preset) from the Ramulator 2 YAML or
    Ramulator 1 .cfg file ``path`` (where ONNXim looks for ``name``), else ONNXim's own file
    of that name; None when there is neither. An existing file that does not say them is
    an error naming what is wrong in it."""
    if not path.is_file():
        return ONNXIM_DRAM_FILES.get(Path(name).name)
    from npusim.paths import read_text

    text = read_text(path, "ONNXim dram_config_path file")

    def bad(problem: str) -> NpusimError:
        return NpusimError(f"ONNXim key dram_config_path = {name!r}: {path}: {problem}")

    if path.suffix in (".yaml", ".yml"):
        return _ramulator2_spec(text, bad)
    fields = dict(re.findall(r"^\s*(\w+)\s*=\s*(\S+)", text, re.MULTILINE))
    if "standard" not in fields:
        raise bad("no 'standard = NAME' line (a Ramulator config names its DRAM standard, "
                  "e.g. standard = HBM)")
    return fields["standard"], fields.get("org", ""), fields.get("speed", "")


def _ramulator2_spec(text: str, bad) -> tuple[str, str, str]:
    """MemorySystem.DRAM's impl, org.preset and timing.preset of a Ramulator 2 YAML;
    ``bad(problem)`` makes the error when the text does not hold them."""
    import yaml  # PyYAML, installed with dask

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise bad(f"malformed YAML at {where}{getattr(err, 'problem', None) or err}") \
            from None
    if not isinstance(data, dict):
        what = "is empty" if data is None else f"holds a YAML {type(data).__name__}"
        raise bad(f"{what}, not a Ramulator 2 config (a mapping with MemorySystem: "
                  f"DRAM: ...)")
    out = []
    for key in ("impl", "org.preset", "timing.preset"):
        value = data
        for part in ("MemorySystem", "DRAM", *key.split(".")):
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
            raise bad(f"MemorySystem.DRAM.{key} is "
                      f"{'missing' if value is None else repr(value)}: a Ramulator 2 file "
                      f"names its DRAM as impl: HBM2, org: {{preset: HBM2_8Gb}}, "
                      f"timing: {{preset: HBM2_2Gbps}}")
        out.append(str(value))
    return out[0], out[1], out[2]


def _nearest_standard(family: str, spec: tuple[str, str, str], freq: int):
    """The npusim standard of ``family`` clocked at ``freq`` with the spec's density (and
    width), else the nearest by clock, density, width; and whether it is an exact match.
    Pseudo-channel HBM2 (as Ramulator 2 models it) is preferred over legacy mode."""
    from npusim.dram import list_standards, load_standard

    def size(text, pattern):
        m = re.search(pattern, text)
        return int(m.group(1)) if m else None

    density, width = size(spec[1], r"(\d+)Gb"), size(spec[1], r"_x(\d+)")
    best = None
    for name in list_standards():
        std = load_standard(name)
        if std.family != family:
            continue
        d, w = size(name, r"(\d+)Gb"), size(name, r"_x(\d+)")
        key = (abs(std.freq_mhz - freq),
               abs(math.log2(d / density)) if d and density else 0,
               0 if width is None or w == width else 1, "legacy" in name, name)
        if best is None or key < best[0]:
            best = (key, std)
    key, std = best
    exact = key[0] == 0 and key[1] == 0 and key[2] == 0 and spec[0] == family
    return std, exact


def _check_keys(table: dict, known: tuple, where: str) -> None:
    """Unknown keys are errors (a typo would otherwise silently fall back to a default)."""
    valid = list(known)
    for key in table:
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise NpusimError(f"ONNXim config has unknown key {where}{key}{hint}")


def _core_table(cfg: dict, num_cores: int) -> list[dict]:
    """Every core_config.core_N (each must be as core_0: ``_check_homogeneous``), or none
    (the core keys are at the top level)."""
    if "core_config" not in cfg:
        return []
    table = cfg["core_config"]
    if not isinstance(table, dict):
        raise NpusimError("ONNXim key core_config must be an object of core_N entries")
    cores = []
    for i in range(num_cores):
        entry = table.get(f"core_{i}")
        if not isinstance(entry, dict):
            # ONNXim itself reads core_config["core_<i>"] for every core, with no fallback.
            raise NpusimError(f"ONNXim config lacks core_config.core_{i} "
                              f"(num_cores = {num_cores}; one entry per core is required)")
        _check_keys(entry, CORE_KEYS, f"core_config.core_{i}.")
        cores.append(entry)
    extra = sorted(k for k in table if k not in {f"core_{i}" for i in range(num_cores)})
    if extra:  # (ONNXim reads core_0 .. core_<num_cores - 1> only)
        _warn(f"ONNXim core_config has {', '.join(extra)} beside num_cores = {num_cores}: "
              f"ignored")
    return cores


def _check_homogeneous(cores: list[dict]) -> None:
    """Every core_config.core_N as core_0, checked once core_0's own values have been (a
    wrong value in core_0 alone read as 'heterogeneous cores')."""
    for i, entry in enumerate(cores[1:], start=1):
        for key in CORE_KEYS:
            if entry.get(key) != cores[0].get(key):
                raise NpusimError(
                    f"heterogeneous cores are not supported: core_config.core_{i}.{key} = "
                    f"{entry.get(key)!r} but core_0 has {cores[0].get(key)!r}")


def _partitions(cfg: dict, num_cores: int) -> list[list[int]]:
    """ONNXim's ``"partition": {"core_0": 0, "core_1": 1, ...}`` as lists of cores."""
    table = cfg.get("partition")
    if table is None:
        return []
    if not isinstance(table, dict):
        raise NpusimError("ONNXim key partition must be an object of core_N: partition id")
    parts: dict[int, list[int]] = {}
    for i in range(num_cores):
        pid = table.get(f"core_{i}")
        if type(pid) is not int or pid < 0:
            raise NpusimError(f"ONNXim key partition.core_{i} = {pid!r}: every core needs a "
                              f"partition id >= 0")
        parts.setdefault(pid, []).append(i)
    return [parts[pid] for pid in sorted(parts)]


def _get(cfg: dict, key: str, rule: Rule) -> Any:
    if key not in cfg:
        raise NpusimError(f"ONNXim key {key} is missing: must be {rule.describe()}")
    value = cfg[key]
    problem = rule.problem(value)
    if problem:
        raise NpusimError(f"ONNXim key {key} = {value!r} {problem}: must be {rule.describe()}")
    return value


def _lookup(cfg: dict, key: str, table: dict) -> str:
    """``table``'s entry for the name ``key`` gives; any other value (a name not in it, a
    list, a number) is one error listing the names."""
    value = cfg[key]
    if not isinstance(value, str) or value not in table:
        problem = ("is not supported" if isinstance(value, str)
                   else f"has the wrong type ({type(value).__name__})")
        choices = ", ".join(repr(k) for k in table)
        raise NpusimError(f"ONNXim key {key} = {value!r} {problem}: must be one of {choices}")
    return table[value]


def _file_key(cfg: dict, key: str, base_dir) -> tuple[str, Path] | None:
    """(the name ``key`` gives, where ONNXim looks for it: relative to the JSON's folder);
    None when the key is absent or empty. A name that is not a string, or that is a
    directory there, is an error."""
    name = cfg.get(key)
    if name is None or name == "":
        return None
    if not isinstance(name, str):
        raise NpusimError(f"ONNXim key {key} = {name!r} has the wrong type "
                          f"({type(name).__name__}): must be a file name (a string)")
    p = Path(name)
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    if p.is_dir():
        raise NpusimError(f"ONNXim key {key} = {name!r}: {p} is a directory, not a file")
    return name, p


# core.vector's largest lanes and ALUs per lane, as the schema has them
_VECTOR_MAX = {f.name: f.metadata["rule"].hi for f in dataclasses.fields(VectorConfig)
               if "rule" in f.metadata}
MAX_LANES, MAX_ALUS = _VECTOR_MAX["lanes"], _VECTOR_MAX["alus"]


def _vector_shape(cfg: dict, precision: int, width: int) -> tuple[int, int]:
    """Split vector_process_bit into (lanes, alus); see onnxim_to_dict."""
    if "vector_process_bit" not in cfg:
        return width, 1  # older configs: one element per array column per cycle
    bits = _get(cfg, "vector_process_bit", Rule("int", 8, 1 << 30))
    element_bits = 8 * precision
    if bits % element_bits:
        raise NpusimError(f"ONNXim key vector_process_bit = {bits} is not a multiple of "
                          f"{element_bits} (8 * precision {precision})")
    elements = bits // element_bits
    lanes, alus = (width, elements // width) if elements % width == 0 else (elements, 1)
    if lanes > MAX_LANES or alus > MAX_ALUS:  # (said of npusim's core.vector before)
        raise NpusimError(f"ONNXim key vector_process_bit = {bits} is out of range: "
                          f"{elements:,} elements a cycle, more than npusim's vector unit "
                          f"takes: core_width lanes of at most {MAX_ALUS} ALUs each (here "
                          f"{width * MAX_ALUS:,} elements), else at most {MAX_LANES} lanes")
    return lanes, alus
