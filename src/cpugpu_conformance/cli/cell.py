"""``cpugpu-conformance cell RELEASE [--device D] [--env DIR] [-- PYTEST_ARGS]``: one matrix cell.

What ``nox -t torch-RELEASE`` does, without nox: make the cell's environment (uv, the
matrix's Python; reused when it is there), install the release's torch, its NumPy and the
project, check it got that torch, run the suite and write results/<cell>.json and .log
(cells.install_and_run). Exit 0 when the cell is clean, 1 when it is not (failed,
untested, not installed, crashed, ...), 2 for bad input (a release or device the matrix
does not have, an option the cell sets itself among the pytest arguments, a result file
another run is writing, a results folder it cannot write), 129, 130 or 143 when SIGHUP,
SIGINT or SIGTERM stopped it (recorded as interrupted).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from cpugpu_conformance import results
from cpugpu_conformance.cli import common
from cpugpu_conformance.runner import cell as cells
from cpugpu_conformance.runner import matrix as matrices
from cpugpu_conformance.runner import processes

PROG = "cell"
HELP = "install one matrix cell's torch in its own environment and run the suite there (what nox -t torch-X does)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("torch", metavar="RELEASE", help="a torch release listed in the matrix (2.15.0, latest)")
    common.add_cell_options(parser, env=("--env", "the cell's environment, made when missing (default: .nox/<cell> in the checkout)"),
                            epilog="Arguments after -- go to pytest (--promise 1, --impl pkg.mod:Cls, -k EXPR).")


def matrix_cell(matrix: matrices.Matrix, torch: str, device: str | None) -> matrices.MatrixCell:
    """The matrix's cell for a listed release on a device; UsageError naming what is not in the matrix."""
    device = device or matrix.devices[0].name
    try:
        matrix.device(device)
    except KeyError as exc:
        raise common.UsageError(exc.args[0]) from None
    for cell in matrix.cells:
        if matrices.same_version(cell.torch, torch) and cell.device.name == device:
            return cell
    listed = ", ".join(r.version for r in matrix.releases)
    raise common.UsageError(f"{matrix.path}: torch {torch} is not in the matrix (releases: {listed})")


def run_matrix_cell(cell: matrices.MatrixCell, *, env_dir: Path, python_version: str, results_dir: Path, project_dir: Path,
                    pytest_args: Sequence[str] = (), name: str | None = None) -> results.CellResult:
    """Make (or reuse) the environment, then install and run the cell. Raises results.ResultPathBusy
    when another run holds its result path, processes.CellInterrupted after recording a signal."""
    spec = cells.CellSpec.from_matrix_cell(cell, results_dir=results_dir, project_dir=project_dir,
                                           pytest_args=pytest_args, name=name)
    return cells.create_env_and_run(spec, Path(env_dir), python_version)


def main(argv: Sequence[str]) -> int:
    args = common.parse(common.parser_for(PROG, HELP, add_arguments), argv)
    return args if isinstance(args, int) else run(args)


def run(args: argparse.Namespace) -> int:
    try:
        # From the start, not only once the cell holds its result path: a signal while the
        # matrix is read is an exit code too, never a traceback.
        with processes.interrupts_raised():
            pytest_args = getattr(args, "pytest_args", [])
            common.refuse_owned_options(pytest_args)
            results_dir = common.results_folder(args.results)
            matrix = common.load_matrix(args.matrix)
            cell = matrix_cell(matrix, args.torch, args.device)
            project = common.checkout()
            result = run_matrix_cell(cell, env_dir=args.env or project / ".nox" / cell.name,
                                     python_version=matrix.python, results_dir=results_dir,
                                     project_dir=project, pytest_args=pytest_args)
    except common.UsageError as exc:
        return common.error(PROG, str(exc))
    except results.ResultPathBusy as exc:  # another run holds it, or the cell cannot write there
        return common.error(PROG, str(exc))
    except processes.CellInterrupted as exc:
        return common.interrupted_exit(exc.signum)
    return 0 if result.answer().clean else 1
