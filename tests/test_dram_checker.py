"""The independent DRAM command-log checker: a hand-made clean log passes, and each kind of
violation (tRCD, tCCD_L, tFAW, rank switching, bank state) is reported."""

from __future__ import annotations

import time

import numpy as np
import pytest

from npusim.dram import COMMANDS, LOG_COLUMNS, check_command_log, load_standard
from npusim.errors import NpusimError

DDR4 = "DDR4-2400R_8Gb_x8"   # CL 16 CWL 12 RCD 16 RP 16 RAS 39 RC 55 BL 4 CCD_S 4 CCD_L 6
#                              RRD_S 4 RRD_L 6 FAW 26 WR 18 WTR_S 3 WTR_L 9 RTP 9 RFC 420


def log(*rows):
    """Rows (cycle, ch, rank, bg, bank, row, col, 'CMD') -> (n, 8) int64 log."""
    return np.array([(*r[:7], COMMANDS.index(r[7])) for r in rows], dtype=np.int64).reshape(-1, 8)


# a legal DDR4-2400R sequence, every gap at its minimum (comment: binding constraint)
CLEAN = [
    (0, 0, 0, 0, 0, 5, 0, "ACT"),
    (4, 0, 0, 1, 0, 7, 0, "ACT"),       # tRRD_S
    (16, 0, 0, 0, 0, 5, 0, "RD"),       # tRCD
    (20, 0, 0, 1, 0, 7, 0, "RD"),       # tRCD; tCCD_S
    (24, 0, 0, 0, 0, 5, 8, "RD"),       # tCCD_S / BL after 20 (tCCD_L after 16 allows 22)
    (34, 0, 0, 1, 0, 7, 8, "WR"),       # RD->WR: CL + BL + 2 - CWL = 10
    (53, 0, 0, 0, 0, 5, 16, "RD"),      # WR->RD other bank group: CWL + BL + WTR_S = 19
    (62, 0, 0, 0, 0, 5, 0, "PRE"),      # tRTP after the RD at 53
    (68, 0, 0, 1, 0, 7, 0, "PRE"),      # write recovery: CWL + BL + WR = 34 after 34
    (78, 0, 0, 0, 0, 9, 0, "ACT"),      # tRP
    (94, 0, 0, 0, 0, 9, 0, "RDA"),      # tRCD
    (133, 0, 0, 0, 0, 0, 0, "REF"),     # tRC after the ACT at 78 (RDA closes at 94+9+16)
    (553, 0, 0, 2, 1, 3, 0, "ACT"),     # tRFC
    (569, 0, 0, 2, 1, 3, 0, "WRA"),     # tRCD
    (619, 0, 0, 2, 1, 4, 0, "ACT"),     # WRA->ACT: CWL + BL + WR + RP = 50
    (658, 0, 0, 0, 0, 0, 0, "PREA"),    # tRAS after the ACT at 619
    (674, 0, 0, 0, 0, 0, 0, "REF"),     # PREA->REF tRP (and tRC after 619)
]


def test_clean_log_passes():
    std = load_standard(DDR4)
    assert check_command_log(log(*CLEAN), std, channels=1) == []


def test_each_clean_gap_is_tight():
    """Moving any command one cycle earlier breaks a timing rule: the clean log sits on
    the bounds, so the checker really evaluates each of them."""
    std = load_standard(DDR4)
    for i in range(1, len(CLEAN)):
        rows = list(CLEAN)
        rows[i] = (rows[i][0] - 1, *rows[i][1:])
        bad = check_command_log(log(*rows), std, channels=1)
        assert bad and all("violates" in b for b in bad), (i, bad)


def test_structured_log_and_empty_log():
    std = load_standard(DDR4)
    arr = log(*CLEAN)
    rec = np.zeros(len(arr), dtype=[(c, np.int64) for c in LOG_COLUMNS])
    for k, c in enumerate(LOG_COLUMNS):
        rec[c] = arr[:, k]
    assert check_command_log(rec, std, channels=1) == []
    assert check_command_log(np.zeros((0, 8), np.int64), std, channels=1) == []
    with pytest.raises(NpusimError, match="columns"):
        check_command_log(np.zeros((3, 5), np.int64), std, channels=1)


