"""The two decorators every kernel uses, and the notice shown while kernels compile.

``entry`` marks the few kernels Python calls (the main loop, the trace sync, the DRAM
replay, fast fidelity's cuts); ``kernel`` every other one, which only kernels call. Both compile without numba's
reference-counting runtime (``_nrt=False``): kernels only read and write preallocated
arrays (they never allocate or return arrays), so there is nothing to count, and counting
cost more than the simulation itself (every call between kernels incremented and
decremented each state array with atomic instructions: 15x slower per event step).

Only entry points are cached on disk (``cache=True``); an entry's cached machine code holds
every kernel it calls. A ``kernel`` is compiled only while an entry that calls it compiles,
and without numba's Python wrapper: for a kernel taking the State, MemTables and Params
tuples that wrapper (unboxing some hundred arrays and integers) cost more compile time than
the kernel, and nothing used it. Python (a test) may still call a kernel: the first call
compiles a twin with the wrapper (``Kernel.__call__``). Nor is a kernel's code optimised or
turned into machine code on its own (``_LinkedOnlyLibrary``): only the entry point that
links it does that, once. numba did it for every kernel and again at every level above it,
a fifth of a cold compile (the first ``simulate``: 80.5 and 81.1 CPU s before, 63.0 and
69.9 after, alternated; warm speed 0.90-1.01x of before on the engine, DRAM replay and
Llama cases).

Every kernel is inlined into its callers unless it is ``out_of_line``. The tuples of
tables go by reference (``tables_type.py``: a call passes one pointer per tuple), and LLVM's
inliner, left to judge, then kept some twenty small kernels of the event-step path out of
line (the DRAM's bank bookkeeping, ``_next_tick``, the cores' sends and wakes), and the
2-layer Llama step ran 6.5% slower than before the change (3% with them inlined and the
pointers marked ``readonly``). Before, when each call passed every array of its tuples (a
few hundred words), its judgment had inlined them all, for the size of the call.

How a kernel is inlined depends on its size. numba's IR-level inliner (``inline="always"``)
deep-copies the callee's IR once per block, scope included, so its cost grows with blocks x
variables of what it inlines, and again at every level of nesting: when every inlined
kernel went that way, the DRAM controller, four levels deep under the main loop, took 70 of
the 130 CPU seconds of a cold compile (tests/benchmarks/bench_compile.py). Small kernels
(ring accessors, the units' wake dispatchers: ``IR_INLINE_INSTRUCTIONS``, counted with the
kernels inlined into them that way in turn) are still inlined that way, which costs little
and saves each a compile of its own; larger ones are compiled once each and inlined by
LLVM (``forceinline``: LLVM's ``alwaysinline``). The inliner builds a callee's IR once per
process (``_InlineKernels``), not once per call site as numba does.
Inlining every kernel by LLVM compiled as fast but ran the engine 20-35% slower (DRAM replay,
MatMul: A/B against numba-IR inlining); the split runs as fast as inlining all at IR level.

``out_of_line=True`` makes a kernel a call of its own for good (LLVM's ``noinline``), where
that was measured faster: ``core._issue``, whose inlining into the main loop made the Llama
step 7-8% slower; the crossbar's ``_next_response_channel`` and the DRAM's
``_rank_earliest``, which LLVM inlined into the loop once it saw kernels before their own
optimisation (``_LinkedOnlyLibrary``), and the MatMul on ``mobile`` ran 1.37x slower (LLVM
had kept them out of line before).
"""

import dis
import sys
from functools import partial

from numba import njit
from numba.core import event
from numba.core.codegen import JITCodeLibrary
from numba.core.compiler import Compiler
from numba.core.compiler_machinery import register_pass
from numba.core.inline_closurecall import InlineWorker
from numba.core.untyped_passes import InlineInlinables
from numba.core.registry import CPUDispatcher

from .tables_type import mark_tables_arguments

