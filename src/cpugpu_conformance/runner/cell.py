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
session all come here; a matrix cell describes its own run (CellSpec.from_matrix_cell, in
cell_spec.py with the record of a run, CellRun).

The command lines around it are ``cpugpu-conformance cell|record-unfinished`` (cli/cell.py,
cli/record.py). The environment and the installer are install.py; signals and process
groups processes.py; the suite's command and how its ending becomes the answer answer.py.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from cpugpu_conformance import results
from cpugpu_conformance.output import say
from cpugpu_conformance.runner.answer import SUITE_LAUNCHER, cell_answer, suite_command, with_tail
from cpugpu_conformance.runner.cell_spec import CellRun, CellSpec
from cpugpu_conformance.runner.install import (
    create_env,
    environment_of,
    install,
    probe_torch,
    torch_mismatch,
)
from cpugpu_conformance.runner.processes import (
    CellInterrupted,
    interrupts_raised,
    log_tail,
    run_suite,
    signal_name,
)
from cpugpu_conformance.runner.releases import ReleaseListingError, newest_final_release


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


# ---------------------------------------------------------------------------- one cell


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


# The results folder's storage failing under the run (full, over quota, read-only now, broken).
_STORAGE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


def _cannot_write(spec: CellSpec, exc: OSError) -> ResultPathUnusable:
    culprit = file_in_the_way(spec.results_dir)
    if culprit is not None:
        why = f"{culprit} is not a folder"
    else:
        why = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)
    return ResultPathUnusable(f"{spec.results_dir}: cannot write the cell's result and log there ({why})")


def fresh_log(path: Path) -> None:
    """An empty log at ``path``, a fresh one per run. What stands there that is not a file of its own
    is removed, never written through: a symlink (truncating would empty the file it points to), a
    FIFO (opening it to write waits for a reader forever), a second name of another file. A folder
    there raises (IsADirectoryError), as the log cannot be written."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "a folder stands where the cell's log goes", str(path))
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    os.close(fd)


def _claim(spec: CellSpec, run: CellRun, stack: contextlib.ExitStack) -> None:
    """Take the lock, put the placeholder at the result path and start a fresh log."""
    try:
        stack.enter_context(results.exclusive(spec.result_path))
        run.claimed = True
        stack.callback(spec.remove_staging)
        results.placeholder(spec.name, requested=spec.requested()).write(spec.result_path)
        fresh_log(spec.log_path)
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
            run.fault("interrupted", with_tail(headline, log_tail(spec.log_path)))
        raise
    except Exception as exc:
        if run.claimed and not run.answered:
            try:
                run.fault("error", f"the cell runner failed: {type(exc).__name__}: {exc}")
            except OSError as cannot:  # a full disk: the answer cannot go in either; the placeholder stays
                raise _cannot_write(spec, cannot) from None
        if isinstance(exc, OSError) and exc.errno in _STORAGE_ERRORS:
            raise _cannot_write(spec, exc) from None  # recorded as error above: one line, not a traceback
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
                   project=None if spec.package else spec.project_dir,
                   also=spec.package.requirements() if spec.package else (), log_path=spec.log_path)
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
    with suite_files(spec) as (suite, env):
        # The suite writes to the staging path; the line it prints names the file the cell leaves.
        env = dict(env if env is not None else os.environ, **{SHOWN_AS: str(spec.result_path)})
        suite_run = run_suite(test_command(spec, python, suite), log_path=spec.log_path, time_limit_s=spec.time_limit_s,
                              cwd=spec.workdir or spec.project_dir, env=env, interrupts=run.interrupts)
    return cell_answer(run, suite_run)


@contextlib.contextmanager
def suite_files(spec: CellSpec) -> Iterator[tuple[Path | None, dict[str, str] | None]]:
    """Where the suite is, and the test process's environment: from a checkout, (None, None): its
    conformance/, this environment as it is (run from the user's folder: hypothesis's database in a
    temporary folder). From an installed package, a copy of it first on PYTHONPATH
    (source.InstalledPackage.copy) and the copy's suite, for the length of the block."""
    if spec.package is None and (spec.workdir is None or spec.tests is not None):
        yield None, None  # in the checkout; or the team's own pytest in their folder, as they run it
        return
    if spec.package is None:  # a checkout's suite run from the user's folder: nothing of the run stays there
        with tempfile.TemporaryDirectory(prefix="cpugpu-conformance-cell-") as tmp:
            storage = os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") or str(Path(tmp) / "hypothesis")
            yield None, dict(os.environ, HYPOTHESIS_STORAGE_DIRECTORY=storage)
        return
    with spec.package.copy() as top:
        path = os.pathsep.join(p for p in (str(top), os.environ.get("PYTHONPATH", "")) if p)
        # Hypothesis keeps its example database in the current folder (.hypothesis/), the user's own here:
        # it lives and dies with the run, as for `cpugpu-conformance run`.
        storage = os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") or str(top / "hypothesis")
        yield top / spec.package.folder.name / "suite", dict(os.environ, PYTHONPATH=path,
                                                               HYPOTHESIS_STORAGE_DIRECTORY=storage)


LIBRARY_PLUGIN = "cpugpu_conformance.testing.plugin"
# How the recorder names the result file in its last line (recording.SHOWN_AS): the final path.
SHOWN_AS = "CPUGPU_CONFORMANCE_RESULT_SHOWN_AS"


def test_command(spec: CellSpec, python: Path | str, suite: Path | None = None) -> list[str]:
    """The shipped suite (answer.suite_command; ``suite``: an installed one's folder), or a team's own
    tests with the library's plugin and its options: the same result file, written to the staging
    path, under the cell's name."""
    if spec.tests is None:
        return suite_command(spec, python, suite)
    cmd = [str(python), "-c", SUITE_LAUNCHER, spec.tests, "-p", LIBRARY_PLUGIN,
           "--cpugpu-cell-result", str(spec.staging_path.resolve()), "--cpugpu-cell-name", spec.name,
           "--hypothesis-profile", spec.hypothesis_profile, "-p", "no:cacheprovider"]
    if spec.device:
        cmd += ["--cpugpu-device", spec.device]
    return cmd + list(spec.pytest_args)


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
        found = results.CellResult.load(path)
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

