"""Measure a network alone under synthetic traffic, the way Booksim does (``npusim noc``).

Every node creates packets of ``packet_flits`` flits by a Bernoulli process (``rate``
flits per node per cycle, so ``rate / packet_flits`` packets) to destinations drawn from a
traffic pattern, queues them without bound and injects them one flit per cycle; sinks
accept every flit. Booksim's ``latency`` simulation then runs in sample periods:

1. warm-up: ``warmup_periods`` periods, statistics cleared at the start of periods 0, 2, ...;
2. measurement: statistics cleared, packets created from then on are *measured*; each
   period, the average latency of delivered packets and the accepted throughput since the
   clear are compared with the previous period's; after ``converge_periods`` periods in a
   row within ``stopping_threshold`` (relative change) of each other, or ``max_samples``
   periods in all, the measurement ends (``--cycles N`` instead measures exactly N cycles);
3. drain: traffic goes on until every measured packet has arrived (and no source will
   create another one), and stops at the end of that cycle.

Whenever, at the end of a period (or of drain cycles 1000, 2000, ... the drain reaches),
the average latency of the delivered packets and of every flit still in flight (its age
so far) exceeds ``latency_threshold``, the network is **saturated** (Booksim: "Simulation
unstable") and the run stops. Reported latency is from a packet's creation to its tail's
arrival (source queueing included); accepted throughput counts flits received per node per
cycle from the start of the measurement to the start of the drain.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from npusim.errors import NpusimError

PATTERNS = ("uniform", "transpose", "bitcomp", "hotspot", "neighbor", "tornado", "shuffle",
            "bitrev", "randperm")
DRAIN_CHECK_CYCLES = 1000


@dataclass(frozen=True)
class Traffic:
    """A synthetic workload: pattern, offered load (flits per node per cycle), packet size."""

    pattern: str = "uniform"
    rate: float = 0.1
    packet_flits: int = 1
    hotspots: tuple[int, ...] = (0,)   # hotspot: destinations,
    hotspot_weights: tuple[int, ...] = ()  # and their relative weights (default equal)
    seed: int = 0


@dataclass(frozen=True)
class Measurement:
    """Booksim's latency-simulation settings (its config names in comments)."""

    sample_period: int = 1000          # sample_period
    warmup_periods: int = 3            # warmup_periods
    max_samples: int = 10              # max_samples
    converge_periods: int = 3          # (fixed at 3 in Booksim)
    stopping_threshold: float = 0.05   # stopping_thres (latency), acc_stopping_thres
    latency_threshold: float = 500.0   # latency_thres
    cycles: int = 0                    # measure exactly this many cycles (0: until converged)
    max_drain_cycles: int = 1_000_000


def _bits(n: int, what: str) -> int:
    b = n.bit_length() - 1
    if n < 2 or 1 << b != n:
        raise NpusimError(f"traffic {what} needs a power-of-two number of nodes, the network "
                          f"has {n}")
    return b


