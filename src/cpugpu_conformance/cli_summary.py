"""``cpugpu-conformance summary [RESULTS_DIR] [--cells A,B]``: the table of the cells' answers.

One row per cell (the cells named, a missing result file included, else every result file
in RESULTS_DIR), one line per cell that is not clean saying why. Exit 0 only when every
cell is clean, 1 otherwise, 2 when there is nothing to summarize.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cpugpu_conformance import cell as cells
from cpugpu_conformance.cli_common import default_results, error

PROG = "summary"
HELP = "table of the cells' answers; exit 1 unless every cell is clean"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", nargs="?", type=Path, default=None, metavar="RESULTS_DIR",
                        help="folder of result files (default: $CONFORMANCE_RESULTS, else results)")
    parser.add_argument("--cells", help="comma-separated cell names (default: every RESULTS_DIR/*.json)")


def run(args: argparse.Namespace) -> int:
    folder = args.results_dir or default_results()
    names = [n for n in args.cells.split(",") if n] if args.cells else None
    rows = cells.summarize(folder, names)
    if not rows:
        return error(PROG, f"{folder}: no result files")
    print(cells.format_summary(rows))
    return 0 if all(r.clean for r in rows) else 1
