"""Where requests run: core partitions and each request's partition and arrival rank.

The policy itself (which ready layer a partition serves next) is a kernel in
``kernels/policies/``; this module does the static part, once per run:

- partitions come from ``scheduler.partitions`` in the config; without it, a policy that
  splits cores (``spatial``) divides them evenly between the requests' partition ids (or
  between the requests when they name none), and any other policy uses one partition of
  all cores;
- a request runs in the partition it names, else partitions are dealt out round-robin in
  arrival order;
- ranks order requests by arrival (ties: the order they were given).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npusim.config import POLICIES, NpuConfig
from npusim.errors import NpusimError
from npusim.kernels import state as ks


@dataclass
class Placement:
    partitions: list[list[int]]  # cores of each partition
    core_part: np.ndarray  # [core] partition id
    req: np.ndarray  # [request, R_*]: arrival rank, partition

    @property
    def request_partition(self) -> list[int]:
        return [int(p) for p in self.req[:, ks.R_PART]]


def policy_id(cfg: NpuConfig) -> int:
    return POLICIES.index(cfg.scheduler.policy)


def _splits_cores(cfg: NpuConfig) -> bool:
    from npusim.kernels.policies import MODULES

    return bool(MODULES[policy_id(cfg)].SPLITS_CORES)


def place(cfg: NpuConfig, arrivals: list[int], wanted: list[int | None] | None = None,
          names: list[str] | None = None) -> Placement:
    """Partitions for requests arriving at ``arrivals`` (core cycles) that ask for the
    partitions ``wanted`` (None: any)."""
    n = len(arrivals)
    wanted = wanted if wanted is not None else [None] * n
    names = names or [f"request {i}" for i in range(n)]
    C = cfg.num_cores
    if cfg.scheduler.partitions:
        parts = [list(p) for p in cfg.scheduler.partitions]
    elif _splits_cores(cfg):
        ids = {w for w in wanted if w is not None}
        count = max(ids) + 1 if ids else min(max(n, 1), C)
        if count > C:
            raise NpusimError(f"policy '{cfg.scheduler.policy}' cannot split {C} cores into "
                              f"{count} partitions (a request asks for partition {count - 1})")
        parts = [list(range(i * C // count, (i + 1) * C // count)) for i in range(count)]
    else:
        parts = [list(range(C))]
    core_part = np.zeros(C, dtype=np.int64)
    for pid, cores in enumerate(parts):
        core_part[cores] = pid
    order = sorted(range(n), key=lambda i: (arrivals[i], i))
    req = np.zeros((max(n, 1), ks.N_REQ_FIELDS), dtype=np.int64)
    for rank, i in enumerate(order):
        req[i, ks.R_RANK] = rank
        w = wanted[i]
        if w is not None and not 0 <= w < len(parts):
            raise NpusimError(
                f"{names[i]} asks for partition {w}, but the cores form {len(parts)} "
                f"partition(s) {parts} (policy '{cfg.scheduler.policy}'; set "
                f"scheduler.partitions or use the 'spatial' policy)")
        req[i, ks.R_PART] = rank % len(parts) if w is None else w
    return Placement(parts, core_part, req)
