"""The typed hardware configuration and the rules every field must obey.

The dataclasses below are what the engine reads. Each scalar field carries its rule (range,
power of two, or choice list) in its metadata, so adding a field (say ``memory.standard``)
is one line here and validation, error messages and dict round trips follow by themselves.

Validation works on plain nested dicts (the shape of the TOML file): :func:`normalise`
checks one and fills defaults, naming the dotted field path in every error.
:class:`NpuConfig` runs the same check on itself when constructed, so a config built by hand
or with :func:`dataclasses.replace` is held to the same rules as one loaded from a file.
"""

import dataclasses
import difflib
import math
from dataclasses import dataclass, field
from typing import Any

from npusim.errors import NpusimError
from npusim.kernels.isa import DATAFLOWS, VECTOR_OPS
from npusim.kernels.names import MEMORY_TYPES, POLICIES
from npusim.kernels.network.names import ALLOCATORS, MAX_VCS, PRIORITIES  # plain names, no numba
from npusim.noc.topologies import NOC_TYPES  # one file per topology

# ---------------------------------------------------------------------------------------
# Choice lists and defaults
# ---------------------------------------------------------------------------------------

PRECISIONS = (1, 2, 4)
PAGE_POLICIES = ("open", "closed")
CHANNEL_HASHES = ("none", "ipoly")
ADDRESS_FIELDS = ("Ro", "Bg", "Ba", "Ra", "Co", "Ch")
FIDELITIES = ("full", "fast")  # npusim.fast: "fast" extrapolates repeated regions
ENERGY_DATATYPES = ("auto", "int8", "int16", "fp16", "bf16", "fp32")  # npusim.energy.table

DEFAULT_VECTOR_LATENCY = {
    "add": 1, "sub": 1, "mul": 1, "div": 4, "max": 1, "min": 1,
    "exp": 4, "log": 4, "sqrt": 4, "rsqrt": 4, "recip": 4,
    "tanh": 4, "sigmoid": 4, "erf": 4, "gelu": 6, "pow": 4,
    "cast": 1, "reduce": 1,
}
"""Core cycles per pass over lanes*alus elements: simple ALU ops take one cycle,
transcendental and divide-like ops a short pipelined sequence, GELU a little more."""

LATENCY_RANGE = (1, 10000)
MHZ_RANGE = (1, 100000)


# ---------------------------------------------------------------------------------------
# Field rules
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """What one scalar field accepts: kind is "int", "pow2", "choice", "str" or "bool"."""

    kind: str
    lo: int = 0
    hi: int = 0
    choices: tuple = ()

    def describe(self) -> str:
        if self.kind == "int":
            return f"an integer in {self.lo}..{self.hi}"
        if self.kind == "pow2":
            return f"a power of two in {self.lo}..{self.hi}"
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "bool":
            return "true or false"
        if self.kind == "partitions":
            return "a list of core lists, e.g. [[0, 1], [2, 3]]"
        if self.kind == "ints":
            return f"a list of integers in {self.lo}..{self.hi}"
        return "a non-empty string" if self.lo else "a string"

    def problem(self, value: Any) -> str | None:
        """Why `value` breaks the rule ("wrong type", "out of range", ...), or None."""
        if self.kind == "bool":
            return None if type(value) is bool else f"has the wrong type ({type(value).__name__})"
        if self.kind == "partitions":
            ok = isinstance(value, (list, tuple)) and all(
                isinstance(part, (list, tuple)) and part
                and all(type(c) is int and c >= 0 for c in part) for part in value)
            return None if ok else "is not a list of non-empty lists of core indices"
        if self.kind == "ints":
            if not isinstance(value, (list, tuple)) or any(type(v) is not int for v in value):
                return "is not a list of integers"
            return None if all(self.lo <= v <= self.hi for v in value) else "is out of range"
        wants_int = self.kind in ("int", "pow2") or (
            self.kind == "choice" and isinstance(self.choices[0], int))
        if wants_int:
            # bool is a subclass of int, but `true` is never a sensible core count.
            if type(value) is not int:
                return f"has the wrong type ({type(value).__name__})"
        elif not isinstance(value, str):
            return f"has the wrong type ({type(value).__name__})"
        if self.kind in ("int", "pow2") and not self.lo <= value <= self.hi:
            return "is out of range"
        if self.kind == "pow2" and value & (value - 1):
            return "is not a power of two"
        if self.kind == "choice" and value not in self.choices:
            return "is not a valid choice"
        if self.kind == "str" and self.lo and not value:
            return "is empty"
        return None


