"""Cycle-level DRAM: one generic controller per channel, every standard from tables.

The standard (``npusim.dram``) arrives as timing rules (prev command, next command, level,
latency, window, sibling). Issuing a command pushes forward the earliest cycle of each
``next`` command at the nodes the rules reach; a command is legal when the current cycle
has reached those bounds. Bounds are kept per rank (``rdy_rank``: what every bank group
of the rank must wait, channel and rank rules), per bank group (``rdy_group``) and per bank
(``rdy_bank``), and ``npusim.dram.tables`` compiles the rules into dense delays by relation
to the command's target (``mt.delay_rank``: its rank, another rank; ``mt.delay_group``: its
group, and what reaches the other groups of the rank further than the rank's row;
``mt.delay_bank``: its bank, another bank of the group). Issuing is then a max of eight
delays per rank, for the target group and bank, and for other groups or banks only when a
rule reaches them (``mt.spread``); only windowed rules (tFAW) are walked one by one. Bank
state is the open row.

The controller of each channel keeps a read and a write queue, drains writes between a
high and a low watermark, refreshes every rank every tREFI (all-bank refresh, preceded by
a precharge-all), and schedules FR-FCFS: the oldest request whose next command is a legal
row hit, else the oldest request with any legal next command. A row opened for a request
stays open until that request is served: no PRE or refresh PREA closes it before, and the
request stays eligible while the other queue drains or its rank waits for a refresh (an
ACT undone before its column access is work thrown away; Ramulator's controller keeps such
requests in its "active buffer" for the same reason). Open page by default; closed page
uses auto-precharge reads and writes. One command per channel per cycle.

A channel with nothing legal to issue reports the first cycle at which something becomes
legal (``DC_WAKE``), so the main loop skips straight there. One scan finds both that cycle
and the request FR-FCFS will pick then; the choice is kept (``DC_CAND_*``) until something
it depends on changes (a command issues, the drain mode flips, a refresh falls due, the
response ring frees up), and a request arriving meanwhile is weighed against it alone. So
a channel scans about once per command, however often it is woken.

The scan is over banks, not requests. A queue is a set of request slots (``dreq``) with an
arrival number for age; each bank keeps its requests of each queue in an age-ordered list
with the oldest row hit and the oldest non-hit at hand (``dqb``), and the banks with
requests are listed (``dact``). All row hits of a bank need the same command at the same
cycle, and so do all its non-hits, so only those two can be the bank's pick. Each bank
keeps its picks' own timing bound and age at hand (``dpick``, refreshed whenever a pick, the
open row or the bank's bounds change), so with open page the scan is a few branch-free
minima over contiguous per-bank arrays, which the compiler turns into vector code instead
of a visit per bank with data-dependent branches.
"""

from . import isa
from .addrmap import dram_decode
from .jit import kernel
from .names import ACT, COMMANDS, LV_BANK, LV_BANKGROUP, LV_RANK, PRE, PREA, RD, RDA, REF, WR, WRA
from .ports import channel_bell, channel_heard, ch_in_pop, ch_out_push, ch_out_room, heard
from .ring import ring_next, unsigned
from .state import *  # noqa: F403  (field indices of the state tables)
from .trace import (trace_dram_command, trace_in_log_window, trace_queues, trace_request_class,
                    trace_request_done)

N_COMMANDS = len(COMMANDS)
# request classes (B_HITS, B_MISSES, B_CONFLICTS)
CLASS_HIT, CLASS_MISS, CLASS_CONFLICT = range(3)


@kernel(inline=True)
def _bank_earliest(st, ch, rank, rbg, nb, cmd):
    """First cycle at which ``cmd`` may issue to bank nb of bank group rbg of ``rank``."""
    return max(st.rdy_rank[ch, rank, cmd], st.rdy_group[ch, rbg, cmd], st.rdy_bank[ch, nb, cmd])


@kernel(out_of_line=True)  # inlined, the loop ran slower (jit.py)
def _rank_earliest(st, p, ch, rank, cmd):
    """First cycle at which the rank-wide ``cmd`` (PREA, REF) may issue to ``rank``."""
    e = st.rdy_rank[ch, rank, cmd]
    for rbg in range(rank * p.d_bankgroups, (rank + 1) * p.d_bankgroups):
        e = max(e, st.rdy_group[ch, rbg, cmd])
        for nb in range(rbg * p.d_banks, (rbg + 1) * p.d_banks):
            e = max(e, st.rdy_bank[ch, nb, cmd])
    return e


@kernel
def _earliest(st, p, ch, rank, bg, bank, cmd):
    """First cycle at which ``cmd`` may issue to this bank (rank-wide for PREA/REF)."""
    if cmd == PREA or cmd == REF:
        return _rank_earliest(st, p, ch, rank, cmd)
    rbg = rank * p.d_bankgroups + bg
    return _bank_earliest(st, ch, rank, rbg, rbg * p.d_banks + bank, cmd)


@kernel(inline=True)
def _delay_row(bounds, row, delays, cmd, rel, cyc):
    """bounds[row, :] = max(bounds[row, :], cyc + delays[cmd, rel, :]) for every next
    command (a fixed trip count: LLVM unrolls it)."""
    for nxt in range(N_COMMANDS):
        bounds[row, nxt] = max(bounds[row, nxt], cyc + delays[cmd, rel, nxt])


