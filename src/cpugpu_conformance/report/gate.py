"""Baseline cell vs candidate cell -> may we upgrade torch?

``cpugpu-conformance gate --baseline FILE --candidate FILE [--device D] [--strict]`` (cli/gate.py)

The gate compares verdicts (``results.diff``), and judges the candidate's own answer by the
result rule (``CellResult.answer``: the one rule summary and report use): a candidate that is
not clean never passes, whatever the baseline did. Exit codes:
  0  every promise that passed in the baseline passes in the candidate, on every device
     compared, and the candidate's own answer is clean (warnings may be printed);
  1  a promise regressed (passed in the baseline, failed in the candidate), each with its
     reproducer; or the candidate's own answer is FAILED (a failed promise on any device it
     tested, promises 10 and 11 included; a failure outside any promise's check; a test
     that errored), even where the baseline failed the same way: each reason is one
     CANDIDATE NOT CLEAN line; or, with --strict, the observed torch behaviour changed;
  2  nothing to compare, never a pass: a result file is missing, unreadable or not a cell
     result (one line naming the file and the key), a cell did not complete (crashed,
     timed out, interrupted, not installed, wrong torch, error), either cell has no
     verdict (skipped, missing, never ran) for a promise on a device the gate is asked
     about, the baseline passed no judged promise at all (nothing could regress), or the
     candidate's own answer is UNTESTED (a promise it was asked about has no verdict, on a
     device not compared too). Each such gap is named on its own line.

The devices compared are those given with --device, else every device the baseline
was asked to test. Promise 11 is recorded, never judged: a change in what it recorded
is a warning only. A promise that fails in the baseline and the candidate alike is no
regression, with or without --strict, but each is named (STILL FAILING) and counted in
the last line (the candidate's answer then fails the gate); a baseline and candidate that are one file (or equal results) get a
warning. Observed torch behaviour is compared only between cells that ran on the same
kind of machine (no accelerator, or which GPU: the result's environment says): across
kinds the gate says so in one warning and counts no change, with or without --strict.
A promise the team waived (opted out of, with a reason) in both cells is listed as NOT
COMPARED: no gap, and no pass; waived on one side only, it is a gap (exit 2). A promise the
candidate fails as the team's known-failures file lists is a KNOWN FAILURE: never a regression,
even where the baseline passed it (the team listed it for that torch); a listed promise the
candidate passes is no regression either, but fails the gate (exit 1, KNOWN FAILURE NOW PASSES)
as it fails the candidate's own run, until the entry is removed (results/known_failures.py).
"""

from __future__ import annotations

import os

from ..results import NOT_PROBED, Answer, CellResult, Change, Comparison, StateChange, one_line


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line.strip() else line.rstrip() for line in text.rstrip("\n").splitlines())


def _describe(cell: CellResult) -> str:
    return f"{one_line(cell.name)} (torch {one_line(cell.release)}, {cell.status}) from {one_line(cell.source)}"


def same_result(baseline: CellResult, candidate: CellResult) -> str | None:
    """A warning when the two sides are one file, or copies of one result: such a pair shows
    no change whatever the torch, so a pass says nothing about an upgrade."""
    try:
        if os.path.samefile(baseline.source, candidate.source):
            return (f"the baseline and the candidate are the same file ({one_line(baseline.source)}): "
                    "a cell compared with itself shows no change, whatever the torch")
    except OSError:
        pass
    if baseline == candidate:
        return ("the baseline and the candidate are the same result (one file copied?): "
                "a cell compared with itself shows no change, whatever the torch")
    return None


def fails(cmp: Comparison, strict: bool, answer: Answer | None = None) -> bool:
    """A comparable pair the gate fails (exit 1): a regression, a candidate whose own answer
    (``answer``) is FAILED, a promise the known-failures file lists that the candidate passed (its
    own run fails on it), or (--strict) a change in observed behaviour."""
    failed = answer is not None and answer.kind == "failed"
    return bool(cmp.regression_count or failed or cmp.listed_but_passed or (strict and cmp.observation_changes))