def test_trcd_violation():
    std = load_standard(DDR4)
    bad = check_command_log(log((0, 0, 0, 0, 0, 5, 0, "ACT"), (15, 0, 0, 0, 0, 5, 0, "RD")),
                            std, channels=1)
    assert len(bad) == 1
    assert "#1 cycle 15 ch0 rank0 bg0 bank0 RD: violates ACT->RD @bank: RCD = 16" in bad[0]
    assert "earliest legal cycle 16" in bad[0]


def test_tccd_l_violation():
    std = load_standard(DDR4)
    rows = [(0, 0, 0, 0, 0, 5, 0, "ACT"), (6, 0, 0, 0, 1, 5, 0, "ACT"),   # tRRD_L
            (22, 0, 0, 0, 0, 5, 0, "RD"), (27, 0, 0, 0, 1, 5, 0, "RD")]    # tCCD_L needs 28
    bad = check_command_log(log(*rows), std, channels=1)
    assert len(bad) == 1 and "RD->RD @bankgroup: CCD_L = 6" in bad[0] and "cycle 28" in bad[0]
    rows[-1] = (28, 0, 0, 0, 1, 5, 0, "RD")
    assert check_command_log(log(*rows), std, channels=1) == []
    # the same gap to another bank group only needs tCCD_S
    rows = [(0, 0, 0, 0, 0, 5, 0, "ACT"), (6, 0, 0, 1, 1, 5, 0, "ACT"),
            (22, 0, 0, 0, 0, 5, 0, "RD"), (26, 0, 0, 1, 1, 5, 0, "RD")]
    assert check_command_log(log(*rows), std, channels=1) == []


def test_tfaw_violation():
    std = load_standard(DDR4)
    banks = [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1)]   # alternate groups: tRRD_S suffices
    fast = [(4 * k, 0, 0, g, b, 1, 0, "ACT") for k, (g, b) in enumerate(banks)]
    bad = check_command_log(log(*fast), std, channels=1)
    assert len(bad) == 1
    assert "#4 cycle 16" in bad[0] and "ACT->ACT @rank window 4: FAW = 26" in bad[0]
    assert "4th most recent ACT at cycle 0" in bad[0] and "earliest legal cycle 26" in bad[0]
    ok = fast[:4] + [(26, 0, 0, 0, 1, 1, 0, "ACT")]
    assert check_command_log(log(*ok), std, channels=1) == []
    # the window slides: with ACTs at 0, 10, 14, 18, 26 a sixth is bound by the one at 10
    spread = [(t, *r[1:]) for t, r in zip((0, 10, 14, 18, 26), ok)]
    six = spread + [(30, 0, 0, 1, 1, 1, 0, "ACT")]
    bad = check_command_log(log(*six), std, channels=1)
    assert len(bad) == 1 and "ACT at cycle 10" in bad[0] and "cycle 36" in bad[0]
    six[-1] = (36, 0, 0, 1, 1, 1, 0, "ACT")
    assert check_command_log(log(*six), std, channels=1) == []


def test_rank_switch_violation():
    std = load_standard(DDR4)
    rows = [(0, 0, 0, 0, 0, 5, 0, "ACT"), (4, 0, 1, 0, 0, 5, 0, "ACT"),
            (16, 0, 0, 0, 0, 5, 0, "RD"), (20, 0, 1, 0, 0, 5, 0, "RD")]
    bad = check_command_log(log(*rows), std, channels=1, ranks=2)
    assert len(bad) == 1
    assert "ch0 rank1 bg0 bank0 RD: violates RD->RD @rank (other nodes): BL + RTRS = 6" in bad[0]
    rows[-1] = (22, 0, 1, 0, 0, 5, 0, "RD")
    assert check_command_log(log(*rows), std, channels=1, ranks=2) == []
    # read then write on the other rank: CL + BL + RTRS - CWL = 10
    rows[-1] = (25, 0, 1, 0, 0, 5, 0, "WR")
    bad = check_command_log(log(*rows), std, channels=1, ranks=2)
    assert len(bad) == 1 and "RD->WR @rank (other nodes): CL + BL + RTRS - CWL = 10" in bad[0]
    # the rank index must exist
    bad = check_command_log(log(*rows), std, channels=1)
    assert any("address out of range" in b for b in bad)


