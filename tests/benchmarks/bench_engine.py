"""Engine speed benchmark: how fast npusim simulates a few reference workloads.

Run from the repository root::

    python tests/benchmarks/bench_engine.py                # all cases, 3 timed repeats each
    python tests/benchmarks/bench_engine.py --quick        # smoke check: cases 1 and 4, once
    python tests/benchmarks/bench_engine.py --out results/benchmarks/engine.json

Speed is measured and recorded, never asserted: a case that misses its target is reported in
the table (and in the JSON ``meets_target`` field), the script still exits 0. It exits 1 only
when a case fails to run at all.

Timing rules: the numba kernel is compiled (or loaded from its cache) by an untimed warm-up
run of each case before that case's timed repeats, so no timed number contains compilation;
``Result.wall_seconds`` (the kernel loop only) is what is timed, and the compile time the
very first run of the process paid is reported once, separately. The file name has no
``test_`` prefix, so pytest does not collect it. See tests/benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fast_columns import FAST_HEAD, fast_cells, fast_fields, fill_kernel_cache

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "results" / "benchmarks" / "engine.json"
QUICK_OUT = REPO / "results" / "benchmarks" / "engine_quick.json"

ONNXIM_MATMUL_512_SECONDS = 26.0  # ONNXim on this machine, matmul_512x768x768 (issue #2)
TARGET_MATMUL_512_SECONDS = 2.6  # best wall, once compiled, with the cycle-level DRAM (issue 3)
TARGET_CLI_SECONDS = 3.0  # warm `npusim simulate tiny_cnn --quiet`, whole process


# --------------------------------------------------------------------------- cases


def _gemmini_module():
    spec = importlib.util.spec_from_file_location("gemmini_cases", REPO / "tests" / "gemmini_cases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def python_cases(quick: bool, workdir: Path) -> list[dict[str, Any]]:
    """The in-process cases, in issue #2 order (1, 2, 3, then the Gemmini cases)."""
    cases: list[dict[str, Any]] = [
        dict(case="matmul_512x768x768", model="matmul_512x768x768", config="mobile",
             overrides=[], mapping=None, group="1",
             target_seconds=TARGET_MATMUL_512_SECONDS,
             reference_seconds={"onnxim": ONNXIM_MATMUL_512_SECONDS}),
    ]
    if not quick:
        cases += [
            dict(case="matmul_1024", model="matmul_1024", config="server", overrides=[],
                 mapping=None, group="2"),
            dict(case="conv_resnet18_layer1", model="conv_resnet18_layer1", config="mobile",
                 overrides=[], mapping=None, group="3"),
        ]
    gc = _gemmini_module()
    ref = gc.load_reference()
    for case in ref["cases"]:
        model_path, mapping_path = gc.write_case(case, workdir)
        cases.append(dict(case=f"gemmini/{case['name']}", model=str(model_path),
                          model_label=f"{case['name']} ({case['op']}, generated)",
                          config="gemmini_validation", overrides=gc.case_overrides(ref, case),
                          mapping=str(mapping_path), mapping_text=case["mapping"], group="4",
                          rtl_cycles=int(case["rtl_cycles"])))
    return cases


# --------------------------------------------------------------------------- running


def _dram_requests(result) -> int:
    return int(sum(c["load_requests"] + c["store_requests"] for c in result.cores))


