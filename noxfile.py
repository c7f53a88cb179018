# /// script
# dependencies = ["nox>=2025.2.9", "pyyaml>=6", "jsonschema>=4.18", "packaging>=23"]
# ///
"""Sessions of cpugpu-conformance; the cells come from matrix.yaml.

    nox -s conformance                        every cell of the matrix, then a summary table
    nox -t torch-2.15.0                       one release
    nox -t torch-latest                       a `version: latest` entry (the newest final release, looked up then)
    nox -s conformance -- --impl pkg.mod:Cls  arguments after -- reach pytest
    nox -s installed -- --device all          the torch already installed, nothing installed
    nox -s tests                              the project's own tests
    nox -s report                             results/ -> compat/
    nox -s gate -- --baseline 2.14.1 --candidate 2.15.0
    nox -s bisect -- 2.3.1 2.6.0              first release where a verdict or observation changes
    nox -s lint

CONFORMANCE_MATRIX and CONFORMANCE_RESULTS replace matrix.yaml and results/.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import nox
from nox.command import CommandFailed

ROOT = Path(__file__).parent.resolve()
sys.path.insert(0, str(ROOT / "src"))  # the project's pure-Python tooling; needs only the script deps above

from cpugpu_conformance import bisect as bisecting
from cpugpu_conformance import cell as cells
from cpugpu_conformance import matrix as matrices
from cpugpu_conformance import results

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests"]

RESULTS = Path(os.environ.get("CONFORMANCE_RESULTS") or "results")
try:
    # A broken matrix stops nox here, before any session (or install) starts.
    MATRIX = matrices.load(os.environ.get("CONFORMANCE_MATRIX") or "matrix.yaml")
except matrices.MatrixError as exc:
    print("\n".join(exc.lines), file=sys.stderr)
    sys.exit(matrices.EXIT_INVALID)

TESTS_TORCH = "2.13.0"  # the torch the project's own tests run against
WORKFLOWS = ROOT / ".github" / "workflows"
# Options each cell sets itself, from matrix.yaml; refused after `--` so no cell lies about its setup.
CELL_OWNED_OPTIONS = {
    "--cell-result": "the cell writes results/<cell>.json",
    "--cell-name": "the cell is named torch-<release>-<device>",
    "--device": "set devices in matrix.yaml",
    "--hypothesis-profile": "set hypothesis_profile in matrix.yaml",
}

# Cells run by this nox invocation, in order, for the summary session.
_cells_run: list[str] = []


def _fail(session: nox.Session, message: str) -> None:
    """End the session as *failed* (what it tested did not hold); session.error means misuse."""
    session.warn(message)
    raise CommandFailed(message)


def _refuse_owned_options(session: nox.Session, allowed: tuple[str, ...] = ()) -> None:
    for arg in session.posargs:
        option = arg.split("=", 1)[0]
        if option in CELL_OWNED_OPTIONS and option not in allowed:
            session.error(f"{option} after --: {CELL_OWNED_OPTIONS[option]}")


def _run_cell(session: nox.Session, run: Callable[[], results.CellResult]) -> results.CellResult:
    """Run a cell; a second run on a busy result path is a session error naming the path."""
    try:
        return run()
    except results.ResultPathBusy as exc:
        session.error(str(exc))
        raise  # session.error raises; for type checkers


def _fail_unless_clean(session: nox.Session, result: results.CellResult) -> None:
    if not result.answer().clean:
        _fail(session, f"{result.name}: {result.describe()}")


def _spec(name: str, release: matrices.Release | None, device: str | None, time_limit_s: float,
          pytest_args: list[str], results_dir: Path = RESULTS, cell: matrices.Cell | None = None) -> cells.CellSpec:
    """A cell's run; where torch comes from is the cell's (its entry's index or folder), else the matrix's."""
    return cells.CellSpec(
        name=name, release=release, device=device, hypothesis_profile=MATRIX.hypothesis_profile,
        time_limit_s=time_limit_s, results_dir=results_dir.resolve(), project_dir=ROOT,
        index_url=cell.index_url if cell else MATRIX.index_url, pytest_args=tuple(pytest_args),
        find_links=cell.find_links if cell else MATRIX.find_links, offline=MATRIX.offline,
    )


@nox.session(python=MATRIX.python, reuse_venv=True)
@nox.parametrize(
    "torch,device",
    [nox.param(c.torch, c.device.name, tags=[c.tag, f"device-{c.device.name}"]) for c in MATRIX.cells],
)
def conformance(session: nox.Session, torch: str, device: str) -> None:
    """One cell: install torch (+numpy), check it is that torch, run `pytest conformance`."""
    _refuse_owned_options(session)
    cell = MATRIX.cell(torch, device)
    _cells_run.append(cell.name)
    session.notify("summary")  # runs after every cell, whatever they did
    spec = _spec(cell.name, cell.release, device, cell.time_limit_s, session.posargs, cell=cell)
    env_dir = Path(session.virtualenv.location)
    _fail_unless_clean(session, _run_cell(session, lambda: cells.install_and_run(spec, cells.env_python(env_dir), env_dir=env_dir)))


@nox.session(venv_backend="none", default=False)
def summary(session: nox.Session) -> None:
    """Table of the cells this run ran (alone: every matrix cell); fails unless every one is clean."""
    names = list(dict.fromkeys(_cells_run)) or [c.name for c in MATRIX.cells]
    rows = cells.summarize(RESULTS, names)
    print("\n" + cells.format_summary(rows), flush=True)
    bad = [r.cell for r in rows if not r.clean]
    if bad:
        _fail(session, f"{len(bad)} of {len(rows)} cells did not pass: {', '.join(bad)}")


@nox.session(venv_backend="none", default=False)
def installed(session: nox.Session) -> None:
    """The suite against the torch in `python` on PATH ($CONFORMANCE_PYTHON), installing nothing.

    For GPU machines without network: `nox -s installed -- --device all`. The result is
    results/installed-torch-<release>-<device>.json (or -- --cell-name NAME).
    """
    _refuse_owned_options(session, allowed=("--device", "--cell-name", "--hypothesis-profile"))
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--cell-name")
    parser.add_argument("--device")
    parser.add_argument("--hypothesis-profile")
    ours, pytest_args = parser.parse_known_args(session.posargs)
    python = os.environ.get("CONFORMANCE_PYTHON") or shutil.which("python") or shutil.which("python3")
    if not python:
        session.error("no python on PATH; set CONFORMANCE_PYTHON to the interpreter that has torch")
    probe = cells.probe_torch(python)
    if not probe.get("torch"):
        session.error(f"{python}: no importable torch ({probe.get('torch_error') or probe.get('probe_error') or 'not installed'})")
    version, _, build = probe["torch"].partition("+")
    name = ours.cell_name or f"installed-torch-{version}-{ours.device or 'default'}"
    spec = _spec(name, matrices.Release(version, build=build or None), ours.device, MATRIX.time_limit_s, pytest_args)
    if ours.hypothesis_profile:
        spec.hypothesis_profile = ours.hypothesis_profile
    _fail_unless_clean(session, _run_cell(session, lambda: cells.run_cell(spec, python)))


@nox.session(python=MATRIX.python)
def tests(session: nox.Session) -> None:
    """The project's own tests (tests/), with torch 2.13.0: `nox -s tests -- -k matrix`."""
    release = MATRIX.release(TESTS_TORCH)
    index = ["--extra-index-url", MATRIX.index_url] if MATRIX.index_url else []
    session.install(*release.requirements(), "-e", ".[test]", "nox", *index)
    session.run("pytest", "tests", "-n", "2", *session.posargs)


@nox.session(python=MATRIX.python, reuse_venv=True)
def report(session: nox.Session) -> None:
    """results/ -> compat/compat.json, compat/COMPAT.md, compat/index.html."""
    session.install("-e", ".")
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
    session.install("-e", ".")
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
    _refuse_owned_options(session, allowed=("--device",))
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--device", default=MATRIX.devices[0].name)
    ours, rest = parser.parse_known_args(session.posargs)
    if len(rest) < 2 or rest[0].startswith("-") or rest[1].startswith("-"):
        session.error("usage: nox -s bisect -- GOOD BAD [--device cpu|cuda] [pytest args]")
    good, bad, *pytest_args = rest

    def run_release(version: str) -> Path:
        release = MATRIX.release(version)
        env_dir = ROOT / ".nox" / f"bisect-torch-{version}"
        spec = _spec(matrices.cell_name(version, ours.device), release, ours.device,
                     release.time_limit_s or MATRIX.time_limit_s, pytest_args, RESULTS / "bisect")
        python = cells.create_env(env_dir, MATRIX.python)
        _run_cell(session, lambda: cells.install_and_run(spec, python, env_dir=env_dir))
        return spec.result_path

    code = bisecting.run(good, bad, run_release, index_url=MATRIX.index_url)
    if code == 1:
        _fail(session, f"bisect: no change between torch {good} and {bad}")
    elif code:
        session.error(f"bisect exited {code}")


def workflow_checks() -> list[list[str]]:
    """Commands that check the CI workflows (GitHub's schema, an offline security audit)."""
    files = sorted(str(p.relative_to(ROOT)) for p in WORKFLOWS.glob("*.y*ml"))
    if not files:
        return []
    return [
        ["check-jsonschema", "--builtin-schema", "vendor.github-workflows", *files],
        ["zizmor", "--offline", "--min-severity", "medium", *files],
    ]


@nox.session(python=MATRIX.python, reuse_venv=True)
def lint(session: nox.Session) -> None:
    """ruff, matrix.yaml, and the CI workflows."""
    checks = workflow_checks()
    session.install("ruff", "-e", ".", *(["check-jsonschema", "zizmor"] if checks else []))
    failed = []
    for command in [["ruff", "check", "."], ["python", "-m", "cpugpu_conformance.matrix", str(MATRIX.path)], *checks]:
        try:  # every check runs, so one run shows every problem
            session.run(*command)
        except CommandFailed:
            failed.append(command[0])
    if failed:
        _fail(session, f"lint: {', '.join(failed)} found problems")
