"""Parser for ONNXim mapping files: per-layer tiling chosen by the user.

Each line maps one layer's loop bounds to a tiling, e.g.::

    [T] N512 C768 M768 - [O] N13 C2 M20 - [I] N40 C384 M40
    [T] N1 C64 M64 P56 Q56 S3 R3 - [O] N1 C1 M8 P4 Q4 S1 R1 - [I] N1 C64 M8 P15 Q17 S3 R3

``[T]`` is the total loop bound, ``[O]`` the number of outer tiles and ``[I]`` the inner tile
size per loop. Loops: N batch (GEMM rows), C input channels (reduction), M output channels
(GEMM columns), P/Q the two output dims, S/R kernel height/width. Missing loops are 1.
ONNXim uses P/Q both ways round: its conv mapper writes the output rows as P (the lines
published with Gemmini's RTL counts do too: Gemmini's tiler ``tiled_conv_auto`` runs 15 rows
by 17 columns on ResNet-18's early layers, written ``P15 Q17``, and the RTL counts agree
only that way), while its ``ConvWS`` keys a layer by Q = height, P = width. The conv
lowering (``conv._lookup_conv_mapping``) reads P as rows, and as columns for a non-square
layer whose ``[T]`` only matches that way round.

The grammar follows ONNXim's ``Mapping::Mapping(std::string)``: sections are split on '-',
the first token of a section is its tag, loops come in any order. Like ONNXim we accept
several ``[I]`` sections (their counts multiply) and an ``X``/``Y`` suffix on inner counts
(ONNXim's spatial-dimension marker, e.g. ``M16X``), and a later line with the same ``[T]``
replaces an earlier one. Unlike ONNXim we skip blank lines and ``#`` comments, reject a loop
named twice in one section, and check that the tiling covers the loop bounds — ONNXim would
silently simulate a wrong layer instead. ONNXim also multiplies ``[T]`` N by an inner N
(a quirk that only matters when inner N > 1); we keep ``[T]`` exactly as written, so it is
the lookup key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

from npusim.errors import NpusimError
from npusim.paths import existing_file, read_text

LOOP_NAMES = ("N", "C", "M", "P", "Q", "S", "R")

EXPECTED_FORM = (
    "expected '[T] N.. C.. M.. [P.. Q.. S.. R..] - [O] <same loops> - [I] <same loops>', "
    "e.g. '[T] N512 C768 M768 - [O] N13 C2 M20 - [I] N40 C384 M40'"
)

_TOKEN = re.compile(r"([NCMPQSR])(\d+)([XY]?)")


@dataclass(frozen=True)
class LoopCounts:
    """One count per loop; hashable, so the [T] part can key a table."""

    N: int = 1
    C: int = 1
    M: int = 1
    P: int = 1
    Q: int = 1
    S: int = 1
    R: int = 1

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __str__(self) -> str:
        return " ".join(f"{k}{v}" for k, v in self.as_dict().items())


@dataclass(frozen=True)
class Mapping:
    """One mapping line: loop bounds, outer tile counts and inner tile sizes."""

    total: LoopCounts
    outer: LoopCounts
    inner: LoopCounts
    line: int
    text: str


class MappingTable:
    """All mappings of one file, looked up by a layer's total loop bounds."""

    def __init__(self, path: str | Path, mappings: list[Mapping]):
        self.path = Path(path)
        self.mappings = list(mappings)
        self._by_total = {m.total: m for m in self.mappings}  # later lines win, like ONNXim
        self.matched = 0  # lookups that found a line

    def lookup(self, total: LoopCounts) -> Mapping | None:
        """The mapping whose [T] part equals ``total``, or None (caller uses its default)."""
        found = self._by_total.get(total)
        self.matched += found is not None
        return found

    def unused_warnings(self) -> list[str]:
        """A warning when no layer found its line: the file changed nothing."""
        if self.matched:
            return []
        return [f"mapping file {self.path}: no line matched a layer (a line's [T] part must "
                f"equal a GEMM or convolution layer's loop bounds); every layer took npusim's "
                f"own tiling"]

    def __len__(self) -> int:
        return len(self._by_total)

    def __iter__(self):
        return iter(self._by_total.values())


