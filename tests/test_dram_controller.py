"""The DRAM controller as a whole: latencies, bandwidth, refresh, legality, determinism."""

import numpy as np
import pytest

from dram_helpers import STANDARDS, dram_config, random_traffic, replay
from npusim.dram import load_standard
from npusim.dram.checker import check_command_log
from npusim.kernels import state as ks


def _log(st):
    n = int(st.mem.ctl[ks.MC_LOG_N])
    assert st.mem.ctl[ks.MC_LOG_LOST] == 0
    return st.mem.cmd_log[:, :n].T.copy()


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
    assert st.mem.dch[ks.DC_LAT_SUM, 0] == first + second


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
                                   ranks=cfg.memory.ranks, check_unused_activates=True)
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
    assert (st.mem.dbank[ks.B_OPEN_ROW] == -1).all()


def test_writes_drain_between_watermarks():
    cfg = dram_config("DDR4-2400R_8Gb_x8", "memory.controller.refresh=false")
    addrs, writes = random_traffic(2000, read_fraction=0.5, seed=5)
    stats, _ = replay(cfg, addrs, writes)
    assert (stats["reads"], stats["writes"]) == (int((writes == 0).sum()), int(writes.sum()))


def test_a_row_opened_for_a_read_serves_it_while_writes_drain():
    """A read activates bank 0 at cycle 0; at cycle 1 enough writes to another row of the
    same bank arrive to start draining. The read's row stays open for it and it is served
    as soon as tRCD allows: latency RCD + CL + BL, two ACTs in all (its row, the writes').
    (Before, a write's PRE closed the row unused at tRAS and the read waited for the drain
    and a second ACT.)"""
    from dram_helpers import bare_state
    from npusim.kernels import dram as kd
    from npusim.kernels.addrmap import dram_decode
    from npusim.kernels.ports import ch_in_push, ch_out_pop

    std = load_standard("DDR4-2400R_8Gb_x8")
    t = std.timing
    cfg = dram_config(std.name, "memory.controller.refresh=false")
    chip, mt, p = bare_state(cfg)
    st, rg = chip.mem, chip.rings
    row1 = [a for a in range(std.row_bytes * std.banks, 2 * std.row_bytes * std.banks, 64)
            if tuple(dram_decode(a, p, mt)[:4]) == (0, 0, 0, 1)][:26]
    assert len(row1) == 26 and 26 >= p.d_wq_high

    def arrive(addr, write, cyc):
        ch_in_push(rg, p, 0, cyc * p.mem_period, cyc * p.mem_period, 0, write, 0, 0, addr)

    arrive(0, 0, 0)
    kd.dram_channel_step(st, rg, mt, p, 0, 0)
    assert st.dch[ks.DC_ACTS, 0] == 1
    for a in row1:
        arrive(a, 1, 1)
    for cyc in range(1, 3000):
        while rg.mport[ks.MP_OUT_COUNT, 0]:
            ch_out_pop(rg, p, 0, cyc * p.mem_period)
        kd.dram_channel_step(st, rg, mt, p, 0, cyc * p.mem_period)
    assert (st.dch[ks.DC_READS, 0], st.dch[ks.DC_WRITES, 0]) == (1, 26)
    assert st.dch[ks.DC_LAT_SUM, 0] == t["RCD"] + t["CL"] + t["BL"]
    assert st.dch[ks.DC_ACTS, 0] == 2


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


@pytest.mark.parametrize("mapping, fields", [
    # address bit of each field's lowest bit, 64 B requests, 2 channels, DDR4 x8:
    # 128 columns (7 bits), 4 bank groups, 4 banks, one rank
    ("RoBaRaCoBgCh", {"ch": 6, "bg": 7, "col": 9, "bank": 16, "row": 18}),  # the default
    ("RoBaBgRaCoCh", {"ch": 6, "col": 7, "bg": 14, "bank": 16, "row": 18}),  # Ramulator's
])
def test_address_mapping_bit_order(mapping, fields):
    """Each field of memory.controller.address_mapping sits where its name says, from the
    most significant end (the README's and npusim.dram.addressing's description)."""
    from dram_helpers import bare_state
    from npusim.kernels.addrmap import dram_channel, dram_decode

    overrides = [] if mapping == "RoBaRaCoBgCh" else [
        f"memory.controller.address_mapping={mapping}"]
    _, mt, p = bare_state(dram_config("DDR4-2400R_8Gb_x8", *overrides, channels=2))
    names = ("rank", "bg", "bank", "row", "col")
    for field, bit in fields.items():
        addr = 1 << bit
        got = {"ch": int(dram_channel(addr, p, mt)),
               **dict(zip(names, (int(v) for v in dram_decode(addr, p, mt))))}
        assert got == {k: int(k == field) for k in ("ch", *names)}, (field, got)
        below = {"ch": int(dram_channel(addr >> 1, p, mt)),
                 **dict(zip(names, (int(v) for v in dram_decode(addr >> 1, p, mt))))}
        assert below[field] == 0