def destination_table(pattern: str, n: int, shape: list[int] | None, traffic: Traffic):
    """(kernel pattern id, table): a fixed destination per node, or cumulative weights of a
    hotspot, or the node count of uniform traffic. ``shape`` is the k-ary n-cube shape of
    the nodes when they sit one per router of a mesh, torus or ring (``neighbor``,
    ``tornado``), else None (the nodes are taken as a ring)."""
    from npusim.kernels.network.synthetic import PAT_TABLE, PAT_UNIFORM, PAT_WEIGHTED

    src = np.arange(n)
    if pattern == "uniform":
        return PAT_UNIFORM, np.zeros(n, dtype=np.int64)
    if pattern == "hotspot":
        spots = list(traffic.hotspots)
        weights = list(traffic.hotspot_weights) or [1] * len(spots)
        if not spots or len(weights) != len(spots) or min(weights) < 1:
            raise NpusimError("traffic hotspot needs hotspot nodes and as many positive "
                              "weights")
        bad = [s for s in spots if not 0 <= s < n]
        if bad:
            raise NpusimError(f"traffic hotspot node {bad[0]} does not exist (nodes 0..{n - 1})")
        w = np.zeros(n, dtype=np.int64)
        for s, x in zip(spots, weights):
            w[s] += x
        return PAT_WEIGHTED, np.cumsum(w).astype(np.int64)
    if pattern == "transpose":
        b = _bits(n, "transpose")
        if b % 2:
            raise NpusimError(f"traffic transpose needs a square number of nodes (4, 16, 64, "
                              f"...), the network has {n}")
        h = b // 2
        lo = (1 << h) - 1
        dest = ((src >> h) & lo) | ((src << h) & (lo << h))
    elif pattern == "bitcomp":
        _bits(n, "bitcomp")
        dest = ~src & (n - 1)
    elif pattern == "bitrev":
        b = _bits(n, "bitrev")
        dest = np.array([int(format(s, f"0{b}b")[::-1], 2) for s in src])
    elif pattern == "shuffle":
        _bits(n, "shuffle")
        dest = ((src << 1) & (n - 1)) | ((src << 1) >= n)
    elif pattern in ("neighbor", "tornado"):
        dims = shape or [n]
        dest = np.zeros(n, dtype=np.int64)
        stride = 1
        for k in dims:
            c = (src // stride) % k
            step = 1 if pattern == "neighbor" else (k + 1) // 2 - 1
            dest += ((c + step) % k) * stride
            stride *= k
    elif pattern == "randperm":
        dest = np.random.default_rng(traffic.seed).permutation(n)
    else:
        raise NpusimError(f"unknown traffic pattern {pattern!r}: must be one of "
                          f"{', '.join(PATTERNS)}")
    return PAT_TABLE, np.asarray(dest, dtype=np.int64)


@dataclass
class NocRun:
    """What ``measure`` returns (``to_dict`` gives the JSON of ``npusim noc --json``)."""

    avg_packet_latency_cycles: float
    accepted_flits_per_node_cycle: float
    saturated: bool
    sim_cycles: int
    wall_seconds: float
    offered_flits_per_node_cycle: float
    injected_flits_per_node_cycle: float
    avg_network_latency_cycles: float
    max_packet_latency_cycles: int
    packets_measured: int
    converged: bool
    router_cycles_per_second: float
    compile_seconds: float
    topology: dict = field(default_factory=dict)
    traffic: dict = field(default_factory=dict)
    measurement: dict = field(default_factory=dict)
    link_flits: list = field(default_factory=list)
    router_flits: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _seed_state(n: int, seed: int) -> np.ndarray:
    """A non-zero xorshift state per node (splitmix64 of seed and node)."""
    out = np.zeros(n, dtype=np.uint64)
    mask = (1 << 64) - 1
    for i in range(n):
        z = (seed * 0x9E3779B97F4A7C15 + (i + 1) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out[i] = (z ^ (z >> 31)) or 1
    return out


def measure(net, traffic: Traffic, meas: Measurement = Measurement(),
            shape: list[int] | None = None) -> NocRun:
    """Run synthetic ``traffic`` on ``net`` (a fresh :class:`npusim.noc.tables.Network`
    with one message class) and measure it as the module docstring says."""
    from npusim.kernels.network import synthetic as ky

    p = net.params
    N = p.n_nodes
    if not 1 <= traffic.packet_flits <= 1024:  # first: the rate's bound depends on it
        raise NpusimError(f"packet size {traffic.packet_flits} flits is out of range: 1..1024")
    if not 0 < traffic.rate <= traffic.packet_flits:
        raise NpusimError(f"traffic rate {traffic.rate} flits/node/cycle is out of range: "
                          f"must be above 0 and at most 1 packet per cycle "
                          f"({traffic.packet_flits} flits)")
    kind, table = destination_table(traffic.pattern, N, shape, traffic)
    tp = ky.TrafficParams(traffic.rate / traffic.packet_flits, kind, traffic.packet_flits, 0)
    stat = np.zeros(ky.N_SY_FIELDS, dtype=np.int64)
    stat[ky.SY_RECORD_FROM] = 1 << 62
    stat[ky.SY_RECORD_TO] = 1 << 62
    sy = ky.SynState(np.zeros((ky.N_SR_FIELDS, N), dtype=np.int64), _seed_state(N, traffic.seed),
                     table, np.zeros(N, dtype=np.int64), stat)
    ns, nt = net.state, net.tables
    t0 = time.perf_counter()
    for n in range(N):
        ky.draw_next_packet(sy, tp, n, -1)
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ky.run_synthetic(ns, nt, p, sy, tp, 0)
    compile_s += time.perf_counter() - t0

    wall = 0.0
    now = 0
    reset_time = 0

    def advance(cycles):
        nonlocal wall, now
        t1 = time.perf_counter()
        now = int(ky.run_synthetic(ns, nt, p, sy, tp, now + cycles))
        wall += time.perf_counter() - t1

    def clear():
        nonlocal reset_time
        for f in (ky.SY_LAT_SUM, ky.SY_LAT_N, ky.SY_LAT_MAX, ky.SY_NLAT_SUM, ky.SY_INJECTED):
            stat[f] = 0
        sy.accepted[:] = 0
        reset_time = now

    def latency_with_inflight():
        count = stat[ky.SY_LAT_N] + stat[ky.SY_INFLIGHT]
        total = (stat[ky.SY_LAT_SUM] + stat[ky.SY_INFLIGHT] * now
                 - stat[ky.SY_INFLIGHT_CTIME])
        return total / count if count else 0.0

    def over_threshold():
        return meas.latency_threshold >= 0 and latency_with_inflight() > meas.latency_threshold

    running = False
    saturated = False
    converged = 0
    clear_last = False
    prev_lat = prev_acc = 0.0
    phases = 0
    stat[ky.SY_COUNT_ALL] = 1
    stat[ky.SY_COUNT_ACCEPTED] = 1
    measured_cycles = 0
    while True:
        if running and meas.cycles:
            if measured_cycles >= meas.cycles:
                break
        elif phases >= meas.max_samples or (running and converged >= meas.converge_periods):
            break
        if clear_last or (not running and phases % 2 == 0):
            clear_last = False
            clear()
        period = meas.sample_period
        if running and meas.cycles:
            period = min(period, meas.cycles - measured_cycles)
        advance(period)
        if running:
            measured_cycles += period
        lat = stat[ky.SY_LAT_SUM] / stat[ky.SY_LAT_N] if stat[ky.SY_LAT_N] else 0.0
        acc = sy.accepted.sum() / max(1, now - reset_time) / N
        lat_change = abs(lat - prev_lat) / lat if lat else math.inf
        acc_change = abs(acc - prev_acc) / acc if acc else math.inf
        prev_lat, prev_acc = lat, acc
        if over_threshold():
            saturated = True
            break
        if not running:
            if phases + 1 >= meas.warmup_periods:
                clear_last = True
                running = True
                stat[ky.SY_COUNT_ALL] = 0
                stat[ky.SY_RECORD_FROM] = now
        elif lat_change <= meas.stopping_threshold and acc_change <= meas.stopping_threshold:
            converged += 1
        else:
            converged = 0
        phases += 1

    drain_time = now
    accepted = sy.accepted.sum() / max(1, drain_time - reset_time) / N
    injected = stat[ky.SY_INJECTED] / max(1, drain_time - reset_time) / N
    if not saturated:
        # drain: keep the traffic on until every measured packet has arrived
        # (Booksim checks the threshold every 1000 steps of its drain loop, which ends
        # the step the drain is done: a check only at a drain cycle it reaches)
        stat[ky.SY_RECORD_TO] = drain_time
        stat[ky.SY_COUNT_ACCEPTED] = 0
        stat[ky.SY_STOP_DRAINED] = 1
        # (until drained: the rule of kernels/network/synthetic.py's _drained)
        while stat[ky.SY_RECORD_LEFT] > 0 or sy.src[ky.SR_NEXT].min() < drain_time:
            check_at = drain_time + DRAIN_CHECK_CYCLES * ((now - drain_time)
                                                          // DRAIN_CHECK_CYCLES + 1)
            advance(check_at - now)  # returns early once drained
            if now == check_at and over_threshold():
                saturated = True
                break
            if now - drain_time > meas.max_drain_cycles:
                saturated = True
                break
    n_lat = int(stat[ky.SY_LAT_N])
    lat = stat[ky.SY_LAT_SUM] / n_lat if n_lat else 0.0
    if saturated:
        lat = latency_with_inflight()
    return NocRun(
        avg_packet_latency_cycles=float(lat),
        accepted_flits_per_node_cycle=float(accepted),
        saturated=bool(saturated),
        sim_cycles=int(now),
        wall_seconds=wall,
        offered_flits_per_node_cycle=float(traffic.rate),
        injected_flits_per_node_cycle=float(injected),
        avg_network_latency_cycles=float(stat[ky.SY_NLAT_SUM] / n_lat) if n_lat else 0.0,
        max_packet_latency_cycles=int(stat[ky.SY_LAT_MAX]),
        packets_measured=n_lat,
        converged=bool(not saturated and (meas.cycles or converged >= meas.converge_periods)),
        router_cycles_per_second=now * p.n_routers / wall if wall else 0.0,
        compile_seconds=compile_s,
        traffic=asdict(traffic),
        measurement=asdict(meas),
        link_flits=[int(x) for x in net.state.link_flits[net.link_rows()]],
        router_flits=[int(x) for x in net.state.router_flits],
    )
