"""The model handed to the templates and to compat.json: ``Collected`` (the cells a report
read, the files it skipped, and the changelogs worked out from them), ``build_compat`` (the
JSON, checked against schemas/compat.schema.json) and ``build_view`` (what COMPAT.md and
index.html are rendered from). Moved out of render.py, which re-exports every name.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from ..results import Outcome, schema
from . import changes as changelog
from . import view
from .changes import ObservationChange, ReleaseStep, VerdictChange
from .marks import ANSWER_ORDER, ANSWERS, MARKS, NOTED_KINDS, MarkStyle
from .view import Column, DeviceSummary, ReportedCell

COMPAT_SCHEMA_ID = "cpugpu-conformance/compat"
COMPAT_SCHEMA_VERSION = 5


@dataclass
class Collected:
    cells: list[ReportedCell] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)

    @property
    def duplicates(self) -> dict[str, list[str]]:
        return view.duplicates(self.cells)

    # The changelog feeds both compat.json and the pages: worked out once.
    @functools.cached_property
    def verdict_changes(self) -> list[VerdictChange]:
        return changelog.verdict_changes(self.cells)

    @functools.cached_property
    def recorded_changes(self) -> list[VerdictChange]:
        return changelog.recorded_changes(self.cells)

    @functools.cached_property
    def observation_changes(self) -> list[ObservationChange]:
        return changelog.observation_changes_by_release(self.cells)

    @functools.cached_property
    def device_summaries(self) -> list[DeviceSummary]:
        return view.device_summaries(self.cells)


def _styles(styles: dict[str, MarkStyle]) -> dict[str, dict[str, str]]:
    return {k: {"symbol": s.symbol, "word": s.word, "label": s.label, "meaning": s.meaning} for k, s in styles.items()}


def _cell_ref(cell: ReportedCell | None) -> dict[str, str] | None:
    return None if cell is None else {"release": cell.release, "cell": cell.name, "source": cell.file}


def _mark_json(out: Outcome | None) -> dict[str, Any] | None:
    return None if out is None else {"mark": out.kind, "note": out.note}


def _verdicts_json(changes: list[VerdictChange]) -> list[dict[str, Any]]:
    return [{"at": _cell_ref(c.step.at), "since": _cell_ref(c.step.since), "device": c.device,
             "promises": list(c.promises), "before": _mark_json(c.before), "after": _mark_json(c.after)}
            for c in changes]


def _changes_json(got: Collected) -> dict[str, Any]:
    return {
        "verdicts": _verdicts_json(got.verdict_changes),
        "recorded": _verdicts_json(got.recorded_changes),
        "observations": [{"at": _cell_ref(c.step.at), "since": _cell_ref(c.step.since), "machine": c.machine,
                          "probe": c.probe, "before": c.before, "after": c.after} for c in got.observation_changes],
    }


def _row_ref(col: Column, answer: view.DeviceAnswer) -> dict[str, str]:
    return {"release": col.release, "cell": col.cell.name, "source": col.cell.file, "answer": answer.kind}


def _summary_json(got: Collected) -> dict[str, Any]:
    span = view.release_span(got.cells)
    return {
        "releases": None if span is None else {"oldest": span[0], "newest": span[1]},
        "devices": [{"device": s.device, **({"simulated": True} if view.device_label(s.device) != s.device else {}),
                     "never_run": s.never_run, "tested": s.tested,
                     "releases": s.releases, "conforming": s.conforming,
                     "newest": [_row_ref(col, answer) for col, answer in s.newest],
                     "not_conforming": [_row_ref(col, answer) for col, answer in s.not_conforming]}
                    for s in got.device_summaries],
    }


def _compat_entry(cell: ReportedCell, numbers: list[str]) -> dict[str, Any]:
    entry = {k: v for k, v in cell.result.to_json().items() if k not in ("schema", "schema_version")}
    answer = cell.result.answer()
    devices = cell.devices()
    entry.update(
        source=cell.file,
        release=cell.release,
        devices_shown=devices,
        duplicate=cell.duplicate,
        answer={"kind": answer.kind, "lines": list(answer.lines)},
        marks={p: {d: {"mark": out.kind, "note": out.note} for d in devices for out in [cell.mark(p, d)]}
               for p in numbers},
    )
    return entry


@functools.cache
def _compat_validator() -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(schema("compat"))


def build_compat(got: Collected) -> dict[str, Any]:
    numbers = view.promise_numbers(got.cells)
    data = {
        "schema": COMPAT_SCHEMA_ID,
        "schema_version": COMPAT_SCHEMA_VERSION,
        "generated_from": [c.file for c in got.cells],
        "promises": {p: view.promise_title(p, got.cells) for p in numbers},
        "marks": _styles(MARKS),
        "answers": _styles(ANSWERS),
        "cells": [_compat_entry(cell, numbers) for cell in got.cells],
        "summary": _summary_json(got),
        "changes": _changes_json(got),
        "duplicate_cells": [{"cell": name, "files": files} for name, files in got.duplicates.items()],
        "skipped_files": list(got.skipped),
    }
    # A report that breaks its own schema is a bug here, not bad input: let it raise.
    _compat_validator().validate(data)
    return data


def _failure_sections(cells: list[ReportedCell], cols: list[Column], numbers: list[str]) -> list[dict[str, Any]]:
    """One section per failed promise and device, then per cell's failures outside any promise."""
    col_of = {(id(c.cell), c.device): c for c in cols}
    row_of = {n: i for i, n in enumerate(numbers, 1)}
    sections = []
    for cell in cells:
        for number, device, out in cell.failures():
            sections.append({
                "anchor": f"fail-{col_of[(id(cell), device)].index}-{row_of[number]}",
                "heading": f"{cell.release} {device} ({cell.name}): promise {number}, {view.promise_title(number, cells)}",
                "items": list(out.failures),
            })
        if cell.unattributed_failures():
            sections.append({
                "anchor": f"fail-{col_of[(id(cell), cell.devices()[0])].index}-outside",
                "heading": f"{cell.release} ({cell.name}): failures outside any promise's check",
                "items": cell.unattributed_failures(),
            })
    return sections


