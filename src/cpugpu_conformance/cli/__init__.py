"""The command line: ``cpugpu-conformance <command>`` (dispatch.py), one module per command.

    run            run.py        the suite on the reference or your class (and the plugin it loads into pytest)
    report, gate   report.py, gate.py
    cells, cell, matrix, bisect, summary, record-unfinished
                   cells.py, cell.py, matrix.py, bisection.py, summary.py, record.py
    python -m cpugpu_conformance.matrix      matrix_file.py (check matrix.yaml)
    python -m cpugpu_conformance.mutation    mutation.py

What they share: ``ExitCode`` (exits.py) and the options and argument handling of the
matrix commands (common.py). argparse is used here and nowhere else in the package.
"""

from __future__ import annotations

from ..exits import ExitCode
from .dispatch import SUBCOMMANDS, main

__all__ = ["SUBCOMMANDS", "ExitCode", "main"]
