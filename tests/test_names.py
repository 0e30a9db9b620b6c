"""The lists of names the config validates and the kernels number have one source each
(kernels/names.py, kernels/isa.py), and reading them never loads numba."""

import ast
import subprocess
import sys
from pathlib import Path

import npusim
from npusim.kernels import isa, names
from npusim.noc import topologies

ROOT = Path(__file__).resolve().parents[1]
LISTS = {"MEMORY_TYPES": names, "NOC_TYPES": topologies, "POLICIES": names, "COMMANDS": names,
         "LEVELS": names, "RANK_WIDE": names, "VECTOR_OPS": isa, "OPCODE_NAMES": isa,
         "UNIT_NAMES": isa}


def test_name_lists_import_without_numba():
    code = ("import sys\n"
            "import npusim.config, npusim.kernels.names, npusim.kernels.isa, "
            "npusim.kernels.state, npusim.dram, npusim.program\n"
            "from npusim.config import MEMORY_TYPES, NOC_TYPES, POLICIES, VECTOR_OPS\n"
            "from npusim.dram import COMMANDS, LEVELS\n"
            "print(sorted(m for m in sys.modules if m == 'numba' or m.startswith('numba.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_each_list_is_written_out_in_one_module_only():
    """No other source file spells out one of these lists again, as a tuple, a list or a
    dict numbering them (a second copy would drift from the first). A table of values per
    name (default latencies per vector op) is not a copy."""
    sources = [p for d in ("npusim", "kernels") for p in (ROOT / d).rglob("*.py")]
    lists = {tuple(getattr(mod, name)): Path(mod.__file__).resolve()
             for name, mod in LISTS.items()}
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Dict)):
                elts = node.keys if isinstance(node, ast.Dict) else node.elts
                if not elts or not all(isinstance(e, ast.Constant) for e in elts):
                    continue
                if isinstance(node, ast.Dict) and [getattr(v, "value", None)
                                                   for v in node.values] != list(range(len(elts))):
                    continue
                home = lists.get(tuple(e.value for e in elts))
                assert home in (None, path.resolve()), (
                    f"{path}:{node.lineno} repeats a list defined in {home}")


def test_the_config_validates_against_the_kernels_lists():
    from npusim import config
    from npusim.config import schema
    from npusim.dram import standard
    from npusim.kernels.policies import MODULES

    assert config.MEMORY_TYPES is names.MEMORY_TYPES
    assert config.NOC_TYPES is topologies.NOC_TYPES
    # a noc.type is a file in npusim/noc/topologies/; the crossbar has its own model
    assert config.NOC_TYPES[0] == "crossbar"
    assert config.POLICIES is names.POLICIES
    assert config.VECTOR_OPS is isa.VECTOR_OPS
    assert standard.COMMANDS is names.COMMANDS
    rules = {f.name: f.metadata.get("rule") for f in
             __import__("dataclasses").fields(schema.MemoryConfig)}
    assert rules["type"].choices == names.MEMORY_TYPES
    # every policy name has its file, in the same order (its id)
    assert [m.__name__.rsplit(".", 1)[1] for m in MODULES] == [
        p.replace("-", "_") for p in names.POLICIES]
    assert npusim.kernels.names.MEM_DRAM == names.MEMORY_TYPES.index("dram")