@kernel(inline=True)
def _group_relation(r, g, rank, rbg, rank_wide):
    """How bank group g of rank r stands to group rbg of ``rank``, which a command went to
    (REL_*; a rank-wide command went to every group of its rank)."""
    if r != rank:
        return REL_OTHER_RANK
    return REL_SAME_GROUP if rank_wide or g == rbg else REL_SAME_RANK


@kernel(inline=True)
def _apply_rules(st, mt, p, ch, rank, bg, bank, cmd, cyc):
    """Timing consequences of ``cmd`` issued at ``cyc``: each rank's bounds move by its row
    of delays (mt.delay_rank), the target bank group's and bank's by theirs (mt.delay_group,
    mt.delay_bank), the other groups and banks only where rules reach them further
    (mt.spread), then the windowed rules. Returns whether bank-level bounds of other banks
    moved (rank-wide commands, sibling rules)."""
    G = p.d_bankgroups
    B = p.d_banks
    rank_wide = cmd == PREA or cmd == REF
    rbg = rank * G + bg
    for r in range(p.d_ranks):
        _delay_row(st.rdy_rank[ch], r, mt.delay_rank, cmd,
                   RANK_OWN if r == rank else RANK_OTHER, cyc)
    if not rank_wide:
        _delay_row(st.rdy_group[ch], rbg, mt.delay_group, cmd, REL_SAME_GROUP, cyc)
        if mt.spread[cmd] & SPREAD_GROUPS:
            for g in range(rank * G, (rank + 1) * G):
                if g != rbg:
                    _delay_row(st.rdy_group[ch], g, mt.delay_group, cmd, REL_SAME_RANK, cyc)
    others = rank_wide
    if rank_wide:
        for nb in range(rank * G * B, (rank + 1) * G * B):
            _delay_row(st.rdy_bank[ch], nb, mt.delay_bank, cmd, REL_SAME_BANK, cyc)
    else:
        _delay_row(st.rdy_bank[ch], rbg * B + bank, mt.delay_bank, cmd, REL_SAME_BANK, cyc)
        others = mt.spread[cmd] & SPREAD_BANKS != 0
        if others:  # sibling rules
            for nb in range(rbg * B, (rbg + 1) * B):
                if nb != rbg * B + bank:
                    _delay_row(st.rdy_bank[ch], nb, mt.delay_bank, cmd, REL_OTHER_BANK, cyc)
    for w in range(mt.window_start[cmd], mt.window_start[cmd + 1]):
        # measured from the window-th most recent command at the node
        level = mt.windows[w, W_LEVEL]
        node = rank if level == LV_RANK else (rbg if level == LV_BANKGROUP else 0)
        if level == LV_BANK:
            node = rbg * B + bank
        size = mt.windows[w, W_SIZE]
        pos = st.win_ctl[0, ch, w, node]
        st.win[ch, w, node, pos] = cyc
        st.win_ctl[0, ch, w, node] = ring_next(pos, size)
        st.win_ctl[1, ch, w, node] = min(size, st.win_ctl[1, ch, w, node] + 1)
        if st.win_ctl[1, ch, w, node] < size:
            continue
        when = st.win[ch, w, node, ring_next(pos, size)] + mt.windows[w, W_LAT]
        nxt = mt.windows[w, W_NEXT]
        rels = mt.windows[w, W_RELS]
        if level != LV_BANK:
            for r in range(p.d_ranks):
                for g in range(r * G, (r + 1) * G):
                    if (rels >> _group_relation(r, g, rank, rbg, rank_wide)) & 1:
                        st.rdy_group[ch, g, nxt] = max(st.rdy_group[ch, g, nxt], when)
        else:
            first = rank * G * B if rank_wide else rbg * B
            for nb in range(first, first + (G * B if rank_wide else B)):
                rel = REL_SAME_BANK if rank_wide or nb == rbg * B + bank else REL_OTHER_BANK
                if (rels >> rel) & 1:
                    st.rdy_bank[ch, nb, nxt] = max(st.rdy_bank[ch, nb, nxt], when)
    return others


@kernel
def _oldest_after(st, ch, k, open_row, hit):
    """The first request from slot k on (in its bank's list) that is a row hit (``hit``) or
    is not, -1 if none."""
    while k >= 0 and (st.dreq[ch, k, E_ROW] == open_row) != hit:
        k = st.dreq[ch, k, E_NEXT]
    return k


@kernel
def _bank_pick(st, ch, side, nb):
    """Bank nb's own bound on the commands its oldest hit and oldest non-hit in queue
    ``side`` need next (open page; isa.NEVER where there is none). Called whenever one of
    them, the open row or the bank's timing bounds change."""
    hit_cmd = WR if side == 1 else RD
    other_cmd = ACT if st.dbank[B_OPEN_ROW, ch, nb] < 0 else PRE
    kh = st.dqb[QB_OLDEST_HIT, ch, side, nb]
    ko = st.dqb[QB_OLDEST_OTHER, ch, side, nb]
    st.dpick[PK_AT_HIT, ch, side, nb] = st.rdy_bank[ch, nb, hit_cmd] if kh >= 0 else isa.NEVER
    st.dpick[PK_AGE_HIT, ch, side, nb] = (
        (st.dreq[ch, kh, E_SEQ] << PK_BANK_BITS) | nb if kh >= 0 else isa.NEVER)
    st.dpick[PK_AT_OTHER, ch, side, nb] = st.rdy_bank[ch, nb, other_cmd] if ko >= 0 else isa.NEVER
    st.dpick[PK_AGE_OTHER, ch, side, nb] = (
        (st.dreq[ch, ko, E_SEQ] << PK_BANK_BITS) | nb if ko >= 0 else isa.NEVER)


