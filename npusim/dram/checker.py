"""Independent DRAM command-log checker: every timing rule of a standard, plus bank state.

Written from the rule semantics in :mod:`npusim.dram.standard` only (it shares no code with
the DRAM kernel), so a kernel bug cannot hide itself here. It walks the log in order and
keeps, per node (channel, rank, bank group, bank) and per command, the last k issue cycles
(k = the largest window a rule needs), so each command costs O(rules with that next command)
and a 200k-command log takes about a second.

Log format (``LOG_COLUMNS``): one row per command, int columns cycle, channel, rank,
bankgroup, bank, row, column, command (index into ``COMMANDS``), in issue order, cycles in
DRAM command-clock cycles. Either a structured array with those field names or an int array
of shape (n, >= 8) with the columns in that order (extra columns are ignored; the kernel's
``State.cmd_log`` is field-major, pass ``cmd_log[:8, :n].T``). For PREA and REF the bank
group, bank, row and column are ignored.

Checks, each reported as one human-readable line:

* timing: for every rule whose ``next`` is the command, the bound from the most recent
  (window rules: the k-th most recent) ``prev`` at the target node, or at the other nodes
  under the same parent for sibling rules;
* bank state: ACT only to a closed bank; RD/WR/RDA/WRA only to an open bank whose open row
  is the command's row; RDA/WRA and PRE close the bank (PRE to a closed bank is legal, a
  no-op); PREA closes every bank of the rank; REF only when every bank of the rank is closed;
* log sanity: indices in range, cycles non-decreasing per channel, and (``command_bus``,
  default on) at most one command per channel per cycle;
* refresh (``check_refresh``, default off): no rank goes more than 9 x tREFI (8 postponed
  refreshes, JESD79-4) without a REF, counting from cycle 0 to the last command;
* wasted activates (``check_unused_activates``, default off): no row is closed (PRE, PREA)
  before a column command has used it since its ACT. Legal by JEDEC, but a controller that
  does it opened the row for a request and took it away again: work thrown away.

A log that starts mid-run (a trace window) passes the banks' open rows at its start as
``initial_open_rows`` ([channel, rank * bank groups * banks], -1 = closed); timing history
from before the log is unknown, so only rules between logged commands are checked.
"""

from __future__ import annotations

import numpy as np

from npusim.dram.standard import COMMANDS, LEVELS, RANK_WIDE, DramStandard
from npusim.errors import NpusimError
from npusim.kernels.names import ACT as _ACT
from npusim.kernels.names import PRE as _PRE
from npusim.kernels.names import PREA as _PREA
from npusim.kernels.names import RD as _RD
from npusim.kernels.names import RDA as _RDA
from npusim.kernels.names import REF as _REF
from npusim.kernels.names import WR as _WR
from npusim.kernels.names import WRA as _WRA

LOG_COLUMNS = ("cycle", "channel", "rank", "bankgroup", "bank", "row", "column", "command")
_CAS = (_RD, _WR, _RDA, _WRA)
_WIDE = tuple(COMMANDS.index(c) for c in RANK_WIDE)
_CH, _RK, _BG, _BK = range(4)
_ORD = {1: "", 2: "2nd ", 3: "3rd "}


# a trace's command log (npusim simulate --trace): the variable of each column
TRACE_COLUMNS = ("cycle", "channel", "rank", "bankgroup", "bank", "row", "column", "type")


def _as_rows(log) -> list[list[int]]:
    if hasattr(log, "data_vars"):  # a trace (xarray Dataset): its command_* variables
        missing = [c for c in TRACE_COLUMNS if f"command_{c}" not in log.data_vars]
        if missing:
            raise NpusimError("the dataset holds no DRAM command log (a trace of a run on "
                              "cycle-level DRAM has command_cycle, command_channel, ...)")
        log = np.stack([np.asarray(log[f"command_{c}"].values, dtype=np.int64)
                        for c in TRACE_COLUMNS], axis=1)
    if isinstance(log, np.ndarray) and log.dtype.names:
        missing = [c for c in LOG_COLUMNS if c not in log.dtype.names]
        if missing:
            raise NpusimError(f"command log is missing field(s) {', '.join(missing)}; "
                              f"expected {', '.join(LOG_COLUMNS)}")
        arr = np.stack([np.asarray(log[c], dtype=np.int64) for c in LOG_COLUMNS], axis=1)
    else:
        arr = np.asarray(log, dtype=np.int64)
        if arr.size == 0:
            return []
        if arr.ndim != 2 or arr.shape[1] < len(LOG_COLUMNS):
            raise NpusimError(f"command log must be (n, >= {len(LOG_COLUMNS)}) with columns "
                              f"{', '.join(LOG_COLUMNS)}; got shape {arr.shape}")
        arr = arr[:, :len(LOG_COLUMNS)]
    return arr.tolist()


