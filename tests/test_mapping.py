"""ONNXim mapping files: exact parse of the documented forms, clear errors otherwise."""

from __future__ import annotations

import pytest

from npusim.errors import NpusimError
from npusim.lowering.mapping import (
    LoopCounts,
    Mapping,
    parse_mapping_file,
    parse_mapping_line,
)

GEMM = "[T] N512 C768 M768 - [O] N13 C2 M20 - [I] N40 C384 M40"
CONV = "[T] N1 C64 M64 P56 Q56 S3 R3 - [O] N1 C1 M8 P4 Q4 S1 R1 - [I] N1 C64 M8 P15 Q17 S3 R3"


def test_gemm_line():
    m = parse_mapping_line(GEMM, 7)
    assert m == Mapping(
        total=LoopCounts(N=512, C=768, M=768),
        outer=LoopCounts(N=13, C=2, M=20),
        inner=LoopCounts(N=40, C=384, M=40),
        line=7,
        text=GEMM,
    )
    assert m.total.P == m.total.Q == m.total.S == m.total.R == 1


def test_conv_line():
    m = parse_mapping_line(CONV)
    assert m.total == LoopCounts(N=1, C=64, M=64, P=56, Q=56, S=3, R=3)
    assert m.outer == LoopCounts(N=1, C=1, M=8, P=4, Q=4, S=1, R=1)
    assert m.inner == LoopCounts(N=1, C=64, M=8, P=15, Q=17, S=3, R=3)
    assert str(m.total) == "N1 C64 M64 P56 Q56 S3 R3"


def test_loop_order_is_free_and_missing_loops_are_one():
    m = parse_mapping_line("[T] M64 N8 - [O] M2 - [I] N8 M32")
    assert m.total == LoopCounts(N=8, M=64)
    assert m.outer == LoopCounts(M=2)
    assert m.inner == LoopCounts(N=8, M=32)


def test_spatial_suffix_and_multiple_inner_levels():
    # ONNXim marks spatial loops with X/Y on inner counts and multiplies [I] levels.
    m = parse_mapping_line("[T] N1 C64 M64 - [O] N1 C1 M2 - [I] N1 C8Y M16X - [I] C8 M2")
    assert m.inner == LoopCounts(N=1, C=64, M=32)


def test_file_lookup_comments_and_duplicates(tmp_path):
    path = tmp_path / "net.mapping"
    path.write_text(
        "# tiling for a test net\n"
        "\n"
        f"{GEMM}\n"
        f"  {CONV}  \n"
        "[T] N512 C768 M768 - [O] N16 C1 M24 - [I] N32 C768 M32\n"
    )
    table = parse_mapping_file(path)
    assert table.path == path
    assert len(table) == 2
    conv = table.lookup(LoopCounts(N=1, C=64, M=64, P=56, Q=56, S=3, R=3))
    assert conv is not None and conv.line == 4 and conv.text == CONV
    gemm = table.lookup(LoopCounts(N=512, C=768, M=768))
    assert gemm.line == 5  # the later line with the same [T] wins, as in ONNXim
    assert gemm.outer == LoopCounts(N=16, C=1, M=24) and gemm.inner == LoopCounts(N=32, C=768, M=32)
    assert table.lookup(LoopCounts(N=512, C=768, M=769)) is None


@pytest.mark.parametrize(
    "line,message",
    [
        ("[T] N512 C768 M768 - [O] N13 C2 M20", r"2 section\(s\), needs 3"),
        ("[T] N512 C768 M768 [O] N13 C2 M20 [I] N40 C384 M40", r"1 section\(s\)"),
        ("[X] N512 - [O] N1 - [I] N512", r"expected section \[T\] but found '\[X\]'"),
        ("[T] N512 - [I] N1 - [O] N512", r"expected section \[O\] but found '\[I\]'"),
        ("[T] N512 K3 - [O] N1 - [I] N512", r"bad loop 'K3' in the \[T\] section"),
        ("[T] N512 - [O] N1X - [I] N512", r"bad loop 'N1X' in the \[O\] section"),
        ("[T] Nabc - [O] N1 - [I] N512", r"bad loop 'Nabc'"),
        ("[T] N512 - [O] N0 - [I] N512", r"'N0' in the \[O\] section must be at least 1"),
        ("[T] N512 N4 - [O] N1 - [I] N512", r"loop N appears twice in the \[T\] section"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.mapping"
    path.write_text(f"{GEMM}\n{line}\n")
    with pytest.raises(NpusimError, match=rf"bad\.mapping:2: .*{message}") as err:
        parse_mapping_file(path)
    assert "e.g. '[T] N512 C768 M768 - [O] N13 C2 M20 - [I] N40 C384 M40'" in str(err.value)


def test_non_covering_line_names_loop(tmp_path):
    path = tmp_path / "short.mapping"
    # P: 3 outer tiles x 15 = 45 < 56.
    path.write_text("# header\n[T] N1 C64 M64 P56 Q56 S3 R3 - [O] N1 C1 M8 P3 Q4 S1 R1 - "
                    "[I] N1 C64 M8 P15 Q17 S3 R3\n")
    with pytest.raises(NpusimError, match=r"short\.mapping:2: loop P: 3 outer tiles x inner tile "
                                          r"15 = 45 does not cover the total 56"):
        parse_mapping_file(path)


def test_overshooting_outer_tiles_are_rejected(tmp_path):
    path = tmp_path / "over.mapping"
    # M: 4 outer tiles of 32 over a total of 64 — the last two tiles would be empty.
    path.write_text("[T] N8 C8 M64 - [O] N1 C1 M4 - [I] N8 C8 M32\n")
    with pytest.raises(NpusimError, match=r"over\.mapping:1: loop M: 4 outer tiles of 32 "
                                          r"overshoot the total 64.*at most 2 outer tiles"):
        parse_mapping_file(path)


def test_single_padded_tile_is_allowed():
    # Systolic arrays pad a small loop up to the array width: one inner tile > total is fine.
    m = parse_mapping_line("[T] N13 C64 M64 - [O] N1 C1 M1 - [I] N16 C64 M64")
    assert m.inner.N == 16 and m.outer.N == 1


def test_line_error_without_file_uses_line_number():
    with pytest.raises(NpusimError, match=r"mapping line 3: loop C: 1 outer tiles x inner tile "
                                          r"384 = 384 does not cover the total 768"):
        parse_mapping_line("[T] N512 C768 M768 - [O] N13 C1 M20 - [I] N40 C384 M40", 3)


def test_missing_file(tmp_path):
    with pytest.raises(NpusimError, match=r"mapping file not found: '.*nothing\.mapping'"):
        parse_mapping_file(tmp_path / "nothing.mapping")