# What a cold compile of the kernels a run needs usually costs (tests/benchmarks/
# bench_compile.py: CPU seconds of the first `npusim simulate` on the 2-core machines the
# project is measured on: 27-30 s on one host, 43-70 s on a slower one, 65-86 s there on
# 2026-11-29 at load 0.5-3, before the inlining by expanded size; 32-38 s on a third on
# 2026-11-30 at load 1-2, where the code before took 42-46 s, and 33-40 s there once the
# tables went by reference, against 35-48 s before it); the notice quotes it so that
# a silent first run does not look hung. A run of another kind (a router network, fast
# fidelity, a trace, the DRAM replay) compiles its own loop on its first use, about as long
# or up to twice.
USUAL_COMPILE_SECONDS = (30, 60)
COMPILE_NOTICE = ("npusim: compiling the simulation kernels this kind of run needs, once per "
                  "install (usually {}-{} s; `npusim compile` builds them all ahead of "
                  "time)".format(*USUAL_COMPILE_SECONDS))


class Kernel(CPUDispatcher):
    """A kernel only kernels call: no Python wrapper and no cache of its own.

    numba still compiles a copy per constant a caller passes (an integer or bool literal is
    typed ``Literal[...]``): two copies of the DRAM command issue, six of one address-field
    kernel, 1-2 s of a cold compile. Typing calls with plain values instead saved that but
    made the 16-channel HBM2 replay and the Llama step 15% slower (measured A/B), presumably
    as constants such as ``_oldest_after``'s ``hit`` flag, folded into copies of kernels
    LLVM leaves out of line, became tests in their loops.
    """

    out_of_line = False  # kernel(out_of_line=True): LLVM never inlines it
    ir_size = 0  # bytecode instructions, with those of kernels inlined at numba-IR level

    def add_overload(self, cres):
        """A copy just compiled: an ``out_of_line`` kernel's function is marked ``noinline``
        before any caller links it (numba's options offer only forcing inlining)."""
        if self.out_of_line:
            lib = cres.library
            lib._ensure_finalized()
            lib._final_module.get_function(cres.fndesc.llvm_func_name).add_function_attribute(
                "noinline")
        super().add_overload(cres)

    def __call__(self, *args):
        """From Python (tests): through a twin compiled with the Python wrapper on first use."""
        twin = self.__dict__.get("_from_python")
        if twin is None:
            twin = self._from_python = njit(cache=True, _nrt=False)(self.py_func)
        return twin(*args)


# Inlined kernels of at most this many bytecode instructions, counting those of the kernels
# inlined into them at numba-IR level in turn (``_ir_size``), are inlined at numba-IR level,
# larger ones by LLVM (module docstring). numba's inliner copies the callee as expanded, once
# per block with every variable of its scope, so the cost grows with the square of that
# size: counting a kernel's own instructions only, the crossbar's step (167 of its own, 1,566
# expanded) and the DRAM's FR-FCFS choice went the IR way, and copying them took 5 of a cold
# compile's 35 CPU s. Each compile of its own costs 0.1-2 s (numba's typing and lowering,
# LLVM's function passes). Before sizes were expanded, at 250 the MatMul engine case ran 7%
# faster than all-IR inlining, at 160 4% slower.
IR_INLINE_INSTRUCTIONS = 250


def _ir_size(fn) -> int:
    """Bytecode instructions of ``fn`` with those of the kernels inlined into it at numba-IR
    level, once per call (each call gets a copy), as decorated so far (a kernel calls
    kernels defined above it or imported)."""
    code = list(dis.get_instructions(fn))
    size = len(code)
    for ins in code:
        callee = fn.__globals__.get(ins.argval) if ins.opname == "LOAD_GLOBAL" else None
        if isinstance(callee, Kernel) and callee.targetoptions.get("inline") == "always":
            size += callee.ir_size
    return size


class _EntryLibrary(JITCodeLibrary):
    """numba's library of an entry point, with the tables arguments marked
    (``tables_type.mark_tables_arguments``)."""

    def add_ir_module(self, ir_module):
        mark_tables_arguments(ir_module, getattr(self._codegen, "_target_data", None))
        super().add_ir_module(ir_module)