def _int(lo: int, hi: int, **kw) -> Any:
    return field(metadata={"rule": Rule("int", lo, hi)}, **kw)


def _pow2(lo: int, hi: int, **kw) -> Any:
    return field(metadata={"rule": Rule("pow2", lo, hi)}, **kw)


def _choice(choices: tuple, **kw) -> Any:
    return field(metadata={"rule": Rule("choice", choices=choices)}, **kw)


def _str(nonempty: bool = False, **kw) -> Any:
    return field(metadata={"rule": Rule("str", lo=int(nonempty))}, **kw)


def _bool(**kw) -> Any:
    return field(metadata={"rule": Rule("bool")}, **kw)


def _partitions(**kw) -> Any:
    return field(metadata={"rule": Rule("partitions")}, **kw)


def _ints(lo: int, hi: int, **kw) -> Any:
    return field(default=(), metadata={"rule": Rule("ints", lo, hi)}, **kw)


def _free_table() -> Any:
    """A table of free-form entries (checked by the section's own rule, not the schema)."""
    return field(default_factory=dict, metadata={"free_table": True})


def _latency_table() -> Any:
    return field(default_factory=lambda: dict(DEFAULT_VECTOR_LATENCY),
                 metadata={"latency_table": True})


# ---------------------------------------------------------------------------------------
# The configuration tree
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class SystolicConfig:
    """Systolic array (Gemmini-like). ``dataflow`` picks its PRELOAD/GEMM schedule
    (``npusim/lowering/array.py``) and timing rule (``kernels/systolic.py``); "ws" (weight
    stationary) is the one modelled so far."""

    width: int = _int(1, 4096)          # array columns = output features
    height: int = _int(1, 4096)         # array rows = reduction depth
    # Gemmini RTL keeps the array input busy at least this many cycles per GEMM row chunk.
    min_gemm_cycles: int = _int(1, 1024, default=4)
    dataflow: str = _choice(DATAFLOWS, default="ws")


@dataclass(frozen=True, kw_only=True)
class VectorConfig:
    """SIMD vector unit: lanes*alus elements per pass; latency in core cycles per pass."""

    lanes: int = _int(1, 4096)
    alus: int = _int(1, 1024)
    latency: dict[str, int] = _latency_table()

    def __post_init__(self):
        # Own a copy with every op present, so callers may pass a partial dict.
        object.__setattr__(self, "latency", {**DEFAULT_VECTOR_LATENCY, **self.latency})

    def __hash__(self):
        return hash((self.lanes, self.alus, tuple(sorted(self.latency.items()))))


@dataclass(frozen=True, kw_only=True)
class CoreConfig:
    """One NPU core: systolic array, vector unit, scratchpad, accumulator, queues."""

    systolic: SystolicConfig
    vector: VectorConfig
    spad_kib: int = _int(1, 1048576)
    accum_kib: int = _int(1, 1048576)
    ld_queue: int = _int(1, 1024, default=8)
    st_queue: int = _int(1, 1024, default=8)
    ex_queue: int = _int(1, 1024, default=8)

    @property
    def spad_bytes(self) -> int:
        return self.spad_kib * 1024

    @property
    def accum_bytes(self) -> int:
        return self.accum_kib * 1024


@dataclass(frozen=True, kw_only=True)
class DmaConfig:
    """DMA engine: bytes per memory request (ONNXim dram_req_size) and request tags."""

    request_bytes: int = _pow2(8, 4096, default=32)
    # requests each of a core's two DMA engines (loads, stores) may have in flight at once
    # (transaction tags: Gemmini's StreamReader and StreamWriter own nXacts ids each); with
    # the round-trip latency this bounds the bandwidth one engine can draw
    max_outstanding: int = _int(1, 65536, default=128)


