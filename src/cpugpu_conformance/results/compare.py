"""Comparing two cells: ``diff(baseline, candidate)``, the one comparison gate and bisect use,
and the changes in observed torch behaviour (only between cells on the same kind of machine).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..promises import PROMISES, RECORDED_ONLY, applies
from .model import CellResult, promise_order
from .rule import NOT_ASKED_KINDS, Outcome, state_class_verdict
from .text import one_line

MISSING = object()  # one side of a comparison has no such entry
# What an observation absent on one side means, where a change is told.
NOT_PROBED = "(not probed: that cell's run had no such probe, an older suite's)"


def _outcome_of_observation(obs: Any) -> Any:
    """What torch did, without the probe's own description ("doc"), which is not torch behaviour."""
    if isinstance(obs, dict):
        return {k: v for k, v in obs.items() if k != "doc"}
    return obs


def observation_text(obs: Any) -> str:
    """One probe's outcome as text: its value, or 'raises Type: message'."""
    outcome = _outcome_of_observation(obs)
    if isinstance(outcome, dict) and set(outcome) == {"value"}:
        value = outcome["value"]
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if isinstance(outcome, dict) and set(outcome) == {"error"} and isinstance(outcome["error"], dict):
        err = outcome["error"]
        return f"raises {err.get('type', '?')}: {err.get('message', '')}"
    return json.dumps(outcome, sort_keys=True, default=str)


def observation_key(obs: Any) -> str:
    """Canonical form for comparing one probe between two cells."""
    return json.dumps(_outcome_of_observation(obs), sort_keys=True, default=str)


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
    outcome = _outcome_of_observation(obs)
    if isinstance(outcome, dict) and set(outcome) == {"value"} and isinstance(outcome["value"], dict):
        return outcome["value"]
    return None


def _entry_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def observation_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[tuple[str, str | None, str | None]]:
    """(probe, before text, after text) for every probe whose outcome differs; None: not probed.

    A table-valued probe changes entry by entry ("dtypes.bcomplex32"), so a new dtype
    reads as one line, not as two copies of the whole table.
    """
    changes: list[tuple[str, str | None, str | None]] = []
    for probe in sorted(set(before) | set(after)):
        b_table, a_table = _table(before.get(probe)), _table(after.get(probe))
        if b_table is not None and a_table is not None:
            for path, b_entry, a_entry in value_changes(probe, b_table, a_table, depth=1):
                changes.append((path, None if b_entry is MISSING else _entry_text(b_entry),
                                None if a_entry is MISSING else _entry_text(a_entry)))
            continue
        b = observation_key(before[probe]) if probe in before else None
        a = observation_key(after[probe]) if probe in after else None
        if a != b:
            changes.append((probe, observation_text(before[probe]) if probe in before else None,
                            observation_text(after[probe]) if probe in after else None))
    return changes


def absent_entry(path: str, cell: CellResult) -> str | None:
    """Why ``cell`` has no value for ``path`` when it is an entry of a table-valued probe that the
    cell did run ("dtypes.bcomplex32" where its dtypes table has no bcomplex32): its torch has no such
    entry, which is torch behaviour, not a missing probe. None when the probe itself is absent."""
    for probe, obs in cell.observations.items():
        if path.startswith(f"{probe}.") and _table(obs) is not None:
            entry = path[len(probe) + 1:]
            torch = one_line(cell.environment.get("torch") or cell.release, 80)
            if probe == "dtypes":
                return f"(no such dtype: torch {torch} has no {entry})"
            return f"(no such entry: torch {torch}'s {probe} has no {entry})"
    return None


def _told(changes: list[tuple[str, str | None, str | None]], baseline: CellResult,
          candidate: CellResult) -> list[tuple[str, str | None, str | None]]:
    """The changes, with an entry absent from one side's table said as what it is (absent_entry); None
    stays where the whole probe is absent (NOT_PROBED)."""
    return [(path, before if before is not None else absent_entry(path, baseline),
             after if after is not None else absent_entry(path, candidate)) for path, before, after in changes]


@dataclass(frozen=True)
class Change:
    """One promise on one device, compared."""

    promise: str
    title: str
    device: str
    before: Outcome
    after: Outcome

    def line(self) -> str:
        return f"promise {self.promise} ({self.title}) on {self.device}: {self.before.describe()} -> {self.after.describe()}"


