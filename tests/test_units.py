"""The units own their tables and share only the rings (DESIGN.md, "Units and their
contract"), checked on the kernels' source: in a unit's files ``st`` is that unit's tuple
and only its fields are named, the rings (``rg``) are written only by kernels/ports.py, and
kernels/loop.py touches no unit's tables. A kernel that reached into another unit's state
(the crossbar writing a DRAM channel's wake, a memory model indexing the NoC's heads) would
fail here."""

import ast
from pathlib import Path

import pytest

from npusim.kernels import state as ks

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
UNITS = {
    "cores": ((ks.Cores,), ["cores.py", "core.py", "dma.py", "scheduler.py", "policies/fifo.py",
                         "policies/time_shared.py", "policies/spatial.py",
                         "policies/__init__.py"]),
    "noc": ((ks.Crossbar, ks.RouterNetwork), ["noc.py", "crossbar.py", "router_network.py"]),
    "memory": ((ks.Memory,), ["memory.py", "ideal_memory.py", "simple_memory.py", "dram.py",
                           "replay.py"]),
}


def _accesses(path: Path, name: str) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == name}


def _ring_writes(path: Path) -> list[int]:
    """Lines that assign into a ring table (``rg.<table>[...] = / += ...``)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AugAssign) else [])
        for t in targets:
            while isinstance(t, (ast.Subscript, ast.Attribute)):
                if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                        and t.value.id == "rg"):
                    lines.append(node.lineno)
                    break
                t = t.value
    return lines


@pytest.mark.parametrize("unit", list(UNITS))
def test_a_unit_names_only_its_own_tables_and_the_rings(unit):
    models, files = UNITS[unit]
    fields = {f for tables in models for f in tables._fields}
    for f in files:
        path = KERNELS / f
        assert path.exists(), f
        own = _accesses(path, "st")
        assert own <= fields, f"{f} reaches {own - fields}"
        assert _accesses(path, "rg") <= set(ks.Rings._fields), f
        if f != "replay.py":  # the replay driver stands in for the loop
            assert not _accesses(path, "chip"), f"{f} sees the whole chip"


def test_only_the_ports_write_the_rings():
    for path in sorted(KERNELS.rglob("*.py")):
        if path.name != "ports.py":
            assert _ring_writes(path) == [], f"{path.name} writes a ring at lines {_ring_writes(path)}"
    assert _ring_writes(KERNELS / "ports.py")  # the check sees writes where there are some


def test_the_loop_only_composes_units():
    path = KERNELS / "loop.py"
    assert _accesses(path, "chip") <= set(ks.State._fields)
    assert not _accesses(path, "st")
    assert _accesses(path, "cores") == set()  # cores' tables only through cores.py's functions
    assert _accesses(path, "glob") == set()


def test_every_table_belongs_to_one_unit():
    names = [f for t in (ks.Rings, ks.Cores, ks.Memory) for f in t._fields]
    names += {f for t in (ks.Crossbar, ks.RouterNetwork) for f in t._fields}  # one unit
    shared = {n for n in names if names.count(n) > 1} - {"ctl"}
    assert not shared
