"""Cell results -> the compatibility matrix's model: cells, columns, answers, observed behaviour.

Every cell is read through ``results.CellResult``: a mark is the cell's
``outcome(promise, device)`` and a column header carries the cell's ``answer()``, so the
report shows exactly the verdict the gate and the summary use. How a mark shows is
marks.py; what changed at each release, changes.py. Nothing here formats for a medium;
``report`` renders it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..promises import DEVICES, PROMISES
from ..results import CellResult, Outcome, observation_key, observation_text, promise_order, release_key
from .marks import ANSWERS, MarkStyle

# The column of a cell that names no device (a fault result written before it knew one).
NO_DEVICE = "(device unknown)"


# --- what a report may carry: the same for every run of the same torch ------------------

# Fields of a result that differ on every run (clock, process, paths on the runner), so a
# report carrying them would change each time the matrix is run again.
RUN_SPECIFIC = ("started", "duration_s", "argv")

_TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
_PID = re.compile(r" ?\(pid \d+\)")
# platform.platform() on Linux: system-kernel release-machine-libc; the kernel is the runner's.
_LINUX_PLATFORM = re.compile(r"^Linux-.+?-(x86_64|aarch64|arm64|ppc64le|s390x|i686|armv7l)(-.*)?$")


def stable_platform(text: Any) -> Any:
    """'Linux-6.8.0-1015-azure-x86_64-with-glibc2.39' -> 'Linux-x86_64-with-glibc2.39'.

    The kernel release changes whenever CI gets a new runner image; the OS, architecture
    and C library are what the torch wheel depends on.
    """
    if not isinstance(text, str):
        return text
    match = _LINUX_PLATFORM.match(text)
    return f"Linux-{match.group(1)}{match.group(2) or ''}" if match else text


def stable_detail(text: Any) -> Any:
    """A status detail without the clock time and process id of the run that wrote it."""
    if not isinstance(text, str):
        return text
    return _PID.sub("", _TIMESTAMP.sub("[time]", text))


def stable_fields(data: Any) -> Any:
    """A result's JSON without what changes from run to run of the same torch (see RUN_SPECIFIC).

    Applied to a result as it is read, before validation: anything that is not shaped like
    a result passes through untouched for the validator to name.
    """
    if not isinstance(data, dict):
        return data
    data = {k: v for k, v in data.items() if k not in RUN_SPECIFIC}
    if "detail" in data:
        data["detail"] = stable_detail(data["detail"])
    env = data.get("environment")
    if isinstance(env, dict) and "platform" in env:
        data["environment"] = dict(env, platform=stable_platform(env["platform"]))
    return data


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
    return _with_tag(f"{cell.release} {device}", cell_tag(cell, ambiguous))


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


# --- observed torch behaviour -------------------------------------------------------


def observed_cells(cells: Iterable[ReportedCell]) -> list[ReportedCell]:
    """Cells that recorded observations, in version order."""
    return [c for c in sorted(cells, key=lambda c: c.sort_key) if c.result.observations]


def machines(cells: Iterable[ReportedCell]) -> list[str]:
    """The kinds of machine the cells with observations ran on, in order of first appearance."""
    return list(dict.fromkeys(c.result.machine for c in observed_cells(cells)))


def observed_on(cells: Iterable[ReportedCell], machine: str) -> list[ReportedCell]:
    """The cells with observations that ran on ``machine``, in version order: one history."""
    return [c for c in observed_cells(cells) if c.result.machine == machine]


def probe_docs(cells: Iterable[ReportedCell]) -> dict[str, str | None]:
    """Probe -> what it checks, from the newest cell that describes it (None: no cell does)."""
    docs: dict[str, str | None] = {}
    for cell in sorted(cells, key=lambda c: c.sort_key, reverse=True):
        for probe, obs in cell.result.observations.items():
            doc = obs.get("doc") if isinstance(obs, dict) else None
            if docs.get(probe) is None:
                docs[probe] = doc if isinstance(doc, str) else None
    return docs


@dataclass(frozen=True)
class ObservedValue:
    text: str | None  # None: this cell did not run the probe
    changed: bool  # differs from the previous column that has observations on the same kind of machine
    previous_release: str | None
    key: str | None = None  # the outcome compared (observation_key), None: not probed


@dataclass(frozen=True)
class ProbeRow:
    probe: str
    doc: str | None
    values: list[ObservedValue]

    @property
    def ever_changed(self) -> bool:
        """Differs somewhere (on one kind of machine or between kinds), or some cell with
        observations did not run it: anything but the same outcome in every column."""
        return any(v.changed or v.text is None for v in self.values) or len({v.key for v in self.values}) > 1


def observation_table(cells: list[ReportedCell]) -> tuple[list[ReportedCell], list[ProbeRow]]:
    """Cells with observations (in version order) and one row per probe across them; a value
    is 'changed' against the previous column of the same kind of machine only."""
    observed = observed_cells(cells)
    docs = probe_docs(observed)
    rows = []
    for probe in sorted(docs):
        values: list[ObservedValue] = []
        last: dict[str, tuple[str | None, str]] = {}  # machine -> (key, release) of its previous column
        for cell in observed:
            obs = cell.result.observations
            here = observation_key(obs[probe]) if probe in obs else None
            previous = last.get(cell.result.machine)
            values.append(ObservedValue(
                text=observation_text(obs[probe]) if probe in obs else None,
                changed=previous is not None and here != previous[0],
                previous_release=previous[1] if previous is not None else None,
                key=here,
            ))
            last[cell.result.machine] = (here, cell.release)
        rows.append(ProbeRow(probe, docs[probe], values))
    return observed, rows
