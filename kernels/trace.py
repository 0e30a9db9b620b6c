"""Trace recording: the kernels' side of ``npusim.trace``.

The units call hooks (``trace_hook``), which are kernels in a traced run and nothing in any
other: whether a run traces is the class of its ``p`` (``state.params_class``), so an
untraced run's kernels hold no trace code at all and numba never types it for them. Each
unit keeps its own buffers (``st`` is the unit's tuple): the cores their activity
intervals, the NoC its link counters, the memory its DRAM counters and command log.

Two kinds of buffers, both preallocated and drained by Python between kernel calls (so
trace size never bounds run length):

- binned rings ``tr_dram``, ``tr_chan``, ``tr_noc``: counters per time bin of
  ``p.trace_bin`` ticks, at slot ``bin % capacity``. Events land in the bin of the tick
  they happen at. A bank's busy time is spread over the bins it spans, at most the longest
  command duration ahead of now; queue occupancy is added up to the present when a channel
  is stepped (or by ``trace_sync`` before a drain). Python drains only bins before the
  present and stops the loop (``G_TRACE_STOP``) before a write could reach a slot not yet drained.
- an interval log ``tr_iv``: (kind, core, start, end) rows of core activity, binned by
  Python, so intervals far in the future (a long GEMM issued now) need no look-ahead.

Bank busy (``TD_BUSY``, DRAM cycles): a bank is busy from the issue of a command to it
until that command's work is done, ``tr_dur[cmd]`` cycles later (ACT: tRCD, RD: CL + BL,
WR: CWL + BL, PRE: tRP, ...; see ``npusim.trace.record.command_durations``). Overlapping
commands count once; PREA and REF make every bank of their rank busy.
"""

import inspect

from numba.extending import overload

from .jit import MODEL_OPTIONS, entry, kernel
from .names import ACT, PRE, PREA, REF
from .state import *  # noqa: F403  (field indices of the state tables)


def trace_hook(fn=None, *, untraced=None, inline=False):
    """Make ``fn`` (a kernel with an argument ``p``) a trace hook: called with a traced run's
    Params it is ``fn`` (a kernel, ``inline`` into its callers by LLVM); with any other it
    returns ``untraced`` and compiles to nothing.

    numba chooses while it types the caller (an ``overload`` looking at the class of
    ``p``), so an untraced run neither types nor compiles the hook's body: a run-time
    ``if`` around the hooks, never taken, still cost 2.3 of the first run's 30 compile
    seconds, as numba types both sides of every branch."""
    if fn is None:
        return lambda f: trace_hook(f, untraced=untraced, inline=inline)
    body = kernel(fn, inline=inline, ir_inline=False)  # (the call below passes *args)
    at = list(inspect.signature(fn).parameters).index("p")

    def hook(*args):
        raise TypeError(f"{fn.__name__} is called by kernels only")

    @overload(hook, jit_options=MODEL_OPTIONS)
    def _hook_of(*args):
        if getattr(getattr(args[at], "instance_class", None), "traced", False):
            return lambda *args: body(*args)
        return lambda *args: untraced

    hook.__name__, hook.__qualname__, hook.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    return hook


