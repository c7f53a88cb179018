"""Run one matrix cell: install its torch, check it got that torch, run the suite, keep its answer.

Whatever happens, the cell ends with results/<cell>.json and results/<cell>.log: the
suite's own result when pytest finished (exit 0, 1, 5 or 6), otherwise a result with status
not_installed, wrong_torch, timed_out, crashed, interrupted or error and a ``detail``
saying why (the installer's error, the tail of the log). A cell that did not run never
looks like one that passed: from the moment a run claims the result path until it writes
its answer, the path holds an ``interrupted`` placeholder, and a second run on the same
path refuses to start; a result path it cannot write is one line (ResultPathUnusable).
SIGTERM, SIGINT or SIGHUP (a CI cancel, Ctrl-C, the terminal closed) stops the test process
group, and what left it (Linux), and records ``interrupted``; a closed stdout stops only
the echo. A ``latest`` entry is resolved to the newest final release where the cell takes
torch from (index.newest_final_release) once it holds its result path; an index that cannot be read makes it not_installed. The installer's output
reaches stdout and the log line by line as it comes, with a heartbeat line while it is
quiet (a download of gigabytes). Results are read and written only through
results.CellResult, whose answer() decides what a cell's outcome is. The cell, matrix and
bisect commands (and so nox's conformance, matrix and bisect sessions) and nox's installed
session all come here; a matrix cell describes its own run (CellSpec.from_matrix_cell).

The command lines around it are ``cpugpu-conformance cell|record-unfinished`` (cli/cell.py,
cli/record.py). The environment and the installer are install.py; signals and process
groups processes.py.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cpugpu_conformance import results
from cpugpu_conformance.output import say
from cpugpu_conformance.runner.install import (
    base_version,
    create_env,
    environment_of,
    install,
    probe_torch,
    torch_mismatch,
)
from cpugpu_conformance.runner.matrix_model import MatrixCell, Release
from cpugpu_conformance.runner.processes import (
    CellInterrupted,
    Interrupts,
    SuiteRun,
    interrupts_raised,
    log_tail,
    run_suite,
    signal_name,
)
from cpugpu_conformance.runner.releases import ReleaseListingError, newest_final_release

# The suite: 0 every promise asked for passed, 1 one failed, 5 nothing was tested, 6 some promises
# went untested (none failed). Each is a finished run whose result file holds the answer (a cuda
# cell on a machine without a GPU: untested). Anything else means the suite did not finish its job.
PYTEST_FINISHED = (0, 1, 5, 6)
PYTEST_INTERRUPTED = 2
PYTEST_EXIT_NAMES = {2: "interrupted", 3: "internal error", 4: "usage error", 5: "nothing tested",
                     6: "some promises untested"}

# `python -m pytest ARGS`, minus the interpreter's teardown: tearing down an interpreter with torch
# loaded takes about a second after pytest has written the cell's result. The suite's recorder
# writes (and fsyncs) its result file during the session and releases its lock when pytest
# unconfigures, both before pytest.main returns; so flush what pytest printed and end the process
# with pytest's exit code. Nor does it take pytest's closing garbage collections (a quarter of a
# second with torch loaded, after the result is written; they only look for exceptions raised in
# finalizers, which pytest still reports after each test): the iterations come from a stash key
# pytest keeps for that purpose, where this pytest has it. Ctrl-C stays pytest's
# KeyboardInterrupt (exit 2), SIGTERM still ends the process. No pytest is the error
# `python -m pytest` gives. One line, for the log.
SUITE_LAUNCHER = (
    "import os, sys, types, importlib.util as u; "
    "u.find_spec('pytest') or sys.exit(sys.executable + ': No module named pytest'); "
    "import pytest; "
    "no_final_gc = types.SimpleNamespace(pytest_configure=lambda config: (k := getattr("
    "sys.modules.get('_pytest.unraisableexception'), 'gc_collect_iterations_key', None)) is None "
    "or config.stash.__setitem__(k, 0)); "
    "code = pytest.main(sys.argv[1:], plugins=[no_final_gc]); sys.stdout.flush(); sys.stderr.flush(); os._exit(int(code))"
)


def resolve_latest(spec: CellSpec) -> CellSpec:
    """The spec with a ``latest`` entry pinned to the newest final release where the cell takes
    torch from (its find_links folder and, unless offline, its index); other specs as they are.
    Raises ReleaseListingError (one line) when nothing can be listed."""
    release = spec.release
    if release is None or not release.is_latest:
        return spec
    folders = [spec.find_links] if spec.find_links else []
    version = newest_final_release(spec.index_url, folders, offline=spec.offline)
    return replace(spec, release=release.resolved(version))



def _exit_description(returncode: int) -> str:
    signum = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else None
    if signum:
        return f"killed by {signal_name(signum)}"
    return f"pytest exited {returncode} ({PYTEST_EXIT_NAMES.get(returncode, 'unexpected')})"


def _status_of_exit(returncode: int) -> str:
    """The cell status of a pytest that did not finish its job (exit not 0 or 1)."""
    if returncode < 0 or returncode > 128:
        return "crashed"
    if returncode == PYTEST_INTERRUPTED:
        return "interrupted"  # pytest stopped early (Ctrl-C, errors during collection): never completed
    return "error"


def _with_tail(headline: str, tail: list[str]) -> str:
    return headline + ("; last lines of the log:\n" + "\n".join(tail) if tail else "; the log is empty")



# ---------------------------------------------------------------------------- one cell


@dataclass
class CellSpec:
    """Everything a cell run needs to know besides its interpreter."""

    name: str
    release: Release | None  # None: whatever torch is installed (the `installed` session)
    device: str | None  # passed as --device; None leaves the suite's default
    hypothesis_profile: str
    time_limit_s: float
    results_dir: Path
    project_dir: Path
    index_url: str | None = None
    pytest_args: tuple[str, ...] = ()
    find_links: str | None = None  # a folder of wheels the installer searches too
    offline: bool = False  # the installer uses no network

    @classmethod
    def from_matrix_cell(cls, cell: MatrixCell, *, results_dir: Path, project_dir: Path, pytest_args: Sequence[str] = (),
                         name: str | None = None) -> CellSpec:
        """The run of a matrix cell: its release, device, time limit, profile and where its torch comes from."""
        return cls(name=name or cell.name, release=cell.release, device=cell.device.name,
                   hypothesis_profile=cell.hypothesis_profile, time_limit_s=cell.time_limit_s,
                   results_dir=Path(results_dir).resolve(), project_dir=Path(project_dir), index_url=cell.index_url,
                   pytest_args=tuple(pytest_args), find_links=cell.find_links, offline=cell.offline)

    @classmethod
    def for_installed_torch(cls, torch_version: str, *, name: str, device: str | None, hypothesis_profile: str,
                            time_limit_s: float, results_dir: Path, project_dir: Path,
                            pytest_args: Sequence[str] = ()) -> CellSpec:
        """The run of a torch already installed (``2.15.0+cu130``): nothing is installed, but the
        cell still checks that the suite imports that release and build."""
        version, _, build = torch_version.partition("+")
        return cls(name=name, release=Release(version, build=build or None), device=device,
                   hypothesis_profile=hypothesis_profile, time_limit_s=time_limit_s,
                   results_dir=Path(results_dir).resolve(), project_dir=Path(project_dir),
                   pytest_args=tuple(pytest_args))

    @property
    def result_path(self) -> Path:
        return self.results_dir / f"{self.name}.json"

    @property
    def log_path(self) -> Path:
        return self.results_dir / f"{self.name}.log"

    @property
    def staging_path(self) -> Path:
        """Where the suite writes; only a finished run's file becomes the result."""
        return self.results_dir / f".{self.name}.json.part"

    def remove_staging(self) -> None:
        """The staging file and the lock the suite holds on it, which a killed suite leaves
        behind. Only while this run holds the result path."""
        self.staging_path.unlink(missing_ok=True)
        results.lock_path(self.staging_path).unlink(missing_ok=True)

    def requested(self) -> dict[str, Any]:
        asked: dict[str, Any] = {"device": self.device or "default", "hypothesis_profile": self.hypothesis_profile,
                                 "time_limit_s": self.time_limit_s}
        if self.release:
            asked.update(torch=self.release.version, numpy=self.release.numpy, build=self.release.build,
                         requirements=self.release.requirements(), index_url=self.index_url)
            if self.release.asked:  # latest: what was asked, beside the release it resolved to (torch)
                asked.update(torch_asked=self.release.asked)
            if self.find_links:
                asked.update(find_links=self.find_links)
            if self.offline:
                asked.update(offline=True)
        return asked