def test_bank_state_violations():
    std = load_standard(DDR4)
    bad = check_command_log(log((10, 0, 0, 1, 2, 5, 0, "RD")), std, channels=1)
    assert bad == ["#0 cycle 10 ch0 rank0 bg1 bank2 RD row 5: bank is closed"]
    bad = check_command_log(log((0, 0, 0, 0, 0, 5, 0, "ACT"), (16, 0, 0, 0, 0, 6, 0, "WR")),
                            std, channels=1)
    assert bad == ["#1 cycle 16 ch0 rank0 bg0 bank0 WR row 6: open row is 5"]
    bad = check_command_log(log((0, 0, 0, 0, 0, 5, 0, "ACT"), (60, 0, 0, 0, 0, 6, 0, "ACT")),
                            std, channels=1)
    assert bad == ["#1 cycle 60 ch0 rank0 bg0 bank0 ACT row 6: bank already open (row 5)"]
    bad = check_command_log(log((0, 0, 0, 3, 1, 5, 0, "ACT"), (100, 0, 0, 0, 0, 0, 0, "REF")),
                            std, channels=1)
    assert len(bad) == 1 and "bg3 bank1" in bad[0] and "REF needs all banks closed" in bad[0]
    # RDA closes the bank: a later RD to it is to a closed bank
    bad = check_command_log(log((0, 0, 0, 0, 0, 5, 0, "ACT"), (16, 0, 0, 0, 0, 5, 0, "RDA"),
                                (30, 0, 0, 0, 0, 5, 0, "RD")), std, channels=1)
    assert bad == ["#2 cycle 30 ch0 rank0 bg0 bank0 RD row 5: bank is closed"]


def test_command_bus_and_order():
    std = load_standard(DDR4)
    rows = [(0, 0, 0, 0, 0, 5, 0, "ACT"), (0, 1, 0, 0, 0, 5, 0, "ACT"),   # two channels: fine
            (4, 0, 0, 1, 0, 5, 0, "ACT"), (4, 0, 0, 2, 0, 5, 0, "ACT")]
    bad = check_command_log(log(*rows), std, channels=2)
    assert any("second command on channel 0 in cycle 4" in b for b in bad)
    assert not any("second command" in b
                   for b in check_command_log(log(*rows), std, channels=2, command_bus=False))
    bad = check_command_log(log((10, 0, 0, 0, 0, 5, 0, "ACT"), (5, 0, 0, 1, 0, 5, 0, "ACT")),
                            std, channels=1)
    assert any("cycle goes backwards" in b for b in bad)


def test_refresh_interval_check():
    std = load_standard(DDR4)
    limit = 9 * std.timing["REFI"]
    ok = [(limit, 0, 0, 0, 0, 0, 0, "REF"), (2 * limit, 0, 0, 0, 0, 0, 0, "REF")]
    assert check_command_log(log(*ok), std, channels=1, check_refresh=True) == []
    late = [(limit, 0, 0, 0, 0, 0, 0, "REF"), (2 * limit + 1, 0, 0, 0, 0, 0, 0, "REF")]
    bad = check_command_log(log(*late), std, channels=1, check_refresh=True)
    assert len(bad) == 1 and "since the previous refresh" in bad[0]


