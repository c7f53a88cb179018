"""What changed at each release: verdicts (a mark's kind), column against the previous completed
column of the same device; what a recorded promise recorded, likewise; and observations,
between consecutive cells on the same kind of machine only."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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


def _pairs(cells: list[ReportedCell]) -> Iterator[tuple[ReleaseStep, Column | None, Column]]:
    """(step, before, after): each column with the previous column of the same device whose
    cell completed (None for the first), in column order. A cell that did not complete is
    read against that one too, but never becomes the 'before' of the next."""
    ambiguous = ambiguous_releases(cells)
    last_completed: dict[str, Column] = {}
    for col in columns(cells):
        before = last_completed.get(col.device)
        yield _step(col.cell, before.cell if before else None, ambiguous), before, col
        if col.cell.completed:
            last_completed[col.device] = col


def _compared(before: Column, after: Column, numbers: list[str]) -> Iterator[tuple[str, Outcome, Outcome]]:
    """(promise, before, after) for every promise the two columns can be read against each other on."""
    other_machine = before.cell.result.machine != after.cell.result.machine
    for number in numbers:
        old, new = before.cell.mark(number, before.device), after.cell.mark(number, after.device)
        if other_machine and "not_applicable" in (old.kind, new.kind):
            continue  # promise 11 beside an accelerator: the machine changed, not the torch
        yield number, old, new


def _grouped(changed: Iterable[tuple[str, Outcome, Outcome]]) -> list[tuple[Outcome, Outcome, list[str]]]:
    """(before, after, promises): promises that changed alike (same marks, same notes) in one group."""
    groups: dict[tuple, tuple[Outcome, Outcome, list[str]]] = {}
    for number, old, new in changed:
        key = (old.kind, old.note, new.kind, new.note)
        groups.setdefault(key, (old, new, []))[2].append(number)
    return list(groups.values())


def verdict_changes(cells: list[ReportedCell]) -> list[VerdictChange]:
    """Each column against the previous column of the same device whose cell completed, in
    column order: every promise whose *verdict* (its mark's kind) changed, grouped where they
    changed alike. A new failure message, or a recorded promise that recorded something
    else, is not a verdict change: see recorded_changes."""
    numbers = promise_numbers(cells)
    changes: list[VerdictChange] = []
    for step, before, col in _pairs(cells):
        if not col.cell.completed:
            # every promise has the cell's status as its mark: one row says it
            changes.append(VerdictChange(step, col.device, (), None, col.cell.mark(numbers[0], col.device)))
        elif before is not None:
            changed = [(n, old, new) for n, old, new in _compared(before, col, numbers) if old.kind != new.kind]
            changes.extend(VerdictChange(step, col.device, tuple(promises), old, new)
                           for old, new, promises in _grouped(changed))
    return changes


def recorded_changes(cells: list[ReportedCell]) -> list[VerdictChange]:
    """What a recorded (implementation-defined) promise recorded, where it differs from the
    previous completed column of the same device: an observation of torch, not a verdict."""
    numbers = [n for n in promise_numbers(cells) if n in RECORDED_ONLY]
    changes: list[VerdictChange] = []
    for step, before, col in _pairs(cells):
        if before is None or not col.cell.completed:
            continue
        changed = [(n, old, new) for n, old, new in _compared(before, col, numbers)
                   if old.kind == new.kind == "recorded" and old.note != new.note]
        changes.extend(VerdictChange(step, col.device, tuple(promises), old, new)
                       for old, new, promises in _grouped(changed))
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