def _parse_section(text: str, tag: str, where: str, line: str, allow_spatial: bool) -> dict[str, int]:
    tokens = text.split()
    if not tokens or tokens[0] != tag:
        found = tokens[0] if tokens else "nothing"
        raise NpusimError(f"{where}: expected section {tag} but found {found!r} in "
                          f"{line!r}; {EXPECTED_FORM}")
    counts: dict[str, int] = {}
    for tok in tokens[1:]:
        m = _TOKEN.fullmatch(tok)
        if not m or (m.group(3) and not allow_spatial):
            raise NpusimError(
                f"{where}: bad loop {tok!r} in the {tag} section of {line!r}; a loop is one of "
                f"{', '.join(LOOP_NAMES)} followed by a count, e.g. 'M64'; {EXPECTED_FORM}"
            )
        name, count = m.group(1), int(m.group(2))
        if count < 1:
            raise NpusimError(f"{where}: loop {tok!r} in the {tag} section must be at least 1; "
                              f"{EXPECTED_FORM}")
        if name in counts:
            raise NpusimError(f"{where}: loop {name} appears twice in the {tag} section of "
                              f"{line!r}; {EXPECTED_FORM}")
        counts[name] = count
    return counts


def _parse(text: str, line_no: int, where: str) -> Mapping:
    line = text.strip()
    sections = line.split("-")
    if len(sections) < 3:
        raise NpusimError(f"{where}: {line!r} has {len(sections)} section(s), needs 3; "
                          f"{EXPECTED_FORM}")
    total = _parse_section(sections[0], "[T]", where, line, allow_spatial=False)
    outer = _parse_section(sections[1], "[O]", where, line, allow_spatial=False)
    inner: dict[str, int] = {}
    for sec in sections[2:]:  # several [I] levels multiply, as in ONNXim
        for name, count in _parse_section(sec, "[I]", where, line, allow_spatial=True).items():
            inner[name] = inner.get(name, 1) * count

    t, o, i = LoopCounts(**total), LoopCounts(**outer), LoopCounts(**inner)
    for name in LOOP_NAMES:
        tot, out, inn = getattr(t, name), getattr(o, name), getattr(i, name)
        if out * inn < tot:
            raise NpusimError(
                f"{where}: loop {name}: {out} outer tiles x inner tile {inn} = {out * inn} does "
                f"not cover the total {tot}; need outer x inner >= total"
            )
        # An inner tile bigger than the loop is fine for one padded tile (systolic arrays pad
        # to their width), but outer tiles that start beyond the loop end would be empty.
        if (out - 1) * inn >= tot:
            raise NpusimError(
                f"{where}: loop {name}: {out} outer tiles of {inn} overshoot the total {tot} — "
                f"the first {out - 1} tiles already cover it, so the last would be empty; "
                f"use at most {-(-tot // inn)} outer tiles"
            )
    return Mapping(total=t, outer=o, inner=i, line=line_no, text=line)


def parse_mapping_line(text: str, line_no: int = 0) -> Mapping:
    """Parse one mapping line (``line_no`` only labels error messages)."""
    return _parse(text, line_no, f"mapping line {line_no}")


def parse_mapping_file(path: str | Path) -> MappingTable:
    """Parse an ONNXim mapping file; blank lines and ``#`` comments are skipped."""
    path = existing_file(path, "mapping file")
    content = read_text(path, "mapping file")
    mappings = []
    for line_no, raw in enumerate(content.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        mappings.append(_parse(stripped, line_no, f"{path}:{line_no}"))
    return MappingTable(path, mappings)
