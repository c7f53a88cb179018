"""``cpugpu-conformance record-unfinished results/<cell>.json --cell C --session S [--nox-log F]``.

The CI fallback, run after the cell's step whatever it did: a cell that left no result
file, or an unreadable one, is recorded as ``error``; one whose file still says
``interrupted`` (a cancel, the job's time limit) stays interrupted with the last lines of
nox's output added. Any other answer stands. Always exit 0: the cell's answer is in the file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cpugpu_conformance.runner import cell as cells

HELP = "CI: record a cell that nox left without an answer (error, or interrupted with nox's output)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("result", type=Path, help="the cell's result file, results/<cell>.json")
    parser.add_argument("--cell", required=True, help="the cell's name")
    parser.add_argument("--session", required=True, help="the nox session that ran it")
    parser.add_argument("--nox-log", type=Path, help="nox's output, whose last lines go into the result")


def run(args: argparse.Namespace) -> int:
    recorded = cells.record_unfinished(args.result, args.cell, args.session, args.nox_log)
    print(recorded or f"{args.result}: the cell's answer stands")
    return 0
