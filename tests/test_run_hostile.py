"""`cpugpu-conformance run` as a hostile or careless caller uses it.

The caller's directory never changes the run (a conftest.py there that turns failures into
passes is never loaded, whatever option value names it); a run that refuses to start never
leaves an earlier verdict at its --cell-result; a result path that is a FIFO or a directory is
refused untouched; a test process that ends without pytest finishing (the class calls
os._exit(0), or a signal) is an interrupted run, never exit 0; and sys.exit() while the class is
imported is bad input, one line.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import result_factory as rf
from suite_runner import REPO, run_pytest, start_sleeping_suite, suite_command, suite_env

from cpugpu_conformance import results

pytestmark = pytest.mark.skipif(os.name != "posix", reason="FIFOs and POSIX signals")

PRE_FIX = "cpugpu_conformance.variants:PreFixCpuGpuBuffer"

# A conftest.py that a careless project could hold: every failure becomes a pass. It says it
# was loaded by making LOADED beside itself.
FLIPPING_CONFTEST = '''
import pathlib

import pytest

pathlib.Path(__file__).with_name("LOADED").touch()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        report.outcome, report.longrepr = "passed", None
    return report
'''


def flipping_cwd(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    (where / "conftest.py").write_text(FLIPPING_CONFTEST)
    return where


def run_in(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "cpugpu_conformance", "run", "-q", "--hypothesis-profile=ci", *args]
    return subprocess.run(cmd, cwd=cwd, env=env or suite_env(), capture_output=True, text=True, timeout=600)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout[-3000:] + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and "INTERNALERROR" not in proc.stdout + proc.stderr
    return lines[0]


def old_pass(path: Path) -> Path:
    """An earlier run's clean result, where this run is told to write."""
    results.write_atomic(path, rf.completed("2.13.0"))
    assert results.CellResult.load(path).answer().clean
    return path


# --- 3. the caller's directory


def test_an_option_value_naming_the_callers_folder_loads_no_conftest(tmp_path):
    # pytest reads the command line before it knows the suite's options: `--cell-name .` was
    # an unknown flag and the path `.`, and pytest loaded ./conftest.py.
    cwd = flipping_cwd(tmp_path / "project")
    proc = run_in(cwd, "--impl", PRE_FIX, "--promise", "3", "--device", "cpu", "--cell-name", ".", "--cell-result", "cell.json")
    assert not (cwd / "LOADED").exists(), "the caller's conftest.py was loaded"
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    cell = results.CellResult.load(cwd / "cell.json")
    assert cell.name == "." and cell.outcome("3", "cpu").kind == "failed" and cell.answer().kind == "failed"


@pytest.mark.parametrize(
    ("args", "env", "culprit"),
    [
        (("--promise", "."), {}, "unknown promise"),
        (("--impl", "."), {}, "--impl '.'"),
        (("--device", "."), {}, "--device '.'"),
        (("--cell-result", "."), {}, "--cell-result .: not a regular file (a directory)"),
        ((".",), {}, "not in the suite's folder"),
        (("--promise", "3"), {"PYTEST_ADDOPTS": "."}, "not in the suite's folder"),
    ],
    ids=["promise", "impl", "device", "cell-result", "positional", "PYTEST_ADDOPTS"],
)
def test_a_path_to_the_callers_folder_is_refused_and_loads_no_conftest(tmp_path, args, env, culprit):
    cwd = flipping_cwd(tmp_path / "project")
    proc = run_in(cwd, "--impl", PRE_FIX, "--device", "cpu", *args, env={**suite_env(), **env})
    assert not (cwd / "LOADED").exists(), "the caller's conftest.py was loaded"
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr
    assert culprit in one_line(proc)


# --- 4. a run that refuses to start


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (("--lf",), "--lf: needs pytest's cache"),
        (("--sw",), "--sw: needs pytest's cache"),
        (("--noconftest",), "--noconftest"),
        (("--impl",), "--impl needs a value"),
        (("-p", "no:hypothesispytest"), "-p no:hypothesispytest"),
        (("-p", "no:cpugpu_conformance.testing.plugin"), "-p no:cpugpu_conformance.testing.plugin"),
        (("-p", "no:cpugpu-cell-recorder"), "-p no:cpugpu-cell-recorder"),
        (("--confcutdir", "/"), "--confcutdir"),
        (("--pyargs",), "--pyargs"),
        pytest.param(("--max-warnings", "0"), "--max-warnings: its exit code (6)",
                     marks=pytest.mark.skipif(not hasattr(pytest.ExitCode, "MAX_WARNINGS_ERROR"),
                                              reason="this pytest has no --max-warnings")),
    ],
    ids=["lf", "sw", "noconftest", "bare-impl", "no-hypothesis", "no-plugin", "no-recorder", "confcutdir", "pyargs",
         "max-warnings"],
)
def test_a_refused_option_replaces_an_earlier_pass_with_an_error(tmp_path, args, culprit):
    path = old_pass(tmp_path / "old_pass.json")
    proc = run_in(tmp_path, "--impl", PRE_FIX, "--cell-result", str(path), *args)
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr
    assert culprit in one_line(proc)
    cell = results.CellResult.load(path)
    assert cell.status == "error" and culprit in cell.detail and cell["pytest_exitstatus"] == 4, cell.detail
    assert not cell.answer().clean


