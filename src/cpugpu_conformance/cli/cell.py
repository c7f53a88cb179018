"""``cpugpu-conformance cell RELEASE [--device D] [--env DIR | --python PATH] [--impl SPEC|TESTS]
[--known-failures FILE] [-- PYTEST_ARGS]``: one matrix cell.

What ``nox -t torch-RELEASE`` does, without nox: make the cell's environment (uv, the
matrix's Python; reused when it is there), install the release's torch, its NumPy and the
project, check it got that torch, run the suite and write results/<cell>.json and .log
(cells.install_and_run). Exit 0 when the cell is clean, 1 when it is not (failed,
untested, not installed, crashed, ...; not applicable too: a sim cell of a torch before 2.8
proves nothing, though a matrix counts it neither for nor against), 2 for bad input (a release or device the matrix
does not have, an option the cell sets itself among the pytest arguments, a result file
another run is writing, a results folder it cannot write), 129, 130 or 143 when SIGHUP,
SIGINT or SIGTERM stopped it (recorded as interrupted).

``--impl``: the class under test for the shipped suite (``module.path:Attr``, or
``path/to/file.py:Attr`` relative to the current folder), or a team's own tests (a path, or
``path::TestClass``): their pytest then runs them in the current folder with the library's
plugin, and writes the same result file. ``--known-failures``: the team's file
(results/known_failures.py), checked before anything is installed and handed to the run.
``--python``: an interpreter that already has the release's torch; nothing is installed, and
the cell still checks it is that release (a machine without network; the composite action's
``baseline-python`` and ``candidate-python``).

No checkout is needed (runner/source.py): from an installed package (a wheel, a git install) the
cell runs the suite the package ships, in the current folder, and makes its environment in a
cache folder (``~/.cache/cpugpu-conformance/envs/python<X.Y>/<cell>``) unless ``--env`` names
one; from a checkout, its conformance/, with environments in its .nox/ when run inside it. With
no matrix.yaml (no ``--matrix``, no $CONFORMANCE_MATRIX, none in the current folder) the cell is
the release on the device asked for, paired as bisect pairs a release no matrix lists, with this
Python (matrix.for_release).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from cpugpu_conformance import results
from cpugpu_conformance.cli import common
from cpugpu_conformance.output import say
from cpugpu_conformance.results import known_failures
from cpugpu_conformance.runner import cell as cells
from cpugpu_conformance.runner import matrix as matrices
from cpugpu_conformance.runner import processes
from cpugpu_conformance.runner.cell_spec import CellSpec
from cpugpu_conformance.runner.source import InstalledPackage, NoSuite, default_envdir, this_package

PROG = "cell"
HELP = "install one matrix cell's torch in its own environment and run the suite there (what nox -t torch-X does)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("torch", metavar="RELEASE", help="a torch release listed in the matrix (2.15.0, latest)")
    parser.add_argument("--impl", metavar="SPEC|TESTS",
                        help="the class under test (module.path:Attr, path/to/file.py:Attr), or your own tests "
                             "(a path, path::TestClass: your pytest runs them here with the library's plugin)")
    parser.add_argument("--known-failures", action=common.PathArgument, metavar="FILE",
                        help="your known failures (TOML [[known_failure]] entries): a listed failure is no failure of "
                             "the cell; a listed promise that passes fails it")
    parser.add_argument("--python", action=common.PathArgument, metavar="PATH",
                        help="an interpreter that already has this torch: install nothing (instead of --env)")
    common.add_cell_options(parser, env=("--env", "the cell's environment, made when missing (default: .nox/<cell> inside "
                                                  "a checkout, else ~/.cache/cpugpu-conformance/envs/python<X.Y>/<cell>)"),
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
                    pytest_args: Sequence[str] = (), name: str | None = None, tests: str | None = None,
                    python: Path | None = None, package: InstalledPackage | None = None) -> results.CellResult:
    """Make (or reuse) the environment, then install and run the cell (with ``python``: run it with
    that interpreter's torch, installing nothing). ``tests``: a team's own tests, run in the current
    folder. ``package``: the installed package whose suite runs (project_dir: the folder it runs in),
    in place of the checkout at project_dir. Raises results.ResultPathBusy when another run holds its
    result path, processes.CellInterrupted after recording a signal."""
    # The team's tests, and the shipped suite of a checkout the command runs outside of (an editable
    # install used from the user's project), run in the current folder: an --impl module imports from there.
    here = Path.cwd()
    outside = package is None and not here.resolve().is_relative_to(Path(project_dir).resolve())
    spec = CellSpec.from_matrix_cell(cell, results_dir=results_dir, project_dir=project_dir,
                                     pytest_args=pytest_args, name=name, tests=tests,
                                     workdir=here if tests or outside else None, package=package)
    if python is not None:
        return cells.run_cell(spec, python)
    return cells.create_env_and_run(spec, Path(env_dir), python_version)


def is_impl_spec(value: str) -> bool:
    """``module.path:Attr`` or ``file.py:Attr`` (a class for the shipped suite), rather than a test
    path (``tests/``, ``tests/test_ours.py::TestOurs``) for a team's own pytest."""
    if "::" in value:
        return False
    target, sep, attr = value.rpartition(":")
    return bool(sep and target and attr) and all(part.isidentifier() for part in attr.split("."))


def _given(pytest_args: Sequence[str], option: str) -> bool:
    return any(arg == option or arg.startswith(f"{option}=") for arg in pytest_args)


def what_to_run(impl: str | None, known: Path | None, pytest_args: Sequence[str]) -> tuple[str | None, list[str]]:
    """The team's tests to run (None: the shipped suite), and pytest's arguments with --impl and the
    known failures as the run takes them (paths made absolute: the suite runs in the checkout).
    UsageError for a file of known failures that cannot be used, or an option given twice."""
    args = list(pytest_args)
    tests = None
    if impl is not None:
        if not impl.strip():
            raise common.UsageError("--impl '': name the class under test or your tests")
        if _given(args, "--impl"):
            raise common.UsageError("--impl is given twice (before and after --): give it once")
        if is_impl_spec(impl):
            target, _, attr = impl.rpartition(":")
            path = Path(target)
            if target.endswith(".py") and not path.is_absolute():
                target = str(path.resolve())
            args.append(f"--impl={target}:{attr}")
        else:
            tests = impl
    if known is not None:
        flag = "--known-failures" if tests is None else "--cpugpu-known-failures"
        if _given(args, "--known-failures") or _given(args, "--cpugpu-known-failures"):
            raise common.UsageError("--known-failures is given twice (before and after --): give it once")
        try:
            known_failures.load(known)
        except known_failures.KnownFailuresError as exc:
            raise common.UsageError(f"--known-failures {exc}") from None
        args.append(f"{flag}={known.resolve()}")
    return tests, args


def source() -> tuple[Path, InstalledPackage | None]:
    """Where the cells' suite comes from (runner/source.py): (the checkout, None), or (the current
    folder, the installed package). UsageError when it is neither."""
    try:
        found = this_package()
    except NoSuite as exc:
        raise common.UsageError(str(exc)) from None
    return (found, None) if isinstance(found, Path) else (Path.cwd(), found)


def envs_folder(project: Path, package: InstalledPackage | None, python_version: str) -> Path:
    """The folder of the cells' environments when none is named (source.default_envdir)."""
    return default_envdir(package or project, python_version)


def load_matrix_or_release(path: Path | None, torch: str, device: str | None) -> matrices.Matrix:
    """The matrix (--matrix, $CONFORMANCE_MATRIX, ./matrix.yaml); where there is none, the one
    release on the device asked for, with this Python (matrix.for_release), said in one line."""
    if path is not None or os.environ.get("CONFORMANCE_MATRIX") or os.path.lexists(matrices.DEFAULT_PATH):
        return common.load_matrix(path)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    try:
        matrix = matrices.for_release(torch, device or "cpu", python, path=Path.cwd() / matrices.DEFAULT_PATH)
    except matrices.MatrixError as exc:
        raise common.UsageError("\n".join(exc.lines)) from None
    [release] = matrix.releases
    pairing = f"numpy{release.numpy}" if release.numpy else "the newest numpy"
    extra = f", {', '.join(release.extra_packages)}" if release.extra_packages else ""
    say(f"cell: no matrix.yaml here (nor --matrix): torch {torch} on {matrix.devices[0].name} with {pairing}{extra}, "
        f"Python {python}, the {matrix.hypothesis_profile} profile, from PyPI; a matrix.yaml chooses otherwise "
        "(cpugpu-conformance bump-target --matrix-out)")
    return matrix


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
            if args.python is not None and args.env is not None:
                raise common.UsageError("--python and --env: the cell runs in one environment; give one of them")
            tests, pytest_args = what_to_run(args.impl, args.known_failures, pytest_args)
            results_dir = common.results_folder(args.results)
            matrix = load_matrix_or_release(args.matrix, args.torch, args.device)
            cell = matrix_cell(matrix, args.torch, args.device)
            project, package = source()
            env_dir = args.env
            if env_dir is None and args.python is None:
                env_dir = envs_folder(project, package, matrix.python) / cell.name
                say(f"cell {cell.name}: environment {env_dir} (made when missing; --env DIR to choose)")
            result = run_matrix_cell(cell, env_dir=env_dir or Path(), python_version=matrix.python,
                                     results_dir=results_dir, project_dir=project, pytest_args=pytest_args, tests=tests,
                                     python=args.python.absolute() if args.python else None, package=package)
    except common.UsageError as exc:
        return common.error(PROG, str(exc))
    except results.ResultPathBusy as exc:  # another run holds it, or the cell cannot write there
        return common.error(PROG, str(exc))
    except processes.CellInterrupted as exc:
        return common.interrupted_exit(exc.signum)
    return 0 if result.answer().clean else 1
