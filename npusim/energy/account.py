"""Energy of a run: action counts priced from an energy table, the way Accelergy prices
Timeloop's counts, plus DRAM energy from the controller's own counts (``npusim.energy.dram``).

Nothing here runs per cycle. Compute actions are deterministic, so they are counted from the
Program tables once per run: every tile runs its template once, so a layer's counts are its
tiles' template sums (instruction rows -> cumulative sums -> per tile -> per layer). What one
instruction does (Gemmini-like weight-stationary core; rows are the SRAMs' native rows,
``spad``: array width x precision bytes, ``accum``: array width x 4 bytes):

- MVIN: writes its bytes into the scratchpad (or the accumulator); MVOUT reads them out
- PRELOAD: reads ``height`` scratchpad rows, writes ``height x width`` PE weight registers
- GEMM: its MACs; per MAC a weight and an input register access and a 32-bit partial-sum
  register access; reads one scratchpad row per streamed row, and reads and writes one
  accumulator row (it accumulates in place)
- VECTOR / IM2COL: ``passes`` passes of ``lanes x alus`` elements at its op class's energy
  per element (``vector.<class>``, IM2COL as ``alu``); each pass reads one vector row of the
  scratchpad and each output row writes one

NoC flits come from the layer's DMA requests (a read request and a write acknowledgement are
one flit, data ``ceil(request_bytes / flit_bytes)`` flits). On the crossbar each goes
through one crossbar and one link; on a router network each flit's energy is the network's
own count (``noc_energy``: every router it passes writes it into an input buffer, reads it
out and switches it, every link it takes moves it), averaged over the flits the network
carried, so the layers add up to the network's total. Static power is the leakage of each core's MACs, vector ALUs, PE registers and SRAM over
the run. DRAM command and I/O energy is shared out to layers by their DRAM bytes, background,
refresh and static energy by their share of the summed layer durations, so layers (and
requests, the sums of their layers) add up to the total exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from npusim.energy.dram import DRAM_COMPONENTS, counts_from_state, dram_energy
from npusim.energy.table import VECTOR_CLASSES, VECTOR_OP_CLASS, load_energy_table, mac_datatype
from npusim.kernels import isa

COMPONENTS = ("mac", "spad", "accum", "vector", "noc") + DRAM_COMPONENTS + ("static",)
"""Components of the ``energy`` section, in report order."""

ACTIONS = ("mac", "register_operand", "register_psum", "spad_read", "spad_write",
           "accum_read", "accum_write") + tuple(f"vector_{c}" for c in VECTOR_CLASSES) + (
    "noc_flit",)
"""Actions counted per layer; each belongs to one component (``ACTION_COMPONENT``)."""
ACTION_COMPONENT = {"mac": "mac", "register_operand": "mac", "register_psum": "mac",
                    "spad_read": "spad", "spad_write": "spad", "accum_read": "accum",
                    "accum_write": "accum", "noc_flit": "noc",
                    **{f"vector_{c}": "vector" for c in VECTOR_CLASSES}}
ACC_BITS = 32  # accumulator / partial-sum width
_TIME_SHARED = ("dram_background", "dram_refresh", "static")


def _ceil_div(a, b):
    return -(-a // b)


def instruction_actions(inst: np.ndarray, cfg) -> np.ndarray:
    """Action counts of every instruction row: [n_inst, len(ACTIONS)] int64."""
    core = cfg.core
    h, w = core.systolic.height, core.systolic.width
    vec = core.vector.lanes * core.vector.alus
    spad_row, acc_row = w * cfg.precision, w * ACC_BITS // 8
    vec_rows = _ceil_div(vec * cfg.precision, spad_row)  # scratchpad rows of one vector row
    a = {name: np.zeros(inst.shape[0], np.int64) for name in ACTIONS}
    op = inst[:, isa.I_OP]
    dma_bytes = inst[:, isa.I_N_OUTER] * inst[:, isa.I_N_INNER] * inst[:, isa.I_RUN_BYTES]
    to_acc = inst[:, isa.I_TO_ACC] == 1
    mvin, mvout = op == isa.OP_MVIN, op == isa.OP_MVOUT
    a["spad_write"] += np.where(mvin & ~to_acc, _ceil_div(dma_bytes, spad_row), 0)
    a["accum_write"] += np.where(mvin & to_acc, _ceil_div(dma_bytes, acc_row), 0)
    a["spad_read"] += np.where(mvout & ~to_acc, _ceil_div(dma_bytes, spad_row), 0)
    a["accum_read"] += np.where(mvout & to_acc, _ceil_div(dma_bytes, acc_row), 0)
    pre = op == isa.OP_PRELOAD
    a["spad_read"] += np.where(pre, h, 0)
    a["register_operand"] += np.where(pre, h * w, 0)
    gemm = op == isa.OP_GEMM
    rows = inst[:, isa.I_ROWS] * inst[:, isa.I_SEGS]
    macs = np.where(gemm, inst[:, isa.I_MACS], 0)
    a["mac"] += macs
    a["register_operand"] += 2 * macs
    a["register_psum"] += macs
    a["spad_read"] += np.where(gemm, rows, 0)
    a["accum_read"] += np.where(gemm, rows, 0)
    a["accum_write"] += np.where(gemm, rows, 0)
    vector, im2col = op == isa.OP_VECTOR, op == isa.OP_IM2COL
    out_rows = _ceil_div(inst[:, isa.I_ELEMENTS], vec)
    passes = np.where(vector, out_rows * inst[:, isa.I_PASSES], np.where(im2col, out_rows, 0))
    klass = np.array([VECTOR_CLASSES.index(VECTOR_OP_CLASS[o]) for o in isa.VECTOR_OPS])
    cls = np.where(vector, klass[np.clip(inst[:, isa.I_VOP], 0, len(klass) - 1)],
                   VECTOR_CLASSES.index("alu"))
    for i, c in enumerate(VECTOR_CLASSES):
        a[f"vector_{c}"] += np.where(cls == i, passes, 0)
    a["spad_read"] += passes * vec_rows
    a["spad_write"] += np.where(vector | im2col, out_rows * vec_rows, 0)
    return np.stack([a[name] for name in ACTIONS], axis=1)


def layer_actions(prog, cfg, ld_bytes: np.ndarray, st_bytes: np.ndarray) -> np.ndarray:
    """Action counts of every layer: [n_layers, len(ACTIONS)] int64 (NoC flits from the
    layer's DMA bytes). A tile runs its template once: sum each template's rows once
    (templates are disjoint row ranges), then each layer's tiles' templates."""
    L = prog.layer.shape[0]
    out = np.zeros((L, len(ACTIONS)), np.int64)
    if prog.n_tiles:
        start, length = prog.tile[:, isa.T_INST_START], prog.tile[:, isa.T_INST_LEN]
        templates, which = np.unique(start * (1 << 24) + length, return_inverse=True)
        t_start, t_end = templates >> 24, (templates >> 24) + (templates & ((1 << 24) - 1))
        per_inst = np.vstack([instruction_actions(prog.inst, cfg),
                              np.zeros((1, len(ACTIONS)), np.int64)])
        bounds = np.empty(2 * len(templates), np.int64)
        bounds[0::2], bounds[1::2] = t_start, t_end
        per_template = np.add.reduceat(per_inst, bounds, axis=0)[0::2]
        layer = prog.tile[:, isa.T_LAYER]
        for a in range(len(ACTIONS)):
            out[:, a] = np.bincount(layer, weights=per_template[which, a], minlength=L)
    if cfg.memory.type != "ideal":
        req = cfg.dma.request_bytes
        data = _ceil_div(req, cfg.noc.flit_bytes)
        out[:, ACTIONS.index("noc_flit")] = ((ld_bytes // req) * (1 + data)
                                             + (st_bytes // req) * (data + 1))
    return out


def action_energy_pj(cfg, table) -> np.ndarray:
    """pJ of one of each action (``ACTIONS`` order) on ``cfg`` with ``table``."""
    core = cfg.core
    w = core.systolic.width
    vec = core.vector.lanes * core.vector.alus
    in_bits = 8 * cfg.precision
    spad_bits, acc_bits = w * in_bits, w * ACC_BITS
    e = {
        "mac": table.mac_pj(mac_datatype(cfg)),
        "register_operand": table.register_pj(in_bits),
        "register_psum": table.register_pj(ACC_BITS),
        "spad_read": table.sram_pj("spad", False, core.spad_kib, spad_bits),
        "spad_write": table.sram_pj("spad", True, core.spad_kib, spad_bits),
        "accum_read": table.sram_pj("accum", False, core.accum_kib, acc_bits),
        "accum_write": table.sram_pj("accum", True, core.accum_kib, acc_bits),
        "noc_flit": crossbar_flit_pj(cfg, table),  # a router network: noc_energy
        **{f"vector_{c}": vec * table[f"vector.{c}"] for c in VECTOR_CLASSES},
    }
    return np.array([e[a] for a in ACTIONS], dtype=np.float64)


def static_power_w(cfg, table) -> float:
    """Leakage of the chip's cores (MACs, vector ALUs, PE registers, SRAM), watts."""
    core = cfg.core
    h, w = core.systolic.height, core.systolic.width
    reg_bits = h * w * (2 * 8 * cfg.precision + ACC_BITS)
    mw = (h * w * table["static.mac_mw"]
          + core.vector.lanes * core.vector.alus * table["static.vector_alu_mw"]
          + reg_bits * table["static.register_mw_per_bit"]
          + (core.spad_kib + core.accum_kib) * table["static.sram_mw_per_kib"])
    return cfg.num_cores * mw * 1e-3


def energy_report(cfg, prog, st, tb, total_cycles: int, layer_rows: list[dict]) -> dict[str, Any]:
    """The ``energy`` section of a result (see README "Energy"); adds ``energy_j`` to each
    of ``layer_rows`` (the result's layers, in program order)."""
    from npusim.kernels import state as ks

    table = load_energy_table(cfg.energy.table, cfg.energy.override)
    seconds = total_cycles / (cfg.core_freq_mhz * 1e6)
    ld, stb = st.cores.layer_st[ks.L_LD_BYTES], st.cores.layer_st[ks.L_ST_BYTES]
    counts = layer_actions(prog, cfg, ld, stb)
    unit_pj = action_energy_pj(cfg, table)
    noc = noc_energy(cfg, table, st.noc)
    if noc is not None and noc["model"] == "routers":
        unit_pj[ACTIONS.index("noc_flit")] = noc["pj_per_flit"]
    layer_action_j = counts * unit_pj[None, :] * 1e-12  # [layer, action]
    L = prog.layer.shape[0]
    by_layer = np.zeros((L, len(COMPONENTS)))
    for i, action in enumerate(ACTIONS):
        by_layer[:, COMPONENTS.index(ACTION_COMPONENT[action])] += layer_action_j[:, i]
    totals = dict(zip(COMPONENTS, by_layer.sum(axis=0)))

    dram = None
    warnings = []
    std = None
    if cfg.memory.type == "dram":
        from npusim.dram.standard import dram_standard

        std = dram_standard(cfg)
        if std.power is None:
            warnings.append(f"DRAM energy not counted: {std.name} has no [power] currents")
    elif cfg.memory.type == "simple":
        warnings.append("DRAM energy not counted: memory.type = 'simple' has no DRAM model "
                        "(use 'dram' for DRAM energy)")
    if std is not None and std.power is not None:
        end = -(-int(st.glob[ks.G_END]) // tb.mem_period)
        dc = counts_from_state(st.mem, cfg, std, end)
        dram_j = dram_energy(std, dc)
        totals.update(dram_j)
        moved = ld + stb
        share_bytes = moved / moved.sum() if moved.sum() else np.zeros(L)
        share_rd = ld / ld.sum() if ld.sum() else share_bytes
        share_wr = stb / stb.sum() if stb.sum() else share_bytes
        for comp, share in (("dram_activate", share_bytes), ("dram_io", share_bytes),
                            ("dram_read", share_rd), ("dram_write", share_wr)):
            by_layer[:, COMPONENTS.index(comp)] = dram_j[comp] * share
        dram = {"standard": std.name, "dram_cycles": end, "activates": dc.activates,
                "precharges": dc.bank_closes, "read_bursts": dc.reads,
                "write_bursts": dc.writes, "refreshes": dc.refreshes,
                "rank_active_cycles": dc.active_cycles, "rank_cycles": dc.rank_cycles,
                "bits": dc.bytes_moved * 8,
                "power_source": std.power.source}
    totals["static"] = static_power_w(cfg, table) * seconds
    dur = np.array([max(0, r["end_cycle"] - r["start_cycle"]) for r in layer_rows], float)
    share_t = dur / dur.sum() if dur.sum() else np.full(L, 1.0 / max(L, 1))
    for comp in _TIME_SHARED:
        by_layer[:, COMPONENTS.index(comp)] = totals.get(comp, 0.0) * share_t
    totals = {c: float(totals.get(c, 0.0)) for c in COMPONENTS}
    total = sum(totals.values())
    for row, e in zip(layer_rows, by_layer.sum(axis=1)):
        row["energy_j"] = float(e)
    # the workload's MACs (the layers' own counts: a depthwise conv's on the vector unit
    # too), for pJ/MAC and TOPS/W; the array's alone are actions["mac"]
    macs = int(sum(r["macs"] for r in layer_rows))
    dram_total = sum(totals[c] for c in DRAM_COMPONENTS)
    out = {
        "total_j": total,
        "components_j": totals,
        "average_power_w": total / seconds if seconds else 0.0,
        "pj_per_mac": total / macs * 1e12 if macs else None,
        "tops_per_w": 2 * macs / total / 1e12 if total else None,
        "dram_pj_per_bit": (dram_total / dram["bits"] * 1e12 if dram and dram["bits"]
                            else None),
        "macs": macs,
        "table": {"name": table.name, "path": table.path, "description": table.description,
                  "datatype": mac_datatype(cfg), "overrides": dict(cfg.energy.override)},
        "actions": {a: {"count": int(counts[:, i].sum()), "pj_each": float(unit_pj[i]),
                        "joules": float(layer_action_j[:, i].sum()),
                        "component": ACTION_COMPONENT[a]} for i, a in enumerate(ACTIONS)},
        "static_power_w": static_power_w(cfg, table),
        "dram": dram,
        "noc": noc,
        "warnings": warnings,
    }
    return out


def crossbar_flit_pj(cfg, table) -> float:
    """A flit through the crossbar NoC: one crossbar traversal and one link."""
    return 8 * cfg.noc.flit_bytes * (table["noc.router_pj_per_bit"]
                                     + table["noc.link_pj_per_bit"])


def noc_energy(cfg, table, noc) -> dict[str, Any] | None:
    """What the NoC's flits cost (``noc``: the run's ``State.noc``); None without a NoC
    (ideal memory).

    On the crossbar a flit crosses one crossbar and one link. On a router network the
    counts are the network's own: every flit through a router is written into an input
    buffer, read out and switched (``noc.buffer_pj_per_bit + noc.router_pj_per_bit`` per
    bit), every flit along a router-to-router link costs ``noc.link_pj_per_bit`` per bit,
    along a die-to-die link ``noc.d2d_link_pj_per_bit``; the short wires between an
    endpoint and its router are part of the router. ``pj_per_flit`` is the total over the
    flits injected."""
    if cfg.memory.type == "ideal":
        return None
    bits = 8 * cfg.noc.flit_bytes
    if cfg.noc.type == "crossbar":
        return {"model": "crossbar", "pj_per_flit": crossbar_flit_pj(cfg, table)}
    from npusim.kernels.network import state as kn

    ns, tab, p = noc.net, noc.net_tab, noc.net_p
    routers = int(ns.router_flits.sum())
    on_die = int(ns.link_flits[tab.link_class == kn.LC_ON_DIE].sum())
    d2d = int(ns.link_flits[tab.link_class == kn.LC_DIE_TO_DIE].sum())
    injected = int(ns.link_flits[p.n_routers * p.ports:].sum())  # out of the interfaces
    pj = bits * (routers * (table["noc.buffer_pj_per_bit"] + table["noc.router_pj_per_bit"])
                 + on_die * table["noc.link_pj_per_bit"]
                 + d2d * table["noc.d2d_link_pj_per_bit"])
    return {"model": "routers", "flits_injected": injected, "router_traversals": routers,
            "link_traversals": on_die, "d2d_link_traversals": d2d, "joules": pj * 1e-12,
            "pj_per_flit": pj / injected if injected else 0.0}
