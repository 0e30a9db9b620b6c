"""Writing a benchmark's Markdown record without losing what was written beside it.

A record is a generated header and table, followed by dated notes that sessions write by
hand (what changed, why a number moved, what was tried). A re-run that rewrote the whole
file dropped those notes (`fast.md` twice on 2026-12-02, `serving.md` once).
"""

from __future__ import annotations

from pathlib import Path


def notes_after_table(text: str) -> str:
    """What follows the first Markdown table of ``text`` (its leading blank lines dropped);
    empty if there is no table or nothing after it."""
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    if start is None:
        return ""
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[end:]).strip("\n")


def write_record(path: Path, generated: list[str]) -> None:
    """Write ``generated`` (a header and one table) to ``path``, followed by the notes the
    file held after its table."""
    notes = notes_after_table(path.read_text()) if path.exists() else ""
    path.write_text("\n".join(generated).rstrip("\n") + "\n" + ("\n" + notes + "\n" if notes else ""))
