"""The runner: from matrix.yaml to one result file per cell.

    matrix        matrix.yaml -> a validated Matrix (load, MatrixError); schemas/matrix.schema.json
    matrix_model  Matrix of MatrixCell (a Release on a RunnerDevice), the pairing of an unlisted release
    releases      which torch releases a package index or a folder of wheels offers
    install       one uv environment per torch, the installer and its progress, the torch check
    source        the suite a cell runs (a checkout's, or the installed package's) and where environments go
    processes     signals (CellInterrupted) and process groups: run_suite, signal_group, kill_group
    cell_spec     what a cell is asked to run (CellSpec) and the record of one run (CellRun)
    cell          one cell: claim results/<cell>.json, install, run the suite, write its answer
    answer        the suite's command in a cell, and how its ending becomes the cell's answer
    parallel      several cell runners side by side, output prefixed, stopped together
    bisection     the first release between GOOD and BAD whose answer changes

Reads matrix.yaml and package indexes; writes results/<cell>.json and .log (through
cpugpu_conformance.results). The command lines over it are in cpugpu_conformance.cli.
"""

from __future__ import annotations

from .cell import ResultPathUnusable, create_env_and_run, install_and_run, record_unfinished, run_cell
from .cell_spec import CellSpec
from .matrix import Matrix, MatrixCell, MatrixError, Release, RunnerDevice
from .processes import CellInterrupted

__all__ = [
    "CellInterrupted", "CellSpec", "Matrix", "MatrixCell", "MatrixError", "Release", "ResultPathUnusable",
    "RunnerDevice", "create_env_and_run", "install_and_run", "record_unfinished", "run_cell",
]