def run_python_case(case: dict[str, Any], repeat: int, first: dict[str, Any],
                    fast: bool = False) -> dict[str, Any]:
    import npusim

    def once(fidelity="full"):
        t, c = time.perf_counter(), time.process_time()
        r = npusim.simulate(case["model"], config=case["config"],
                            overrides=case["overrides"] + [f"fidelity={fidelity}"],
                            mapping=case["mapping"])
        # wall and CPU seconds of the whole call (CPU: what fast_columns compares)
        return r, time.perf_counter() - t, time.process_time() - c

    row = {k: case[k] for k in ("case", "group", "config", "overrides")}
    row["model"] = case.get("model_label", case["model"])
    if case.get("mapping_text"):
        row["mapping"] = case["mapping_text"]
    # Untimed warm-up: compiles (or loads the cached) kernel for these argument types.
    warm, warm_e2e, _ = once()
    if "compile_seconds" not in first:  # the first simulate() of this process
        first.update(case=case["case"], compile_seconds=warm.compile_seconds,
                     first_run_seconds=warm_e2e)
    if fast:  # untimed warm-up of the fast loop (its cache load)
        once("fast")
    # the timed runs of the two fidelities alternate, so that a shared host's slow and fast
    # phases fall on both (run one after the other, the Gemmini GEMMs' fast runs came out
    # 0.6x of full on 2026-12-02, alternated 1.1-1.3x)
    runs, quick = [], []
    for _ in range(repeat):
        runs.append(once())
        if fast:
            quick.append(once("fast"))
    results = [r for r, _, _ in runs]
    cycles = {r.total_cycles for r in results} | {warm.total_cycles}
    steps = {r.event_steps for r in results} | {warm.event_steps}
    reqs = {_dram_requests(r) for r in results} | {_dram_requests(warm)}
    walls = [r.wall_seconds for r in results]
    best, med = min(walls), statistics.median(walls)
    r0 = results[0]
    row.update(
        simulated_cycles=r0.total_cycles,
        wall_seconds_best=best,
        wall_seconds_median=med,
        wall_seconds_all=walls,
        end_to_end_seconds_best=min(e for _, e, _ in runs),  # load + lower + run + collect
        compile_seconds_in_timed_runs=max(r.compile_seconds for r in results),
        cycles_per_second=r0.total_cycles / best if best > 0 else None,
        event_steps=r0.event_steps,
        dram_requests=_dram_requests(r0),
        requests_per_second=_dram_requests(r0) / best if best > 0 else None,
        memory_type=r0.memory.get("type"),
        num_cores=len(r0.cores),
        deterministic=len(cycles) == len(steps) == len(reqs) == 1,
        # energy accounting after the run (npusim.energy), host seconds; the kernel-side
        # DRAM power counters are inside wall_seconds
        energy_seconds_best=min(getattr(r, "energy_seconds", 0.0) for r in results),
        energy_percent_of_wall=(100 * min(getattr(r, "energy_seconds", 0.0) for r in results)
                                / best if best > 0 else None),
        energy_percent_of_end_to_end=(100 * min(getattr(r, "energy_seconds", 0.0)
                                                for r in results) / min(e for _, e, _ in runs)),
        repeats=repeat,
    )
    if fast:
        row.update(fast_fields(r0.total_cycles, min(c for _, _, c in runs),
                               quick[0][0].total_cycles, min(c for _, _, c in quick),
                               quick[0][0].extra["fidelity"]))
    if "rtl_cycles" in case:
        rtl = case["rtl_cycles"]
        row["rtl_cycles"] = rtl
        row["error_percent"] = 100.0 * (r0.total_cycles - rtl) / rtl
    if "target_seconds" in case:
        row["target_seconds"] = case["target_seconds"]
        row["meets_target"] = best < case["target_seconds"]
    if "reference_seconds" in case:
        row["reference_seconds"] = case["reference_seconds"]
        row["speedup_vs_onnxim_wall"] = case["reference_seconds"]["onnxim"] / best
        row["speedup_vs_onnxim_end_to_end"] = (case["reference_seconds"]["onnxim"]
                                               / row["end_to_end_seconds_best"])
    return row


def cli_command() -> list[str] | None:
    """The `npusim` console script of this venv, else `python -m npusim`; None if no CLI."""
    if importlib.util.find_spec("npusim.cli") is None:
        return None
    script = Path(sys.executable).parent / ("npusim.exe" if os.name == "nt" else "npusim")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "npusim"]


