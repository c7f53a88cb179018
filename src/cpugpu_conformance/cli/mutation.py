"""``python -m cpugpu_conformance.mutation``: the mutation score of an implementation against the suite.

    python -m cpugpu_conformance.mutation [--impl FILE.py:Attr | module:Attr] [--equivalents FILE]
        [--workdir DIR] [--timeout SECONDS] [--check-equivalents] [--suite DIR] [-- extra pytest args]

Exit codes: 0 every non-equivalent mutant killed, and there was at least one;
1 anything else after a run (a survivor, a timeout, an incompetent or unrun mutant, no mutant
left to test, an equivalents entry that matches no mutant (stale) or that the suite kills);
2 bad input, one line naming the culprit (a missing file, a bad spec, a corrupt equivalents
file, a suite that fails on the unmutated target, nothing to mutate, cosmic-ray missing or its
init failing). A failing ``cosmic-ray exec`` is reported, and leaves its mutants "not run": exit 1.
The run itself is cpugpu_conformance.mutation (how cosmic-ray's outcomes are read: mutation/score.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..exits import ExitCode
from ..impl import DEFAULT_SPEC
from ..mutation.run import Options, run
from ..mutation.score import BadInput
from .common import split_pytest_args  # cosmic-ray comes with the [test] extra, which has the matrix's packages


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cpugpu_conformance.mutation",
        description="Mutation score of an implementation against the conformance suite (cosmic-ray).",
        epilog="Arguments after -- go to every pytest run of the suite.",
    )
    parser.add_argument("--impl", default=DEFAULT_SPEC, metavar="SPEC", help="FILE.py:Attr or module:Attr (default: the reference)")
    parser.add_argument("--equivalents", metavar="FILE", help="reviewed equivalent mutants, YAML (default: the committed list, for the reference only)")
    parser.add_argument("--workdir", metavar="DIR", help="where the copy, config and cosmic-ray session go (kept; default: a temporary directory)")
    parser.add_argument("--timeout", type=float, metavar="SECONDS", help="per-mutant timeout (default: 4 x baseline + 30 s, at least 60 s)")
    parser.add_argument("--check-equivalents", action="store_true", help="run the listed equivalents too; each must survive")
    parser.add_argument("--suite", default="conformance", metavar="DIR", help="the test directory, from the project root (default: conformance)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    ours, extra = split_pytest_args(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(ours)
    except SystemExit as exc:  # --help, or a usage error argparse has printed
        return exc.code if isinstance(exc.code, int) else ExitCode.USAGE
    try:
        return run(Options(**vars(args)), extra)
    except BadInput as exc:
        print(f"mutation: {exc}", file=sys.stderr)
        return ExitCode.USAGE
