"""Struct-of-arrays state of the whole chip, one tuple of tables per unit.

The chip is a few units joined by rings (DESIGN.md, "Units and their contract")::

    State(glob,   the main loop's scalars (loop.py)
          rings,  the rings between units, the only tables two units share (ports.py)
          cores,  cores, DMA engines and the scheduler (cores.py, core.py, dma.py,
                  scheduler.py, policies/)
          noc,    the network between cores and memory channels: a Crossbar or a
                  RouterNetwork (noc.py, crossbar.py, router_network.py)
          mem)    the memory behind it (memory.py, ideal_memory.py, simple_memory.py, dram.py)

A unit's kernels take its own tuple as ``st`` and the rings as ``rg``, and touch nothing
else; ``loop.py`` alone sees the whole ``State`` (as ``chip``) and composes the units. The
NoC has a tuple type per model (``Crossbar``, ``RouterNetwork``): the main loop is
compiled once per NoC model, with that model's kernels only (``noc.py``). The memory's
tuple holds the tables of ideal, simple and DRAM memory; the models a run does not use
get one-element placeholders, so one compiled loop serves every memory model.

Each table is int64, laid out field-major (``table[FIELD, unit, ...]``): every field is a
contiguous array over units, and a unit has a few dozen arrays rather than hundreds
(numba reference-counted every array argument of every call, which dominated the run time
when each field was its own array). A kernel gets each tuple as one pointer
(``tables_type.py``). The field indices below are module
constants, which numba folds into the kernels. The exception is ``dreq``, the DRAM request
slots, laid out record-major (``dreq[channel, slot, FIELD]``): it is the largest table the
hot path touches, larger than the L1 cache, and a DRAM command reads a dozen fields of one
request, which then share two cache lines instead of taking one each (measured: 7% faster
on a memory-bound Llama generation step). Every table starts on a cache line
(``npusim.state``, which sizes and allocates all of them).

Kernels also take the read-only ProgramArrays (``prog``), MemTables (``mt``) and the scalar
Params (``p``); they never allocate (see ``jit.py``). Times are int64 ticks of one global
time base in which every clock domain has an integer period (``npusim.params.TimeBase``).
This module imports nothing, so the layouts are readable without numba.
"""

from collections import namedtuple

# Scalar parameters (all int64), fixed for a run (npusim.params.make_params).
PARAM_FIELDS = (
    "n_cores", "core_period", "noc_period", "mem_period", "skip",
    # systolic array and vector unit
    "sa_dataflow", "sa_width", "sa_height", "sa_min_cycles", "acc_latency", "vec_width",
    # instruction queues
    "ld_queue", "st_queue", "ex_queue",
    # DMA, NoC (its model is the type of State.noc) and memory (mem_type: names.MEMORY_TYPES)
    "req_bytes", "max_outstanding", "core_ports", "noc_latency", "flit_bytes", "mem_type",
    "n_channels", "mem_latency", "ch_bytes_per_cycle",
    # cycle-level DRAM
    "d_ranks", "d_bankgroups", "d_banks", "d_cl", "d_cwl", "d_bl", "d_refi", "d_refresh",
    "d_closed_page", "d_rq", "d_wq", "d_wq_high", "d_wq_low", "d_bursts", "d_burst_bits",
    "d_bpr_bits", "d_ipoly",
    # DRAM power bookkeeping (kernels/dram.py _bank_state_time): tRAS, tRFC, and when an
    # auto-precharge closes the bank after an RDA / WRA (the standard's RD->PRE, WR->PRE)
    "d_ras", "d_rfc", "d_close_rd", "d_close_wr",
    # scheduling (names.POLICIES)
    "policy",
    # tracing (kernels/trace.py, in a traced run): bin width (ticks), command-log window (ticks)
    "trace_bin", "trace_log_from", "trace_log_to",
)


class Params(namedtuple("Params", PARAM_FIELDS)):
    """The Params of a full-fidelity run without a trace. Fidelity and tracing are not
    fields but the class (``params_class``): numba answers ``loop.fast_fidelity(p)`` and
    chooses each ``trace.trace_hook`` from the class of ``p`` while it types a kernel, as it
    picks the NoC model from its tables' type. So a run compiles only the code its class
    asks for: an untraced, full-fidelity loop holds no trace hook and no window code (a
    run-time test of a flag, never taken, still costs: the trace hooks were 2.3 of the
    first run's 30 compile seconds, and the window check made the mesh loop 3-5% slower
    through LLVM's layout of the one big loop); a run of another class compiles a loop of
    its own."""

    __slots__ = ()
    fast = False  # fast fidelity: windows end for npusim.fast.streams
    traced = False  # the trace hooks count into the units' trace buffers


