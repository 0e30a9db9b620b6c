"""The ``npusim`` command line: simulate a model, sweep a grid, list models and presets.

Start-up must stay fast (``npusim --help`` well under a second), so this module imports
only typer and the tiny ``npusim.errors``; numba, onnx, numpy and the simulator are imported
inside the commands that need them.

Errors: a :class:`~npusim.errors.NpusimError` (the user's input is wrong) prints
``error: <message>`` on stderr and exits 2, never with a traceback. Anything else is an npusim
bug: ``internal error: ...`` plus a hint to report it, exit 3; set ``NPUSIM_DEBUG=1`` to see
the traceback.
"""

from __future__ import annotations

import functools
import os
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from npusim import __version__
from npusim.errors import NpusimError, NpusimWarning, interruption

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3
EXIT_NO_POINT_OK = 1  # a sweep whose every point failed (its dataset is still written)
PROGRESS_DELAY_S = 1.0  # the progress bar appears only for runs longer than this
PROGRESS_LINE_S = 30.0  # off a terminal (a log, CI, a cluster job): a line this often
MAX_CORE_ROWS = 8  # more cores than this are summarised as min / mean / max
ISSUES_HINT = ("this is a bug in npusim; please report it with the command line, the model "
               "and the config (set NPUSIM_DEBUG=1 to see the traceback)")

app = typer.Typer(
    name="npusim",
    help="npusim: a fast cycle-level simulator of multi-core NPUs, driven by ONNX models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


# --------------------------------------------------------------------------- error routing


def _debug() -> bool:
    return os.environ.get("NPUSIM_DEBUG", "").strip() not in ("", "0")


def _print_err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _cli_errors(func: Callable) -> Callable:
    """Route exceptions of a command to one clear message and an exit code."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except NpusimError as err:
            if _debug():
                traceback.print_exc()
            _print_err(f"error: {err}")
            raise typer.Exit(EXIT_USER_ERROR) from None
        except KeyboardInterrupt as err:
            word, code = interruption(err)
            _print_err(word)
            raise typer.Exit(code) from None
        except MemoryError as err:  # the input asks for more than this machine holds
            if _debug():
                traceback.print_exc()
            _print_err(f"error: out of memory ({str(err).strip() or 'MemoryError'}): this "
                       f"workload needs more memory than the machine has; smaller dims, "
                       f"fewer layers or requests, or smaller tables in the config or "
                       f"options (num_cores, the NoC's buffers, dma.max_outstanding, "
                       f"--trace-bin) would fit")
            raise typer.Exit(EXIT_USER_ERROR) from None
        except BrokenPipeError:
            # stdout closed early (`npusim models | head -1`): stop quietly.
            try:
                sys.stdout = open(os.devnull, "w")
            except OSError:
                pass
            raise typer.Exit(1) from None
        except Exception as err:  # noqa: BLE001 - everything else is a bug, said so plainly
            if _debug():
                traceback.print_exc()
            text = str(err).strip() or "(no message)"
            _print_err(f"internal error: {type(err).__name__}: {text}\n{ISSUES_HINT}")
            raise typer.Exit(EXIT_INTERNAL_ERROR) from None

    return wrapper


# --------------------------------------------------------------------------- option parsing


def parse_overrides(items: list[str] | None) -> list[str]:
    """Check ``--set dotted.key=value`` syntax; values are parsed by the config loader."""
    out = []
    given: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise NpusimError(f"--set {item!r}: expected dotted.key=value, "
                              f"e.g. --set core.systolic.width=16")
        if not value:
            raise NpusimError(f"--set {item!r}: no value after '='; give one, e.g. "
                              f"--set {key}=VALUE")
        if given.get(key, value) != value:  # (the last silently won; --dim refuses too)
            raise NpusimError(f"--set {key} is given twice, {given[key]} and {value}; "
                              f"give it once")
        given[key] = value
        out.append(f"{key}={value}")
    return out


def parse_dims(items: list[str] | None) -> dict[str, int]:
    """``--dim NAME=VALUE`` -> {name: value}, VALUE a positive integer."""
    dims: dict[str, int] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise NpusimError(f"--dim {item!r}: expected NAME=VALUE, e.g. --dim seq=128")
        try:
            number = int(value)
        except ValueError:
            number = 0
        if number < 1 or not value.lstrip("+").isdigit():
            raise NpusimError(f"--dim {name}={value}: the value of dimension '{name}' must be a "
                              f"positive integer")
        if name in dims and dims[name] != number:
            raise NpusimError(f"--dim {name} is given twice ({dims[name]} and {number})")
        dims[name] = number
    return dims


def parse_trace_options(path: Path | None, window: str | None, bin_cycles: int | None):
    """``--trace``, ``--trace-window START:END`` and ``--trace-bin N`` as TraceOptions (None
    without --trace); checks the file can be written before anything is simulated."""
    if path is None:
        if window is not None or bin_cycles is not None:
            raise NpusimError("--trace-window and --trace-bin need --trace FILE.h5")
        return None
    from npusim.trace import DEFAULT_WINDOW, TraceOptions, check_trace_path

    span = DEFAULT_WINDOW
    if window is not None:
        start, sep, end = window.partition(":")
        if not sep or not start.strip().isdigit() or not end.strip().isdigit():
            raise NpusimError(f"--trace-window {window!r}: expected START:END in core cycles, "
                              f"e.g. --trace-window 0:10000")
        span = (int(start), int(end))
        if span[1] <= span[0]:
            raise NpusimError(f"--trace-window {window}: END must be greater than START")
    if bin_cycles is not None and bin_cycles < 1:
        raise NpusimError(f"--trace-bin {bin_cycles}: the bin width must be a positive number "
                          f"of core cycles")
    return TraceOptions(check_trace_path(path), span, bin_cycles)


# --------------------------------------------------------------------------- formatting

class _TrimmedLines:
    """A text stream that drops the blanks rich pads every table row with (to the table's
    width), line by line: a summary piped or written to a file has no trailing spaces."""

    def __init__(self, stream):
        self.stream, self.pending = stream, ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            self.stream.write(line.rstrip(" ") + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.write(self.pending)
        self.pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return False


def stdout_console():
    """The console summaries and listings print on: as rich draws on a terminal; piped or
    into a file 160 columns wide (the tables are wider than 80) with no trailing blanks."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(highlight=False, width=160, file=_TrimmedLines(sys.stdout))



def human_bytes(n: float) -> str:
    """Binary units: 512 B, 1.5 KiB, 3.20 MiB."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(n)} B"
            return f"{n:.1f} {unit}" if abs(n) >= 100 else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_count(n: float) -> str:
    """SI suffixes for big counts: 950, 4.67 M, 1.07 G."""
    n = float(n)
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)}"


def human_seconds(s: float) -> str:
    """0.5 ns, 107.8 µs, 12.3 ms, 1.50 s."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(s) >= scale or unit == "ns":
            v = s / scale
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.1f} {unit}"
    raise AssertionError("unreachable")


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


