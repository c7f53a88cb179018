"""``python -m cpugpu_conformance.matrix [PATH] [--json]``: check matrix.yaml before anything is installed.

Prints the cells (or exits 2 with one line per problem, each naming the file and the key,
e.g. ``matrix.yaml: torch[3].version: '2.x' is not a version like 2.13.0``); ``--json``
prints the validated matrix and its cells. The matrix itself is cpugpu_conformance.runner.matrix.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..exits import ExitCode
from ..output import say
from ..runner.matrix import DEFAULT_PATH, Matrix, MatrixError, load

DESCRIPTION = "matrix.yaml -> validated cells, refusing a bad file before anything is installed."


def _print_cells(matrix: Matrix) -> None:
    index = matrix.index_url or "the default index (PyPI)"
    if matrix.find_links:
        index += f" and {matrix.find_links}"
    if matrix.offline:
        index = f"{matrix.find_links or 'nowhere'} and uv's cache only (offline)"
    say(f"{matrix.path}: {len(matrix.releases)} releases x {len(matrix.devices)} device(s) = "
          f"{len(matrix.cells)} cells; python {matrix.python}, profile {matrix.hypothesis_profile}, "
          f"torch from {index}")
    say(f"baseline {matrix.baseline}; candidates {', '.join(matrix.candidates)}")
    for c in matrix.cells:
        runner = c.device.runner if isinstance(c.device.runner, str) else ",".join(c.device.runner)
        own = [f"from {v}" for v in matrix._own_source(c).values() if v]  # an entry's own index or folder
        wanted = c.release.requirements()
        if c.release.is_latest:
            wanted[0] = "torch(newest-when-run)"
        say(f"  {c.name:<22} {' '.join(wanted):<40} limit {c.time_limit_s:g} s  runner {runner}"
              + "".join(f"  {o}" for o in own))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cpugpu_conformance.matrix", description=DESCRIPTION)
    parser.add_argument("path", nargs="?", default=str(DEFAULT_PATH), help="matrix file (default: matrix.yaml)")
    parser.add_argument("--json", action="store_true", help="print the validated matrix and its cells as JSON")
    args = parser.parse_args(argv)
    try:
        matrix = load(args.path)
    except MatrixError as exc:
        for line in exc.lines:
            print(line, file=sys.stderr)
        return ExitCode.USAGE
    if args.json:
        say(json.dumps(matrix.as_json(), indent=2))
    else:
        _print_cells(matrix)
    return ExitCode.OK

