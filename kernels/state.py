"""Struct-of-arrays state of the whole chip.

Each unit's state is one int64 table laid out field-major (``table[FIELD, unit, ...]``):
every field is a contiguous array over units, and a kernel call carries a dozen arrays
rather than a hundred (numba reference-counts every array argument of every call, which
dominated the run time when each field was its own array). The field indices below are
module constants, which numba folds into the kernels.

The exception is ``dreq``, the DRAM request slots, laid out record-major
(``dreq[channel, slot, FIELD]``): it is the largest table the hot path touches, larger than
the L1 cache, and a DRAM command reads a dozen fields of one request, which then share two
cache lines instead of taking one each (measured: 7% faster on a memory-bound Llama
generation step). The engine aligns every table to a cache line (``engine._table``).

Every kernel takes ``(st, prog, p)``: the mutable State, the read-only ProgramArrays and
the scalar Params. The engine (``npusim.engine``) allocates them; kernels never allocate (see ``jit.py``).
Times are int64 ticks of one global time base in which every clock domain has an integer
period (``npusim.engine.TimeBase``).
"""

from collections import namedtuple

# Scalar parameters (all int64), fixed for a run.
PARAM_FIELDS = (
    "n_cores", "core_period", "noc_period", "mem_period", "skip",
    # systolic array and vector unit
    "sa_width", "sa_height", "sa_min_cycles", "acc_latency", "vec_width",
    # instruction queues
    "ld_queue", "st_queue", "ex_queue",
    # DMA and fabric
    "req_bytes", "max_outstanding", "mem_type", "n_channels", "mem_latency",
    "ch_bytes_per_cycle", "ch_queue", "noc_latency", "flit_bytes", "inj_queue",
    # cycle-level DRAM
    "d_ranks", "d_bankgroups", "d_banks", "d_cl", "d_cwl", "d_bl", "d_refi", "d_refresh",
    "d_closed_page", "d_rq", "d_wq", "d_wq_high", "d_wq_low", "d_bursts", "d_burst_bits",
    "d_bpr_bits", "d_ipoly",
    # DRAM power bookkeeping (kernels/dram.py _bank_state_time): tRAS, tRFC, and when an
    # auto-precharge closes the bank after an RDA / WRA (the standard's RD->PRE, WR->PRE)
    "d_ras", "d_rfc", "d_close_rd", "d_close_wr",
    # scheduling (kernels/policies/)
    "policy",
    # tracing (kernels/trace.py): on/off, bin width (ticks), command-log window (ticks)
    "trace", "trace_bin", "trace_log_from", "trace_log_to",
)
Params = namedtuple("Params", PARAM_FIELDS)

# The program tables (read-only); vlat is the vector-op latency table (isa.VECTOR_OPS order),
# req the requests [request, R_*] and core_part the partition of each core.
ProgramArrays = namedtuple("ProgramArrays", ("inst", "tile", "group", "layer", "layer_succ",
                                             "release_order", "vlat", "req", "core_part"))
# req columns
R_RANK, R_PART = range(2)  # arrival order (0 = first), partition
N_REQ_FIELDS = 2

# Memory-system tables (read-only): DRAM timing rules as dense delays by relation
# (delay_rank[cmd, rel, next], delay_group[cmd, rel, next], delay_bank[cmd, rel, next] and
# which commands reach other groups or banks, spread[cmd]; see npusim.engine._delay_tables),
# the windowed rules grouped by prev command (windows[window_start[c]:window_start[c+1]]),
# address bit fields and the IPOLY channel hash.
MemTables = namedtuple("MemTables", ("delay_rank", "delay_group", "delay_bank", "spread",
                                     "windows", "window_start", "amap", "ipoly"))

