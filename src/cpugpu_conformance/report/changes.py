"""What changed at each release: verdicts, column against the previous completed column of the
same device, and observations, between consecutive cells on the same kind of machine only."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..promises import RECORDED_ONLY
from ..results import Outcome, observation_changes
from .view import (
    Column,
    ReportedCell,
    ambiguous_releases,
    columns,
    machines,
    observed_cells,
    observed_on,
    probe_docs,
    promise_numbers,
    release_label,
)


@dataclass(frozen=True)
class ReleaseStep:
    """A cell read against the one before it: 'at' is where something changed, 'since' what
    it is compared with (None for the first). Labels carry the cell's tag where the
    release alone is ambiguous."""

    at: ReportedCell
    label: str
    since: ReportedCell | None = None
    since_label: str | None = None


def _step(cell: ReportedCell, before: ReportedCell | None, ambiguous: set[str]) -> ReleaseStep:
    return ReleaseStep(cell, release_label(cell, ambiguous), before,
                release_label(before, ambiguous) if before is not None else None)


@dataclass(frozen=True)
class VerdictChange:
    """Promises whose mark on a device changed at a step, all from the same mark to the same mark.

    before is None for a cell that did not complete: it has no verdicts to compare, so
    it is one row for every promise, and the next cell is compared with the last that did.
    """

    step: ReleaseStep
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

    step: ReleaseStep
    probe: str
    before: str | None
    after: str | None
    doc: str | None
    entry: bool = False  # 'probe' names an entry of a table ('dtypes.bfloat16')
    machine: str = ""



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