def test_rows_closed_unused_are_reported_on_request():
    """An ACT undone by a PRE or PREA before any column command used its row: legal, so
    reported only with check_unused_activates (CLEAN's last ACT at 619 is such a row)."""
    std = load_standard(DDR4)
    bad = check_command_log(log(*CLEAN), std, channels=1, check_unused_activates=True)
    assert len(bad) == 1 and "cycle 658" in bad[0] and "PREA" in bad[0] and "bg2 bank1" in bad[0]
    rows = [(0, 0, 0, 0, 0, 5, 0, "ACT"), (39, 0, 0, 0, 0, 5, 0, "PRE"),
            (55, 0, 0, 0, 0, 6, 0, "ACT"), (71, 0, 0, 0, 0, 6, 0, "RD"),
            (94, 0, 0, 0, 0, 6, 0, "PRE")]
    bad = check_command_log(log(*rows), std, channels=1, check_unused_activates=True)
    assert len(bad) == 1 and "cycle 39" in bad[0] and "bg0 bank0" in bad[0]
    assert check_command_log(log(*rows), std, channels=1) == []


def test_rank_wide_rules_in_other_standards():
    """LPDDR4 all-bank precharge uses tRPab and tPPD; HBM2 pseudo channels are channels."""
    lp4 = load_standard("LPDDR4-3200_8Gb_x16")   # RCD 29 RAS 68 RPab 34 RP 29 PPD 4
    rows = [(0, 0, 0, 0, 0, 1, 0, "ACT"), (68, 0, 0, 0, 0, 0, 0, "PREA"),
            (101, 0, 0, 0, 0, 1, 0, "ACT")]
    bad = check_command_log(log(*rows), lp4, channels=2)
    assert len(bad) == 1 and "PREA->ACT @rank: RPab = 34" in bad[0]
    hbm = load_standard("HBM2-2400_8Gb_x128").with_channels(16)
    rows = [(0, 31, 0, 0, 0, 1, 0, "ACT"), (17, 31, 0, 0, 0, 1, 0, "RD"),
            (18, 30, 0, 0, 0, 1, 0, "RD")]
    bad = check_command_log(log(*rows), hbm, channels=hbm.sim_channels)
    assert bad == ["#2 cycle 18 ch30 rank0 bg0 bank0 RD row 1: bank is closed"]


def test_long_log_is_fast():
    """200k commands: a legal block (4 ACTs, 32 reads rotating over the bank groups, 4 PREs)
    repeated every 170 cycles."""
    std = load_standard(DDR4)
    block = [(4 * g, 0, 0, g, 0, g, 0, "ACT") for g in range(4)]
    block += [(28 + 4 * j, 0, 0, j % 4, 0, j % 4, j // 4, "RD") for j in range(32)]
    block += [(150 + 4 * g, 0, 0, g, 0, g, 0, "PRE") for g in range(4)]
    one = log(*sorted(block))
    reps = 200_000 // len(one)
    big = np.tile(one, (reps, 1))
    big[:, 0] += np.repeat(np.arange(reps) * 170, len(one))
    assert len(big) == 200_000
    t0 = time.perf_counter()
    assert check_command_log(big, std, channels=1) == []
    assert time.perf_counter() - t0 < 20
    assert COMMANDS[big[-6, 7]] == "RD"
    big[-6, 0] -= 1              # one read a cycle early is found (data bus and tCCD_S)
    bad = check_command_log(big, std, channels=1)
    assert len(bad) == 2 and all(b.startswith("#199994 ") and "violates" in b for b in bad)


def test_log_starting_mid_run_with_initial_open_rows():
    """A window of a log: the open rows at its start make its first accesses legal."""
    std = load_standard(DDR4)
    rows = [(100, 0, 0, 0, 0, 5, 0, "RD"), (104, 0, 0, 1, 2, 7, 0, "RD")]
    assert len(check_command_log(log(*rows), std, channels=1)) == 2
    start = np.full((1, 16), -1)
    start[0, 0], start[0, 1 * 4 + 2] = 5, 7
    assert check_command_log(log(*rows), std, channels=1, initial_open_rows=start) == []
    start[0, 0] = 6
    bad = check_command_log(log(*rows), std, channels=1, initial_open_rows=start)
    assert bad == ["#0 cycle 100 ch0 rank0 bg0 bank0 RD row 5: open row is 6"]
    with pytest.raises(NpusimError, match="initial_open_rows"):
        check_command_log(log(*rows), std, channels=1, initial_open_rows=np.zeros((1, 4)))
