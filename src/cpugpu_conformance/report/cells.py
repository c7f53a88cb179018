"""The matrix's cells and columns: ``ReportedCell`` (one result file in the matrix, its marks
read through ``CellResult.outcome``), ``Column`` (one cell on one device) and their labels, and
the order the rows are shown in. Moved out of view.py, which re-exports every name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import devices as registry
from ..promises import DEVICES, PROMISES
from ..results import CellResult, Outcome, promise_order, release_key
from .marks import ANSWERS, NOTED_KINDS, MarkStyle

# The column of a cell that names no device (a fault result written before it knew one).
NO_DEVICE = "(device unknown)"


@dataclass(frozen=True, eq=False)
class ReportedCell:
    """One result file in the matrix: the model, the file it came from, and whether
    another file in the same matrix claims the same cell name."""

    file: str  # the result file's name, cleaned for display; unique within the matrix
    result: CellResult
    duplicate: bool = False

    @property
    def name(self) -> str:
        return self.result.name

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def completed(self) -> bool:
        return self.result.completed

    @property
    def release(self) -> str:
        return self.result.release

    @property
    def sort_key(self) -> tuple:
        return (release_key(self.release), self.name, self.file)

    @property
    def answer_style(self) -> MarkStyle:
        return ANSWERS[self.result.answer().kind]

    def answer_lines(self, limit: int = 6) -> list[str]:
        """Why the cell is not clean, at most ``limit`` lines (a missing device alone makes ten)."""
        lines = list(self.result.answer().lines)
        if len(lines) <= limit:
            return lines
        return lines[: limit - 1] + [f"... and {len(lines) - limit + 1} more"]

    def devices(self) -> list[str]:
        """The devices this cell has columns for: those it was asked to test.

        A cell that names none still gets one column, so it is never left out of the matrix.
        """
        return self.result.asked_devices() or [NO_DEVICE]

    def mark(self, promise: str, device: str) -> Outcome:
        if device == NO_DEVICE and self.completed:
            return Outcome("untested", "the result names no device it was asked to test")
        return self.result.outcome(promise, device)

    def device_entries(self) -> list[tuple[str, dict[str, Any]]]:
        """The result's device entries in contract order, whatever order its file has them in."""
        entries = self.result.get("devices") or {}
        order = {d: i for i, d in enumerate(DEVICES)}
        return [(d, entries[d]) for d in sorted(entries, key=lambda d: (order.get(d, len(order)), d))
                if isinstance(entries[d], dict)]

    def failures(self) -> Iterator[tuple[str, str, Outcome]]:
        """(promise, device, outcome) for every failed promise, in row then device order."""
        for promise in self.result.promise_numbers():
            for device in self.devices():
                out = self.mark(promise, device)
                if out.kind == "failed":
                    yield promise, device, out

    def unattributed_failures(self) -> list[dict[str, Any]]:
        """Failures outside any promise's check: they make the cell's answer FAILED too."""
        return [f for f in self.result.get("unattributed_failures") or [] if isinstance(f, dict)]


def mark_cells(loaded: Iterable[tuple[str, CellResult]]) -> list[ReportedCell]:
    """(file name, result) pairs -> cells in version order, duplicates of a cell name flagged."""
    loaded = list(loaded)
    counts = Counter(result.name for _, result in loaded)
    cells = [ReportedCell(file, result, counts[result.name] > 1) for file, result in loaded]
    return sorted(cells, key=lambda c: c.sort_key)


def duplicates(cells: Iterable[ReportedCell]) -> dict[str, list[str]]:
    """Cell name -> the files that claim it, for every name claimed more than once."""
    found: dict[str, list[str]] = {}
    for cell in cells:
        if cell.duplicate:
            found.setdefault(cell.name, []).append(cell.file)
    return found


def promise_numbers(cells: Iterable[ReportedCell]) -> list[str]:
    """The rows: the contract's promises, then any other a cell carries, so none is dropped."""
    return promise_order({p for c in cells for p in c.result.promise_numbers()})


def promise_title(number: str, cells: Iterable[ReportedCell] = ()) -> str:
    if number in PROMISES:
        return PROMISES[number]
    for cell in cells:
        title = cell.result.title(number)
        if title != f"promise {number}":
            return title
    return f"promise {number}"


