"""Read Booksim2 config files: Booksim's own (``runfiles/meshconfig``: ``key = value;``) and
the ``[config]`` files ONNXim's ``icnt_config_path`` points to (same keys, no semicolons).

A file is read onto Booksim's built-in defaults (``booksim_config.cpp``), not npusim's, so
a run does what Booksim would do with it:

======================================  ==========================================
Booksim key                             npusim
======================================  ==========================================
topology mesh / torus, k, n             noc.type mesh / torus, noc.dims = [k] * n,
                                        noc.link_latency 1 / 2 (Booksim's channels)
topology fly, k, n                      noc.type fly, noc.radix = k, noc.stages = n
topology anynet, network_file           noc.type custom, noc.file
routing_function dor, dim_order,       (the topology's own routing; others: error)
  dest_tag, min
num_vcs, vc_buf_size                    noc.router.vcs, vc_buffer_flits
vc_allocator, sw_allocator              noc.router.vc_allocator, sw_allocator;
                                        ``islip(N)``: N iterations
routing_delay, vc_alloc_delay,          noc.router.routing_delay, vc_alloc_delay,
sw_alloc_delay, credit_delay            sw_alloc_delay, credit_delay
st_prepare_delay + st_final_delay       noc.router.st_delay
wait_for_tail_credit                    noc.router.wait_for_tail_credit
priority none / age                     noc.router.priority (others: a note, round robin)
flit_size (ONNXim)                      noc.flit_bytes
traffic, packet_size, injection_rate    --traffic, --packet-flits, --rate (packets per
(packets/node/cycle; flits with         node per cycle times packet_size = flits)
injection_rate_uses_flits = 1), seed
sample_period, warmup_periods,          the measurement (npusim.noc.traffic.Measurement)
max_samples, latency_thres,
stopping_thres / acc_stopping_thres
======================================  ==========================================

Booksim's IQ router builds its allocators without the config, so ``alloc_iters`` never
reaches them: an allocator runs one iteration unless its name says more (``islip(2)``).
npusim reads the file the same way and says so in the run's notes. Keys that only tune
Booksim's own bookkeeping (printing, statistics files, power model, ONNXim's buffer
sizes of its fork) are ignored; keys that would change the network in a way npusim does
not model (speculation, speedups, other routing, request/reply traffic) are errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from npusim.config.schema import MAX_NOC_DIMS, MAX_ROUTERS, Rule, field_rule
from npusim.errors import NpusimError
from npusim.kernels.network.names import ALLOCATORS, PRIORITIES
from npusim.noc.traffic import PATTERNS, Measurement, Traffic
from npusim.paths import read_text

# Booksim's defaults (booksim_config.cpp) for every key read here
DEFAULTS = {
    "topology": "torus", "k": 8, "n": 2, "routing_function": "none", "network_file": "",
    "num_vcs": 16, "vc_buf_size": 8, "buf_size": -1, "wait_for_tail_credit": 0,
    "vc_allocator": "islip", "sw_allocator": "islip", "alloc_iters": 1,
    "routing_delay": 1, "vc_alloc_delay": 1, "sw_alloc_delay": 1, "st_prepare_delay": 0,
    "st_final_delay": 1, "credit_delay": 0, "speculative": 0, "input_speedup": 1,
    "output_speedup": 1, "internal_speedup": 1.0, "noq": 0, "hold_switch_for_packet": 0,
    "vc_busy_when_full": 0, "vc_prioritize_empty": 0, "vc_shuffle_requests": 0,
    "output_buffer_size": -1, "router": "iq", "subnets": 1, "classes": 1, "c": 1,
    "traffic": "uniform", "injection_rate": 0.1, "injection_rate_uses_flits": 0,
    "packet_size": 1, "injection_process": "bernoulli", "use_read_write": 0,
    "sim_type": "latency", "warmup_periods": 3, "sample_period": 1000, "max_samples": 10,
    "latency_thres": 500.0, "warmup_thres": 0.05, "acc_warmup_thres": 0.05,
    "stopping_thres": 0.05, "acc_stopping_thres": 0.05, "sim_count": 1, "seed": 0,
    "include_queuing": 1, "priority": "none", "flit_size": 0, "use_noc_latency": 1,
    "buffer_policy": "private", "arb_type": "round_robin",
}
# bookkeeping, statistics and power keys, and ONNXim's fork's extras: read and ignored
IGNORED = {
    "print_activity", "print_csv_results", "deadlock_warn_timeout", "viewer_trace",
    "watch_file", "watch_flits", "watch_packets", "watch_transactions", "watch_out",
    "stats_out", "injected_flits_out", "received_flits_out", "stored_flits_out",
    "sent_flits_out", "outstanding_credits_out", "ejected_flits_out", "active_packets_out",
    "used_credits_out", "free_credits_out", "max_credits_out", "sent_packets_out",
    "sim_power", "power_output_file", "tech_file", "channel_width", "channel_sweep",
    "measure_stats", "pair_stats", "perm_seed", "batch_size", "batch_count",
    "max_outstanding_requests", "use_map", "input_buffer_size", "ejection_buffer_size",
    "boundary_buffer_size", "class_priority", "link_failures", "fail_seed",
}
# what each key must hold for npusim to model the file faithfully
REQUIRED_VALUES = {
    "speculative": 0, "input_speedup": 1, "output_speedup": 1, "internal_speedup": 1.0,
    "noq": 0, "hold_switch_for_packet": 0, "vc_busy_when_full": 0, "vc_prioritize_empty": 0,
    "vc_shuffle_requests": 0, "output_buffer_size": -1, "router": "iq", "subnets": 1,
    "classes": 1, "c": 1, "injection_process": "bernoulli", "use_read_write": 0,
    "buf_size": -1, "include_queuing": 1, "use_noc_latency": 1, "buffer_policy": "private",
    "arb_type": "round_robin",
}
TOPOLOGIES = {"mesh": "mesh", "torus": "torus", "fly": "fly", "anynet": "custom"}
# Booksim router keys -> the noc.router field each sets (its range checked under the
# Booksim key's name)
ROUTER_KEYS = {"num_vcs": "vcs", "vc_buf_size": "vc_buffer_flits",
               "routing_delay": "routing_delay", "vc_alloc_delay": "vc_alloc_delay",
               "sw_alloc_delay": "sw_alloc_delay", "credit_delay": "credit_delay"}
# what the measurement keys accept: at least one sample of at least one cycle
COUNT = 10 ** 9
MEASUREMENT_RULES = {"sample_period": Rule("int", 1, COUNT),
                     "max_samples": Rule("int", 1, COUNT),
                     "warmup_periods": Rule("int", 0, COUNT),
                     "packet_size": Rule("int", 1, 1024)}
ROUTING = {"mesh": ("dor", "dim_order"), "torus": ("dim_order",), "fly": ("dest_tag",),
           "anynet": ("min",)}


# ONNXim's own Booksim files (configs/booksim2_configs/, ONNXim a1e8629): its plain
# butterflies are one text, a single router of k = cores x ports + channels terminals
ONNXIM_FLY = """[config]
use_map = 0
flit_size = 64
topology = fly
k = {k}
n = 1
routing_function = dest_tag
subnets = 1

