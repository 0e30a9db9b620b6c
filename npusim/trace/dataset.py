"""The trace as an ``xarray.Dataset``: named dimensions, units, the config in attributes.

Layout (dimensions in brackets; DRAM variables only for ``memory.type = "dram"``):

- binned, ``time`` = first core cycle of each bin (``time_seconds`` alongside):
  ``reads, writes, row_hits, row_misses, row_conflicts, activates, precharges,
  bank_busy_cycles`` [time, channel, bank]; ``all_bank_precharges, refreshes,
  read_queue_occupancy, write_queue_occupancy`` [time, channel];
  ``noc_request_flits, noc_response_flits`` [time, core, channel];
  ``unit_busy_cycles, unit_stalled_cycles, unit_idle_cycles`` [time, core, unit];
  ``core_active_cycles`` [time, core];
- per layer / request: ``layer_start_cycle, layer_end_cycle`` [layer],
  ``request_start_cycle, request_end_cycle`` [request];
- the window, ``window_time`` = DRAM cycle: ``bank_state, open_row``
  [window_time, channel, bank], ``initial_open_row`` [channel, bank], and the command log
  ``command_cycle, command_channel, command_rank, command_bankgroup, command_bank,
  command_row, command_column, command_type, command_core, command_request`` [command].
"""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

from npusim.kernels import state as ks
from npusim.trace.record import N_KINDS, UNITS, TraceRecorder

# bank_state codes
BANK_STATES = ("closed", "open", "activating", "reading", "writing", "precharging",
               "refreshing")
_STATE_OF_COMMAND = {"ACT": 2, "RD": 3, "RDA": 3, "WR": 4, "WRA": 4, "PRE": 5, "PREA": 5,
                     "REF": 6}
BANK_BUSY_DEFINITION = (
    "a bank is busy from the issue of a command to it until the command's work is done: "
    "ACT tRCD, RD CL+BL, WR CWL+BL, RDA/WRA the access then its auto-precharge, PRE tRP, "
    "PREA tRPab (or tRP), REF tRFC; PREA and REF occupy every bank of their rank; "
    "overlapping commands count once")


def _int(a: np.ndarray) -> np.ndarray:
    """int32 where the values fit (smaller files), else int64."""
    a = np.asarray(a)
    if a.size == 0 or (a.min() >= np.iinfo(np.int32).min and a.max() <= np.iinfo(np.int32).max):
        return a.astype(np.int32)
    return a.astype(np.int64)


def _var(dims, data, units: str, description: str, **attrs) -> xr.Variable:
    return xr.Variable(dims, data, attrs={"units": units, "description": description, **attrs})


