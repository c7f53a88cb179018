"""The parts of tools/gpu_check.py, one job each; the script itself holds its command line and
the order of the run (its docstring says what the run does).

    outcomes.py          the exit codes, what a step's code means, a Step, Refused
    proof_selection.py   the pytest plugin (-p gpu_check): the proofs for one device, longest first
    stop_signals.py      SIGINT, SIGTERM, SIGHUP: stopping gpu_check stops what it started
    child_processes.py   a step's process group, and everything below gpu_check, ended and reaped
    out_folder.py        the output folder: every file replaced whole, or refused before anything runs
    machine.py           the machine: can the children's torch use its GPU?
    steps.py             the suite's and the proofs' commands, run as steps; the result file's answer
    summary.py           the run's exit code and summary.txt

Importing the package puts the checkout's src/ first on sys.path.
"""

from __future__ import annotations

import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parent.parent
REPO = TOOLS.parent
SRC = REPO / "src"
if str(SRC) not in sys.path:  # the checkout's package, never an installed one: no install on a GPU machine
    sys.path.insert(0, str(SRC))