def own_answer(candidate: CellResult, cmp: Comparison) -> Answer:
    """The candidate's own answer, less the promises the team waived in both cells: those are NOT
    COMPARED (no gap, no pass), and a candidate untested only there is no reason to refuse."""
    answer = candidate.answer()
    both = tuple(f"promise {c.promise} ({c.title}) on {c.device}: waived:" for c in cmp.not_compared)
    both += tuple(f"mutable state of {c.cls}: waived:" for c in cmp.state_not_compared)
    lines = tuple(line for line in answer.lines if not (both and line.startswith(both)))
    if answer.kind == "untested" and not lines:
        return Answer("passed", (), answer.counts)
    return Answer(answer.kind, lines, answer.counts)


def checked_text(cmp: Comparison) -> str:
    """What the baseline passed, that the candidate must keep: "12 promise checks", "1 MutableStateTests
    class(es)", or both."""
    states = f"{cmp.state_checked} MutableStateTests class(es)"
    if cmp.buffer_not_in_run:
        return states
    promises = f"{cmp.checked} promise checks"
    return f"{promises} and {states}" if cmp.state_checked or cmp.state_changes else promises


def state_failure_lines(change: StateChange) -> list[str]:
    """Each test of a state class that did not pass in the candidate: its paths (where the walk found a
    tensor that refuses an in-place update, and why), the caller's state it changed, its reproducer."""
    out: list[str] = []
    for test in change.tests:
        where = ", ".join(one_line(test[k]) for k in ("device", "context") if test.get(k))
        out.append(f"  {test.get('verdict')}: {one_line(test.get('test'))}" + (f" ({where})" if where else ""))
        paths = [p for p in test.get("bad_paths") or [] if isinstance(p, dict)]
        for bad in paths:
            phase = f" ({one_line(bad.get('phase'))})" if bad.get("phase") else ""
            out.append(f"    {one_line(bad.get('path'))}: {one_line(bad.get('why'))}{phase}")
        for line in test.get("caller_state_changes") or []:
            out.append(f"    {one_line(line)}")
        if not paths and not test.get("caller_state_changes"):
            out.append(f"    {one_line(test.get('why') or 'no reason given')}")
        reproducer = test.get("reproducer")
        out += ["  reproducer:", _indent(str(reproducer), "    ")] if reproducer else ["  (no reproducer recorded)"]
    return out


def unanswered(answer: Answer) -> bool:
    """A candidate whose own answer is neither clean nor FAILED (untested): no pass, nothing to
    compare (exit 2) unless something else fails the gate."""
    return not answer.clean and answer.kind != "failed"


