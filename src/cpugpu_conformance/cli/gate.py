"""``cpugpu-conformance gate --baseline FILE --candidate FILE``: exit 0 when every promise check
that passed in the baseline passes in the candidate, 1 on any regression (each with its
reproducer), 2 when there is nothing to compare (cpugpu_conformance.report.gate)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..exits import ExitCode
from ..promises import DEVICES
from ..report.gate import fails, format_comparison, same_result
from ..results import CellResult, Comparison, ResultFileError, diff

HELP = "compare a candidate torch's cell result with the baseline's; exit 1 on any regression"


def exit_code(cmp: Comparison, strict: bool) -> int:
    if not cmp.comparable:
        return ExitCode.USAGE
    if fails(cmp, strict):
        return ExitCode.FAILED
    return ExitCode.OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", required=True, type=Path, metavar="FILE", help="result file of the torch in use")
    parser.add_argument("--candidate", required=True, type=Path, metavar="FILE", help="result file of the torch to upgrade to")
    parser.add_argument("--device", action="append", metavar="DEVICE",
                        help="device to compare (repeatable; default: every device the baseline was asked to test)")
    parser.add_argument("--strict", action="store_true", help="also fail (exit 1) when the observed torch behaviour changed")


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
    print(format_comparison(baseline, candidate, cmp, args.strict))
    return exit_code(cmp, args.strict)