@kernel
def _bank_row_changed(st, ch, nb):
    """Bank nb opened or closed a row: find, in both queues, its oldest hit and non-hit."""
    open_row = st.dbank[B_OPEN_ROW, ch, nb]
    for side in range(2):
        head = st.dqb[QB_HEAD, ch, side, nb]
        st.dqb[QB_OLDEST_HIT, ch, side, nb] = _oldest_after(st, ch, head, open_row, True)
        st.dqb[QB_OLDEST_OTHER, ch, side, nb] = _oldest_after(st, ch, head, open_row, False)


@kernel
def _bank_append(st, ch, side, nb, k):
    """Request slot k joins the youngest end of bank nb's list in queue ``side``."""
    tail = st.dqb[QB_TAIL, ch, side, nb]
    st.dreq[ch, k, E_PREV] = tail
    st.dreq[ch, k, E_NEXT] = -1
    if tail >= 0:
        st.dreq[ch, tail, E_NEXT] = k
    else:
        st.dqb[QB_HEAD, ch, side, nb] = k
    st.dqb[QB_TAIL, ch, side, nb] = k
    kind = QB_OLDEST_HIT if st.dreq[ch, k, E_ROW] == st.dbank[B_OPEN_ROW, ch, nb] else QB_OLDEST_OTHER
    if st.dqb[kind, ch, side, nb] < 0:
        st.dqb[kind, ch, side, nb] = k
        _bank_pick(st, ch, side, nb)
    if tail < 0:  # the bank becomes active in this queue
        i = st.dch[DC_ACTIVE_R + side, ch]
        st.dact[ch, side, i] = nb
        st.dqb[QB_POS, ch, side, nb] = i
        st.dch[DC_ACTIVE_R + side, ch] = i + 1


@kernel
def _bank_unlink(st, ch, side, nb, k):
    """Request slot k leaves bank nb's list in queue ``side``."""
    prev = st.dreq[ch, k, E_PREV]
    nxt = st.dreq[ch, k, E_NEXT]
    if prev >= 0:
        st.dreq[ch, prev, E_NEXT] = nxt
    else:
        st.dqb[QB_HEAD, ch, side, nb] = nxt
    if nxt >= 0:
        st.dreq[ch, nxt, E_PREV] = prev
    else:
        st.dqb[QB_TAIL, ch, side, nb] = prev
    # the next oldest of its kind is younger than k
    open_row = st.dbank[B_OPEN_ROW, ch, nb]
    if st.dqb[QB_OLDEST_HIT, ch, side, nb] == k:
        st.dqb[QB_OLDEST_HIT, ch, side, nb] = _oldest_after(st, ch, nxt, open_row, True)
        _bank_pick(st, ch, side, nb)
    elif st.dqb[QB_OLDEST_OTHER, ch, side, nb] == k:
        st.dqb[QB_OLDEST_OTHER, ch, side, nb] = _oldest_after(st, ch, nxt, open_row, False)
        _bank_pick(st, ch, side, nb)
    if prev < 0 and nxt < 0:  # the bank's last request: the last active bank takes its place
        last = st.dch[DC_ACTIVE_R + side, ch] - 1
        i = st.dqb[QB_POS, ch, side, nb]
        moved = st.dact[ch, side, last]
        st.dact[ch, side, i] = moved
        st.dqb[QB_POS, ch, side, moved] = i
        st.dch[DC_ACTIVE_R + side, ch] = last


@kernel(inline=True)
def _bank_state_time(st, p, ch, rank, nb, cmd, cyc):
    """Keep the time the rank has at least one bank active (DRAM background energy), as
    DRAMPower counts it: a bank is active from its ACT until its PRE, the PREA that closes
    it, the auto-precharge of an RDA / WRA (at the later of its tRAS and the RD->PRE /
    WR->PRE time), and every bank of a rank from a REF until tRFC later. Kept at command
    issue from closes already known, so it costs a few adds per command, none per cycle;
    ``npusim.energy.dram.rank_active_cycles`` finishes the sum at the end of the run."""
    mark = st.drank[RK_ACTIVE_MARK, ch, rank]
    if st.drank[RK_OPEN_BANKS, ch, rank] > 0:
        st.drank[RK_ACTIVE_CYCLES, ch, rank] += cyc - mark
    else:
        st.drank[RK_ACTIVE_CYCLES, ch, rank] += max(
            0, min(cyc, st.drank[RK_ACTIVE_UNTIL, ch, rank]) - mark)
    st.drank[RK_ACTIVE_MARK, ch, rank] = cyc
    if cmd == ACT:
        st.drank[RK_OPEN_BANKS, ch, rank] += 1
        st.dbank[B_ACT_CYCLE, ch, nb] = cyc
    elif cmd == PRE:
        st.drank[RK_OPEN_BANKS, ch, rank] -= 1
        st.dch[DC_BANK_CLOSES, ch] += 1
    elif cmd == PREA:
        st.dch[DC_BANK_CLOSES, ch] += st.drank[RK_OPEN_BANKS, ch, rank]
        st.drank[RK_OPEN_BANKS, ch, rank] = 0
    elif cmd == REF:
        st.drank[RK_ACTIVE_UNTIL, ch, rank] = max(st.drank[RK_ACTIVE_UNTIL, ch, rank],
                                                  cyc + p.d_rfc)
    elif cmd == RDA or cmd == WRA:
        close = cyc + (p.d_close_rd if cmd == RDA else p.d_close_wr)
        close = max(close, st.dbank[B_ACT_CYCLE, ch, nb] + p.d_ras)
        st.dbank[B_AUTO_CLOSE, ch, nb] = close
        st.drank[RK_OPEN_BANKS, ch, rank] -= 1
        st.drank[RK_ACTIVE_UNTIL, ch, rank] = max(st.drank[RK_ACTIVE_UNTIL, ch, rank], close)
        st.dch[DC_BANK_CLOSES, ch] += 1


