"""``cpugpu-conformance cells [CELL|TAG...] [--json]``: the matrix's cells.

One line per cell: its name, nox session, tags, runner and time limit. ``--json`` prints
the CI job matrix on one line, ``{"include": [...]}`` with one entry per cell: the nox
``session`` that runs it, the ``cell`` name (its result file's stem), the ``runner``
label(s) of its device, the ``python`` of the matrix and ``timeout_minutes`` (the cell's
own time limit plus room to download and install torch). Exit 2 with one line per
problem for a broken matrix or an unknown cell or tag.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from cpugpu_conformance.cli.common import UsageError, add_matrix_option, error, load_matrix
from cpugpu_conformance.output import say
from cpugpu_conformance.runner import matrix as matrices

PROG = "cells"
HELP = "list the matrix's cells (--json: the CI job matrix)"
INSTALL_ALLOWANCE_MINUTES = 30  # downloading and installing a torch, on top of the suite's own limit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("select", nargs="*", metavar="CELL|TAG",
                        help="only these cells (torch-2.15.0-cpu) or tags (torch-2.15.0, device-cpu)")
    parser.add_argument("--json", action="store_true", help="the CI job matrix, one line of JSON")
    add_matrix_option(parser)


def job(matrix: matrices.Matrix, cell: matrices.MatrixCell) -> dict[str, Any]:
    """One CI job: what the cell job runs (`nox -s SESSION`), where, and for how long at most."""
    runner = cell.device.runner
    return {
        "session": cell.session,
        "cell": cell.name,
        "runner": runner if isinstance(runner, str) else list(runner),
        "python": matrix.python,
        "timeout_minutes": math.ceil(cell.time_limit_s / 60) + INSTALL_ALLOWANCE_MINUTES,
    }


def job_matrix(matrix: matrices.Matrix, cells: list[matrices.MatrixCell]) -> dict[str, Any]:
    return {"include": [job(matrix, c) for c in cells]}


def _line(cell: matrices.MatrixCell) -> str:
    runner = cell.device.runner if isinstance(cell.device.runner, str) else ",".join(cell.device.runner)
    return (f"{cell.name:<24} {' '.join(cell.tags):<28} runner {runner:<16} limit {cell.time_limit_s:g} s  "
            f"nox -s \"{cell.session}\"")


def run(args: argparse.Namespace) -> int:
    try:
        matrix = load_matrix(args.matrix)
        try:
            cells = matrix.select(args.select)
        except KeyError as exc:
            raise UsageError(exc.args[0]) from None
    except UsageError as exc:
        return error(PROG, str(exc))
    if args.json:
        say(json.dumps(job_matrix(matrix, cells), separators=(",", ":")))
    else:
        for cell in cells:
            say(_line(cell))
    return 0
