"""Cell results -> the compatibility matrix: columns, marks and observed behaviour.

Shared by ``report`` (which renders it) and ``gate`` (which compares two cells), so
both read a result file the same way. Nothing here formats for a medium.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from .promises import DEVICES, PROMISES, RECORDED_ONLY
from .results import CELL_STATUSES


@dataclass(frozen=True)
class MarkStyle:
    symbol: str
    word: str
    meaning: str

    @property
    def label(self) -> str:
        return f"{self.symbol} {self.word}"


# Every mark has its own symbol *and* word, so no mark is told apart by colour alone.
# A cell that did not produce verdicts gets its status as the mark in every row:
# never a pass, never an empty square.
MARKS: dict[str, MarkStyle] = {
    "passed": MarkStyle("✅", "pass", "every check of the promise held"),
    "failed": MarkStyle("❌", "FAIL", "a check of the promise failed; the reproducer is in the failures section"),
    "skipped": MarkStyle(
        "⏭", "skip", "not run here (no such device, or the promise does not apply to it); the reason is given"
    ),
    "recorded": MarkStyle(
        "📝", "recorded", "implementation-defined: what happened is recorded, not judged"
    ),
    "missing": MarkStyle(
        "❓", "missing", "the cell completed but its result file has no verdict for this promise and device"
    ),
    "crashed": MarkStyle("💥", "crashed", "the test process died (abort, segfault, out of memory); no verdicts"),
    "timed_out": MarkStyle("⏱", "timed out", "the cell ran past its time limit; no verdicts"),
    "not_installed": MarkStyle("📦", "not installed", "the torch release could not be installed; no verdicts"),
    "wrong_torch": MarkStyle(
        "🚫", "wrong torch", "the cell got a torch other than the one it asked for, so nothing was tested"
    ),
    "error": MarkStyle("⚠️", "error", "the cell failed before testing (usage or setup error); no verdicts"),
}

# Fail at import, not in a published report, if results.py grows a status without a mark.
_unmarked = set(CELL_STATUSES) - {"completed"} - set(MARKS)
assert not _unmarked, f"cell statuses without a mark: {sorted(_unmarked)}"


@dataclass(frozen=True)
class Mark:
    kind: str
    note: str | None = None  # skip reason, recorded text, or what stopped the cell

    @property
    def style(self) -> MarkStyle:
        return MARKS[self.kind]


def release_of(result: dict[str, Any]) -> str:
    """The torch release a cell stands for: what it asked for, else what it ran, minus +local."""
    requested = result.get("requested")
    torch = requested.get("torch") if isinstance(requested, dict) else None
    if not isinstance(torch, str) or not torch:
        env = result.get("environment")
        torch = env.get("torch") if isinstance(env, dict) else None
    if not isinstance(torch, str) or not torch:
        return "unknown"
    return torch.split("+", 1)[0]


def version_key(release: str) -> tuple:
    """Sort key: real versions in version order, anything unparseable after them by name."""
    try:
        return (0, Version(release), "")
    except InvalidVersion:
        return (1, Version("0"), release)


def _line(text: Any, index: int, limit: int) -> str | None:
    if not isinstance(text, str):
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    line = lines[index]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def first_line(text: Any, limit: int = 240) -> str | None:
    """A cell's detail leads with what happened ("killed by SIGABRT; last lines of the log:")."""
    line = _line(text, 0, limit)
    return line.rstrip(":") if line else line


def last_line(text: Any, limit: int = 240) -> str | None:
    """The last non-empty line: for an assertion message, usually the one that says what differed."""
    return _line(text, -1, limit)


