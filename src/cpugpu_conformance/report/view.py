"""Cell results -> the compatibility matrix's model: cells, columns, answers, observed behaviour.

Every cell is read through ``results.CellResult``: a mark is the cell's
``outcome(promise, device)`` and a cell's answer is its ``answer()``, so the report shows
exactly the verdict the gate and the summary use. How a mark shows is marks.py (below this
module); what changed at each release, changes.py (above it). Nothing here formats for a
medium; ``report`` renders it.

The cells and columns (``ReportedCell``, ``Column`` and their labels) are cells.py, below this
module; every name of theirs is importable from here as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import devices as registry
from ..promises import DEVICES, PROMISES  # noqa: F401  (PROMISES: as before the split)
from ..results import (  # noqa: F401  (CellResult, promise_order, release_key: as before the split)
    CellResult,
    Outcome,
    observation_key,
    observation_text,
    promise_order,
    release_key,
    rule,
)
from .cells import (  # noqa: F401  (the matrix's cells and columns; re-exported, this was their home)
    NO_DEVICE,
    Column,
    ReportedCell,
    _with_tag,
    ambiguous_releases,
    cell_tag,
    column_label,
    columns,
    device_label,
    duplicates,
    mark_cells,
    newest_first,
    promise_numbers,
    promise_title,
    release_label,
    repeated_notes,
    untested_notes,
)
from .marks import ANSWER_ORDER, ANSWERS, NOTED_KINDS, MarkStyle  # noqa: F401  (NOTED_KINDS: as before)

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


# --- the answer on each device: what a reader sees first --------------------------------

# Marks that are a check that ran: a device with none of them was never tested.
_TESTED_KINDS = frozenset({"passed", "failed", "recorded", "known_failure"})


@dataclass(frozen=True)
class DeviceAnswer:
    """A cell's answer on one of its devices: an ANSWERS kind and why it is not clean."""

    kind: str
    lines: tuple[str, ...] = ()

    @property
    def conforms(self) -> bool:
        return self.kind == "passed"

    @property
    def not_applicable(self) -> bool:
        """The cell's torch cannot host the device (sim before torch 2.8): neither a pass nor a failure."""
        return self.kind == "not_applicable"

    @property
    def style(self) -> MarkStyle:
        return ANSWERS[self.kind]


def _kinds_on(cell: ReportedCell, device: str) -> set[str]:
    return {cell.mark(p, device).kind for p in cell.result.promise_numbers()}


def device_answer(cell: ReportedCell, device: str) -> DeviceAnswer:
    """The cell's answer on ``device``: the worst of the marks there (ANSWER_ORDER).

    What the cell's answer holds against no device in particular (a failure outside any
    promise's check, an error, nothing asked) holds against each of its devices; a device
    where nothing passed or was recorded is untested, never clean.
    """
    answer = cell.result.answer()
    if not cell.completed:
        return DeviceAnswer(answer.kind, answer.lines)
    limit = rule.release_limit(cell.result, device)
    if limit is not None:  # the cell's torch cannot host the device (sim before 2.8): nothing to hold against it
        return DeviceAnswer("not_applicable", (limit,))
    devices = cell.devices()
    here = _kinds_on(cell, device)
    anywhere = set().union(*(_kinds_on(cell, d) for d in devices))
    # The rule's lines name the device of each promise ("... on cuda: untested: ..."); a
    # line that names none (a failure outside any promise's check) is about every device.
    untied = tuple(line for line in answer.lines if not any(f" on {d}: " in line for d in devices))
    lines = tuple(line for line in answer.lines if f" on {device}: " in line) + untied
    if "failed" in here or (answer.kind == "failed" and (untied or "failed" not in anywhere)):
        return DeviceAnswer("failed", lines)
    for kind in ANSWER_ORDER[1:ANSWER_ORDER.index("passed")]:
        # a kind the cell's answer gives with no mark of it on any device: not about one device
        if kind in here or (answer.kind == kind and kind not in anywhere):
            return DeviceAnswer(kind, lines)
    if not here & {"passed", "recorded"}:
        return DeviceAnswer("untested", lines or (f"no check of any promise ran on {device}",))
    return DeviceAnswer("passed")


@dataclass(frozen=True)
class DeviceSummary:
    """One device across the matrix: its rows newest first, each with its answer there."""

    device: str
    rows: tuple[tuple[Column, DeviceAnswer], ...]

    @property
    def never_run(self) -> bool:
        """No result asked for this device at all."""
        return not self.rows

    @property
    def tested(self) -> bool:
        """Some check ran on this device somewhere (not only missing-device or status marks)."""
        return any(_kinds_on(col.cell, col.device) & _TESTED_KINDS for col, _ in self.rows)

    @property
    def releases(self) -> list[str]:
        """The releases with a row on this device, newest first; a release whose every row is not applicable
        (its torch cannot host the device) is none of them: it neither conforms nor fails."""
        return list(dict.fromkeys(col.release for col, answer in self.rows if not answer.not_applicable))

    @property
    def conforming(self) -> list[str]:
        """The releases where every row on this device conforms (a release with two cells needs both)."""
        failing = {col.release for col, answer in self.rows if not answer.conforms and not answer.not_applicable}
        return [r for r in self.releases if r not in failing]

    @property
    def newest(self) -> list[tuple[Column, DeviceAnswer]]:
        """The rows of the newest release on this device: the answer a gate asks for."""
        return [(col, answer) for col, answer in self.rows if col.release == self.releases[0]] if self.releases else []

    @property
    def not_conforming(self) -> list[tuple[Column, DeviceAnswer]]:
        return [(col, answer) for col, answer in self.rows if not answer.conforms and not answer.not_applicable]


def device_summaries(cells: list[ReportedCell]) -> list[DeviceSummary]:
    """Every device of the contract (a device no result asked for is 'never run'; one tested only when
    asked for by name, sim, only where a result asked for it), then any other device a result names."""
    rows = newest_first(columns(cells))
    asked = {c.device for c in rows}
    named = [d for d in DEVICES if d in asked or not registry.get(d).by_name_only]
    named += [d for d in dict.fromkeys(c.device for c in rows) if d not in DEVICES]
    return [DeviceSummary(d, tuple((c, device_answer(c.cell, d)) for c in rows if c.device == d)) for d in named]


def release_span(cells: Iterable[ReportedCell]) -> tuple[str, str] | None:
    """(oldest, newest) release in the matrix, None when it is empty. Releases that are not
    version numbers (a cell that failed before it knew its torch) count only when no other does."""
    ordered = sorted(cells, key=lambda c: c.sort_key)
    versions = [c for c in ordered if c.release[:1].isdigit()] or ordered
    return (versions[0].release, versions[-1].release) if versions else None


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
