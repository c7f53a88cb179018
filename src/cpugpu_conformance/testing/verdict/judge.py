"""From what each test left behind to a verdict per promise and device: the library's rule.

A promise passes on a device only when every contract test of it that applies there
(manifest.py) was collected, ran its body to the end and raised nothing, as the test's own
stamp says (stamps.py), for every class under test. Whatever else happened to a test is
named, test by test:

    failed      its body raised (even where a hook rewrote the report to passed, or an
                xfail marker swallowed it), or its report failed
    untested    deselected (-k, -m, --deselect, a conftest hook), never collected (the class
                does not include its area), skipped, xfailed or xpassed, replaced by an
                override, an error in its setup, or a report that says passed with no stamp
    waived      replaced by an override that skips it: the team's decision, with its reason
    skipped     the contract skipped it: a check this machine cannot make (a pass of the
                other checks of the promise still stands, and the result names it)

A promise's verdict is the worst of its tests: failed, then untested, then waived; a
promise whose every test the contract skipped is ``skipped``. Plain data in, plain data
out: xdist's controller, which imports no torch, runs it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cpugpu_conformance.promises import RECORDED_ONLY

from ..shared.stamps import COLLIDED, COMPLETED, RAISED, SHORT, SKIPPED, STOPPED

HELD, FAILED, UNTESTED, WAIVED, CONTRACT_SKIPPED = "held", "failed", "untested", "waived", "contract_skipped"
XPASS_STRICT = "[XPASS(strict)]"  # how pytest words the failure of a strict xfail test that passed
RERUN = "rerun"  # pytest-rerunfailures' outcome for an attempt that failed and is run again


@dataclass
class TestEvidence:
    """Everything the reports of one test said: its facts (reports.item_facts) and each phase."""

    facts: dict[str, Any]
    outcomes: dict[str, str] = field(default_factory=dict)  # setup/call/teardown -> passed/failed/skipped
    stamp: str | None = None
    stamp_detail: str | None = None
    skip_reason: str | None = None
    wasxfail: str | None = None  # None: not marked xfail
    message: str | None = None  # the first failing phase's
    failed_when: str | None = None
    blame: str | None = None
    reproducer: str | None = None
    observed: str | None = None
    dtypes: tuple[str, ...] = ()  # what its scenarios were built with
    state: dict[str, Any] | None = None  # a MutableStateTests test's record (state_judge.py)
    attempts: int = 0  # how many times its body was called, over every rerun or repeat
    failed_attempts: int = 0
    hypothesis: dict[str, Any] | None = None  # the settings and examples it ran (stamps.ExamplesRan)

    @property
    def nodeid(self) -> str:
        return str(self.facts.get("nodeid"))

    def add(self, when: str, outcome: str, props: Mapping[str, Any], message: str | None,
            skip_reason: str | None, wasxfail: str | None, state: dict[str, Any] | None = None) -> None:
        """One report's evidence. It accumulates over every attempt at the test (pytest-rerunfailures'
        reruns, pytest-repeat's repeats, any plugin that runs a test again) and is never reset:
        an attempt that raised leaves the test failed whatever a later attempt did."""
        if outcome == RERUN:  # pytest-rerunfailures: an attempt that failed, before the next one
            outcome = "failed"
        if when == "call":
            self.attempts += max(1, int(props.get("attempts") or 1))
            if outcome == "failed" or props.get("stamp") == RAISED:
                self.failed_attempts += 1
        if self.outcomes.get(when) != "failed":
            self.outcomes[when] = outcome
        if state is not None and not _broken(self.state):
            self.state = state
        if props.get("stamp") is not None and self.stamp not in (RAISED, COLLIDED):
            self.stamp, self.stamp_detail = props["stamp"], props.get("stamp_detail")
        for name in ("blame", "reproducer", "observed"):  # the first attempt that left one keeps it
            if props.get(name) is not None and getattr(self, name) is None:
                setattr(self, name, props[name])
        if props.get("dtypes"):
            self.dtypes = tuple(sorted({*self.dtypes, *props["dtypes"]}))
        if props.get("hypothesis"):
            self.hypothesis = dict(props["hypothesis"])
        if wasxfail is not None:
            self.wasxfail = wasxfail
        if outcome == "skipped" and self.skip_reason is None:
            self.skip_reason = skip_reason
        if outcome == "failed" and self.failed_when is None:
            self.failed_when, self.message = when, message


def _broken(state: Mapping[str, Any] | None) -> bool:
    return state is not None and bool(state.get("broken") or state.get("errors"))


@dataclass(frozen=True)
class TestVerdict:
    kind: str  # HELD, FAILED, UNTESTED, WAIVED, CONTRACT_SKIPPED
    why: str | None = None


def verdict_of(ev: TestEvidence) -> TestVerdict:
    """What one test shows, from its stamp first and its reports second."""
    facts = ev.facts
    skipped = "skipped" in ev.outcomes.values() and ev.wasxfail is None
    if facts.get("collisions"):  # whatever it did, it did through the class's own helpers
        return TestVerdict(UNTESTED, "not the contract's test: " + "; ".join(facts["collisions"]))
    if ev.stamp == COLLIDED:
        return TestVerdict(UNTESTED, f"not the contract's test: {ev.stamp_detail}")
    if ev.stamp == RAISED:  # the contract's own words for what raised, before pytest's crash line and its notes
        return TestVerdict(FAILED, ev.stamp_detail or ev.message)
    if not facts.get("contract"):
        if skipped and facts.get("opt_out"):
            return TestVerdict(WAIVED, ev.skip_reason or "skipped by an override (no reason given)")
        return TestVerdict(UNTESTED, f"replaced by an override in {facts.get('class')}: its body is not the contract's")
    if ev.wasxfail is not None:
        how = "xpassed" if "passed" in ev.outcomes.values() or ev.failed_when == "call" else "xfailed"
        return TestVerdict(UNTESTED, f"marked xfail ({how}): {ev.wasxfail or 'no reason given'}")
    if ev.failed_when == "call" and ev.stamp == COMPLETED and (ev.message or "").startswith(XPASS_STRICT):
        return TestVerdict(UNTESTED, f"marked xfail (xpassed, strict): {ev.message}")
    if ev.failed_when == "call":
        return TestVerdict(FAILED, ev.message or "its report failed")
    if ev.failed_when is not None:
        return TestVerdict(UNTESTED, f"an error in its {ev.failed_when}: {ev.message or 'no message'}")
    if ev.stamp == SKIPPED:
        return TestVerdict(CONTRACT_SKIPPED, ev.stamp_detail)
    if ev.stamp in (STOPPED, SHORT):
        return TestVerdict(UNTESTED, ev.stamp_detail)
    if skipped:
        return TestVerdict(UNTESTED, f"skipped: {ev.skip_reason or 'no reason given'}")
    if ev.stamp == COMPLETED and ev.outcomes.get("call") == "passed":
        return TestVerdict(HELD)
    if ev.outcomes.get("call") == "passed":
        return TestVerdict(UNTESTED, "its report says passed, but the contract's body did not run to its end "
                                     "(a hook rewrote the report?)")
    return TestVerdict(UNTESTED, "it did not run to its end")


@dataclass
class Inventory:
    """What the run collected and deselected among the library's tests (the worker's view)."""

    items: dict[str, dict[str, Any]] = field(default_factory=dict)  # nodeid -> item facts
    deselected: set[str] = field(default_factory=set)

    def classes(self, kind: str | None = None) -> list[str]:
        return sorted({str(f["class"]) for f in self.items.values() if f.get("kind") == kind})

    def find(self, cls: str, key: str) -> dict[str, Any] | None:
        for facts in self.items.values():
            if facts["class"] == cls and facts["key"] == key:
                return facts
        return None

    def why_absent(self, facts: Mapping[str, Any]) -> str:
        """Why a collected test left no report."""
        if facts["nodeid"] in self.deselected:
            return "deselected (-k, -m, --deselect or a conftest hook)"
        return "collected but never run (dropped by a conftest hook, or the run stopped before it)"

    def overrides(self, cls: str, test: str) -> bool:
        return any(f["class"] == cls and f["test"] == test for f in self.items.values())

    def as_data(self) -> dict[str, Any]:
        return {"items": self.items, "deselected": sorted(self.deselected)}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Inventory:
        return cls(dict(data.get("items") or {}), set(data.get("deselected") or ()))


def by_class_and_key(evidence: Mapping[str, TestEvidence]) -> dict[tuple[str, str], TestEvidence]:
    """(class, key) -> its evidence. Several tests with one key are repeats of one test (pytest-repeat's
    --count): the worst of them stands for it, so a repeat that failed is never outvoted."""
    out: dict[tuple[str, str], TestEvidence] = {}
    for ev in evidence.values():
        where = (str(ev.facts["class"]), str(ev.facts["key"]))
        if where not in out or _standing(ev) < _standing(out[where]):
            out[where] = ev
    return out


def _standing(ev: TestEvidence) -> int:
    """0: it failed; 1: it showed nothing; 2: it held (the buffer's tests and MutableStateTests' alike)."""
    if _broken(ev.state) or ev.stamp == RAISED or ev.failed_when == "call":
        return 0
    if ev.state is not None:
        return 2 if "checked" in ev.state and ev.outcomes.get("call") == "passed" else 1
    return 2 if verdict_of(ev).kind == HELD else 1


def stand_in(evidence: Mapping[str, TestEvidence], cls: str, key: str, device: str | None) -> TestEvidence | None:
    """An override of a required test that reached the run under other parameters (an opt-out
    ``def test_x(self)`` takes no device): it stands for the test on every device (``device``
    None: on any)."""
    name = key.split("[", 1)[0]
    for ev in evidence.values():
        facts = ev.facts
        if facts["class"] == cls and facts["test"] == name and not facts.get("contract") \
                and (device is None or facts.get("device") in (None, device)):
            return ev
    return None


@dataclass
class Judgement:
    """Every test's verdict, and the failures each promise and device is blamed for."""

    evidence: dict[str, TestEvidence]
    inventory: Inventory
    required: Mapping[str, Mapping[str, list[str]]]  # promise -> device -> keys (manifest.required)
    area_of: Mapping[str, str]  # test name -> area class
    verdicts: dict[str, TestVerdict] = field(default_factory=dict)
    failures: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    blamed_elsewhere: dict[str, str] = field(default_factory=dict)  # nodeid -> the promise blamed instead
    by_key: dict[tuple[str, str], TestEvidence] = field(default_factory=dict)  # (class, key) -> its evidence

    def __post_init__(self) -> None:
        # The tests of MutableStateTests classes have a section of their own (state_judge.py).
        self.evidence = {n: ev for n, ev in self.evidence.items() if ev.facts.get("kind") != "mutable_state"}
        self.by_key = by_class_and_key(self.evidence)
        for nodeid, ev in self.evidence.items():
            verdict = self.verdicts[nodeid] = verdict_of(ev)
            if verdict.kind != FAILED:
                continue
            own = [str(p) for p in ev.facts.get("promises") or ()]
            targets = [ev.blame] if ev.blame else own
            for promise in targets:
                failure: dict[str, Any] = {"test": nodeid, "message": verdict.why or "failed",
                                           "reproducer": ev.reproducer}
                if ev.attempts > 1:  # a rerun or a repeat: the failure stands whatever the others did
                    failure["attempts"] = {"total": ev.attempts, "failed": max(1, ev.failed_attempts)}
                self.failures.setdefault((promise, str(ev.facts.get("device"))), []).append(failure)
            if ev.blame and ev.blame not in own:
                self.blamed_elsewhere[nodeid] = ev.blame

    def unattributed(self) -> list[dict[str, Any]]:
        """Failed reports that are no failure of a promise (an override's own assertion, an error in
        a setup, a strict xfail that passed): the run failed, and the result file must say so."""
        out = []
        for nodeid, ev in self.evidence.items():
            if ev.failed_when is not None and self.verdicts[nodeid].kind != FAILED:
                out.append({"test": nodeid, "message": ev.message or "failed"})
        return out

    def settings_ran(self) -> dict[str, dict[str, Any]]:
        """nodeid -> the hypothesis settings it ran under and the examples it executed (stamps.ExamplesRan),
        for every test that ran hypothesis: the result file keeps them, and the gate compares like with like."""
        return {nodeid: dict(ev.hypothesis, attempts=ev.attempts) for nodeid, ev in sorted(self.evidence.items())
                if ev.hypothesis}

    def any_held(self) -> bool:
        """Whether any contract test ran its body to the end and held: something was tested."""
        return any(v.kind == HELD for v in self.verdicts.values())

    def classes(self) -> list[str]:
        """The classes under test: those with a test that reached the run (one wholly deselected is not)."""
        return sorted({str(ev.facts["class"]) for ev in self.evidence.values()})

    def failed_tests_of(self, promise: str, device: str) -> list[dict[str, Any]]:
        return self.failures.get((promise, device), [])

    def _missing(self, cls: str, key: str) -> str:
        """Why a required test left no report: deselected, dropped, or never in the class."""
        facts = self.inventory.find(cls, key)
        if facts is not None:
            return self.inventory.why_absent(facts)
        name = key.split("[", 1)[0]
        if self.inventory.overrides(cls, name):
            return f"replaced by an override in {cls} that changes its parameters"
        area = self.area_of.get(name, "its area")
        return f"not in {cls}: the class does not include {area} (subclass BufferContractTests for the whole contract)"

    def entry(self, promise: str, device: str) -> dict[str, Any]:
        """The verdict of one promise on one device the run was asked about, with the tests behind it."""
        failures = self.failed_tests_of(promise, device)
        held, observed = 0, []
        dtypes: set[str] = set()
        untested: list[dict[str, str]] = []
        waived: list[dict[str, str]] = []
        skipped: list[dict[str, str]] = []
        keys = list((self.required.get(promise) or {}).get(device) or [])
        classes = self.classes()
        if not classes:
            untested.append({"test": "(none)", "why": "no contract test was collected or run"})
        for cls in classes:
            for key in keys:
                ev = self.by_key.get((cls, key)) or stand_in(self.evidence, cls, key, device)
                if ev is None:
                    facts = self.inventory.find(cls, key)
                    untested.append({"test": facts["nodeid"] if facts else f"{cls}::{key}",
                                     "why": self._missing(cls, key)})
                    continue
                verdict = self.verdicts[ev.nodeid]
                if verdict.kind == HELD:
                    held += 1
                    dtypes.update(ev.dtypes)
                    if ev.observed:
                        observed.append(ev.observed)
                elif verdict.kind == FAILED:
                    if ev.nodeid in self.blamed_elsewhere:
                        untested.append({"test": ev.nodeid, "why": "it stopped at a failure blamed on promise "
                                                                   f"{self.blamed_elsewhere[ev.nodeid]}"})
                elif verdict.kind == WAIVED:
                    waived.append({"test": ev.nodeid, "reason": verdict.why or ""})
                elif verdict.kind == CONTRACT_SKIPPED:
                    skipped.append({"test": ev.nodeid, "why": verdict.why or ""})
                else:
                    untested.append({"test": ev.nodeid, "why": verdict.why or ""})
        untested, waived, skipped = _unique(untested), _unique(waived), _unique(skipped)  # one override, many keys
        out: dict[str, Any] = {"passed": held, "failed": len(failures),
                               "skipped": len(untested) + len(waived) + len(skipped)}
        for name, tests in (("untested_tests", untested), ("waived_tests", waived), ("skipped_tests", skipped)):
            if tests:
                out[name] = tests
        if failures:
            return {"verdict": "failed", "failures": failures, **out}
        if untested:
            return {"verdict": "skipped", "reason": _summary(untested, "why", len(keys) * max(1, len(classes)),
                                                             "did not run to their end"), **out}
        if waived:
            return {"verdict": "waived", "reason": _summary(waived, "reason", None, "waived"), **out}
        if not held:
            return {"verdict": "skipped", "reason": "; ".join(sorted({t["why"] for t in skipped}))
                    or "no test of this promise ran", **out}
        out["verdict"] = "recorded" if promise in RECORDED_ONLY else "passed"
        if dtypes:  # what it was checked with here: on CUDA some dtypes cannot even be made (issue 23)
            out["dtypes"] = sorted(dtypes)
        if observed:
            out["observed"] = "; ".join(sorted(set(observed)))
        if skipped:  # checks that could not run here: untested, and no part of the pass
            out["reason"] = "passed on the checks that ran; the contract skipped: " + "; ".join(
                sorted({t["why"] for t in skipped}))
        return out


def _unique(tests: list[dict[str, str]]) -> list[dict[str, str]]:
    seen: dict[str, dict[str, str]] = {}
    for test in tests:
        seen.setdefault(test["test"], test)
    return list(seen.values())


def _summary(tests: list[dict[str, str]], field_name: str, total: int | None, what: str) -> str:
    first = tests[0]
    of = f" of {total}" if total else ""
    more = f" (+{len(tests) - 1} more)" if len(tests) > 1 else ""
    if field_name == "reason":
        return f"{len(tests)}{of} test(s) waived: {first['test']}: {first['reason']}{more}"
    return f"{len(tests)}{of} test(s) {what}: {first['test']}: {first['why']}{more}"


def untested_lines(entries: Iterable[tuple[str, str, Mapping[str, Any]]]) -> list[str]:
    """One line per test that kept a promise from passing, for the run's last lines."""
    lines = []
    for promise, device, entry in entries:
        for test in entry.get("untested_tests") or ():
            lines.append(f"promise {promise} on {device}: {test['test']}: {test['why']}")
        for test in entry.get("waived_tests") or ():
            lines.append(f"promise {promise} on {device}: {test['test']}: waived: {test['reason']}")
    return lines