def run_cli_case(repeat: int) -> dict[str, Any]:
    row: dict[str, Any] = dict(case="cli tiny_cnn (warm)", group="5", model="tiny_cnn",
                               config="(default preset)", overrides=[],
                               target_seconds=TARGET_CLI_SECONDS)
    cmd = cli_command()
    if cmd is None:
        row["skipped"] = "skipped (no CLI yet)"
        return row
    argv = cmd + ["simulate", "tiny_cnn", "--quiet"]
    row["command"] = " ".join(argv)

    def once():
        t = time.perf_counter()
        p = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
        return p, time.perf_counter() - t

    warm, _ = once()  # warm-up: page cache, numba's on-disk kernel cache, .pyc files
    if warm.returncode != 0:
        row["error"] = (f"exit {warm.returncode}: "
                        + (warm.stderr.strip().splitlines() or ["(no stderr)"])[-1])
        return row
    runs = [once() for _ in range(repeat)]
    bad = [p for p, _ in runs if p.returncode != 0]
    if bad:
        row["error"] = f"exit {bad[0].returncode}: {bad[0].stderr.strip()[-300:]}"
        return row
    walls = [w for _, w in runs]
    try:
        row["simulated_cycles"] = int(runs[0][0].stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        row["simulated_cycles"] = None
        row["stdout"] = runs[0][0].stdout[-300:]
    best = min(walls)
    row.update(wall_seconds_best=best, wall_seconds_median=statistics.median(walls),
               wall_seconds_all=walls, repeats=repeat, meets_target=best < TARGET_CLI_SECONDS,
               note="whole process wall time (interpreter start, imports, kernel cache load, "
                    "simulation, output); rates are not given for it")
    return row


def cold_compile() -> dict[str, Any]:
    """A cold compile as bench_compile.py measures it: a child process with an empty kernel
    cache simulating tiny_cnn (the shared cache is untouched)."""
    spec = importlib.util.spec_from_file_location("bench_compile", Path(__file__).parent / "bench_compile.py")
    bench_compile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_compile)
    try:
        run = bench_compile.measure(sys.executable)
    except RuntimeError as err:
        return {"error": str(err).strip().splitlines()[-1]}
    return {"cpu_seconds": run["simulate"]["cpu_seconds"],
            "wall_seconds": run["simulate"]["wall_seconds"], "load_average": run["load_average"]}


# --------------------------------------------------------------------------- machine info


def _version(name: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001
        return None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _git() -> dict[str, Any]:
    if not shutil.which("git"):
        return {}
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
        return {"commit": commit or None, "dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {}


def machine_info() -> dict[str, Any]:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    import npusim
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "numba": _version("numba"),
        "numpy": _version("numpy"),
        "onnx": _version("onnx"),
        "npusim": npusim.__version__,
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "git": _git(),
    }


# --------------------------------------------------------------------------- output


def _f(x, fmt: str, none: str = "-") -> str:
    return none if x is None else format(x, fmt)


def _rate(x) -> str:
    if x is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g}"


def _target(row) -> str:
    if "target_seconds" not in row:
        return ""
    if "meets_target" not in row:
        return f"< {row['target_seconds']:g} s"
    return f"< {row['target_seconds']:g} s: {'met' if row['meets_target'] else 'MISSED'}"


def _config(row) -> str:
    n = len(row.get("overrides") or [])
    return row["config"] + (f" +{n} overrides" if n else "")


HEAD = ["case", "model", "config", "sim cycles", "wall best s", "wall median s", "cycles/s",
        "event steps", "DRAM requests", "requests/s", "energy s (% of wall)", "target",
        *FAST_HEAD]
RIGHT = {*range(3, 10), *range(12, len(HEAD))}  # numeric columns of HEAD


def table_rows(report: dict[str, Any]) -> list[list[str]]:
    out = []
    for r in report["cases"]:
        if "skipped" in r or "error" in r:
            msg = r.get("skipped") or f"ERROR: {r['error']}"
            out.append([r["case"], r["model"], _config(r), msg] + [""] * (len(HEAD) - 4))
            continue
        out.append([
            r["case"], r["model"] if "/" not in r["model"] else Path(r["model"]).name,
            _config(r), _f(r.get("simulated_cycles"), ","),
            _f(r.get("wall_seconds_best"), ".4f"), _f(r.get("wall_seconds_median"), ".4f"),
            _rate(r.get("cycles_per_second")), _f(r.get("event_steps"), ","),
            _f(r.get("dram_requests"), ","), _rate(r.get("requests_per_second")),
            (f"{r['energy_seconds_best']:.4f} ({r['energy_percent_of_wall']:.1f}%)"
             if r.get("energy_percent_of_wall") is not None else "-"), _target(r),
            *fast_cells(r),
        ])
    return out