@dataclass
class CellRun:
    """One run of a cell, from claiming its result path to writing its answer."""

    spec: CellSpec
    interrupts: Interrupts
    started: str = field(default_factory=results.now)
    clock: float = field(default_factory=time.monotonic)
    environment: dict[str, Any] = field(default_factory=dict)
    claimed: bool = False  # this run holds the result path
    answered: bool = False  # its answer replaced the placeholder

    def fault(self, status: str, detail: str) -> results.CellResult:
        """The answer of a run whose suite did not finish: its status and why."""
        return self.finish(results.CellResult.new(
            self.spec.name, status, detail=detail, requested=self.spec.requested(),
            environment=self.environment or None, started=self.started,
            duration_s=round(time.monotonic() - self.clock, 3), hypothesis_profile=self.spec.hypothesis_profile))

    def finish(self, result: results.CellResult) -> results.CellResult:
        """Write the answer over the placeholder; a signal now waits until it is written."""
        with self.interrupts.deferred():
            result.write(self.spec.result_path)
            self.answered = True
        say(f"cell {self.spec.name}: {result.describe()} -> {self.spec.result_path}")
        return result


class ResultPathUnusable(results.ResultPathBusy):
    """The cell cannot write its result file or log where it was told (a file where its folder
    should be, no permission, a read-only file system). A ResultPathBusy, so that every command
    that refuses a busy result path (cell, bisect, nox's sessions) refuses this one the same
    way: one line naming the path, nothing run."""