class _LinkedOnlyLibrary(_EntryLibrary):
    """The code of a kernel only kernels call: kept as LLVM IR for its callers to link.

    numba finalises every function it compiles as if Python were to call it: it optimises
    the module (the kernel with everything it links) and emits its machine code. A kernel's
    code runs only inside an entry point, whose finalisation links it and optimises the
    whole again, so that work was done once per kernel and again at every level above it.
    Here a kernel's own functions still get LLVM's function passes (when numba adds them;
    without them the entry's optimisation took longer than all of this saved) and the
    modules of the kernels it calls are linked in, but nothing more: the entry point
    optimises and emits everything once."""

    @property
    def codegen(self):
        return _CodegenOfLinkedOnly(self._codegen)

    def _optimize_final_module(self):
        pass

    def _finalize_final_module(self):
        self._finalize_dynamic_globals()
        self._finalized = True  # no machine code: not added to the execution engine


class _CodegenOfLinkedOnly:
    """numba's codegen, for a kernel's library: it has no environment to set (numba sets
    one per function in the execution engine, read only by calls into Python's C API,
    which kernels never make)."""

    def __init__(self, codegen):
        self._codegen = codegen

    def __getattr__(self, name):
        return getattr(self._codegen, name)

    def set_env(self, env_name, env):
        pass


# Untyped numba IR of each kernel inlined at numba-IR level, built once per process and
# copied at each call site (``_InlineKernels``).
_UNTYPED_IR: dict = {}


def _untyped_ir(worker, func, enable_ssa=False):
    """``InlineWorker.run_untyped_passes``, once per kernel: numba ran a kernel's untyped
    pipeline (bytecode to IR, with its own IR-inlined kernels inlined in turn) again at
    every call site it was inlined into, a tenth of a cold compile. The IR depends only on
    the function and ``enable_ssa`` (one typing and target context per process), and the
    inliner copies it before changing anything (``InlineWorker.inline_ir``)."""
    worker.flags.enable_ssa = enable_ssa  # as numba's does, to the caller's flags
    key = (func, enable_ssa)
    ir = _UNTYPED_IR.get(key)
    if ir is None:
        ir = _UNTYPED_IR[key] = InlineWorker.run_untyped_passes(worker, func, enable_ssa)
    return ir


@register_pass(mutates_CFG=True, analysis_only=False)
class _InlineKernels(InlineInlinables):
    """numba's pass inlining ``inline="always"`` calls, with each callee's IR built once."""

    _name = "npusim_inline_kernels"

    def _do_work(self, state, work_list, block, i, expr, inline_worker):
        if "run_untyped_passes" not in vars(inline_worker):
            inline_worker.run_untyped_passes = partial(_untyped_ir, inline_worker)
        return super()._do_work(state, work_list, block, i, expr, inline_worker)


class _InliningOnce(Compiler):
    """numba's nopython pipeline with ``_InlineKernels`` in place of its inlining pass,
    lowering into a ``library_class``."""

    library_class = _EntryLibrary

    def define_pipelines(self):
        if self.state.library is None:
            self.state.library = self.library_class(self.state.targetctx.codegen(),
                                                    self.state.func_id.func_qualname)
            self.state.library.enable_object_caching()
        pipelines = super().define_pipelines()
        for pm in pipelines:
            pm.passes = [(_InlineKernels if cls is InlineInlinables else cls, what)
                         for cls, what in pm.passes]
            pm.finalize()
        return pipelines


class _KernelCompiler(_InliningOnce):
    """The kernels' pipeline, lowering into a ``_LinkedOnlyLibrary``."""

    library_class = _LinkedOnlyLibrary


# numba's internals the classes above override; a numba without them compiles kernels the
# usual way (slower to compile, the same code)
if not (all(hasattr(JITCodeLibrary, m) for m in ("_optimize_final_module",
                                                  "_finalize_final_module",
                                                  "_finalize_dynamic_globals"))
        and hasattr(InlineInlinables, "_do_work")
        and hasattr(InlineWorker, "run_untyped_passes")):
    _InliningOnce = _KernelCompiler = Compiler  # noqa: F811