@dataclass(frozen=True)
class StateChange:
    """One MutableStateTests class (promises 3 and 12 for any object), compared: its verdict on each
    side (passed, failed, untested, waived; ``absent``: not in that cell's run), and the candidate's
    tests that did not pass (each with its bad paths and reproducer, as the result file has them)."""

    cls: str
    before: str
    after: str
    tests: tuple[dict[str, Any], ...] = ()
    note: str | None = None  # why the candidate's verdict is what it is (its first test that did not pass)

    def line(self) -> str:
        return f"mutable state of {self.cls}: {self.before} -> {self.after}" + (f" ({self.note})" if self.note else "")


# The buffer's promises, absent from a run of MutableStateTests classes alone: said once, never a gap.
BUFFER_NOT_IN_RUN = ("the buffer promises were not part of the run: both cells hold only MutableStateTests classes "
                     "(no buffer class under test), so their mutable state alone is compared")


@dataclass
class Comparison:
    """The difference between a baseline and a candidate cell.

    ``unusable`` lists, one line each, every promise and device one side has no verdict
    for (and every side that did not complete): such a comparison proves nothing.
    """

    devices: list[str] = field(default_factory=list)
    checked: int = 0  # (promise, device) pairs that passed in the baseline
    unusable: list[str] = field(default_factory=list)
    regressions: list[Change] = field(default_factory=list)
    fixed: list[Change] = field(default_factory=list)
    still_failing: list[Change] = field(default_factory=list)  # failed in both: no regression, but no pass
    not_compared: list[Change] = field(default_factory=list)  # waived in both: the team's opt-out, never a pass
    known_failures: list[Change] = field(default_factory=list)  # the candidate failed as the team's file lists: no regression
    listed_but_passed: list[Change] = field(default_factory=list)  # listed as known failures, passed by the candidate
    verdict_changes: list[Change] = field(default_factory=list)  # every pair whose outcome differs
    recorded_changes: list[Change] = field(default_factory=list)
    observation_changes: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    # Why observations were not compared (the cells ran on different kinds of machine); None: they were.
    observations_not_compared: str | None = None
    warnings: list[str] = field(default_factory=list)
    # MutableStateTests classes (the result's mutable_state section), compared class by class.
    state_checked: int = 0  # classes that passed in the baseline
    state_regressions: list[StateChange] = field(default_factory=list)
    state_fixed: list[StateChange] = field(default_factory=list)
    state_still_failing: list[StateChange] = field(default_factory=list)
    state_not_compared: list[StateChange] = field(default_factory=list)  # waived in both
    state_changes: list[StateChange] = field(default_factory=list)  # every class whose verdict differs
    # BUFFER_NOT_IN_RUN when neither cell tested a buffer class (MutableStateTests alone); None otherwise.
    buffer_not_in_run: str | None = None

    @property
    def comparable(self) -> bool:
        return not self.unusable

    @property
    def regression_count(self) -> int:
        return len(self.regressions) + len(self.state_regressions)

    def change_lines(self) -> list[str]:
        """Every difference in the answer, one line each: verdicts, then observed behaviour."""
        lines = [c.line() for c in self.verdict_changes] + [c.line() for c in self.state_changes]
        for probe, before, after in self.observation_changes:
            lines.append(f"observation {probe}: {before if before is not None else '(absent)'} -> "
                         f"{after if after is not None else '(absent)'}")
        return lines


def _answer_of(promise: str, outcome: Outcome) -> tuple[str, str | None]:
    """What must stay equal for two cells to answer alike: the kind, and what a recorded promise recorded."""
    return outcome.kind, outcome.note if promise in RECORDED_ONLY else None


