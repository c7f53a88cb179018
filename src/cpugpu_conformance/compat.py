"""Cell results -> the compatibility matrix: columns, marks, answers and observed behaviour.

Every cell is read through ``results.CellResult``: a mark is the cell's
``outcome(promise, device)`` and a column header carries the cell's ``answer()``, so the
report shows exactly the verdict the gate and the summary use. Nothing here formats for a
medium; ``report`` renders it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from .promises import PROMISES
from .results import CELL_STATUSES, CellResult, Outcome, observation_key, observation_text, promise_order


@dataclass(frozen=True)
class MarkStyle:
    symbol: str
    word: str
    meaning: str

    @property
    def label(self) -> str:
        return f"{self.symbol} {self.word}"


# One mark per Outcome kind. Every mark has its own symbol *and* word, so none is told
# apart by colour alone; a cell that did not complete shows its status in every row.
MARKS: dict[str, MarkStyle] = {
    "passed": MarkStyle("✅", "pass", "at least one check of the promise ran, and every check held"),
    "failed": MarkStyle("❌", "FAIL", "a check of the promise failed; the reproducer is in the failures section"),
    "recorded": MarkStyle("📝", "recorded", "implementation-defined: what happened is recorded, not judged"),
    "untested": MarkStyle(
        "❓", "untested",
        "asked for, but no check ran (device missing, checks skipped, or no verdict in the file): the reason is "
        "given; never a pass",
    ),
    "not_applicable": MarkStyle("➖", "n/a", "the contract does not make this promise on this device"),
    "not_requested": MarkStyle("⏭", "not requested", "the run was told to leave this promise out (--promise)"),
    "interrupted": MarkStyle(
        "⏹", "interrupted", "the run was stopped before it wrote its verdicts (killed, cancelled, or still running)"
    ),
    "crashed": MarkStyle("💥", "crashed", "the test process died (abort, segfault, out of memory); no verdicts"),
    "timed_out": MarkStyle("⏱", "timed out", "the cell ran past its time limit; no verdicts"),
    "not_installed": MarkStyle("📦", "not installed", "the torch release could not be installed; no verdicts"),
    "wrong_torch": MarkStyle(
        "🚫", "wrong torch", "the cell got a torch other than the one it asked for, so nothing was tested"
    ),
    "error": MarkStyle("⚠️", "error", "the cell failed before testing (usage or setup error); no verdicts"),
}

# A cell's answer, shown once per column above the promises: only "clean" is a clean cell.
ANSWERS: dict[str, MarkStyle] = {
    "passed": MarkStyle("✅", "clean", "the cell completed and every promise it was asked about passed or was recorded"),
    "failed": MarkStyle("❌", "FAILED", "at least one check failed"),
    "untested": MarkStyle("❓", "UNTESTED", "no check failed, but something the cell was asked to test was not tested"),
    **{status: MARKS[status] for status in CELL_STATUSES if status != "completed"},
}

# Fail at import, not in a published report, if results.py grows a status without a mark.
_unmarked = set(CELL_STATUSES) - {"completed"} - set(MARKS)
assert not _unmarked, f"cell statuses without a mark: {sorted(_unmarked)}"

# The column of a cell that names no device (a fault result written before it knew one).
NO_DEVICE = "(device unknown)"


def version_key(release: str) -> tuple:
    """Sort key: real versions in version order, anything unparseable after them by name."""
    try:
        return (0, Version(release), "")
    except InvalidVersion:
        return (1, Version("0"), release)


@dataclass(frozen=True, eq=False)
class Cell:
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
        return (version_key(self.release), self.name, self.file)

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


def mark_cells(loaded: Iterable[tuple[str, CellResult]]) -> list[Cell]:
    """(file name, result) pairs -> cells in version order, duplicates of a cell name flagged."""
    loaded = list(loaded)
    counts = Counter(result.name for _, result in loaded)
    cells = [Cell(file, result, counts[result.name] > 1) for file, result in loaded]
    return sorted(cells, key=lambda c: c.sort_key)


def duplicates(cells: Iterable[Cell]) -> dict[str, list[str]]:
    """Cell name -> the files that claim it, for every name claimed more than once."""
    found: dict[str, list[str]] = {}
    for cell in cells:
        if cell.duplicate:
            found.setdefault(cell.name, []).append(cell.file)
    return found


def promise_numbers(cells: Iterable[Cell]) -> list[str]:
    """The rows: the contract's promises, then any other a cell carries, so none is dropped."""
    return promise_order({p for c in cells for p in c.result.promise_numbers()})


def promise_title(number: str, cells: Iterable[Cell] = ()) -> str:
    if number in PROMISES:
        return PROMISES[number]
    for cell in cells:
        title = cell.result.title(number)
        if title != f"promise {number}":
            return title
    return f"promise {number}"


@dataclass(frozen=True)
class Column:
    cell: Cell
    device: str
    index: int  # position in the table, for anchors that do not depend on result text
    label: str = field(default="", compare=False)


def column_label(cell: Cell, device: str, ambiguous_releases: set[str]) -> str:
    """'release device', plus what tells it apart from another column with the same words:
    the cell's name when a release has several cells, the file when a name has several files."""
    label = f"{cell.release} {device}"
    if cell.duplicate:
        return f"{label} ({cell.name}, from {cell.file})"
    return f"{label} ({cell.name})" if cell.release in ambiguous_releases else label


def columns(cells: list[Cell]) -> list[Column]:
    releases = Counter(c.release for c in cells)
    ambiguous = {r for r, n in releases.items() if n > 1}
    cols: list[Column] = []
    for cell in sorted(cells, key=lambda c: c.sort_key):
        for device in cell.devices():
            cols.append(Column(cell, device, len(cols), column_label(cell, device, ambiguous)))
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


# --- observed torch behaviour -------------------------------------------------------


def observation_doc(cells: Iterable[Cell], probe: str) -> str | None:
    """What a probe checks, from the newest cell that describes it."""
    for cell in sorted(cells, key=lambda c: c.sort_key, reverse=True):
        obs = cell.result.observations.get(probe)
        if isinstance(obs, dict) and isinstance(obs.get("doc"), str):
            return obs["doc"]
    return None


@dataclass(frozen=True)
class ObservedValue:
    text: str | None  # None: this cell did not run the probe
    changed: bool  # differs from the previous column that has observations
    previous_release: str | None


def observation_table(cells: list[Cell]) -> tuple[list[Cell], list[tuple[str, str | None, list[ObservedValue]]]]:
    """Cells with observations (in version order) and one row (probe, doc, values) per probe across them."""
    observed = [c for c in sorted(cells, key=lambda c: c.sort_key) if c.result.observations]
    probes = sorted({p for c in observed for p in c.result.observations})
    rows = []
    for probe in probes:
        values: list[ObservedValue] = []
        before: str | None = None
        for i, cell in enumerate(observed):
            obs = cell.result.observations
            here = observation_key(obs[probe]) if probe in obs else None
            values.append(ObservedValue(
                text=observation_text(obs[probe]) if probe in obs else None,
                changed=i > 0 and here != before,
                previous_release=observed[i - 1].release if i > 0 else None,
            ))
            before = here
        rows.append((probe, observation_doc(observed, probe), values))
    return observed, rows
