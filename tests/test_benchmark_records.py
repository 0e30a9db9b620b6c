"""Benchmark records (tests/benchmarks/records.py): a re-run replaces the generated table
and keeps the notes written after it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "benchmarks"))

from records import notes_after_table, write_record  # noqa: E402


def test_a_rerun_replaces_the_table_and_keeps_the_notes_after_it(tmp_path):
    md = tmp_path / "r.md"
    md.write_text("# Bench\n\nold header\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
                  "## 2026-12-02: why 2\n\nA note | with a bar.\n\n| its own | table |\n")
    write_record(md, ["# Bench", "", "new header", "", "| a | b |", "|---|---|", "| 3 | 4 |"])
    assert md.read_text() == ("# Bench\n\nnew header\n\n| a | b |\n|---|---|\n| 3 | 4 |\n\n"
                              "## 2026-12-02: why 2\n\nA note | with a bar.\n\n"
                              "| its own | table |\n")


def test_a_new_record_or_one_without_notes_is_just_the_table(tmp_path):
    md = tmp_path / "r.md"
    write_record(md, ["# Bench", "", "| a |", "|---|", "| 1 |"])
    assert md.read_text() == "# Bench\n\n| a |\n|---|\n| 1 |\n"
    write_record(md, ["# Bench", "", "| a |", "|---|", "| 2 |"])
    assert md.read_text() == "# Bench\n\n| a |\n|---|\n| 2 |\n"
    assert notes_after_table("no table here\n") == ""