def _matrix_rows(cells: list[ReportedCell], cols: list[Column], numbers: list[str]) -> list[dict[str, Any]]:
    """One row per cell and device, newest release first: its answer on that device, then each
    promise's mark, and where a note only repeats one shown in an earlier (newer) row."""
    shown = view.newest_first(cols)
    marks_of = {n: {col.index: col.cell.mark(n, col.device) for col in cols} for n in numbers}
    repeats = {n: view.repeated_notes(marks_of[n], shown) for n in numbers}
    rows = []
    for col in shown:
        answer = view.device_answer(col.cell, col.device)
        cell_answer = col.cell.result.answer()
        untested = [marks_of[n][col.index] for n in numbers if marks_of[n][col.index].kind == "untested"]
        # A row untested throughout for one reason (a device that was missing) says it once, by its answer.
        reason = untested[0].note if len(untested) > 1 and len({out.note for out in untested}) == 1 else None
        rows.append({
            "col": col,
            "answer": answer,
            # a cell that did not complete has its status as every mark: the page says it once across the row
            "status": None if col.cell.completed else col.cell.mark(numbers[0], col.device),
            "reason": reason,
            # the cell's own answer (the gate's), where it says more than the answer on this device
            "cell_answer": None if cell_answer.kind == answer.kind else cell_answer,
            "marks": [{"mark": out, "style": MARKS[out.kind], "anchor": f"fail-{col.index}-{i}",
                       "same_as": repeats[n].get(col.index),
                       # on demand (the cell's title): the dtypes the promise was checked with on this device
                       "dtypes": _checked_with(col.cell, n, col.device),
                       "note_shown": bool(out.note) and out.kind in NOTED_KINDS
                       and not (reason is not None and out.kind == "untested")}
                      for i, n in enumerate(numbers, 1) for out in [marks_of[n][col.index]]],
        })
    return rows


def _checked_with(cell: ReportedCell, promise: str, device: str) -> list[str]:
    entry = cell.result.entry(promise, device) if cell.completed else None
    dtypes = (entry or {}).get("dtypes")
    return [str(d) for d in dtypes] if isinstance(dtypes, list) else []


# How many releases that do not conform the answer lists per device before it says "and N more".
NOT_CONFORMING_SHOWN = 8


def _release_text(col: Column) -> str:
    return f"{col.release} ({col.tag})" if col.tag else col.release


def _worst(answers: list[view.DeviceAnswer]) -> str:
    """The worst answer: failed, then a cell that did not complete (crashed, ...), then the rest of ANSWER_ORDER."""
    return min((a.kind for a in answers), key=lambda k: ANSWER_ORDER.index(k) if k in ANSWER_ORDER else 0.5)


