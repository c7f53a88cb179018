"""What the matrix subcommands (cells, cell, matrix, bisect, summary, record-unfinished) share.

Where the matrix and the results are (``--matrix``, ``--results``; CONFORMANCE_MATRIX and
CONFORMANCE_RESULTS as for nox), where the checkout is, how their pytest arguments are
split off, and their exit codes. Bad input is one line naming the culprit, exit 2, as
for report and gate.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cpugpu_conformance import matrix as matrices

EXIT_USAGE = 2
# The matrix subcommands read matrix.yaml (pyyaml, jsonschema) and versions (packaging): the [tools] extra.
TOOLS = ("yaml", "jsonschema", "packaging")

# Options each cell sets itself, from matrix.yaml; refused among the pytest arguments so no cell lies about its setup.
CELL_OWNED_OPTIONS = {
    "--cell-result": "the cell writes results/<cell>.json",
    "--cell-name": "the cell is named torch-<release>-<device>",
    "--device": "set devices in matrix.yaml",
    "--hypothesis-profile": "set hypothesis_profile in matrix.yaml",
}


class UsageError(Exception):
    """Bad input: the message is one line naming the culprit."""


def default_matrix() -> Path:
    return Path(os.environ.get("CONFORMANCE_MATRIX") or matrices.DEFAULT_PATH)


def default_results() -> Path:
    return Path(os.environ.get("CONFORMANCE_RESULTS") or "results")


class PathArgument(argparse.Action):
    """A path option or argument (``action=PathArgument``) that refuses the empty string: ``Path("")``
    is the current folder, so ``--out ""`` would write (and overwrite) there. One line, exit 2."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if values == "":
            name = option_string or self.metavar or self.dest
            parser.exit(EXIT_USAGE, f"{parser.prog}: error: {name} '': an empty path (it would stand for the "
                                    "current folder)\n")
        setattr(namespace, self.dest, None if values is None else Path(values))


def add_matrix_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--matrix", action=PathArgument, default=None, metavar="FILE",
                        help="the matrix (default: $CONFORMANCE_MATRIX, else matrix.yaml)")


def add_results_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", action=PathArgument, default=None, metavar="DIR",
                        help="where result files and logs go (default: $CONFORMANCE_RESULTS, else results)")


def add_envdir_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--envdir", action=PathArgument, default=None, metavar="DIR", help=help_text)


def load_matrix(path: Path | None) -> matrices.Matrix:
    """The validated matrix; UsageError with its problems (one line each, file and key named)."""
    try:
        return matrices.load(path or default_matrix())
    except matrices.MatrixError as exc:
        raise UsageError("\n".join(exc.lines)) from None


def checkout() -> Path:
    """The project checkout whose conformance/ the cells run (and which they install, editable):
    the one this package was imported from, else the current folder."""
    here = Path(__file__).resolve().parents[2]  # src/cpugpu_conformance/ -> the checkout
    for folder in (here, Path.cwd()):
        if (folder / "conformance" / "conftest.py").is_file() and (folder / "pyproject.toml").is_file():
            return folder
    raise UsageError(f"no checkout of cpugpu-conformance in {Path.cwd()} (a cell runs its conformance/ "
                     "and installs its pyproject.toml): run this from the repository")


def split_pytest_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Our arguments, and pytest's: everything after the first ``--``."""
    argv = list(argv)
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1:]
    return argv, []


def refuse_owned_options(pytest_args: Sequence[str], allowed: Sequence[str] = ()) -> None:
    for arg in pytest_args:
        option = arg.split("=", 1)[0]
        if option in CELL_OWNED_OPTIONS and option not in allowed:
            raise UsageError(f"{option} among the pytest arguments: {CELL_OWNED_OPTIONS[option]}")


def parser_for(prog: str, help_text: str,
               add_arguments: Callable[[argparse.ArgumentParser], None]) -> argparse.ArgumentParser:
    """The subcommand's own parser, for subcommands that split off pytest arguments themselves."""
    parser = argparse.ArgumentParser(prog=f"cpugpu-conformance {prog}", description=help_text, allow_abbrev=False)
    add_arguments(parser)
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str], *, lenient: bool = False) -> argparse.Namespace | int:
    """Parse ``argv``; pytest's arguments (after ``--``; with ``lenient``, unknown options too) land in
    ``args.pytest_args``. Returns the exit code instead when argparse ended (--help: 0, bad input: 2)."""
    ours, pytest_args = split_pytest_args(argv)
    try:
        if lenient:
            args, unknown = parser.parse_known_args(ours)
            pytest_args = unknown + pytest_args
        else:
            args = parser.parse_args(ours)
    except SystemExit as exc:  # argparse has printed the usage and the culprit
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    args.pytest_args = pytest_args
    return args


def error(prog: str, message: str) -> int:
    """Print bad input (one line per problem) and return the usage exit code."""
    for line in message.splitlines() or [""]:
        print(f"cpugpu-conformance {prog}: error: {line}", file=sys.stderr)
    return EXIT_USAGE


def interrupted_exit(signum: int) -> int:
    """A shell's code for a command ended by a signal (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + int(signum)


def is_interrupted_exit(code: int) -> bool:
    return code in (interrupted_exit(signal.SIGINT), interrupted_exit(signal.SIGTERM))