STATE_TABLES = (
    "glob",  # [G_*]                 global scalars
    "ready",  # [partition, k]       ready layers of each partition (unordered)
    "part_st",  # [PT_*, partition]
    "layer_st",  # [L_*, layer]
    "layer_stack",  # [layer + 1]    scratch for releasing chains of layers
    "core",  # [C_*, core]
    "slot",  # [S_*, core, 2]        the two tile slots of each core (double buffering)
    "done",  # [core, 2, inst]       completion tick of each instruction of a slot's tile
    "ex_ring",  # [core, ex_queue]   start ticks of the last issued compute instructions
    "dq",  # [Q_*, core, dir, entry] DMA queue entries; dir 0 = load (MVIN), 1 = store
    "dq_ctl",  # [D_*, core, dir]
    "arr",  # [A_*, core, k]          responses on their way to a core (ring)
    "inj",  # [N_*, core, k]          requests in a core's network interface (ring)
    "chan",  # [H_*, channel]
    "ch_in",  # [P_*, channel, k]     requests queued at a memory channel (ring)
    "ch_out",  # [P_*, channel, k]    responses waiting for the NoC (ring)
    "resp_heads",  # [core, word]     bit ch % 64 of word ch // 64: channel ch's response
    #                                ring has a response for the core at its head
    # cycle-level DRAM (memory type "dram"); times in DRAM cycles
    "dch",  # [DC_*, channel]         controller state and statistics
    "dreq",  # [channel, slot, E_*]   request slots: read queue (slot < rq), then write queue
    "dbank",  # [B_*, channel, bank]  open row and per-bank statistics
    "drank",  # [RK_*, channel, rank] refresh state
    "dqb",  # [QB_*, channel, side, bank]  each bank's requests in a queue (side 0 read, 1 write)
    "dact",  # [channel, side, i]     banks with requests in a queue (DC_ACTIVE_* of them)
    "dpick",  # [PK_*, channel, side, bank]  bank-level earliest cycle of each bank's picks
    "dgroup",  # [GB_*, channel, bank]        scratch of the FR-FCFS scan (kernels/dram.py)
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
    "tr_ctl",  # [TR_*]
    "tr_dram",  # [TD_*, slot, channel, bank]  binned ring
    "tr_chan",  # [TH_*, slot, channel]        binned ring
    "tr_noc",  # [net, slot, core, channel]    binned ring
    "tr_iv",  # [IV_*, k]                      core activity intervals
    "tr_core",  # [dir, core]                  tick each DMA turned busy (-1: idle)
    "tr_bank",  # [channel, bank]              DRAM cycle each bank is busy until
    "tr_dch",  # [channel]                     DRAM cycle queue occupancy is added up to
    "tr_dur",  # [cmd]                         busy cycles of each DRAM command
)
State = namedtuple("State", STATE_TABLES)


def _fields(*names):
    return {n: i for i, n in enumerate(names)}, len(names)


# glob
(G_NOW, G_STARTED, G_FINISHED, G_END, G_STEPS, G_WAKE_NOC, G_WAKE_MEM, G_READY_SEQ,
 G_PAUSE, G_LAYERS_LEFT, G_LOG_N, G_LOG_LOST, G_RELEASED) = range(13)
N_GLOB = 13
# part_st (PT_LAST_RANK: policy state of time-shared)
PT_READY, PT_LAST_RANK = range(2)
N_PART_FIELDS = 2
# layer_st
# (per-layer statistics: array stream cycles, vector busy cycles, DMA bytes loaded/stored)
# (L_NEXT_GROUP: the next group to hand out, L_READY_SEQ: order in which layers became ready,
#  L_NOTIFY: 1 if the run returns to Python when the layer ends, e.g. to add the next LLM step)
(L_PREDS_LEFT, L_TILES_LEFT, L_START, L_END, L_SA_CYCLES, L_VU_CYCLES, L_LD_BYTES,
 L_ST_BYTES, L_NEXT_GROUP, L_READY_SEQ, L_NOTIFY) = range(11)
N_LAYER_FIELDS = 11
# core (C_RESP_HEADS: how many channels have a response for the core at their ring's head)
(C_WAKE, C_SEQ, C_GROUP_NEXT, C_GROUP_END, C_SA_PRELOAD_READY, C_SA_STREAM_FREE,
 C_SA_GEMM_START, C_VU_FREE, C_EX_POS, C_OUTSTANDING, C_ARR_HEAD, C_ARR_COUNT, C_INJ_HEAD,
 C_INJ_COUNT, C_RESP_PORT_FREE, C_RESP_RR, C_BUSY_SINCE, C_SA_DONE, C_RESP_HEADS,
 # statistics
 C_SA_STREAM, C_SA_MACS, C_VU_BUSY, C_VU_OPS, C_BUSY, C_LD_REQUESTS, C_ST_REQUESTS,
 C_LD_BYTES, C_ST_BYTES, C_TILES, C_READ_LAT_SUM, C_READ_LAT_N) = range(31)
