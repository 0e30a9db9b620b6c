"""Every timing rule of every standard, enforced by the controller kernel to the cycle.

For each rule (prev -> next at some level), issue ``prev`` on a fresh DRAM and ask the
kernel when ``next`` may go to a bank the rule covers: one cycle earlier must be refused,
the exact cycle accepted. The expected cycle is worked out here from the rule list alone.
"""

from importlib import resources

import pytest

from dram_helpers import STANDARDS, bare_state, dram_config
from npusim.dram import load_standard
from npusim.dram.standard import COMMANDS, LEVELS
from npusim.dram.tables import memory_tables
from npusim.kernels.dram import PREA, REF, SPREAD_BANKS, SPREAD_GROUPS, _earliest, dram_issue

RANK_WIDE = (PREA, REF)
T0 = 1000


def _covers(rule, src, dst, rank_wide):
    """Does ``rule`` (issued at bank src) constrain commands to bank dst?"""
    level = LEVELS[rule.level]
    same = {"channel": True, "rank": src[0] == dst[0],
            "bankgroup": src[:2] == dst[:2], "bank": src == dst}
    parent = {"channel": True, "rank": True, "bankgroup": src[0] == dst[0],
              "bank": src[:2] == dst[:2]}
    if rank_wide and level in ("bankgroup", "bank"):
        return src[0] == dst[0]
    if rule.sibling:
        return parent[level] and not same[level]
    return same[level]


def _target(std, rule, ranks):
    """A bank the rule covers, as different from the issuing bank (0, 0, 0) as it allows."""
    level = LEVELS[rule.level]
    G, B = std.bank_groups, std.banks_per_group
    if rule.sibling:
        return {"rank": (1, 0, 0), "bankgroup": (0, 1, 0), "bank": (0, 0, 1)}[level]
    if level == "channel":
        return (1, 0, 0) if ranks > 1 else ((0, 1, 0) if G > 1 else (0, 0, 1 % B))
    if level == "rank":
        return (0, 1, 0) if G > 1 else (0, 0, 1 % B)
    if level == "bankgroup":
        return (0, 0, 1 % B)
    return (0, 0, 0)


def _cases():
    for name in STANDARDS:
        std = load_standard(name)
        for k, rule in enumerate(std.rules):
            if rule.window > 1:
                continue  # windowed rules: test_four_activate_window
            yield pytest.param(name, k, id=f"{name}-{rule.describe()}")


@pytest.mark.parametrize("name,k", list(_cases()))
def test_command_refused_one_cycle_early_and_accepted_on_time(name, k):
    std = load_standard(name)
    rule = std.rules[k]
    if rule.sibling and LEVELS[rule.level] == "bankgroup" and std.bank_groups < 2:
        pytest.skip("one bank group")
    if rule.sibling and LEVELS[rule.level] == "bank" and std.banks_per_group < 2:
        pytest.skip("one bank per group")
    _check_rule(name, k)


def _check_rule(name, k):
    """Issue rule k's prev command, then its next command to a bank the rule covers must be
    refused one cycle before the latest bound of every rule covering that bank, accepted at
    it."""
    std = load_standard(name)
    rule = std.rules[k]
    ranks = 2 if rule.sibling and LEVELS[rule.level] == "rank" else std.ranks
    cfg = dram_config(name, f"memory.ranks={ranks}", "memory.controller.refresh=false")
    chip, mt, p = bare_state(cfg)
    st = chip.mem
    src = (0, 0, 0)
    dst = _target(std, rule, ranks)
    prev_wide = rule.prev in RANK_WIDE
    dram_issue(st, mt, p, 0, *src, 5, 0, rule.prev, T0, -1, -1)
    # what the rules say: the latest bound of every rule from prev to next covering dst
    next_wide = rule.next in RANK_WIDE
    bound = 0
    for r in std.rules:
        if r.prev != rule.prev or r.next != rule.next or r.window > 1:
            continue
        if next_wide:  # a rank-wide command waits for every bank of its rank
            hit = any(_covers(r, src, (dst[0], g, b), prev_wide)
                      for g in range(std.bank_groups) for b in range(std.banks_per_group))
        else:
            hit = _covers(r, src, dst, prev_wide)
        if hit:
            bound = max(bound, r.latency)
    assert bound >= rule.latency
    earliest = _earliest(st, p, 0, dst[0], dst[1], dst[2], rule.next)
    # refused one cycle before the bound, accepted exactly at it
    assert not earliest <= T0 + bound - 1
    assert earliest <= T0 + bound


SIBLING_RULES = """
[[rule]]
level = "bankgroup"
sibling = true
prev = ["RD"]
next = ["WR", "WRA"]
latency = "CCD_L + 40"
note = "test only: the other bank groups of the rank wait longer than the own group"

[[rule]]
level = "bank"
sibling = true
prev = ["ACT"]
next = ["ACT"]
latency = "3"
note = "test only: the other banks of the group"
"""