GEM_HEAD = ["case", "npusim cycles", "RTL cycles", "error %"]


def gemmini_rows(report) -> list[list[str]]:
    return [[r["case"], _f(r.get("simulated_cycles"), ","), _f(r.get("rtl_cycles"), ","),
             _f(r.get("error_percent"), "+.2f")]
            for r in report["cases"] if "rtl_cycles" in r and "error" not in r]


def plain_table(head, rows) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    right = lambda i: i in RIGHT if head is HEAD else i >= 1  # noqa: E731
    fmt = lambda cells: "  ".join(  # noqa: E731
        (c.rjust(w) if right(i) else c.ljust(w)) for i, (c, w) in enumerate(zip(cells, widths)))
    line = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(head), line] + [fmt(r) for r in rows])


def md_table(head, rows) -> str:
    right = (lambda i: i in RIGHT) if head is HEAD else (lambda i: i >= 1)
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join("---:" if right(i) else "---" for i in range(len(head))) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def summary_lines(report) -> list[str]:
    lines = []
    c = report.get("compile")
    if c and "compile_seconds" in c:
        lines.append(f"kernel compile/cache load (first run of the process, {c['case']}): "
                     f"{c['compile_seconds']:.3f} s; that whole first simulate() call took "
                     f"{c['first_run_seconds']:.3f} s (excluded from every timed number)")
    cold = report.get("compile_cold")
    if cold:
        lines.append("cold compile (empty kernel cache, fresh process, first simulate of "
                     "tiny_cnn; bench_compile.py): "
                     + (f"ERROR {cold['error']}" if "error" in cold else
                        f"{cold['cpu_seconds']:.1f} CPU s, {cold['wall_seconds']:.1f} s wall "
                        f"at load {cold['load_average'][0]:.1f}"))
    for r in report["cases"]:
        if "speedup_vs_onnxim_wall" in r:
            lines.append(f"{r['case']}: {r['wall_seconds_best']:.3f} s kernel wall "
                         f"({r['end_to_end_seconds_best']:.3f} s including load + lowering) vs "
                         f"ONNXim ~{r['reference_seconds']['onnxim']:g} s: "
                         f"{r['speedup_vs_onnxim_wall']:.0f}x ({r['speedup_vs_onnxim_end_to_end']:.0f}x "
                         f"end to end)")
        if r.get("deterministic") is False:
            lines.append(f"{r['case']}: repeats gave DIFFERENT cycle/step/request counts")
        if (r.get("compile_seconds_in_timed_runs") or 0) > 0.01:
            lines.append(f"{r['case']}: a timed run reported {r['compile_seconds_in_timed_runs']:.3f} s "
                         f"of compilation (excluded from its wall time)")
    missed = [r["case"] for r in report["cases"] if r.get("meets_target") is False]
    lines.append("targets: " + ("all met" if not missed else "MISSED by " + ", ".join(missed)))
    return lines