def file_in_the_way(folder: Path) -> Path | None:
    """The first of ``folder`` and its parents that exists and is not a folder, if any."""
    for path in (folder, *folder.parents):
        try:
            if path.exists() or path.is_symlink():
                return None if path.is_dir() else path
        except OSError:  # cannot even look: the error that follows will say why
            return None
    return None


def _cannot_write(spec: CellSpec, exc: OSError) -> ResultPathUnusable:
    culprit = file_in_the_way(spec.results_dir)
    if culprit is not None:
        why = f"{culprit} is not a folder"
    else:
        why = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)
    return ResultPathUnusable(f"{spec.results_dir}: cannot write the cell's result and log there ({why})")


def _claim(spec: CellSpec, run: CellRun, stack: contextlib.ExitStack) -> None:
    """Take the lock, put the placeholder at the result path and start a fresh log."""
    try:
        stack.enter_context(results.exclusive(spec.result_path))
        run.claimed = True
        stack.callback(spec.remove_staging)
        results.placeholder(spec.name, requested=spec.requested()).write(spec.result_path)
        spec.log_path.write_text("")  # a fresh log per run
    except OSError as exc:
        raise _cannot_write(spec, exc) from None


@contextlib.contextmanager
def claimed(spec: CellSpec) -> Iterator[CellRun]:
    """Hold the cell's result path for the whole run.

    A second run on the same path raises results.ResultPathBusy before touching the
    result or the log; a path the cell cannot write raises ResultPathUnusable (one line)
    before anything runs. While the run lasts the path holds an ``interrupted`` placeholder,
    so a run killed outright (SIGKILL) never leaves an older result standing. SIGTERM,
    SIGINT or SIGHUP stops the test process, records ``interrupted`` naming the signal, and raises
    CellInterrupted; a bug in the runner is recorded as ``error``. The lock and staging
    files are removed on the way out.
    """
    stack = contextlib.ExitStack()
    interrupts = stack.enter_context(interrupts_raised())
    run = CellRun(spec, interrupts)
    try:
        with interrupts.deferred():  # a signal waits until the path is ours and says so
            _claim(spec, run, stack)
        yield run
    except ResultPathUnusable as exc:
        if run.claimed and not run.answered:  # the placeholder went in, the log did not
            with contextlib.suppress(OSError):
                run.fault("error", str(exc))
        raise
    except CellInterrupted as exc:
        if run.claimed and not run.answered:
            headline = f"interrupted by {signal_name(exc.signum)} (a cancelled CI job, Ctrl-C, a kill)"
            run.fault("interrupted", _with_tail(headline, log_tail(spec.log_path)))
        raise
    except Exception as exc:
        if run.claimed and not run.answered:
            run.fault("error", f"the cell runner failed: {type(exc).__name__}: {exc}")
        raise
    finally:
        with interrupts.deferred():  # the lock and staging files go even if a signal comes now
            stack.close()


