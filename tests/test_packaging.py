"""What a regular (non-editable) install ships: every package and data file."""

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setuptools():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed():
    st = _setuptools()
    dirs = st["package-dir"]
    found = set()
    for name, folder in dirs.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    # a folder mapped to its own package (npusim.kernels -> kernels/) is not also part of
    # the parent's tree
    assert found - set(st["packages"]) == set()


def test_bundled_data_files_are_covered_by_package_data():
    st = _setuptools()
    for pkg, folder in (("npusim.models", "models"), ("npusim.configs", "configs")):
        patterns = st["package-data"][pkg]
        base = ROOT / folder
        for f in base.rglob("*"):
            if f.is_file() and f.suffix in (".onnx", ".json", ".toml") and \
                    "__pycache__" not in f.parts:
                rel = str(f.relative_to(base))
                assert any(fnmatch.fnmatch(rel, p) and rel.count("/") == p.count("/")
                           for p in patterns), rel
