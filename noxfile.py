# /// script
# dependencies = ["nox>=2025.2.9", "pyyaml>=6", "jsonschema>=4.18", "packaging>=23"]
# ///
"""Sessions of cpugpu-conformance; the cells come from matrix.yaml.

    nox -s conformance                        every cell of the matrix, then a summary table
    nox -t torch-2.15.0                       one release
    nox -t torch-latest                       a `version: latest` entry (the newest final release, looked up then)
    nox -s conformance -- --impl pkg.mod:Cls  arguments after -- reach pytest
    nox -s matrix -- --jobs 4 [CELL|TAG...]   the cells side by side, each in .nox/<cell> (cpugpu-conformance matrix)
    nox -s installed -- --device all          the torch already installed, nothing installed
    nox -s tests                              the project's own tests
    nox -s quick                              the core of them, in minutes (tests marked quick)
    nox -s mutation                           the suite's mutation score against the reference (cosmic-ray)
    nox -s report                             results/ -> compat/ (page, Markdown, compat.json, badge.json)
    nox -s gate -- --baseline 2.14.1 --candidate 2.15.0
    nox -s bisect -- 2.3.1 2.6.0              first release where a verdict or observation changes
    nox -s lint

The sessions are thin: each calls the package's own command line (`cpugpu-conformance cell`,
`summary`, `matrix`, `bisect`, `report`, `gate`), which works, and is tested, without nox.
CONFORMANCE_MATRIX and CONFORMANCE_RESULTS replace matrix.yaml and results/.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import nox
from nox.command import CommandFailed

ROOT = Path(__file__).parent.resolve()
sys.path.insert(0, str(ROOT / "src"))  # the project's pure-Python tooling; needs only the script deps above

from cpugpu_conformance import results
from cpugpu_conformance.cli import dispatch as cli
from cpugpu_conformance.cli.common import UsageError, is_interrupted_exit, refuse_owned_options
from cpugpu_conformance.exits import ExitCode
from cpugpu_conformance.runner import CellSpec
from cpugpu_conformance.runner import cell as cells
from cpugpu_conformance.runner import install as installing
from cpugpu_conformance.runner import matrix as matrices

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests"]

RESULTS = Path(os.environ.get("CONFORMANCE_RESULTS") or "results")
try:
    # A broken matrix stops nox here, before any session (or install) starts.
    MATRIX = matrices.load(os.environ.get("CONFORMANCE_MATRIX") or "matrix.yaml")
except matrices.MatrixError as exc:
    print("\n".join(exc.lines), file=sys.stderr)
    sys.exit(ExitCode.USAGE)

TESTS_TORCH = "2.13.0"  # the torch the project's own tests run against
WORKFLOWS = ROOT / ".github" / "workflows"
WHERE = ("--matrix", str(MATRIX.path), "--results", str(RESULTS))  # the files this nox run uses, for every command

# Cells run by this nox invocation, in order, for the summary session.
_cells_run: list[str] = []
# Those whose cell command ended with an answer (exit 0 or 1): for any other, whatever file is
# at its path is an earlier run's, and the summary must not read it as this run's answer.
_cells_answered: set[str] = set()


def _fail(session: nox.Session, message: str) -> None:
    """End the session as *failed* (what it tested did not hold); session.error means misuse."""
    session.warn(message)
    raise CommandFailed(message)


def _command(session: nox.Session, *argv: str, cell: str | None = None) -> None:
    """`cpugpu-conformance ARGV`, run in this process (nox imports the package from src/, installs
    nothing for it). Exit 1 fails the session; a signal's exit stops nox as Ctrl-C does (the
    command has recorded it); any other exit is misuse, which the command has described."""
    code = cli.main(list(argv))
    if cell is not None and code in (0, 1):
        _cells_answered.add(cell)
    if code == 0:
        return
    if code == 1:
        _fail(session, f"cpugpu-conformance {argv[0]}: not every cell is clean (exit 1)")
    if is_interrupted_exit(code):
        raise KeyboardInterrupt
    session.error(f"cpugpu-conformance {argv[0]} exited {code}")


@nox.session(python=MATRIX.python, reuse_venv=True)
@nox.parametrize("torch,device", [nox.param(c.torch, c.device.name, tags=c.tags) for c in MATRIX.cells])
def conformance(session: nox.Session, torch: str, device: str) -> None:
    """One cell: install torch (+numpy), check it is that torch, run `pytest conformance`."""
    name = MATRIX.cell(torch, device).name
    _cells_run.append(name)
    session.notify("summary")  # runs after every cell, whatever they did
    _command(session, "cell", torch, "--device", device, "--env", str(session.virtualenv.location), *WHERE,
             "--", *session.posargs, cell=name)


@nox.session(venv_backend="none", default=False)
def summary(session: nox.Session) -> None:
    """Table of the cells this run ran (alone: every matrix cell); fails unless every one is clean."""
    names = list(dict.fromkeys(_cells_run)) or [c.name for c in MATRIX.cells]
    print(flush=True)
    unanswered = [f"--no-answer={n}" for n in names if _cells_run and n not in _cells_answered]
    _command(session, "summary", str(RESULTS), "--cells", ",".join(names), *unanswered)


@nox.session(name="matrix", venv_backend="none", default=False)
def matrix_in_parallel(session: nox.Session) -> None:
    """-- [--jobs N] [CELL|TAG...] [-- PYTEST_ARGS]: the cells side by side, each in .nox/<cell>."""
    _command(session, "matrix", *WHERE, *session.posargs)


@nox.session(venv_backend="none", default=False)
def installed(session: nox.Session) -> None:
    """The suite against the torch in `python` on PATH ($CONFORMANCE_PYTHON), installing nothing.

    For GPU machines without network: `nox -s installed -- --device all`. The result is
    results/installed-torch-<release>-<device>.json (or -- --cell-name NAME).
    """
    try:
        refuse_owned_options(session.posargs, allowed=("--device", "--cell-name", "--hypothesis-profile"))
    except UsageError as exc:
        session.error(str(exc))
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--cell-name")
    parser.add_argument("--device")
    parser.add_argument("--hypothesis-profile")
    ours, pytest_args = parser.parse_known_args(session.posargs)
    python = os.environ.get("CONFORMANCE_PYTHON") or shutil.which("python") or shutil.which("python3")
    if not python:
        session.error("no python on PATH; set CONFORMANCE_PYTHON to the interpreter that has torch")
    probe = installing.probe_torch(python)
    if not probe.get("torch"):
        session.error(f"{python}: no importable torch ({probe.get('torch_error') or probe.get('probe_error') or 'not installed'})")
    spec = CellSpec.for_installed_torch(
        probe["torch"], name=ours.cell_name or f"installed-torch-{installing.base_version(probe['torch'])}-{ours.device or 'default'}",
        device=ours.device, hypothesis_profile=ours.hypothesis_profile or MATRIX.hypothesis_profile,
        time_limit_s=MATRIX.time_limit_s, results_dir=RESULTS, project_dir=ROOT, pytest_args=pytest_args)
    try:
        result = cells.run_cell(spec, python)
    except results.ResultPathBusy as exc:
        session.error(str(exc))
    if not result.answer().clean:
        _fail(session, f"{result.name}: {result.describe()}")


def _tests_torch(session: nox.Session) -> None:
    """The torch the project's own tests run against, with its NumPy, and the project with its test extra."""
    release = MATRIX.release(TESTS_TORCH)
    index = ["--extra-index-url", MATRIX.index_url] if MATRIX.index_url else []
    session.install(*release.requirements(), "-e", ".[test]", "nox", *index)
    # Where PYTHONDONTWRITEBYTECODE is set, each of the tests' subprocesses would compile torch
    # and the plugin anew (most of the tests' time): compile once what no test changes.
    session.run("python", "tools/warm_bytecode.py", silent=True)