def install_and_run(spec: CellSpec, python: Path, env_dir: Path | None = None) -> results.CellResult:
    """Claim the result path, install the cell's release into the environment of ``python``,
    then check the torch and run the suite (see run_cell)."""
    with claimed(spec) as run:
        return _install_check_and_test(run, python, env_dir)


def create_env_and_run(spec: CellSpec, env_dir: Path, python_version: str) -> results.CellResult:
    """install_and_run in the environment at ``env_dir``, made (or reused) once the cell holds
    its result path: a signal while it is made is recorded like any other, and an environment
    that cannot be made is the cell's answer (not_installed), not an exception."""
    with claimed(spec) as run:
        try:
            python = create_env(env_dir, python_version)
        except (OSError, subprocess.CalledProcessError) as exc:
            return run.fault("not_installed", f"cannot make the environment {env_dir} (Python {python_version}): {exc}")
        return _install_check_and_test(run, python, env_dir)


def _install_check_and_test(run: CellRun, python: Path, env_dir: Path | None) -> results.CellResult:
    spec = run.spec
    assert spec.release is not None
    try:
        run.spec = resolve_latest(spec)
    except ReleaseListingError as exc:
        return run.fault("not_installed", f"cannot resolve torch latest: {exc}")
    release = run.spec.release
    assert release is not None
    if release.asked:
        _note(spec.log_path, f"cell: torch {release.asked} is {release.version}, the newest final release "
                             f"{_where_from(run.spec)}")
    done = install(python, release, index_url=spec.index_url, find_links=spec.find_links, offline=spec.offline,
                   project=spec.project_dir, log_path=spec.log_path)
    if not done.ok:
        return run.fault("not_installed", done.error())
    return _check_and_test(run, python, env_dir)


def _where_from(spec: CellSpec) -> str:
    places = [f"in {spec.find_links}"] if spec.find_links else []
    if not spec.offline:
        places.append(f"on {spec.index_url or 'PyPI'}")
    return " and ".join(places)


def _note(log_path: Path, line: str) -> None:
    """A line of the runner's own, on stdout and in the cell's log."""
    say(line)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(line + "\n")


def run_cell(spec: CellSpec, python: Path | str, *, env_dir: Path | None = None) -> results.CellResult:
    """Claim the result path, check the torch, run the suite in its own process group, and
    write the cell's answer. Raises results.ResultPathBusy when another run holds the path (or
    ResultPathUnusable, one, when it cannot be written), CellInterrupted (after recording it)
    on SIGTERM, SIGINT or SIGHUP."""
    with claimed(spec) as run:
        return _check_and_test(run, python, env_dir)


def _check_and_test(run: CellRun, python: Path | str, env_dir: Path | None) -> results.CellResult:
    spec = run.spec
    probe = probe_torch(python)
    run.environment = environment_of(probe)
    if spec.release is not None:
        problem = torch_mismatch(probe, spec.release, spec.device, env_dir)
        if problem:
            return run.fault("wrong_torch", problem)
    spec.remove_staging()  # a killed run's leftovers are not this run's result
    suite = run_suite(_suite_command(spec, python), log_path=spec.log_path, time_limit_s=spec.time_limit_s,
                      cwd=spec.project_dir, interrupts=run.interrupts)
    return _answer(run, suite)


def _suite_command(spec: CellSpec, python: Path | str) -> list[str]:
    cmd = [str(python), "-c", SUITE_LAUNCHER, "conformance", "--cell-result", str(spec.staging_path.resolve()),
           "--cell-name", spec.name, "--hypothesis-profile", spec.hypothesis_profile, "-p", "no:cacheprovider"]
    if spec.device:
        cmd += ["--device", spec.device]
    return cmd + list(spec.pytest_args)