class FastParams(Params):
    __slots__ = ()
    fast = True


class TracedParams(Params):
    __slots__ = ()
    traced = True


class FastTracedParams(Params):
    __slots__ = ()
    fast = True
    traced = True


def params_class(fast: bool, traced: bool) -> type:
    """The Params class of a run in fast or full fidelity, with or without a trace."""
    return {(False, False): Params, (True, False): FastParams, (False, True): TracedParams,
            (True, True): FastTracedParams}[bool(fast), bool(traced)]


# The program tables (read-only); vlat is the vector-op latency table (isa.VECTOR_OPS order),
# req the requests [request, R_*] and core_part the partition of each core.
ProgramArrays = namedtuple("ProgramArrays", ("inst", "tile", "group", "layer", "layer_succ",
                                             "release_order", "vlat", "req", "core_part"))
# req columns
R_RANK, R_PART = range(2)  # arrival order (0 = first), partition
N_REQ_FIELDS = 2

# ======================================================================== the whole chip

State = namedtuple("State", ("glob", "rings", "cores", "noc", "mem"))

# glob [G_*]: the main loop's (loop.py) scalars; G_TRACE_STOP: the tick before which the
# loop returns so that Python can drain the trace buffers (npusim.trace); G_WINDOW_AT: in
# fast fidelity, the tick from which the loop looks whether the last G_WINDOW ticks were
# steady (G_WINDOW_SIG: the cores' activity then, G_WINDOW_STEADY: steady windows in a
# row) and returns for npusim.fast.streams after the first and every G_WINDOW_EVERY-th
# steady window; isa.NEVER otherwise
(G_NOW, G_STARTED, G_FINISHED, G_END, G_STEPS, G_TRACE_STOP, G_WINDOW, G_WINDOW_AT,
 G_WINDOW_SIG, G_WINDOW_STEADY, G_WINDOW_EVERY) = range(11)
N_GLOB = 11

# ======================================================================== rings (ports.py)

Rings = namedtuple("Rings", (
    "inj",  # [N_*, core, k]      requests a core's DMA sends (core -> NoC)
    "arr",  # [A_*, core, k]      responses on their way to a core (NoC -> core)
    "ch_in",  # [P_*, channel, k]   requests on their way to a memory channel (NoC -> memory)
    "ch_out",  # [P_*, channel, k]  responses a channel has ready (memory -> NoC)
    "cport",  # [CP_*, core]       head and count of a core's two rings, and its bell
    "mport",  # [MP_*, channel]    head and count of a channel's two rings, and its bell
    "fresh",  # [FRESH_*, word]    bit i % 64 of word i // 64: ring i turned non-empty
    #                              since the network side last looked
    "bells",  # [SIDE_*]           earliest tick each side must look at its rings
))
# inj packets (N_TIME: tick sent, N_CHAN: destination channel)
N_ADDR, N_DIR, N_ENTRY, N_TIME, N_CHAN = range(5)
N_INJ_FIELDS = 5
# arr packets (A_TIME: tick it arrives, A_SENT: tick it was sent by the core)
A_TIME, A_DIR, A_ENTRY, A_SENT = range(4)
N_ARR_FIELDS = 4
# ch_in / ch_out packets (P_TIME: tick it arrives at the channel / is ready to leave it)
P_TIME, P_CORE, P_DIR, P_ENTRY, P_SENT, P_ADDR = range(6)
N_PACKET_FIELDS = 6
# cport
CP_INJ_HEAD, CP_INJ_COUNT, CP_ARR_HEAD, CP_ARR_COUNT, CP_BELL = range(5)
N_CPORT_FIELDS = 5
# mport
MP_IN_HEAD, MP_IN_COUNT, MP_OUT_HEAD, MP_OUT_COUNT, MP_BELL = range(5)
N_MPORT_FIELDS = 5
# fresh rows: injection rings (bit per core), output rings (bit per channel)
FRESH_INJ, FRESH_OUT = range(2)
# bells: the three sides of the rings (the unit that listens)
SIDE_CORES, SIDE_NET, SIDE_MEM = range(3)
N_SIDES = 3