@kernel(inline=True)
def dram_issue(st, mt, p, ch, rank, bg, bank, row, col, cmd, cyc, core, entry):
    """Issue ``cmd`` now: bank state, timing bounds, statistics and the command log."""
    G = p.d_bankgroups
    B = p.d_banks
    nb = (rank * G + bg) * B + bank
    _bank_state_time(st, p, ch, rank, nb, cmd, cyc)
    if cmd == ACT:
        st.dbank[B_OPEN_ROW, ch, nb] = row
        _bank_row_changed(st, ch, nb)
        st.dch[DC_ACTS, ch] += 1
    elif cmd == PRE or cmd == RDA or cmd == WRA:
        st.dbank[B_OPEN_ROW, ch, nb] = -1
        _opened_served(st, ch, nb)
        _bank_row_changed(st, ch, nb)
        if cmd == PRE:
            st.dch[DC_PRES, ch] += 1
    elif cmd == PREA:
        for i in range(rank * G * B, (rank + 1) * G * B):
            st.dbank[B_OPEN_ROW, ch, i] = -1
            _opened_served(st, ch, i)
            _bank_row_changed(st, ch, i)
        st.dch[DC_PRES, ch] += 1
    elif cmd == REF:
        st.dch[DC_REFS, ch] += 1
    if cmd == RD or cmd == RDA or cmd == WR or cmd == WRA:
        st.dch[DC_BUS_BUSY, ch] += p.d_bl
        st.dch[DC_RD_CMDS + cmd - RD, ch] += 1  # RD, WR, RDA, WRA in command order
    # the picks of every bank whose row or bounds moved
    if _apply_rules(st, mt, p, ch, rank, bg, bank, cmd, cyc):
        for i in range(rank * G * B, (rank + 1) * G * B):
            for side in range(2):
                _bank_pick(st, ch, side, i)
    else:
        for side in range(2):
            _bank_pick(st, ch, side, nb)
    st.dch[DC_CMDS, ch] += 1
    trace_dram_command(st, p, ch, rank, nb, cmd, cyc)
    if not trace_in_log_window(p, cyc):
        return
    n = st.ctl[MC_LOG_N]
    if n < st.cmd_log.shape[1]:
        st.cmd_log[LG_CYCLE, n] = cyc
        st.cmd_log[LG_CHANNEL, n] = ch
        st.cmd_log[LG_RANK, n] = rank
        st.cmd_log[LG_BANKGROUP, n] = bg
        st.cmd_log[LG_BANK, n] = bank
        st.cmd_log[LG_ROW, n] = row
        st.cmd_log[LG_COLUMN, n] = col
        st.cmd_log[LG_COMMAND, n] = cmd
        st.cmd_log[LG_CORE, n] = core
        st.cmd_log[LG_REQUEST, n] = entry
        st.ctl[MC_LOG_N] = n + 1
    elif st.cmd_log.shape[1] > 0:
        st.ctl[MC_LOG_LOST] += 1


@kernel(inline=True)
def _command_for(p, write, hit, open_row, bursts, out_full):
    """The command a request needs next: on a row hit a column command (with auto-precharge
    on its last burst under closed page), else ACT to a closed bank or PRE. -1 when it may
    not go now: its last burst's response would find the response ring full."""
    if hit:
        if (out_full or p.d_closed_page == 1) and bursts == 1:
            if out_full:
                return -1
            return WRA if write else RDA
        return WR if write else RD
    return ACT if open_row < 0 else PRE


