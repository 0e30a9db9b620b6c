"""The one exception type a user ever sees.

Everything that is the user's fault (a missing file, a config value out of range, an op
npusim cannot lower, a tile that does not fit) raises :class:`NpusimError` with a message
that names the offending thing and what would be valid. The CLI prints the message and
exits non-zero; it never shows a traceback for these.
"""

EXIT_INTERRUPTED = 130  # the command line's exit code on Ctrl-C (128 + SIGINT), as a shell's
EXIT_TERMINATED = 143  # ... and on SIGTERM (128 + 15: a CI job's timeout, ``kill``)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised wherever the command line is (``npusim.__main__``), so that it ends
    as on Ctrl-C: one line, no file half-written. It used to die silently."""


def interruption(err: KeyboardInterrupt) -> tuple[str, int]:
    """What the command line says and its exit code when ``err`` stops it."""
    if isinstance(err, Terminated):
        return "terminated", EXIT_TERMINATED
    return "interrupted", EXIT_INTERRUPTED


class NpusimError(Exception):
    """A user-facing error: bad input, bad config, unsupported model."""


class NpusimWarning(UserWarning):
    """Something the user should know that does not stop the run (a config key npusim
    cannot model yet, a DRAM standard chosen as the nearest match). The CLI prints it as
    ``warning: ...``; in Python it is an ordinary ``warnings`` category."""
