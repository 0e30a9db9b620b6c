"""Loaded by every local sweep worker process as it starts (dask's worker ``preload``).

A terminal's Ctrl-C reaches the whole process group: a worker dying of it would fail the
point it was running, so a worker ignores SIGINT, and the sweep (the client) alone takes it
and stops the run. (The client used to ignore SIGINT itself while it started the workers,
for them to inherit: a Ctrl-C in those seconds was lost, and the sweep ran to its end.)
"""

import signal


def dask_setup(worker) -> None:  # noqa: ARG001 - dask's preload hook
    signal.signal(signal.SIGINT, signal.SIG_IGN)
