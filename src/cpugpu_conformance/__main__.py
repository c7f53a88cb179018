"""``python -m cpugpu_conformance <command>``: the project's command line.

Each subcommand lives in its own module, which provides ``HELP``, ``add_arguments(parser)``
and ``run(args) -> exit code``. To add one, import its module and list it in SUBCOMMANDS.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from . import __version__, gate, report

SUBCOMMANDS: dict[str, ModuleType] = {
    "report": report,
    "gate": gate,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cpugpu-conformance",
        description="Conformance matrix of CpuGpuBuffer across torch releases: publish it, gate upgrades.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, module in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors: argparse has printed already
        return exc.code if isinstance(exc.code, int) else 2
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    return args._run(args)


if __name__ == "__main__":
    sys.exit(main())
