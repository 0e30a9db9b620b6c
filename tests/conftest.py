"""Test order for parallel runs (pytest-xdist, ``addopts`` in pyproject.toml)."""

import os


def pytest_collection_modifyitems(config, items):
    """Tests marked ``long`` (minutes on their own) go first in a worker's share, one share
    each, so that each starts at once on its own worker while the others share the rest,
    instead of one of them starting near the end and running alone, or two queueing on
    one worker. xdist's worksteal scheduler first hands worker w the w-th of equal
    contiguous shares of the list (then idle workers steal from the end of busy ones'), so
    the long tests go to the heads of those shares. Without xdist they simply go first."""
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    long = [item for item in items if item.get_closest_marker("long") is not None]
    rest = [item for item in items if item.get_closest_marker("long") is None]
    heads = [long[w::workers] for w in range(workers)]
    n, ordered, left = len(items), [], len(items)
    for w in range(workers):
        share = left // (workers - w)  # what xdist sends worker w: the pending over those left
        ordered += heads[w]
        fill = max(0, share - len(heads[w]))
        ordered += rest[:fill]
        rest = rest[fill:]
        left -= share
    items[:] = ordered + rest
    assert len(items) == n
