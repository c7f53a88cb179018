"""The verdicts of MutableStateTests classes (promises 3 and 12 for any object), by the same rule as
the buffer's (judge.py): a class passes only when its test ran to its end, and held, on every
device and in every creation context the run made tests for.

Each test leaves its evidence in its report (mutable_state.py's record: what it checked, the
bad paths, the caller's state it changed, the tensors an ambient context misplaced, what it
broke, every reproducer). The section this writes goes into
the result file under ``mutable_state``, beside (never inside) the buffer's promises, so the
result file of a buffer class is unchanged. Plain data in and out: no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cpugpu_conformance.promises import PLACEMENT

from .judge import XPASS_STRICT, Inventory, TestEvidence, by_class_and_key, stand_in

KIND = "mutable_state"  # item facts of a MutableStateTests test carry kind=KIND


def verdict_of(ev: TestEvidence) -> tuple[str, str | None]:
    """(passed|failed|untested|waived|skipped, why) for one MutableStateTests test."""
    facts, state = ev.facts, ev.state or {}
    skipped = "skipped" in ev.outcomes.values() and ev.wasxfail is None
    if facts.get("collisions"):  # what it checked, it checked through the class's own helpers (surface.py)
        return "untested", "not the contract's test: " + "; ".join(facts["collisions"])
    if state.get("broken") or state.get("errors"):
        first = (state.get("bad_paths") or [{}])[0]
        why = state.get("why") or (f"{first.get('path')}: {first.get('why')}" if first.get("path")
                                   else "; ".join(state.get("errors") or state.get("caller_state_changes") or [])
                                   or "broken")
        return "failed", why
    if not facts.get("contract"):
        if skipped and facts.get("opt_out"):
            return "waived", ev.skip_reason or "skipped by an override (no reason given)"
        return "untested", f"replaced by an override in {facts.get('class')}: its body is not the contract's"
    if ev.wasxfail is not None:
        return "untested", f"marked xfail: {ev.wasxfail or 'no reason given'}"
    if ev.failed_when == "call" and not (ev.message or "").startswith(XPASS_STRICT):
        return "failed", ev.message or "its report failed"
    if ev.failed_when is not None:
        return "untested", f"{ev.failed_when}: {ev.message or 'failed'}"
    if skipped and state.get("skipped_by") == "team":
        return "waived", state.get("skipped") or ev.skip_reason or "no reason given"
    if skipped and state.get("skipped_by") == "contract":
        return "skipped", state.get("skipped")
    if skipped:
        return "untested", f"skipped: {ev.skip_reason or 'no reason given'}"
    if "checked" in state and ev.outcomes.get("call") == "passed":
        return "passed", None
    return "untested", "it did not run to its end (no evidence from the contract's own code)"


def section(evidence: Mapping[str, TestEvidence], inventory: Inventory,
            required: Mapping[str, list[str]]) -> dict[str, Any]:
    """class -> its verdict and one entry per (device, context) it must run in: ``required`` is
    class -> the keys of its tests (manifest.state_required)."""
    out: dict[str, Any] = {}
    ours = {nodeid: ev for nodeid, ev in evidence.items() if ev.facts.get("kind") == KIND}
    by_key = by_class_and_key(ours)
    for cls, keys in sorted(required.items()):
        tests = []
        for key in keys:
            ev = by_key.get((cls, key)) or stand_in(ours, cls, key, None)
            facts = inventory.find(cls, key)
            test = ev.nodeid if ev is not None else (facts["nodeid"] if facts else f"{cls}::{key}")
            if ev is None:
                missing = inventory.why_absent(facts) if facts else "never collected"
                tests.append({"test": test, "verdict": "untested", "why": missing})
                continue
            verdict, why = verdict_of(ev)
            entry: dict[str, Any] = {"test": test, "verdict": verdict}
            if why:
                entry["why"] = why
            for name in ("device", "context", "checked", "broken", "bad_paths", "caller_state_changes", "placement",
                         "excluded", "reproducer", "reproducers"):
                value = (ev.state or {}).get(name)
                if value not in (None, [], {}):
                    entry[name] = value
            tests.append(entry)
        kinds = {t["verdict"] for t in tests}
        worst = next((k for k in ("failed", "untested", "waived") if k in kinds), None)
        out[cls] = {"verdict": worst or ("passed" if "passed" in kinds else "untested"), "tests": tests}
        broken = {p for t in tests for p in t.get("broken", [])}
        if broken:  # what the class breaks, over every test: promises 3 and 12, and placement, by name
            out[cls]["broken"] = sorted(broken, key=lambda p: (p == PLACEMENT, int(p) if p.isdigit() else 0))
    return out