@dataclass(frozen=True, kw_only=True)
class RouterConfig:
    """Input-queued virtual-channel routers (every noc.type but the crossbar's own model).
    Defaults are what Booksim runs for its ``runfiles/meshconfig``; delays in NoC cycles."""

    vcs: int = _int(1, MAX_VCS, default=16)         # virtual channels per port
    vc_buffer_flits: int = _int(1, 1024, default=8)  # flits each VC buffers
    vc_allocator: str = _choice(ALLOCATORS, default="islip")
    sw_allocator: str = _choice(ALLOCATORS, default="islip")
    vc_alloc_iters: int = _int(1, 16, default=1)     # allocator iterations (Booksim's IQ
    sw_alloc_iters: int = _int(1, 16, default=1)     # router runs 1: see npusim/noc/booksim.py)
    routing_delay: int = _int(0, 100, default=0)     # 0: lookahead routing
    vc_alloc_delay: int = _int(1, 100, default=1)
    sw_alloc_delay: int = _int(1, 100, default=1)
    st_delay: int = _int(1, 100, default=1)          # switch traversal
    credit_delay: int = _int(0, 100, default=2)      # a credit's processing at its router
    # a VC is handed to a new packet only once the last credit of the previous one is back
    wait_for_tail_credit: bool = _bool(default=True)
    # what the allocators' arbiters prefer before their round robin: nothing, or the older
    # packet (Booksim's priority = age: the VC whose front packet was created first)
    priority: str = _choice(PRIORITIES, default="none")


@dataclass(frozen=True, kw_only=True)
class DieToDieConfig:
    """Chiplets: a mesh or torus cut into ``dies`` dies per dimension (e.g. [2, 1]); links
    between dies have their own latency (cycles of their clock), width and clock."""

    dies: tuple = _ints(1, 64)
    latency: int = _int(1, 100000, default=20)
    link_bytes: int = _int(0, 4096, default=0)  # 0: noc.flit_bytes
    freq_mhz: int = _int(0, MHZ_RANGE[1], default=0)  # 0: noc.freq_mhz

    def __post_init__(self):
        object.__setattr__(self, "dies", tuple(self.dies))


@dataclass(frozen=True, kw_only=True)
class NocConfig:
    """Interconnect between cores and memory channels: the crossbar model, or a network of
    routers (one file per topology in npusim/noc/topologies/)."""

    type: str = _choice(NOC_TYPES)
    freq_mhz: int = _int(*MHZ_RANGE)
    latency: int = _int(0, 10000, default=1)  # crossbar: NoC cycles through it
    flit_bytes: int = _pow2(1, 1024)
    dims: tuple = _ints(1, 1024)        # mesh/torus/ring: routers per dimension ([] = fit)
    radix: int = _int(0, 256, default=0)  # fly: ports per router (0 = fit the endpoints)
    stages: int = _int(1, 8, default=1)   # fly: router stages
    file: str = _str(default="")          # custom: a Booksim anynet file
    link_latency: int = _int(1, 10000, default=1)  # NoC cycles per router-to-router link
    link_bytes: int = _int(0, 4096, default=0)     # link width; 0: flit_bytes
    core_routers: tuple = _ints(0, 1 << 20)    # site of each core ([] = the defaults)
    # network interfaces per core (ONNXim's icnt_injection_ports_per_core): requests leave
    # through whichever is free; a response comes back to interface (channel % ports)
    core_ports: int = _int(1, 64, default=1)
    memory_routers: tuple = _ints(0, 1 << 20)  # site of each memory channel
    router: RouterConfig = field(default_factory=RouterConfig)
    d2d: DieToDieConfig = field(default_factory=DieToDieConfig)

    def __post_init__(self):
        for name in ("dims", "core_routers", "memory_routers"):
            object.__setattr__(self, name, tuple(getattr(self, name)))