# --------------------------------------------------------------------------- progress


class ProgressReporter:
    """The ``progress(layers_done, layers_total, core_cycles)`` callback for the engine.

    When ``enabled`` (not ``--quiet``): on a terminal (``tty``), a rich progress bar on
    stderr once the run has lasted ``delay`` seconds; off one, where a bar would be noise
    in a log, a plain line on stderr every ``every`` seconds, so that a long run in CI or
    on a cluster still says how far it has got. Short runs show neither.
    """

    def __init__(self, enabled: bool, delay: float = PROGRESS_DELAY_S, console=None,
                 clock: Callable[[], float] = time.perf_counter, tty: bool = True,
                 every: float = PROGRESS_LINE_S, write: Callable[[str], None] | None = None):
        self.enabled = enabled
        self.delay = delay
        self.console = console
        self.clock = clock
        self.t0 = clock()
        self.bar = None
        self.task = None
        self.tty = tty
        self.every = every
        self.write = write or _print_err
        self.lines = 0  # progress lines written (off a terminal)

    @property
    def shown(self) -> bool:
        return self.bar is not None or self.lines > 0

    def __call__(self, done: int, total: int, cycles: int) -> None:
        if not self.enabled:
            return
        if not self.tty:
            elapsed = self.clock() - self.t0
            if elapsed >= (self.lines + 1) * self.every:
                self.lines = int(elapsed // self.every)
                self.write(f"npusim: simulating, {done:,} of {total:,} layers done, "
                           f"{int(cycles):,} cycles, {elapsed:.0f} s")
            return
        if self.bar is None:
            if self.clock() - self.t0 < self.delay:
                return
            self._start(total)
        self.bar.update(self.task, completed=done, total=max(total, 1), cycles=int(cycles))

    def _start(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)

        console = self.console or Console(stderr=True)
        self.bar = Progress(
            TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TextColumn("layers"),
            TextColumn("{task.fields[cycles]:,} cycles"), TimeElapsedColumn(),
            console=console, transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task("simulate", total=max(total, 1), cycles=0)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


# --------------------------------------------------------------------------- JSON output


def _json_default(obj: Any):
    """numpy scalars/arrays and paths, should any reach the result dict."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def check_output_dir(path: Path, option: str = "--json") -> None:
    """Fail before simulating if the JSON file could never be written."""
    from npusim.atomic import check_writable

    check_writable(path, option)


def _check_outputs_apart(outputs: dict, inputs: dict) -> None:
    """No output replaces an input file or another output (a bundled model's name counts as
    its file)."""
    from npusim.atomic import check_outputs_apart
    from npusim.frontend import resolve_model_path

    model = inputs.get("the model file")
    if model is not None and not Path(model).is_file():
        try:
            inputs = {**inputs, "the model file": resolve_model_path(model)}
        except NpusimError:
            pass  # not a model: the run says so
    check_outputs_apart(outputs, inputs)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON, atomically (:func:`npusim.atomic.write_bytes`)."""
    import json

    from npusim.atomic import write_bytes

    try:
        text = json.dumps(data, indent=1, default=_json_default) + "\n"
    except (TypeError, ValueError) as err:
        raise RuntimeError(f"result is not JSON serialisable: {err}") from None
    write_bytes(path, text.encode("utf-8"), "--json")


# --------------------------------------------------------------------------- summary


def fidelity_headline(info: dict, total_cycles: int) -> str | None:
    """A fast run's line: how many of its cycles, layers and tiles were extrapolated (the
    JSON's ``fidelity`` section has each region, run of tiles and refusal); None in full
    fidelity."""
    if info.get("fidelity") != "fast":
        return None
    cycles = info["extrapolated_cycles"]
    if not cycles:
        return "fast: nothing extrapolated, every cycle simulated (--json: what was watched)"
    layers = info["layers_simulated"] + info["layers_extrapolated"]
    tiles = info["tiles_simulated"] + info["tiles_extrapolated"]
    what = [f"{info['layers_extrapolated']:,} of {layers:,} layers",
            f"{info['tiles_extrapolated']:,} of {tiles:,} tiles"]
    if info.get("stream_cuts"):
        what.append(f"{info['stream_cuts']:,} cuts inside tiles")
    return (f"fast: {cycles:,} of {total_cycles:,} cycles extrapolated "
            f"({_pct(cycles / total_cycles)}): " + ", ".join(what))


def energy_headline(e: dict) -> str:
    """Joules, average power, pJ/MAC and TOPS/W, then the three largest components."""
    from rich.markup import escape

    parts = [f"[bold]{human_joules(e['total_j'])}[/]", f"{e['average_power_w']:.3g} W"]
    if e.get("pj_per_mac"):
        parts += [f"{e['pj_per_mac']:.3g} pJ/MAC", f"{e['tops_per_w']:.3g} TOPS/W"]
    top = sorted(e["components_j"].items(), key=lambda kv: -kv[1])[:3]
    share = ", ".join(f"{k} {_pct(v / e['total_j'])}" for k, v in top if e["total_j"])
    return (", ".join(parts) + (f"  ({escape(share)}; table {escape(e['table']['name'])})"
                                if share else ""))


def human_joules(j: float) -> str:
    for unit, scale in (("J", 1.0), ("mJ", 1e-3), ("uJ", 1e-6), ("nJ", 1e-9)):
        if abs(j) >= scale:
            return f"{j / scale:.3g} {unit}"
    return f"{j * 1e12:.3g} pJ"


def _dram_energy_line(e: dict | None) -> str:
    if not e:
        return "- (the standard has no [power] currents)"
    total = e["total_j"]
    big = sorted(e["components_j"].items(), key=lambda kv: -kv[1])[:3]
    return (f"{human_joules(total)}, {e['pj_per_bit']:.3g} pJ/bit, {e['average_power_w']:.3g} W  ("
            + ", ".join(f"{k.removeprefix('dram_')} {_pct(v / total)}" for k, v in big) + ")")


def render_summary(result, *, wall_seconds: float, overrides: list[str], dims: dict[str, int],
                   console) -> None:
    """A compact, readable summary of one run."""
    from rich.markup import escape
    from rich.table import Table

    cfg = result.config
    d = result.to_dict()
    total = result.total_cycles
    mem = d["memory"]
    cores = d["cores"]
    loaded = sum(c["bytes_loaded"] for c in cores)
    stored = sum(c["bytes_stored"] for c in cores)
    sim = d["simulation"]

    title = (f"[bold]{escape(result.model)}[/] on [bold]{escape(cfg.name)}[/] "
             f"({cfg.num_cores} core{'s' if cfg.num_cores != 1 else ''}, "
             f"{cfg.core.systolic.height}x{cfg.core.systolic.width} array, "
             f"{cfg.core_freq_mhz} MHz, {escape(mem['type'])} memory)")
    console.print(title)

    t = Table.grid(padding=(0, 2))
    t.add_column(style="cyan", no_wrap=True)
    t.add_column(overflow="fold")
    if overrides:
        t.add_row("overrides", escape(" ".join(overrides)))
    assumed = result.extra.get("assumed_dims") or {}
    if dims or assumed:
        text = " ".join(f"{k}={v}" for k, v in {**dims, **assumed}.items())
        if assumed:
            text += (f"  ({', '.join(assumed)}: the model's example "
                     f"{'value' if len(assumed) == 1 else 'values'}, as no --dim gave "
                     f"{'it' if len(assumed) == 1 else 'them'})")
        t.add_row("dims", escape(text))
    t.add_row("total cycles", f"[bold]{total:,}[/]  ({human_seconds(result.seconds)} at "
                              f"{cfg.core_freq_mhz} MHz)")
    fidelity = fidelity_headline(d["fidelity"], total)
    if fidelity:
        t.add_row("fidelity", fidelity)
    t.add_row("layers", f"{len(result.layers)}")
    t.add_row("bytes moved", f"{human_bytes(loaded + stored)}  (loaded {human_bytes(loaded)}, "
                             f"stored {human_bytes(stored)})")
    bw = f"{mem['bandwidth_gbps']:.2f} GB/s"
    if mem.get("peak_gbps"):
        share = _pct(mem["bandwidth_gbps"] / mem["peak_gbps"])
        bw += f" of {mem['peak_gbps']:.1f} GB/s peak ({share})"
    t.add_row("memory bandwidth", bw)
    if result.energy:
        t.add_row("energy", energy_headline(result.energy))
    cps = sim.get("cycles_per_second")
    speed = f"{human_count(cps)} simulated cycles/s" if cps else "-"
    from npusim.kernels.jit import compiled_in_this_process
    kernels = "compile" if compiled_in_this_process() else "load"
    t.add_row("wall time", f"{wall_seconds:.2f} s  (simulating {sim['wall_seconds']:.2f} s, "
                           f"kernel {kernels} {sim['compile_seconds']:.2f} s)")
    t.add_row("speed", speed)
    console.print(t)

    ct = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    headers = ("core", "systolic util", "vector util", "busy cycles", "tiles", "loaded", "stored")
    for name in headers:
        ct.add_column(name, justify="right", no_wrap=True)
    if len(cores) <= MAX_CORE_ROWS:
        for c in cores:
            ct.add_row(str(c["core"]), _pct(c["systolic_utilization"]),
                       _pct(c["vector_utilization"]), f"{c['busy_cycles']:,}", f"{c['tiles']:,}",
                       human_bytes(c["bytes_loaded"]), human_bytes(c["bytes_stored"]))
    else:
        for label, fn in (("min", min), ("mean", lambda v: sum(v) / len(v)), ("max", max)):
            def col(k, fn=fn):
                return fn([c[k] for c in cores])
            ct.add_row(f"{label}", _pct(col("systolic_utilization")),
                       _pct(col("vector_utilization")), f"{int(col('busy_cycles')):,}",
                       f"{int(col('tiles')):,}", human_bytes(col("bytes_loaded")),
                       human_bytes(col("bytes_stored")))
    console.print(ct)
    if len(cores) > MAX_CORE_ROWS:
        console.print(f"[dim]{len(cores)} cores summarised; per-core numbers are in --json[/]")
    if result.requests:
        rt = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
        llm = any("ttft_cycles" in r for r in result.requests)
        names = ("request", "partition", "arrival", "start", "finish", "latency (cycles)",
                 "energy")
        for name in names + (("TTFT", "TBT p50", "TBT p95", "TBT p99") if llm else ()):
            rt.add_column(name, justify="right", no_wrap=True)

        def num(v):
            return "-" if v is None else f"{int(round(v)):,}"

        for i, r in enumerate(result.requests):
            row = [escape(r["name"] or f"{i}: {r['model']}"), str(r["partition"]),
                   num(r["arrival_cycle"]), num(r["start_cycle"]), num(r["finish_cycle"]),
                   num(r["latency_cycles"]), human_joules(r["energy_j"])]
            if llm:
                row += [num(r.get(k)) for k in ("ttft_cycles", "tbt_p50_cycles",
                                                "tbt_p95_cycles", "tbt_p99_cycles")]
            rt.add_row(*row)
        console.print(rt)
        parts = d.get("partitions", [])
        if len(parts) > 1:
            console.print("partition utilization: " + ", ".join(
                f"{p['partition']} (cores {','.join(map(str, p['cores']))}) "
                f"{_pct(p['utilization'])}" for p in parts))


# --------------------------------------------------------------------------- commands


def _version_callback(value: bool) -> None:
    if value:
        print(f"npusim {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[Optional[bool], typer.Option(
        "--version", "-V", help="Show the npusim version and exit.",
        callback=_version_callback, is_eager=True)] = None,
) -> None:
    """npusim: a fast cycle-level simulator of multi-core NPUs, driven by ONNX models."""