@kernel
def _slot(ring, p, tick):
    """The slot of a binned ring (``ring`` slots) that tick ``tick`` counts into."""
    return (tick // p.trace_bin) % ring


@kernel
def _next_bin_cycle(p, d):
    """First DRAM cycle of the bin after the one DRAM cycle d (by its start tick) is in."""
    b = d * p.mem_period // p.trace_bin
    return -(-((b + 1) * p.trace_bin) // p.mem_period)


@trace_hook(untraced=False)
def trace_must_stop(chip, p, t):
    """Whether the loop must return before tick t so Python can drain the buffers: the
    stop tick is reached, or the cores' interval log or the memory's command log could
    fill up in the next step."""
    return (t >= chip.glob[G_TRACE_STOP]
            or chip.cores.ctl[CC_IV_N] + 4 * p.n_cores + 4 > chip.cores.tr_iv.shape[1]
            or chip.mem.ctl[MC_LOG_N] + p.n_channels + 1 > chip.mem.cmd_log.shape[1])


@trace_hook
def trace_interval(st, p, kind, core, start, end):
    """Append one core activity interval [start, end) (ticks) to the cores' log."""
    n = st.ctl[CC_IV_N]
    st.tr_iv[IV_KIND, n] = kind
    st.tr_iv[IV_CORE, n] = core
    st.tr_iv[IV_START, n] = start
    st.tr_iv[IV_END, n] = end
    st.ctl[CC_IV_N] = n + 1


@trace_hook
def trace_dma_issue(st, p, c, d, t):
    """DMA d of core c gets an instruction at tick t: it turns busy if it was empty."""
    if st.dq_ctl[D_COUNT, c, d] == 0:
        st.tr_core[d, c] = t


@trace_hook
def trace_dma_response(st, p, c, d, t):
    """After a response: DMA d of core c falls idle once its queue is empty."""
    if st.dq_ctl[D_COUNT, c, d] == 0 and st.tr_core[d, c] >= 0:
        trace_interval(st, p, d, c, st.tr_core[d, c], t)
        st.tr_core[d, c] = -1


@trace_hook(untraced=True)
def trace_in_log_window(p, cyc):
    """Whether a DRAM command at cycle ``cyc`` goes into the command log."""
    tick = cyc * p.mem_period
    return p.trace_log_from <= tick < p.trace_log_to


@kernel
def _bank_busy(st, p, ch, nb, start, end):
    """Bank nb of channel ch is busy over DRAM cycles [start, end)."""
    d = max(start, st.tr_bank[ch, nb])
    if end <= d:
        return
    st.tr_bank[ch, nb] = end
    while d < end:
        nxt = min(end, _next_bin_cycle(p, d))
        st.tr_dram[TD_BUSY, _slot(st.tr_dram.shape[1], p, d * p.mem_period), ch, nb] += nxt - d
        d = nxt


@trace_hook
def trace_dram_command(st, p, ch, rank, nb, cmd, cyc):
    """Counters and bank busy time of a DRAM command issued at DRAM cycle ``cyc``."""
    s = _slot(st.tr_dram.shape[1], p, cyc * p.mem_period)
    if cmd == ACT:
        st.tr_dram[TD_ACTS, s, ch, nb] += 1
    elif cmd == PRE:
        st.tr_dram[TD_PRES, s, ch, nb] += 1
    elif cmd == PREA:
        st.tr_chan[TH_PREA, s, ch] += 1
    elif cmd == REF:
        st.tr_chan[TH_REF, s, ch] += 1
    end = cyc + st.tr_dur[cmd]
    if cmd == PREA or cmd == REF:
        n = p.d_bankgroups * p.d_banks
        for i in range(rank * n, (rank + 1) * n):
            _bank_busy(st, p, ch, i, cyc, end)
    else:
        _bank_busy(st, p, ch, nb, cyc, end)


@trace_hook
def trace_request_class(st, p, ch, nb, cls, cyc):
    """A request's first command at ``cyc`` decided it: row hit, miss or conflict."""
    st.tr_dram[TD_HITS + cls, _slot(st.tr_dram.shape[1], p, cyc * p.mem_period), ch, nb] += 1


@trace_hook
def trace_request_done(st, p, ch, nb, d, cyc):
    """A read (d = 0) or write issued its last burst at ``cyc``."""
    st.tr_dram[TD_READS + d, _slot(st.tr_dram.shape[1], p, cyc * p.mem_period), ch, nb] += 1


@trace_hook
def trace_queues(st, p, ch, cyc):
    """Add channel ch's queue occupancy from where it was last added up to ``cyc``.

    The queue counts change only while the channel is stepped, so they held constant
    since the last call."""
    d = st.tr_dch[ch]
    if cyc <= d:
        return
    rq = st.dch[DC_RQ_COUNT, ch]
    wq = st.dch[DC_WQ_COUNT, ch]
    st.tr_dch[ch] = cyc
    if rq + wq == 0:
        return
    while d < cyc:
        nxt = min(cyc, _next_bin_cycle(p, d))
        s = _slot(st.tr_dram.shape[1], p, d * p.mem_period)
        st.tr_chan[TH_READ_QUEUE, s, ch] += rq * (nxt - d)
        st.tr_chan[TH_WRITE_QUEUE, s, ch] += wq * (nxt - d)
        d = nxt


@trace_hook
def trace_flits(st, p, net, c, ch, flits, t):
    """The crossbar granted a packet of ``flits`` on the link between core c and channel ch."""
    st.tr_noc[net, _slot(st.tr_noc.shape[1], p, t), c, ch] += flits


@entry
def trace_sync(st, p, t):
    """Bring the queue occupancy of every DRAM channel up to tick t (before a drain)."""
    cyc = -(-t // p.mem_period)
    for ch in range(st.tr_dch.shape[0]):
        trace_queues(st, p, ch, cyc)