def build_dataset(rec: TraceRecorder, result, prog, fast=None) -> xr.Dataset:
    """The Dataset of a finished traced run (``result``: its ``npusim.results.Result``;
    ``fast``: the ``npusim.fast.FastForward`` of a fast-fidelity run)."""
    from npusim import __version__
    from npusim.config import config_to_dict

    cfg, tb = rec.cfg, rec.tb
    n = rec.n_bins
    width = rec.bins.width
    f_core = cfg.core_freq_mhz * 1e6
    time = np.arange(n, dtype=np.int64) * width
    coords = {"time": _var("time", time, "core cycles", "first core cycle of the bin"),
              "time_seconds": _var("time", time / f_core, "s", "start of the bin"),
              "core": np.arange(cfg.num_cores), "unit": list(UNITS)}
    data = {}
    data.update(_core_vars(rec, n, width))
    data.update(_noc_vars(rec, n, coords))
    data.update(_layer_vars(rec, prog, coords))
    attrs = {
        "title": f"npusim trace of {result.model} on {cfg.name}",
        "model": result.model,
        "npusim_version": __version__,
        "config_name": cfg.name,
        "config": json.dumps(config_to_dict(cfg), sort_keys=True),
        "total_cycles": int(result.total_cycles),
        "core_freq_mhz": int(cfg.core_freq_mhz),
        "bin_cycles": int(width),
        "bin_mode": "auto" if rec.bins.merge else "fixed",
        "memory_type": cfg.memory.type,
        "window_start_cycle": int(rec.options.window[0]),
        "window_end_cycle": int(rec.options.window[1]),
        "unit_definitions": ("busy: systolic = GEMM stream cycles, vector = vector-op cycles, "
                             "dma_load/dma_store = an MVIN/MVOUT is queued or in flight; "
                             "stalled = the core holds a tile but the unit is not busy; "
                             "idle = the core holds no tile"),
    }
    if rec.dram:
        coords.update(_bank_coords(rec))
        data.update(_dram_vars(rec, n))
        data.update(_window_vars(rec, coords, attrs))
        attrs.update({"dram_standard": rec.std.name, "dram_freq_mhz": int(rec.std.freq_mhz),
                      "bank_busy_definition": BANK_BUSY_DEFINITION,
                      "bank_state_codes": ", ".join(f"{i}={s}" for i, s in
                                                    enumerate(BANK_STATES))})
    if fast is not None:
        _extrapolated_vars(fast, time, tb.core_period, coords, data, attrs)
    if result.energy:
        from npusim.energy.account import COMPONENTS
        from npusim.energy.power import binned_power

        coords["component"] = list(COMPONENTS)
        data["power"] = _var(("time", "component"),
                             binned_power(result.energy, data, n, width, result.total_cycles,
                                          f_core),
                             "W", "average power of each energy component over the bin "
                             "(npusim.energy.power: the run's joules spread by the bin's "
                             "activity); power x bin time sums to the result's energy")
        attrs["energy_j"] = float(result.energy["total_j"])
        attrs["energy_table"] = result.energy["table"]["name"]
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _extrapolated_vars(fast, time, P: int, coords: dict, data: dict, attrs: dict) -> None:
    """Fast fidelity: the binned variables show what was simulated, on the simulated clock;
    the steady-state time skipped is listed, not invented, and ``time_real`` maps each bin
    to the run's cycles (layer and request times are already in them)."""
    cuts = sorted(fast.skipped)  # (simulated tick the skip happened at, ticks skipped)
    at = np.array([c[0] for c in cuts], dtype=np.int64)
    skipped = np.array([c[1] for c in cuts], dtype=np.int64)
    before = np.concatenate([[0], np.cumsum(skipped)])
    real = time + before[np.searchsorted(at, time * P, side="right")] // P
    coords["time_real"] = _var("time", real, "core cycles",
                               "the run's cycle at the start of the bin: simulated cycle plus "
                               "the steady-state cycles extrapolated before it")
    coords["extrapolated"] = np.arange(len(cuts))
    data["extrapolated_at_cycle"] = _var("extrapolated", at // P, "core cycles",
                                         "simulated cycle at which a repeated region's "
                                         "remaining iterations were extrapolated")
    data["extrapolated_cycles"] = _var("extrapolated", skipped // P, "core cycles",
                                       "cycles extrapolated there, not simulated: no binned "
                                       "data exists for them")
    attrs["fidelity"] = "fast"


def _core_vars(rec: TraceRecorder, n: int, width: int) -> dict:
    C = rec.cfg.num_cores
    a = rec.bins.final("core", n).reshape(n, C, N_KINDS) if "core" in rec.bins.arrays \
        else np.zeros((n, C, N_KINDS), np.int64)
    busy, active = a[:, :, :4], a[:, :, 4]
    stalled = active[:, :, None] - busy
    idle = np.broadcast_to((width - active)[:, :, None], busy.shape)
    return {
        "core_active_cycles": _var(("time", "core"), _int(active), "core cycles",
                                   "cycles the core held at least one tile"),
        "unit_busy_cycles": _var(("time", "core", "unit"), _int(busy), "core cycles",
                                 "cycles the unit was working"),
        "unit_stalled_cycles": _var(("time", "core", "unit"), _int(stalled), "core cycles",
                                    "cycles the core held a tile but the unit was not busy"),
        "unit_idle_cycles": _var(("time", "core", "unit"), _int(idle), "core cycles",
                                 "cycles the core held no tile"),
    }