def different_impl(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> str | None:
    """One line when the two cells tested different classes, or one class through different adapters
    (None: the same, or a side that names none: a cell that never ran its suite is refused as such).
    A gate answers whether one class keeps its promises from one torch to the next: a candidate run
    against another class (the reference, by a slip of --impl) said nothing of the team's, and passed
    with a warning."""
    a, b = baseline.get("impl"), candidate.get("impl")
    if a == b or a is None or b is None:
        return None
    return (f"the cells tested different implementations: baseline {one_line(repr(a), 300)}, candidate "
            f"{one_line(repr(b), 300)}: run both with the same class (and make_buffer) to compare them")


def _label(side: str, cell: CellResult) -> str:
    return f"{side} {one_line(cell.name)} ({one_line(cell.source)})"


def diff(baseline: CellResult, candidate: CellResult, devices: Iterable[str] | None = None) -> Comparison:
    """Compare two cells on ``devices`` (default: every device the baseline was asked to test).

    Only verdicts are compared. Where either side has no verdict for a promise and device
    it is asked about, the comparison is ``unusable`` and names each such pair. Observed
    torch behaviour is compared only when both cells ran on the same kind of machine
    (``machine_kind``); otherwise ``observations_not_compared`` says why, and no probe counts
    as changed.
    """
    cmp = Comparison()
    for side, cell in (("baseline", baseline), ("candidate", candidate)):
        if not cell.completed:
            cmp.unusable.append(f"{_label(side, cell)} did not complete: {cell.answer().lines[0]}")
    if cmp.unusable:
        return cmp
    cmp.devices = list(devices) if devices is not None else baseline.asked_devices()
    if not cmp.devices:
        cmp.unusable.append(f"{_label('baseline', baseline)} was asked to test no device")
        return cmp
    if baseline.get("hypothesis_profile") != candidate.get("hypothesis_profile"):
        cmp.warnings.append(f"the cells ran different hypothesis profiles: baseline {baseline.get('hypothesis_profile')!r}, "
                            f"candidate {candidate.get('hypothesis_profile')!r}")
    for side, cell in (("baseline", baseline), ("candidate", candidate)):
        cmp.warnings += [f"{side}: {w}" for w in cell.warnings]

    if not (_buffer_in_run(baseline, cmp.devices) or _buffer_in_run(candidate, cmp.devices)) \
            and (baseline.get("mutable_state") or candidate.get("mutable_state")):
        cmp.buffer_not_in_run = BUFFER_NOT_IN_RUN
    numbers = [] if cmp.buffer_not_in_run else \
        promise_order(set(baseline.promise_numbers()) | set(candidate.promise_numbers()))
    for promise in numbers:
        for device in cmp.devices:
            before, after = baseline.outcome(promise, device), candidate.outcome(promise, device)
            if (not applies(promise, device) and promise in PROMISES) or before.kind == after.kind == "not_applicable":
                continue
            if baseline.machine != candidate.machine and "not_applicable" in (before.kind, after.kind):
                # Promise 11 is not applicable beside an accelerator: the machines differ, not the torch.
                out = before if before.kind == "not_applicable" else after
                cmp.warnings.append(f"promise {promise} ({baseline.title(promise)}) on {device} not compared: "
                                    f"{out.describe()} (baseline: {baseline.machine}; candidate: {candidate.machine})")
                continue
            change = Change(promise, baseline.title(promise), device, before, after)
            if before.kind == after.kind == "waived":
                # The team opted out on both sides: nothing to compare, no gap, and no pass either.
                cmp.not_compared.append(change)
                continue
            if _answer_of(promise, before) != _answer_of(promise, after):
                cmp.verdict_changes.append(change)
            gaps = [(s, c, o) for s, c, o in (("baseline", baseline, before), ("candidate", candidate, after)) if not o.is_verdict]
            if gaps:
                for side, cell, out in gaps:
                    cmp.unusable.append(f"{_label(side, cell)} has no verdict for promise {promise} "
                                        f"({cell.title(promise)}) on {device}: {out.describe()}")
                continue
            if promise in RECORDED_ONLY:  # implementation-defined: what changed is told, never judged
                if (before.kind, before.note) != (after.kind, after.note):
                    cmp.recorded_changes.append(change)
                continue
            if after.listed:  # a stale entry of the team's file: no regression, but the candidate's run fails on it
                cmp.listed_but_passed.append(change)
            if after.kind == "known_failure":  # listed by the team for this torch: told, never a regression
                cmp.checked += before.kind == "passed"
                cmp.known_failures.append(change)
            elif before.kind == "passed":
                cmp.checked += 1
                if after.kind != "passed":
                    cmp.regressions.append(change)
            elif before.kind in ("failed", "known_failure") and after.kind == "passed":
                cmp.fixed.append(change)
            elif before.kind in ("failed", "known_failure"):
                cmp.still_failing.append(change)
    _compare_states(cmp, baseline, candidate)
    if not cmp.unusable and not cmp.checked and not cmp.state_checked:
        # Nothing passed in the baseline, so nothing could regress: "all 0 checks hold" proves nothing.
        what = "MutableStateTests class" if cmp.buffer_not_in_run else "judged promise"
        cmp.unusable.append(f"{_label('baseline', baseline)} passed no {what} on {', '.join(cmp.devices)}: "
                            "there is no pass for the candidate to keep")
    if baseline.machine == candidate.machine:
        cmp.observation_changes = _told(observation_changes(baseline.observations, candidate.observations),
                                        baseline, candidate)
    elif baseline.observations or candidate.observations:
        cmp.observations_not_compared = (
            f"observed torch behaviour not compared: the cells ran on different kinds of machine "
            f"(baseline: {baseline.machine}; candidate: {candidate.machine}), and a machine is not a torch release")
    return cmp


# ---------------------------------------------------------------------------- MutableStateTests classes


def _buffer_in_run(cell: CellResult, devices: Iterable[str]) -> bool:
    """Whether the cell was asked about any buffer promise on these devices (a run of MutableStateTests
    classes alone writes every promise as not requested: no buffer class was under test)."""
    return any(cell.outcome(p, d).kind not in NOT_ASKED_KINDS for p in cell.promise_numbers() for d in devices)


def state_verdicts(cell: CellResult, devices: Iterable[str]) -> dict[str, tuple[str, tuple[dict[str, Any], ...]]]:
    """class -> (its verdict on ``devices``, its tests there), from the result's mutable_state section
    (rule.state_class_verdict decides each)."""
    wanted = set(devices)
    return {str(cls): state_class_verdict(judged, wanted) for cls, judged in (cell.get("mutable_state") or {}).items()}


def _state_note(verdict: str, tests: tuple[dict[str, Any], ...]) -> str | None:
    first = next((t for t in tests if t.get("verdict") == verdict), None)
    if first is None:
        return None if verdict == "passed" else "no test of it ran here"
    if verdict == "passed":
        return None
    more = sum(1 for t in tests if t.get("verdict") == verdict) - 1
    return f"{first.get('test')}: {first.get('why') or 'no reason given'}" + (f" (+{more} more)" if more > 0 else "")


def _compare_states(cmp: Comparison, baseline: CellResult, candidate: CellResult) -> None:
    """Each MutableStateTests class, as the promises are compared: a regression is a class that passed
    in the baseline and fails in the candidate; no verdict on either side (absent, untested, waived
    on one side only) is a gap; waived in both is not compared."""
    before_all = state_verdicts(baseline, cmp.devices)
    after_all = state_verdicts(candidate, cmp.devices)
    for cls in sorted(set(before_all) | set(after_all)):
        before, _ = before_all.get(cls, ("absent", ()))
        after, tests = after_all.get(cls, ("absent", ()))
        failing = tuple(t for t in tests if t.get("verdict") == after) if after != "passed" else ()
        change = StateChange(cls, before, after, failing, _state_note(after, tests))
        if before != after:
            cmp.state_changes.append(change)
        if before == "absent":  # new in the candidate: no pass to keep; its own answer judges it
            cmp.warnings.append(f"mutable state of {cls}: only in the candidate ({after}): nothing to compare it with; "
                                "the candidate's own answer judges it")
            continue
        if before == after == "waived":
            cmp.state_not_compared.append(change)
            continue
        gaps = [(side, cell, verdict, verdicts) for side, cell, verdict, verdicts in
                (("baseline", baseline, before, before_all), ("candidate", candidate, after, after_all))
                if verdict not in ("passed", "failed")]
        if gaps:
            for side, cell, verdict, verdicts in gaps:
                why = "not in that cell's run" if verdict == "absent" else \
                    f"{verdict} ({_state_note(verdict, verdicts[cls][1]) or 'no reason given'})"
                cmp.unusable.append(f"{_label(side, cell)} has no verdict for the mutable state of {cls} on "
                                    f"{', '.join(cmp.devices)}: {why}")
            continue
        if before == "passed":
            cmp.state_checked += 1
            if after == "failed":
                cmp.state_regressions.append(change)
        elif after == "passed":
            cmp.state_fixed.append(change)
        else:
            cmp.state_still_failing.append(change)
