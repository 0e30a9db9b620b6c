"""DRAM standards as data: every shipped speed bin loads with hand-checked numbers, every
family covers the JEDEC constraints, and bad files fail with a message naming the field."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from npusim.dram import COMMANDS, LEVELS, list_standards, load_standard
from npusim.dram.standard import dram_dir
from npusim.errors import NpusimError
from npusim.paths import configs_dir

DDR4 = [f"DDR4-{r}_{d}_x{w}" for r in ("2400R", "3200AA") for d in ("4Gb", "8Gb")
        for w in (8, 16)]
OTHERS = ["HBM2-2000_8Gb_x128", "HBM2-2400_8Gb_x128", "LPDDR4-3200_8Gb_x16",
          "LPDDR5-6400_16Gb_x16", "GDDR6-14000_8Gb_x16"]


def test_all_shipped_standards_listed_and_load():
    assert set(DDR4 + OTHERS) <= set(list_standards())
    assert dram_dir() == configs_dir() / "dram"
    for name in list_standards():
        std = load_standard(name)
        assert std.name == name and std.source.strip() and len(std.rules) > 50
        assert std.family == name.split("-")[0]


# name: freq MHz, JEDEC channels, pseudo ch, ranks, BGs, banks/BG, burst B, B/cycle, row B,
#       peak GB/s of the default organisation
EXPECTED = {
    "DDR4-2400R_8Gb_x8": (1200, 1, 1, 1, 4, 4, 64, 16, 8192, 19.2),
    "DDR4-2400R_4Gb_x16": (1200, 1, 1, 1, 2, 4, 64, 16, 8192, 19.2),
    "DDR4-3200AA_8Gb_x16": (1600, 1, 1, 1, 2, 4, 64, 16, 8192, 25.6),
    "DDR4-3200AA_4Gb_x8": (1600, 1, 1, 1, 4, 4, 64, 16, 8192, 25.6),
    "HBM2-2000_8Gb_x128": (1000, 8, 2, 1, 4, 4, 32, 16, 1024, 256.0),
    "HBM2-2400_8Gb_x128": (1200, 8, 2, 1, 4, 4, 32, 16, 1024, 307.2),
    "LPDDR4-3200_8Gb_x16": (1600, 2, 1, 1, 1, 8, 32, 4, 2048, 12.8),
    "LPDDR5-6400_16Gb_x16": (800, 1, 1, 1, 4, 4, 32, 16, 2048, 12.8),
    "GDDR6-14000_8Gb_x16": (1750, 2, 1, 1, 4, 4, 32, 16, 2048, 56.0),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_organisation_and_bandwidth(name):
    std = load_standard(name)
    f, ch, pc, rk, bg, bpg, burst, bpc, row, peak = EXPECTED[name]
    assert (std.freq_mhz, std.channels, std.pseudo_channels, std.ranks) == (f, ch, pc, rk)
    assert (std.bank_groups, std.banks_per_group, std.banks) == (bg, bpg, bg * bpg)
    assert (std.burst_bytes, std.bytes_per_cycle, std.row_bytes) == (burst, bpc, row)
    assert std.peak_bytes_per_s == pytest.approx(peak * 1e9)
    # per-pin rate x channel width = peak of one npusim channel
    assert std.data_rate_mtps * 1e6 * std.channel_dq_bits / 8 == std.peak_bytes_per_s / std.sim_channels


def test_hand_computed_headline_numbers():
    ddr4 = load_standard("DDR4-2400R_8Gb_x8")
    assert ddr4.burst_bytes == 64 == 64 // 8 * 8           # x64 channel, BL8
    assert ddr4.peak_bytes_per_s == 19_200_000_000         # 2400 MT/s x 8 B
    assert ddr4.rows * ddr4.banks * ddr4.columns * ddr4.dq_bits == 8 * 8 * 2**30  # 8 x 8 Gb
    hbm = load_standard("HBM2-2400_8Gb_x128").with_channels(16)
    assert (hbm.channels, hbm.sim_channels, hbm.dq_bits, hbm.channel_dq_bits) == (16, 32, 128, 64)
    assert hbm.peak_bytes_per_s == 614_400_000_000         # 16 x 128 bit x 2.4 Gb/s
    assert 16 * 128 // 8 * 2.4e9 == hbm.peak_bytes_per_s
    assert hbm.bursts_per_row == 32 and hbm.burst_bytes * hbm.bursts_per_row == 1024
    with pytest.raises(NpusimError, match="channels"):
        hbm.with_channels(0)
    lp5 = load_standard("LPDDR5-6400_16Gb_x16")
    assert lp5.wck_ck_ratio == 4 and lp5.timing["BL"] == 2   # BL16 = 2 CK at WCK:CK 4:1


TIMINGS = {  # hand-checked against the sources named in the files
    "DDR4-2400R_8Gb_x8": dict(CL=16, CWL=12, RCD=16, RP=16, RAS=39, RC=55, BL=4, CCD_S=4,
                              CCD_L=6, RRD_S=4, RRD_L=6, FAW=26, WR=18, WTR_S=3, WTR_L=9,
                              RTP=9, RFC=420, REFI=9360),
    "DDR4-2400R_4Gb_x16": dict(RRD_S=7, RRD_L=8, FAW=36, RFC=312),
    "DDR4-3200AA_8Gb_x8": dict(CL=22, CWL=16, RCD=22, RP=22, RAS=52, RC=74, CCD_L=8, RRD_S=4,
                               RRD_L=8, FAW=34, WR=24, WTR_S=4, WTR_L=12, RTP=12, RFC=560,
                               REFI=12480),
    "DDR4-3200AA_8Gb_x16": dict(RRD_S=9, RRD_L=11, FAW=48),
    "HBM2-2000_8Gb_x128": dict(CL=14, RCD=14, RP=14, RAS=34, BL=2, CCD_S=2, REFI=3900),
    "HBM2-2400_8Gb_x128": dict(CL=17, RCD=17, RP=17, RAS=41, RC=58, RFC=420, REFI=4680),
    "LPDDR4-3200_8Gb_x16": dict(CL=28, CWL=14, RCD=29, RP=29, RPab=34, BL=8, FAW=64, RFC=448),
    "LPDDR5-6400_16Gb_x16": dict(CL=20, CWL=11, RCD=15, RP=15, RPab=17, CCD_S=2, CCD_L=4),
    "GDDR6-14000_8Gb_x16": dict(CL=24, RCD=26, RCDWR=16, RP=26, BL=2, REFI=3333),
}


@pytest.mark.parametrize("name", sorted(TIMINGS))
def test_timing_values(name):
    t = load_standard(name).timing
    assert {k: t[k] for k in TIMINGS[name]} == TIMINGS[name]


def _lat(std, prev, nxt, level, sibling=False, window=1):
    hits = [r.latency for r in std.rules if COMMANDS[r.prev] == prev and COMMANDS[r.next] == nxt
            and LEVELS[r.level] == level and r.sibling == sibling and r.window == window]
    assert len(hits) == 1, (prev, nxt, level, hits)
    return hits[0]


def test_evaluated_rule_latencies_ddr4_2400():
    s = load_standard("DDR4-2400R_8Gb_x8")
    assert _lat(s, "ACT", "RD", "bank") == 16                 # tRCD
    assert _lat(s, "RD", "WR", "rank") == 16 + 4 + 2 - 12     # CL + BL + 2 - CWL
    assert _lat(s, "WR", "RD", "bankgroup") == 12 + 4 + 9     # CWL + BL + WTR_L
    assert _lat(s, "WR", "RD", "rank") == 12 + 4 + 3          # CWL + BL + WTR_S
    assert _lat(s, "WR", "PRE", "bank") == 12 + 4 + 18        # CWL + BL + WR
    assert _lat(s, "RDA", "ACT", "bank") == 9 + 16            # RTP + RP
    assert _lat(s, "WRA", "ACT", "bank") == 12 + 4 + 18 + 16  # CWL + BL + WR + RP
    assert _lat(s, "ACT", "ACT", "rank", window=4) == 26      # tFAW
    assert _lat(s, "RD", "RD", "rank", sibling=True) == 4 + 2  # BL + RTRS
    assert _lat(s, "REF", "REF", "rank") == 420 == _lat(s, "REF", "ACT", "rank")
    assert _lat(s, "PREA", "ACT", "rank") == 16
    assert _lat(s, "RD", "RD", "channel") == 4
    # tRTRS write-to-read between ranks vanishes at 3200AA: max(1, 16 + 4 + 2 - 22) = 1
    assert _lat(load_standard("DDR4-3200AA_8Gb_x8"), "WR", "RD", "rank", sibling=True) == 1


RULE_COUNTS = {"DDR4": 81, "HBM2": 69, "LPDDR4": 128, "LPDDR5": 93, "GDDR6": 65}
REQUIRED = ("RCD", "RP", "RAS", "RC", "CCD_S", "CCD_L", "RRD_S", "RRD_L", "FAW", "WR", "WTR_S",
            "WTR_L", "RTP", "RTRS", "RFC")
ABSENT = {  # constraints the family does not have
    "DDR4": set(), "LPDDR5": set(),
    "HBM2": {"RTRS"}, "GDDR6": {"RTRS"},           # no ranks
    "LPDDR4": {"CCD_L", "RRD_L", "WTR_L"},         # no bank groups
}
FAMILY_OF = {"DDR4": "DDR4-2400R_8Gb_x8", "HBM2": "HBM2-2400_8Gb_x128",
             "LPDDR4": "LPDDR4-3200_8Gb_x16", "LPDDR5": "LPDDR5-6400_16Gb_x16",
             "GDDR6": "GDDR6-14000_8Gb_x16"}


@pytest.mark.parametrize("family", sorted(FAMILY_OF))
def test_family_rule_coverage(family):
    std = load_standard(FAMILY_OF[family])
    assert len(std.rules) == RULE_COUNTS[family]
    names = set()
    for r in std.rules:
        names |= set(re.findall(r"[A-Za-z_]+", r.expr)) - {"max", "min"}
    for name in REQUIRED:
        assert (name in names) == (name not in ABSENT[family]), (family, name)
    # every standard refreshes, precharges and has the tFAW window
    assert any(r.window == 4 and COMMANDS[r.prev] == COMMANDS[r.next] == "ACT" for r in std.rules)
    assert {COMMANDS[r.next] for r in std.rules if COMMANDS[r.prev] == "REF"} >= {"ACT", "REF"}
    assert any(COMMANDS[r.prev] == "PREA" and COMMANDS[r.next] == "ACT" for r in std.rules)
    # every command has at least one rule as prev and as next
    assert {r.prev for r in std.rules} == set(range(len(COMMANDS)))
    assert {r.next for r in std.rules} == set(range(len(COMMANDS)))


@pytest.mark.parametrize("name", ["DDR4-3200AA_8Gb_x16", "HBM2-2400_8Gb_x128"])
def test_rule_arrays_csr(name):
    std = load_standard(name)
    a = std.rule_arrays()
    n = len(std.rules)
    for k in ("level", "prev", "next", "latency", "window", "sibling"):
        assert a[k].dtype == np.int64 and a[k].shape == (n,)
    assert np.all(np.diff(a["prev"]) >= 0)
    ps = a["prev_start"]
    assert ps.shape == (len(COMMANDS) + 1,) and ps[0] == 0 and ps[-1] == n
    for c in range(len(COMMANDS)):
        assert np.all(a["prev"][ps[c]:ps[c + 1]] == c)
    assert np.all(a["latency"] >= 1) and np.all(a["window"] >= 1)
    windowed = a["window"] > 1
    assert windowed.sum() == 1 and a["prev"][windowed][0] == COMMANDS.index("ACT")
    assert a["latency"][windowed][0] == std.timing["FAW"]


# ---- bad files ----------------------------------------------------------------------------
def _copy(tmp_path: Path, name="DDR4-2400R_8Gb_x8", edit=None, fam_edit=None, stem=None) -> Path:
    text = (dram_dir() / f"{name}.toml").read_text()
    if edit:
        text = edit(text)
    out = tmp_path / f"{stem or name}.toml"
    out.write_text(text)
    if fam_edit:
        (tmp_path / "families").mkdir(exist_ok=True)
        fam = (dram_dir() / "families" / "DDR4.toml").read_text()
        (tmp_path / "families" / "DDR4.toml").write_text(fam_edit(fam))
    return out


def test_copy_of_a_good_file_loads(tmp_path):
    std = load_standard(_copy(tmp_path, fam_edit=lambda f: f))
    assert std.timing == load_standard("DDR4-2400R_8Gb_x8").timing
    assert len(std.rules) == RULE_COUNTS["DDR4"]


def test_unknown_timing_name_in_a_rule(tmp_path):
    p = _copy(tmp_path, fam_edit=lambda f: f.replace('latency = "RRD_L"', 'latency = "tRRD_X + 1"'))
    with pytest.raises(NpusimError, match=r"DDR4\.toml: rule #\d+: .*unknown timing name 'tRRD_X'"):
        load_standard(p)


def test_missing_timing_key(tmp_path):
    p = _copy(tmp_path, edit=lambda t: re.sub(r"(?m)^RCD = .*\n", "", t))
    with pytest.raises(NpusimError, match=r"DDR4-2400R_8Gb_x8\.toml: \[timing\] is missing .*RCD"):
        load_standard(p)


def test_missing_organization_key(tmp_path):
    p = _copy(tmp_path, edit=lambda t: re.sub(r"(?m)^rows = .*\n", "", t))
    with pytest.raises(NpusimError, match=r"\[organization\] is missing required field\(s\) rows"):
        load_standard(p)


def test_non_integer_freq(tmp_path):
    p = _copy(tmp_path, edit=lambda t: t.replace("freq_mhz = 1200", "freq_mhz = 1200.5"))
    with pytest.raises(NpusimError, match=r"freq_mhz = 1200\.5 must be an integer MHz"):
        load_standard(p)


def test_non_integer_timing_and_out_of_range(tmp_path):
    p = _copy(tmp_path, edit=lambda t: t.replace("CL = 16 ", "CL = 16.5 "))
    with pytest.raises(NpusimError, match=r"timing\.CL = 16\.5 must be an integer"):
        load_standard(p)
    p = _copy(tmp_path, edit=lambda t: t.replace("RCD = 16", "RCD = 0"))
    with pytest.raises(NpusimError, match=r"timing\.RCD = 0 is out of range"):
        load_standard(p)
    p = _copy(tmp_path, edit=lambda t: t.replace("RC = 55", "RC = 50"))
    with pytest.raises(NpusimError, match=r"RC = 50 must be >= RAS \+ RP = 55"):
        load_standard(p)


def test_name_must_match_stem(tmp_path):
    p = _copy(tmp_path, stem="DDR4-renamed")
    with pytest.raises(NpusimError, match=r"name = 'DDR4-2400R_8Gb_x8' must equal .*'DDR4-renamed'"):
        load_standard(p)


def test_data_rate_must_match_burst_timing(tmp_path):
    p = _copy(tmp_path, edit=lambda t: t.replace("BL = 4 ", "BL = 8 "))
    with pytest.raises(NpusimError, match=r"data_rate_mtps = 2400 does not match"):
        load_standard(p)


def test_bad_rules(tmp_path):
    cases = {
        'level = "rank"\nprev = ["ACT"]\nnext = ["ACT"]\nlatency = "RRD_S"':
            ('level = "rnk"\nprev = ["ACT"]\nnext = ["ACT"]\nlatency = "RRD_S"', r"level = 'rnk'"),
        'latency = "CL + BL + 2 - CWL"': ('latency = "CWL - CL"', r"evaluates to -4 cycles"),
        'prev = ["PREA"]\nnext = ["ACT"]': ('prev = ["PREX"]\nnext = ["ACT"]',
                                           r"unknown command 'PREX'"),
        'latency = "FAW"\nwindow = 4': ('latency = "FAW"\nwindow = 4\nsibling = true',
                                        r"window rule takes exactly one prev"),
        'latency = "RTP + RP"': ('latency = "RTP ** RP"', r"unsupported construct"),
    }
    for old, (new, msg) in cases.items():
        def fam_edit(f, old=old, new=new):
            assert old in f
            return f.replace(old, new, 1)
        p = _copy(tmp_path, fam_edit=fam_edit)
        with pytest.raises(NpusimError, match=msg):
            load_standard(p)


def test_unknown_name_lists_known_standards():
    with pytest.raises(NpusimError, match=r"unknown DRAM standard 'DDR9'.*DDR4-2400R_8Gb_x8"):
        load_standard("DDR9")


def test_dram_tomls_are_package_data():
    """configs/ installs as npusim.configs: the dram/ and dram/families/ globs must cover
    every shipped file."""
    import tomllib
    with open(Path(__file__).parents[1] / "pyproject.toml", "rb") as f:
        proj = tomllib.load(f)
    assert "npusim.dram" in proj["tool"]["setuptools"]["packages"]
    globs = proj["tool"]["setuptools"]["package-data"]["npusim.configs"]
    root = configs_dir()
    shipped = {p.relative_to(root) for p in (root / "dram").rglob("*.toml")}
    covered = {p.relative_to(root) for g in globs for p in root.glob(g)}
    assert len(shipped) >= 18 and shipped <= covered
    assert {p.stem for p in shipped} >= set(DDR4 + OTHERS + list(FAMILY_OF))