def test_rules_that_reach_only_other_groups_or_banks(tmp_path):
    """No bundled standard has a rule that reaches the other bank groups of a rank further
    than the command's own group, or only the other banks of its group; the engine keeps
    those apart from the rank-wide bounds (``npusim.dram.tables._delay_tables``). A DDR4 variant
    with one of each: every one of its rules holds to the cycle, the added ones included."""
    base = resources.files("npusim.configs") / "dram"
    (tmp_path / "families").mkdir()
    family = (base / "families" / "DDR4.toml").read_text().replace(
        'family = "DDR4"', 'family = "DDR4SIB"')
    (tmp_path / "families" / "DDR4SIB.toml").write_text(family + SIBLING_RULES)
    speed_bin = (base / "DDR4-2400R_8Gb_x8.toml").read_text()
    speed_bin = speed_bin.replace('name = "DDR4-2400R_8Gb_x8"', 'name = "DDR4SIB-2400"')
    speed_bin = speed_bin.replace('family = "DDR4"', 'family = "DDR4SIB"')
    path = tmp_path / "DDR4SIB-2400.toml"
    path.write_text(speed_bin)
    std = load_standard(path)
    spread = memory_tables(dram_config(str(path))).spread
    assert spread[COMMANDS.index("RD")] & SPREAD_GROUPS
    assert spread[COMMANDS.index("ACT")] & SPREAD_BANKS
    for k, rule in enumerate(std.rules):
        if rule.window == 1:
            _check_rule(str(path), k)


@pytest.mark.parametrize("name", [n for n in STANDARDS
                                  if any(r.window > 1 for r in load_standard(n).rules)])
def test_four_activate_window(name):
    std = load_standard(name)
    faw = [r for r in std.rules if r.window > 1]
    cfg = dram_config(name, "memory.controller.refresh=false")
    chip, mt, p = bare_state(cfg)
    st = chip.mem
    act = COMMANDS.index("ACT")
    G, B = std.bank_groups, std.banks_per_group
    banks = [(0, i % G, (i // G) % B) for i in range(5)]
    t = T0
    issued = []
    for bank in banks[:4]:
        t = max(t, _earliest(st, p, 0, *bank, act))
        dram_issue(st, mt, p, 0, *bank, 1, 0, act, t, -1, -1)
        issued.append(t)
    e = _earliest(st, p, 0, *banks[4], act)
    for rule in faw:
        assert e >= issued[-rule.window] + rule.latency
    assert e == max(issued[-r.window] + r.latency for r in faw) or e == issued[-1] + max(
        r.latency for r in std.rules if COMMANDS[r.prev] == "ACT" and COMMANDS[r.next] == "ACT"
        and r.window == 1)


@pytest.mark.parametrize("name,prev,nxt,same,timing", [
    ("DDR4-2400R_8Gb_x8", "ACT", "RD", "bank", "RCD"),
    ("DDR4-2400R_8Gb_x8", "PRE", "ACT", "bank", "RP"),
    ("DDR4-2400R_8Gb_x8", "ACT", "PRE", "bank", "RAS"),
    ("DDR4-2400R_8Gb_x8", "ACT", "ACT", "bank", "RC"),
    ("DDR4-2400R_8Gb_x8", "RD", "PRE", "bank", "RTP"),
    ("DDR4-2400R_8Gb_x8", "RD", "RD", "bankgroup", "CCD_L"),
    ("DDR4-2400R_8Gb_x8", "RD", "RD", "rank", "CCD_S"),
    ("DDR4-2400R_8Gb_x8", "ACT", "ACT", "bankgroup", "RRD_L"),
    ("DDR4-2400R_8Gb_x8", "ACT", "ACT", "rank", "RRD_S"),
    ("DDR4-2400R_8Gb_x8", "REF", "ACT", "bank", "RFC"),
    ("HBM2-2400_8Gb_x128", "ACT", "RD", "bank", "RCD"),
    ("LPDDR4-3200_8Gb_x16", "PRE", "ACT", "bank", "RP"),
])
def test_jedec_values_by_name(name, prev, nxt, same, timing):
    """Hand-picked constraints: the wait equals the named JEDEC parameter of the file."""
    std = load_standard(name)
    cfg = dram_config(name, "memory.controller.refresh=false")
    chip, mt, p = bare_state(cfg)
    st = chip.mem
    dst = {"bank": (0, 0, 0), "bankgroup": (0, 0, 1), "rank": (0, 1 % std.bank_groups, 0)}[same]
    dram_issue(st, mt, p, 0, 0, 0, 0, 5, 0, COMMANDS.index(prev), T0, -1, -1)
    assert _earliest(st, p, 0, *dst, COMMANDS.index(nxt)) == T0 + std.timing[timing]