def _options(ir_inline=False, llvm_inline=False):
    return dict(nopython=True, boundscheck=None, _nrt=False, no_cpython_wrapper=True,
                no_cfunc_wrapper=True, inline="always" if ir_inline else "never",
                forceinline=llvm_inline)


def kernel(fn=None, *, inline=False, out_of_line=False, ir_inline=True):
    """Compile ``fn`` as a kernel other kernels call, inlined into every caller by LLVM;
    with ``inline`` a small one at numba-IR level instead (unless ``ir_inline`` is False:
    numba cannot inline a call that passes its arguments on as ``*args`` there);
    ``out_of_line`` never (a call of its own)."""
    if fn is None:
        return lambda f: kernel(f, inline=inline, out_of_line=out_of_line, ir_inline=ir_inline)
    size = _ir_size(fn)
    small = inline and ir_inline and size <= IR_INLINE_INSTRUCTIONS
    k = Kernel(fn, locals={}, targetoptions=_options(ir_inline=small,
                                                     llvm_inline=not small and not out_of_line),
               pipeline_class=_KernelCompiler)
    k.out_of_line = out_of_line
    k.ir_size = size
    return k


# How the kernel of a unit's model is compiled when a unit has several models, each with its
# own tables tuple type (the NoC: kernels/noc.py). Its step is a stub with a numba
# ``overload`` that, while numba types a kernel calling it, looks at the class of the
# tuple passed and returns a call of that model's kernel alone: the main loop is compiled
# once per model a process uses, and never compiles a model the run does not use (a
# run-time test of a model number compiled every model into the loop). The call is
# compiled as a unit of its own and inlined by LLVM (these options): numba compiles an
# overload's implementation even when asked to inline it at IR level, and inlining a whole
# unit's step into the loop at IR level, as its run-time branch was, made numba's typing
# of the loop 2-3x slower (the loop's own compile with the crossbar inlined at IR level:
# 14.7 CPU s before, 18-19 through an IR-inlined overload; 6 s this way).
MODEL_OPTIONS = dict(_options(llvm_inline=True), pipeline_class=_KernelCompiler)


def entry(fn=None, *, cache=True):
    """Compile ``fn`` as a kernel Python calls (cached on disk with every kernel it calls).

    ``cache=False`` is for code whose LLVM a test reads: numba returns no IR for machine
    code it loaded from the disk cache."""
    if fn is None:
        return lambda f: entry(f, cache=cache)
    dispatcher = njit(cache=cache, _nrt=False, forceinline=False,
                      pipeline_class=_InliningOnce)(fn)
    dispatcher.npusim_entry = True
    return dispatcher


class _CompileNotice(event.Listener):
    """One line on stderr, once per process, when an npusim kernel is compiled.

    numba broadcasts ``numba:compile`` only on a cache miss (a load from the on-disk cache
    broadcasts nothing), so the line appears exactly when a run is about to wait for the
    compiler: the first run after an install or a kernel edit.
    """

    def __init__(self):
        self.said = False
        self.compiled = False
        self.quiet = False  # `npusim compile` reports each entry point itself

    def on_start(self, ev):
        d = ev.data["dispatcher"]
        if isinstance(d, Kernel) or getattr(d, "npusim_entry", False):
            self.compiled = True
            if not self.said and not self.quiet:
                self.said = True
                print(COMPILE_NOTICE, file=sys.stderr, flush=True)

    def on_end(self, ev):
        pass


_NOTICE = _CompileNotice()
event.register("numba:compile", _NOTICE)


def compiled_in_this_process() -> bool:
    """Whether this process compiled a kernel (else every kernel came from the cache)."""
    return _NOTICE.compiled


def without_compile_notice() -> None:
    """No notice from here on (``npusim compile`` says what it compiles)."""
    _NOTICE.quiet = True