# ======================================================================== cores unit

Cores = namedtuple("Cores", (
    "ctl",  # [CC_*]                scheduler scalars
    "ready",  # [partition, k]      ready layers of each partition (unordered)
    "part_st",  # [PT_*, partition]
    "layer_st",  # [L_*, layer]
    "layer_stack",  # [layer + 1]   scratch for releasing chains of layers
    "core",  # [C_*, core]
    "slot",  # [S_*, core, 2]        the two tile slots of each core (double buffering)
    "done",  # [core, 2, inst]       completion tick of each instruction of a slot's tile
    "ex_ring",  # [core, ex_queue]   start ticks of the last issued compute instructions
    "dq",  # [Q_*, core, dir, entry] DMA queue entries; dir 0 = load (MVIN), 1 = store
    "dq_ctl",  # [D_*, core, dir]
    # tracing (kernels/trace.py; one-element placeholders when off)
    "tr_iv",  # [IV_*, k]            core activity intervals
    "tr_core",  # [dir, core]        tick each DMA turned busy (-1: idle)
))
# ctl (CC_PAUSE: a layer marked L_NOTIFY ended, the largest such mark, or NOTIFY_AFTER_STEP
#  where a layer came down to its L_TILE_MARK; CC_IV_N: rows of tr_iv in use)
CC_READY_SEQ, CC_PAUSE, CC_LAYERS_LEFT, CC_RELEASED, CC_IV_N = range(5)
N_CC_FIELDS = 5
# part_st (PT_LAST_RANK: policy state of time-shared)
PT_READY, PT_LAST_RANK = range(2)
N_PART_FIELDS = 2
# layer_st
# (per-layer statistics: array stream cycles, vector busy cycles, DMA bytes loaded/stored)
# (L_NEXT_GROUP: the next group to hand out, L_READY_SEQ: order in which layers became ready,
#  L_NOTIFY: NOTIFY_AFTER_STEP if the run returns to Python when the layer ends, e.g. to add
#  the next LLM step, NOTIFY_BEFORE_HAND_OUT to return before that tick's ready tiles are
#  handed out (fast fidelity: a region's cut may then skip the layers the end released);
#  L_TILE_MARK: if > 0, the run returns to Python when that many of its tiles are left, for
#  fast fidelity's measurements inside a layer)
(L_PREDS_LEFT, L_TILES_LEFT, L_START, L_END, L_SA_CYCLES, L_VU_CYCLES, L_LD_BYTES,
 L_ST_BYTES, L_NEXT_GROUP, L_READY_SEQ, L_NOTIFY, L_TILE_MARK) = range(12)
N_LAYER_FIELDS = 12
NOTIFY_AFTER_STEP, NOTIFY_BEFORE_HAND_OUT = 1, 2  # L_NOTIFY, and CC_PAUSE when it applies
# core (C_SA_LAST_CHUNK: when the last chunk of the array's latest GEMM enters it;
#  C_LD_OUTSTANDING + d: requests of DMA d in flight, each DMA with tags of its own)
(C_WAKE, C_SEQ, C_GROUP_NEXT, C_GROUP_END, C_SA_PRELOAD_READY, C_SA_STREAM_FREE,
 C_SA_LAST_CHUNK, C_VU_FREE, C_EX_POS, C_LD_OUTSTANDING, C_ST_OUTSTANDING, C_BUSY_SINCE,
 C_SA_DONE,
 # statistics
 C_SA_STREAM, C_SA_MACS, C_VU_BUSY, C_VU_OPS, C_BUSY, C_LD_REQUESTS, C_ST_REQUESTS,
 C_LD_BYTES, C_ST_BYTES, C_TILES, C_READ_LAT_SUM, C_READ_LAT_N) = range(25)
N_CORE_FIELDS = 25
# slot
(S_TILE, S_SEQ, S_NEXT, S_PENDING_DMA, S_LAST_DONE, S_COMPUTE_LEFT,
 S_STORE_LEFT) = range(7)
N_SLOT_FIELDS = 7
# dq
Q_SLOT, Q_INST, Q_ROW, Q_BASE, Q_O, Q_I, Q_POS, Q_UNSENT, Q_PENDING = range(9)
N_DQ_FIELDS = 9
# dq_ctl
D_HEAD, D_COUNT, D_SEND = range(3)
N_DQ_CTL_FIELDS = 3
# tr_iv [IV_*, k]: kind is a unit (isa.UNIT_*: dma_load, dma_store, systolic, vector) or
# IV_ACTIVE (the core holds a tile)
IV_KIND, IV_CORE, IV_START, IV_END = range(4)
N_IV_FIELDS = 4
IV_ACTIVE = 4

