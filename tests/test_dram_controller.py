"""The DRAM controller as a whole: latencies, bandwidth, refresh, legality, determinism."""

import numpy as np
import pytest

from dram_helpers import STANDARDS, dram_config, random_traffic, replay
from npusim.dram import load_standard
from npusim.dram.checker import check_command_log
from npusim.kernels import state as ks


def _log(st):
    n = int(st.glob[ks.G_LOG_N])
    assert st.glob[ks.G_LOG_LOST] == 0
    return st.cmd_log[:, :n].T.copy()


@pytest.mark.parametrize("name", ["DDR4-2400R_8Gb_x8", "HBM2-2000_8Gb_x128", "LPDDR4-3200_8Gb_x16"])
def test_unloaded_read_to_a_closed_bank_costs_rcd_cl_bl(name):
    t = load_standard(name).timing
    stats, _ = replay(dram_config(name, "memory.controller.refresh=false"), [0])
    assert stats["avg_read_latency_cycles"] == t["RCD"] + t["CL"] + t["BL"]
    assert (stats["row_misses"], stats["row_hits"], stats["row_conflicts"]) == (1, 0, 0)


@pytest.mark.parametrize("name", ["DDR4-2400R_8Gb_x8", "HBM2-2000_8Gb_x128"])
def test_read_to_a_conflicting_row_waits_for_ras_rp_rcd(name):
    std = load_standard(name)
    t = std.timing
    cfg = dram_config(name, "memory.controller.refresh=false")
    row_bytes = std.row_bytes * std.banks * cfg.memory.channels  # next row, same bank
    stats, st = replay(cfg, [0, row_bytes])
    assert (stats["row_misses"], stats["row_conflicts"]) == (1, 1)
    first = t["RCD"] + t["CL"] + t["BL"]
    # PRE waits tRAS after the ACT and tRTP after the RD; then RP, RCD, CL, burst
    second = max(t["RAS"], t["RCD"] + t["RTP"]) + t["RP"] + t["RCD"] + t["CL"] + t["BL"]
    assert st.dch[ks.DC_LAT_SUM, 0] == first + second


def test_sequential_reads_reach_90_percent_of_peak_on_ddr4():
    cfg = dram_config("DDR4-2400R_8Gb_x8", "memory.controller.refresh=false")
    stats, _ = replay(cfg, np.arange(20000) * 64)
    assert stats["bandwidth_utilization"] >= 0.90
    assert stats["bandwidth_gbps"] >= 0.9 * cfg.memory.peak_gbps


def test_refresh_costs_its_share_of_time():
    std = load_standard("DDR4-2400R_8Gb_x8")
    on, _ = replay(dram_config(std.name), np.arange(40000) * 64)
    overhead = std.timing["RFC"] / std.timing["REFI"]
    assert on["refreshes"] >= on["dram_cycles"] // std.timing["REFI"]
    # sequential reads saturate the bus except while refreshing (and re-opening the row)
    expected = 1 - overhead
    assert abs(on["bandwidth_utilization"] - expected) <= 0.01


@pytest.mark.parametrize("name", STANDARDS)
def test_long_random_run_has_no_timing_violation(name):
    cfg = dram_config(name, "memory.ranks=2" if load_standard(name).ranks == 1
                      and load_standard(name).family == "DDR4" else "memory.ranks=0",
                      channels=2)
    addrs, writes = random_traffic(3000, seed=7, granule=cfg.dma.request_bytes)
    stats, st = replay(cfg, addrs, writes, log_commands=100000)
    assert stats["reads"] + stats["writes"] == 3000
    log = _log(st)
    assert len(log) >= 3000
    violations = check_command_log(log, load_standard(name), cfg.memory.channels,
                                   ranks=cfg.memory.ranks)
    assert violations == []


def test_checker_catches_a_kernel_log_with_a_command_moved_early():
    cfg = dram_config("DDR4-2400R_8Gb_x8", channels=1)
    addrs, writes = random_traffic(500, seed=3)
    _, st = replay(cfg, addrs, writes, log_commands=10000)
    log = _log(st)
    k = int(np.flatnonzero(log[:, 7] == 3)[5])  # a read
    log[k, 0] -= 1
    assert check_command_log(log, load_standard("DDR4-2400R_8Gb_x8"), 1) != []


def test_same_trace_same_cycles_and_skip_changes_nothing():
    cfg = dram_config("HBM2-2400_8Gb_x128", channels=4)
    addrs, writes = random_traffic(4000, seed=11, granule=32)
    a, _ = replay(cfg, addrs, writes)
    b, _ = replay(cfg, addrs, writes)
    c, _ = replay(cfg, addrs, writes, skip=False)
    for s in (a, b, c):
        for key in ("wall_seconds", "compile_seconds", "requests_per_second"):
            s.pop(key)
    assert a == b == c


def test_closed_page_never_leaves_a_row_open():
    cfg = dram_config("DDR4-2400R_8Gb_x8", "memory.controller.page_policy=closed",
                      "memory.controller.refresh=false")
    stats, st = replay(cfg, np.arange(200) * 64)
    assert stats["row_hits"] == 0 and stats["row_conflicts"] == 0
    assert (st.dbank[ks.B_OPEN_ROW] == -1).all()


def test_writes_drain_between_watermarks():
    cfg = dram_config("DDR4-2400R_8Gb_x8", "memory.controller.refresh=false")
    addrs, writes = random_traffic(2000, read_fraction=0.5, seed=5)
    stats, _ = replay(cfg, addrs, writes)
    assert (stats["reads"], stats["writes"]) == (int((writes == 0).sum()), int(writes.sum()))


def test_ipoly_spreads_a_power_of_two_stride_over_all_channels():
    # a stride of 16 channels' worth of interleaving hits one channel without hashing
    stride = 64 * 16
    plain = dram_config("DDR4-2400R_8Gb_x8", channels=16)
    hashed = dram_config("DDR4-2400R_8Gb_x8", "memory.controller.channel_hash=ipoly", channels=16)
    addrs = np.arange(1024) * stride
    s_plain, _ = replay(plain, addrs)
    s_hash, _ = replay(hashed, addrs)
    used_plain = sum(1 for c in s_plain["channels"] if c["reads"])
    used_hash = sum(1 for c in s_hash["channels"] if c["reads"])
    assert used_plain == 1 and used_hash == 16
    assert s_hash["dram_cycles"] < s_plain["dram_cycles"] / 4
