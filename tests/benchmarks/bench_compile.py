"""Cold compile: what the first run on a fresh machine pays before it simulates anything.

Each measurement is a child process with ``NUMBA_CACHE_DIR`` pointing at an empty folder,
as on a fresh machine. It simulates the bundled ``tiny_cnn`` on the default preset (the
README's first command; the simulation itself takes milliseconds), then builds what
``npusim compile`` builds on top (the trace sync and the DRAM replay entry points). Times
are CPU seconds (user + system of the child) besides wall seconds: on a shared machine the
wall time says more about the neighbours than about the compiler. The load average at the
start and end is recorded with each run.

The child also listens to numba's ``numba:compile`` events and reports, per kernel, how
many type specialisations were compiled and the CPU seconds spent in each kernel's own
compile (exclusive of the kernels it calls, which numba compiles while typing it): the
compile-time profile, of the first ``simulate`` (``profile``) and of the rest of ``npusim
compile`` (``profile_rest``) apart.

    python tests/benchmarks/bench_compile.py                      # this checkout
    python tests/benchmarks/bench_compile.py --python A/.venv/bin/python --python B/.venv/bin/python
    python tests/benchmarks/bench_compile.py --out results/benchmarks/compile.json
    python tests/benchmarks/bench_compile.py --first-only --rounds 4 --python A --python B

Each ``--python`` is an interpreter with some npusim version installed; they are measured in
alternation (``--rounds`` times each), and the best CPU time of each is reported.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "results" / "benchmarks" / "compile.json"
TARGET_CPU_SECONDS = 30.0  # issue 17: the first `npusim simulate` compiles in under 30 s

CHILD = r"""
import json, os, resource, sys, time
from collections import defaultdict
from numba.core import event

stack, own = [], defaultdict(lambda: [0, 0.0])


class Profile(event.Listener):
    def on_start(self, ev):
        f = ev.data["dispatcher"].py_func
        stack.append([f"{f.__module__.rsplit('.', 1)[-1]}.{f.__name__}", time.thread_time(), 0.0])

    def on_end(self, ev):
        name, t0, inner = stack.pop()
        spent = time.thread_time() - t0
        own[name][0] += 1
        own[name][1] += spent - inner
        if stack:
            stack[-1][2] += spent


event.register("numba:compile", Profile())


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


out = {}
c0, w0 = cpu(), time.perf_counter()
import npusim
npusim.simulate("tiny_cnn")
out["simulate"] = {"cpu_seconds": cpu() - c0, "wall_seconds": time.perf_counter() - w0}
first = {name: list(v) for name, v in own.items()}
try:  # versions before `npusim compile` lack it
    from npusim.precompile import compile_kernels
except ImportError:
    compile_kernels = None
if sys.argv[1:] == ["--first-only"]:
    compile_kernels = None
if compile_kernels is not None:
    c1, w1 = cpu(), time.perf_counter()
    built = compile_kernels()
    out["rest"] = {"cpu_seconds": cpu() - c1, "wall_seconds": time.perf_counter() - w1,
                   "compiled": [b.name for b in built if b.compiled]}
out["profile"] = sorted(([name, n, s] for name, (n, s) in first.items()), key=lambda r: -r[2])
out["profile_rest"] = sorted(([name, n - first.get(name, [0, 0.0])[0],
                               s - first.get(name, [0, 0.0])[1]] for name, (n, s) in own.items()
                              if n > first.get(name, [0, 0.0])[0]), key=lambda r: -r[2])
