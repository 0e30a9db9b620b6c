"""Sizing and allocating the chip state: every table of ``npusim.kernels.state``, from the
config, the program, the placement of requests on cores and what the run records (a DRAM
command log, a trace), all known up front; only the layer tables grow, when LLM serving
appends layers to a running program (``extend_state``).

One builder per unit; the NoC's tables are those of the config's NoC model only (a tuple
type per model); the tables of memory models the run does not use (the DRAM's under simple
memory) and the trace buffers of an untraced run are one-element placeholders the kernels
never touch.
"""

from __future__ import annotations

import numpy as np

from npusim.config import NpuConfig
from npusim.kernels import isa
from npusim.kernels import state as ks
from npusim.kernels.names import COMMANDS
from npusim.kernels.state import MemTables, Params
from npusim.program import Program
from npusim.scheduling import Placement

INJECTION_QUEUE = 16  # requests each network interface (noc.core_ports a core) buffers
CHANNEL_QUEUE = 32  # requests a memory channel buffers in front of its controller
CHANNEL_OUT_QUEUE = 32  # responses a channel holds while the NoC is busy
CACHE_LINE = 64  # bytes; every table starts on one (aligned_table)
CHECKED_FROM_BYTES = 1 << 24  # ensure_free checks sizes from this on (below: not worth a read)


def free_memory_bytes() -> int | None:
    """Bytes this process can still take: the kernel's MemAvailable, or what is left under
    the memory limit of its cgroup (a container's, v1 or v2) when that is less; None
    where neither can be read (not Linux)."""
    free = None
    try:
        with open("/proc/meminfo") as f:
            free = next(int(line.split()[1]) * 1024 for line in f
                        if line.startswith("MemAvailable:"))
    except (OSError, ValueError, StopIteration):
        pass
    for limit_file, used_file in _cgroup_memory_files():
        try:
            with open(limit_file) as f:
                limit = f.read().strip()
            with open(used_file) as f:
                used = int(f.read())
            if limit == "max" or int(limit) >= 1 << 60:  # no limit (v2, v1)
                continue
        except (OSError, ValueError):
            continue
        left = max(0, int(limit) - used)
        free = left if free is None else min(free, left)
    return free


def ensure_free(nbytes: int, what: str) -> None:
    """A MemoryError naming ``what`` when its ``nbytes`` (from 16 MiB on) exceed the memory
    still free: raised before anything is written, as the out-of-memory killer would end
    the run without a word once the pages were touched."""
    if nbytes < CHECKED_FROM_BYTES:
        return
    free = free_memory_bytes()
    if free is not None and nbytes > free:
        raise MemoryError(f"{what}: {nbytes / 2**30:.1f} GiB, and {free / 2**30:.1f} GiB of "
                          f"memory is free")