vc_buf_size = 64
input_buffer_size = 256
ejection_buffer_size = 64
boundary_buffer_size = 64
wait_for_tail_credit = 0
vc_allocator = islip
sw_allocator = islip
alloc_iters = 1
"""
ONNXIM_FLY_FILES = {"fly_c1_m2.icnt": 3, "fly_c1_m8.icnt": 9, "fly_c2_m8.icnt": 10,
                    "fly_c4_m2.icnt": 6, "fly_c4_m8.icnt": 12, "fly_c4_m16.icnt": 20,
                    "fly_c4_m32.icnt": 36, "fly_c16_m8.icnt": 24, "fly_c64_m8.icnt": 72}


def onnxim_booksim_text(name: str) -> str | None:
    """The text of ONNXim's own Booksim file ``name`` (a butterfly), None if it ships no
    such file."""
    k = ONNXIM_FLY_FILES.get(name)
    return None if k is None else ONNXIM_FLY.format(k=k)


@dataclass
class BooksimFile:
    """A Booksim config: npusim ``noc`` overrides, the traffic and its measurement."""

    path: str
    noc: dict                 # dotted noc.* keys -> values (for --set style overrides)
    traffic: Traffic
    measurement: Measurement
    notes: list[str] = field(default_factory=list)
    values: dict = field(default_factory=dict)  # every key as read (defaults included)


def parse_booksim(text: str, where: str) -> dict:
    """``key = value`` statements (``;`` or newline separated, ``//`` comments, ``[config]``
    headers skipped) as a dict of strings."""
    out = {}
    text = re.sub(r"//[^\n]*", "", text)
    for no, line in enumerate(text.splitlines(), 1):
        for stmt in line.split(";"):
            stmt = stmt.strip()
            if not stmt or (stmt.startswith("[") and stmt.endswith("]")):
                continue
            key, eq, value = stmt.partition("=")
            key, value = key.strip(), value.strip()
            if not eq or not key or not value or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise NpusimError(f"{where}:{no}: expected 'key = value', got {stmt!r}")
            out[key] = value
    return out


def _number(key: str, text: str, where: str, kind=int):
    try:
        return kind(text) if kind is int else float(text)
    except ValueError:
        raise NpusimError(f"{where}: {key} = {text!r} is not {'an integer' if kind is int else 'a number'}") from None


def _check(where: str, key: str, value, rule: Rule) -> None:
    """A value read from a Booksim file against ``rule``: an error names the file and the
    Booksim key (or keys: ``st_prepare_delay + st_final_delay``)."""
    problem = rule.problem(value)
    if problem:
        raise NpusimError(f"{where}: {key} = {value!r} {problem}: must be {rule.describe()}")


def _allocator(key: str, text: str, where: str) -> tuple[str, int]:
    m = re.fullmatch(r"([a-z_]+)(?:\((\d+)\))?", text)
    if not m or m.group(1) not in ALLOCATORS:
        raise NpusimError(f"{where}: {key} = {text!r} is not supported: npusim has "
                          f"{', '.join(ALLOCATORS)} (optionally with iterations, islip(2))")
    iters, rule = int(m.group(2) or 1), field_rule("noc.router.vc_alloc_iters")
    if rule.problem(iters):
        raise NpusimError(f"{where}: {key} = {text!r}: {iters} iterations is out of range: "
                          f"must be {rule.describe()}")
    return m.group(1), iters


def read_booksim(path: str | Path, overrides: dict | None = None,
                 text: str | None = None) -> BooksimFile:
    """Read a Booksim config file (plus ``key=value`` overrides as Booksim's command line
    takes them) into npusim terms; ``text``: the file's contents, when they do not come
    from ``path`` (ONNXim's own files, ``onnxim_booksim_text``)."""
    path = Path(path)
    if text is None:
        text = read_text(path, "Booksim config")
    where = str(path)
    given = parse_booksim(text, where)
    given.update(overrides or {})
    if "topology" not in given:  # (an empty file's first error was about routing)
        raise NpusimError(f"{where}: sets no topology; give topology and its keys, e.g. "
                          f"topology = mesh; k = 8; n = 2; routing_function = dim_order "
                          f"(Booksim's default, a torus routed by 'none', runs in neither)")
    topo = given["topology"]
    if topo not in TOPOLOGIES:  # first: an unsupported topology's own keys are unknown here
        raise NpusimError(f"{where}: topology = {topo!r} is not supported: npusim reads "
                          f"{', '.join(TOPOLOGIES)}")
    for key in given:
        if key not in DEFAULTS and key not in IGNORED:
            import difflib
            close = difflib.get_close_matches(key, list(DEFAULTS), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise NpusimError(f"{where}: unknown Booksim key {key}{hint}")
    v = {k: given.get(k, DEFAULTS[k]) for k in DEFAULTS}
    ints = {k for k, d in DEFAULTS.items() if isinstance(d, int)}
    floats = {k for k, d in DEFAULTS.items() if isinstance(d, float)}
    for k in ints:
        if k in given:
            v[k] = _number(k, given[k], where)
    for k in floats:
        if k in given:
            v[k] = _number(k, given[k], where, float)
    notes = []
    for k, need in REQUIRED_VALUES.items():
        if v[k] != need:
            raise NpusimError(f"{where}: {k} = {v[k]} is not modelled by npusim (it needs "
                              f"{need}): its routers are input-queued VC routers without "
                              f"speculation or speedup, one traffic class, requests only")
    if v["routing_function"] not in ROUTING[topo]:
        raise NpusimError(f"{where}: routing_function = {v['routing_function']!r} is not "
                          f"supported for {topo}: must be {' or '.join(ROUTING[topo])}")
    noc: dict = {"noc.type": TOPOLOGIES[topo], **_shape(topo, v, path)}
    vc_alloc, vc_iters = _allocator("vc_allocator", v["vc_allocator"], where)
    sw_alloc, sw_iters = _allocator("sw_allocator", v["sw_allocator"], where)
    if "alloc_iters" in given and v["alloc_iters"] not in (vc_iters, sw_iters):
        notes.append(f"alloc_iters = {given['alloc_iters']} is ignored, as Booksim's IQ "
                     f"router ignores it: its allocators run {vc_iters} (VC) and {sw_iters} "
                     f"(switch) iterations; write islip({given['alloc_iters']}) for more")
    if v["priority"] not in PRIORITIES:
        notes.append(f"priority = {v['priority']} is not modelled: allocators use round "
                     f"robin only ({' and '.join(PRIORITIES)} are)")
    else:
        noc["noc.router.priority"] = v["priority"]
    noc.update({
        "noc.router.vc_allocator": vc_alloc, "noc.router.sw_allocator": sw_alloc,
        "noc.router.vc_alloc_iters": vc_iters, "noc.router.sw_alloc_iters": sw_iters,
        "noc.router.wait_for_tail_credit": bool(v["wait_for_tail_credit"]),
    })
    for key, name in ROUTER_KEYS.items():
        _check(where, key, v[key], field_rule(f"noc.router.{name}"))
        noc[f"noc.router.{name}"] = v[key]
    st_delay = v["st_prepare_delay"] + v["st_final_delay"]
    _check(where, "st_prepare_delay + st_final_delay", st_delay,
           field_rule("noc.router.st_delay"))
    noc["noc.router.st_delay"] = st_delay
    if v["flit_size"]:
        _check(where, "flit_size", v["flit_size"], field_rule("noc.flit_bytes"))
        noc["noc.flit_bytes"] = v["flit_size"]
    for key, rule in MEASUREMENT_RULES.items():
        _check(where, key, v[key], rule)
    traffic = _traffic(v, where)
    if v["sim_type"] != "latency":
        notes.append(f"sim_type = {v['sim_type']} is run as a latency simulation")
    meas = Measurement(sample_period=v["sample_period"], warmup_periods=v["warmup_periods"],
                       max_samples=v["max_samples"], latency_threshold=v["latency_thres"],
                       stopping_threshold=max(v["stopping_thres"], v["acc_stopping_thres"]))
    return BooksimFile(where, noc, traffic, meas, notes, v)


def _shape(topo: str, v: dict, path: Path) -> dict:
    """The noc.* keys of the topology's size (k, n) or anynet file, each value checked
    against the npusim field it sets, under its Booksim name."""
    where = str(path)
    if topo == "anynet":
        return {"noc.file": str(_network_file(v["network_file"], path))}
    k, n = v["k"], v["n"]
    if topo == "fly":
        radix = field_rule("noc.radix")  # 0 there means "fit the endpoints": not Booksim's
        _check(where, "k", k, Rule("int", 2, radix.hi))
        _check(where, "n", n, field_rule("noc.stages"))
        return {"noc.radix": k, "noc.stages": n}
    dims = field_rule("noc.dims")
    _check(where, "k", k, Rule("int", dims.lo, dims.hi))
    _check(where, "n", n, Rule("int", 1, MAX_NOC_DIMS))
    if k ** n > MAX_ROUTERS:
        raise NpusimError(f"{where}: k = {k}, n = {n} make {k ** n} routers: npusim "
                          f"simulates at most {MAX_ROUTERS}")
    # Booksim's k-ary n-cube channels take 1 cycle in a mesh, 2 in a torus (longer wires)
    return {"noc.dims": [k] * n, "noc.link_latency": 1 if topo == "mesh" else 2}


def _network_file(name: str, config: Path) -> Path:
    """An anynet file as named, else beside the config file (ONNXim's configs name files
    on their authors' machines)."""
    if not name:
        raise NpusimError(f"{config}: topology = anynet needs network_file")
    p = Path(name)
    for cand in (p, config.parent / p, config.parent / p.name):
        if cand.is_file():
            return cand.resolve()
    raise NpusimError(f"{config}: network_file = {name} not found (nor {p.name} beside the "
                      f"config file)")


def _traffic(v: dict, where: str) -> Traffic:
    text = str(v["traffic"])
    m = re.fullmatch(r"([a-z_]+)(?:\((.*)\))?", text)
    name = m.group(1) if m else text
    if name not in PATTERNS:
        raise NpusimError(f"{where}: traffic = {text!r} is not supported: must be one of "
                          f"{', '.join(PATTERNS)}")
    spots: tuple = (0,)
    weights: tuple = ()
    if name == "hotspot":
        groups = re.findall(r"\{([^}]*)\}", m.group(2) or "")
        if not groups:
            raise NpusimError(f"{where}: traffic = hotspot needs its nodes, e.g. "
                              f"hotspot({{0,5}},{{1,2}})")
        spots = _hotspot_list(groups[0], "nodes", text, where)
        weights = _hotspot_list(groups[1], "weights", text, where) if len(groups) > 1 else ()
        weights = (weights + (weights[-1:] * len(spots)))[:len(spots)] if weights else ()
    size = v["packet_size"]
    rate = v["injection_rate"] if v["injection_rate_uses_flits"] else v["injection_rate"] * size
    if 1 <= size <= 1024 and not 0 < rate <= size:  # (said of the file, not of the traffic)
        unit = "flits" if v["injection_rate_uses_flits"] else "packets"
        most = size if v["injection_rate_uses_flits"] else 1
        raise NpusimError(f"{where}: injection_rate = {v['injection_rate']} ({unit} per node "
                          f"per cycle) is out of range: above 0 and at most {most}")
    return Traffic(name, float(rate), int(size), spots, weights, int(v["seed"]))


def _hotspot_list(group: str, what: str, text: str, where: str) -> tuple[int, ...]:
    """The integers of one ``{0,5}`` group of ``traffic = hotspot(...)``."""
    try:
        return tuple(int(x) for x in group.split(","))
    except ValueError:
        raise NpusimError(f"{where}: traffic = {text!r}: hotspot {what} {{{group}}} must be "
                          f"a list of integers, e.g. hotspot({{0,5}},{{1,2}})") from None