# tests and quick reuse their environment (its installs still run, and do nothing when it is current):
# made afresh, it cost each session 15-30 s, the bytecode warm-up included.
@nox.session(python=MATRIX.python, reuse_venv=True)
def tests(session: nox.Session) -> None:
    """The project's own tests (tests/), with torch 2.13.0: `nox -s tests -- -k matrix`."""
    _tests_torch(session)
    session.run("pytest", "tests", "-n", "2", *session.posargs)


@nox.session(python=MATRIX.python, reuse_venv=True)
def quick(session: nox.Session) -> None:
    """The core in minutes (tests marked quick: the rule, the gate, the suite end to end), with torch 2.13.0."""
    _tests_torch(session)
    session.run("pytest", "tests", "-m", "quick", "-n", "2", *session.posargs)


@nox.session(python=MATRIX.python, default=False)
def mutation(session: nox.Session) -> None:
    """How many mutants of reference.py the suite kills (cosmic-ray), with torch 2.13.0."""
    _tests_torch(session)
    session.run("python", "-m", "cpugpu_conformance.mutation", *session.posargs)


@nox.session(python=MATRIX.python, reuse_venv=True)
def report(session: nox.Session) -> None:
    """results/ -> compat/compat.json, compat/COMPAT.md, compat/index.html, compat/badge.json."""
    session.install("-e", ".[tools]")
    session.run("python", "-m", "cpugpu_conformance", "report", str(RESULTS), "--out", "compat", *session.posargs)


