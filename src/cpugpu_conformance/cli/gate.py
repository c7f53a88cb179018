"""``cpugpu-conformance gate --baseline FILE --candidate FILE``: exit 0 when every promise check
that passed in the baseline passes in the candidate and the candidate's own answer is clean,
1 on any regression (each with its reproducer) or a candidate whose own answer is FAILED,
2 when there is nothing to compare (an unreadable or malformed file, a cell that did not
complete, a missing verdict, an UNTESTED candidate) (cpugpu_conformance.report.gate)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..exits import ExitCode
from ..promises import DEVICES
from ..report.gate import fails, format_comparison, same_result, unanswered
from ..results import Answer, CellResult, Comparison, ResultFileError, diff

HELP = ("compare a candidate torch's cell result with the baseline's; exit 1 on any regression or a candidate "
        "that fails on its own, 2 when there is nothing to compare")


def exit_code(cmp: Comparison, strict: bool, answer: Answer) -> int:
    """2 nothing to compare; 1 a regression, a FAILED candidate, or (--strict) changed behaviour;
    2 a candidate with no verdict somewhere (UNTESTED); else 0. ``answer``: the candidate's own."""
    if not cmp.comparable:
        return ExitCode.USAGE
    if fails(cmp, strict, answer):
        return ExitCode.FAILED
    if unanswered(answer):
        return ExitCode.USAGE
    return ExitCode.OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", required=True, type=Path, metavar="FILE", help="result file of the torch in use")
    parser.add_argument("--candidate", required=True, type=Path, metavar="FILE", help="result file of the torch to upgrade to")
    parser.add_argument("--device", action="append", metavar="DEVICE",
                        help="device to compare (repeatable; default: every device the baseline was asked to test)")
    parser.add_argument("--strict", action="store_true", help="also fail (exit 1) when the observed torch behaviour changed")
    parser.epilog = ("exit 0: may upgrade; 1: a regression (with its reproducer), or the candidate's own answer is FAILED "
                     "(one CANDIDATE NOT CLEAN line per reason); 2: nothing to compare (a file missing, unreadable or "
                     "not a cell result, a cell that did not complete, a missing verdict, an UNTESTED candidate)")


def _error(line: str) -> None:
    print(f"cpugpu-conformance gate: error: {line}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    try:
        baseline = CellResult.load(args.baseline)
        candidate = CellResult.load(args.candidate)
    except ResultFileError as exc:
        _error(str(exc))
        return ExitCode.USAGE
    unknown = [d for d in args.device or () if d not in DEVICES]
    if unknown:
        _error(f"--device {unknown[0]!r}: unknown device; expected one of {', '.join(DEVICES)}")
        return ExitCode.USAGE
    cmp = diff(baseline, candidate, devices=args.device)
    if not cmp.comparable:
        _error(f"nothing to compare ({len(cmp.unusable)} gap(s)), refusing to pass:")
        for line in cmp.unusable:
            _error(line)
        return ExitCode.USAGE
    same = same_result(baseline, candidate)
    if same:
        cmp.warnings.insert(0, same)
    answer = candidate.answer()
    print(format_comparison(baseline, candidate, cmp, args.strict, answer))
    return exit_code(cmp, args.strict, answer)
