"""The main loop: the units stepped in lockstep, skipping ahead to the next event.

The chip is three units joined by rings (``state.py``, ``ports.py``): the cores
(``cores.py``), the NoC (``noc.py``) and the memory (``memory.py``). Each runs on its own
clock edges of the global time base, in the fixed order memory -> NoC -> cores within a
tick, and keeps the tick at which it may next change state (its wake, lowered by the bells
the other units ring); the loop jumps to the earliest one. With ``p.skip == 0`` the loop
instead visits every edge of every domain and steps every unit, which must give
bit-identical results (a test checks it). With ideal memory there is no NoC: the memory
unit serves the cores' rings itself (``ideal_memory.py``).

This file only composes the units: it calls their step and wake functions (and asks the
cores whether layers are left or a layer asked for a pause) and touches no table but its
own ``glob``.
"""

from numba.extending import overload

from .jit import MODEL_OPTIONS, entry, kernel

from . import isa
from .cores import (cores_activity, cores_hand_out, cores_start, cores_step, cores_streaming,
                    cores_wake, layers_left, paused, paused_before_hand_out, resume)
from .memory import memory_step, memory_wake
from .names import MEM_IDEAL
from .noc import noc_step, noc_wake
from .state import *  # noqa: F403  (field indices of the state tables)
from .timebase import align_up, on_edge
from .trace import trace_must_stop


def fast_fidelity(p):
    """Whether ``p`` is a fast-fidelity run's Params (kernels only: numba answers it by the
    class of ``p`` while it types the caller, ``_fast_fidelity_of``)."""
    raise TypeError("fast_fidelity is called by kernels only")


@overload(fast_fidelity, jit_options=MODEL_OPTIONS)
def _fast_fidelity_of(p):
    """A constant, by the class of ``p`` (``state.params_class``): the full-fidelity loop
    holds no window code at all, as the loop holds only its NoC model's (``noc.py``)."""
    if getattr(getattr(p, "instance_class", None), "fast", False):
        return lambda p: True
    return lambda p: False


@kernel
def _next_tick(chip, prog, p, t):
    """The next tick anything may change: the next edge of every domain without skipping,
    else the earliest wake of any unit (isa.NEVER if none)."""
    if p.skip == 0:
        nxt = min(align_up(t + 1, p.core_period), align_up(t + 1, p.mem_period))
        if p.mem_type != MEM_IDEAL:
            nxt = min(nxt, align_up(t + 1, p.noc_period))
        return nxt
    nxt = min(cores_wake(chip.cores, chip.rings, prog, p), memory_wake(chip.mem, chip.rings, p))
    if p.mem_type != MEM_IDEAL:
        nxt = min(nxt, noc_wake(chip.noc, chip.rings))
    return max(nxt, t + 1)


@kernel(inline=True)
def _window_clip(chip, p, t, nxt):
    """Fast fidelity: the next tick no later than the end of the window (a window ends where
    it would without skipping); ``nxt`` itself in full fidelity. Kept out of ``_next_tick``,
    which full and fast loops then share as the same code (with it inside, the fast loop ran
    9-18% slower per event step than the full one on the same events)."""
    if fast_fidelity(p) and nxt < isa.NEVER:
        return max(min(nxt, chip.glob[G_WINDOW_AT]), t + 1)
    return nxt


@kernel(out_of_line=True)
def _window_steady(chip, t):
    """Fast fidelity: a window of G_WINDOW ticks ended before tick t. True (return to Python,
    ``npusim.fast.streams``) if no core's activity changed in it, it is the first or every
    G_WINDOW_EVERY-th such window in a row, and some core has DMA requests still to send:
    a stretch without (compute only, or requests all sent) has no stream to cut, and no
    stream can start in it without a core's activity changing. (ResNet-18's 64-point sweep
    paused 42,015 times in fast fidelity, mostly in such stretches: 7% of its CPU time.)"""
    glob = chip.glob
    glob[G_WINDOW_AT] = t + glob[G_WINDOW]
    sig = cores_activity(chip.cores)
    if sig != glob[G_WINDOW_SIG]:
        glob[G_WINDOW_SIG] = sig
        glob[G_WINDOW_STEADY] = 0
        return False
    glob[G_WINDOW_STEADY] += 1
    return (glob[G_WINDOW_STEADY] > 0
            and (glob[G_WINDOW_STEADY] - 1) % glob[G_WINDOW_EVERY] == 0
            and cores_streaming(chip.cores))