@dataclass(frozen=True)
class Column:
    cell: ReportedCell
    device: str
    index: int  # position in the table, for anchors that do not depend on result text
    label: str = field(default="", compare=False)
    tag: str = field(default="", compare=False)  # what tells it apart from a column with the same release

    @property
    def release(self) -> str:
        return self.cell.release


def ambiguous_releases(cells: Iterable[ReportedCell]) -> set[str]:
    """Releases that more than one cell stands for (a CPU cell and a local GPU cell, say)."""
    return {r for r, n in Counter(c.release for c in cells).items() if n > 1}


def cell_tag(cell: ReportedCell, ambiguous: set[str]) -> str:
    """What tells a cell apart from another with the same release: its name when a release
    has several cells, and its file too when a name has several files; else nothing."""
    if cell.duplicate:
        return f"{cell.name}, from {cell.file}"
    return cell.name if cell.release in ambiguous else ""


def _with_tag(text: str, tag: str) -> str:
    return f"{text} ({tag})" if tag else text


def column_label(cell: ReportedCell, device: str, ambiguous: set[str]) -> str:
    """'release device', plus the cell's tag where the release alone is ambiguous."""
    return _with_tag(f"{cell.release} {device_label(device)}", cell_tag(cell, ambiguous))


def device_label(device: str) -> str:
    """A device as reports name it: a simulated one says so ("sim (simulated)")."""
    return registry.REGISTRY[device].label if device in registry.REGISTRY else device


def release_label(cell: ReportedCell, ambiguous: set[str]) -> str:
    """'release', plus the cell's tag where the release alone is ambiguous."""
    return _with_tag(cell.release, cell_tag(cell, ambiguous))


def columns(cells: list[ReportedCell]) -> list[Column]:
    ambiguous = ambiguous_releases(cells)
    cols: list[Column] = []
    for cell in sorted(cells, key=lambda c: c.sort_key):
        for device in cell.devices():
            cols.append(Column(cell, device, len(cols), column_label(cell, device, ambiguous),
                               cell_tag(cell, ambiguous)))
    return cols


def untested_notes(col: Column, numbers: list[str]) -> list[tuple[str, str]]:
    """(where, why) for the untested marks of a column, for media without hover.

    A column untested everywhere for one reason (a device that was missing) is one line.
    """
    untested = [(n, col.cell.mark(n, col.device)) for n in numbers]
    untested = [(n, out) for n, out in untested if out.kind == "untested"]
    asked = [n for n in numbers if col.cell.mark(n, col.device).asked]
    reasons = {out.note for _, out in untested}
    if untested and len(untested) == len(asked) and len(reasons) == 1:
        return [(col.label, untested[0][1].note or "no reason given")]
    return [(f"{col.label}, promise {n}", out.note or "no reason given") for n, out in untested]


def newest_first(cols: Iterable[Column]) -> list[Column]:
    """The matrix's rows: cells newest first, each cell's devices in contract order."""
    groups: dict[int, list[Column]] = {}
    for col in cols:
        groups.setdefault(id(col.cell), []).append(col)
    return [col for group in reversed(list(groups.values())) for col in group]


def repeated_notes(marks: Mapping[int, Outcome], cols: Iterable[Column]) -> dict[int, str]:
    """Column index -> the label of the column that first showed the same note on the same
    device, for each shown note (marks.NOTED_KINDS) that only repeats the last one shown on
    that device; ``cols`` in the order they are shown.

    A note shown once per change keeps the matrix short; the repeat names where the text
    is, and the full note stays in the mark's tooltip. A column with no shown note (a
    crashed cell) does not interrupt a run of repeats.
    """
    last_shown: dict[str, tuple[tuple[str, str], str]] = {}  # device -> ((kind, note), first column)
    repeats: dict[int, str] = {}
    for col in cols:
        out = marks[col.index]
        if out.kind not in NOTED_KINDS or not out.note:
            continue
        key = (out.kind, out.note)
        previous = last_shown.get(col.device)
        if previous is not None and previous[0] == key:
            repeats[col.index] = previous[1]
        else:
            last_shown[col.device] = (key, col.label)
    return repeats