def test_a_command_line_pytest_refuses_replaces_an_earlier_pass_too(tmp_path):
    # pytest's own refusal (an option nobody knows) comes before the suite could write anything.
    path = old_pass(tmp_path / "old_pass.json")
    proc = run_in(tmp_path, "--impl", PRE_FIX, "--cell-result", str(path), "--no-such-option")
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr
    assert "--no-such-option" in proc.stderr
    cell = results.CellResult.load(path)
    assert cell.status == "error" and "pytest exit status 4" in cell.detail, cell.detail


# --- issue 28, item 6: a run in which the plugin never loads


@pytest.mark.parametrize("env", [{"PYTEST_ADDOPTS": "-p no:cpugpu_conformance.testing.plugin"},
                                 {"PYTEST_ADDOPTS": "-p no:cpugpu-cell-recorder"},
                                 {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}],
                         ids=["addopts-no-plugin", "addopts-no-recorder", "no-autoload"])
def test_a_run_whose_plugin_never_loads_leaves_no_earlier_pass(tmp_path, env):
    path = old_pass(tmp_path / "old_pass.json")
    proc = run_in(tmp_path, "--promise", "2", "--device", "cpu", "--cell-result", str(path), env={**suite_env(), **env})
    assert proc.returncode not in (0, 5, 6), proc.stdout[-3000:] + proc.stderr
    cell = results.CellResult.load(path)
    assert cell.status == "error" and not cell.answer().clean, cell.detail
    assert "pytest exit status" in cell.detail, cell.detail


# A plugin (loaded with -p from PYTEST_ADDOPTS) that takes the recorder out after it started: pytest
# then ends on its own status, and nothing replaces the file's "in progress" placeholder.
UNREGISTERS_THE_RECORDER = """
import pytest


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    config.pluginmanager.unregister(name="cpugpu-cell-recorder")
"""


@pytest.mark.parametrize("impl", [PRE_FIX, "cpugpu_conformance.reference:CpuGpuBuffer"], ids=["failing", "passing"])
def test_a_run_that_ends_with_the_file_still_in_progress_is_interrupted(tmp_path, impl):
    """The exit status says what the file says: pytest's own 0 or 1 never stands beside a file that
    says the run did not finish."""
    (tmp_path / "unregisters.py").write_text(UNREGISTERS_THE_RECORDER)
    path = old_pass(tmp_path / "old_pass.json")
    base = suite_env()
    env = {**base, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), base.get("PYTHONPATH")])),
           "PYTEST_ADDOPTS": "-p unregisters"}
    proc = run_in(tmp_path, "--impl", impl, "--promise", "2", "--device", "cpu", "--cell-result", str(path), env=env)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr
    assert "says the run did not finish: it was interrupted, it is not a pass" in proc.stderr, proc.stderr
    cell = results.CellResult.load(path)
    assert cell.status == "interrupted" and not cell.answer().clean, cell.detail


def test_run_marks_the_result_path_before_pytest_starts(tmp_path, monkeypatch):
    from cpugpu_conformance.cli import run as running
    from cpugpu_conformance.cli.run_result import NOT_STARTED

    path = old_pass(tmp_path / "cell.json")
    seen = {}

    def suite(folder, prepared):  # what pytest would find at the path when it starts
        seen["cell"] = results.CellResult.load(path)
        return 0

    monkeypatch.setattr(running, "run_suite", suite)
    assert running.main(["--cell-result", str(path), "--promise", "2"]) == 0
    assert seen["cell"].status == "error" and seen["cell"].detail == NOT_STARTED
    assert not seen["cell"].answer().clean


def test_run_refuses_a_result_path_another_run_holds_untouched(tmp_path, capsys):
    from cpugpu_conformance.cli import run as running

    path = old_pass(tmp_path / "cell.json")
    before = path.read_bytes()
    with results.exclusive(path):
        assert running.main(["--cell-result", str(path), "--promise", "2"]) == 4
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("cpugpu-conformance run: --cell-result ") and str(path) in line, line
    assert path.read_bytes() == before


# --- 8. a result path that is not a regular file


def _not_regular(tmp_path: Path, kind: str) -> Path:
    if kind == "directory":
        (tmp_path / "results").mkdir()
        return tmp_path / "results"
    os.mkfifo(tmp_path / "fifo")
    if kind == "fifo":
        return tmp_path / "fifo"
    (tmp_path / "link").symlink_to(tmp_path / "fifo")
    return tmp_path / "link"


