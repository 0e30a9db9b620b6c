"""Reusing lowered programs within one process: a sweep's points that lower the same graph
on configs agreeing in every value the lowering reads get a copy of one Program.

Lowering is a deterministic function of the graph, the mapping table, the ``unsupported``
mode and the config values it reads. Which values those are is not written down anywhere
that could fall out of step with the code: a lowering done while reuse is on reads the
config through a stand-in (:class:`_ReadLog`) that logs the path and value of every field
it reads (``num_cores``, ``core.spad_bytes``, ``memory.peak_bytes_per_s``, ...). A later
lowering of the same graph reuses the program only when its config has the same value at
every logged path, so no point can get a program lowered for other settings; a field the
lowering never reads (a DRAM page policy, the NoC, the scheduler) does not stop reuse.

Only inside :func:`reusing_programs` (a sweep worker runs each point in it,
npusim.sweep.worker): a single simulation lowers once and has nothing to reuse.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import pickle
from typing import Any, Callable, Iterator

Reads = dict[tuple[str, ...], Any]


class _ReadLog:
    """A read-only stand-in for a config section: each attribute read is logged with its
    value (sections give stand-ins of their own, so only leaves are logged)."""

    __slots__ = ("_target", "_path", "_log")

    def __init__(self, target: Any, path: tuple[str, ...], log: Reads):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_log", log)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        path = self._path + (name,)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return _ReadLog(value, path, self._log)
        self._log[path] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"lowering may not change the config ({name})")


def _value_at(config: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        config = getattr(config, name)
    return config


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


class ProgramCache:
    """The last ``size`` lowerings, each as (graph digest, reads, program), oldest first."""

    def __init__(self, size: int):
        self.size = size
        self.entries: list[tuple[str, Reads, Any]] = []
        self.hits = 0
        self.misses = 0

    def lowered(self, graph, config, mapping, unsupported: str,
                lower: Callable[..., Any]):
        """``lower(graph, config, mapping, unsupported)``, or a copy of an earlier result
        of the same graph whose lowering read the same values from its config."""
        try:
            key = _digest(graph, mapping, unsupported)
        except (pickle.PicklingError, TypeError, AttributeError):
            return lower(graph, config, mapping, unsupported)  # cannot tell: lower afresh
        for i, (k, reads, program) in enumerate(self.entries):
            if k == key and all(_same(_value_at(config, p), v) for p, v in reads.items()):
                self.hits += 1
                self.entries.append(self.entries.pop(i))
                return copy.deepcopy(program)
        reads: Reads = {}
        program = lower(graph, _ReadLog(config, (), reads), mapping, unsupported)
        self.misses += 1
        self.entries.append((key, reads, copy.deepcopy(program)))
        del self.entries[:-self.size]
        return program


def _digest(graph, mapping, unsupported: str) -> str:
    """Everything but the config that lowering reads: every field of the graph (nodes,
    tensors with their constant values, ...; not its producer/consumer index), the mapping
    lines, the mode."""
    fields = [getattr(graph, f.name) for f in dataclasses.fields(graph) if f.compare]
    table = None if mapping is None else (str(mapping.path), mapping.mappings)
    parts = (fields, table, unsupported)
    return hashlib.sha256(pickle.dumps(parts, protocol=pickle.HIGHEST_PROTOCOL)).hexdigest()


_cache = ProgramCache(size=4)
_active = False


@contextlib.contextmanager
def reusing_programs() -> Iterator[ProgramCache]:
    """Reuse programs for the lowerings done inside this block; the programs are kept for
    the next such block of this process (a sweep worker's next point). Yields the cache:
    its ``hits`` and ``misses`` count the lowerings."""
    global _active
    before, _active = _active, True
    try:
        yield _cache
    finally:
        _active = before


def lowered(graph, config, mapping, unsupported: str, lower: Callable[..., Any]):
    """``lower(...)``, through the cache inside :func:`reusing_programs`."""
    if not _active:
        return lower(graph, config, mapping, unsupported)
    return _cache.lowered(graph, config, mapping, unsupported, lower)