N_CORE_FIELDS = 31
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
# arr
A_TIME, A_DIR, A_ENTRY, A_SENT = range(4)
N_ARR_FIELDS = 4
# inj
N_ADDR, N_DIR, N_ENTRY, N_TIME, N_CHAN = range(5)
N_INJ_FIELDS = 5
# chan (H_INJ_HEADS: how many cores have a request for the channel at their injection
#  queue's head)
(H_REQ_PORT_FREE, H_REQ_RR, H_IN_HEAD, H_IN_COUNT, H_OUT_HEAD, H_OUT_COUNT, H_CREDIT,
 H_CREDIT_CYCLE, H_INJ_HEADS, H_READS, H_WRITES, H_READ_BYTES, H_WRITE_BYTES) = range(13)
N_CHAN_FIELDS = 13
# packets in ch_in / ch_out
P_TIME, P_CORE, P_DIR, P_ENTRY, P_SENT, P_ADDR = range(6)
N_PACKET_FIELDS = 6
# dch
# (DC_CAND_*: the controller's next choice, kept between visits while nothing it depends
#  on changes: request, command, the cycle it becomes legal, whether it is a row hit, and
#  whether the response ring was full when it was chosen; DC_CAND_VALID 0 = look again;
#  DC_ACTIVE_*: how many banks have requests in each queue (dact);
#  DC_RD_CMDS..DC_WRA_CMDS: column commands issued, DC_BANK_CLOSES: banks that went from
#  open to precharged (PRE, each open bank of a PREA, the auto-precharge of RDA / WRA), as
#  DRAMPower counts precharges)
(DC_WAKE, DC_RQ_COUNT, DC_WQ_COUNT, DC_DRAINING, DC_READS, DC_WRITES, DC_READ_BYTES,
 DC_WRITE_BYTES, DC_ACTS, DC_PRES, DC_REFS, DC_CMDS, DC_BUS_BUSY, DC_LAT_SUM,
 DC_LAT_N, DC_CAND_VALID, DC_CAND_K, DC_CAND_CMD, DC_CAND_AT, DC_CAND_HIT,
 DC_CAND_OUT_FULL, DC_SEQ, DC_ACTIVE_R, DC_ACTIVE_W, DC_RD_CMDS, DC_WR_CMDS, DC_RDA_CMDS,
 DC_WRA_CMDS, DC_BANK_CLOSES) = range(29)
N_DCH_FIELDS = 29
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
#  auto-precharge (RDA / WRA) closed or will close the bank)
(B_OPEN_ROW, B_HITS, B_MISSES, B_CONFLICTS, B_READS, B_WRITES, B_ACT_CYCLE,
 B_AUTO_CLOSE) = range(8)
N_DBANK_FIELDS = 8
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

# ---- tracing tables (kernels/trace.py)
# tr_ctl
TR_STOP, TR_IV_N = range(2)
N_TR_CTL = 2
# tr_dram [TD_*, slot, channel, bank]: request outcomes in the order of kernels/dram.py's
# classes, reads/writes in direction order
(TD_READS, TD_WRITES, TD_HITS, TD_MISSES, TD_CONFLICTS, TD_ACTS, TD_PRES,
 TD_BUSY) = range(8)
N_TD_FIELDS = 8
# tr_chan [TH_*, slot, channel]: queue occupancy integrals (requests x DRAM cycles),
# rank-wide commands
TH_READ_QUEUE, TH_WRITE_QUEUE, TH_PREA, TH_REF = range(4)
N_TH_FIELDS = 4
# tr_noc [net, slot, core, channel]: flits granted per link of the crossbar
NOC_REQUEST, NOC_RESPONSE = range(2)
# tr_iv [IV_*, k]: kind is a unit (isa.UNIT_*: dma_load, dma_store, systolic, vector) or
# IV_ACTIVE (the core holds a tile)
IV_KIND, IV_CORE, IV_START, IV_END = range(4)
N_IV_FIELDS = 4
IV_ACTIVE = 4
