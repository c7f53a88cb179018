"""The rule, in one place: what a promise did on a device, and what a cell's answer is.

- ``outcome(result, promise, device)``: a promise on a device *passed* only when its checks
  ran and held, and the writer names no test of it that did not run to its end (the suite
  requires every test of the promise: testing/judge.py). Skipped, missing, empty, a test
  left out: each is ``untested``; an opt-out the team made (a skip override) is ``waived``,
  with its reason. Neither is ever a pass. A promise that failed as the team's known-failures
  file lists (known_failures.py) is ``known_failure``, with the listed reason: tested, no pass.
- ``answer(result)``: a cell is clean only when it completed and every promise on every
  device it was asked to test passed, was recorded or is a known failure, and no listed
  known failure passed (a stale entry fails the cell until it is removed, as xfail_strict).
- ``release_limit(result, device)``: a device the cell's torch cannot host at all (sim before
  torch 2.8, devices.release_limit) is not applicable in that cell, with why, as a promise is
  on a device it is not about: never untested, never a pass. A cell whose every asked device is
  so answers ``not_applicable``: not clean (it proved nothing), not failed either.

``CellResult.outcome()`` and ``CellResult.answer()`` are these functions. The rule reads a
result through ``Result`` below, the little of a cell result it needs, so it stands below
model.py (which holds the file) and never imports it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..devices import accelerators_in
from ..devices import release_limit as registry_release_limit
from ..promises import APPLIES_TO, RECORDED_ONLY, applies, not_applicable
from .text import first_line, last_line

# Outcome kinds that are verdicts: the gate compares these and nothing else.
VERDICT_KINDS = ("passed", "failed", "recorded", "known_failure")
# Outcome kinds for pairs nobody asked about: neither a verdict nor a gap.
NOT_ASKED_KINDS = ("not_applicable", "not_requested")


class Result(Protocol):
    """What the rule reads of a cell result (model.CellResult is one)."""

    @property
    def status(self) -> str: ...

    @property
    def completed(self) -> bool: ...

    @property
    def detail(self) -> str | None: ...

    @property
    def environment(self) -> Mapping[str, Any]: ...

    def get(self, key: str, /) -> Any: ...

    def promise_numbers(self) -> list[str]: ...

    def requested_promises(self) -> set[str] | None: ...

    def asked_devices(self) -> list[str]: ...

    def device_entry(self, device: str) -> dict[str, Any] | None: ...

    def entry(self, promise: str, device: str) -> dict[str, Any] | None: ...

    def title(self, promise: str) -> str: ...


@dataclass(frozen=True)
class Outcome:
    """What one promise did on one device, decided by the rule.

    kind: passed, failed, recorded, known_failure (verdicts: known_failure failed as the
    team's known-failures file lists, the note is its reason); untested (asked, but not every
    check ran and held: skipped, missing, empty, deselected); waived (asked, and the team
    opted out, with a reason); not_applicable, not_requested (nobody asked); or, for a cell
    that did not complete, its status. ``listed``: a known-failures listing of a promise that
    passed (stale: the answer fails on it), one line saying so.
    """

    kind: str
    note: str | None = None
    failures: tuple[dict[str, Any], ...] = ()
    listed: str | None = None

    @property
    def is_verdict(self) -> bool:
        return self.kind in VERDICT_KINDS

    @property
    def asked(self) -> bool:
        return self.kind not in NOT_ASKED_KINDS

    def describe(self) -> str:
        return self.kind.replace("_", " ") + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class Answer:
    """A cell's answer: ``kind`` is passed, failed, untested, not_applicable (every device asked for is
    one its torch cannot host: neither a pass nor a failure) or the status of a cell that did not
    complete; only passed is clean. ``lines`` say why it is not."""

    kind: str
    lines: tuple[str, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return self.kind == "passed"

    @property
    def not_applicable(self) -> bool:
        """Nothing the cell was asked about can be tested with its torch: no pass, and no failure."""
        return self.kind == "not_applicable"


def outcome(result: Result, promise: str, device: str) -> Outcome:
    """What ``promise`` did on ``device``: the one place a pass is decided."""
    if not result.completed:
        return Outcome(result.status, first_line(result.detail))
    dev = result.device_entry(device)
    if dev is None or dev.get("status") == "not_requested":
        return Outcome("not_requested", (dev or {}).get("reason") or f"{device} was not asked for")
    if not applies(promise, device):
        only = " and ".join(APPLIES_TO.get(promise, ()))
        return Outcome("not_applicable", f"promise {promise} is about {only}")
    chosen = result.requested_promises()
    entry = result.entry(promise, device)
    # Before the device's skip: a promise left out by --promise is not untested on a missing device.
    if chosen is not None and promise not in chosen:
        return Outcome("not_requested", (entry or {}).get("reason") or "not selected (--promise)")
    if dev.get("status") == "skipped":
        limit = release_limit(result, device)
        if limit is not None:
            return Outcome("not_applicable", limit)
        return Outcome("untested", dev.get("reason") or f"{device} was skipped")
    if entry is not None and entry.get("verdict") == "not_requested":
        return Outcome("not_requested", entry.get("reason") or "not selected (--promise)")
    if entry is None:
        return Outcome("untested", f"the result has no verdict for promise {promise} on {device}")
    failures = tuple(entry.get("failures") or ())
    verdict = entry.get("verdict")
    if verdict == "known_failure":
        return _known_failure(entry, failures)
    if verdict == "failed" or entry.get("failed", 0) > 0 or failures:
        return Outcome("failed", _failure_summary(failures) or entry.get("observed"), failures)
    if entry.get("untested_tests"):  # a test of it did not run to its end: never a pass, whatever the verdict says
        return Outcome("untested", entry.get("reason") or _tests_summary(entry["untested_tests"], "why"))
    if verdict == "waived" or entry.get("waived_tests"):
        return Outcome("waived", entry.get("reason") or _tests_summary(entry.get("waived_tests") or [], "reason"))
    if verdict in ("passed", "recorded"):
        if entry.get("passed", 0) < 1:
            return Outcome("untested", f"recorded as {verdict}, but no check of it ran")
        kind = "recorded" if promise in RECORDED_ONLY else "passed"
        return Outcome(kind, entry.get("observed") if kind == "recorded" else None, listed=_stale(entry))
    if verdict == "not_applicable":
        why = not_applicable(promise, device, accelerators_in(result.environment))  # promise 11 beside an accelerator
        if why is not None:
            return Outcome("not_applicable", why)
        return Outcome("untested", f"the result calls promise {promise} not applicable on {device}; the contract does not")
    return Outcome("untested", entry.get("reason") or "skipped")


def release_limit(result: Result, device: str) -> str | None:
    """Why ``device`` is not applicable in this cell: the torch it ran cannot host the device at all
    (sim before torch 2.8). Only for a completed cell that asked for the device and skipped it; the
    why is the writer's own where it gave one. None otherwise: a
    device the cell tested keeps its verdicts, whatever its torch."""
    dev = result.device_entry(device)
    if not result.completed or dev is None or dev.get("status") != "skipped":
        return None
    why = registry_release_limit(device, result.environment.get("torch"))
    if why is None:
        return None
    reason = dev.get("reason")
    return first_line(reason) if isinstance(reason, str) and reason.strip() else why


def outcomes(result: Result) -> Iterator[tuple[str, str, Outcome]]:
    """(promise, device, outcome) for every promise the contract or the result knows, on every asked device."""
    for promise in result.promise_numbers():
        for device in result.asked_devices():
            yield promise, device, outcome(result, promise, device)


def answer(result: Result) -> Answer:
    """The cell's answer: clean only when it completed, every asked pair passed, was recorded or is a
    known failure, and no listed known failure passed."""
    if not result.completed:
        return Answer(result.status, (f"{result.status.replace('_', ' ')}: {first_line(result.detail) or 'no detail'}",))
    counts = {"passed": 0, "failed": 0, "recorded": 0, "untested": 0, "waived": 0, "known_failure": 0,
              "listed_but_passed": 0}
    failed, untested = [], []
    for promise, device, out in outcomes(result):
        if out.kind in counts:
            counts[out.kind] += 1
        if out.listed:  # strict, as xfail_strict: the file must stop saying it fails
            counts["listed_but_passed"] += 1
            failed.append(f"promise {promise} ({result.title(promise)}) on {device}: {out.listed}")
        if out.kind == "failed":
            failed.append(f"promise {promise} ({result.title(promise)}) on {device}: failed: {out.note or 'no message'}")
        elif out.kind in ("untested", "waived"):  # an opt-out is a decision, never a pass
            untested.append(f"promise {promise} ({result.title(promise)}) on {device}: {out.kind}: {out.note}")
    for item in result.get("unattributed_failures") or []:
        failed.append(f"{item.get('test')}: {last_line(item.get('message'))}")
    state_passed = 0
    for cls, judged in sorted((result.get("mutable_state") or {}).items()):
        kind, tests = state_class_verdict(judged)
        state_passed += sum(1 for t in tests if t.get("verdict") == "passed") if kind == "passed" else 0
        first = next((t for t in tests if t.get("verdict") == kind), None)
        if first is None:  # the file's word alone, or only the contract's own skips: nothing showed it
            line = f"mutable state of {cls}: " + ("no test of it ran" if kind == "untested" else
                                                  f"{kind}, says the file, naming no test of it")
        else:
            line = f"mutable state of {cls}: {kind}: {first.get('test')}: {first.get('why') or 'no reason given'}"
        if kind == "failed":
            failed.append(line)
        elif kind != "passed":  # untested or waived
            untested.append(line)
    errors = int((result.get("counts") or {}).get("errors", 0))
    if errors and not failed:
        failed.append(f"{errors} test(s) errored outside any promise's check")
    if not result.asked_devices():
        untested.append("no device was asked for")
    if failed:
        return Answer("failed", tuple(failed + untested), counts)
    held = counts["passed"] + counts["recorded"] + counts["known_failure"] + state_passed
    limits = {d: why for d in result.asked_devices() if (why := release_limit(result, d)) is not None}
    if not untested and not held and limits and set(limits) == set(result.asked_devices()):
        # As a promise on a device it is not about: nothing to test, which is neither a pass nor a gap.
        return Answer("not_applicable", tuple(why if why.startswith(f"{d}:") else f"{d}: {why}"
                                              for d, why in limits.items()), counts)
    if untested or not held:
        return Answer("untested", tuple(untested) or ("no check of any promise ran",), counts)
    return Answer("passed", (), counts)


def describe(result: Result) -> str:
    """One line for logs and the summary: the answer and its counts. A clean answer in which no
    check passed (every asked pair a known failure) is never called passed."""
    a = answer(result)
    if a.kind == "not_applicable":
        return f"NOT APPLICABLE ({'; '.join(a.lines)})"
    if not result.completed:
        return a.lines[0]
    c = a.counts
    states = _state_classes(result)
    word = answer_word(a, sum(1 for kind in states if kind == "passed"))
    known = f", {_plural(c['known_failure'], 'known failure')}" if c.get("known_failure") else ""
    stale = f", {c['listed_but_passed']} listed as known failures but passed" if c.get("listed_but_passed") else ""
    held = (f", {sum(1 for kind in states if kind == 'passed')} of {_plural(len(states), 'MutableStateTests class', 'es')}"
            " passed" if states else "")
    return (f"{word} ({c['passed']} passed, {c['failed']} failed, {c['untested']} untested, {c['recorded']} recorded"
            f"{known}{stale}{held})")


def answer_word(a: Answer, states_passed: int = 0) -> str:
    """The answer as one word for a log line or a table: passed, FAILED, UNTESTED; a clean answer
    in which nothing passed or was recorded (only known failures) is KNOWN FAILURES ONLY."""
    if a.kind == "passed":
        held = a.counts.get("passed", 0) + a.counts.get("recorded", 0) + states_passed
        return "passed" if held else "KNOWN FAILURES ONLY"
    return {"failed": "FAILED", "untested": "UNTESTED"}.get(a.kind, a.kind.upper().replace("_", " "))


def _state_classes(result: Result) -> list[str]:
    """The verdict of each MutableStateTests class the result holds."""
    return [state_class_verdict(judged)[0] for _, judged in sorted((result.get("mutable_state") or {}).items())]


_STATE_WORST = ("failed", "untested", "waived")


def state_class_verdict(judged: Any, devices: set[str] | None = None) -> tuple[str, tuple[dict[str, Any], ...]]:
    """A MutableStateTests class's verdict on ``devices`` (None: all) and its tests there: the one
    place such a pass is decided. It passes only when a test of it there passed, none failed, was
    untested or waived (the contract's own skips aside), and, where no test was left out, the file's
    own verdict for it says passed too; a test with no device (never collected) counts everywhere."""
    judged = judged if isinstance(judged, dict) else {}
    every = [t for t in judged.get("tests") or [] if isinstance(t, dict)]
    tests = tuple(t for t in every if devices is None or t.get("device") is None or t.get("device") in devices)
    kinds = {t.get("verdict") for t in tests}
    if len(tests) == len(every):  # nothing left out: the file's own verdict counts too
        kinds.add(judged.get("verdict"))
    worst = next((k for k in _STATE_WORST if k in kinds), None)
    if worst is not None:
        return worst, tests
    ran = any(t.get("verdict") == "passed" for t in tests)
    return ("passed" if ran and kinds <= {"passed", "skipped"} else "untested"), tests


def _plural(n: int, word: str, suffix: str = "s") -> str:
    return f"{n} {word}" + ("" if n == 1 else suffix)


def _listing(entry: dict[str, Any]) -> dict[str, Any] | None:
    listing = entry.get("known_failure")  # known_failures.TABLE: the listing the file gave this pair
    return listing if isinstance(listing, dict) else None


def _listed_where(listing: dict[str, Any]) -> str:
    entry = listing.get("entry")
    return f"{listing.get('file') or 'the known-failures file'}" + (f", entry {entry}" if entry else "")


def _known_failure(entry: dict[str, Any], failures: tuple[dict[str, Any], ...]) -> Outcome:
    """A pair recorded as a known failure: only a failure the writer shows, with the reason it was
    listed for, is one; anything less is no pass either."""
    listing = _listing(entry) or {}
    reason = entry.get("reason") or listing.get("reason")
    if not failures and entry.get("failed", 0) < 1:
        return Outcome("untested", "recorded as a known failure, but no check of it failed")
    if not reason:
        return Outcome("failed", _failure_summary(failures) or "recorded as a known failure with no reason", failures)
    return Outcome("known_failure", str(reason), failures)


def _stale(entry: dict[str, Any]) -> str | None:
    """The line of a promise that passed although the known-failures file lists it."""
    listing = _listing(entry)
    if listing is None:
        return None
    return (f"listed as a known failure ({_listed_where(listing)}: {listing.get('reason') or 'no reason'}) "
            "but it passed: remove the entry (or bound it with torch = \"<release\")")


def _tests_summary(tests: list[Any], key: str) -> str:
    first = tests[0] if tests and isinstance(tests[0], dict) else {}
    more = f" (+{len(tests) - 1} more)" if len(tests) > 1 else ""
    return f"{first.get('test')}: {first.get(key)}{more}" if first else "no reason given"


def _failure_summary(failures: tuple[dict[str, Any], ...]) -> str | None:
    if not failures:
        return None
    first = failures[0]
    text = f"{first.get('test')}: {last_line(first.get('message'))}"
    return text if len(failures) == 1 else f"{text} (+{len(failures) - 1} more)"

