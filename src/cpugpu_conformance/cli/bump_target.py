"""``cpugpu-conformance bump-target [--baseline X] [--candidate Y] [--base-ref REF] [--matrix-out FILE]``:
the torch bump to gate, and the matrix of its two cells.

A release left out (or given as '') is read from the change since ``--base-ref`` to the
repository's requirements, pyproject.toml or lock file (runner/bump.py): on a dependency bot's
pull request, the torch pinned before is the baseline and the one pinned after the candidate.
Prints ``key=value`` lines for $GITHUB_OUTPUT (baseline, candidate, baseline_cell,
candidate_cell, matrix); with ``--matrix-out`` writes matrix.yaml for the two cells (each torch
paired with its NumPy as bisect pairs an unlisted release), checked as every matrix is, so that
``cpugpu-conformance cell RELEASE --matrix FILE`` runs each. Exit 0, or 2 with one line naming
the culprit (no single bump in the change, a release that is no torch version, a bad matrix).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from cpugpu_conformance.cli import common
from cpugpu_conformance.devices import NAMES
from cpugpu_conformance.exits import ExitCode
from cpugpu_conformance.results import NotRegularFile, write_text_atomic
from cpugpu_conformance.runner import bump
from cpugpu_conformance.runner import matrix as matrices
from cpugpu_conformance.runner.matrix_model import cell_name

PROG = "bump-target"
HELP = "the torch bump to gate (given, or read from the change to your requirements or lock file) and its two cells"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", default="", metavar="RELEASE", help="the torch in use (default: read from the change)")
    parser.add_argument("--candidate", default="", metavar="RELEASE",
                        help="the torch to move to (default: read from the change)")
    parser.add_argument("--base-ref", default="", metavar="REF",
                        help="the commit the change is against (a pull request's base); needed for a release left out")
    parser.add_argument("--repo", type=Path, default=Path("."), metavar="DIR", help="the repository (default: here)")
    parser.add_argument("--device", default="cpu", choices=NAMES, help="the device of both cells (default: cpu)")
    parser.add_argument("--python", default="3.11", metavar="VERSION", help="the cells' Python (default: 3.11)")
    parser.add_argument("--index-url", default="", metavar="URL",
                        help="an index to take torch from first (https://download.pytorch.org/whl/cpu: CPU builds)")
    parser.add_argument("--packages", default="", metavar="LINES",
                        help="more requirements for both cells, one per line (what your class imports)")
    parser.add_argument("--time-limit", type=float, default=1800, metavar="SECONDS",
                        help="seconds each cell's tests may take (default: 1800)")
    parser.add_argument("--matrix-out", action=common.PathArgument, metavar="FILE", help="write the two cells' matrix here")


def releases(args: argparse.Namespace) -> tuple[str, str, str]:
    """(baseline, candidate, where they came from); UsageError for anything that names no bump."""
    baseline, candidate = args.baseline.strip(), args.candidate.strip()
    source = "given"
    if not baseline or not candidate:
        if not args.base_ref.strip():
            missing = " and ".join(n for n, v in (("baseline", baseline), ("candidate", candidate)) if not v)
            raise common.UsageError(f"no {missing} release given, and no --base-ref to read it from the change")
        try:
            before, after = bump.bump(*bump.changed_pins(args.repo, args.base_ref.strip()), args.base_ref.strip())
        except bump.BumpError as exc:
            raise common.UsageError(str(exc)) from None
        source = f"read from the change since {args.base_ref.strip()}"
        baseline, candidate = baseline or before, candidate or after
    for name, value in (("--baseline", baseline), ("--candidate", candidate)):
        if not matrices.is_torch_version(value):
            raise common.UsageError(f"{name} {value!r}: not a torch release like 2.15.0")
    if matrices.same_version(baseline, candidate):
        raise common.UsageError(f"the baseline and the candidate are both torch {baseline}: there is no bump to gate")
    return baseline, candidate, source


def packages_of(text: str) -> list[str]:
    """--packages: one requirement a line (blank lines and # comments skipped), never torch or numpy."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    packages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            name = canonicalize_name(Requirement(line).name)
        except InvalidRequirement:
            raise common.UsageError(f"--packages {line!r}: not a requirement like 'transformers==4.44'") from None
        if name in ("torch", "numpy"):
            raise common.UsageError(f"--packages {line!r}: torch and numpy are the cell's own (the releases gated, "
                                    "and the NumPy paired with each)")
        packages.append(line)
    return packages


def write_matrix(path: Path, data: dict) -> None:
    """Write the matrix, then read it back as every command does: its problems are one line each."""
    text = "# The two cells of a torch bump, written by `cpugpu-conformance bump-target`.\n" + yaml.safe_dump(
        data, sort_keys=False)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
    except (OSError, NotRegularFile) as exc:
        raise common.UsageError(f"--matrix-out {path}: cannot write: {exc.strerror or exc}") from None
    try:
        matrices.load(path)
    except matrices.MatrixError as exc:
        raise common.UsageError("\n".join(exc.lines)) from None


def run(args: argparse.Namespace) -> int:
    try:
        baseline, candidate, source = releases(args)
        packages = packages_of(args.packages)
        if args.matrix_out is not None:
            write_matrix(args.matrix_out, bump.matrix_data(
                baseline, candidate, device=args.device, python=args.python, time_limit_s=args.time_limit,
                index_url=args.index_url.strip() or None, extra_packages=packages))
    except common.UsageError as exc:
        return common.error(PROG, str(exc))
    print(f"cpugpu-conformance {PROG}: torch {baseline} -> {candidate} ({source})", file=sys.stderr)
    print(f"baseline={baseline}\ncandidate={candidate}")
    print(f"baseline_cell={cell_name(baseline, args.device)}\ncandidate_cell={cell_name(candidate, args.device)}")
    if args.matrix_out is not None:
        print(f"matrix={args.matrix_out.resolve()}")
    return ExitCode.OK