@app.command()
@_cli_errors
def simulate(
    model: Annotated[Optional[str], typer.Argument(
        metavar="[MODEL]", help="ONNX file, or a bundled model name (see `npusim models`).",
        show_default=False)] = None,
    config: Annotated[Optional[str], typer.Option(
        "--config", "-c", metavar="NAME|PATH",
        help="Preset name (see `npusim configs`), a .toml file or an ONNXim .json file. "
             "Default: the preset marked (default) there.")] = None,
    mapping: Annotated[Optional[Path], typer.Option(
        "--mapping", "-m", metavar="FILE",
        help="ONNXim mapping file with per-layer tiling.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", "-s", metavar="KEY=VALUE",
        help="Override a config value, e.g. --set core.systolic.width=16 (repeatable).")] = None,
    dim: Annotated[Optional[list[str]], typer.Option(
        "--dim", "-d", metavar="NAME=VALUE",
        help="Bind a symbolic input dimension, e.g. --dim seq=128 (repeatable).")] = None,
    json_out: Annotated[Optional[Path], typer.Option(
        "--json", "-o", metavar="OUT.json",
        help="Write the full result as JSON (written atomically).")] = None,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q",
        help="No progress bar and no summary: print only the total cycle count.")] = False,
    no_skip: Annotated[bool, typer.Option(
        "--no-skip", help="Step every cycle instead of skipping idle time (slow; for "
                          "checking that skip-ahead changes nothing).")] = False,
    fidelity: Annotated[Optional[str], typer.Option(
        "--fidelity", metavar="full|fast",
        help="full: simulate every cycle (default); fast: simulate repeated layers (decoder "
             "blocks, identical residual blocks) until their timing and DRAM behaviour "
             "settle, extrapolate the rest (within about 1%; the JSON says what was "
             "extrapolated). Same as --set fidelity=...")] = None,
    unsupported: Annotated[str, typer.Option(
        "--unsupported", metavar="error|zero-cost",
        help="What to do with ops npusim cannot lower: stop with a list of them (error), "
             "or treat them as free with a warning (zero-cost).")] = "error",
    optimize: Annotated[str, typer.Option(
        "--optimize", metavar="none|basic|extended",
        help="Run ONNX Runtime's offline graph optimizer on the model first: basic (constant "
             "folding, Conv+BatchNormalization folding), extended (also FusedConv/FusedGemm "
             "and the transformer fusions: SkipLayerNormalization, Gelu, Attention...).")
    ] = "none",
    requests_file: Annotated[Optional[Path], typer.Option(
        "--requests", "-r", metavar="FILE",
        help="Request file (TOML or JSON; ONNXim models-list JSON too): several models and "
             "LLM requests with arrival times sharing the NPU under the config's scheduler "
             "policy, instead of MODEL.")] = None,
    trace: Annotated[Optional[Path], typer.Option(
        "--trace", metavar="RUN.h5",
        help="Record a trace (binned DRAM, core and NoC activity; bank state and DRAM "
             "commands in the window) as HDF5 for xarray (written atomically).")] = None,
    trace_window: Annotated[Optional[str], typer.Option(
        "--trace-window", metavar="START:END",
        help="Core cycles with per-cycle bank state and the DRAM command log "
             "(default 0:10000).")] = None,
    trace_bin: Annotated[Optional[int], typer.Option(
        "--trace-bin", metavar="N",
        help="Bin width in core cycles (default: auto, at most 2048 bins per run).")] = None,
) -> None:
    """Simulate MODEL on an NPU config and print a summary."""
    t0 = time.perf_counter()
    overrides = parse_overrides((set_ or []) + ([f"fidelity={fidelity}"] if fidelity else []))
    dims = parse_dims(dim)
    if json_out is not None:
        check_output_dir(json_out)
    _check_outputs_apart({"--json": json_out, "--trace": trace},
                         {"the model file": model, "the config file": config,
                          "the mapping file": mapping, "the requests file": requests_file})
    trace_options = parse_trace_options(trace, trace_window, trace_bin)

    from npusim.simulation import simulate as run_simulation

    reporter = ProgressReporter(enabled=not quiet, tty=_stderr_is_tty())
    try:
        mapping_path = str(mapping) if mapping is not None else None
        if (model is None) == (requests_file is None):
            raise NpusimError("give either a MODEL or --requests FILE (exactly one)")
        if requests_file is not None:
            if dims:
                raise NpusimError("--dim binds MODEL's dims; with --requests each request "
                                  "gives its own (dims = { NAME = N } in its table)")
            from npusim.config import load_config
            from npusim.simulation import simulate_requests
            from npusim.workload import read_requests

            cfg = load_config(config, overrides)
            requests = read_requests(requests_file, cfg.core_freq_mhz)
            # the models the file names are inputs too (--json over one replaced it)
            _check_outputs_apart({"--json": json_out, "--trace": trace},
                                 {f"the model of request {i + 1}": r.model
                                  for i, r in enumerate(requests)})
            result = simulate_requests(requests, cfg, mapping=mapping_path, skip=not no_skip,
                                       progress=reporter, unsupported=unsupported,
                                       optimize=optimize, trace=trace_options)
        else:
            result = run_simulation(model, config, overrides=overrides, mapping=mapping_path,
                                    dims=dims or None, skip=not no_skip, progress=reporter,
                                    unsupported=unsupported, optimize=optimize,
                                    trace=trace_options)
    finally:
        reporter.close()
    wall = time.perf_counter() - t0
    for warning in result.warnings:
        _print_err(f"warning: {warning}")

    if json_out is not None:
        write_json_atomic(json_out, result.to_dict())
    if quiet:
        print(result.total_cycles)
        return
    console = stdout_console()
    render_summary(result, wall_seconds=wall, overrides=overrides, dims=dims, console=console)
    if json_out is not None:
        console.print(f"[dim]result written to {_escape(str(json_out))}[/]")
    if trace is not None:
        console.print(f"[dim]trace written to {_escape(str(trace))} (npusim trace summary "
                      f"{_escape(str(trace))})[/]")


