"""The resumable record of a sweep: an append-only journal of finished points.

``<out>.points.jsonl`` holds one JSON line per finished point (ok or failed), appended and
fsynced as the point finishes, so a kill at any moment loses at most the points still
running. A line torn by a kill mid-write has no newline yet: it is cut off when the journal
is next opened, and never read as a record. A re-run reads the journal and skips every point
whose hash is in it. An exclusive lock keeps two sweeps from writing the same journal.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from npusim.errors import NpusimError

SUFFIX = ".points.jsonl"


def journal_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.name + SUFFIX)


def _check_ours(path: Path, data: bytes) -> None:
    """A journal is JSON lines of ASCII (json.dumps escapes the rest), a torn last line
    too: other bytes mean a file that is not a journal, which npusim must not cut."""
    if not data.isascii():
        raise NpusimError(f"{path} is not a sweep journal (it holds non-text bytes); move it "
                          f"away or give a different --out")


def _unusable(path: Path, err: OSError) -> NpusimError:
    """The error for a journal path npusim cannot open (a directory, no permission)."""
    if isinstance(err, IsADirectoryError):
        return NpusimError(f"sweep journal {path} is a directory; move it away or give "
                           f"another --out")
    return NpusimError(f"cannot open the sweep journal {path}: {err.strerror or err}")


def read_journal(path: str | Path) -> list[dict[str, Any]]:
    """Every complete record in the journal, in the order they were written."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    except OSError as err:
        raise _unusable(Path(path), err) from None
    _check_ours(Path(path), data)
    records = []
    for line in data[:data.rfind(b"\n") + 1].splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # not ours to judge: a foreign line is skipped, never fatal
        if isinstance(record, dict) and isinstance(record.get("hash"), str):
            records.append(record)
    return records


class Journal:
    """The journal of one running sweep, opened for appending under an exclusive lock."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self._file = open(self.path, "a+b", buffering=0)
        except OSError as err:
            raise _unusable(self.path, err) from None
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            raise NpusimError(f"another sweep is writing to {self.path}; wait for it to "
                              f"finish or give a different --out") from None
        self._cut_torn_tail()

    def _cut_torn_tail(self) -> None:
        """Drop a last line left without its newline by a kill mid-write."""
        self._file.seek(0)
        data = self._file.read()
        _check_ours(self.path, data)
        end = data.rfind(b"\n") + 1
        if end != len(data):
            self._file.truncate(end)
            os.fsync(self._file.fileno())

    def records(self) -> dict[str, dict[str, Any]]:
        """hash -> the latest record of that point."""
        return {r["hash"]: r for r in read_journal(self.path)}

    def append(self, record: dict[str, Any]) -> None:
        """One unbuffered write of the whole line (appended: O_APPEND), then fsync."""
        line = json.dumps(record, separators=(",", ":"), default=str).encode() + b"\n"
        fd = self._file.fileno()
        written = os.write(fd, line)
        if written != len(line):  # a full disk: cut the torn line rather than keep it
            self._cut_torn_tail()
            raise NpusimError(f"cannot write the sweep journal {self.path}: disk full?")
        os.fsync(fd)

    def close(self) -> None:
        self._file.close()  # releases the lock

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
