"""``cpugpu-conformance record-unfinished results/<cell>.json --cell C --session S [--nox-log F]``.

The CI fallback, run after the cell's step whatever it did: a cell that left no result
file, or an unreadable one, is recorded as ``error``; one whose file still says
``interrupted`` (a cancel, the job's time limit) stays interrupted with the last lines of
nox's output added. Any other answer stands. Exit 0: the cell's answer is in the file; exit 2,
one line, where it cannot be (a cell name that is not one, a path it cannot write).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cpugpu_conformance.cli.common import error
from cpugpu_conformance.report.summary import check_cell_name
from cpugpu_conformance.results import one_line
from cpugpu_conformance.runner import cell as cells

HELP = "CI: record a cell that nox left without an answer (error, or interrupted with nox's output)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("result", type=Path, help="the cell's result file, results/<cell>.json")
    parser.add_argument("--cell", required=True, help="the cell's name")
    parser.add_argument("--session", required=True, help="the nox session that ran it")
    parser.add_argument("--nox-log", type=Path, help="nox's output, whose last lines go into the result")


def run(args: argparse.Namespace) -> int:
    try:
        check_cell_name(args.cell)
        recorded = cells.record_unfinished(args.result, args.cell, args.session, args.nox_log)
    except ValueError as exc:
        return error("record-unfinished", f"--cell: {exc}")
    except OSError as exc:  # a file where its folder should be, a folder at the path: no answer went in
        why = f"{exc.strerror} ({exc.filename})" if exc.strerror and exc.filename else str(exc)
        return error("record-unfinished", f"{args.result}: cannot record the cell's answer there: {one_line(why)}")
    print(recorded or f"{args.result}: the cell's answer stands")
    return 0
