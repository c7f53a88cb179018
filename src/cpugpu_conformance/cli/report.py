"""``cpugpu-conformance report RESULTS_DIR --out DIR``: result files -> compat.json, COMPAT.md,
index.html and badge.json (cpugpu_conformance.report.render). Exit 0, or 2 with one line for bad input."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..exits import ExitCode
from ..report.render import OUTPUTS, PROG, Collected, ReportError, make_report
from ..results import one_line
from ..runner.processes import CellInterrupted, interrupts_raised, signal_name
from .common import interrupted_exit

HELP = "merge cell result files into compat.json, COMPAT.md, index.html and badge.json (a shields.io endpoint)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Strings, made paths in run(): Path("") is the current folder, and an empty --out must be refused, not obeyed.
    parser.add_argument("results_dir", metavar="RESULTS_DIR", help="folder holding one <cell>.json per cell")
    parser.add_argument("--out", default="compat", help="output folder (default: compat)")


def _folder(name: str, value: str | os.PathLike[str]) -> Path:
    """A folder argument as a path; an empty one is bad input (it would mean the current folder)."""
    if str(value) == "":
        raise ReportError(f"{name} '': an empty path (it would stand for the current folder)")
    return Path(value)


def warnings(got: Collected) -> list[str]:
    """One line each: files left out, and cell names claimed by more than one file."""
    lines = [f"skipped {s['file']}: {s['reason']}" for s in got.skipped]
    for name, files in got.duplicates.items():
        lines.append(f"cell {one_line(name)} is in {len(files)} result files ({', '.join(files)}): "
                     "each is shown in its own columns, labelled with its file")
    return lines


def run(args: argparse.Namespace) -> int:
    try:
        # SIGTERM or SIGHUP (a CI cancel) ends the report as Ctrl-C does: its staged files are removed
        # and the previous report stays, where the default handler left hidden files behind.
        with interrupts_raised():
            got = make_report(_folder("RESULTS_DIR", args.results_dir), _folder("--out", args.out))
    except CellInterrupted as exc:
        print(f"{PROG}: interrupted by {signal_name(exc.signum)}; the previous report is left as it was",
              file=sys.stderr)
        return interrupted_exit(exc.signum)
    except ReportError as exc:
        for line in warnings(Collected([], exc.skipped)):  # each file left out, named with its reason
            print(f"{PROG}: warning: {line}", file=sys.stderr)
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    for line in warnings(got):
        print(f"{PROG}: warning: {line}", file=sys.stderr)
    incomplete = sum(1 for c in got.cells if not c.completed)
    clean = sum(1 for c in got.cells if c.result.answer().clean)
    out = one_line(args.out)
    print(f"wrote {', '.join(f'{out}/{name}' for name in OUTPUTS)}: {len(got.cells)} cells "
          f"({clean} clean, {incomplete} did not complete), {len(got.skipped)} files skipped")
    return ExitCode.OK