def check_command_log(log, standard: DramStandard, channels: int, *, ranks: int | None = None,
                      command_bus: bool = True, check_refresh: bool = False,
                      check_unused_activates: bool = False, max_violations: int = 1000,
                      initial_open_rows=None) -> list[str]:
    """Violations of ``standard``'s rules and bank-state legality in ``log`` (empty = clean):
    rows of ``LOG_COLUMNS``, a structured array with those fields, or a trace (its
    ``command_*`` variables).

    ``channels`` is the number of npusim channels the log may address (HBM2 pseudo channels
    count separately); ``ranks`` defaults to the standard's.
    """
    R = standard.ranks if ranks is None else ranks
    G, B = standard.bank_groups, standard.banks_per_group
    NC = len(COMMANDS)
    if channels < 1 or R < 1:
        raise NpusimError(f"check_command_log needs channels >= 1 and ranks >= 1 "
                          f"(got {channels}, {R})")
    rows = _as_rows(log)

    # per next command: (level, prev, latency, window, sibling, text)
    checks: list[list[tuple]] = [[] for _ in range(NC)]
    keep = [[0] * NC for _ in LEVELS]      # history depth per (level, prev command)
    for r in standard.rules:
        checks[r.next].append((r.level, r.prev, r.latency, r.window, r.sibling, r.describe()))
        keep[r.level][r.prev] = max(keep[r.level][r.prev], r.window)
    n_nodes = (channels, channels * R, channels * R * G, channels * R * G * B)
    hist: list[list[list[int]]] = [[[] for _ in range(n * NC)] for n in n_nodes]
    open_row = [-1] * n_nodes[_BK]
    if initial_open_rows is not None:
        initial = np.asarray(initial_open_rows, dtype=np.int64)
        if initial.shape != (channels, R * G * B):
            raise NpusimError(f"initial_open_rows must have shape (channels, ranks x bank "
                              f"groups x banks) = {(channels, R * G * B)}; got {initial.shape}")
        open_row = initial.reshape(-1).tolist()
    used = [True] * n_nodes[_BK]           # the open row has had a column command
    last_cycle = [-1] * channels
    last_ref = [0] * n_nodes[_RK]
    refi_limit = 9 * standard.timing["REFI"]
    out: list[str] = []
    extra = 0

    def report(msg: str) -> None:
        nonlocal extra
        if len(out) < max_violations:
            out.append(msg)
        else:
            extra += 1

    def where(i, t, c, rk, g, b, cmd) -> str:
        if cmd in _WIDE:
            return f"#{i} cycle {t} ch{c} rank{rk} {COMMANDS[cmd]}"
        return f"#{i} cycle {t} ch{c} rank{rk} bg{g} bank{b} {COMMANDS[cmd]}"

    for i, (t, c, rk, g, b, row, col, cmd) in enumerate(rows):
        if not 0 <= cmd < NC:
            report(f"#{i} cycle {t}: unknown command index {cmd} (0..{NC - 1} = "
                   f"{', '.join(COMMANDS)})")
            continue
        wide = cmd in _WIDE
        if not (0 <= c < channels and 0 <= rk < R and (wide or (0 <= g < G and 0 <= b < B))):
            report(f"{where(i, t, c, rk, g, b, cmd)}: address out of range (channels {channels}, "
                   f"ranks {R}, bank groups {G}, banks per group {B})")
            continue
        here = where(i, t, c, rk, g, b, cmd)
        if t < last_cycle[c]:
            report(f"{here}: cycle goes backwards on channel {c} (previous command at "
                   f"cycle {last_cycle[c]})")
        elif command_bus and t == last_cycle[c]:
            report(f"{here}: second command on channel {c} in cycle {t} (one per cycle)")
        last_cycle[c] = max(last_cycle[c], t)

        rank_node = c * R + rk
        bg0 = rank_node * G                    # first bank group of the rank
        bg_node = bg0 + g
        bk_node = bg_node * B + b

        # ---- timing: every rule with this command as next
        for (lv, p, lat, w, sib, text) in checks[cmd]:
            if lv == _CH:
                sources = (c,)
            elif lv == _RK:
                sources = ([c * R + x for x in range(R) if x != rk] if sib else (rank_node,))
            elif lv == _BG:
                if wide:
                    sources = range(bg0, bg0 + G)
                else:
                    sources = ([bg0 + x for x in range(G) if x != g] if sib else (bg_node,))
            else:
                if wide:
                    sources = range(bg0 * B, (bg0 + G) * B)
                else:
                    sources = ([bg_node * B + x for x in range(B) if x != b] if sib
                               else (bk_node,))
            hl = hist[lv]
            for node in sources:
                h = hl[node * NC + p]
                if len(h) >= w:
                    tp = h[w - 1]
                    if t < tp + lat:
                        nth = _ORD.get(w, f"{w}th ") + "most recent " if w > 1 else ""
                        report(f"{here}: violates {text}: {nth}{COMMANDS[p]} at cycle {tp} "
                               f"({LEVELS[lv]} node {node}), earliest legal cycle {tp + lat}")

        # ---- rows closed unused
        if check_unused_activates and cmd in (_PRE, _PREA):
            banks = range(bg0 * B, (bg0 + G) * B) if cmd == _PREA else (bk_node,)
            unused = [k - bg0 * B for k in banks if open_row[k] >= 0 and not used[k]]
            if unused:
                report(f"{here}: closes row(s) opened and never accessed at "
                       f"{', '.join(f'bg{k // B} bank{k % B}' for k in unused)}")

        # ---- bank state
        if cmd == _ACT:
            used[bk_node] = False
            if open_row[bk_node] >= 0:
                report(f"{here} row {row}: bank already open (row {open_row[bk_node]})")
            open_row[bk_node] = row
        elif cmd in _CAS:
            used[bk_node] = True
            if open_row[bk_node] < 0:
                report(f"{here} row {row}: bank is closed")
            elif open_row[bk_node] != row:
                report(f"{here} row {row}: open row is {open_row[bk_node]}")
            if cmd == _RDA or cmd == _WRA:
                open_row[bk_node] = -1
        elif cmd == _PRE:
            open_row[bk_node] = -1
        elif cmd == _PREA or cmd == _REF:
            lo = bg0 * B
            if cmd == _REF:
                still = [k - lo for k in range(lo, lo + G * B) if open_row[k] >= 0]
                if still:
                    report(f"{here}: bank(s) {', '.join(f'bg{k // B} bank{k % B}' for k in still)}"
                           f" of the rank are open (REF needs all banks closed)")
                if check_refresh and t - last_ref[rank_node] > refi_limit:
                    report(f"{here}: {t - last_ref[rank_node]} cycles since the previous refresh "
                           f"of the rank (at most 9 x REFI = {refi_limit})")
                last_ref[rank_node] = t
            for k in range(lo, lo + G * B):
                open_row[k] = -1

        # ---- record this command where rules will look for it
        for lv in range(4):
            k = keep[lv][cmd]
            if not k:
                continue
            if lv == _CH:
                nodes = (c,)
            elif lv == _RK:
                nodes = (rank_node,)
            elif lv == _BG:
                nodes = range(bg0, bg0 + G) if wide else (bg_node,)
            else:
                nodes = range(bg0 * B, (bg0 + G) * B) if wide else (bk_node,)
            hl = hist[lv]
            for node in nodes:
                h = hl[node * NC + cmd]
                h.insert(0, t)
                if len(h) > k:
                    h.pop()

    if check_refresh and rows:
        end = max(last_cycle)
        for node, tr in enumerate(last_ref):
            if node // R < channels and end - tr > refi_limit:
                report(f"ch{node // R} rank{node % R}: no refresh between cycle {tr} and the "
                       f"end of the log at cycle {end} (at most 9 x REFI = {refi_limit})")
    if extra:
        out.append(f"... and {extra} more violation(s) not shown")
    return out