@dataclass(frozen=True, kw_only=True)
class ControllerConfig:
    """DRAM controller of each channel (used by memory type "dram")."""

    read_queue: int = _int(1, 1024, default=32)
    write_queue: int = _int(1, 1024, default=32)
    # writes drain once the write queue is this full, until it is down to the low mark
    write_high_pct: int = _int(1, 100, default=80)
    write_low_pct: int = _int(0, 99, default=20)
    page_policy: str = _choice(PAGE_POLICIES, default="open")
    refresh: bool = _bool(default=True)
    # address bit fields from the most significant: row, bank, rank, column, bank group,
    # channel: channel bits lowest above the request offset, then the bank-group bits, so a
    # sequential stream alternates bank groups (tCCD_S, not tCCD_L) as DDR4 controllers do
    address_mapping: str = _str(nonempty=True, default="RoBaRaCoBgCh")
    channel_hash: str = _choice(CHANNEL_HASHES, default="none")


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """Off-chip memory: "ideal" answers at once, "simple" is fixed latency + bandwidth,
    "dram" is the cycle-level DRAM of ``standard`` (a file in configs/dram/)."""

    type: str = _choice(MEMORY_TYPES)
    standard: str = _str(default="")    # "dram": a file in configs/dram/, e.g. "HBM2-2400_8Gb_x128"
    freq_mhz: int = _int(0, MHZ_RANGE[1], default=0)   # "dram": filled in from the standard
    channels: int = _int(0, 1024, default=0)           # "dram": 0 = the standard's count
    ranks: int = _int(0, 16, default=0)                # "dram": 0 = the standard's count
    latency: int = _int(0, 100000, default=0)          # memory cycles, used by "simple"
    channel_bytes_per_cycle: int = _int(0, 4096, default=0)  # "dram": from the standard
    # capacity in GiB (ONNXim dram_size); 0: unbounded. A workload whose tensors need more
    # DRAM address space runs with a warning (as ONNXim's language scheduler warns)
    capacity_gib: int = _int(0, 1 << 20, default=0)
    controller: ControllerConfig = field(default_factory=ControllerConfig)

    @property
    def peak_bytes_per_s(self) -> int:
        return self.channels * self.freq_mhz * 1_000_000 * self.channel_bytes_per_cycle

    @property
    def peak_gbps(self) -> float:
        """Peak bandwidth in GB/s (10**9 bytes per second)."""
        return self.peak_bytes_per_s / 1e9


@dataclass(frozen=True, kw_only=True)
class SchedulerConfig:
    """How requests share the cores: the policy (a file in ``kernels/policies/``), optional
    core partitions, and the batch limit of LLM serving (iteration-level batching)."""

    policy: str = _choice(POLICIES, default="fifo")
    # cores of each partition; empty: one partition of all cores ("spatial" splits evenly)
    partitions: tuple = _partitions(default=())
    max_batch: int = _int(1, 65536, default=32)  # LLM requests batched in one iteration

    def __post_init__(self):
        object.__setattr__(self, "partitions", tuple(tuple(p) for p in self.partitions))


@dataclass(frozen=True, kw_only=True)
class EnergyConfig:
    """How actions are priced: an energy table (``configs/energy/<table>.toml``, a ``.toml``
    path, or an Accelergy ERT ``.yaml``), the MAC datatype (``auto``: by ``precision``) and
    single-entry overrides (``override = { "mac.int8" = 0.25 }`` or nested tables)."""

    table: str = _str(nonempty=True, default="45nm")
    datatype: str = _choice(ENERGY_DATATYPES, default="auto")
    override: dict = _free_table()

    def __hash__(self):
        return hash((self.table, self.datatype, repr(sorted(self.override.items()))))


def _check_energy(energy: dict) -> None:
    """The table must load and every override must name one of its entries."""
    from npusim.energy.table import load_energy_table

    if not isinstance(energy["override"], dict):
        raise NpusimError(f"config field energy.override must be a table of entry = value, "
                          f"got {type(energy['override']).__name__}")
    try:
        table = load_energy_table(energy["table"])
    except NpusimError as e:
        raise NpusimError(f"config field energy.table = {energy['table']!r}: {e}") from None
    table.with_overrides(energy["override"])


def _check_scheduler(sched: dict, num_cores: int) -> None:
    seen: set[int] = set()
    for part in sched["partitions"]:
        for c in part:
            if c >= num_cores or c in seen:
                why = (f"core {c} does not exist (cores 0..{num_cores - 1})" if c >= num_cores
                       else f"core {c} is in two partitions")
                raise NpusimError(f"config field scheduler.partitions = "
                                  f"{_plain(sched['partitions'])}: {why}")
            seen.add(c)
    if sched["partitions"] and len(seen) != num_cores:
        missing = sorted(set(range(num_cores)) - seen)
        raise NpusimError(f"config field scheduler.partitions = {_plain(sched['partitions'])} "
                          f"leaves cores {missing} out: every core belongs to one partition")


