"""What the matrix subcommands (cells, cell, matrix, bisect, summary, record-unfinished) share.

Where the matrix and the results are (``--matrix``, ``--results``; CONFORMANCE_MATRIX and
CONFORMANCE_RESULTS as for nox), where the checkout is, how their pytest arguments are
split off, and their exit codes. Bad input is one line naming the culprit, exit 2, as
for report and gate.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cpugpu_conformance.exits import ExitCode
from cpugpu_conformance.runner import matrix as matrices

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
            parser.exit(ExitCode.USAGE, f"{parser.prog}: error: {name} '': an empty path (it would stand for the "
                                    "current folder)\n")
        setattr(namespace, self.dest, None if values is None else Path(values))


def add_matrix_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--matrix", action=PathArgument, default=None, metavar="FILE",
                        help="the matrix (default: $CONFORMANCE_MATRIX, else matrix.yaml)")


def add_results_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", action=PathArgument, default=None, metavar="DIR",
                        help="where result files and logs go (default: $CONFORMANCE_RESULTS, else results)")


def add_cell_options(parser: argparse.ArgumentParser, *, device: bool = True, env: tuple[str, str] | None = None,
                     epilog: str = "") -> None:
    """The options of the commands that run cells (cell, matrix, bisect): ``--device`` (one of the
    matrix's), the environment folder (``env``: option name and help), ``--matrix``, ``--results``."""
    if device:
        parser.add_argument("--device", help="one of the matrix's devices (default: its first)")
    if env:
        parser.add_argument(env[0], action=PathArgument, metavar="DIR", help=env[1])
    add_matrix_option(parser)
    add_results_option(parser)
    parser.epilog = epilog


def results_folder(path: Path | None) -> Path:
    """--results (or its default), refused when a file stands where the folder would be: every
    cell would fail to write there, so nothing is run."""
    from cpugpu_conformance.runner.cell import file_in_the_way

    folder = path or default_results()
    culprit = file_in_the_way(folder.absolute())
    if culprit is not None:
        raise UsageError(f"{folder}: cannot hold result files: {culprit} is not a folder (--results)")
    return folder



def load_matrix(path: Path | None) -> matrices.Matrix:
    """The validated matrix; UsageError with its problems (one line each, file and key named)."""
    try:
        return matrices.load(path or default_matrix())
    except matrices.MatrixError as exc:
        raise UsageError("\n".join(exc.lines)) from None


def checkout() -> Path:
    """The project checkout whose conformance/ the cells run (and which they install, editable):
    the one this package was imported from, else the current folder."""
    here = Path(__file__).resolve().parents[3]  # src/cpugpu_conformance/cli/ -> the checkout
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


# Ways to hand pytest options without naming them: a file of arguments (@FILE), a configuration
# file of the caller's choosing (-c FILE, whose addopts pytest reads) and addopts overridden
# on the command line (-o addopts=...).
_SMUGGLING = {
    "@": "pytest would read arguments from that file; give them on the command line",
    "-c": "the cell runs with the checkout's pytest configuration (another one's addopts are options too)",
    "addopts": "-o addopts=... hands pytest options; give them on the command line",
}
_SHORT_WITH_VALUE = "kmcoprWn"  # pytest's (and xdist's) one-letter options that take a value


def refuse_owned_options(pytest_args: Sequence[str], allowed: Sequence[str] = (), *,
                         environ: Mapping[str, str] | None = None) -> None:
    """UsageError (one line) for an option the cell sets itself among pytest's arguments, however
    it is spelt: ``--opt=value``, an abbreviation (older pytests accept them), or smuggled in
    through an argument file, a configuration file, ``-o addopts`` or $PYTEST_ADDOPTS."""
    for arg in pytest_args:
        _refuse_owned(arg, allowed)
    addopts = (os.environ if environ is None else environ).get("PYTEST_ADDOPTS", "")
    try:
        words = shlex.split(addopts)
    except ValueError:
        words = addopts.split()
    for word in words:
        try:
            _refuse_owned(word, allowed)
        except UsageError as exc:
            raise UsageError(f"PYTEST_ADDOPTS: {exc}") from None


def _refuse_owned(arg: str, allowed: Sequence[str]) -> None:
    if arg.startswith("@"):
        raise UsageError(f"{arg} among the pytest arguments: {_SMUGGLING['@']}")
    if re.search(r"addopts\s*=", arg):
        raise UsageError(f"{arg} among the pytest arguments: {_SMUGGLING['addopts']}")
    if arg.startswith("--config-file") or (not arg.startswith("--") and "c" in _short_letters(arg)):
        raise UsageError(f"{arg} among the pytest arguments: {_SMUGGLING['-c']}")
    name = arg.split("=", 1)[0]
    if not name.startswith("--") or name == "--":
        return
    for option, why in CELL_OWNED_OPTIONS.items():
        if option.startswith(name) and option not in allowed:  # the option, or an abbreviation of it
            raise UsageError(f"{name if name == option else f'{name} (an abbreviation of {option})'} "
                             f"among the pytest arguments: {why}")


def _short_letters(arg: str) -> str:
    """The one-letter options of ``-vxc``-style argument (up to the first that takes a value)."""
    if not arg.startswith("-") or arg == "-":
        return ""
    letters = ""
    for letter in arg[1:]:
        letters += letter
        if letter in _SHORT_WITH_VALUE:
            break
    return letters


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
        return exc.code if isinstance(exc.code, int) else ExitCode.USAGE
    args.pytest_args = pytest_args
    return args


def error(prog: str, message: str) -> int:
    """Print bad input (one line per problem) and return the usage exit code."""
    for line in message.splitlines() or [""]:
        print(f"cpugpu-conformance {prog}: error: {line}", file=sys.stderr)
    return ExitCode.USAGE


def interrupted_exit(signum: int) -> int:
    """A shell's code for a command ended by a signal (129 for SIGHUP, 130 for SIGINT, 143 for SIGTERM)."""
    return 128 + int(signum)


def is_interrupted_exit(code: int) -> bool:
    from cpugpu_conformance.runner.processes import INTERRUPTING_SIGNALS

    return code in {interrupted_exit(signum) for signum in INTERRUPTING_SIGNALS}