print(json.dumps(out))
"""


def measure(python: str, first_only: bool = False) -> dict:
    """One cold compile in a child process with an empty kernel cache (``first_only``: the
    first simulate only, not the rest of ``npusim compile``)."""
    with tempfile.TemporaryDirectory(prefix="npusim-cold-") as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=str(Path(tmp) / "cache"))
        load0 = os.getloadavg()[0]
        t = time.perf_counter()
        r0 = os.times()
        proc = subprocess.run([python, "-c", CHILD, *(["--first-only"] if first_only else [])],
                              env=env, cwd=tmp, capture_output=True, text=True)
        r1 = os.times()
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise RuntimeError(f"{python}: cold compile failed:\n{proc.stderr[-3000:]}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["process_cpu_seconds"] = (r1.children_user - r0.children_user
                                  + r1.children_system - r0.children_system)
    res["process_wall_seconds"] = wall
    res["load_average"] = [load0, os.getloadavg()[0]]
    res["notice"] = [line for line in proc.stderr.splitlines() if line.startswith("npusim:")]
    return res


def _version(python: str) -> str:
    code = ("import npusim, numba, subprocess, pathlib; "
            "d = pathlib.Path(npusim.__file__).resolve().parents[1]; "
            "c = subprocess.run(['git', '-C', str(d), 'rev-parse', '--short', 'HEAD'], "
            "capture_output=True, text=True).stdout.strip(); "
            "print(f'{d} {c} numba {numba.__version__}')")
    return subprocess.run([python, "-c", code], capture_output=True, text=True,
                          cwd=tempfile.gettempdir()).stdout.strip()


def markdown(report: dict) -> str:
    lines = ["# Cold compile (empty kernel cache)", "",
             f"{report['date']}, {report['cpus']} CPUs. CPU = user + system seconds of the "
             "child process; the load average (1 min) at start and end of each run says how "
             "busy the shared machine was.", "",
             "| version | first `simulate` CPU s | wall s | + rest of `npusim compile` CPU s "
             "| whole process CPU s | load | target |",
             "|---|---|---|---|---|---|---|"]
    for v in report["versions"]:
        b = min(v["runs"], key=lambda r: r["simulate"]["cpu_seconds"])
        ok = "met" if b["simulate"]["cpu_seconds"] < TARGET_CPU_SECONDS else "missed"
        rest = f"{b['rest']['cpu_seconds']:.1f}" if "rest" in b else "- (no `npusim compile`)"
        lines.append(f"| {v['version']} | {b['simulate']['cpu_seconds']:.1f} | "
                     f"{b['simulate']['wall_seconds']:.1f} | {rest} | "
                     f"{b['process_cpu_seconds']:.1f} | {b['load_average'][0]:.1f} / "
                     f"{b['load_average'][1]:.1f} | < {TARGET_CPU_SECONDS:.0f} s: {ok} |")
    for v in report["versions"]:
        b = min(v["runs"], key=lambda r: r["simulate"]["cpu_seconds"])
        lines += ["", f"## Profile: {v['version']}", ""]
        if "profile_rest" not in b:  # recorded before the two phases were told apart
            lines += _profile(b["profile"], "the first `simulate` and the rest of "
                              "`npusim compile` together", " (the rest is imports, lowering "
                              "the model and the run)")
            continue
        lines += _profile(b["profile"], "the first `simulate`",
                          " (the rest is imports, lowering the model and the run)") + [""]
        lines += _profile(b["profile_rest"], "the rest of `npusim compile`")
    return "\n".join(lines) + "\n"


def _profile(rows: list, what: str, rest: str = "") -> list[str]:
    total = sum(r[2] for r in rows)
    lines = [f"{what}: {len(rows)} kernels compiled, {sum(r[1] for r in rows)} "
             f"specialisations, {total:.1f} CPU s inside numba's compile events{rest}.", "",
             "| kernel | specialisations | own CPU s | share |", "|---|---|---|---|"]
    for name, n, s in rows[:15]:
        lines.append(f"| `{name}` | {n} | {s:.2f} | {100 * s / max(total, 1e-9):.0f}% |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="append",
                    help="interpreter of an npusim version (repeatable; default: this one)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--first-only", action="store_true",
                    help="measure the first simulate only (quicker A/B rounds)")
    args = ap.parse_args()
    pythons = args.python or [sys.executable]
    versions = [{"python": os.path.abspath(p), "version": _version(os.path.abspath(p)), "runs": []}
                for p in pythons]
    for r in range(args.rounds):
        for v in versions:
            run = measure(v["python"], args.first_only)
            v["runs"].append(run)
            rest = run.get("rest", {}).get("cpu_seconds")
            print(f"round {r + 1}: {v['version']}: simulate {run['simulate']['cpu_seconds']:.1f}"
                  f" CPU s ({run['simulate']['wall_seconds']:.1f} s wall), rest of `npusim "
                  f"compile` {'-' if rest is None else f'{rest:.1f}'} CPU s, load "
                  f"{run['load_average'][0]:.1f}", flush=True)
    report = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "cpus": os.cpu_count(), "target_cpu_seconds": TARGET_CPU_SECONDS,
              "versions": versions}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    md = markdown(report)
    args.out.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