def _plain(value: Any) -> Any:
    """Tuples as lists, the way the TOML file writes them."""
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def _check_memory(mem: dict, core_freq_mhz: int) -> None:
    """Cross-field rules of the memory section; fills what a DRAM standard defines."""
    kind = mem["type"]
    if kind == "dram":
        from npusim.dram import load_standard  # the standard files live in configs/dram/

        if not mem["standard"]:
            from npusim.dram import list_standards
            raise NpusimError("config field memory.standard is missing: memory.type = 'dram' "
                              f"needs one of {', '.join(list_standards())}")
        try:
            std = load_standard(mem["standard"])
        except NpusimError as e:
            raise NpusimError(f"config field memory.standard = {mem['standard']!r}: {e}") from None
        if mem["freq_mhz"] not in (0, std.freq_mhz):
            raise NpusimError(f"config field memory.freq_mhz = {mem['freq_mhz']} does not match "
                              f"{std.name} ({std.freq_mhz} MHz): leave it out for DRAM")
        mem["freq_mhz"] = std.freq_mhz
        mem["channels"] = mem["channels"] or std.channels * std.pseudo_channels
        mem["ranks"] = mem["ranks"] or std.ranks
        mem["channel_bytes_per_cycle"] = std.bytes_per_cycle
    elif kind == "ideal":  # answered the next core cycle: clock and width are nominal
        mem["freq_mhz"] = mem["freq_mhz"] or core_freq_mhz
        mem["channels"] = mem["channels"] or 1
    else:  # all it lacks in one message (one at a time, setting a type took three tries)
        bad = [f"memory.{name} = {mem[name]}" for name in
               ("freq_mhz", "channels", "channel_bytes_per_cycle") if mem[name] < 1]
        if bad:
            raise NpusimError(f"config field {' and '.join(bad)} "
                              f"{'is' if len(bad) == 1 else 'are'} out of range: {kind} memory "
                              f"needs a positive integer for each of memory.freq_mhz, "
                              f"memory.channels and memory.channel_bytes_per_cycle (its latency, "
                              f"memory.latency, is {mem['latency']} memory cycles)")
    ctl = mem["controller"]
    if ctl["write_low_pct"] >= ctl["write_high_pct"]:
        raise NpusimError(f"config field memory.controller.write_low_pct = {ctl['write_low_pct']}"
                          f" must be below write_high_pct = {ctl['write_high_pct']}")
    fields = [ctl["address_mapping"][i:i + 2] for i in range(0, len(ctl["address_mapping"]), 2)]
    required = {"Ro", "Ba", "Co", "Ch"}
    if (len(ctl["address_mapping"]) % 2 or any(f not in ADDRESS_FIELDS for f in fields)
            or len(set(fields)) != len(fields) or not required <= set(fields)):
        raise NpusimError(f"config field memory.controller.address_mapping = "
                          f"{ctl['address_mapping']!r} is not valid: must list each of "
                          f"{', '.join(ADDRESS_FIELDS)} at most once (Ro, Ba, Co, Ch required), "
                          f"most significant first, e.g. 'RoBgBaRaCoCh'")
    ch = mem["channels"]
    if ch & (ch - 1):
        if kind == "dram" or ctl["channel_hash"] == "ipoly":
            raise NpusimError(f"config field memory.channels = {ch} is not a power of two: "
                              f"DRAM address mapping needs 1, 2, 4, 8, ...")
    if ctl["channel_hash"] == "ipoly" and not 2 <= ch <= 64:
        raise NpusimError(f"config field memory.controller.channel_hash = 'ipoly' needs "
                          f"2..64 channels (a power of two), memory.channels = {ch}")


MAX_ROUTERS = 1024  # routing tables are routers x endpoints, computed once in Python
MAX_NOC_DIMS = 3  # a mesh or torus has 1 to 3 dimensions


