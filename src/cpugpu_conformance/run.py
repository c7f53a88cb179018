"""``cpugpu-conformance run [--impl SPEC] [--device ...] [--cell-result PATH] [pytest args]``.

The suite ships in the package (the wheel maps conformance/ to ``cpugpu_conformance/suite``),
so a team tests its own class with no checkout of this repository. Every argument reaches
pytest: the suite's options and any of pytest's. The exit code is pytest's: 0 every promise
held, 1 one failed, 4 bad input, 5 nothing was tested.

pytest reads the suite's own ini (``-c``) with the suite's folder as rootdir, so a
pytest.ini, pyproject.toml, setup.cfg, tox.ini or conftest.py in the caller's directory
cannot change the run. Importing this module needs pytest and nothing of the [tools] extra.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

HELP = "run the conformance suite on the reference or your class (--impl SPEC); every argument goes to pytest"

# Named so that pytest never picks it up by itself (it looks for pytest.ini): a checkout's
# `pytest conformance` keeps the repository's own configuration.
INI_NAME = "suite.ini"

EXIT_USAGE = 4  # pytest's own code for bad input


class SuiteNotFound(Exception):
    """Neither the installed suite nor a checkout's conformance/ is there; one line says where it looked."""


def suite_dir() -> Path:
    """The suite's folder: inside the installed package, or conformance/ next to src/ in a checkout."""
    package = Path(__file__).resolve().parent
    candidates = (package / "suite", package.parent.parent / "conformance")
    for folder in candidates:
        if (folder / "conftest.py").is_file() and (folder / INI_NAME).is_file():
            return folder
    raise SuiteNotFound(f"cpugpu-conformance run: the suite is not installed (looked in {', '.join(map(str, candidates))})")


def pytest_args(folder: Path, args: Sequence[str]) -> list[str]:
    """The suite's folder with its own ini and rootdir, no cache written into the package, then the caller's args."""
    return ["-c", str(folder / INI_NAME), "--rootdir", str(folder), "-p", "no:cacheprovider", str(folder), *args]


def main(args: Sequence[str]) -> int:
    """Run the suite in this process with ``args``; returns pytest's exit code."""
    try:
        folder = suite_dir()
    except SuiteNotFound as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    import pytest  # here, not at import: `cpugpu-conformance --help` stays fast

    return int(pytest.main(pytest_args(folder, args)))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "pytest_args",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="the suite's options (--impl, --device, --cell-result, --cell-name, --promise, "
        "--hypothesis-profile) and any of pytest's; `run --help` lists them all",
    )


def run(args: argparse.Namespace) -> int:
    return main(args.pytest_args)