@pytest.mark.parametrize("kind", ["fifo", "directory", "link to a fifo"])
@pytest.mark.parametrize("how", ["run", "pytest"])
def test_a_result_path_that_is_not_a_regular_file_is_refused_untouched(tmp_path, kind, how):
    path = _not_regular(tmp_path, kind)
    before = sorted(p.name for p in tmp_path.iterdir()), stat.S_IFMT(os.stat(path).st_mode)
    if how == "run":
        proc = run_in(tmp_path, "--promise", "11", "--cell-result", str(path))
    else:
        proc = subprocess.run(suite_command(path, "--promise", "11"), cwd=REPO, env=suite_env(),
                              capture_output=True, text=True, timeout=600)
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr
    line = one_line(proc)
    assert str(path) in line and "not a regular file" in line, line
    assert " passed" not in proc.stdout, "tests ran"
    after = sorted(p.name for p in tmp_path.iterdir()), stat.S_IFMT(os.stat(path).st_mode)
    assert after == before, "the path was replaced, or a lock or temporary file was made beside it"


@pytest.mark.parametrize("how", ["run", "pytest"])
def test_an_empty_result_path_is_refused(tmp_path, how):
    # Read as "no result file", it would run with no file written where the caller looks.
    if how == "run":
        proc = run_in(tmp_path, "--promise", "11", "--cell-result", "")
    else:
        cmd = suite_command(tmp_path / "unused.json", "--promise", "11")
        cmd[cmd.index("--cell-result") + 1] = ""
        proc = subprocess.run(cmd, cwd=REPO, env=suite_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr
    assert "--cell-result '': an empty path" in one_line(proc)


# --- 6. a test process that ends before pytest does


EXITS_IN_CONSTRUCTOR = """
import os

from cpugpu_conformance.reference import CpuGpuBuffer


class ExitsZero(CpuGpuBuffer):
    def __init__(self, *size, **kwargs):
        os._exit(0)
"""


def test_a_class_that_ends_the_process_with_0_is_interrupted_never_a_pass(tmp_path):
    impl = tmp_path / "exits.py"
    impl.write_text(EXITS_IN_CONSTRUCTOR)
    path = old_pass(tmp_path / "cell.json")
    proc = run_in(tmp_path, "--impl", f"{impl}:ExitsZero", "--promise", "3", "--device", "cpu", "--cell-result", str(path))
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr
    line = one_line(proc)
    assert "exited with status 0 before pytest finished" in line and "interrupted" in line, line
    cell = results.CellResult.load(path)
    assert cell.status == "interrupted" and "exited with status 0" in cell.detail, cell.detail


@pytest.mark.parametrize("how", ["run", "pytest", "pytest -n 2"])
def test_sys_exit_while_the_class_is_imported_is_a_bad_impl(tmp_path, how):
    impl = tmp_path / "exits_at_import.py"
    impl.write_text("import sys\n\nsys.exit(0)\n")
    spec = f"{impl}:Buffer"
    path = old_pass(tmp_path / "cell.json")
    if how == "run":
        proc = run_in(tmp_path, "--impl", spec, "--cell-result", str(path))
    else:
        # Under -n 2 with no result file the workers import the class and hand the refusal back.
        extra = ("-n", "2") if how.endswith("-n 2") else ("--cell-result", str(path))
        proc = run_pytest(["conformance", "-p", "no:cacheprovider", "-q", "--impl", spec, *extra], cwd=REPO,
                          env=suite_env(), timeout=600)
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr
    assert f"--impl '{spec}': importing it called sys.exit(0)" in one_line(proc)
    if "-n 2" not in how:
        cell = results.CellResult.load(path)
        assert cell.status == "error" and "sys.exit(0)" in cell.detail, cell.detail


# --- signals reach the test process


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_run_reaches_the_suite_and_the_run_is_interrupted(tmp_path, signum):
    path = old_pass(tmp_path / "cell.json")
    run = start_sleeping_suite(tmp_path, path, via_run=True)
    try:
        run.wait_until_testing()
        suite_pid = int(run.marker.read_text())
        os.kill(run.proc.pid, signum)  # to `run` alone, as `kill` would: no terminal sends it to the group
        returncode = run.finish()
    finally:
        run.kill()
    assert returncode == 2, run.output()
    cell = results.CellResult.load(path)
    assert cell.status == "interrupted" and not cell.answer().clean, cell.detail
    if signum == signal.SIGINT:  # pytest's own interrupted run
        assert "KeyboardInterrupt" in cell.detail, cell.detail
    else:
        assert "killed by SIGTERM" in cell.detail, cell.detail
    with pytest.raises(ProcessLookupError):  # `run` waited for it: no orphan goes on testing
        os.kill(suite_pid, 0)