def _escape(text: str) -> str:
    from rich.markup import escape
    return escape(text)


@app.command()
@_cli_errors
def models() -> None:
    """List the bundled ONNX models with size, node count and total MACs."""
    from rich.markup import escape
    from rich.table import Table

    from npusim.config import load_config
    from npusim.frontend import default_dims, list_bundled_models, load_model, symbolic_dims
    from npusim.lowering import lower_graph, unsupported_ops

    paths = list_bundled_models()
    console = stdout_console()
    if not paths:
        console.print("no bundled models found")
        return
    cfg = load_config(None)
    table = Table(box=None, padding=(0, 2), show_edge=False, header_style="bold")
    table.add_column("model", style="cyan", no_wrap=True)
    table.add_column("size", justify="right")
    table.add_column("nodes", justify="right")
    table.add_column("MACs", justify="right")
    table.add_column("notes")
    for path in paths:
        size = human_bytes(path.stat().st_size)
        nodes, macs, note = "-", "-", ""
        try:
            n, sym = symbolic_dims(path)
            nodes = str(n)
            example = default_dims(path)
            if sym and not set(sym) <= set(example):
                note = "needs " + " ".join(f"--dim {s}=N" for s in sym)
            else:
                dims = {k: example[k] for k in sym}
                graph = load_model(path, dims or None)
                missing = unsupported_ops(graph)
                if missing:
                    note = "unsupported ops: " + ", ".join(sorted(missing))
                else:
                    prog = lower_graph(graph, cfg)
                    macs = human_count(sum(int(info.macs) for info in prog.layers))
                    if dims:
                        note = "at " + " ".join(f"{k}={v}" for k, v in dims.items())
        except NpusimError as err:
            note = str(err).splitlines()[0]
        table.add_row(escape(path.stem), size, nodes, macs, escape(note))
    console.print(table)
    console.print(f"[dim]MACs as lowered on the default preset ({escape(cfg.name)}); run one "
                  f"with `npusim simulate NAME`[/]")
    from npusim.serving.spec import bundled_llms, load_llm

    console.print()
    for name in bundled_llms():
        console.print(f"[cyan]{escape(name)}[/]  {escape(load_llm(name).describe())}")
    console.print("[dim]language models for LLM requests in a request file (npusim simulate "
                  "--requests FILE): model = NAME, prompt = N, generate = N[/]")


