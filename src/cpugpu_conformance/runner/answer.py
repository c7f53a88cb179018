"""The suite in a cell: the command that starts it, and how its ending (the exit code, the result
file it wrote, what outlived it) becomes the cell's answer: the suite's own result, or a fault
(timed_out, crashed, interrupted, error, wrong_torch) with a detail saying why."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cpugpu_conformance import results
from cpugpu_conformance.exits import FINISHED, MEANINGS, SuiteExit
from cpugpu_conformance.runner.cell_spec import CellRun, CellSpec
from cpugpu_conformance.runner.install import base_version
from cpugpu_conformance.runner.processes import SuiteRun, log_tail, signal_name
from cpugpu_conformance.runner.source import SUITE_INI

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


def _exit_description(returncode: int) -> str:
    signum = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else None
    if signum:
        return f"killed by {signal_name(signum)}"
    return f"pytest exited {returncode} ({MEANINGS.get(returncode, 'unexpected')})"


def _status_of_exit(returncode: int) -> str:
    """The cell status of a pytest that did not finish its job (exit not 0 or 1)."""
    if returncode < 0 or returncode > 128:
        return "crashed"
    if returncode == SuiteExit.INTERRUPTED:
        return "interrupted"  # pytest stopped early (Ctrl-C, errors during collection): never completed
    return "error"


def with_tail(headline: str, tail: list[str]) -> str:
    """A fault's detail: what happened, then the log's last lines."""
    return headline + ("; last lines of the log:\n" + "\n".join(tail) if tail else "; the log is empty")


def suite_command(spec: CellSpec, python: Path | str, suite: Path | None = None) -> list[str]:
    """The cell's pytest run of conformance/ (in the checkout, or with ``spec.workdir`` from the user's
    folder), or of the installed suite at ``suite`` (a copy of the package's,
    source.InstalledPackage.copy), writing to the staging path, with what the cell sets."""
    if suite is None and spec.workdir is not None:  # a checkout's suite, run from the user's folder
        checkout = spec.project_dir.resolve()
        where = ["-c", str(checkout / "pyproject.toml"), "--rootdir", str(checkout), str(checkout / "conformance")]
    elif suite is not None:  # the installed package's, as `cpugpu-conformance run` runs it
        where = ["-c", str(suite / SUITE_INI), "--rootdir", str(suite), "--confcutdir", str(suite), str(suite)]
    if suite is not None or spec.workdir is not None:
        # The suite's own configuration and rootdir, so nothing in the folder it runs in (the user's) is
        # read; its options joined to their values, never taken for paths there.
        cmd = [str(python), "-c", SUITE_LAUNCHER, *where, "-p", "no:cacheprovider",
               f"--cell-result={spec.staging_path.resolve()}", f"--cell-name={spec.name}",
               f"--hypothesis-profile={spec.hypothesis_profile}"]
        return cmd + ([f"--device={spec.device}"] if spec.device else []) + list(spec.pytest_args)
    cmd = [str(python), "-c", SUITE_LAUNCHER, "conformance", "--cell-result", str(spec.staging_path.resolve()),
           "--cell-name", spec.name, "--hypothesis-profile", spec.hypothesis_profile, "-p", "no:cacheprovider"]
    if spec.device:
        cmd += ["--device", spec.device]
    return cmd + list(spec.pytest_args)


def cell_answer(run: CellRun, suite: SuiteRun) -> results.CellResult:
    """The cell's answer from how the suite ended and what it wrote."""
    spec = run.spec
    tail = suite.tail or log_tail(spec.log_path)  # a suite that printed nothing: the log's own last lines
    outlived = [f"processes it started outlived the kill: {', '.join(suite.survivors)}"] if suite.survivors else []

    def fault(status: str, headline: str) -> results.CellResult:
        return run.fault(status, with_tail("; ".join([headline, *outlived]), tail))

    if suite.timed_out:
        return fault("timed_out", f"killed after the cell's time limit of {spec.time_limit_s:g} s")
    if suite.returncode not in FINISHED:
        return fault(_status_of_exit(suite.returncode), _exit_description(suite.returncode))
    try:
        written = results.CellResult.load(spec.staging_path)
    except results.ResultFileError as exc:
        return fault("error", f"{_finished_description(suite.returncode)} without a usable result file ({exc})")
    if problem := _not_what_the_cell_set(spec, written):
        return run.fault("error", problem)
    return run.finish(_as_cell_result(spec, written, warnings=outlived))


def _finished_description(returncode: int) -> str:
    name = MEANINGS.get(returncode) if returncode not in (0, 1) else None
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
