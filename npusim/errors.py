"""The one exception type a user ever sees.

Everything that is the user's fault (a missing file, a config value out of range, an op
npusim cannot lower, a tile that does not fit) raises :class:`NpusimError` with a message
that names the offending thing and what would be valid. The CLI prints the message and
exits non-zero; it never shows a traceback for these.
"""

EXIT_INTERRUPTED = 130  # the command line's exit code on Ctrl-C (128 + SIGINT), as a shell's


class NpusimError(Exception):
    """A user-facing error: bad input, bad config, unsupported model."""


class NpusimWarning(UserWarning):
    """Something the user should know that does not stop the run (a config key npusim
    cannot model yet, a DRAM standard chosen as the nearest match). The CLI prints it as
    ``warning: ...``; in Python it is an ordinary ``warnings`` category."""
