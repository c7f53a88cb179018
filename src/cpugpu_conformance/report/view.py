"""Cell results -> the compatibility matrix: columns, marks, answers, observed behaviour,
and what changed at each release (verdicts and observations, release against release;
observations only between cells that ran on the same kind of machine).

Every cell is read through ``results.CellResult``: a mark is the cell's
``outcome(promise, device)`` and a column header carries the cell's ``answer()``, so the
report shows exactly the verdict the gate and the summary use. Nothing here formats for a
medium; ``report`` renders it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..promises import DEVICES, PROMISES, RECORDED_ONLY
from ..results import (
    CELL_STATUSES,
    CellResult,
    Outcome,
    observation_changes,
    observation_key,
    observation_text,
    promise_order,
    release_key,
)


@dataclass(frozen=True)
class MarkStyle:
    symbol: str
    word: str
    meaning: str

    @property
    def label(self) -> str:
        """Symbol and word together, always: where no emoji font exists the word still reads."""
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


# --- what changed at each release ----------------------------------------------------


@dataclass(frozen=True)
class Step:
    """A cell read against the one before it: 'at' is where something changed, 'since' what
    it is compared with (None for the first). Labels carry the cell's tag where the
    release alone is ambiguous."""

    at: ReportedCell
    label: str
    since: ReportedCell | None = None
    since_label: str | None = None


def _step(cell: ReportedCell, before: ReportedCell | None, ambiguous: set[str]) -> Step:
    return Step(cell, release_label(cell, ambiguous), before,
                release_label(before, ambiguous) if before is not None else None)


@dataclass(frozen=True)
class VerdictChange:
    """Promises whose mark on a device changed at a step, all from the same mark to the same mark.

    before is None for a cell that did not complete: it has no verdicts to compare, so
    it is one row for every promise, and the next cell is compared with the last that did.
    """

    step: Step
    device: str
    promises: tuple[str, ...]  # empty: every promise (a cell that did not complete)
    before: Outcome | None
    after: Outcome


def _verdict(promise: str, out: Outcome) -> tuple[str, str | None]:
    """What must stay equal for a promise to read alike: the mark, and what a recorded
    promise recorded (a failure's message may change; it is still a failure)."""
    return out.kind, out.note if promise in RECORDED_ONLY else None


def _changed_marks(before: Column, after: Column, numbers: list[str]) -> list[tuple[Outcome, Outcome, list[str]]]:
    """(before, after, promises): the promises whose mark went from one to the other,
    grouped where the marks and their notes read alike."""
    groups: dict[tuple, tuple[Outcome, Outcome, list[str]]] = {}
    other_machine = before.cell.result.machine != after.cell.result.machine
    for number in numbers:
        old, new = before.cell.mark(number, before.device), after.cell.mark(number, after.device)
        if other_machine and "not_applicable" in (old.kind, new.kind):
            continue  # promise 11 beside an accelerator: the machine changed, not the torch
        if _verdict(number, old) != _verdict(number, new):
            key = (old.kind, old.note, new.kind, new.note)
            groups.setdefault(key, (old, new, []))[2].append(number)
    return list(groups.values())


def verdict_changes(cells: list[ReportedCell]) -> list[VerdictChange]:
    """Each column against the previous column of the same device whose cell completed, in
    column order: every promise whose mark changed, grouped where they changed alike."""
    ambiguous = ambiguous_releases(cells)
    numbers = promise_numbers(cells)
    last_completed: dict[str, Column] = {}
    changes: list[VerdictChange] = []
    for col in columns(cells):
        before = last_completed.get(col.device)
        step = _step(col.cell, before.cell if before else None, ambiguous)
        if not col.cell.completed:
            # every promise has the cell's status as its mark: one row says it
            changes.append(VerdictChange(step, col.device, (), None, col.cell.mark(numbers[0], col.device)))
            continue
        if before is not None:
            for old, new, promises in _changed_marks(before, col, numbers):
                changes.append(VerdictChange(step, col.device, tuple(promises), old, new))
        last_completed[col.device] = col
    return changes


@dataclass(frozen=True)
class ObservationChange:
    """One probe, or one entry of a table-valued probe, that changed at a step, on one kind
    of machine (results.machine_kind): each kind has its own history.

    None: the probe was not run, or (for an entry) the table had no such entry.
    """

    step: Step
    probe: str
    before: str | None
    after: str | None
    doc: str | None
    entry: bool = False  # 'probe' names an entry of a table ('dtypes.bfloat16')
    machine: str = ""


def observed_cells(cells: Iterable[ReportedCell]) -> list[ReportedCell]:
    """Cells that recorded observations, in version order."""
    return [c for c in sorted(cells, key=lambda c: c.sort_key) if c.result.observations]


def machines(cells: Iterable[ReportedCell]) -> list[str]:
    """The kinds of machine the cells with observations ran on, in order of first appearance."""
    return list(dict.fromkeys(c.result.machine for c in observed_cells(cells)))


def observed_on(cells: Iterable[ReportedCell], machine: str) -> list[ReportedCell]:
    """The cells with observations that ran on ``machine``, in version order: one history."""
    return [c for c in observed_cells(cells) if c.result.machine == machine]


def observation_changes_by_release(cells: list[ReportedCell]) -> list[ObservationChange]:
    """Every change of observed behaviour between consecutive cells that observed anything on
    the same kind of machine: a GPU machine is never read against a CPU-only one (the
    accelerator probes differ with the machine, not the torch). Kind by kind, in order."""
    ambiguous = ambiguous_releases(cells)
    docs = probe_docs(observed_cells(cells))
    changes: list[ObservationChange] = []
    for machine in machines(cells):
        observed = observed_on(cells, machine)
        for before, after in zip(observed, observed[1:]):
            step = _step(after, before, ambiguous)
            for path, old, new in observation_changes(before.result.observations, after.result.observations):
                probe = _probe_of(path, docs)
                changes.append(ObservationChange(step, path, old, new, docs.get(probe), entry=path != probe,
                                                 machine=machine))
    return changes


def _probe_of(path: str, probes: Iterable[str]) -> str:
    """The probe a change belongs to: itself, or the table probe whose entry it names
    ('dtypes.bfloat16' -> 'dtypes'). Probe names have dots too, so the longest match wins."""
    owners = [p for p in probes if path == p or path.startswith(p + ".")]
    return max(owners, key=len, default=path)


# --- observed torch behaviour -------------------------------------------------------


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


# Marks whose note the matrix shows in the cell itself (others only on hover).
NOTED_KINDS = ("recorded", "untested")


def repeated_notes(marks: Mapping[int, Outcome], cols: list[Column]) -> dict[int, str]:
    """Column index -> the column that first showed the same note on the same device,
    for each shown note (NOTED_KINDS) that only repeats the last one shown on that device.

    A note shown once per change keeps a 16-column row one line high; the repeat names
    where the text is, and the full note stays in the cell's tooltip. A column with no
    shown note (a crashed cell) does not interrupt a run of repeats.
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
