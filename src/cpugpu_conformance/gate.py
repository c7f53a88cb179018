"""Baseline cell vs candidate cell -> may we upgrade torch?

``python -m cpugpu_conformance gate --baseline FILE --candidate FILE [--strict]``

Exit codes:
  0  every promise that passed in the baseline passes in the candidate, on every
     device both cells tested (warnings may be printed);
  1  the candidate is not shown to be as good: a promise regressed (failed, skipped
     or missing where the baseline passed), or the candidate cell did not complete
     (crashed, timed out, not installed, wrong torch, error: a torch that cannot run
     the suite is no upgrade), or, with --strict, the observed torch behaviour changed;
  2  nothing to compare: a result file is missing, unreadable or invalid, the baseline
     cell did not complete, or no device was tested by both cells.

Promise 11 is recorded, never judged: a change in what it recorded is a warning only.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import compat
from .compat import Cell
from .results import ResultFileError, load

HELP = "compare a candidate torch's cell result with the baseline's; exit 1 on any regression"


class GateInputError(Exception):
    """The two results cannot be compared: exit 2."""


@dataclass
class Regression:
    promise: str
    title: str
    device: str
    baseline: str
    candidate: str
    failures: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Verdict:
    compared_devices: list[str] = field(default_factory=list)
    checked: int = 0  # (promise, device) pairs that passed in the baseline
    regressions: list[Regression] = field(default_factory=list)
    incomplete_candidate: str | None = None  # the candidate's status when it did not complete
    warnings: list[str] = field(default_factory=list)
    observation_changes: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)

    def exit_code(self, strict: bool) -> int:
        if self.incomplete_candidate or self.regressions:
            return 1
        if strict and self.observation_changes:
            return 1
        return 0


def _tested(cell: Cell) -> set[str]:
    return {d for d in cell.devices() if cell.device_status(d)[0] == "tested"}


def compare(baseline: Cell, candidate: Cell) -> Verdict:
    if not baseline.completed:
        raise GateInputError(
            f"baseline cell {baseline.name} ({baseline.source}) did not complete ({baseline.status}): "
            "nothing to compare against"
        )
    verdict = Verdict()
    if not candidate.completed:
        verdict.incomplete_candidate = candidate.status
        return verdict
    if baseline.result.get("impl") != candidate.result.get("impl"):
        verdict.warnings.append(
            f"the cells tested different implementations: baseline {baseline.result.get('impl')!r}, "
            f"candidate {candidate.result.get('impl')!r}"
        )
    if baseline.result.get("hypothesis_profile") != candidate.result.get("hypothesis_profile"):
        verdict.warnings.append(
            f"the cells ran different hypothesis profiles (baseline {baseline.result.get('hypothesis_profile')!r}, "
            f"candidate {candidate.result.get('hypothesis_profile')!r}): they did not run the same examples"
        )

    both = _tested(baseline) & _tested(candidate)
    for device in sorted(_tested(baseline) - both):
        status, reason = candidate.device_status(device)
        why = f"{status or 'absent'}" + (f": {reason}" if reason else "")
        verdict.warnings.append(f"device {device} was tested in the baseline but not in the candidate ({why}): not compared")
    if not both:
        raise GateInputError(
            f"no device was tested by both cells (baseline tested {sorted(_tested(baseline)) or 'none'}, "
            f"candidate tested {sorted(_tested(candidate)) or 'none'})"
        )
    verdict.compared_devices = [d for d in baseline.devices() if d in both]

    cells = [baseline, candidate]
    for number in compat.promise_numbers(baseline.result.get("promises") or {}):
        title = compat.promise_title(number, cells)
        for device in verdict.compared_devices:
            before = baseline.promise_on(number, device)
            after = candidate.promise_on(number, device)
            if compat.is_recorded_only(number):
                b_obs = before.get("observed") if before else None
                a_obs = after.get("observed") if after else None
                if before is not None and b_obs != a_obs:
                    verdict.warnings.append(
                        f"promise {number} ({title}) on {device} recorded something else: "
                        f"{b_obs!r} -> {a_obs!r} (recorded, not judged)"
                    )
                continue
            b = before["verdict"] if before else "missing"
            a = after["verdict"] if after else "missing"
            if b == "passed":
                verdict.checked += 1
                if a != "passed":
                    failures = list(after.get("failures") or []) if after else []
                    verdict.regressions.append(Regression(number, title, device, b, a, failures))
            elif b == "failed" and a == "passed":
                verdict.fixed.append(f"promise {number} ({title}) on {device}: failed -> passed")

    verdict.observation_changes = compat.observation_changes(baseline.observations(), candidate.observations())
    return verdict


# --- plain-text output for CI logs ------------------------------------------------------


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line.strip() else line.rstrip() for line in text.rstrip("\n").splitlines())


def _describe(cell: Cell) -> str:
    return f"{cell.name} (torch {cell.release}, {cell.status}) from {cell.source}"


def format_verdict(baseline: Cell, candidate: Cell, verdict: Verdict, strict: bool) -> str:
    out = [f"baseline:  {_describe(baseline)}", f"candidate: {_describe(candidate)}"]
    if verdict.incomplete_candidate:
        out.append("")
        out.append(f"REGRESSION: candidate cell did not complete: {verdict.incomplete_candidate}")
        detail = candidate.result.get("detail")
        if detail:
            tail = "\n".join(str(detail).rstrip("\n").splitlines()[-30:])
            out.append("  detail (last lines):")
            out.append(_indent(tail, "    "))
    else:
        out.append(f"compared devices: {', '.join(verdict.compared_devices)}")

    for i, reg in enumerate(verdict.regressions, 1):
        out.append("")
        out.append(
            f"REGRESSION {i}: promise {reg.promise} ({reg.title}) on {reg.device}: {reg.baseline} -> {reg.candidate}"
        )
        if reg.candidate == "missing":
            out.append("  the candidate's result has no verdict for it")
        for failure in reg.failures:
            out.append(f"  failed: {failure.get('test')}")
            out.append(_indent(str(failure.get("message") or ""), "    "))
            reproducer = failure.get("reproducer")
            if reproducer:
                out.append("  reproducer:")
                out.append(_indent(str(reproducer), "    "))
            else:
                out.append("  (no reproducer recorded)")

    if verdict.fixed or verdict.warnings or verdict.observation_changes:
        out.append("")
    for line in verdict.fixed:
        out.append(f"fixed: {line}")
    for line in verdict.warnings:
        out.append(f"WARNING: {line}")
    kind = "CHANGED" if strict else "WARNING"
    for probe, before, after in verdict.observation_changes:
        out.append(
            f"{kind}: observed torch behaviour {probe}: "
            f"{before if before is not None else '(not probed)'} -> {after if after is not None else '(not probed)'}"
        )

    out.append("")
    code = verdict.exit_code(strict)
    if verdict.incomplete_candidate:
        out.append(f"FAIL: the candidate cell did not complete ({verdict.incomplete_candidate}), so it proves nothing")
    elif verdict.regressions:
        out.append(f"FAIL: {len(verdict.regressions)} regression(s) out of {verdict.checked} promise checks that passed in the baseline")
    elif code:
        out.append(f"FAIL (--strict): {len(verdict.observation_changes)} change(s) in observed torch behaviour")
    else:
        warned = len(verdict.warnings) + len(verdict.observation_changes)
        out.append(
            f"PASS: all {verdict.checked} promise checks that passed in the baseline pass in the candidate"
            + (f" ({warned} warning(s) above)" if warned else "")
        )
    return "\n".join(out)


# --- command line ------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", required=True, type=Path, metavar="FILE", help="result file of the torch in use")
    parser.add_argument("--candidate", required=True, type=Path, metavar="FILE", help="result file of the torch to upgrade to")
    parser.add_argument("--strict", action="store_true", help="also fail (exit 1) when the observed torch behaviour changed")


def run(args: argparse.Namespace) -> int:
    try:
        baseline = Cell(str(args.baseline), load(args.baseline))
        candidate = Cell(str(args.candidate), load(args.candidate))
        verdict = compare(baseline, candidate)
    except (ResultFileError, GateInputError) as exc:
        print(f"cpugpu-conformance gate: error: {exc}", file=sys.stderr)
        return 2
    print(format_verdict(baseline, candidate, verdict, args.strict))
    return verdict.exit_code(args.strict)
