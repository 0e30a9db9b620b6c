"""Writing a trace to HDF5 atomically, and checking where it will go before a run.

The file is netCDF4-flavoured HDF5 (xarray's h5netcdf engine): ``xarray.open_dataset`` and
plain ``h5py`` both read it. Every variable is gzip-compressed and chunked along time.
It is built in memory, written to a temp file in the same folder (``npusim.atomic``) and
renamed over ``path`` only when complete, so a failed or interrupted run never leaves a
file that looks finished (a killed one may leave the temp file, clearly named as such).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from npusim.errors import NpusimError
from npusim.paths import existing_file

COMPRESSION_LEVEL = 1  # zlib: level 4 wrote 20% slower for a 20% smaller file (ResNet-50 trace)
CHUNK_ELEMENTS = 1 << 18  # about 1 MiB of int32 per chunk


TRACE_SUFFIXES = (".h5", ".hdf5", ".nc")  # what a netCDF4-flavoured HDF5 file is named


def check_trace_path(path: str | Path) -> Path:
    """Fail before simulating if the trace could never be written there, or would be HDF5
    under another kind of file's name (``out.txt``)."""
    from npusim.atomic import check_writable

    checked = check_writable(path, "--trace")
    if checked.suffix.lower() not in TRACE_SUFFIXES:
        raise NpusimError(f"--trace {path}: a trace is an HDF5 (netCDF4) file: name it "
                          f"{', '.join(TRACE_SUFFIXES[:-1])} or {TRACE_SUFFIXES[-1]}")
    return checked


def _encoding(ds: xr.Dataset) -> dict:
    enc = {}
    for name, var in {**ds.data_vars, **ds.coords}.items():
        if var.dtype.kind not in "iuf" or var.ndim == 0 or 0 in var.shape:
            continue
        rest = 1
        for n in var.shape[1:]:
            rest *= n
        chunks = (max(1, min(var.shape[0], CHUNK_ELEMENTS // max(rest, 1))),) + var.shape[1:]
        enc[name] = {"zlib": True, "complevel": COMPRESSION_LEVEL, "chunksizes": chunks}
    return enc


def write_trace(ds: xr.Dataset, path: str | Path) -> Path:
    """Write ``ds`` to ``path`` via a temp file and ``os.replace``; no partial file on
    failure (an existing ``path`` is left as it was), a full disk one NpusimError."""
    from npusim.atomic import write_netcdf

    return write_netcdf(ds, path, "--trace", encoding=_encoding(ds))


# What every npusim trace holds (npusim.trace.dataset writes them; ``trace summary`` and
# ``trace plot`` read them), and what a trace of cycle-level DRAM holds beside: a file
# without one of them, or with an attribute that is not an integer, is corrupt or edited.
INT_ATTRS = ("total_cycles", "core_freq_mhz", "bin_cycles", "window_start_cycle",
             "window_end_cycle")
TEXT_ATTRS = ("model", "config_name", "bin_mode")
VARIABLES = ("core_active_cycles", "unit_busy_cycles")
DRAM_INT_ATTRS = ("dram_freq_mhz",)
DRAM_VARIABLES = ("reads", "writes", "row_hits", "row_misses", "row_conflicts",
                  "bank_busy_cycles", "read_queue_occupancy", "write_queue_occupancy",
                  "rank", "bankgroup", "bank_in_group")


def open_trace(path: str | Path) -> xr.Dataset:
    """Open a trace written by npusim (loaded into memory, the file closed)."""
    path = existing_file(path, "trace file")
    try:
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            if "npusim_version" not in ds.attrs or "bin_cycles" not in ds.attrs:
                raise NpusimError(f"'{path}' is not an npusim trace (written by npusim "
                                  f"simulate --trace; a sweep's result opens with "
                                  f"npusim.sweep.open_sweep)")
            ds = ds.load()
    except (OSError, ValueError) as err:
        raise NpusimError(f"cannot read trace '{path}': {err}") from None
    except (KeyError, RuntimeError) as err:  # h5py: damaged metadata inside an HDF5 file
        raise _unreadable(path, f"{err.args[0] if err.args else err}") from None
    problem = _trace_problem(ds)
    if problem:
        raise _unreadable(path, problem)
    return ds


def _unreadable(path: Path, problem: str) -> NpusimError:
    return NpusimError(f"'{path}' is not a readable npusim trace ({problem}; a corrupt or "
                       f"edited file: write it again with npusim simulate --trace)")


def _trace_problem(ds: xr.Dataset) -> str | None:
    """What an opened trace lacks of what npusim writes (see INT_ATTRS ...), or None."""
    dram = ds.attrs.get("memory_type") == "dram"
    for name in INT_ATTRS + (DRAM_INT_ATTRS if dram else ()):
        value = ds.attrs.get(name)
        if value is None:
            return f"attribute {name} is missing"
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            return f"attribute {name} = {_shown(value)} is not an integer"
    for name in TEXT_ATTRS:
        if not isinstance(ds.attrs.get(name), str):
            return f"attribute {name} is missing"
    for name in VARIABLES + (DRAM_VARIABLES if dram else ()):
        if name not in ds.variables:
            return f"variable {name} is missing"
    return None


def _shown(value) -> str:
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 40 else text[:37] + "..."