# ======================================================================== NoC unit

# One tuple type per NoC model, so that the model is part of the State's type: numba
# compiles the main loop once per model, each with only its own model's step (noc.py).
# Both begin with ``ctl`` and end with ``tr_noc``, which every model keeps.
Crossbar = namedtuple("Crossbar", (  # crossbar.py; also the (unused) NoC of ideal memory
    "ctl",  # [NC_*]
    "xb_ch",  # [XC_*, channel]     the request port of each channel
    "xb_core",  # [XP_*, core]      the responses waiting for each core
    "xb_port",  # [core, port]      tick each of the core's response ports is free from
    #                              (noc.core_ports of them: channel ch's use ch % ports)
    "xb_heads",  # [core, word]     bit ch % 64 of word ch // 64: channel ch's output ring
    #                              has a response for the core at its head
    "tr_noc",  # [net, slot, core, channel]  flits per link, binned ring (tracing)
))
RouterNetwork = namedtuple("RouterNetwork", (  # router_network.py, network/
    "ctl",  # [NC_*]
    # the network's state, tables and parameters (network/state.py NocState, NocTables,
    # NocParams; the state and tables are views of one buffer, net_mem, laid out as
    # net_layout says: network/packed.py), and per packet row what the rings need at the
    # other end
    "net", "net_tab", "net_mem", "net_layout", "net_p",
    "net_msg",  # [M_*, packet]
    "nic_due",  # [node]            first NoC cycle the node's injection side may act:
    #                              the next while it sends or its ring holds a packet, a
    #                              channel's head response's ready cycle, isa.NEVER idle
    "tr_noc",  # [net, slot, core, channel]  flits per link, binned ring (tracing)
))
NC_WAKE = 0
N_NC_FIELDS = 1
# xb_ch (XC_INJ_HEADS: how many cores have a request for the channel at their injection
# ring's head)
XC_PORT_FREE, XC_RR, XC_INJ_HEADS = range(3)
N_XC_FIELDS = 3
# xb_core (XP_RESP_HEADS: how many channels have a response for the core at their output
# ring's head)
XP_RR, XP_RESP_HEADS = range(2)
N_XP_FIELDS = 2
# tr_noc nets
NOC_REQUEST, NOC_RESPONSE = range(2)
# net_msg (M_SENT: tick the core sent the request; M_ADDR: requests only)
M_CORE, M_CHAN, M_DIR, M_ENTRY, M_SENT, M_ADDR = range(6)
N_MSG_FIELDS = 6

# ======================================================================== memory unit