@kernel(inline=True)
def _accept(st, rg, mt, p, ch, t):
    """Move arrived requests from the channel's input ring into the controller queues."""
    while rg.mport[MP_IN_COUNT, ch] > 0:
        h = rg.mport[MP_IN_HEAD, ch]
        if rg.ch_in[P_TIME, ch, h] > t:
            break
        write = rg.ch_in[P_DIR, ch, h] == 1
        count = st.dch[DC_WQ_COUNT if write else DC_RQ_COUNT, ch]
        if count >= (p.d_wq if write else p.d_rq):
            break  # head-of-line: the queue it needs is full
        side = 1 if write else 0
        k = st.dfree[ch, side, (p.d_wq if write else p.d_rq) - count - 1]
        addr = rg.ch_in[P_ADDR, ch, h]
        rank, bg, bank, row, col = dram_decode(addr, p, mt)
        st.dreq[ch, k, E_TIME] = t
        st.dreq[ch, k, E_CORE] = rg.ch_in[P_CORE, ch, h]
        st.dreq[ch, k, E_DIR] = rg.ch_in[P_DIR, ch, h]
        st.dreq[ch, k, E_ENTRY] = rg.ch_in[P_ENTRY, ch, h]
        st.dreq[ch, k, E_SENT] = rg.ch_in[P_SENT, ch, h]
        st.dreq[ch, k, E_RANK] = rank
        st.dreq[ch, k, E_RBG] = rank * p.d_bankgroups + bg
        st.dreq[ch, k, E_NB] = (rank * p.d_bankgroups + bg) * p.d_banks + bank
        st.dreq[ch, k, E_ROW] = row
        st.dreq[ch, k, E_COL] = col
        st.dreq[ch, k, E_BURSTS] = p.d_bursts
        st.dreq[ch, k, E_CLASS] = -1
        st.dreq[ch, k, E_SEQ] = st.dch[DC_SEQ, ch]
        st.dch[DC_SEQ, ch] += 1
        _bank_append(st, ch, side, st.dreq[ch, k, E_NB], k)
        st.dch[DC_WQ_COUNT if write else DC_RQ_COUNT, ch] = count + 1
        draining = st.dch[DC_DRAINING, ch]
        _update_drain(st, p, ch)
        if st.dch[DC_DRAINING, ch] != draining:
            st.dch[DC_CAND_VALID, ch] = 0
        elif write == (draining == 1):
            _weigh_newcomer(st, rg, p, ch, k, t // p.mem_period)
        ch_in_pop(rg, p, ch, t)


@kernel
def _retire(st, p, ch, k, write):
    """Remove request slot k from its queue and give the slot back."""
    side = 1 if write else 0
    nb = st.dreq[ch, k, E_NB]
    if st.dbank[B_OPENED_FOR, ch, nb] == k + 1:
        _opened_served(st, ch, nb)
    _bank_unlink(st, ch, side, nb, k)
    n = st.dch[DC_WQ_COUNT if write else DC_RQ_COUNT, ch]
    st.dfree[ch, side, (p.d_wq if write else p.d_rq) - n] = k
    st.dch[DC_WQ_COUNT if write else DC_RQ_COUNT, ch] = n - 1


@kernel
def _respond(st, rg, p, ch, k, done_cycle):
    """Queue the response of request k (data or write acknowledgement) for the NoC."""
    ch_out_push(rg, p, ch, done_cycle * p.mem_period, st.dreq[ch, k, E_CORE],
                st.dreq[ch, k, E_DIR], st.dreq[ch, k, E_ENTRY], st.dreq[ch, k, E_SENT])


@kernel(inline=True)
def _refresh(st, mt, p, ch, cyc):
    """Refresh duty: returns (issued a command, first cycle a refresh command is legal)."""
    nxt = isa.NEVER
    for r in range(p.d_ranks):
        if st.drank[RK_PENDING, ch, r] == 0:
            if cyc >= st.drank[RK_NEXT_REF, ch, r]:
                st.drank[RK_PENDING, ch, r] = 1
                st.dch[DC_CAND_VALID, ch] = 0  # its requests wait for the refresh
            else:
                nxt = min(nxt, st.drank[RK_NEXT_REF, ch, r])
                continue
        any_open = False
        opened = False
        G = p.d_bankgroups
        B = p.d_banks
        for i in range(r * G * B, (r + 1) * G * B):
            any_open = any_open or st.dbank[B_OPEN_ROW, ch, i] >= 0
            opened = opened or st.dbank[B_OPENED_FOR, ch, i] > 0
        if opened:
            # rows opened for requests are served first (_choose_opened); look again after
            nxt = min(nxt, cyc + 1)
            continue
        cmd = PREA if any_open else REF
        e = _earliest(st, p, ch, r, 0, 0, cmd)
        if e <= cyc:
            dram_issue(st, mt, p, ch, r, 0, 0, -1, -1, cmd, cyc, -1, -1)
            st.dch[DC_CAND_VALID, ch] = 0  # banks closed, timing bounds moved
            if cmd == REF:
                st.drank[RK_PENDING, ch, r] = 0
                st.drank[RK_NEXT_REF, ch, r] += p.d_refi
            return True, cyc + 1
        nxt = min(nxt, e)
    return False, nxt


@kernel
def _drain_mode(draining, rq, wq, p):
    """Write draining with hysteresis: start at the high watermark (or when there is
    nothing to read), stop at the low one once reads are waiting (or when empty)."""
    if draining == 1:
        if wq == 0 or (wq <= p.d_wq_low and rq > 0):
            return 0
        return 1
    if wq >= p.d_wq_high or (rq == 0 and wq > 0):
        return 1
    return 0


@kernel
def _update_drain(st, p, ch):
    """Re-decide the drain mode; called whenever a queue count changes, so the mode is a
    function of the sequence of arrivals and departures, not of when the controller looks."""
    st.dch[DC_DRAINING, ch] = _drain_mode(st.dch[DC_DRAINING, ch], st.dch[DC_RQ_COUNT, ch],
                                          st.dch[DC_WQ_COUNT, ch], p)


@kernel
def _candidate(st, p, ch, k, cyc, out_full):
    """(command, first legal cycle >= cyc, is a column command) of request k, or command -1
    when it cannot be chosen now (its rank is refreshing, or its last burst's response
    would find the response ring full)."""
    rank = st.dreq[ch, k, E_RANK]
    nb = st.dreq[ch, k, E_NB]
    if st.drank[RK_PENDING, ch, rank] == 1:
        return -1, isa.NEVER, False
    open_row = st.dbank[B_OPEN_ROW, ch, nb]
    hit = st.dreq[ch, k, E_ROW] == open_row
    cmd = _command_for(p, st.dreq[ch, k, E_DIR] == 1, hit, open_row, st.dreq[ch, k, E_BURSTS],
                       out_full)
    if cmd < 0 or (cmd == PRE and st.dbank[B_OPENED_FOR, ch, nb] > 0):
        return -1, isa.NEVER, False
    return cmd, max(_bank_earliest(st, ch, rank, st.dreq[ch, k, E_RBG], nb, cmd), cyc), hit


@kernel(inline=True)
def _choose_by_picks(st, p, ch, cyc, side):
    """FR-FCFS over each bank's oldest hit and oldest non-hit (open page, room for
    responses). A pick is legal at the later of its bank's own bound (``dpick``) and its
    bank group's (``rdy_group``, spread over the banks in ``dgroup`` first), so the scan is
    three minima over the banks, without branches: the first cycle any pick is legal,
    whether a row hit is legal then, and the oldest pick of that kind legal then (its age
    key names its bank)."""
    col = WR if side == 1 else RD
    G = p.d_bankgroups
    B = p.d_banks
    # each bank's group bound on the commands a pick may need (isa.NEVER while its rank
    # waits for a refresh), spread over the banks so the minima below run over them flat
    for r in range(p.d_ranks):
        waits = st.drank[RK_PENDING, ch, r] == 1
        r_col = st.rdy_rank[ch, r, col]
        r_act = st.rdy_rank[ch, r, ACT]
        r_pre = st.rdy_rank[ch, r, PRE]
        for g in range(r * G, (r + 1) * G):
            g_col = isa.NEVER if waits else max(r_col, st.rdy_group[ch, g, col])
            g_act = isa.NEVER if waits else max(r_act, st.rdy_group[ch, g, ACT])
            g_pre = isa.NEVER if waits else max(r_pre, st.rdy_group[ch, g, PRE])
            for nb in range(unsigned(g * B), unsigned((g + 1) * B)):
                st.dgroup[GB_COLUMN, ch, nb] = g_col
                # no PRE closes a row before the request it was opened for is served
                pre = isa.NEVER if st.dbank[B_OPENED_FOR, ch, nb] > 0 else g_pre
                st.dgroup[GB_OTHER, ch, nb] = g_act if st.dbank[B_OPEN_ROW, ch, nb] < 0 else pre
    n_banks = st.dpick.shape[3]
    first_hit = isa.NEVER
    first_other = isa.NEVER
    for nb in range(n_banks):
        first_hit = min(first_hit, max(st.dpick[PK_AT_HIT, ch, side, nb],
                                       st.dgroup[GB_COLUMN, ch, nb]))
        first_other = min(first_other, max(st.dpick[PK_AT_OTHER, ch, side, nb],
                                           st.dgroup[GB_OTHER, ch, nb]))
    at = max(min(first_hit, first_other), cyc)
    if at >= isa.NEVER:
        return -1, -1, isa.NEVER, False
    hit = first_hit <= at
    oldest = isa.NEVER
    if hit:
        for nb in range(n_banks):
            legal = max(st.dpick[PK_AT_HIT, ch, side, nb], st.dgroup[GB_COLUMN, ch, nb]) <= at
            oldest = min(oldest, st.dpick[PK_AGE_HIT, ch, side, nb] if legal else isa.NEVER)
    else:
        for nb in range(n_banks):
            legal = max(st.dpick[PK_AT_OTHER, ch, side, nb], st.dgroup[GB_OTHER, ch, nb]) <= at
            oldest = min(oldest, st.dpick[PK_AGE_OTHER, ch, side, nb] if legal else isa.NEVER)
    nb = oldest & ((1 << PK_BANK_BITS) - 1)
    if hit:
        return st.dqb[QB_OLDEST_HIT, ch, side, nb], col, at, True
    cmd = ACT if st.dbank[B_OPEN_ROW, ch, nb] < 0 else PRE
    return st.dqb[QB_OLDEST_OTHER, ch, side, nb], cmd, at, False


@kernel(inline=True)
def _choose_by_walk(st, p, ch, cyc, side, out_full):
    """FR-FCFS when row hits of one bank can differ by their bursts left (closed page's
    auto-precharge on the last burst; a full response ring holds last bursts back): each
    bank's oldest non-hit and every one of its hits."""
    best = -1
    best_cmd = -1
    best_at = isa.NEVER
    best_hit = False
    best_seq = 0
    for i in range(st.dch[DC_ACTIVE_R + side, ch]):
        nb = st.dact[ch, side, i]
        kh = st.dqb[QB_OLDEST_HIT, ch, side, nb]
        ko = st.dqb[QB_OLDEST_OTHER, ch, side, nb]
        k = kh if kh >= 0 else ko
        rank = st.dreq[ch, k, E_RANK]
        if st.drank[RK_PENDING, ch, rank] == 1:
            continue  # the rank waits for its refresh
        rbg = st.dreq[ch, k, E_RBG]
        open_row = st.dbank[B_OPEN_ROW, ch, nb]
        # the oldest non-hit, then every hit
        hit = ko < 0
        k = kh if hit else ko
        while k >= 0:
            cmd = _command_for(p, side == 1, hit, open_row, st.dreq[ch, k, E_BURSTS], out_full)
            if cmd == PRE and st.dbank[B_OPENED_FOR, ch, nb] > 0:
                cmd = -1  # the row waits for the request it was opened for
            if cmd >= 0:
                at = max(_bank_earliest(st, ch, rank, rbg, nb, cmd), cyc)
                if at <= best_at:
                    seq = st.dreq[ch, k, E_SEQ]
                    if (at < best_at or (hit and not best_hit)
                            or (hit == best_hit and seq < best_seq)):
                        best, best_cmd, best_at, best_hit, best_seq = k, cmd, at, hit, seq
            if not hit:
                k = kh
                hit = True
            else:
                k = _oldest_after(st, ch, st.dreq[ch, k, E_NEXT], open_row, True)
    return best, best_cmd, best_at, best_hit


@kernel(inline=True)
def _opened_served(st, ch, nb):
    """Bank nb's row no longer waits for the request it was opened for (served, or closed)."""
    k = st.dbank[B_OPENED_FOR, ch, nb] - 1
    if k >= 0:
        st.dch[DC_OPENED_R + st.dreq[ch, k, E_DIR], ch] -= 1
        st.dbank[B_OPENED_FOR, ch, nb] = 0


@kernel(inline=True)
def _refresh_pending(st, p, ch):
    """Whether some rank of channel ch waits for a refresh (its requests are held back)."""
    for r in range(p.d_ranks):
        if st.drank[RK_PENDING, ch, r] == 1:
            return True
    return False


@kernel
def _choose_opened(st, p, ch, cyc, out_full):
    """(request, column command, first legal cycle >= cyc) of the oldest among the earliest
    legal requests whose rows were opened for them, in either queue and whether or not
    their rank waits for a refresh (-1, -1, isa.NEVER if none): they join FR-FCFS as row
    hits wherever the controller is looking."""
    best = -1
    best_cmd = -1
    best_at = isa.NEVER
    for nb in range(st.dpick.shape[3]):
        if st.dbank[B_OPENED_FOR, ch, nb] == 0:
            continue
        k = st.dbank[B_OPENED_FOR, ch, nb] - 1
        cmd = _command_for(p, st.dreq[ch, k, E_DIR] == 1, True, st.dbank[B_OPEN_ROW, ch, nb],
                           st.dreq[ch, k, E_BURSTS], out_full)
        if cmd < 0:
            continue
        at = max(_bank_earliest(st, ch, st.dreq[ch, k, E_RANK], st.dreq[ch, k, E_RBG], nb,
                                cmd), cyc)
        if best < 0 or at < best_at or (
                at == best_at and st.dreq[ch, k, E_SEQ] < st.dreq[ch, best, E_SEQ]):
            best, best_cmd, best_at = k, cmd, at
    return best, best_cmd, best_at


@kernel(inline=True)
def _choose(st, rg, p, ch, cyc):
    """FR-FCFS as of cycle ``cyc`` in the queue being served, remembered in DC_CAND_*: the
    first cycle >= cyc at which some request can issue, and the one chosen then (the oldest
    row hit among those legal then, else the oldest of them; age is E_SEQ).

    Requests of one bank that are all row hits, or all not, need the same command at the
    same cycle, so only the oldest of each kind can win, and the bank keeps both at hand
    (QB_OLDEST_*) with its own bound on their commands (PK_AT_*). Under closed page, or
    with the response ring full, hits can differ in command or eligibility by their bursts
    left, and every hit is looked at."""
    side = st.dch[DC_DRAINING, ch]
    out_full = not ch_out_room(rg, ch)
    if p.d_closed_page == 1 or out_full:
        best, best_cmd, best_at, best_hit = _choose_by_walk(st, p, ch, cyc, side, out_full)
    else:
        best, best_cmd, best_at, best_hit = _choose_by_picks(st, p, ch, cyc, side)
    # a request whose row was opened for it is a row hit in the queue being served, found
    # above, unless its rank waits for a refresh; the other queue's are looked at here
    k, cmd, at = -1, -1, isa.NEVER
    if st.dch[DC_OPENED_R + 1 - side, ch] > 0 or (st.dch[DC_OPENED_R + side, ch] > 0
                                                  and _refresh_pending(st, p, ch)):
        k, cmd, at = _choose_opened(st, p, ch, cyc, out_full)
    if k >= 0 and (best < 0 or at < best_at or (at == best_at and (
            not best_hit or st.dreq[ch, k, E_SEQ] < st.dreq[ch, best, E_SEQ]))):
        best, best_cmd, best_at, best_hit = k, cmd, at, True
    st.dch[DC_CAND_VALID, ch] = 1
    st.dch[DC_CAND_K, ch] = best
    st.dch[DC_CAND_CMD, ch] = best_cmd
    st.dch[DC_CAND_AT, ch] = best_at
    st.dch[DC_CAND_HIT, ch] = best_hit
    st.dch[DC_CAND_OUT_FULL, ch] = out_full


@kernel
def _weigh_newcomer(st, rg, p, ch, k, cyc):
    """Request k just joined the queue being served: it displaces the kept choice only if
    it can go earlier, or at the same cycle as a row hit against a non-hit (it is the
    youngest, so it loses every other tie)."""
    if st.dch[DC_CAND_VALID, ch] == 0:
        return
    out_full = not ch_out_room(rg, ch)
    cmd, at, is_col = _candidate(st, p, ch, k, cyc, out_full)
    best_at = st.dch[DC_CAND_AT, ch]
    if cmd >= 0 and (at < best_at or (at == best_at and is_col and st.dch[DC_CAND_HIT, ch] == 0)):
        st.dch[DC_CAND_K, ch] = k
        st.dch[DC_CAND_CMD, ch] = cmd
        st.dch[DC_CAND_AT, ch] = at
        st.dch[DC_CAND_HIT, ch] = is_col


@kernel(inline=True)
def _schedule(st, rg, mt, p, ch, cyc):
    """Issue the FR-FCFS choice if it is legal now; returns (issued, next cycle worth a look)."""
    if st.dch[DC_CAND_OUT_FULL, ch] == 1 and ch_out_room(rg, ch):
        st.dch[DC_CAND_VALID, ch] = 0  # requests held back by a full response ring may go
    if st.dch[DC_CAND_AT, ch] < cyc:
        st.dch[DC_CAND_VALID, ch] = 0  # chosen for an earlier cycle: others are legal now too
    if st.dch[DC_CAND_VALID, ch] == 0:
        _choose(st, rg, p, ch, cyc)
    k = st.dch[DC_CAND_K, ch]
    if k < 0 or st.dch[DC_CAND_AT, ch] > cyc:
        return False, st.dch[DC_CAND_AT, ch]
    cmd = st.dch[DC_CAND_CMD, ch]
    rank = st.dreq[ch, k, E_RANK]
    rbg = st.dreq[ch, k, E_RBG]
    nb = st.dreq[ch, k, E_NB]
    if st.dreq[ch, k, E_CLASS] < 0:
        cls = CLASS_HIT if (cmd != ACT and cmd != PRE) else (
            CLASS_MISS if cmd == ACT else CLASS_CONFLICT)
        st.dreq[ch, k, E_CLASS] = cls
        st.dbank[B_HITS + cls, ch, nb] += 1
        trace_request_class(st, p, ch, nb, cls, cyc)
    dram_issue(st, mt, p, ch, rank, rbg - rank * p.d_bankgroups, nb - rbg * p.d_banks,
               st.dreq[ch, k, E_ROW], st.dreq[ch, k, E_COL], cmd, cyc, st.dreq[ch, k, E_CORE],
               st.dreq[ch, k, E_ENTRY])
    if cmd == ACT:  # the row stays open until request k is served
        st.dbank[B_OPENED_FOR, ch, nb] = k + 1
        st.dch[DC_OPENED_R + st.dreq[ch, k, E_DIR], ch] += 1
    if cmd == RD or cmd == WR or cmd == RDA or cmd == WRA:
        st.dreq[ch, k, E_BURSTS] -= 1
        st.dreq[ch, k, E_COL] += 1
        if st.dreq[ch, k, E_BURSTS] == 0:
            is_write = cmd == WR or cmd == WRA
            done = cyc + (p.d_cwl if is_write else p.d_cl) + p.d_bl
            _respond(st, rg, p, ch, k, done)
            d = 1 if is_write else 0
            st.dbank[B_READS + d, ch, nb] += 1
            trace_request_done(st, p, ch, nb, d, cyc)
            st.dch[DC_READS + d, ch] += 1
            st.dch[DC_READ_BYTES + d, ch] += p.req_bytes
            if not is_write:
                lat = done - st.dreq[ch, k, E_TIME] // p.mem_period
                st.dch[DC_LAT_SUM, ch] += lat
                st.dch[DC_LAT_N, ch] += 1
                st.lat_hist[ch, min(lat, LAT_BINS - 1)] += 1
            _retire(st, p, ch, k, is_write)
            _update_drain(st, p, ch)
    # the next choice and the exact cycle it becomes legal, as of after this command (in
    # whichever queue the controller will then serve): looking earlier would find nothing
    _choose(st, rg, p, ch, cyc + 1)
    return True, st.dch[DC_CAND_AT, ch]


@kernel(inline=True)
def dram_channel_step(st, rg, mt, p, ch, t):
    """One DRAM clock of channel ch at tick t; sets the channel's next wake cycle."""
    cyc = t // p.mem_period
    trace_queues(st, p, ch, cyc)
    _accept(st, rg, mt, p, ch, t)
    issued = False
    wake = isa.NEVER
    if p.d_refresh == 1:
        issued, wake = _refresh(st, mt, p, ch, cyc)
    if not issued:
        issued, w = _schedule(st, rg, mt, p, ch, cyc)
        wake = min(wake, w)
    # requests still waiting outside the queues
    if rg.mport[MP_IN_COUNT, ch] > 0:
        h = rg.mport[MP_IN_HEAD, ch]
        write = rg.ch_in[P_DIR, ch, h] == 1
        room = st.dch[DC_WQ_COUNT if write else DC_RQ_COUNT, ch] < (p.d_wq if write else p.d_rq)
        if room:
            wake = min(wake, max(cyc + 1, -(-rg.ch_in[P_TIME, ch, h] // p.mem_period)))
    st.dch[DC_WAKE, ch] = max(wake, cyc + 1)


@kernel(inline=True)
def dram_step(st, rg, mt, p, t):
    """Every DRAM channel that is due at memory edge t (its own wake cycle, or its bell:
    a request arrives, its output ring has room); sets the unit's next wake tick."""
    cyc = t // p.mem_period
    wake = isa.NEVER
    bell = isa.NEVER  # channels rung for a later edge
    for ch in range(p.n_channels):
        if p.skip == 0 or st.dch[DC_WAKE, ch] <= cyc or channel_bell(rg, ch) <= t:
            channel_heard(rg, ch)
            dram_channel_step(st, rg, mt, p, ch, t)
        wake = min(wake, st.dch[DC_WAKE, ch])
        bell = min(bell, channel_bell(rg, ch))
    st.ctl[MC_WAKE] = bell if wake >= isa.NEVER else min(bell, wake * p.mem_period)
    heard(rg, SIDE_MEM)