def markdown(report) -> str:
    m = report["machine"]
    git = m.get("git") or {}
    out = [
        "# npusim engine benchmark",
        "",
        f"Generated by `{report['command']}` on {report['date']}.",
        "",
        f"Machine: {m.get('cpu_model')}, {m.get('cpu_count')} CPUs ({m.get('cpus_usable')} usable), "
        f"{m.get('platform')}; Python {m.get('python')}, numba {m.get('numba')}, "
        f"numpy {m.get('numpy')}, onnx {m.get('onnx')}; npusim {m.get('npusim')}"
        + (f" at {git.get('commit', '')[:12]}{' (dirty tree)' if git.get('dirty') else ''}"
           if git.get("commit") else "") + ".",
        "",
        f"Each case: one untimed warm-up run, then {report['repeats']} timed run(s). Wall times "
        "are the simulation kernel loop (`Result.wall_seconds`, JIT compile excluded), except "
        "the CLI case, which is the whole `npusim` process. Rates use the best wall time. "
        "See tests/benchmarks/README.md for the columns.",
        "",
        md_table(HEAD, table_rows(report)),
        "",
    ]
    gem = gemmini_rows(report)
    if gem:
        out += ["## Gemmini validation cases (cycles vs RTL)", "", md_table(GEM_HEAD, gem), ""]
    out += ["## Notes", ""] + [f"- {s}" for s in summary_lines(report)] + [""]
    over = [r for r in report["cases"] if r.get("overrides") or r.get("mapping") or r.get("command")]
    if over:
        out += ["## Overrides, mappings and commands", ""]
        for r in over:
            bits = []
            if r.get("overrides"):
                bits.append("overrides " + " ".join(f"`{o}`" for o in r["overrides"]))
            if r.get("mapping"):
                bits.append(f"mapping `{r['mapping']}`")
            if r.get("command"):
                bits.append(f"command `{r['command']}`")
            out.append(f"- {r['case']}: " + "; ".join(bits))
        out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="smoke check: only matmul_512x768x768 and the Gemmini cases, one "
                         "timed run each; default output results/benchmarks/engine_quick.json")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"JSON output (the Markdown copy goes next to it with .md); default "
                         f"{DEFAULT_OUT.relative_to(REPO)}")
    ap.add_argument("--repeat", type=int, default=None,
                    help="timed runs per case (default 3, or 1 with --quick)")
    ap.add_argument("--no-fast", action="store_true",
                    help="full fidelity only (by default each in-process case is run again "
                         "in fast fidelity, issue 17: the fast columns)")
    ap.add_argument("--no-cold-compile", action="store_true",
                    help="skip measuring a compile with an empty numba cache (full mode only)")
    args = ap.parse_args(argv)
    repeat = args.repeat or (1 if args.quick else 3)
    if repeat < 1:
        ap.error("--repeat must be at least 1")
    out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)

    started = _dt.datetime.now(_dt.timezone.utc)
    report: dict[str, Any] = {
        "benchmark": "engine",
        "date": started.isoformat(timespec="seconds"),
        "command": "python tests/benchmarks/bench_engine.py" + (" --quick" if args.quick else "")
                   + (f" --repeat {args.repeat}" if args.repeat else "")
                   + (" --no-cold-compile" if args.no_cold_compile else "")
                   + (" --no-fast" if args.no_fast else ""),
        "quick": args.quick,
        "repeats": repeat,
        "machine": machine_info(),
        "targets": {"matmul_512x768x768_wall_seconds": TARGET_MATMUL_512_SECONDS,
                    "cli_tiny_cnn_seconds": TARGET_CLI_SECONDS,
                    "onnxim_matmul_512x768x768_seconds": ONNXIM_MATMUL_512_SECONDS},
        "compile": {},
        "cases": [],
    }
    failed = False
    if not args.no_fast:
        fill_kernel_cache()
    with tempfile.TemporaryDirectory(prefix="npusim-bench-") as tmp:
        for case in python_cases(args.quick, Path(tmp)):
            print(f"running {case['case']} ...", file=sys.stderr, flush=True)
            try:
                row = run_python_case(case, repeat, report["compile"], not args.no_fast)
            except Exception as err:  # noqa: BLE001 - record it, keep benchmarking the rest
                failed = True
                row = {k: case[k] for k in ("case", "group", "config", "overrides")}
                row["model"] = case.get("model_label", case["model"])
                row["error"] = f"{type(err).__name__}: {str(err).strip()[:300]}"
            report["cases"].append(row)
    if not args.quick and not args.no_cold_compile:
        print("measuring a cold compile (empty numba cache) ...", file=sys.stderr, flush=True)
        report["compile_cold"] = cold_compile()
    if not args.quick:
        print("running cli tiny_cnn ...", file=sys.stderr, flush=True)
        row = run_cli_case(repeat)
        failed |= "error" in row
        report["cases"].append(row)
    report["total_benchmark_seconds"] = (_dt.datetime.now(_dt.timezone.utc) - started).total_seconds()

    print()
    print(plain_table(HEAD, table_rows(report)))
    gem = gemmini_rows(report)
    if gem:
        print()
        print(plain_table(GEM_HEAD, gem))
    print()
    for line in summary_lines(report):
        print(line)

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    md = out.with_suffix(".md")
    md.write_text(markdown(report))
    print(f"\nwrote {out} and {md}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
