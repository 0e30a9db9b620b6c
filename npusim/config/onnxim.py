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
dram_type             simple / ramulator / ramulator2          memory.type
dram_freq             MHz                                      memory.freq_mhz
dram_channels         count                                    memory.channels
dram_latency          DRAM cycles (ONNXim SimpleDram)          memory.latency
dram_req_size         bytes per memory request                 dma.request_bytes
dram_nbl              DRAM cycles per request (burst)          memory.channel_bytes_per_cycle
icnt_type             simple / booksim2                        noc.type (crossbar)
icnt_freq             MHz                                      noc.freq_mhz
icnt_latency          interconnect cycles                      noc.latency
precision             bytes per element                        precision
scheduler             simple / time_multiplex / spatial_split  scheduler.policy
partition             {"core_N": partition id}                 scheduler.partitions
====================  =======================================  ==============================

Both layouts ONNXim has used are accepted: per-core tables under ``core_config.core_N``
(current) and core keys at the top level (older configs). The result is a TOML-shaped dict
that goes through the same validation as a preset.
"""

import difflib
from typing import Any

from npusim.config.schema import PRECISIONS, Rule
from npusim.errors import NpusimError

# Keys ONNXim knows that npusim has no use for. They are accepted and dropped.
IGNORED_KEYS = {
    "core_print_interval": "logging interval",
    "dram_print_interval": "logging interval",
    "icnt_print_interval": "logging interval",
    "dram_config_path": "Ramulator file; npusim uses its own memory model",
    "icnt_config_path": "Booksim2 topology file; npusim uses its own NoC model",
    "dram_size": "capacity in GB; npusim does not bound DRAM capacity",
    "layout": "tensor layout (NHWC/NCHW) is decided by npusim's lowering",
    "full_precision": "accumulator precision is implied by accum_kib",
}
IGNORED_CORE_KEYS = {
    "sram_width": "SRAM port width; npusim moves scratchpad data in DMA requests",
    "sram_size": "single-SRAM size of older output-stationary configs",
    "mac_latency": "multiply-accumulate runs on the systolic array",
    "scalar_add_latency": "no separate scalar unit in npusim",
    "scalar_mul_latency": "no separate scalar unit in npusim",
    "layernorm_latency": "npusim lowers LayerNorm into vector ops",
    "softmax_latency": "npusim lowers Softmax into vector ops",
}

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
             "vector_process_bit", *LATENCY_KEYS)
TOP_KEYS = ("num_cores", "core_freq", "core_config", "dram_type", "dram_freq",
            "dram_channels", "dram_req_size", "dram_latency", "dram_nbl", "icnt_type",
            "icnt_latency", "icnt_freq", "precision", "scheduler", "partition")

# "ramulator"/"ramulator2" map to the fixed-latency "simple" model for now; the cycle-level
# DRAM model replaces this mapping when it lands. "ideal" is npusim's own extra value.
DRAM_TYPES = {"simple": "simple", "ramulator": "simple", "ramulator2": "simple",
              "ideal": "ideal"}
# Booksim2's topology lives in a separate file; both become npusim's crossbar.
ICNT_TYPES = {"simple": "crossbar", "booksim2": "crossbar"}
# ONNXim "simple" runs one layer at a time, requests in arrival order: npusim's fifo;
# "time_multiplex" round-robins between requests, "spatial_split" gives each partition
# its own cores. (Its "partition_cpu" has no match.)
SCHEDULERS = {"simple": "fifo", "fifo": "fifo", "time_multiplex": "time-shared",
              "spatial_split": "spatial"}

# Values ONNXim configs commonly leave out, with the value used instead.
DEFAULTS = {
    "core_type": "systolic_ws",
    "dram_req_size": 32,     # every ONNXim sample config uses 32 B
    "dram_latency": 10,      # every ONNXim sample config uses 10 DRAM cycles
    "dram_nbl": 1,           # ONNXim's own default
    "icnt_type": "simple",
    "icnt_latency": 1,       # ONNXim sample configs use 1
    "scheduler": "simple",
}
REQUIRED = ("num_cores", "core_freq", "core_width", "core_height", "spad_size",
            "accum_spad_size", "dram_type", "dram_freq", "dram_channels", "precision")


def onnxim_to_dict(data: Any, name: str = "onnxim", source: str = "ONNXim config") -> dict:
    """Translate a parsed ONNXim JSON config into an npusim TOML-shaped dict (unvalidated).

    Derived values:
      * vector: ``vector_process_bit / (8 * precision)`` elements per pass, split as
        lanes = core_width and alus = elements / core_width (one lane per array column),
        or lanes = elements, alus = 1 when that does not divide evenly. Only the product
        matters for throughput, as in ONNXim.
      * memory.channel_bytes_per_cycle = dram_req_size / dram_nbl, matching ONNXim's own
        peak bandwidth (``dram_freq * dram_channels * dram_req_size / dram_nbl``).
      * noc.flit_bytes = dram_req_size (at most 1024): ONNXim's simple interconnect moves
        one whole request per cycle per port. noc.freq_mhz defaults to core_freq.
    """
    if not isinstance(data, dict):
        raise NpusimError(f"ONNXim config must be a JSON object, got {type(data).__name__}")
    _check_keys(data, TOP_KEYS + CORE_KEYS, IGNORED_KEYS | IGNORED_CORE_KEYS, "")
    cfg = {**DEFAULTS, **data}
    num_cores = _get(cfg, "num_cores", Rule("int", 1, 1024))
    core = _core_table(cfg, num_cores)
    merged = {**cfg, **core}
    for key in REQUIRED:
        if key not in merged:
            raise NpusimError(f"ONNXim key {key} is missing (needed by {source})")

    if merged["core_type"] != "systolic_ws":
        raise NpusimError(f"ONNXim key core_type = {merged['core_type']!r} is not supported: "
                          f"npusim simulates weight-stationary arrays ('systolic_ws') only")
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
        if key in merged:
            value = _get(merged, key, Rule("int", 1, 10000))
            latency.update({op: value for op in ops})

    return {
        "name": name,
        "description": f"imported from ONNXim config {source}",
        "num_cores": num_cores,
        "core_freq_mhz": merged["core_freq"],
        "precision": precision,
        "scheduler": {"policy": _lookup(merged, "scheduler", SCHEDULERS),
                      "partitions": _partitions(merged, num_cores)},
        "core": {
            "systolic": {"width": width, "height": merged["core_height"]},
            "vector": {"lanes": lanes, "alus": alus, "latency": latency},
            "spad_kib": merged["spad_size"],
            "accum_kib": merged["accum_spad_size"],
        },
        "dma": {"request_bytes": req},
        "noc": {
            "type": _lookup(merged, "icnt_type", ICNT_TYPES),
            "freq_mhz": merged.get("icnt_freq", merged["core_freq"]),
            "latency": merged["icnt_latency"],
            "flit_bytes": min(req, 1024),
        },
        "memory": {
            "type": _lookup(merged, "dram_type", DRAM_TYPES),
            "freq_mhz": merged["dram_freq"],
            "channels": merged["dram_channels"],
            "latency": merged["dram_latency"],
            "channel_bytes_per_cycle": req // nbl,
        },
    }


def _check_keys(table: dict, known: tuple, ignored: dict, where: str) -> None:
    """Unknown keys are errors (a typo would otherwise silently fall back to a default)."""
    valid = list(known) + list(ignored)
    for key in table:
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise NpusimError(f"ONNXim config has unknown key {where}{key}{hint}")


def _core_table(cfg: dict, num_cores: int) -> dict:
    """The one core description, from core_config.core_N (all identical) or top-level keys."""
    if "core_config" not in cfg:
        return {}
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
        _check_keys(entry, CORE_KEYS, IGNORED_CORE_KEYS, f"core_config.core_{i}.")
        cores.append(entry)
    first = cores[0]
    for i, entry in enumerate(cores[1:], start=1):
        for key in CORE_KEYS:
            if entry.get(key) != first.get(key):
                raise NpusimError(
                    f"heterogeneous cores are not supported: core_config.core_{i}.{key} = "
                    f"{entry.get(key)!r} but core_0 has {first.get(key)!r}")
    return first


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
    value = cfg[key]
    if value not in table:
        choices = ", ".join(repr(k) for k in table)
        raise NpusimError(f"ONNXim key {key} = {value!r} is not supported: must be one of "
                          f"{choices}")
    return table[value]


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
    if elements % width == 0:
        return width, elements // width
    return elements, 1