Memory = namedtuple("Memory", (
    "ctl",  # [MC_*]
    # ideal and simple memory (ideal_memory.py, simple_memory.py)
    "chan",  # [H_*, channel]
    # cycle-level DRAM (dram.py); times in DRAM cycles
    "dch",  # [DC_*, channel]         controller state and statistics
    "dreq",  # [channel, slot, E_*]   request slots: read queue (slot < rq), then write queue
    "dbank",  # [B_*, channel, bank]  open row and per-bank statistics
    "drank",  # [RK_*, channel, rank] refresh state
    "dqb",  # [QB_*, channel, side, bank]  each bank's requests in a queue (side 0 read, 1 write)
    "dact",  # [channel, side, i]     banks with requests in a queue (DC_ACTIVE_* of them)
    "dpick",  # [PK_*, channel, side, bank]  bank-level earliest cycle of each bank's picks
    "dgroup",  # [GB_*, channel, bank]        scratch of the FR-FCFS scan
    "dfree",  # [channel, side, i]    free request slots of a queue (a stack)
    "rdy_rank",  # [channel, rank, cmd]      earliest cycle of each command in every bank
    #                                       group of a rank (channel and rank rules)
    "rdy_group",  # [channel, rank*bg, cmd]  ... in one bank group (its rank's bound too)
    "rdy_bank",  # [channel, bank, cmd]     ... and at a bank
    "win",  # [channel, window rule, node, k]  recent issue cycles (tFAW-like rules)
    "win_ctl",  # [2, channel, window rule, node]  ring position and fill
    "lat_hist",  # [channel, bin]     read latency histogram (DRAM cycles)
    "cmd_log",  # [LG_*, n]           DRAM command log (when enabled)
    # tracing (kernels/trace.py; one-element placeholders when off)
    "tr_dram",  # [TD_*, slot, channel, bank]  binned ring
    "tr_chan",  # [TH_*, slot, channel]        binned ring
    "tr_bank",  # [channel, bank]              DRAM cycle each bank is busy until
    "tr_dch",  # [channel]                     DRAM cycle queue occupancy is added up to
    "tr_dur",  # [cmd]                         busy cycles of each DRAM command
))
# ctl (MC_LOG_N: rows of cmd_log in use; MC_LOG_LOST: commands that found it full)
MC_WAKE, MC_LOG_N, MC_LOG_LOST = range(3)
N_MC_FIELDS = 3
# chan (H_CREDIT/H_CREDIT_CYCLE: simple memory's bandwidth credit, refilled every cycle)
H_CREDIT, H_CREDIT_CYCLE, H_READS, H_WRITES, H_READ_BYTES, H_WRITE_BYTES = range(6)
N_CHAN_FIELDS = 6
# dch
# (DC_CAND_*: the controller's next choice, kept between visits while nothing it depends
#  on changes: request, command, the cycle it becomes legal, whether it is a row hit, and
#  whether the response ring was full when it was chosen; DC_CAND_VALID 0 = look again;
#  DC_ACTIVE_*: how many banks have requests in each queue (dact);
#  DC_RD_CMDS..DC_WRA_CMDS: column commands issued, DC_BANK_CLOSES: banks that went from
#  open to precharged (PRE, each open bank of a PREA, the auto-precharge of RDA / WRA), as
#  DRAMPower counts precharges; DC_OPENED_R / _W: banks whose open row waits for the read /
#  write it was opened for, B_OPENED_FOR)
(DC_WAKE, DC_RQ_COUNT, DC_WQ_COUNT, DC_DRAINING, DC_READS, DC_WRITES, DC_READ_BYTES,
 DC_WRITE_BYTES, DC_ACTS, DC_PRES, DC_REFS, DC_CMDS, DC_BUS_BUSY, DC_LAT_SUM,
 DC_LAT_N, DC_CAND_VALID, DC_CAND_K, DC_CAND_CMD, DC_CAND_AT, DC_CAND_HIT,
 DC_CAND_OUT_FULL, DC_SEQ, DC_ACTIVE_R, DC_ACTIVE_W, DC_RD_CMDS, DC_WR_CMDS, DC_RDA_CMDS,
 DC_WRA_CMDS, DC_BANK_CLOSES, DC_OPENED_R, DC_OPENED_W) = range(31)
N_DCH_FIELDS = 31
# dreq
# (E_RBG/E_NB: flat bank-group and bank index; E_SEQ: arrival number, which orders the
#  requests by age; E_NEXT/E_PREV: the next younger / older request of the same bank and
#  queue, -1 at the ends. The first eight fields, which the FR-FCFS bookkeeping reads of
#  requests other than the one issuing, share one cache line; 15 fields padded to 16 make
#  a request exactly two lines of the 64-byte-aligned table.)
(E_ROW, E_NEXT, E_SEQ, E_NB, E_RBG, E_RANK, E_BURSTS, E_COL,
 E_DIR, E_CLASS, E_PREV, E_TIME, E_CORE, E_ENTRY, E_SENT) = range(15)