def _result_file(release_or_path: str, device: str) -> str:
    """A release (2.15.0, 2.16.0rc1, latest) names the cell's result file; anything else is taken as a path."""
    if matrices.is_torch_version(release_or_path) and not release_or_path.endswith(".json"):
        return str(RESULTS / f"{matrices.cell_name(release_or_path, device)}.json")
    return release_or_path


@nox.session(python=MATRIX.python, reuse_venv=True)
def gate(session: nox.Session) -> None:
    """Gate an upgrade, per device: -- --baseline 2.14.1 --candidate 2.15.0 [--strict].

    Defaults to matrix.yaml's baseline and each of its candidates. A release number
    stands for results/torch-<release>-<device>.json; a path is used as given.
    """
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--baseline", default=MATRIX.baseline)
    parser.add_argument("--candidate", action="append")
    try:
        args, rest = parser.parse_known_args(session.posargs)
    except SystemExit:
        session.error("usage: nox -s gate -- [--baseline RELEASE|FILE] [--candidate RELEASE|FILE]... [gate options]")
    candidates = args.candidate or list(MATRIX.candidates)
    session.install("-e", ".[tools]")
    failed = []
    for device in [d.name for d in MATRIX.devices]:
        for candidate in candidates:
            baseline_file, candidate_file = _result_file(args.baseline, device), _result_file(candidate, device)
            try:
                session.run("python", "-m", "cpugpu_conformance", "gate", "--baseline", baseline_file,
                            "--candidate", candidate_file, *rest)
            except CommandFailed as exc:
                why = "regressed" if exc.return_code == 1 else "nothing to compare"
                failed.append(f"{baseline_file} -> {candidate_file} ({why})")
    if failed:
        _fail(session, f"gate: {len(failed)} of {len(candidates) * len(MATRIX.devices)} upgrade(s) refused: {'; '.join(failed)}")


@nox.session(name="bisect", venv_backend="none", default=False)
def bisect_releases(session: nox.Session) -> None:
    """-- GOOD BAD [--device D] [pytest args]: first release where a verdict or observation changes.

    Each release gets .nox/bisect-torch-<release> (installed like a cell) and keeps
    results/bisect/torch-<release>-<device>.json.
    """
    _command(session, "bisect", *WHERE, *session.posargs)


def workflow_checks() -> list[list[str]]:
    """Commands that check the CI workflows and the composite action at the root (GitHub's schemas,
    an offline security audit)."""
    files = sorted(str(p.relative_to(ROOT)) for p in WORKFLOWS.glob("*.y*ml"))
    actions = [name for name in ("action.yml", "action.yaml") if (ROOT / name).is_file()]
    checks = [["check-jsonschema", "--builtin-schema", "vendor.github-workflows", *files]] if files else []
    checks += [["check-jsonschema", "--builtin-schema", "vendor.github-actions", *actions]] if actions else []
    if files or actions:
        checks.append(["zizmor", "--offline", "--min-severity", "medium", *files, *actions])
    return checks


@nox.session(python=MATRIX.python, reuse_venv=True)
def lint(session: nox.Session) -> None:
    """ruff, mypy on the library (its checks are ordinary, typed functions), matrix.yaml, and the CI workflows."""
    checks = workflow_checks()
    session.install("ruff", "mypy", "-e", ".[tools]", *(["check-jsonschema", "zizmor"] if checks else []))
    failed = []
    library = ["mypy", "src/cpugpu_conformance/testing"]
    for command in [["ruff", "check", "."], library, ["python", "-m", "cpugpu_conformance.matrix", str(MATRIX.path)],
                    *checks]:
        try:  # every check runs, so one run shows every problem
            session.run(*command)
        except CommandFailed:
            failed.append(command[0])
    if failed:
        _fail(session, f"lint: {', '.join(failed)} found problems")
