"""``cpugpu-conformance <command>`` (or ``python -m cpugpu_conformance``): the project's command line.

Each subcommand lives in its own module, which provides ``HELP``, ``add_arguments(parser)``
and ``run(args) -> exit code``. To add one, list it in SUBCOMMANDS with the optional
packages it imports (the ``[tools]`` extra). A module is imported only when its
subcommand (or the help) needs it, so ``run`` works where only torch, numpy, hypothesis
and pytest are installed, and a missing extra is one line naming it, not a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from .. import __version__
from ..exits import ExitCode


def tools_extra() -> str:
    """How to add the [tools] extra to the install the user has (cli/extra.py): not PyPI, where the package is not."""
    from .extra import install_hint

    return f"add the tools extra to your install: {install_hint()}"


@dataclass(frozen=True)
class Subcommand:
    module: str  # cpugpu_conformance.cli.<module>
    needs: tuple[str, ...] = ()  # importable names of the optional packages it uses
    # Every argument goes to the module's main(args) unparsed: `run` hands them all to pytest.
    passthrough: bool = False


MATRIX_TOOLS = ("yaml", "jsonschema", "packaging")  # matrix.yaml, result files, versions

SUBCOMMANDS: dict[str, Subcommand] = {
    "run": Subcommand("run", passthrough=True),
    "report": Subcommand("report", needs=("jinja2", "jsonschema", "packaging")),
    "gate": Subcommand("gate", needs=("jsonschema",)),  # reads result files: it must validate them
    # The matrix's commands, which nox and CI call; cell, matrix and bisect split off pytest's arguments themselves.
    "cells": Subcommand("cells", needs=MATRIX_TOOLS),
    "cell": Subcommand("cell", needs=MATRIX_TOOLS, passthrough=True),
    "matrix": Subcommand("matrix", needs=MATRIX_TOOLS, passthrough=True),
    "bisect": Subcommand("bisection", needs=MATRIX_TOOLS, passthrough=True),
    "summary": Subcommand("summary", needs=MATRIX_TOOLS),
    "record-unfinished": Subcommand("record", needs=MATRIX_TOOLS),
    "bump-target": Subcommand("bump_target", needs=MATRIX_TOOLS),  # the composite action's (action.yml)
}


class MissingExtra(Exception):
    """An optional package a subcommand needs is not installed; the message is one line naming it."""

    def __init__(self, command: str, package: str) -> None:
        super().__init__(f"cpugpu-conformance {command} needs {package}: {tools_extra()}")
        self.package = package


def load(name: str) -> ModuleType:
    """The subcommand's module, or MissingExtra naming the first optional package it lacks."""
    command = SUBCOMMANDS[name]
    for package in command.needs:
        if importlib.util.find_spec(package) is None:
            raise MissingExtra(name, package)
    try:
        return importlib.import_module(f"{__package__}.{command.module}")
    except ModuleNotFoundError as exc:  # a dependency of a dependency (markupsafe, say)
        if exc.name and not exc.name.startswith("cpugpu_conformance"):
            raise MissingExtra(name, exc.name.partition(".")[0]) from None
        raise


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cpugpu-conformance",
        description="Conformance of CpuGpuBuffer across torch releases: run the suite, publish the matrix, gate upgrades.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name in SUBCOMMANDS:
        try:
            module = load(name)
        except MissingExtra as exc:
            sub.add_parser(name, help=f"unavailable: needs {exc.package} ({tools_extra()})", add_help=False)
            continue
        sub_parser = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        try:
            module = load(argv[0])  # before the parser, which would import every subcommand
        except MissingExtra as exc:
            print(exc, file=sys.stderr)
            return ExitCode.USAGE  # as for a usage error: the command could not start
        if SUBCOMMANDS[argv[0]].passthrough:
            return module.main(argv[1:])  # --help included: pytest lists the suite's options
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors: argparse has printed already
        return exc.code if isinstance(exc.code, int) else ExitCode.USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return ExitCode.USAGE
    return args._run(args)


if __name__ == "__main__":
    sys.exit(main())