@dataclass
class Cell:
    """One result file, read."""

    source: str  # file name the result came from
    result: dict[str, Any]

    @property
    def name(self) -> str:
        return self.result["cell"]

    @property
    def status(self) -> str:
        return self.result["status"]

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def release(self) -> str:
        return release_of(self.result)

    @property
    def sort_key(self) -> tuple:
        return (version_key(self.release), self.name, self.source)

    def devices(self) -> list[str]:
        """The devices this cell stands for: those it tested or was asked for.

        A device the cell was never asked to test (a CPU cell's cuda) is no cell of the
        matrix and gets no column; a device asked for but missing keeps its column (skip,
        with the reason), and a cell that did not complete shows on the device it asked for.
        """
        asked = (self.result.get("requested") or {}).get("device")
        statuses = self.result.get("devices") or {}
        if not self.completed or not statuses:
            return [asked] if asked and asked != "all" else list(DEVICES)
        shown = [
            d for d, entry in statuses.items()
            if not (isinstance(entry, dict) and str(entry.get("reason") or "").startswith("not requested"))
        ]
        ordered = [d for d in DEVICES if d in shown] + sorted(d for d in shown if d not in DEVICES)
        return ordered or list(DEVICES)

    def device_status(self, device: str) -> tuple[str | None, str | None]:
        entry = (self.result.get("devices") or {}).get(device)
        if not isinstance(entry, dict):
            return None, None
        return entry.get("status"), entry.get("reason")

    def promise_on(self, promise: str, device: str) -> dict[str, Any] | None:
        entry = (self.result.get("promises") or {}).get(promise)
        if not isinstance(entry, dict):
            return None
        return (entry.get("devices") or {}).get(device)

    def mark(self, promise: str, device: str) -> Mark:
        if not self.completed:
            return Mark(self.status, first_line(self.result.get("detail")))
        verdict = self.promise_on(promise, device)
        if verdict is not None:
            kind = verdict["verdict"]
            if kind == "recorded":
                return Mark(kind, verdict.get("observed"))
            if kind == "skipped":
                return Mark(kind, verdict.get("reason") or self.device_status(device)[1])
            if kind == "failed":
                return Mark(kind, _failure_summary(verdict))
            return Mark(kind, None)
        status, reason = self.device_status(device)
        if status == "skipped":
            return Mark("skipped", reason)
        return Mark("missing", f"no verdict for promise {promise} on {device} in {self.source}")

    def failures(self) -> list[tuple[str, str, list[dict[str, Any]]]]:
        """(promise, device, failures) for every failed verdict, in row then device order."""
        if not self.completed:
            return []
        found = []
        for promise in promise_numbers(self.result.get("promises") or {}):
            for device in self.devices():
                verdict = self.promise_on(promise, device)
                if verdict is not None and verdict["verdict"] == "failed":
                    found.append((promise, device, list(verdict.get("failures") or [])))
        return found

    def observations(self) -> dict[str, Any]:
        obs = self.result.get("observations")
        return obs if isinstance(obs, dict) else {}


def _failure_summary(verdict: dict[str, Any]) -> str | None:
    failures = verdict.get("failures") or []
    if not failures:
        return None
    first = failures[0]
    text = f"{first.get('test')}: {last_line(first.get('message'), 160) or ''}"
    return text if len(failures) == 1 else f"{text} (+{len(failures) - 1} more)"


def promise_numbers(extra: Iterable[str] = ()) -> list[str]:
    """The contract's promises in order, then any unknown ones a result carries, so none is dropped."""
    known = list(PROMISES)
    others = sorted(set(extra) - set(known), key=lambda p: (not p.isdigit(), int(p) if p.isdigit() else 0, p))
    return known + others


def promise_title(number: str, cells: Iterable[Cell] = ()) -> str:
    if number in PROMISES:
        return PROMISES[number]
    for cell in cells:
        entry = (cell.result.get("promises") or {}).get(number)
        if isinstance(entry, dict) and entry.get("title"):
            return str(entry["title"])
    return f"promise {number}"


def is_recorded_only(number: str) -> bool:
    return number in RECORDED_ONLY


@dataclass(frozen=True)
class Column:
    cell: Cell
    device: str
    index: int  # position in the table, for anchors that do not depend on result text


def columns(cells: list[Cell]) -> list[Column]:
    ordered = sorted(cells, key=lambda c: c.sort_key)
    cols: list[Column] = []
    for cell in ordered:
        for device in cell.devices():
            cols.append(Column(cell, device, len(cols)))
    return cols


# --- observed torch behaviour -------------------------------------------------------