@app.command()
@_cli_errors
def configs() -> None:
    """List the bundled hardware presets."""
    from rich.markup import escape
    from rich.table import Table

    from npusim.config import DEFAULT_PRESET, list_presets, load_config

    console = stdout_console()
    names = list_presets()
    if not names:
        console.print("no bundled presets found")
        return
    table = Table(box=None, padding=(0, 2), show_edge=False, header_style="bold")
    table.add_column("preset", style="cyan", no_wrap=True)
    table.add_column("description")
    for name in names:
        try:
            desc = load_config(name).description or "-"
        except NpusimError as err:
            desc = f"invalid: {str(err).splitlines()[0]}"
        label = f"{name} (default)" if name == DEFAULT_PRESET else name
        table.add_row(escape(label), escape(desc))
    console.print(table)


@app.command()
@_cli_errors
def dram(
    trace: Annotated[Path, typer.Argument(
        metavar="TRACE", help="Memory trace in Ramulator's format: '0x<address> R|W' per line.",
        show_default=False)],
    config: Annotated[Optional[str], typer.Option(
        "--config", "-c", metavar="NAME|PATH",
        help="Preset or config file whose memory is a cycle-level DRAM.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", "-s", metavar="KEY=VALUE",
        help="Override a config value, e.g. --set memory.standard=DDR4-3200AA_8Gb_x8.")] = None,
    json_out: Annotated[Optional[Path], typer.Option(
        "--json", "-o", metavar="OUT.json",
        help="Write the statistics as JSON (written atomically).")] = None,
) -> None:
    """Replay a memory trace on the DRAM of a config and report its statistics."""
    overrides = parse_overrides(set_)
    if json_out is not None:
        check_output_dir(json_out)
    _check_outputs_apart({"--json": json_out},
                         {"the memory trace": trace, "the config file": config})
    from npusim.config import load_config
    from npusim.dram.replay import read_trace, replay_requests

    cfg = load_config(config, overrides)
    addrs, writes = read_trace(trace)
    stats, _ = replay_requests(cfg, addrs, writes)
    if json_out is not None:
        write_json_atomic(json_out, stats)
    hits, misses, conflicts = stats["row_hits"], stats["row_misses"], stats["row_conflicts"]
    rows = [
        ("standard", f"{stats['standard']} x {cfg.memory.channels} channel(s)"),
        ("DRAM cycles", f"{stats['dram_cycles']:,}"),
        ("reads / writes", f"{stats['reads']:,} / {stats['writes']:,}"),
        ("avg read latency", f"{stats['avg_read_latency_cycles']:.1f} DRAM cycles "
                             f"(p99 {stats['p99_read_latency_cycles']})"),
        ("row hits / misses / conflicts", f"{hits:,} / {misses:,} / {conflicts:,}"),
        ("bandwidth", f"{stats['bandwidth_gbps']:.2f} GB/s of {stats['peak_gbps']:.1f} peak "
                      f"({100 * stats['bandwidth_utilization']:.1f}% bus busy)"),
        ("energy", _dram_energy_line(stats["energy"])),
        ("speed", f"{human_count(stats['requests_per_second'] or 0)} requests/s"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


@app.command()
@_cli_errors
def noc(
    config: Annotated[Optional[str], typer.Option(
        "--config", "-c", metavar="NAME|PATH",
        help="Preset or config file whose \\[noc] section to measure (default preset).")] = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", "-s", metavar="KEY=VALUE",
        help="Override a config value, e.g. --set noc.type=mesh --set noc.dims=[8,8].")] = None,
    booksim: Annotated[Optional[Path], typer.Option(
        "--booksim", "-b", metavar="FILE",
        help="A Booksim2 config file (runfiles format, or ONNXim's \\[config] .icnt files): "
             "its topology, routers, allocators, traffic, injection_rate and packet_size; "
             "--set and the options below override it.")] = None,
    traffic: Annotated[Optional[str], typer.Option(
        "--traffic", "-t", metavar="PATTERN",
        help="uniform, transpose, bitcomp, hotspot, neighbor (also tornado, shuffle, bitrev, "
             "randperm). Default uniform.", show_default=False)] = None,
    rate: Annotated[Optional[float], typer.Option(
        "--rate", "-r", metavar="R",
        help="Offered load in flits per node per cycle (default 0.1).",
        show_default=False)] = None,
    packet_flits: Annotated[Optional[int], typer.Option(
        "--packet-flits", "-f", metavar="F", help="Flits per packet (default 1).",
        show_default=False)] = None,
    cycles: Annotated[Optional[int], typer.Option(
        "--cycles", "-n", metavar="N",
        help="Measure exactly N cycles after the warm-up instead of until latency "
             "converges.", show_default=False)] = None,
    hotspots: Annotated[Optional[str], typer.Option(
        "--hotspots", metavar="NODES",
        help="hotspot traffic: destination nodes, e.g. 0,63 (default 0).",
        show_default=False)] = None,
    seed: Annotated[Optional[int], typer.Option(
        "--seed", metavar="S", help="Random seed of the traffic (default 0).",
        show_default=False)] = None,
    json_out: Annotated[Optional[Path], typer.Option(
        "--json", "-o", metavar="OUT.json",
        help="Write the measurement as JSON (written atomically).")] = None,
    no_skip: Annotated[bool, typer.Option(
        "--no-skip", help="Step every router every cycle (identical results, slower).")
    ] = False,
) -> None:
    """Measure a network alone under synthetic traffic, the way Booksim does: warm-up,
    then measured packets until latency converges; reports whether it saturated."""
    overrides = parse_overrides(set_)
    if json_out is not None:
        check_output_dir(json_out)
    _check_outputs_apart({"--json": json_out},
                         {"the Booksim file": booksim, "the config file": config})
    if cycles is not None and cycles < 1:
        raise NpusimError(f"--cycles {cycles}: must be at least 1")
    from npusim.noc.traffic import PATTERNS

    if traffic is not None and traffic not in PATTERNS:
        raise NpusimError(f"--traffic {traffic!r} is not a traffic pattern: must be one of "
                          f"{', '.join(PATTERNS)}")
    tr: dict = {}
    for key, value in (("pattern", traffic), ("rate", rate), ("packet_flits", packet_flits),
                       ("seed", seed)):
        if value is not None:
            tr[key] = value
    if hotspots is not None:  # (run_noc checks that the pattern is hotspot)
        try:
            tr["hotspots"] = tuple(int(x) for x in hotspots.split(","))
        except ValueError:
            raise NpusimError(f"--hotspots {hotspots!r}: expected node numbers, e.g. 0,63") from None
    from npusim.noc.run import run_noc

    result = run_noc(config, overrides, booksim=booksim, traffic=tr,
                     measurement={"cycles": cycles} if cycles else None, skip=not no_skip)
    data = result.to_dict()
    if json_out is not None:
        write_json_atomic(json_out, data)
    topo = result.topology
    for note in topo["notes"]:
        _print_err(f"note: {note}")
    t = result.traffic
    rows = [
        ("network", f"{topo['type']}" + (f" {'x'.join(map(str, topo['dims']))}" if topo["dims"]
                                          else "") +
         f": {topo['routers']} router{'s' if topo['routers'] != 1 else ''}, {topo['nodes']} nodes, "
         f"{topo['links']} links"),
        ("traffic", f"{t['pattern']}, {t['rate']:g} flits/node/cycle offered, packets of "
                    f"{t['packet_flits']} flit(s)"),
        ("packet latency", f"{result.avg_packet_latency_cycles:.2f} cycles (network "
                           f"{result.avg_network_latency_cycles:.2f}, max "
                           f"{result.max_packet_latency_cycles}, {result.packets_measured:,} "
                           f"packets)"),
        ("accepted", f"{result.accepted_flits_per_node_cycle:.4f} flits/node/cycle"),
        ("saturated", "yes (latency above the threshold: the network cannot carry this load)"
         if result.saturated else "no"),
        ("simulated", f"{result.sim_cycles:,} cycles in {result.wall_seconds:.2f} s "
                      f"({human_count(result.router_cycles_per_second)} router-cycles/s)"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


@app.command("compile")
@_cli_errors
def compile_() -> None:
    """Build the kernel cache ahead of time (for container images and CI).

    The first run on a machine otherwise compiles the numba kernels itself. The cache is
    kept in ~/.cache/npusim/ (or NUMBA_CACHE_DIR) and is valid for this npusim version,
    numba version and CPU.
    """
    from npusim.kernels.jit import without_compile_notice
    from npusim.precompile import ENTRY_POINTS, compile_kernels

    without_compile_notice()
    width = max(len(name) for name, *_ in ENTRY_POINTS)

    def report(b) -> None:
        how = (f"compiled in {b.cpu_seconds:.1f} s CPU ({b.seconds:.1f} s wall)" if b.compiled
               else f"already cached ({b.seconds:.2f} s to load)")
        print(f"{b.name:<{width}} {how}: {b.what}", flush=True)

    t = time.perf_counter()
    built = compile_kernels(report)
    n = sum(b.compiled for b in built)
    print(f"{n} of {len(built)} kernel entry points compiled in {time.perf_counter() - t:.1f} s;"
          f" cache: {os.environ.get('NUMBA_CACHE_DIR', '(numba default)')}")


trace_app = typer.Typer(help="Read traces written by `npusim simulate --trace`.",
                        no_args_is_help=True, add_completion=False,
                        pretty_exceptions_enable=False)
app.add_typer(trace_app, name="trace")


@trace_app.command("summary")
@_cli_errors
def trace_summary(
    path: Annotated[Path, typer.Argument(metavar="RUN.h5", help="A trace file.",
                                         show_default=False)],
) -> None:
    """Print the headline numbers of a trace."""
    from npusim.trace import open_trace
    from npusim.trace.report import summary_rows

    rows = [("trace", str(path)), *summary_rows(open_trace(path))]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


@trace_app.command("plot")
@_cli_errors
def trace_plot(
    path: Annotated[Path, typer.Argument(metavar="RUN.h5", help="A trace file.",
                                         show_default=False)],
    out: Annotated[Path, typer.Option(
        "--out", "-o", metavar="FIG.png",
        help="Image to write (format from the suffix: png, pdf, svg).")] = Path("trace.png"),
) -> None:
    """Draw bank x time heat maps of activity and row conflicts, and per-core utilization."""
    from npusim.trace import open_trace
    from npusim.trace.report import plot_trace

    check_output_dir(out, "--out")
    _check_outputs_apart({"--out": out}, {"the trace file": path})
    ds = open_trace(path)
    try:
        print(f"figure written to {plot_trace(ds, out)}")
    except NpusimError as err:
        raise NpusimError(f"{path}: {err}") from None


class SweepReporter:
    """Progress of a sweep: a rich bar (points done, failed, time left) on a terminal, one
    line per finished point otherwise, nothing with --quiet."""

    def __init__(self, quiet: bool, console=None):
        self.quiet = quiet
        self.tty = _stderr_is_tty()
        self.console = console
        self.bar = None
        self.task = None
        self.done = self.failed = self.to_run = 0
        self.where = ""

    def start(self, to_run: int, total: int, reused: int, where: str) -> None:
        self.to_run, self.where = to_run, where
        if self.quiet:
            return
        _print_err(f"running {to_run} of {total} points on {where}"
                   + (f" ({reused} already recorded)" if reused else ""))
        if not self.tty:
            return
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        self.bar = Progress(
            TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("points"),
            TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
            TextColumn("left"), TimeRemainingColumn(),
            console=self.console or Console(stderr=True),
        )
        self.bar.start()
        self.task = self.bar.add_task("sweep", total=to_run, failed=0)

    def point_done(self, record: dict) -> None:
        self.done += 1
        self.failed += record["status"] != "ok"
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, failed=self.failed)
            if self.done == self.to_run:
                self.close()  # the cluster's shutdown is not the sweep's progress
        elif not self.quiet:
            where = " ".join(f"{k}={v}" for k, v in record["setting"][0].items())
            outcome = (f"{record['stats']['total_cycles']:,} cycles"
                       if record["status"] == "ok" else f"failed: {record['error']}")
            wall = record.get("wall_seconds")
            took = f" ({wall:.1f} s)" if wall is not None else ""
            _print_err(f"[{self.done}/{self.to_run}] {where or 'point'}: {outcome}{took}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


MAX_FAILED_SHOWN = 5


@app.command()
@_cli_errors
def sweep(
    sweep_file: Annotated[Path, typer.Argument(
        metavar="SWEEP.toml", help="Sweep file: base config, workload and axes.",
        show_default=False)],
    out: Annotated[Path, typer.Option(
        "--out", "-o", metavar="OUT.h5|OUT.zarr",
        help="Result dataset (written atomically); the journal OUT.h5.points.jsonl records "
             "each finished point, so re-running resumes.", show_default=False)],
    workers: Annotated[Optional[int], typer.Option(
        "--workers", "-w", metavar="N",
        help="Local worker processes. Default: one per CPU.")] = None,
    scheduler: Annotated[Optional[str], typer.Option(
        "--scheduler", metavar="tcp://HOST:PORT",
        help="Run on an existing dask.distributed cluster instead of a local one.")] = None,
    timeout: Annotated[Optional[float], typer.Option(
        "--timeout", metavar="SECONDS",
        help="Stop a point after this long and record it as failed.")] = None,
    retry_failed: Annotated[bool, typer.Option(
        "--retry-failed", help="Run points recorded as failed again.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Check the sweep and count its points; run nothing.")] = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="No progress and no summary; errors only.")] = False,
) -> None:
    """Run a grid of configs and workloads (SWEEP.toml) into one labelled dataset."""
    from npusim.sweep.dataset import check_out_path
    from npusim.sweep.spec import check_points, load_sweep
    from npusim.sweep.store import journal_path, read_journal

    spec = load_sweep(sweep_file)
    check_out_path(out)
    _check_outputs_apart({"--out": out}, {"the sweep file": sweep_file})
    from npusim.sweep.run import points_to_run, run_sweep

    if dry_run:
        points = spec.points()
        check_points(spec, points)
        records = {r["hash"]: r for r in read_journal(journal_path(out))}
        shape = " x ".join(f"{len(a)} {a.name}" for a in spec.axes) or "1"
        invalid = sum(p.error is not None for p in points)
        done = sum(p.error is None and p.hash in records for p in points)
        to_run = sum(map(len, points_to_run(points, records, retry_failed).values()))
        again = f" ({to_run - (len(points) - done - invalid)} of them again)" if retry_failed else ""
        print(f"sweep {spec.name}: {len(points)} points ({shape}); {done} recorded, "
              f"{invalid} invalid combinations, {to_run} to run{again}")
        return

    reporter = SweepReporter(quiet)
    t0 = time.perf_counter()
    try:
        ds = run_sweep(spec, out, workers=workers, scheduler=scheduler, timeout=timeout,
                       retry_failed=retry_failed, reporter=reporter)
    except KeyboardInterrupt as err:
        reporter.close()
        word, code = interruption(err)
        journal = journal_path(out)
        if journal.exists():
            _print_err(f"{word}: {reporter.done} point(s) finished in this run are recorded "
                       f"in {journal}; run the same command again to resume")
        else:  # (nothing recorded, no journal left behind: it said 0 were recorded there)
            _print_err(f"{word}: no point finished; nothing was recorded")
        raise typer.Exit(code) from None
    finally:
        reporter.close()
    status = ds["status"].values.ravel()
    none_ok = status.size > 0 and not (status == "ok").any()
    if quiet:
        if none_ok:
            raise typer.Exit(EXIT_NO_POINT_OK)
        return
    failed = [(s, e) for s, e in zip(status, ds["error"].values.ravel()) if s == "failed"]
    print(f"sweep {spec.name}: {status.size} points, {int((status == 'ok').sum())} ok, "
          f"{len(failed)} failed; ran {reporter.done} in {time.perf_counter() - t0:.1f} s"
          + (f" on {reporter.where}" if reporter.where else ""))
    for _, err in failed[:MAX_FAILED_SHOWN]:
        print(f"  failed: {err}")
    if len(failed) > MAX_FAILED_SHOWN:
        print(f"  ... and {len(failed) - MAX_FAILED_SHOWN} more (see the dataset's 'error')")
    print(f"written {out}")
    if none_ok:
        _print_err("error: no point of the sweep ran to the end (exit code 1)")
        raise typer.Exit(EXIT_NO_POINT_OK)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """NpusimWarning as ``warning: ...`` on stderr (other warnings as Python shows them)."""
    if issubclass(category, NpusimWarning):
        _print_err(f"warning: {message}")
    else:
        _default_showwarning(message, category, filename, lineno, file, line)


_default_showwarning = warnings.showwarning


def main() -> None:
    """Entry point of the ``npusim`` script."""
    warnings.showwarning = _show_warning
    app(prog_name="npusim")


if __name__ == "__main__":
    main()