def _queued(st, p, ch, side):
    """Request slots queued on ``side`` (not on its free stack)."""
    cap, base = (p.d_wq, p.d_rq) if side else (p.d_rq, 0)
    n = int(st.dch[ks.DC_WQ_COUNT if side else ks.DC_RQ_COUNT, ch])
    free = set(st.dfree[ch, side, :cap - n].tolist())
    return [k for k in range(base, base + cap) if k not in free]


def _fr_fcfs_by_definition(st, rg, p, ch, cyc):
    """FR-FCFS from its definition, over every request of the queue being served (slots not
    on the free stack) whose rank is not waiting for a refresh, and every request a row was
    opened for (B_OPENED_FOR, either queue, refresh or not); no PRE to a row opened for a
    request still queued: the first cycle some request's next command is legal, and among
    the requests legal then the oldest row hit, else the oldest. (request, command, cycle)."""
    from npusim.kernels import dram as kd

    side = int(st.dch[ks.DC_DRAINING, ch])
    opened = {int(v) - 1 for v in st.dbank[ks.B_OPENED_FOR, ch] if v > 0}
    out_full = rg.mport[ks.MP_OUT_COUNT, ch] >= rg.ch_out.shape[2]
    best = (None, -1, -1, -1)
    for k in _queued(st, p, ch, 0) + _queued(st, p, ch, 1):
        rank, rbg, nb = (int(st.dreq[ch, k, f]) for f in (ks.E_RANK, ks.E_RBG, ks.E_NB))
        write = int(st.dreq[ch, k, ks.E_DIR]) == 1
        if k not in opened and (write != side or st.drank[ks.RK_PENDING, ch, rank]):
            continue
        open_row, bursts = st.dbank[ks.B_OPEN_ROW, ch, nb], st.dreq[ch, k, ks.E_BURSTS]
        hit = st.dreq[ch, k, ks.E_ROW] == open_row
        if hit and out_full and bursts == 1:
            continue  # its response would not fit
        if hit:
            last = p.d_closed_page == 1 and bursts == 1
            cmd = (kd.WRA if last else kd.WR) if write else (kd.RDA if last else kd.RD)
        else:
            cmd = kd.ACT if open_row < 0 else kd.PRE
            if cmd == kd.PRE and st.dbank[ks.B_OPENED_FOR, ch, nb] > 0:
                continue  # the row waits for the request it was opened for
        at = max(st.rdy_rank[ch, rank, cmd], st.rdy_group[ch, rbg, cmd],
                 st.rdy_bank[ch, nb, cmd], cyc)
        key = (at, not hit, st.dreq[ch, k, ks.E_SEQ])
        if best[0] is None or key < best[0]:
            best = (key, k, cmd, at)
    return best[1:]


