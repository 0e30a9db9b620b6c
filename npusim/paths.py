"""Where the bundled presets and models live, installed or in a source checkout."""

from importlib import resources
from pathlib import Path


def configs_dir() -> Path:
    """Folder of the bundled hardware presets (`configs/` in the repository)."""
    return Path(str(resources.files("npusim.configs")))


def models_dir() -> Path:
    """Folder of the bundled ONNX models (`models/` in the repository)."""
    return Path(str(resources.files("npusim.models")))


def existing_file(path, what: str) -> Path:
    """``path`` as a Path, or the error a user sees when it is missing or a directory
    (``what`` names it: "mapping file", "memory trace", ...)."""
    from npusim.errors import NpusimError

    path = Path(path)
    if path.is_dir():
        raise NpusimError(f"{what} '{path}' is a directory, not a file")
    if not path.is_file():
        raise NpusimError(f"{what} not found: '{path}'")
    return path


# Every input file read so far (resolved path -> what it was): no output of this process
# replaces one (``npusim.atomic``), even one only another input names (an ONNXim config's
# DRAM file, a request file's models: --json over those replaced them).
_inputs_read: dict[Path, str] = {}


def note_input(path, what: str) -> None:
    """Record ``path`` as an input this process read (``what`` names it in messages)."""
    try:
        _inputs_read.setdefault(Path(path).resolve(), what)
    except OSError:
        pass


def input_named(path) -> str | None:
    """What input ``path`` was, if this process read it as one."""
    try:
        return _inputs_read.get(Path(path).resolve())
    except OSError:
        return None


def read_text(path: Path, what: str) -> str:
    """A text file's contents, or one error naming ``what`` when it cannot be read or is
    not text (a binary file given where a config, mapping or trace belongs)."""
    from npusim.errors import NpusimError

    note_input(path, what)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise NpusimError(f"{what} {path}: cannot read it ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise NpusimError(f"{what} {path}: not a text file") from None


def bundled_names(folder: Path) -> list[str]:
    """Names of the bundled ``<name>.toml`` files of a data folder (``configs/dram`` ...)."""
    return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


def resolve_data_file(name, folder: Path, what: str, suffixes=(".toml",), also: str = "") -> Path:
    """A bundled ``folder/<name>.toml`` by bare name, or a file path (anything with one of
    ``suffixes``, a path separator, or an existing file); errors name what would be valid."""
    from npusim.errors import NpusimError

    s = str(name)
    p = Path(s)
    if p.suffix.lower() in suffixes or p.is_file() or "/" in s or "\\" in s:
        if not p.is_file():
            raise NpusimError(f"{what} file {s} does not exist")
        return p
    p = folder / f"{s}.toml"
    if not p.is_file():
        raise NpusimError(f"unknown {what} {s!r}: bundled ones are "
                          f"{', '.join(bundled_names(folder))} (files in {folder}){also}")
    return p