def _cgroup_memory_files() -> list[tuple[str, str]]:
    """(limit, usage) files of this process's memory cgroup, v2 and v1 (/proc/self/cgroup)."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    files = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                files.append((f"{root}{path}/memory.max", f"{root}{path}/memory.current"))
        elif "memory" in controllers.split(","):
            d = f"/sys/fs/cgroup/memory{path}"
            files.append((f"{d}/memory.limit_in_bytes", f"{d}/memory.usage_in_bytes"))
    return files


def aligned_table(*shape, fill=0) -> np.ndarray:
    """An int64 state table whose data starts on a cache line, so that the fixed-size
    records of a record-major table (``dreq``: two lines per request; the router
    network's VC records) never straddle one more line.

    A table larger than the memory still free is refused with a MemoryError before it is
    touched: the pages of an allocation are only taken as they are written, so the
    operating system's out-of-memory killer, not Python, would otherwise end the run,
    with no message (1024 cores with 32 VCs of 1024 flits: killed at 24 GB after 54 s)."""
    n = int(np.prod(shape))
    ensure_free(8 * (n + CACHE_LINE // 8),
                f"a state table of {' x '.join(map(str, shape))} entries")
    buf = np.empty(n + CACHE_LINE // 8, dtype=np.int64)
    skip = (-buf.ctypes.data % CACHE_LINE) // 8
    out = buf[skip:skip + n].reshape(shape)
    out.fill(fill)
    return out



def make_state(cfg: NpuConfig, prog: Program, p: Params, mt: MemTables, placement: Placement,
               *, log_commands: int = 0, trace=None) -> ks.State:
    """Zeroed state tables sized for this run.

    ``log_commands`` > 0 records up to that many DRAM commands in ``mem.cmd_log``;
    ``trace`` (a ``npusim.trace.TraceRecorder``) sizes the units' trace buffers.
    """
    glob = aligned_table(ks.N_GLOB)
    glob[ks.G_TRACE_STOP] = isa.NEVER
    glob[ks.G_WINDOW_AT] = isa.NEVER
    glob[ks.G_WINDOW_EVERY] = 1
    return ks.State(glob=glob, rings=_rings(cfg, p), cores=_cores(cfg, prog, p, placement, trace),
                    noc=_noc(cfg, p, trace), mem=_memory(cfg, p, mt, log_commands, trace))


def extend_state(st: ks.State, old: Program, prog: Program) -> ks.State:
    """The state of a run of ``old`` grown for ``prog``: the same program with layers
    appended (LLM serving adds an iteration at a time). The layer tables grow; a new
    layer waits for its predecessors that have not ended yet."""
    cores = st.cores
    L0, L = old.layer.shape[0], prog.layer.shape[0]
    ext = aligned_table(ks.N_LAYER_FIELDS, L - L0)
    ext[ks.L_START] = ext[ks.L_END] = -1
    if prog.n_tiles > old.n_tiles:
        np.add.at(ext[ks.L_TILES_LEFT], prog.tile[old.n_tiles:, isa.T_LAYER] - L0, 1)
    src = prog.edge_sources()
    dst = prog.layer_succ
    ended = np.zeros(L, dtype=bool)
    ended[:L0] = cores.layer_st[ks.L_END] >= 0
    counted = (dst >= L0) & ~ended[src]
    np.add.at(ext[ks.L_PREDS_LEFT], dst[counted] - L0, 1)
    new = prog.layer[L0:]
    if np.any((new[:, isa.L_N_PREDS] > 0) & (ext[ks.L_PREDS_LEFT] == 0)):
        raise ValueError("a new layer depends only on layers that have ended")
    layer_st = aligned_table(ks.N_LAYER_FIELDS, L)
    layer_st[:, :L0] = cores.layer_st
    layer_st[:, L0:] = ext
    ready = aligned_table(cores.ready.shape[0], max(1, L))
    ready[:, :cores.ready.shape[1]] = cores.ready
    done = cores.done
    if prog.max_template_len > done.shape[2]:
        done = aligned_table(*done.shape[:2], prog.max_template_len, fill=isa.NEVER)
        done[:, :, :cores.done.shape[2]] = cores.done
    cores.ctl[ks.CC_LAYERS_LEFT] += L - L0
    st.glob[ks.G_FINISHED] = 0
    return st._replace(cores=cores._replace(layer_st=layer_st, layer_stack=aligned_table(L + 1),
                                            ready=ready, done=done))


def _rings(cfg: NpuConfig, p: Params) -> ks.Rings:
    C, ch = cfg.num_cores, cfg.memory.channels
    cport = aligned_table(ks.N_CPORT_FIELDS, C)
    cport[ks.CP_BELL] = isa.NEVER
    mport = aligned_table(ks.N_MPORT_FIELDS, ch)
    mport[ks.MP_BELL] = isa.NEVER
    return ks.Rings(
        inj=aligned_table(ks.N_INJ_FIELDS, C, INJECTION_QUEUE * p.core_ports),
        arr=aligned_table(ks.N_ARR_FIELDS, C, 2 * p.max_outstanding + 1),  # never full
        ch_in=aligned_table(ks.N_PACKET_FIELDS, ch, CHANNEL_QUEUE),
        ch_out=aligned_table(ks.N_PACKET_FIELDS, ch, CHANNEL_OUT_QUEUE),
        cport=cport, mport=mport,
        fresh=aligned_table(2, (max(C, ch) + 63) // 64),
        bells=aligned_table(ks.N_SIDES, fill=isa.NEVER))


def _cores(cfg: NpuConfig, prog: Program, p: Params, placement: Placement, trace) -> ks.Cores:
    C = cfg.num_cores
    L = prog.layer.shape[0]
    q = max(p.ld_queue, p.st_queue)
    ctl = aligned_table(ks.N_CC_FIELDS)
    ctl[ks.CC_LAYERS_LEFT] = L
    layer_st = aligned_table(ks.N_LAYER_FIELDS, L)
    layer_st[ks.L_PREDS_LEFT] = prog.layer[:, isa.L_N_PREDS]
    if prog.n_tiles:
        np.add.at(layer_st[ks.L_TILES_LEFT], prog.tile[:, isa.T_LAYER], 1)
    layer_st[ks.L_START] = -1
    layer_st[ks.L_END] = -1
    n_parts = len(placement.partitions)
    part_st = aligned_table(ks.N_PART_FIELDS, n_parts)
    part_st[ks.PT_LAST_RANK] = -1  # time-shared: the first request comes first
    slot = aligned_table(ks.N_SLOT_FIELDS, C, 2)
    slot[ks.S_TILE] = -1
    traced = trace is not None
    return ks.Cores(
        ctl=ctl,
        ready=aligned_table(n_parts, max(1, L)),
        part_st=part_st,
        layer_st=layer_st,
        layer_stack=aligned_table(L + 1),
        core=aligned_table(ks.N_CORE_FIELDS, C),
        slot=slot,
        done=aligned_table(C, 2, prog.max_template_len, fill=isa.NEVER),
        ex_ring=aligned_table(C, p.ex_queue),
        dq=aligned_table(ks.N_DQ_FIELDS, C, 2, q),
        dq_ctl=aligned_table(ks.N_DQ_CTL_FIELDS, C, 2),
        tr_iv=aligned_table(ks.N_IV_FIELDS, trace.interval_rows if traced else 1),
        tr_core=aligned_table(2, C if traced else 1, fill=-1),
    )


def _noc(cfg: NpuConfig, p: Params, trace) -> ks.Crossbar | ks.RouterNetwork:
    """The crossbar's ports or the router network (``npusim.noc.chip``), whichever the
    config names: the tuple's type chooses the model in the kernels (``kernels/noc.py``).
    Ideal memory has no NoC: it gets a crossbar of one-element placeholders."""
    net = cfg.memory.type != "ideal"
    C, ch = cfg.num_cores, cfg.memory.channels if net else 1
    ctl = aligned_table(ks.N_NC_FIELDS)
    ctl[ks.NC_WAKE] = isa.NEVER  # nothing in flight yet
    tr_noc = (aligned_table(2, trace.ring, C, ch) if trace is not None
              else aligned_table(2, 1, 1, 1))
    if net and cfg.noc.type != "crossbar":
        from npusim.noc.chip import chip_network

        network = chip_network(cfg, skip=bool(p.skip), trace_ring=trace.ring if trace else 0,
                               trace_bin=p.trace_bin, period=p.noc_period)
        return ks.RouterNetwork(
            ctl=ctl, net=network.state, net_tab=network.tables, net_mem=network.mem,
            net_layout=network.layout, net_p=network.params,
            net_msg=aligned_table(ks.N_MSG_FIELDS, network.state.pkt.shape[1]),
            nic_due=np.full(network.params.n_nodes, isa.NEVER, dtype=np.int64), tr_noc=tr_noc)
    return ks.Crossbar(ctl=ctl, xb_ch=aligned_table(ks.N_XC_FIELDS, ch),
                       xb_core=aligned_table(ks.N_XP_FIELDS, C),
                       xb_port=aligned_table(C, p.core_ports),
                       xb_heads=aligned_table(C, (ch + 63) // 64), tr_noc=tr_noc)


def _memory(cfg: NpuConfig, p: Params, mt: MemTables, log_commands: int, trace) -> ks.Memory:
    """Ideal and simple memory's channel table, and the DRAM controller tables (one-element
    placeholders when the memory is not "dram")."""
    dram = cfg.memory.type == "dram"
    ch = cfg.memory.channels if dram else 1
    R, G, B = (p.d_ranks, p.d_bankgroups, p.d_banks) if dram else (1, 1, 1)
    nc = len(COMMANDS)
    n_win = int(mt.window_start[-1])
    max_window = max(1, int(mt.windows[:n_win, ks.W_SIZE].max()) if n_win else 1)
    n_win = max(1, n_win)
    nb = R * G * B

    dbank = aligned_table(ks.N_DBANK_FIELDS, ch, nb)
    dbank[ks.B_OPEN_ROW] = -1
    drank = aligned_table(ks.N_DRANK_FIELDS, ch, R)
    if dram:
        # refresh rank r at r/R of every tREFI, from cycle 0 on: controllers stagger ranks,
        # and starting at 0 makes the refresh phase a property of absolute time only
        drank[ks.RK_NEXT_REF] = (np.arange(R) * p.d_refi // R)[None, :]
    dch = aligned_table(ks.N_DCH_FIELDS, ch)
    # an idle channel first wakes for its first refresh (or never, without refresh)
    dch[ks.DC_WAKE] = int(drank[ks.RK_NEXT_REF].min()) if dram and p.d_refresh else isa.NEVER
    ctl = aligned_table(ks.N_MC_FIELDS)
    first = int(dch[ks.DC_WAKE].min())
    ctl[ks.MC_WAKE] = first * p.mem_period if dram and first < isa.NEVER else isa.NEVER
    dqb = aligned_table(ks.N_QB_FIELDS, ch, 2, nb)
    dqb[[ks.QB_HEAD, ks.QB_TAIL, ks.QB_OLDEST_HIT, ks.QB_OLDEST_OTHER]] = -1
    # free slots, popped from the end: slot 0 (reads) and slot rq (writes) go first
    dfree = aligned_table(ch, 2, max(p.d_rq, p.d_wq), fill=-1)
    dfree[:, 0, :p.d_rq] = np.arange(p.d_rq)[::-1]
    dfree[:, 1, :p.d_wq] = p.d_rq + np.arange(p.d_wq)[::-1]
    traced = trace is not None
    ring = trace.ring if traced else 1
    # a trace logs the DRAM's commands in its window; without DRAM nothing is logged, but
    # the loop still checks the log has room
    if traced:
        log_commands = trace.log_rows if dram else p.n_channels + 2
    return ks.Memory(
        ctl=ctl,
        chan=aligned_table(ks.N_CHAN_FIELDS, cfg.memory.channels if not dram else 1),
        dch=dch, dreq=aligned_table(ch, p.d_rq + p.d_wq, ks.N_DREQ_FIELDS), dbank=dbank, drank=drank,
        dqb=dqb, dact=aligned_table(ch, 2, nb), dpick=aligned_table(ks.N_PK_FIELDS, ch, 2, nb, fill=isa.NEVER),
        dgroup=aligned_table(ks.N_GB_FIELDS, ch, nb), dfree=dfree,
        rdy_rank=aligned_table(ch, R, nc), rdy_group=aligned_table(ch, R * G, nc),
        rdy_bank=aligned_table(ch, nb, nc),
        win=aligned_table(ch, n_win, nb, max_window),
        win_ctl=aligned_table(2, ch, n_win, nb), lat_hist=aligned_table(ch, ks.LAT_BINS),
        cmd_log=aligned_table(ks.N_LOG_FIELDS, log_commands),
        tr_dram=aligned_table(ks.N_TD_FIELDS, ring, ch, nb),
        tr_chan=aligned_table(ks.N_TH_FIELDS, ring, ch),
        tr_bank=aligned_table(ch, nb) if traced else aligned_table(1, 1),
        tr_dch=aligned_table(ch if traced else 1),
        tr_dur=trace.durations.copy() if traced else aligned_table(nc),
    )
