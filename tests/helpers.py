"""Small helpers shared by the tests: hand-built programs and configs."""

from __future__ import annotations

import subprocess
import sys
from math import prod
from pathlib import Path

import onnx
from onnx import TensorProto

from npusim.config import NpuConfig, load_config
from npusim.engine import run_program
from npusim.kernels import isa
from npusim.kernels import state as ks
from npusim.kernels.jit import COMPILE_NOTICE
from npusim.program import LayerInfo, Program, ProgramBuilder


def config(*overrides: str, preset: str = "gemmini_validation") -> NpuConfig:
    """The Gemmini-like 1-core 8x8 config (ideal memory) with overrides."""
    return load_config(preset, list(overrides))


def one_tile_program(rows: list, bases=(0, 0, 0, 0), tiles: int = 1) -> Program:
    """A program of one layer whose tiles all run the instruction list ``rows``; the layer
    states its GEMMs' MACs, as a lowering states its op's."""
    macs = tiles * sum(int(r[isa.I_MACS]) for r in rows if r[isa.I_UNIT] == isa.UNIT_SYSTOLIC)
    b = ProgramBuilder()
    b.begin_layer(LayerInfo("hand", "Test", [], (), macs, "", "hand"), [])
    tpl = b.template("t", lambda: rows)
    for _ in range(tiles):
        b.begin_group()
        b.add_tile(tpl, bases)
    return b.build()


def cycles(prog: Program, cfg: NpuConfig, skip: bool = True) -> int:
    raw = run_program(prog, cfg, skip=skip)
    return -(-int(raw.state.glob[ks.G_END]) // raw.timebase.core_period)


def weight(name: str, shape, dtype: int = TensorProto.FLOAT) -> onnx.TensorProto:
    """An initializer with a shape but no bytes: its external data file does not exist."""
    t = onnx.TensorProto()
    t.name, t.data_type = name, dtype
    t.dims.extend(shape)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "absent.bin"), ("offset", "0"), ("length", str(4 * prod(shape)))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def without_compile_notice(stderr: str) -> str:
    """stderr less the line a cold kernel cache adds (the first run compiles)."""
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if line.rstrip("\n") != COMPILE_NOTICE)


def write_on_a_full_disk(prelude: str, write: str, cap: int, out: Path, message: str) -> None:
    """Run ``prelude``, then ``write`` (``out`` is ``sys.argv[1]``), in a Python subprocess
    whose writes past ``cap`` bytes fail in the kernel (EFBIG, SIGXFSZ ignored) as a full
    disk fails them (ENOSPC): no root or mount needed. The write must give one NpusimError,
    ``message`` naming ``out``, exit 2, no traceback and no file in ``out``'s folder."""
    script = "\n".join([
        "import resource, signal, sys", "from npusim.errors import NpusimError", prelude,
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)",
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({cap}, resource.RLIM_INFINITY))",
        "try:", f"    {write}", "except NpusimError as err:", "    print(err)",
        "    sys.exit(2)"])
    proc = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True,
                          text=True, timeout=600, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert proc.stdout == f"{message} {out}: File too large\n"
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert list(out.parent.iterdir()) == []
