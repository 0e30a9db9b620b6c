"""The sweep's result as one labelled ``xarray.Dataset``: a dimension per axis, a variable
per headline statistic, written atomically as HDF5 (``.h5``/``.nc``) or Zarr (``.zarr``).

Points not (yet) run or failed hold NaN; ``status`` says which (``ok``, ``failed``,
``pending``) and ``error`` why. Numbers are float64 so that NaN can mark them (cycle counts
stay exact below 2**53); strings are variable-length (object) arrays.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from npusim import __version__
from npusim.errors import NpusimError
from npusim.sweep.spec import Point, Sweep
from npusim.sweep.worker import STATS

HDF5_SUFFIXES = (".h5", ".hdf5", ".nc")
ZARR_SUFFIX = ".zarr"


def check_out_path(out: str | Path) -> Path:
    """Fail before anything runs if the result could never be written there."""
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in HDF5_SUFFIXES + (ZARR_SUFFIX,):
        raise NpusimError(f"--out {out}: give a .h5 (HDF5) or .zarr file name")
    from npusim.atomic import check_writable

    check_writable(out, "--out", directory_ok=suffix == ZARR_SUFFIX)
    if suffix == ZARR_SUFFIX:
        try:
            import zarr  # noqa: F401
        except ImportError:
            raise NpusimError("a .zarr output needs the zarr package: "
                              "pip install 'npusim[zarr]'") from None
        if out.exists() and not _is_sweep_store(out):
            # a store is a directory, replaced whole when the sweep writes it: never one
            # that holds something else (it was moved aside and deleted, files and all)
            raise NpusimError(f"--out {out}: exists and is not an npusim sweep result "
                              f"(a Zarr store it wrote); give another name, or remove it")
    return out


def _is_sweep_store(path: Path) -> bool:
    """Whether ``path`` is a Zarr store holding an npusim sweep dataset."""
    if not path.is_dir():
        return False
    try:
        with xr.open_zarr(path, consolidated=False) as ds:
            return "sweep_name" in ds.attrs and "npusim_version" in ds.attrs
    except Exception:  # noqa: BLE001 - anything unreadable as one is not one
        return False


def build_dataset(sweep: Sweep, points: list[Point], records: dict[str, dict[str, Any]]
                  ) -> xr.Dataset:
    """Place each point's latest record at its grid position."""
    shape = sweep.shape
    dims = [a.name for a in sweep.axes]
    numbers = {name: np.full(shape, np.nan) for name in STATS}
    status = np.full(shape, "pending", dtype=object)
    error = np.full(shape, "", dtype=object)
    hashes = np.full(shape, "", dtype=object)
    for p in points:
        hashes[p.index] = p.hash
        if p.error is not None:
            status[p.index], error[p.index] = "failed", p.error
            continue
        rec = records.get(p.hash)
        if rec is None:
            continue
        status[p.index] = rec["status"]
        error[p.index] = rec.get("error") or ""
        for name, value in (rec.get("stats") or {}).items():
            if name in numbers and value is not None:
                numbers[name][p.index] = value
    data: dict[str, Any] = {}
    for name, (units, description) in STATS.items():
        data[name] = (dims, numbers[name], {"units": units, "description": description})
    data["status"] = (dims, status, {"description": "ok, failed or pending"})
    data["error"] = (dims, error, {"description": "why the point failed"})
    data["point_hash"] = (dims, hashes,
                          {"description": "sha256 of config, workload and npusim version"})
    coords: dict[str, Any] = {}
    for axis in sweep.axes:
        coords[axis.name] = (axis.name, _coord(axis.labels))
        if axis.zipped:
            for key, values in zip(axis.keys, axis.values):
                coords[key] = (axis.name, _coord(values))
    attrs = {
        "title": f"npusim sweep {sweep.name}",
        "sweep_name": sweep.name,
        "description": sweep.description,
        "sweep_file": str(sweep.path) if sweep.path else "",
        "sweep": json.dumps(sweep.raw, default=str),
        "base_config": sweep.base_config,
        "npusim_version": __version__,
        "points": int(np.prod(shape)),
        "points_ok": int((status == "ok").sum()),
        "points_failed": int((status == "failed").sum()),
        "points_pending": int((status == "pending").sum()),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _coord(values: list[Any]) -> np.ndarray:
    """Strings as variable-length objects: HDF5 and Zarr both store those without fuss."""
    if all(isinstance(v, str) for v in values):
        return np.array(values, dtype=object)
    return np.array(values)


def write_dataset(ds: xr.Dataset, out: str | Path) -> None:
    """Write to a temp name beside ``out`` and rename, so ``out`` is never half written."""
    out = Path(out)
    if out.suffix.lower() != ZARR_SUFFIX:
        from npusim.atomic import write_netcdf

        write_netcdf(ds, out, "sweep dataset")
        return
    # a zarr store is a directory: the same idea, with a temp directory
    parent = out.parent if str(out.parent) else Path(".")
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent))
    try:
        shutil.rmtree(tmp)
        ds.to_zarr(tmp, mode="w", consolidated=False)
        _replace_dir(tmp, out)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, OSError):  # a full disk
            from npusim.atomic import write_error

            raise write_error("sweep dataset", out, err) from None
        raise


def _replace_dir(new: Path, out: Path) -> None:
    """A directory cannot be renamed over another: move the old one aside first."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(new, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def open_sweep(path: str | Path) -> xr.Dataset:
    """Load a sweep result (HDF5 or Zarr) into memory, ready for a notebook."""
    path = Path(path)
    if not path.exists():
        raise NpusimError(f"sweep result {path} not found")
    if path.suffix.lower() == ZARR_SUFFIX:
        with xr.open_zarr(path, consolidated=False) as ds:
            return ds.load()
    return xr.load_dataset(path, engine="h5netcdf")