N_DREQ_FIELDS = 16
# dqb (QB_HEAD/QB_TAIL: oldest / youngest request slot, -1 if none; QB_POS: the bank's
#  place in dact; QB_OLDEST_HIT/QB_OLDEST_OTHER: the oldest request that targets the bank's
#  open row / that does not, -1 if none)
QB_HEAD, QB_TAIL, QB_POS, QB_OLDEST_HIT, QB_OLDEST_OTHER = range(5)
N_QB_FIELDS = 5
# dpick (PK_AT_HIT/PK_AT_OTHER: the bank's own bound on the command its oldest row hit /
#  oldest non-hit needs next, isa.NEVER if it has none; PK_AGE_*: their arrival numbers
#  shifted left by PK_BANK_BITS, with the bank in the low bits, isa.NEVER if none: the
#  least is the oldest, and names its bank; kept current by kernels/dram.py)
PK_AT_HIT, PK_AT_OTHER, PK_AGE_HIT, PK_AGE_OTHER = range(4)
N_PK_FIELDS = 4
PK_BANK_BITS = 16  # banks per channel <= 16 ranks x 16 groups x 64 (npusim.dram limits)
# dgroup (the bound of a bank's group on its picks' column command / other command)
GB_COLUMN, GB_OTHER = range(2)
N_GB_FIELDS = 2
# dbank (B_HITS, B_MISSES, B_CONFLICTS in class order; B_READS, B_WRITES in dir order;
#  B_ACT_CYCLE: the DRAM cycle of the bank's last ACT, B_AUTO_CLOSE: the cycle the last
#  auto-precharge (RDA / WRA) closed or will close the bank, B_OPENED_FOR: 1 + the request
#  slot whose ACT opened the open row while that request is queued, else 0)
(B_OPEN_ROW, B_HITS, B_MISSES, B_CONFLICTS, B_READS, B_WRITES, B_ACT_CYCLE,
 B_AUTO_CLOSE, B_OPENED_FOR) = range(9)
N_DBANK_FIELDS = 9
# drank (RK_OPEN_BANKS..RK_ACTIVE_CYCLES: time with at least one bank of the rank active,
#  for DRAM background energy, kept at command issue (kernels/dram.py _bank_state_time):
#  banks open with no close in sight, the cycle the rank stays active until by closes
#  already known (auto-precharge, refresh), the cycle the sum is taken up to, the sum)
(RK_NEXT_REF, RK_PENDING, RK_OPEN_BANKS, RK_ACTIVE_UNTIL, RK_ACTIVE_MARK,
 RK_ACTIVE_CYCLES) = range(6)
N_DRANK_FIELDS = 6
# cmd_log
(LG_CYCLE, LG_CHANNEL, LG_RANK, LG_BANKGROUP, LG_BANK, LG_ROW, LG_COLUMN, LG_COMMAND,
 LG_CORE, LG_REQUEST) = range(10)
N_LOG_FIELDS = 10
LAT_BINS = 4096  # lat_hist: one bin per DRAM cycle, last bin = overflow
# tr_dram [TD_*, slot, channel, bank]: request outcomes in the order of kernels/dram.py's
# classes, reads/writes in direction order
(TD_READS, TD_WRITES, TD_HITS, TD_MISSES, TD_CONFLICTS, TD_ACTS, TD_PRES,
 TD_BUSY) = range(8)
N_TD_FIELDS = 8
# tr_chan [TH_*, slot, channel]: queue occupancy integrals (requests x DRAM cycles),
# rank-wide commands
TH_READ_QUEUE, TH_WRITE_QUEUE, TH_PREA, TH_REF = range(4)
N_TH_FIELDS = 4

# Memory-system tables (read-only; npusim.dram.tables builds them): DRAM timing rules as
# dense delays by relation (delay_rank[cmd, RANK_*, next], delay_group[cmd, REL_*, next],
# delay_bank[cmd, REL_*, next] and which commands reach other groups or banks,
# spread[cmd]), the windowed rules grouped by prev command
# (windows[window_start[c]:window_start[c+1], W_*]), address bit fields and the IPOLY
# channel hash.
MemTables = namedtuple("MemTables", ("delay_rank", "delay_group", "delay_bank", "spread",
                                     "windows", "window_start", "amap", "ipoly"))
# how a bank group / bank stands to the one a command went to (rows of delay_*)
REL_SAME_GROUP, REL_SAME_RANK, REL_OTHER_RANK = range(3)
REL_SAME_BANK, REL_OTHER_BANK = range(2)
RANK_OWN, RANK_OTHER = range(2)  # rows of delay_rank: the command's rank, another rank
# spread[cmd] bits: rules reach the other bank groups of the rank further than its own
# rank row (their delay_group[cmd, REL_SAME_RANK] row), or the other banks of the group
SPREAD_GROUPS, SPREAD_BANKS = 1, 2
NO_DELAY = -(1 << 40)  # no rule: a bound this far back never binds
# windowed rule columns (W_RELS: bit mask of the REL_* the rule reaches, of groups, or of
# banks when W_LEVEL is names.LV_BANK)
W_NEXT, W_LEVEL, W_LAT, W_SIZE, W_RELS = range(5)
N_WINDOW_FIELDS = 5