def _outcome(obs: Any) -> Any:
    """What torch did, without the probe's own description ("doc"), which is not torch behaviour."""
    if isinstance(obs, dict):
        return {k: v for k, v in obs.items() if k != "doc"}
    return obs


def observation_text(obs: Any) -> str:
    """One probe's outcome as text: its value, or 'raises Type: message'."""
    outcome = _outcome(obs)
    if isinstance(outcome, dict) and set(outcome) == {"value"}:
        value = outcome["value"]
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if isinstance(outcome, dict) and set(outcome) == {"error"} and isinstance(outcome["error"], dict):
        err = outcome["error"]
        return f"raises {err.get('type', '?')}: {err.get('message', '')}"
    return json.dumps(outcome, sort_keys=True, default=str)


def observation_key(obs: Any) -> str:
    """Canonical form for comparing one probe between two cells."""
    return json.dumps(_outcome(obs), sort_keys=True, default=str)


def observation_doc(cells: Iterable[Cell], probe: str) -> str | None:
    """What a probe checks, from the newest cell that describes it."""
    for cell in sorted(cells, key=lambda c: c.sort_key, reverse=True):
        obs = cell.observations().get(probe)
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
    observed = [c for c in sorted(cells, key=lambda c: c.sort_key) if c.observations()]
    probes = sorted({p for c in observed for p in c.observations()})
    rows = []
    for probe in probes:
        values: list[ObservedValue] = []
        prev: Cell | None = None
        for cell in observed:
            obs = cell.observations()
            here = observation_key(obs[probe]) if probe in obs else None
            before = None
            if prev is not None:
                pobs = prev.observations()
                before = observation_key(pobs[probe]) if probe in pobs else None
            values.append(
                ObservedValue(
                    text=observation_text(obs[probe]) if probe in obs else None,
                    changed=prev is not None and here != before,
                    previous_release=prev.release if prev is not None else None,
                )
            )
            prev = cell
        rows.append((probe, observation_doc(observed, probe), values))
    return observed, rows


MISSING = object()  # one side of a comparison has no such entry


def value_changes(where: str, a: Any, b: Any, depth: int | None = None) -> list[tuple[str, Any, Any]]:
    """(path, before, after) for each differing entry, descending into dicts present on both
    sides up to `depth` levels (None: all the way), so a change names the entry that changed."""
    if a == b:
        return []
    if isinstance(a, dict) and isinstance(b, dict) and (depth is None or depth > 0):
        deeper = None if depth is None else depth - 1
        changes: list[tuple[str, Any, Any]] = []
        for key in sorted(set(a) | set(b), key=str):
            changes += value_changes(f"{where}.{key}", a.get(key, MISSING), b.get(key, MISSING), deeper)
        return changes
    return [(where, a, b)]


def _table(obs: Any) -> dict[str, Any] | None:
    """The entries of a table-valued probe (the dtypes table, say), else None."""
    outcome = _outcome(obs)
    if isinstance(outcome, dict) and set(outcome) == {"value"} and isinstance(outcome["value"], dict):
        return outcome["value"]
    return None


def _entry_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def observation_changes(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, str | None, str | None]]:
    """(probe, before text, after text) for every probe whose outcome differs; None: not probed.

    A table-valued probe changes entry by entry ("dtypes.bcomplex32"), so a new dtype
    reads as one line, not as two copies of the whole table.
    """
    changes: list[tuple[str, str | None, str | None]] = []
    for probe in sorted(set(before) | set(after)):
        b_table, a_table = _table(before.get(probe)), _table(after.get(probe))
        if b_table is not None and a_table is not None:
            for path, b_entry, a_entry in value_changes(probe, b_table, a_table, depth=1):
                changes.append((
                    path,
                    None if b_entry is MISSING else _entry_text(b_entry),
                    None if a_entry is MISSING else _entry_text(a_entry),
                ))
            continue
        b = observation_key(before[probe]) if probe in before else None
        a = observation_key(after[probe]) if probe in after else None
        if a != b:
            changes.append(
                (
                    probe,
                    observation_text(before[probe]) if probe in before else None,
                    observation_text(after[probe]) if probe in after else None,
                )
            )
    return changes
