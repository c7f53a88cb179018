"""``cpugpu-conformance summary [RESULTS_DIR] [--cells A,B]``: the table of the cells' answers.

One row per cell (the cells named, a missing result file included, else every result file
in RESULTS_DIR), one line per cell that is not clean saying why. Exit 0 only when every
cell is clean or not applicable (its torch cannot host the device it asked for: sim before
torch 2.8) and at least one is clean, 1 otherwise (cells that are all not applicable proved
nothing), 2 when there is nothing to summarize or for bad input (an
empty RESULTS_DIR, a --cells name that is not a plain name: ../x would read elsewhere, a
result file that is not a cell result: malformed, unreadable, not a regular file; its
row is UNREADABLE and its line names the file and the key).
A ``--no-answer`` cell (nox names each cell whose command ended before writing its answer)
is a NO RESULT row whatever file is at its path: an earlier run's pass is never its answer.
"""

from __future__ import annotations

import argparse

from cpugpu_conformance import output
from cpugpu_conformance.cli.common import PathArgument, default_results, error
from cpugpu_conformance.exits import ExitCode
from cpugpu_conformance.report import summary

PROG = "summary"
HELP = ("table of the cells' answers; exit 1 unless every cell is clean (or not applicable, beside a clean one), 2 for "
        "a file that is not a cell result")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", nargs="?", action=PathArgument, default=None, metavar="RESULTS_DIR",
                        help="folder of result files (default: $CONFORMANCE_RESULTS, else results)")
    parser.add_argument("--cells", help="comma-separated cell names (default: every RESULTS_DIR/*.json)")
    parser.add_argument("--no-answer", action="append", default=[], metavar="CELL",
                        help="a cell that wrote no answer in this run (nox passes it): whatever file is at its "
                             "path is from an earlier run and is never read as its answer")


def run(args: argparse.Namespace) -> int:
    folder = args.results_dir or default_results()
    names = [n for n in args.cells.split(",") if n] if args.cells else None
    try:
        unanswered = [summary.check_cell_name(n) for n in args.no_answer]
        rows = summary.summarize(folder, [n for n in names if n not in unanswered] if names else None)
    except ValueError as exc:  # a cell name that is not a plain name: it would read outside the folder
        return error(PROG, f"--cells: {exc}")
    rows = [r for r in rows if r.cell not in unanswered]
    rows += [summary.unanswered_row(folder / f"{name}.json", name, "its cell wrote no answer in this run")
             for name in unanswered]
    if not rows:
        return error(PROG, f"{folder}: no result files")
    output.say(summary.format_summary(rows))
    if any(r.answer == summary.UNREADABLE for r in rows):
        return ExitCode.USAGE  # bad input, as the table's line for it says: never read as a cell's answer
    return ExitCode.OK if summary.passing(rows) else ExitCode.FAILED
