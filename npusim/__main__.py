"""``python -m npusim`` runs the command line."""

from npusim.cli import main

if __name__ == "__main__":
    main()
