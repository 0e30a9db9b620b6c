"""``python -m npusim`` and the ``npusim`` script: the command line. A Ctrl-C while it is
still importing (typer, rich: a tenth of a second) ends it as one at any later moment does,
``interrupted`` and exit 130, not a KeyboardInterrupt traceback."""

import sys

from npusim.errors import EXIT_INTERRUPTED


def main() -> None:
    try:
        from npusim.cli import main as command_line
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    command_line()


if __name__ == "__main__":
    main()