def format_comparison(baseline: CellResult, candidate: CellResult, cmp: Comparison, strict: bool,
                      answer: Answer | None = None) -> str:
    """The gate's report for a comparable pair, in plain text for CI logs; ``answer`` is the
    candidate's own (``candidate.answer()`` when not given)."""
    answer = own_answer(candidate, cmp) if answer is None else answer
    out = [f"baseline:  {_describe(baseline)}", f"candidate: {_describe(candidate)}",
           f"compared devices: {', '.join(cmp.devices)}"]
    if cmp.buffer_not_in_run:
        out.append(f"NOT COMPARED: {cmp.buffer_not_in_run}")
    for i, reg in enumerate(cmp.regressions, 1):
        out += ["", f"REGRESSION {i}: {reg.line()}"]
        for failure in reg.after.failures:
            out.append(f"  failed: {one_line(failure.get('test'))}")
            out.append(_indent(str(failure.get("message") or ""), "    "))
            reproducer = failure.get("reproducer")
            out += ["  reproducer:", _indent(str(reproducer), "    ")] if reproducer else ["  (no reproducer recorded)"]
    for i, state in enumerate(cmp.state_regressions, len(cmp.regressions) + 1):
        out += ["", f"REGRESSION {i}: mutable state of {one_line(state.cls)}: {state.before} -> {state.after}"]
        out += state_failure_lines(state)

    fixed_all: list[Change | StateChange] = [*cmp.fixed, *cmp.state_fixed]
    still_all: list[Change | StateChange] = [*cmp.still_failing, *cmp.state_still_failing]
    notes = [f"fixed: {c.line()}" for c in fixed_all]
    notes += [f"STILL FAILING: {c.line()} (failed in the baseline too: not a regression)" for c in still_all]
    notes += [f"KNOWN FAILURE: {c.line()} (listed in the known-failures file: not a regression)" for c in cmp.known_failures]
    notes += [f"KNOWN FAILURE NOW PASSES: promise {c.promise} ({c.title}) on {c.device}: {c.after.listed}"
              for c in cmp.listed_but_passed]
    notes += [f"NOT COMPARED: promise {c.promise} ({c.title}) on {c.device}: waived in both cells "
              f"({c.after.note or 'no reason given'}): not tested, so neither a gap nor a pass" for c in cmp.not_compared]
    notes += [f"NOT COMPARED: mutable state of {c.cls}: waived in both cells ({c.note or 'no reason given'}): not "
              "tested, so neither a gap nor a pass" for c in cmp.state_not_compared]
    notes += [f"WARNING: {w}" for w in cmp.warnings]
    notes += [f"WARNING: promise {c.promise} ({c.title}) on {c.device} recorded something else: "
              f"{c.before.describe()} -> {c.after.describe()} (recorded, not judged)" for c in cmp.recorded_changes]
    kind = "CHANGED" if strict else "WARNING"
    for probe, before, after in cmp.observation_changes:
        notes.append(f"{kind}: observed torch behaviour {probe}: "
                     f"{before if before is not None else NOT_PROBED} -> {after if after is not None else NOT_PROBED}")
    if cmp.observations_not_compared:
        notes.append(f"WARNING: {cmp.observations_not_compared}")
    if notes:
        out += ["", *notes]
    if not answer.clean:
        out += ["", *(f"CANDIDATE NOT CLEAN: {one_line(line)}" for line in answer.lines)]

    out.append("")
    reasons = f"{len(answer.lines)} reason(s) above"
    if cmp.regression_count:
        out.append(f"FAIL: {cmp.regression_count} regression(s) out of {checked_text(cmp)} that passed in the baseline")
    elif cmp.listed_but_passed:
        out.append(f"FAIL: {len(cmp.listed_but_passed)} promise check(s) the known-failures file lists pass in the "
                   "candidate (no regression: remove the entries, as the candidate's own run says)")
    elif answer.kind == "failed":
        out.append(f"FAIL: the candidate's own answer is FAILED ({reasons}), whatever the baseline's was")
    elif unanswered(answer):
        out.append(f"NO PASS: the candidate's own answer is {answer.kind.upper().replace('_', ' ')} ({reasons}): "
                   "nothing to compare where it has no verdict")
    elif fails(cmp, strict):
        out.append(f"FAIL (--strict): {len(cmp.observation_changes)} change(s) in observed torch behaviour")
    else:
        warned = (len(cmp.warnings) + len(cmp.recorded_changes) + len(cmp.observation_changes)
                  + bool(cmp.observations_not_compared))
        still = (f"; {len(cmp.still_failing)} promise check(s) fail in the baseline and the candidate alike"
                 if cmp.still_failing else "")
        still += (f"; {len(cmp.state_still_failing)} MutableStateTests class(es) fail in the baseline and the candidate "
                  "alike" if cmp.state_still_failing else "")
        accepted = sum(c.before.kind == "passed" for c in cmp.known_failures)  # listed by the team: no regression
        held = (f"{cmp.checked - accepted} of the {checked_text(cmp)} that passed in the baseline pass in the "
                f"candidate; {accepted} fail as the known-failures file lists" if accepted else
                f"all {checked_text(cmp)} that passed in the baseline pass in the candidate")
        out.append(f"PASS: {held}" + still + (f" ({warned} warning(s) above)" if warned else ""))
    return "\n".join(out)
