"""``python -m npusim`` and the ``npusim`` script: the command line. A Ctrl-C while it is
still importing (typer, rich: a tenth of a second) ends it as one at any later moment does,
``interrupted`` and exit 130, not a KeyboardInterrupt traceback; a SIGTERM at any moment
likewise, ``terminated`` and exit 143; once the command has ended, neither changes
anything."""

import signal
import sys

from npusim.errors import Terminated, interruption


def _terminate(signum, frame) -> None:
    raise Terminated


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    try:
        from npusim.cli import main as command_line
    except KeyboardInterrupt as err:
        word, code = interruption(err)
        print(word, file=sys.stderr)
        raise SystemExit(code) from None
    try:
        command_line()
    finally:
        # the command is done, its outputs written and its exit code set: a Ctrl-C in the
        # interpreter's last moments raised in a finalizer ("Exception ignored in: ...
        # KeyboardInterrupt", 3 of 50 tries at the end of a run) and changed nothing else
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


if __name__ == "__main__":
    main()
