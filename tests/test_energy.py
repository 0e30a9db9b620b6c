"""Energy and power (issue 18): tables as data, DRAM energy by DRAMPower's method from the
controller's own counts, the ``energy`` section, and its consistency.

Expected values are worked out here from the table entries and the standards' currents, not
through ``npusim.energy``'s own helpers, so a wrong count or a wrong formula fails."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import npusim
from npusim.config import load_config
from npusim.dram import load_standard
from npusim.dram.replay import replay_requests
from npusim.energy import COMPONENTS, list_energy_tables, load_energy_table
from npusim.engine import run_program
from npusim.errors import NpusimError
from npusim.kernels import state as ks
from npusim.program import Instr
from npusim.results import collect
from tests.helpers import one_tile_program

PJ = 1e-12


# --------------------------------------------------------------------------- tables

def test_bundled_tables_give_a_source_for_every_value():
    assert {"45nm", "7nm"} <= set(list_energy_tables())
    for name in list_energy_tables():
        t = load_energy_table(name)
        assert t.source
        missing = [k for k, src in t.sources.items() if not src.strip()]
        assert not missing, f"{name}: entries without a source: {missing}"
        # the 7 nm table is cheaper per action than the 45 nm one, entry by entry
    t45, t7 = load_energy_table("45nm"), load_energy_table("7nm")
    for key in ("mac.int8", "mac.fp32", "vector.alu", "register.pj_per_bit"):
        assert t7[key] < t45[key]


def test_sram_energy_interpolates_log_log_in_capacity():
    t = load_energy_table("45nm")
    # Horowitz: 64-bit reads of 8 KB 10 pJ, 32 KB 20 pJ, 1 MB 100 pJ
    assert t.sram_pj("spad", False, 8, 64) == pytest.approx(10)
    assert t.sram_pj("spad", False, 32, 64) == pytest.approx(20)
    assert t.sram_pj("accum", True, 1024, 64) == pytest.approx(100)
    # halfway between 32 KiB and 1 MiB in log capacity is halfway in log energy
    assert t.sram_pj("spad", False, math.sqrt(32 * 1024), 64) == pytest.approx(math.sqrt(2000))
    assert t.sram_pj("spad", False, 64, 128) == pytest.approx(2 * t.sram_pj("spad", False, 64, 64))


@pytest.mark.parametrize("override, message", [
    ({"mac": {"int9": 1.0}}, "unknown energy entry 'mac.int9'"),
    ({"mac": {"int8": -1}}, "energy.override.mac.int8 = -1 must be a number >= 0"),
    ({"sram": {"capacity_kib": [32, 8, 1024]}}, "must be strictly increasing"),
    ({"sram": {"read_pj_per_bit": [1.0, 2.0]}}, "give one per capacity"),
])
def test_bad_override_is_a_clear_error(override, message):
    with pytest.raises(NpusimError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_energy_table("45nm", override)


def test_bad_table_file_names_the_entry(tmp_path):
    path = tmp_path / "mine.toml"
    good = Path(load_energy_table("45nm").path).read_text()
    path.write_text(good.replace("int16 = {", "# int16 = {"))
    with pytest.raises(NpusimError, match="entry mac.int16 is missing"):
        load_energy_table(str(path))
    path.write_text(good + "\n[mac2]\nx = 1\n")
    with pytest.raises(NpusimError, match="unknown section"):
        load_energy_table(str(path))
    with pytest.raises(NpusimError, match="unknown energy table '9nm'.*45nm, 7nm"):
        load_config("mobile", ["energy.table=9nm"])


def test_config_selects_table_and_overrides_single_entries():
    cfg = load_config("mobile", ["energy.table=7nm", "energy.override.vector.alu=0.5"])
    t = load_energy_table(cfg.energy.table, cfg.energy.override)
    assert t["vector.alu"] == 0.5 and t.sources["vector.alu"] == "config override"
    assert t["mac.int8"] == load_energy_table("7nm")["mac.int8"]
    with pytest.raises(NpusimError, match="energy.override.vector.alu2"):
        load_config("mobile", ["energy.override.vector.alu2=0.5"])


ERT = """\
ERT:
  version: 0.3
  tables:
  - name: system.arch.PE[0..63].mac
    actions:
    - {name: mac_random, arguments: null, energy: 1.5}
    - {name: idle, arguments: null, energy: 0.01}
  - name: system.DRAM
    actions:
    - {name: read, arguments: null, energy: 512}
  - name: system.arch.spad
    actions:
    - {name: read, arguments: {data_delta: 0, address_delta: 0}, energy: 0.1}
    - {name: read, arguments: {data_delta: 1, address_delta: 1}, energy: 20.0}
    - {name: write, arguments: {data_delta: 1, address_delta: 1}, energy: 22.0}
  - name: system.arch.accum_spad
    actions:
    - {name: read, arguments: null, energy: 7.0}
    - {name: write, arguments: null, energy: 8.0}
  - name: system.arch.PE[0..63].pe_spad
    actions:
    - {name: read, arguments: null, energy: 99.0}
  - name: system.arch.PE[0..63].weight_reg
    actions:
    - {name: access, arguments: null, energy: 0.02}
  - name: system.arch.PE[0..63].input_activation_reg
    actions:
    - {name: access, arguments: null, energy: 0.04}