def _check_noc(noc: dict, num_cores: int, channels: int) -> None:
    """Cross-field rules of the noc section; fills link widths and the d2d clock."""
    kind = noc["type"]
    dims = list(noc["dims"])
    grid = kind in ("mesh", "torus", "ring")
    if dims and not grid:
        raise NpusimError(f"config field noc.dims = {dims} applies to mesh, torus and ring "
                          f"networks, not noc.type = {kind!r}")
    if kind == "ring" and len(dims) > 1:
        raise NpusimError(f"config field noc.dims = {dims}: a ring has one dimension, "
                          f"e.g. [8]")
    if len(dims) > MAX_NOC_DIMS:
        raise NpusimError(f"config field noc.dims = {dims} has {len(dims)} dimensions: "
                          f"must have 1 to {MAX_NOC_DIMS}")
    if dims and math.prod(dims) > MAX_ROUTERS:
        raise NpusimError(f"config field noc.dims = {dims} makes {math.prod(dims)} routers: "
                          f"at most {MAX_ROUTERS}")
    if kind == "fly" and noc["radix"] == 1:
        raise NpusimError("config field noc.radix = 1 is out of range: a butterfly needs "
                          "0 (fit the endpoints) or 2..256 ports per router")
    if kind == "custom" and not noc["file"]:
        raise NpusimError("config field noc.file is missing: noc.type = 'custom' reads its "
                          "routers and links from a Booksim anynet file")
    dies = list(noc["d2d"]["dies"])
    if dies:
        if kind not in ("mesh", "torus"):
            raise NpusimError(f"config field noc.d2d.dies = {dies}: dies cut a mesh or torus, "
                              f"not noc.type = {kind!r}")
        if not dims or len(dies) != len(dims) or any(d > k for d, k in zip(dies, dims)):
            raise NpusimError(f"config field noc.d2d.dies = {dies} must give the dies along "
                              f"each dimension of noc.dims = {dims or '[] (give them)'}, at "
                              f"most one die per router")
    for name, n in (("core_routers", num_cores), ("memory_routers", channels)):
        if noc[name] and len(noc[name]) != n:
            raise NpusimError(f"config field noc.{name} lists {len(noc[name])} sites for "
                              f"{n} {'cores' if name[0] == 'c' else 'memory channels'}: "
                              f"give one each (or none for the defaults)")
    noc["link_bytes"] = noc["link_bytes"] or noc["flit_bytes"]
    noc["d2d"]["link_bytes"] = noc["d2d"]["link_bytes"] or noc["flit_bytes"]
    noc["d2d"]["freq_mhz"] = noc["d2d"]["freq_mhz"] or noc["freq_mhz"]


@dataclass(frozen=True, kw_only=True)
class NpuConfig:
    """A whole NPU. Construction validates the full tree (see module docstring)."""

    name: str = _str(nonempty=True)
    description: str = _str(default="")
    num_cores: int = _int(1, 1024)
    core_freq_mhz: int = _int(*MHZ_RANGE)
    precision: int = _choice(PRECISIONS)   # bytes per element
    core: CoreConfig
    dma: DmaConfig = field(default_factory=DmaConfig)
    noc: NocConfig
    memory: MemoryConfig
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    energy: EnergyConfig = field(default_factory=EnergyConfig)
    # how the run is simulated: "full" every cycle of every layer, "fast" the repeated
    # regions until their steady state, the rest extrapolated (npusim.fast)
    fidelity: str = _choice(FIDELITIES, default="full")

    def __post_init__(self):
        normalise(to_plain_dict(self))


# ---------------------------------------------------------------------------------------
# Checking plain dicts against the tree
# ---------------------------------------------------------------------------------------

def _is_section(f: dataclasses.Field) -> bool:
    return dataclasses.is_dataclass(f.type)


def _has_default(f: dataclasses.Field) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _unknown_key(path: str, key: str, valid: list[str]) -> NpusimError:
    close = difflib.get_close_matches(str(key), valid, n=1)
    hint = f" (did you mean {_join(path, close[0])}?)" if close else ""
    where = f"in {path}" if path else "at the top level"
    return NpusimError(f"config has unknown key {_join(path, str(key))}{hint}; "
                       f"valid keys {where}: {', '.join(valid)}")


def _check_value(path: str, rule: Rule, value: Any) -> None:
    problem = rule.problem(value)
    if problem:
        raise NpusimError(f"config field {path} = {value!r} {problem}: must be {rule.describe()}")


def _check_latency(path: str, table: Any) -> dict[str, int]:
    if not isinstance(table, dict):
        raise NpusimError(f"config field {path} must be a table of op = cycles, "
                          f"got {type(table).__name__}")
    for op in table:
        if op not in VECTOR_OPS:
            raise _unknown_key(path, op, list(VECTOR_OPS))
    rule = Rule("int", *LATENCY_RANGE)
    out = {}
    for op in VECTOR_OPS:
        value = table.get(op, DEFAULT_VECTOR_LATENCY[op])
        _check_value(f"{path}.{op}", rule, value)
        out[op] = value
    return out