@pytest.mark.parametrize("page", ["open", "closed"])
def test_fr_fcfs_choice_matches_its_definition(page):
    """The controller finds its choice through per-bank lists; after random arrivals,
    departures, row changes, rows opened for a request, bursts served, drain flips, a full
    response ring and refresh waits, it must equal FR-FCFS computed from scratch over every
    queued request."""
    from dram_helpers import bare_state
    from npusim.kernels import dram as kd
    from npusim.kernels.addrmap import dram_decode

    cfg = dram_config("DDR4-2400R_8Gb_x8", f"memory.controller.page_policy={page}",
                      "memory.controller.read_queue=12", "memory.controller.write_queue=12")
    chip, mt, p = bare_state(cfg)
    st, rg = chip.mem, chip.rings
    rng = np.random.default_rng(11)
    # addresses in two rows of two banks: many requests per bank, many row hits
    pool = [a for a in range(0, 1 << 20, 64)
            if dram_decode(a, p, mt)[:4] in {(0, 0, b, r) for b in (0, 1) for r in (0, 1)}]
    assert len(pool) > 100
    cyc, checked, kinds, opened_elsewhere = 0, 0, set(), 0
    for _ in range(1500):
        cyc += int(rng.integers(0, 8))
        action = int(rng.integers(0, 10))
        if action < 4:  # a request arrives
            h = (rg.mport[ks.MP_IN_HEAD, 0] + rg.mport[ks.MP_IN_COUNT, 0]) % rg.ch_in.shape[2]
            write = int(rng.random() < 0.4)
            fields = {ks.P_TIME: 0, ks.P_CORE: 0, ks.P_DIR: write, ks.P_ENTRY: 0, ks.P_SENT: 0,
                      ks.P_ADDR: pool[int(rng.integers(0, len(pool)))]}
            for f, v in fields.items():
                rg.ch_in[f, 0, h] = v
            rg.mport[ks.MP_IN_COUNT, 0] += 1
            kd._accept(st, rg, mt, p, 0, cyc * p.mem_period)
            rg.mport[ks.MP_IN_COUNT, 0] = 0  # a request a full queue refused is dropped
            rg.mport[ks.MP_IN_HEAD, 0] = 0
        elif action < 6:  # a queued request leaves
            side = int(rng.integers(0, 2))
            n = int(st.dch[ks.DC_WQ_COUNT if side else ks.DC_RQ_COUNT, 0])
            cap = p.d_wq if side else p.d_rq
            if n:
                free = set(st.dfree[0, side, :cap - n].tolist())
                used = [k for k in range(cap) if k + (p.d_rq if side else 0) not in free]
                k = used[int(rng.integers(0, len(used)))] + (p.d_rq if side else 0)
                kd._retire(st, p, 0, k, side == 1)
        elif action < 8:  # a bank opens or closes a row (timing bounds move too)
            rank, bg, bank = 0, 0, int(rng.integers(0, 2))
            nb = bg * p.d_banks + bank
            cmd = kd.PRE if st.dbank[ks.B_OPEN_ROW, 0, nb] >= 0 else kd.ACT
            row = int(rng.integers(0, 2))
            kd.dram_issue(st, mt, p, 0, rank, bg, bank, row, 0, cmd, cyc, 0, 0)
            mine = [k for k in _queued(st, p, 0, 0) + _queued(st, p, 0, 1)
                    if st.dreq[0, k, ks.E_NB] == nb and st.dreq[0, k, ks.E_ROW] == row]
            if cmd == kd.ACT and mine and rng.random() < 0.5:  # opened for a request
                k = mine[int(rng.integers(0, len(mine)))]  # (as _schedule's ACT notes it)
                st.dbank[ks.B_OPENED_FOR, 0, nb] = k + 1
                st.dch[ks.DC_OPENED_R + int(st.dreq[0, k, ks.E_DIR]), 0] += 1
        elif action == 8:  # bursts served, drain mode, response ring
            k = int(rng.integers(0, p.d_rq + p.d_wq))
            st.dreq[0, k, ks.E_BURSTS] = int(rng.integers(1, 4))
            st.dch[ks.DC_DRAINING, 0] = int(rng.random() < 0.3)
            rg.mport[ks.MP_OUT_COUNT, 0] = rg.ch_out.shape[2] if rng.random() < 0.3 else 0
        else:  # the rank waits for a refresh, or not
            pending = int(rng.random() < 0.2)
            st.drank[ks.RK_PENDING, 0, 0] = pending
        kd._choose(st, rg, p, 0, cyc)
        got = (int(st.dch[ks.DC_CAND_K, 0]), int(st.dch[ks.DC_CAND_CMD, 0]),
               int(st.dch[ks.DC_CAND_AT, 0]))
        want = _fr_fcfs_by_definition(st, rg, p, 0, cyc)
        if want[0] >= 0:
            assert got == tuple(int(x) for x in want)
            checked += 1
            kinds.add(want[1])
            k = int(want[0])
            nb = int(st.dreq[0, k, ks.E_NB])
            if st.dbank[ks.B_OPENED_FOR, 0, nb] == k + 1 and (
                    st.dreq[0, k, ks.E_DIR] != st.dch[ks.DC_DRAINING, 0]
                    or st.drank[ks.RK_PENDING, 0, 0]):
                opened_elsewhere += 1
        else:
            assert got[0] == -1
    # the walk met every kind of choice many times
    assert checked > 500
    # ... including requests served because their row was opened for them, from the queue
    # not being served or while their rank waits for a refresh
    assert opened_elsewhere > 50
    assert {kd.ACT, kd.PRE} <= kinds and (kinds & {kd.RD, kd.RDA}) and (kinds & {kd.WR, kd.WRA})