"""


def test_accelergy_ert_imports_onto_npusim_actions(tmp_path):
    path = tmp_path / "timeloop-mapper.ERT.yaml"
    path.write_text(ERT)
    t = load_energy_table(str(path))
    assert all(t[f"mac.{d}"] == 1.5 for d in ("int8", "int16", "fp16", "bf16", "fp32"))
    assert (t["spad.read_pj"], t["spad.write_pj"]) == (20.0, 22.0)  # the random access
    assert (t["accum.read_pj"], t["accum.write_pj"]) == (7.0, 8.0)
    assert t["register.pj_per_access"] == pytest.approx(0.03)
    assert t.sram_pj("spad", False, 4096, 512) == 20.0  # fixed: capacity does not matter
    assert "system.DRAM" in t.description and "not imported" in t.description
    assert "pe_spad (a per-PE buffer" in t.description
    assert t["vector.alu"] == load_energy_table("45nm")["vector.alu"]  # from the base
    summary = tmp_path / "ERT_summary.yaml"
    summary.write_text("ERT_summary:\n  table_summary:\n  - name: a.b.mac\n    actions:\n"
                       "    - {name: mac_random, energy: 2.2}\n  - name: a.glb\n    actions:\n"
                       "    - {name: read, average_energy: 1.0, max_energy: 3.0}\n")
    s = load_energy_table(str(summary))
    assert s["mac.int8"] == 2.2 and s["spad.read_pj"] == 3.0
    cfg = load_config("mobile", [f"energy.table={path}"])
    assert npusim.simulate("tiny_cnn", cfg).energy["table"]["path"] == str(path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("ERT:\n  tables:\n  - name: x.y.widget\n    actions:\n"
                   "    - {name: poke, energy: 1}\n")
    with pytest.raises(NpusimError, match="no ERT component maps"):
        load_energy_table(str(bad))


# --------------------------------------------------------------------------- compute energy

def _hand_run(cfg, rows, tiles=1):
    prog = one_tile_program(rows, tiles=tiles)
    raw = run_program(prog, cfg)
    return collect("hand", cfg, prog, raw)


def test_compute_components_are_counts_times_table_entries():
    """One tile worked by hand on the 8x8 Gemmini-like core (int8, 64 KiB scratchpad,
    16 KiB accumulator, 128-element vector unit, ideal memory), three times."""
    cfg = load_config("gemmini_validation", ["core.systolic.width=8", "core.systolic.height=8",
                                             "precision=1", "core.spad_kib=64",
                                             "core.accum_kib=16", "memory.type=ideal",
                                             "num_cores=1", "core.vector.lanes=8",
                                             "core.vector.alus=16"])
    rows = [
        Instr.dma(True, 0, 0, 16, 64, 1, 0, 8),            # MVIN 16 rows of 8 B (128 B)
        Instr.preload(deps=(0,), drain=True),               # 8 scratchpad rows, 64 PE weights
        Instr.gemm(rows=16, segs=2, macs=2048, deps=(1,)),  # 32 streamed rows, 2048 MACs
        Instr.vector("exp", elements=256, passes=1, deps=(2,)),  # 2 passes of 128
        Instr.vector("add", elements=100, passes=3, deps=(3,)),  # 1 row, 3 passes
        Instr.dma(False, 1, 0, 32, 32, 1, 0, 32, to_acc=True, deps=(4,)),  # MVOUT 1 KiB of acc
    ]
    r = _hand_run(cfg, rows, tiles=3)
    t = load_energy_table("45nm")
    e = r.energy["components_j"]
    n = 3
    macs = 2048 * n
    # mac: each MAC 0.3 pJ, plus a weight and an input register access (8 b) and a 32-bit
    # partial sum per MAC, plus the 64 weights the preload writes
    reg = 0.009  # pJ per bit
    mac_pj = macs * 0.3 + (2 * macs + 64 * n) * 8 * reg + macs * 32 * reg
    assert e["mac"] == pytest.approx(mac_pj * PJ, rel=1e-12)
    # scratchpad rows are 8 x 1 B = 64 bits: per bit at 64 KiB, log-log between 32 KiB and
    # 1 MiB: 0.3125 * 5 ** (1 / 5)
    spad_bit = 0.3125 * 5 ** (1 / 5)
    vec_rows = 128 // 8  # scratchpad rows in one 128-element vector row
    spad_reads = 8 + 32 + (2 + 3) * vec_rows  # preload, GEMM stream, vector passes
    spad_writes = 16 + (2 + 1) * vec_rows  # MVIN, vector output rows
    assert e["spad"] == pytest.approx((spad_reads + spad_writes) * n * 64 * spad_bit * PJ,
                                      rel=1e-12)
    # accumulator rows are 8 x 4 B = 256 bits at 16 KiB: between 8 and 32 KiB
    acc_bit = 0.15625 * 2 ** 0.5
    acc_accesses = 32 + 32 + 1024 // 32  # GEMM read + write per row, MVOUT rows
    assert e["accum"] == pytest.approx(acc_accesses * n * 256 * acc_bit * PJ, rel=1e-12)
    # vector: exp 2 passes of 128 elements at 18.4 pJ, add 3 passes at 0.9 pJ
    assert e["vector"] == pytest.approx(n * 128 * (2 * 18.4 + 3 * 0.9) * PJ, rel=1e-12)
    assert e["noc"] == 0 and all(e[c] == 0 for c in COMPONENTS if c.startswith("dram"))
    # static: 64 MACs, 128 vector ALUs, 64 x (8 + 8 + 32) register bits, 80 KiB of SRAM
    mw = 64 * 0.0073 + 128 * 0.0023 + 64 * 48 * 0.00007 + 80 * 0.000028
    assert e["static"] == pytest.approx(mw * 1e-3 * r.seconds, rel=1e-12)
    actions = r.energy["actions"]
    assert actions["mac"]["count"] == macs and actions["spad_read"]["count"] == spad_reads * n
    assert r.energy["pj_per_mac"] == pytest.approx(r.energy["total_j"] / macs / PJ)
    assert r.energy["tops_per_w"] == pytest.approx(2 * macs / r.energy["total_j"] / 1e12)


def test_noc_energy_is_flits_times_flit_energy():
    """Every DMA request crosses the crossbar: a read is one request flit and data flits
    back, a write data flits out and one acknowledgement flit back."""
    cfg = load_config("mobile", ["memory.type=simple", "memory.freq_mhz=1000",
                                 "memory.channels=1", "memory.latency=10",
                                 "memory.channel_bytes_per_cycle=16", "num_cores=1"])
    rows = [Instr.dma(True, 0, 0, 1, 0, 1, 0, 640),
            Instr.dma(False, 1, 0, 1, 0, 1, 0, 192, to_acc=True, deps=(0,))]
    r = _hand_run(cfg, rows)
    # 64 B requests, 8 B flits: 10 reads of 1 + 8 flits, 3 writes of 8 + 1 flits
    flits = 10 * 9 + 3 * 9
    per_flit = 64 * (0.02125 + 0.325)
    assert r.energy["actions"]["noc_flit"]["count"] == flits
    assert r.energy["components_j"]["noc"] == pytest.approx(flits * per_flit * PJ, rel=1e-12)


@pytest.mark.parametrize("extra, routers, links, d2d", [
    # core on router 0, its channel on router 15 of a 4x4 mesh: 7 routers, 6 links
    (["noc.dims=[4,4]", "noc.memory_routers=[15]"], 7, 6, 0),
    # a 4x1 mesh cut into two dies: routers 0 -> 3 cross one die-to-die link of three
    (["noc.dims=[4,1]", "noc.memory_routers=[3]", "noc.d2d.dies=[2,1]"], 4, 2, 1),
])
def test_router_network_energy_by_hand(extra, routers, links, d2d):
    """As test_energy's crossbar case (10 reads of 1 + 8 flits, 3 writes of 8 + 1), but
    each flit passes every router on its path (buffer write + read and switch: 0.018 +
    0.02125 pJ per bit at 45 nm) and every link (0.325 pJ per bit on a die, 0.5 across
    dies), 64 bits a flit; X then Y both ways, so requests and responses take as many."""
    cfg = load_config("mobile", ["memory.type=simple", "memory.freq_mhz=1000",
                                 "memory.channels=1", "memory.latency=10",
                                 "memory.channel_bytes_per_cycle=16", "num_cores=1",
                                 "noc.type=mesh", *extra])
    rows = [Instr.dma(True, 0, 0, 1, 0, 1, 0, 640),
            Instr.dma(False, 1, 0, 1, 0, 1, 0, 192, to_acc=True, deps=(0,))]
    prog = one_tile_program(rows)
    r = collect("hand", cfg, prog, run_program(prog, cfg))
    flits = 10 * 9 + 3 * 9
    per_flit = 64 * (routers * (0.018 + 0.02125) + links * 0.325 + d2d * 0.5)
    noc = r.energy["noc"]
    assert (noc["flits_injected"], noc["router_traversals"], noc["link_traversals"],
            noc["d2d_link_traversals"]) == (flits, flits * routers, flits * links,
                                            flits * d2d)
    assert r.energy["actions"]["noc_flit"]["count"] == flits
    assert r.energy["components_j"]["noc"] == pytest.approx(flits * per_flit * PJ, rel=1e-12)


# --------------------------------------------------------------------------- DRAM energy

def _drampower_formula(log: np.ndarray, std, ranks: int, end: int) -> dict[str, float]:
    """DRAMPower's core energy, worked out from the command log alone: bank states over a
    cycle grid, counts by command, currents from the standard."""
    t = std.timing
    act_open = {}  # (rank, bank) -> ACT cycle of the open bank
    active = np.zeros((ranks, end), dtype=bool)
    n = dict.fromkeys(("act", "pre", "rd", "wr", "ref"), 0)
    close_rd = max(r.latency for r in std.rules_for("RD", "PRE") if r.level == 3)
    close_wr = max(r.latency for r in std.rules_for("WR", "PRE") if r.level == 3)

    def close(rank, bank, at):
        start = act_open.pop((rank,) + tuple(bank))
        active[rank, start:min(at, end)] = True
        if at <= end:
            n["pre"] += 1
        else:  # closes after the end: active to the end, no precharge yet
            active[rank, start:end] = True

    for cyc, rank, bg, bank, cmd in zip(*(log[i].tolist() for i in (0, 2, 3, 4, 7))):
        b = (bg, bank)
        if cmd == 0:
            act_open[(rank,) + b] = cyc
            n["act"] += 1
        elif cmd == 1:
            close(rank, b, cyc)
        elif cmd == 2:
            for key in [k for k in act_open if k[0] == rank]:
                close(rank, key[1:], cyc)
        elif cmd in (3, 5):
            n["rd"] += 1
        elif cmd in (4, 6):
            n["wr"] += 1
        elif cmd == 7:
            n["ref"] += 1
            active[rank, cyc:min(cyc + t["RFC"], end)] = True
        if cmd in (5, 6):
            start = act_open[(rank,) + b]
            at = max(start + t["RAS"], cyc + (close_rd if cmd == 5 else close_wr))
            close(rank, b, at)
    for (rank, *b), start in list(act_open.items()):
        active[rank, start:end] = True
    tck = 1e-6 / std.freq_mhz
    devices = std.channel_dq_bits / std.power.device_dq_bits
    e = dict.fromkeys(("dram_activate", "dram_read", "dram_write", "dram_refresh",
                       "dram_background"), 0.0)
    act_cycles = int(active.sum())
    for d in std.power.domains:
        v = d.volts
        ras, rp = t["RAS"] * tck, t["RP"] * tck
        # ACT + PRE = the IDD0 cycle less the background it overlaps (Micron's method)
        e_act = v * (d.idd0 * (ras + rp) - d.idd0 * rp - d.idd3n * ras)
        e_pre = v * (d.idd0 - d.idd2n) * rp
        e["dram_activate"] += (n["act"] * e_act + n["pre"] * e_pre) * devices
        e["dram_read"] += n["rd"] * v * (d.idd4r - d.idd3n) * t["BL"] * tck * devices
        e["dram_write"] += n["wr"] * v * (d.idd4w - d.idd3n) * t["BL"] * tck * devices
        e["dram_refresh"] += n["ref"] * v * (d.idd5b - d.idd3n) * t["RFC"] * tck * devices
        e["dram_background"] += v * tck * devices * (
            d.idd3n * act_cycles + d.idd2n * (ranks * end - act_cycles))
    return e


@pytest.mark.parametrize("standard, overrides", [
    ("DDR4-2400R_8Gb_x8", ["memory.ranks=2"]),
    ("DDR4-2400R_8Gb_x8", ["memory.controller.page_policy=closed"]),
    ("LPDDR4-3200_8Gb_x16", []),
])
def test_replayed_dram_energy_equals_the_drampower_formula_on_its_log(standard, overrides):
    cfg = load_config("mobile", [f"memory.standard={standard}", "memory.channels=1", *overrides])
    rng = np.random.default_rng(7)
    n = 3000
    addrs = np.where(rng.random(n) < 0.5, rng.integers(0, 1 << 30, n),
                     (np.arange(n) * 64) % (1 << 20)) // 64 * 64
    writes = (rng.random(n) < 0.3).astype(np.int64)
    stats, st = replay_requests(cfg, addrs.astype(np.int64), writes, log_commands=8 * n)
    log = st.mem.cmd_log[:, :int(st.mem.ctl[ks.MC_LOG_N])]
    std = load_standard(standard)
    expect = _drampower_formula(log, std, cfg.memory.ranks, int(st.glob[ks.G_END]))
    got = stats["energy"]["components_j"]
    for comp, value in expect.items():
        assert got[comp] == pytest.approx(value, rel=1e-9), comp
    assert got["dram_io"] == pytest.approx(
        (stats["bytes_read"] + stats["bytes_written"]) * 8 * std.power.io_pj_per_bit * PJ)


def test_every_standard_has_sourced_currents():
    from npusim.dram import list_standards

    for name in list_standards():
        std = load_standard(name)
        assert std.power is not None and std.power.source.strip(), name
        assert std.auto_precharge_cycles("RD") > 0 and std.auto_precharge_cycles("WR") > 0


def test_standard_power_section_is_validated(tmp_path):
    src = Path(load_standard("DDR4-2400R_8Gb_x8").path)
    fam = tmp_path / "families"
    fam.mkdir()
    (fam / "DDR4.toml").write_text((src.parent / "families" / "DDR4.toml").read_text())
    path = tmp_path / "DDR4-2400R_8Gb_x8.toml"
    text = src.read_text()
    path.write_text(text.replace("idd0 = 48.0", "idd0 = \"lots\""))
    with pytest.raises(NpusimError, match="power.vdd.idd0 = 'lots' must be a number"):
        load_standard(str(path))
    path.write_text(text.replace("io_pj_per_bit", "io_pj_per_bitt"))
    with pytest.raises(NpusimError, match="io_pj_per_bitt"):
        load_standard(str(path))


# --------------------------------------------------------------------------- consistency

def test_energies_add_up_components_layers_requests_and_trace(tmp_path):
    reqs = [npusim.Request("tiny_cnn"), npusim.Request("mlp", arrival_cycle=2000)]
    r = npusim.simulate_requests(reqs, "mobile", trace=str(tmp_path / "run.h5"))
    e = r.energy
    assert e["total_j"] == pytest.approx(sum(e["components_j"].values()), rel=1e-12)
    assert e["total_j"] == pytest.approx(sum(l["energy_j"] for l in r.layers), rel=1e-12)
    assert e["total_j"] == pytest.approx(sum(q["energy_j"] for q in r.requests), rel=1e-12)
    assert all(e["components_j"][c] > 0 for c in COMPONENTS if c != "vector")
    assert e["average_power_w"] == pytest.approx(e["total_j"] / r.seconds)
    dram = sum(e["components_j"][c] for c in COMPONENTS if c.startswith("dram"))
    assert e["dram_pj_per_bit"] == pytest.approx(dram / (r.bytes_moved * 8) / PJ)
    # the trace's power per bin and component adds up to the same joules
    ds = r.trace
    bin_s = float(ds.attrs["bin_cycles"]) / (r.config.core_freq_mhz * 1e6)
    per_comp = (ds.power * bin_s).sum("time")
    for comp in COMPONENTS:
        assert float(per_comp.sel(component=comp)) == pytest.approx(e["components_j"][comp],
                                                                     rel=1e-9, abs=1e-18)
    assert ds.power.attrs["units"] == "W"
    assert json.loads(json.dumps(r.to_dict()))["energy"]["total_j"] == e["total_j"]


def test_an_idle_chip_spends_only_background_refresh_and_static_energy():
    """The same request arriving two refresh intervals later: the run is the same, shifted;
    the extra joules are the idle DRAM's background and refreshes and the chip's leakage."""
    cfg = load_config("mobile")
    std = load_standard(cfg.memory.standard)
    refi_core = std.timing["REFI"] * cfg.core_freq_mhz // std.freq_mhz  # 7800 core cycles
    early = npusim.simulate_requests([npusim.Request("tiny_cnn")], cfg)
    late = npusim.simulate_requests([npusim.Request("tiny_cnn", arrival_cycle=2 * refi_core)],
                                    cfg)
    assert late.total_cycles == early.total_cycles + 2 * refi_core
    a, b = early.energy["components_j"], late.energy["components_j"]
    for comp in ("mac", "spad", "accum", "vector", "noc", "dram_activate", "dram_read",
                 "dram_write", "dram_io"):
        assert b[comp] == pytest.approx(a[comp], rel=1e-12), comp
    idle_dram = 2 * std.timing["REFI"]  # DRAM cycles, two refreshes of one rank
    rfc, tck = std.timing["RFC"], 1e-6 / std.freq_mhz
    devices = 64 / 8
    d = {dom.name: dom for dom in std.power.domains}
    refresh = sum(2 * x.volts * (x.idd5b - x.idd3n) * rfc * tck for x in d.values()) * devices
    background = sum(x.volts * tck * (x.idd3n * 2 * rfc + x.idd2n * (idle_dram - 2 * rfc))
                     for x in d.values()) * devices
    assert b["dram_refresh"] - a["dram_refresh"] == pytest.approx(refresh, rel=1e-9)
    assert b["dram_background"] - a["dram_background"] == pytest.approx(background, rel=1e-9)
    static = late.energy["static_power_w"] * 2 * refi_core / (cfg.core_freq_mhz * 1e6)
    assert b["static"] - a["static"] == pytest.approx(static, rel=1e-9)


def test_overriding_one_entry_changes_exactly_that_component():
    base = npusim.simulate("tiny_cnn", "mobile")
    more = npusim.simulate("tiny_cnn", "mobile", overrides=["energy.override.mac.int8=0.5"])
    assert more.total_cycles == base.total_cycles
    a, b = base.energy["components_j"], more.energy["components_j"]
    macs = base.energy["actions"]["mac"]["count"]  # the array's MACs: what 'mac' prices
    assert b["mac"] - a["mac"] == pytest.approx(macs * (0.5 - 0.3) * PJ, rel=1e-9)
    assert all(b[c] == a[c] for c in COMPONENTS if c != "mac")
    io = npusim.simulate("tiny_cnn", "mobile", overrides=["energy.override.noc.link_pj_per_bit=0"])
    c = io.energy["components_j"]
    assert c["noc"] < a["noc"] and all(c[k] == a[k] for k in COMPONENTS if k != "noc")


def test_ideal_memory_has_no_dram_energy_and_7nm_is_cheaper():
    r45 = npusim.simulate("tiny_cnn", "mobile", overrides=["memory.type=ideal"])
    r7 = npusim.simulate("tiny_cnn", "mobile", overrides=["memory.type=ideal",
                                                          "energy.table=7nm"])
    assert all(r45.energy["components_j"][c] == 0 for c in COMPONENTS if c.startswith("dram"))
    assert r45.energy["dram"] is None
    assert 0 < r7.energy["total_j"] < r45.energy["total_j"]


def test_pj_per_mac_counts_the_workloads_macs_with_the_vector_units():
    """A depthwise convolution's MACs run on the vector unit: the array's MAC count (what
    the 'mac' action prices) leaves them out, the workload's (the layers') does not, and
    pJ/MAC, TOPS/W and the sweep's macs metric are per the workload's (MobileNetV2 on
    mobile: the array's count was 1.5-12% short on depthwise models)."""
    r = npusim.simulate("mobilenetv2", "mobile")
    workload = sum(layer["macs"] for layer in r.layers)
    array = r.energy["actions"]["mac"]["count"]
    assert array == sum(c["macs"] for c in r.cores) < workload == r.energy["macs"]
    assert r.energy["pj_per_mac"] == pytest.approx(r.energy["total_j"] / workload * 1e12)
