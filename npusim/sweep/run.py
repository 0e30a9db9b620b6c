"""Running a sweep on Dask: a local cluster of worker processes by default, or an existing
``dask.distributed`` scheduler, with the same code path for both.

The client (this process) is the only writer of the journal: each point is appended as its
future completes, so the cluster needs no shared file system. Before anything runs, every
point is expanded and checked (:func:`npusim.sweep.spec.check_points`); points already in
the journal are skipped; the rest are submitted at once and recorded as they finish.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Protocol

import xarray as xr

from npusim import __version__
from npusim.errors import NpusimError
from npusim.sweep.dataset import build_dataset, check_out_path, write_dataset
from npusim.sweep.spec import Point, Sweep, check_points, load_sweep
from npusim.sweep.store import Journal, journal_path
from npusim.sweep.worker import execute_point

CONNECT_TIMEOUT_S = 10


class Reporter(Protocol):
    """What the caller hears while the sweep runs (the CLI draws a progress bar)."""

    def start(self, to_run: int, total: int, reused: int, where: str) -> None: ...

    def point_done(self, record: dict[str, Any]) -> None: ...


def run_sweep(sweep: str | Path | Sweep, out: str | Path, *, workers: int | None = None,
              scheduler: str | None = None, timeout: float | None = None,
              retry_failed: bool = False, reporter: Reporter | None = None) -> xr.Dataset:
    """Run every point of ``sweep`` not yet recorded for ``out``; return the full dataset.

    ``workers`` local worker processes (default: one per CPU), or ``scheduler`` the address
    of a running ``dask.distributed`` scheduler (``tcp://host:port``); ``timeout`` seconds
    per point; ``retry_failed`` runs points recorded as failed again. The dataset is written
    to ``out`` when the sweep finishes and also when it is interrupted (KeyboardInterrupt
    is re-raised after that); a re-run resumes from the journal ``<out>.points.jsonl``.
    """
    if workers is not None and workers < 1:
        raise NpusimError(f"--workers {workers}: give at least 1")
    if workers is not None and scheduler:
        raise NpusimError("--workers and --scheduler exclude each other: the scheduler's "
                          "cluster has its own workers")
    if timeout is not None and not timeout > 0:
        raise NpusimError(f"--timeout {timeout}: give a positive number of seconds")
    sweep = sweep if isinstance(sweep, Sweep) else load_sweep(sweep)
    out = check_out_path(out)
    points = sweep.points()
    check_points(sweep, points)

    path = journal_path(out)
    fresh = not path.exists()
    try:
        return _run_points(sweep, points, out, path, workers, scheduler, timeout, retry_failed,
                           reporter)
    except BaseException:
        if fresh and path.is_file() and path.stat().st_size == 0:
            path.unlink()  # a sweep that recorded nothing leaves no journal behind
        raise


def points_to_run(points: list[Point], records: dict[str, dict[str, Any]],
                  retry_failed: bool) -> dict[str, list[Point]]:
    """hash -> the valid points a run starts (one simulation for points that differ only
    in their labels): those not recorded yet, and with ``retry_failed`` those recorded as
    failed. (``npusim sweep --dry-run`` counts these.)"""
    todo: dict[str, list[Point]] = {}
    for p in points:
        rec = records.get(p.hash) if p.error is None else None
        if p.error is None and (rec is None or (retry_failed and rec["status"] != "ok")):
            todo.setdefault(p.hash, []).append(p)
    return todo


def _run_points(sweep, points, out, path, workers, scheduler, timeout, retry_failed,
                reporter) -> xr.Dataset:
    with Journal(path) as journal:
        records = journal.records()
        todo = points_to_run(points, records, retry_failed)
        valid = sum(p.error is None for p in points)
        reused = valid - sum(len(pts) for pts in todo.values())
        try:
            if todo:
                _execute(todo, journal, records, workers, scheduler, timeout, reporter,
                         reused=reused, total=len(points))
        except KeyboardInterrupt:  # what finished is in the dataset, the rest is pending
            write_dataset(build_dataset(sweep, points, journal.records()), out)
            raise
        ds = build_dataset(sweep, points, records)
        write_dataset(ds, out)
    return ds


def _execute(todo: dict[str, list[Point]], journal: Journal, records: dict, workers, scheduler,
             timeout, reporter, *, reused: int, total: int) -> None:
    from distributed import as_completed

    run_id = uuid.uuid4().hex[:12]
    with _client(workers, scheduler, len(todo)) as (client, where):
        if reporter is not None:
            reporter.start(len(todo), total, reused, where)
        futures = {}
        for h, pts in todo.items():
            task = {"hash": h, "config": pts[0].config, "workload": pts[0].workload,
                    "timeout": timeout, "version": __version__}
            fut = client.submit(execute_point, task, key=f"npusim-point-{h[:20]}-{run_id}",
                                pure=False)
            futures[fut] = pts
        try:
            for fut in as_completed(futures):
                pts = futures.pop(fut)
                record = _record_of(fut, pts[0].hash)
                if record is None:
                    continue
                record.update(run=run_id, finished=time.time(),
                              setting=[p.setting for p in pts])
                journal.append(record)
                records[record["hash"]] = record
                if reporter is not None:
                    reporter.point_done(record)
        finally:
            if futures:
                client.cancel(list(futures))


def _record_of(fut, point_hash: str) -> dict[str, Any] | None:
    """The worker's record; a failed one when the task itself failed (the worker died);
    None when it was cancelled: that point has not finished. (A Ctrl-C while waiting here
    must reach run_sweep, so KeyboardInterrupt is not caught.)"""
    from concurrent.futures import CancelledError

    try:
        return fut.result()
    except CancelledError:
        return None
    except Exception as err:  # noqa: BLE001 - e.g. KilledWorker: this point failed, not the sweep
        return {"hash": point_hash, "status": "failed", "wall_seconds": None,
                "error": f"{type(err).__name__}: {err}".strip()}


@contextlib.contextmanager
def _client(workers: int | None, scheduler: str | None, n_tasks: int):
    """A dask client: connected to ``scheduler``, or to a new local process cluster."""
    import npusim.kernels  # noqa: F401 - sets NUMBA_CACHE_DIR, which local workers inherit

    from distributed import Client, LocalCluster

    for name in ("distributed", "tornado"):  # worker shutdown chatter is not the user's news
        logging.getLogger(name).setLevel(logging.ERROR)
    if scheduler:
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as err:
            raise NpusimError(f"--scheduler {scheduler}: cannot connect: {err}") from None
        with client:
            n = len(client.scheduler_info().get("workers", {}))
            yield client, f"{scheduler} ({n} worker{'s' if n != 1 else ''})"
        return
    n = min(workers or os.cpu_count() or 1, n_tasks)
    import dask

    # A point that kills its worker process is tried on one more worker, then recorded as
    # failed (dask's default would take down four workers first).
    # The scheduler serves its metrics on 8787 even without a dashboard, and says so in a
    # UserWarning when another program holds that port: it takes another, which is news to
    # no one running a sweep.
    # Its processes log only what is critical: a worker that loses its scheduler when the
    # sweep is interrupted logged the lost heartbeat with two tracebacks (a point's own
    # failure is in its record, a worker's death in the point's).
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}), \
            warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Port .* is already in use")
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.CRITICAL,
                               preload=["npusim.sweep.worker_signals"])
    with cluster, Client(cluster) as client:
        yield client, f"{n} local worker{'s' if n != 1 else ''}"