def normalise_section(cls: type, data: Any, path: str) -> dict:
    """Check `data` against dataclass `cls`; return a new dict with defaults filled in."""
    if not isinstance(data, dict):
        what = f"config section {path}" if path else "config"
        raise NpusimError(f"{what} must be a table, got {type(data).__name__}")
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    for key in data:
        if key not in names:
            raise _unknown_key(path, key, names)
    out: dict = {}
    for f in fields:
        sub = _join(path, f.name)
        if f.metadata.get("latency_table"):
            out[f.name] = _check_latency(sub, data.get(f.name, {}))
        elif f.metadata.get("free_table"):
            out[f.name] = data.get(f.name, {})
        elif _is_section(f):
            if f.name not in data and not all(_has_default(g) for g in dataclasses.fields(f.type)):
                raise NpusimError(f"config section {sub} is missing")
            out[f.name] = normalise_section(f.type, data.get(f.name, {}), sub)
        elif f.name in data:
            _check_value(sub, f.metadata["rule"], data[f.name])
            out[f.name] = data[f.name]
        elif f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        else:
            raise NpusimError(f"config field {sub} is missing: must be "
                              f"{f.metadata['rule'].describe()}")
    return out


def normalise(data: Any) -> dict:
    """Validate a whole-NPU dict (TOML shape) and return it with every default filled in."""
    out = normalise_section(NpuConfig, data, "")
    _check_memory(out["memory"], out["core_freq_mhz"])
    _check_scheduler(out["scheduler"], out["num_cores"])
    _check_noc(out["noc"], out["num_cores"], out["memory"]["channels"])
    _check_energy(out["energy"])
    return out


def build(cls: type, data: dict) -> Any:
    """Turn an already normalised dict into the dataclass tree (no further checks here)."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        value = data[f.name]
        kwargs[f.name] = build(f.type, value) if _is_section(f) else (
            dict(value) if isinstance(value, dict) else value)
    return cls(**kwargs)


def to_plain_dict(obj: Any) -> dict:
    """Dataclass tree -> nested plain dicts with the same nesting as the TOML file."""
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out[f.name] = to_plain_dict(value)
        elif isinstance(value, tuple):
            out[f.name] = _plain(value)
        elif isinstance(value, dict):
            out[f.name] = dict(value)
        else:
            out[f.name] = value
    return out


def check_value_key(dotted: str) -> None:
    """Check that a dotted key (``core.systolic.width``) names one value in the schema.

    Used for overrides, so a typo is reported against the key the user typed rather than
    as an unknown key somewhere inside the merged dict."""
    fields_of: Any = NpuConfig
    path = ""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if fields_of == "free":  # a free-form table takes any key; its section checks them
            return
        if fields_of == "latency":
            valid = list(VECTOR_OPS)
        else:
            valid = [f.name for f in dataclasses.fields(fields_of)]
        if part not in valid:
            raise _unknown_key(path, part, valid)
        path = _join(path, part)
        if fields_of == "latency":
            fields_of = None
        else:
            f = next(f for f in dataclasses.fields(fields_of) if f.name == part)
            fields_of = ("latency" if f.metadata.get("latency_table")
                         else "free" if f.metadata.get("free_table")
                         else f.type if _is_section(f) else None)
        if fields_of is None and i < len(parts) - 1:
            raise NpusimError(f"config key {dotted}: {path} is a value, not a table")
    if fields_of is not None:
        raise NpusimError(f"config key {dotted} names a table; name one value inside it, "
                          f"e.g. {dotted}.<field>=<value>")


def field_rule(dotted: str) -> Rule:
    """The rule of the scalar field ``dotted`` (``noc.router.vcs``), for checking a value
    that comes from elsewhere (a Booksim file) against it under that input's own name."""
    cls: Any = NpuConfig
    *sections, leaf = dotted.split(".")
    for part in sections:
        cls = next(f.type for f in dataclasses.fields(cls) if f.name == part)
    return next(f.metadata["rule"] for f in dataclasses.fields(cls) if f.name == leaf)
