"""``cpugpu-conformance bisect GOOD BAD [--device D] [PYTEST_ARGS]``: the first release that changes the answer.

Lists the final torch releases from GOOD to BAD in the matrix's find_links folders and, unless
it says ``offline: true``, on its index, and binary-searches them (bisect.py), running each
release as a cell (offline too, when the matrix is): in its own environment,
<envdir>/bisect-torch-<release> (default .nox/ in the checkout), with its result kept as
<results>/bisect/torch-<release>-<device>.json. A release the matrix lists is paired as
listed; another gets the default pairing (bisect needs releases matrix.yaml does not list).
Options it does not know, and everything after ``--``, go to pytest.

Exit 0: a change was found; 1: GOOD and BAD answer alike; 2: bad input, or a release at
either end could not be tested; 130/143: stopped by SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from cpugpu_conformance import results
from cpugpu_conformance.cli import common
from cpugpu_conformance.cli.cell import envs_folder, run_matrix_cell, source
from cpugpu_conformance.runner import bisection as bisecting
from cpugpu_conformance.runner import matrix as matrices
from cpugpu_conformance.runner import processes

PROG = "bisect"
HELP = "find the first torch release between GOOD and BAD whose verdicts or observed behaviour change"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("good", metavar="GOOD", help="a release that answers as expected (2.3.1)")
    parser.add_argument("bad", metavar="BAD", help="a later release that answers differently (2.6.0)")
    common.add_cell_options(parser, env=("--envdir", "folder of the releases' environments (default: .nox in the checkout)"),
                            epilog="Other options, and arguments after --, go to pytest.")


def _folders(matrix: matrices.Matrix) -> list[str]:
    """The find_links folders the cells install from: the matrix's and its entries' own."""
    folders = [matrix.find_links] + [release.find_links for release in matrix.releases]
    return list(dict.fromkeys(folder for folder in folders if folder))


def main(argv: Sequence[str]) -> int:
    args = common.parse(common.parser_for(PROG, HELP, add_arguments), argv, lenient=True)
    return args if isinstance(args, int) else run(args)


def run(args: argparse.Namespace) -> int:
    pytest_args = getattr(args, "pytest_args", [])
    try:
        common.refuse_owned_options(pytest_args)
        matrix = common.load_matrix(args.matrix)
        device = args.device or matrix.devices[0].name
        try:
            matrix.device(device)
        except KeyError as exc:
            raise common.UsageError(exc.args[0]) from None
        for label, version in (("GOOD", args.good), ("BAD", args.bad)):
            if not matrices.is_torch_version(version) or version == matrices.LATEST:
                raise common.UsageError(f"{label} {version!r} is not a torch release like 2.13.0")
        project, package = source()
    except common.UsageError as exc:
        return common.error(PROG, str(exc))
    envdir = args.envdir or envs_folder(project, package, matrix.python)
    results_dir = (args.results or common.default_results()) / "bisect"

    def run_release(version: str) -> Path:
        cell = matrix.cell_for_release(version, device)
        run_matrix_cell(cell, env_dir=envdir / f"bisect-torch-{version}", python_version=matrix.python,
                        results_dir=results_dir, project_dir=project, pytest_args=pytest_args, package=package)
        return results_dir / f"{cell.name}.json"

    try:
        return bisecting.run(args.good, args.bad, run_release, index_url=matrix.index_url,
                             find_links=_folders(matrix), offline=matrix.offline)
    except results.ResultPathBusy as exc:
        return common.error(PROG, str(exc))
    except processes.CellInterrupted as exc:
        return common.interrupted_exit(exc.signum)