def _answer_rows(summaries: list[DeviceSummary]) -> list[dict[str, Any]]:
    """The answer, one row per device: what a reader sees first."""
    rows = []
    for s in summaries:
        newest = [(_release_text(col), answer) for col, answer in s.newest]
        missing = [(_release_text(col), answer) for col, answer in s.not_conforming]
        rows.append({
            "device": s.device, "never_run": s.never_run, "tested": s.tested,
            "conforming": len(s.conforming), "releases": len(s.releases),
            "newest": newest, "newest_kind": _worst([a for _, a in newest]) if newest else None,
            "not_conforming": missing[:NOT_CONFORMING_SHOWN], "more": max(0, len(missing) - NOT_CONFORMING_SHOWN),
        })
    return rows


def _by_step(changes: list[tuple[ReleaseStep, Any]]) -> list[dict[str, Any]]:
    """Changes grouped under the step (release) they happened at, in order: a changelog."""
    groups: list[dict[str, Any]] = []
    for step, change in changes:
        if not groups or groups[-1]["step"] != step:
            groups.append({"step": step, "label": step.label, "since": step.since_label, "changes": []})
        groups[-1]["changes"].append(change)
    return groups


def _promises_text(promises: tuple[str, ...], cells: list[ReportedCell]) -> tuple[str, str]:
    """(what the row says, its tooltip): one promise by number and title, several by number
    (titles on hover, so a GPU gone missing stays one short row), none: every promise."""
    titles = [f"{n}. {view.promise_title(n, cells)}" for n in promises]
    if not titles:
        return "every promise", ""
    if len(titles) == 1:
        return titles[0], ""
    return ", ".join(promises), "; ".join(titles)


def _verdict_rows(cells: list[ReportedCell], changes: list[VerdictChange]) -> list[tuple[ReleaseStep, dict[str, Any]]]:
    rows = []
    for change in changes:
        text, titles = _promises_text(change.promises, cells)
        rows.append((change.step, {"device": change.device, "promises": text, "titles": titles,
                                   "before": _shown(change.before), "after": _shown(change.after)}))
    return rows


def _shown(out: Outcome | None) -> dict[str, Any] | None:
    """A mark as the templates show it: its kind (for the class), its label and its note."""
    return None if out is None else {"kind": out.kind, "style": MARKS[out.kind], "note": out.note}


def _newest_first(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A changelog as the pages show it: the newest release on top, like the matrix."""
    return list(reversed(groups))


def _observation_histories(got: Collected) -> list[dict[str, Any]]:
    """One changelog of observed behaviour per kind of machine, each with the cells it reads."""
    return [{"machine": machine, "cells": view.observed_on(got.cells, machine),
             "log": _newest_first(_by_step([(c.step, c) for c in got.observation_changes if c.machine == machine]))}
            for machine in view.machines(got.cells)]


def build_view(got: Collected) -> dict[str, Any]:
    cells = got.cells
    cols = view.columns(cells)
    numbers = view.promise_numbers(cells)
    observed_cells, probe_rows = view.observation_table(cells)
    return {
        "cells": cells,
        "columns": cols,
        "promises": [{"number": n, "title": view.promise_title(n, cells)} for n in numbers],
        "rows": _matrix_rows(cells, cols, numbers),
        "marks": MARKS,
        "answers": ANSWERS,
        "noted_kinds": NOTED_KINDS,
        "span": view.release_span(cells),
        "answer_rows": _answer_rows(got.device_summaries),
        "verdict_log": _newest_first(_by_step(_verdict_rows(cells, got.verdict_changes))),
        "recorded_log": _newest_first(_by_step(_verdict_rows(cells, got.recorded_changes))),
        "failures": _failure_sections(cells, cols, numbers),
        # Markdown has no hover: list why each untested mark is untested.
        "untested_notes": [note for col in cols for note in view.untested_notes(col, numbers)],
        "incomplete": [c for c in cells if not c.completed],
        "observed_cells": observed_cells,
        "unobserved_cells": [c for c in cells if not c.result.observations],
        "observation_histories": _observation_histories(got),
        "changed_probes": [row for row in probe_rows if row.ever_changed],
        "unchanged_probes": [row for row in probe_rows if not row.ever_changed],
        "env_keys": sorted({k for c in cells for k in c.result.environment}),
        "skipped_files": got.skipped,
        "duplicates": got.duplicates,
        "generated_from": [c.file for c in cells],
    }