def _noc_vars(rec: TraceRecorder, n: int, coords: dict) -> dict:
    noc = rec.bins.final("noc", n) if "noc" in rec.bins.arrays else None
    if noc is None or rec.cfg.memory.type == "ideal":
        return {}
    dims = ("time", "core", "channel")
    coords["channel"] = np.arange(noc.shape[-1])
    how = ("injected into the router network" if rec.routers
           else "granted on the crossbar link")
    out = {
        "noc_request_flits": _var(dims, _int(noc[:, ks.NOC_REQUEST]), "flits",
                                  f"request flits core -> channel {how}"),
        "noc_response_flits": _var(dims, _int(noc[:, ks.NOC_RESPONSE]), "flits",
                                   f"response flits channel -> core {how}"),
    }
    if rec.routers:
        out.update(_router_vars(rec, n, coords))
    return out


def _router_vars(rec: TraceRecorder, n: int, coords: dict) -> dict:
    """Per-link flits and utilization, per-router flits and buffer occupancy (the router
    network's rings, ``kernels/network/trace.py``)."""
    from npusim.kernels.network import state as kn

    tab, p = rec.network
    R, P = p.n_routers, p.ports
    rows = np.arange(R * P)
    dst = tab.link[kn.LK_DST, :R * P]
    links = rows[(dst >= 0) & (dst < R * P)]  # router outputs that lead to a router
    ends = rows[dst >= R * P]  # router outputs that lead to an endpoint (ejection)
    flits = rec.bins.final("noc_link", n)
    occ = rec.bins.final("noc_occ", n)
    coords["link"] = np.arange(len(links))
    coords["link_src_router"] = ("link", links // P)
    coords["link_dst_router"] = ("link", dst[links] // P)
    coords["router"] = np.arange(R)
    noc_cycles = _domain_cycles_per_bin(rec, n, rec.tb.noc_period)
    link_flits = flits[:, links]
    gap = tab.link[kn.LK_GAP, links][None, :]
    through = np.zeros((n, R), np.int64)  # flits each router's switch passed
    np.add.at(through.T, links // P, link_flits.T)
    np.add.at(through.T, ends // P, flits[:, ends].T)
    cycles = np.maximum(noc_cycles, 1)[:, None]
    return {
        "noc_link_flits": _var(("time", "link"), _int(link_flits), "flits",
                               "flits sent along the router-to-router link"),
        "noc_link_utilization": _var(
            ("time", "link"), (link_flits * gap / cycles).astype(np.float32), "fraction",
            "share of the bin's NoC cycles the link was passing a flit (a link narrower "
            "than a flit, or slower, takes several cycles per flit)"),
        "noc_router_flits": _var(("time", "router"), _int(through), "flits",
                                 "flits through the router's switch (to links and endpoints)"),
        "noc_router_occupancy": _var(
            ("time", "router"), (occ / cycles).astype(np.float32), "flits",
            "mean flits holding a slot of the router's input buffers (from the cycle their "
            "sender took the slot's credit until they leave)"),
    }


def _layer_vars(rec: TraceRecorder, prog, coords: dict) -> dict:
    P = rec.tb.core_period
    ls = rec.layer_times
    start = -(-ls[0] // P)
    end = -(-ls[1] // P)
    req = np.array([info.request for info in prog.layers], dtype=np.int64)
    coords["layer"] = np.arange(len(prog.layers))
    coords["layer_name"] = ("layer", [info.name for info in prog.layers])
    coords["layer_op_type"] = ("layer", [info.op_type for info in prog.layers])
    coords["layer_request"] = ("layer", req)
    n_req = int(req.max()) + 1 if len(req) else 0
    coords["request"] = np.arange(n_req)
    r_start = np.array([start[req == r].min() for r in range(n_req)], dtype=np.int64)
    r_end = np.array([end[req == r].max() for r in range(n_req)], dtype=np.int64)
    return {
        "layer_start_cycle": _var("layer", start, "core cycles", "cycle the layer started"),
        "layer_end_cycle": _var("layer", end, "core cycles", "cycle the layer finished"),
        "request_start_cycle": _var("request", r_start, "core cycles",
                                    "cycle the request's first layer started"),
        "request_end_cycle": _var("request", r_end, "core cycles",
                                  "cycle the request's last layer finished"),
    }


def _bank_coords(rec: TraceRecorder) -> dict:
    std = rec.std
    G, B = std.bank_groups, std.banks_per_group
    nb = rec.cfg.memory.ranks * G * B
    flat = np.arange(nb)
    return {"channel": np.arange(rec.snapshot.shape[0]), "bank": flat,
            "rank": ("bank", flat // (G * B)), "bankgroup": ("bank", flat // B % G),
            "bank_in_group": ("bank", flat % B)}


def _dram_vars(rec: TraceRecorder, n: int) -> dict:
    d = rec.bins.final("dram", n)
    c = rec.bins.final("chan", n)
    dims = ("time", "channel", "bank")
    out = {}
    for name, field, desc in (
            ("reads", ks.TD_READS, "read requests served (counted at their last burst)"),
            ("writes", ks.TD_WRITES, "write requests served (counted at their last burst)"),
            ("row_hits", ks.TD_HITS, "requests whose first command found their row open"),
            ("row_misses", ks.TD_MISSES, "requests whose first command found the bank closed"),
            ("row_conflicts", ks.TD_CONFLICTS,
             "requests whose first command found another row open"),
            ("activates", ks.TD_ACTS, "ACT commands"),
            ("precharges", ks.TD_PRES, "PRE commands (PREA: all_bank_precharges)")):
        out[name] = _var(dims, _int(d[:, field]), "count", desc)
    out["bank_busy_cycles"] = _var(dims, _int(d[:, ks.TD_BUSY]), "DRAM cycles",
                                   BANK_BUSY_DEFINITION)
    out["all_bank_precharges"] = _var(("time", "channel"), _int(c[:, ks.TH_PREA]), "count",
                                      "PREA commands (before refreshes)")
    out["refreshes"] = _var(("time", "channel"), _int(c[:, ks.TH_REF]), "count",
                            "REF commands")
    dram_cycles = _dram_cycles_per_bin(rec, n)[:, None]
    for name, field, which in (("read_queue_occupancy", ks.TH_READ_QUEUE, "read"),
                               ("write_queue_occupancy", ks.TH_WRITE_QUEUE, "write")):
        out[name] = _var(("time", "channel"),
                         (c[:, field] / np.maximum(dram_cycles, 1)).astype(np.float32),
                         "requests", f"mean number of requests in the {which} queue")
    return out


def _dram_cycles_per_bin(rec: TraceRecorder, n: int) -> np.ndarray:
    """DRAM cycles whose start falls in each bin."""
    return _domain_cycles_per_bin(rec, n, rec.tb.mem_period)


def _domain_cycles_per_bin(rec: TraceRecorder, n: int, period: int) -> np.ndarray:
    """Cycles of a clock of ``period`` ticks whose start falls in each bin."""
    bt = rec.bins.width * rec.tb.core_period
    edges = -(-(np.arange(n + 1, dtype=np.int64) * bt) // period)
    return np.diff(edges)


def _window_vars(rec: TraceRecorder, coords: dict, attrs: dict) -> dict:
    """Per-DRAM-cycle bank state and the command log inside the window."""
    from npusim.dram import COMMANDS

    mp, P = rec.tb.mem_period, rec.tb.core_period
    w0, w1 = rec.window_ticks
    w1 = min(w1, rec.end_tick + 1)
    d0 = -(-w0 // mp)
    d1 = max(d0, -(-w1 // mp))
    n = d1 - d0
    log = rec.command_log()
    inside = log[(log[:, ks.LG_CYCLE] >= d0) & (log[:, ks.LG_CYCLE] < d1)]
    n_ch, nb = rec.snapshot.shape
    G, B = rec.std.bank_groups, rec.std.banks_per_group
    per_rank = G * B
    flat = (log[:, ks.LG_RANK] * G + log[:, ks.LG_BANKGROUP]) * B + log[:, ks.LG_BANK]
    state = np.zeros((n, n_ch, nb), np.int8)
    rows = np.zeros((n + 1, n_ch, nb), np.int64)
    rows[0] = rec.snapshot
    changed = np.zeros((n + 1, n_ch, nb), bool)
    changed[0] = True
    code = np.array([_STATE_OF_COMMAND[c] for c in COMMANDS], np.int8)
    wide = {COMMANDS.index("PREA"), COMMANDS.index("REF")}
    closes = {COMMANDS.index(c) for c in ("PRE", "RDA", "WRA")}
    act = COMMANDS.index("ACT")
    for (cyc, ch, rank, cmd, row), b in zip(
            log[:, [ks.LG_CYCLE, ks.LG_CHANNEL, ks.LG_RANK, ks.LG_COMMAND, ks.LG_ROW]].tolist(),
            flat.tolist()):
        banks = slice(rank * per_rank, (rank + 1) * per_rank) if cmd in wide else b
        s, e = cyc - d0, cyc - d0 + int(rec.durations[cmd])
        if e > 0 and s < n:
            state[max(s, 0):min(e, n), ch, banks] = code[cmd]
        if 0 <= s < n:
            if cmd == act:
                rows[s + 1, ch, banks] = row
            elif cmd in closes or cmd in wide:
                rows[s + 1, ch, banks] = -1
            else:
                continue
            changed[s + 1, ch, banks] = True
    last = np.where(changed, np.arange(n + 1)[:, None, None], 0)
    np.maximum.accumulate(last, axis=0, out=last)
    open_row = np.take_along_axis(rows, last, axis=0)[1:]
    state[(state == 0) & (open_row >= 0)] = 1
    f_mem = rec.std.freq_mhz * 1e6
    wt = np.arange(d0, d1, dtype=np.int64)
    coords["window_time"] = _var("window_time", wt, "DRAM cycles", "DRAM command-clock cycle")
    coords["window_seconds"] = _var("window_time", wt / f_mem, "s", "start of the DRAM cycle")
    coords["window_core_cycle"] = _var("window_time", wt * mp // P, "core cycles",
                                       "core cycle the DRAM cycle starts in")
    attrs["window_dram_cycles"] = f"{d0}:{d1}"
    dims = ("window_time", "channel", "bank")
    states = {"flag_values": np.arange(len(BANK_STATES), dtype=np.int8),
              "flag_meanings": " ".join(BANK_STATES)}
    out = {
        "bank_state": _var(dims, state, "1", "what the bank is doing in the DRAM cycle (after "
                           "the command issued in it): " + ", ".join(BANK_STATES), **states),
        "open_row": _var(dims, _int(open_row), "row", "open row after the cycle's command "
                         "(-1: closed)"),
        "initial_open_row": _var(("channel", "bank"), _int(rec.snapshot), "row",
                                 "open row when the window starts (-1: closed)"),
    }
    cmd_dims = ("command",)
    coords["command"] = np.arange(len(inside))
    cols = ((ks.LG_CYCLE, "cycle", "DRAM cycles", "DRAM cycle the command issued"),
            (ks.LG_CHANNEL, "channel", "1", "channel"), (ks.LG_RANK, "rank", "1", "rank"),
            (ks.LG_BANKGROUP, "bankgroup", "1", "bank group (PREA/REF: 0)"),
            (ks.LG_BANK, "bank", "1", "bank within its group (PREA/REF: 0)"),
            (ks.LG_ROW, "row", "row", "row (-1 for PREA/REF)"),
            (ks.LG_COLUMN, "column", "column", "column (-1 for PREA/REF)"),
            (ks.LG_CORE, "core", "1", "core whose request it serves (-1: refresh)"),
            (ks.LG_REQUEST, "request", "1", "DMA queue entry (of that core and direction) of "
                                            "the request it serves (-1: refresh)"))
    for col, name, units, desc in cols:
        out[f"command_{name}"] = _var(cmd_dims, _int(inside[:, col]), units, desc)
    out["command_type"] = _var(cmd_dims, inside[:, ks.LG_COMMAND].astype(np.int8), "1",
                               "command: " + ", ".join(f"{i}={c}" for i, c in enumerate(COMMANDS)),
                               flag_values=np.arange(len(COMMANDS), dtype=np.int8),
                               flag_meanings=" ".join(COMMANDS))
    coords["command_seconds"] = _var(cmd_dims, inside[:, ks.LG_CYCLE] / f_mem, "s",
                                     "time the command issued")
    return out