def _answer(run: CellRun, suite: SuiteRun) -> results.CellResult:
    """The cell's answer from how the suite ended and what it wrote."""
    spec = run.spec
    tail = suite.tail or log_tail(spec.log_path)  # a suite that printed nothing: the log's own last lines
    outlived = [f"processes it started outlived the kill: {', '.join(suite.survivors)}"] if suite.survivors else []

    def fault(status: str, headline: str) -> results.CellResult:
        return run.fault(status, _with_tail("; ".join([headline, *outlived]), tail))

    if suite.timed_out:
        return fault("timed_out", f"killed after the cell's time limit of {spec.time_limit_s:g} s")
    if suite.returncode not in PYTEST_FINISHED:
        return fault(_status_of_exit(suite.returncode), _exit_description(suite.returncode))
    try:
        written = results.load(spec.staging_path)
    except results.ResultFileError as exc:
        return fault("error", f"{_finished_description(suite.returncode)} without a usable result file ({exc})")
    if problem := _not_what_the_cell_set(spec, written):
        return run.fault("error", problem)
    return run.finish(_as_cell_result(spec, written, warnings=outlived))


def _finished_description(returncode: int) -> str:
    name = PYTEST_EXIT_NAMES.get(returncode) if returncode not in (0, 1) else None
    return f"pytest exited {returncode}" + (f" ({name})" if name else "")


def _not_what_the_cell_set(spec: CellSpec, written: results.CellResult) -> str | None:
    """The suite's result under another name or profile than the cell gave it: an option the cell
    sets itself reached pytest some way the refusal did not see (a plugin, a conftest)."""
    profile = written.get("hypothesis_profile")
    if written.name == spec.name and profile in (None, spec.hypothesis_profile):
        return None
    return (f"the suite recorded cell {written.name!r} with hypothesis profile {profile!r}, the cell set "
            f"{spec.name!r} with {spec.hypothesis_profile!r}: an option the cell sets itself reached pytest")


def _as_cell_result(spec: CellSpec, written: results.CellResult, warnings: Sequence[str] = ()) -> results.CellResult:
    """The suite's result, with what the cell asked for (and the runner's warnings), refused when the
    suite imported another torch."""
    data = written.to_json()
    if warnings:
        data["warnings"] = [*written.warnings, *warnings]
    data["requested"] = {**spec.requested(), **written.requested}  # the suite's own keys (promises) win
    got = written.environment.get("torch")
    if spec.release is not None and got and base_version(str(got)) != spec.release.version:
        # The pre-check read torch/version.py; this is the torch the suite really imported.
        for key in ("promises", "counts", "devices", "unattributed_failures"):
            data.pop(key, None)
        data.update(status="wrong_torch", detail=f"asked for torch {spec.release.version}, the suite imported torch {got}")
    return results.CellResult(data, str(spec.result_path))


# ---------------------------------------------------------------------------- the CI fallback


def record_unfinished(path: Path, cell: str, session: str, nox_log: Path | None = None) -> str | None:
    """After nox ended, make sure ``path`` answers for the cell, with nox's output where it helps.

    No file (nox failed before the cell ran) or an unreadable one: ``error``. An
    ``interrupted`` one (the placeholder of a run that was killed, or a run stopped by a
    signal): still ``interrupted``, with nox's output added. Any other answer stands.
    Returns what was recorded, or None.
    """
    tail = log_tail(nox_log) if nox_log else []
    output = "\n".join([f"nox -s {session} output, last lines:", *tail] if tail else [f"nox -s {session} left no output"])
    try:
        found = results.load(path)
    except results.ResultFileError as exc:
        missing = not path.exists() and not path.is_symlink()
        why = "ended without a result file" if missing else f"left a result file that cannot be read ({exc})"
        answer = results.CellResult.new(cell, "error", detail=f"nox -s {session} {why}\n{output}")
    else:
        if found.status != "interrupted":
            return None
        data = found.to_json()
        data["detail"] = f"{found.detail or 'interrupted'}\n{output}"
        answer = results.CellResult(data, str(path))
    answer.write(path)  # replaces a file, a link or a FIFO alike
    return f"{path}: recorded as {answer.status}"

