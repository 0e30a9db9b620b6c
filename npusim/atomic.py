"""Output files that appear whole or not at all.

Every file npusim writes for the user (``--json``, ``--trace``, a sweep's dataset) goes
through :func:`atomic_file`: it is written to a temp name beside the target and renamed over
it only when complete, so an error, a Ctrl-C or a kill never leaves a half-written target (an
existing one stays as it was). A temp file left by ``kill -9`` is recognisably one:
``.<name>.<random>.tmp``.

HDF5 files (a trace, a sweep's dataset) are built in memory and written out as bytes
(:func:`write_netcdf`): HDF5 itself never writes to the disk. When it did, a full disk
failed h5py's close half-way (one "Exception ignored" traceback per dataset it could not
flush), left h5netcdf's file object unclosed, and its ``__del__`` then flushed into the
half-closed HDF5 file and crashed the interpreter (SIGSEGV). Plain file writes fail with
one OSError instead: one error line, and the temp file removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from npusim.errors import NpusimError
from npusim.paths import input_named


def check_writable(path: str | Path, option: str, directory_ok: bool = False) -> Path:
    """Fail before any work if ``path`` could never be written (``option`` names it in the
    message, e.g. ``--json``)."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir() and not directory_ok:
        raise NpusimError(f"{option} {path}: is a directory; give a file name")
    if not parent.is_dir():
        raise NpusimError(f"{option} {path}: directory '{parent}' does not exist")
    if not os.access(parent, os.W_OK):
        raise NpusimError(f"{option} {path}: directory '{parent}' is not writable")
    return path


def check_outputs_apart(outputs: dict[str, str | Path | None],
                        inputs: dict[str, str | Path | None]) -> None:
    """Fail before any work when an output (option -> path) would replace an input file
    (what it is -> path) or another output."""
    taken: dict[Path, str] = {}
    for what, path in inputs.items():
        if path is not None and Path(path).is_file():
            taken[Path(path).resolve()] = what
    for option, path in outputs.items():
        if path is None:
            continue
        key = Path(path).resolve()
        if key in taken:
            raise NpusimError(f"{option} {path} is {taken[key]}: writing there would replace "
                              f"it; give another file name")
        taken[key] = f"the {option} output"


def _written_path(path: Path) -> Path:
    """Where writing ``path`` goes: a symbolic link's target (renaming a file over the
    link would replace the link and leave its target as it was)."""
    return path.resolve() if path.is_symlink() else path


def _is_stream(path: Path) -> bool:
    """An existing device, pipe or socket (``--json /dev/stdout``, a FIFO): written into,
    as a shell redirection would; renaming a file over it replaced the node itself
    (``--json /dev/full`` left a regular file there)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _new_file_mode(path: Path) -> int:
    """The mode an existing target has, else what open() would give under the umask."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def write_error(what: str, path: Path, err: OSError) -> NpusimError:
    """The one line a failed write of output ``what`` gives (a full disk: "No space left
    on device")."""
    return NpusimError(f"cannot write {what} {path}: {err.strerror or err}")


@contextlib.contextmanager
def atomic_file(path: str | Path, what: str):
    """Yield a temp path to write; on success it replaces ``path``, on any failure it is
    removed. An OSError becomes one NpusimError naming ``what`` (e.g. ``--json``)."""
    path = Path(path)
    stream = _is_stream(path)
    if not stream:
        path = _written_path(path)
        read = input_named(path)
        if read is not None:  # (checked before the run where the option named it)
            raise NpusimError(f"{what} {path}: this run read it as an input ({read}): "
                              f"writing there would replace it; give another file name")
    parent = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                   dir=tempfile.gettempdir() if stream else parent)
        os.close(fd)
        os.chmod(tmp, _new_file_mode(path))  # mkstemp makes 0600; match a normal new file
    except OSError as err:
        raise write_error(what, path, err) from None
    try:
        yield Path(tmp)
        if stream:  # a device or a pipe: what was written goes into it, whole
            with open(tmp, "rb") as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise write_error(what, path, err) from None
        raise


def write_bytes(path: str | Path, data: bytes | memoryview, what: str) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`atomic_file`) and durably (fsync
    before the rename); a full disk is one NpusimError naming ``what`` and no file."""
    path = Path(path)
    with atomic_file(path, what) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    return path


def write_netcdf(ds, path: str | Path, what: str, encoding: dict | None = None) -> Path:
    """Write the ``xarray.Dataset`` ``ds`` as netCDF4-flavoured HDF5 (h5netcdf), built in
    memory and written out by :func:`write_bytes` (see the module docstring for why)."""
    data = ds.to_netcdf(engine="h5netcdf", encoding=encoding)
    return write_bytes(path, data, what)