@entry
def run(chip, prog, mt, p, max_iterations):
    """Advance by at most ``max_iterations`` event steps.

    Returns 0 (chunk done, or finished: ``G_FINISHED``), 1 on deadlock, 2 when a layer
    marked ``L_NOTIFY`` has ended (the caller may then add layers, e.g. the next step of an
    LLM; marked ``NOTIFY_BEFORE_HAND_OUT``, the tick's tiles are handed out when the call
    after resumes, ``cores_step``), or 3 at the end of a steady window (fast fidelity:
    ``npusim.fast.streams``). A call again resumes where the last stopped: at the tick a 0
    or 3 stopped before stepping, after the tick a 2 stepped (all of it, or all but its
    hand-out). Stopping between two steps never changes results, so the caller may update
    a progress bar between calls; fast fidelity looks at the run only where it asked to
    stop (2 and 3), never at the end of a chunk, so that how the run is cut into chunks (a
    trace's buffers, the chunk length) changes nothing either.
    """
    glob, rg, cores = chip.glob, chip.rings, chip.cores
    t = glob[G_NOW]
    if glob[G_STARTED] == 0:
        glob[G_STARTED] = 1
        cores_start(cores, prog)
    elif paused(cores):  # tick t was done before the pause (or all but its hand-out)
        held = paused_before_hand_out(cores)
        resume(cores)
        if held:
            cores_hand_out(cores, rg, prog, mt, p, t)
        if layers_left(cores) > 0:
            t = _window_clip(chip, p, t, _next_tick(chip, prog, p, t))
            if t >= isa.NEVER:
                return 1
    iterations = 0
    # the next edge of each clock domain at or after t (on_edge: no division per step)
    mem_edge = align_up(t, p.mem_period)
    noc_edge = align_up(t, p.noc_period)
    core_edge = align_up(t, p.core_period)
    while layers_left(cores) > 0:
        if iterations >= max_iterations:
            glob[G_NOW] = t
            return 0
        if trace_must_stop(chip, p, t):  # Python drains the trace buffers
            glob[G_NOW] = t
            return 0
        if fast_fidelity(p) and t >= glob[G_WINDOW_AT] and _window_steady(chip, t):
            glob[G_NOW] = t
            return 3
        iterations += 1
        glob[G_STEPS] += 1
        mem_due, mem_edge = on_edge(t, mem_edge, p.mem_period)
        noc_due, noc_edge = on_edge(t, noc_edge, p.noc_period)
        core_due, core_edge = on_edge(t, core_edge, p.core_period)
        if mem_due and (p.skip == 0 or memory_wake(chip.mem, rg, p) <= t):
            memory_step(chip.mem, rg, mt, p, t)
        if (noc_due and p.mem_type != MEM_IDEAL
                and (p.skip == 0 or noc_wake(chip.noc, rg) <= t)):
            noc_step(chip.noc, rg, p, t)
        if core_due:
            cores_step(cores, rg, prog, mt, p, t)
        if paused(cores):
            glob[G_NOW] = t
            return 2
        if layers_left(cores) == 0:
            break
        nxt = _window_clip(chip, p, t, _next_tick(chip, prog, p, t))
        if nxt >= isa.NEVER:
            glob[G_NOW] = t
            return 1
        t = nxt
    glob[G_NOW] = t
    glob[G_END] = t
    glob[G_FINISHED] = 1
    return 0
