"""The run driver: builds a run's inputs, calls the kernels chunk by chunk, and hands back
what the run left behind.

Python does per-run and per-chunk work only: the kernel ``run`` advances the simulation by a
bounded number of loop iterations and returns, so a progress bar can update in between;
chunk boundaries never change results. The inputs come from their own modules: the time
base and Params (``npusim.params``), the DRAM's compiled tables (``npusim.dram.tables``),
the state tables (``npusim.state``) and, when traced, the recorder (``npusim.trace``).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import numpy as np

from npusim.config import NpuConfig
from npusim.dram.tables import memory_tables
from npusim.errors import NpusimError
from npusim.kernels import isa
from npusim.kernels import state as ks
from npusim.kernels.state import Params, ProgramArrays, State
from npusim.params import TimeBase, make_params
from npusim.program import Program
from npusim.scheduling import Placement, place
from npusim.state import extend_state, make_state

ITERATIONS_PER_CALL = 1 << 18  # event steps between progress updates


def program_arrays(prog: Program, cfg: NpuConfig, placement: Placement) -> ProgramArrays:
    vlat = np.array([cfg.core.vector.latency[op] for op in isa.VECTOR_OPS], dtype=np.int64)
    return ProgramArrays(prog.inst, prog.tile, prog.group, prog.layer, prog.layer_succ,
                         prog.release_order, vlat, placement.req, placement.core_part)


@dataclass
class RawRun:
    """What a run leaves behind: the final state plus how long it took."""

    state: State
    params: Params
    timebase: TimeBase
    wall_seconds: float
    compile_seconds: float
    trace: object = None  # the npusim.trace.TraceRecorder, when traced
    fast: object = None  # the npusim.fast.FastForward of a fast-fidelity run


class EngineRun:
    """A simulation in progress: chip state plus the program it runs.

    ``advance`` runs until the program is done or a layer marked with :meth:`notify_on`
    ends; the caller may then :meth:`extend` the program with more layers (the same
    ProgramBuilder, built again) and advance again. This is how LLM serving adds one
    iteration at a time, each shaped by what happened before it.
    """

    def __init__(self, prog: Program, cfg: NpuConfig, *, skip: bool = True,
                 placement: Placement | None = None, log_commands: int = 0, trace=None):
        from npusim.kernels.loop import run  # imported here: numba loads only when simulating

        self._run = run
        self.cfg = cfg
        self.placement = placement or place(cfg, [0] * prog.n_requests)
        self.tb = TimeBase.of(cfg)
        self.recorder = None
        if trace is not None:
            from npusim.trace.record import TraceRecorder

            self.recorder = TraceRecorder(trace, cfg, prog, self.tb)
        self.p = make_params(cfg, self.tb, skip, self.recorder)
        self.mt = memory_tables(cfg)
        self.prog = prog
        self.st = make_state(cfg, prog, self.p, self.mt, self.placement,
                             log_commands=log_commands, trace=self.recorder)
        self.pa = program_arrays(prog, cfg, self.placement)
        self.fast = None
        if cfg.fidelity == "fast":
            from npusim.fast import FastForward

            self.fast = FastForward(self.tb, cfg.num_cores)
            self.fast.watch(self)
        if self.recorder is not None:
            self.recorder.start(self.st)
        t0 = time.perf_counter()
        _ensure_compiled(run, self.st, self.pa, self.mt, self.p)
        if self.recorder is not None:
            self.recorder.compile(self.st, self.p)
        self.compile_seconds = time.perf_counter() - t0
        self.wall_seconds = 0.0

    @property
    def now_cycle(self) -> int:
        """The core cycle the run has reached (in fast fidelity, with the time extrapolated
        before it)."""
        offset = self.fast.offset if self.fast is not None else 0
        return int((self.st.glob[ks.G_NOW] + offset) // self.tb.core_period)

    def layer_end_cycle(self, layer: int) -> int:
        """The core cycle ``layer`` ended, -1 if it has not (extrapolated time included)."""
        end = int(self.st.cores.layer_st[ks.L_END, layer])
        if end < 0:
            return -1
        if self.fast is not None:
            end = self.fast.real_end(self.st, layer)
        return end // self.tb.core_period

    @property
    def finished(self) -> bool:
        return bool(self.st.glob[ks.G_FINISHED])

    def notify_on(self, layers) -> None:
        """Make :meth:`advance` return when any of ``layers`` ends."""
        layers = np.asarray(layers, dtype=np.int64)
        notify = self.st.cores.layer_st[ks.L_NOTIFY]
        notify[layers] = np.maximum(notify[layers], ks.NOTIFY_AFTER_STEP)
        if self.fast is not None:  # (it may have claimed some: kept when it lets go)
            self.fast.notified(layers)

    def advance(self, progress: Callable[[int, int, int], None] | None = None) -> bool:
        """Run on; True if stopped because a notify layer ended, False when all is done.

        ``progress(layers_done, layers_total, core_cycles)`` is called between kernel chunks.
        """
        st, tb = self.st, self.tb
        total = self.prog.layer.shape[0]
        t1 = time.perf_counter()
        try:
            while not self.finished:
                code = self._run(st, self.pa, self.mt, self.p, ITERATIONS_PER_CALL)
                if code == 1:
                    raise NpusimError(_deadlock_message(st, self.prog, tb))
                if self.recorder is not None:
                    self.recorder.drain(st, self.p)
                if self.fast is not None and not self.finished and code in (2, 3):
                    self.fast.paused(self)  # where it asked to stop: chunk ends change nothing
                if code == 2:
                    return True
                if progress is not None:
                    cycle = st.glob[ks.G_END] if self.finished else st.glob[ks.G_NOW]
                    progress(total - int(st.cores.ctl[ks.CC_LAYERS_LEFT]), total,
                             int(cycle // tb.core_period))
            return False
        finally:
            self.wall_seconds += time.perf_counter() - t1

    def extend(self, prog: Program) -> None:
        """Continue with ``prog``: the program run so far with layers appended (new root
        layers must be released after the current cycle)."""
        old, L0 = self.prog, self.prog.layer.shape[0]
        if L0 and not np.array_equal(prog.layer[:L0, :isa.L_SUCC_START],
                                     old.layer[:, :isa.L_SUCC_START]):
            raise ValueError("extend() needs the same program with layers appended")
        new = prog.layer[L0:]
        roots = new[:, isa.L_N_PREDS] == 0
        if np.any(new[roots, isa.L_RELEASE] <= self.now_cycle):
            raise ValueError("new root layers must be released after the current cycle")
        released = int(self.st.cores.ctl[ks.CC_RELEASED])
        if not np.array_equal(prog.release_order[:released], old.release_order[:released]):
            raise ValueError("extend() would reorder layers already released")
        self.st = extend_state(self.st, old, prog)
        self.prog = prog
        self.pa = program_arrays(prog, self.cfg, self.placement)
        if self.fast is not None:
            self.fast.watch(self, L0)
            self.release_offset_changed()
        if self.recorder is not None:
            self.recorder.prog = prog

    def skip_layers(self, layers) -> None:
        """Fast fidelity: end ``layers`` (none of them handed to a core yet) unrun."""
        from npusim.kernels.scheduler import skip_layers

        with self._pause_kept():
            skip_layers(self.st.cores, self.pa, np.asarray(layers, dtype=np.int64),
                        self.st.glob[ks.G_NOW])

    def skip_groups(self, layer: int, end: int) -> int:
        """Fast fidelity: drop ``layer``'s groups not yet handed out, up to group ``end``
        (exclusive); returns the tiles dropped."""
        from npusim.kernels.scheduler import skip_groups

        with self._pause_kept():
            return int(skip_groups(self.st.cores, self.pa, np.int64(layer), np.int64(end),
                                   self.st.glob[ks.G_NOW]))

    @contextmanager
    def _pause_kept(self):
        """Layers ended from Python, at a pause, ask for no pause of their own: their
        notifications would tell the next call that the present tick was stepped (or all
        but its hand-out), when at a steady window's pause none of it was."""
        ctl = self.st.cores.ctl
        pause = int(ctl[ks.CC_PAUSE])
        try:
            yield
        finally:
            ctl[ks.CC_PAUSE] = pause

    def release_offset_changed(self) -> None:
        """Fast fidelity: requests still to arrive come earlier in simulated time by what
        was extrapolated (the program's rows keep the arrival the user gave)."""
        layer = self.prog.layer
        waiting = self.prog.release_order[int(self.st.cores.ctl[ks.CC_RELEASED]):]
        if self.fast.offset and len(waiting):
            layer = layer.copy()
            P = self.tb.core_period
            now = int(self.st.glob[ks.G_NOW] // P)
            layer[waiting, isa.L_RELEASE] = np.maximum(
                layer[waiting, isa.L_RELEASE] - self.fast.offset // P, now + 1)
        self.pa = self.pa._replace(layer=layer)

    def result(self) -> "RawRun":
        st = self.fast.final_state(self.st) if self.fast is not None else self.st
        return RawRun(st, self.p, self.tb, self.wall_seconds, self.compile_seconds,
                      self.recorder, self.fast)


def run_program(prog: Program, cfg: NpuConfig, skip: bool = True,
                progress: Callable[[int, int, int], None] | None = None,
                log_commands: int = 0, placement: Placement | None = None,
                trace=None) -> RawRun:
    """Simulate ``prog`` on ``cfg`` to completion.

    ``progress(layers_done, layers_total, core_cycles)`` is called between kernel chunks.
    ``trace`` (``npusim.trace.TraceOptions``) records a trace, drained between chunks.
    """
    run = EngineRun(prog, cfg, skip=skip, placement=placement, log_commands=log_commands,
                    trace=trace)
    while run.advance(progress):
        pass
    return run.result()


_compiled: set[tuple] = set()


def _ensure_compiled(run, st, pa, mt, p) -> float:
    """Compile (or load from cache) the kernel for these argument types; returns seconds.
    The key is numba's types, not the tuples' classes: the NoC model is the type of
    ``st.noc`` (``kernels/noc.py``), so one ``State`` class has a loop per model, and a
    fast-fidelity or traced run's ``p`` is a class of its own (``state.params_class``), and
    so a loop of its own."""
    from numba import typeof

    key = tuple(typeof(x) for x in (st, pa, mt, p, np.int64(0)))
    if key in _compiled:
        return 0.0
    t = time.perf_counter()
    run.compile(key)
    _compiled.add(key)
    return time.perf_counter() - t


def _deadlock_message(st: State, prog: Program, tb: TimeBase) -> str:
    stuck = [prog.layers[i].name for i in range(prog.layer.shape[0])
             if st.cores.layer_st[ks.L_END, i] < 0]
    return (f"simulation stalled at core cycle {int(st.glob[ks.G_NOW] // tb.core_period)} with "
            f"{len(stuck)} layers unfinished (first: {stuck[:3]}); this is an npusim bug, "
            f"please report it with the model and config")
