"""Known failures the team owns (issue 24, item 2), as runs take the file: the suite, `run`, a
team's own pytest (the plugin), `cell` and `matrix`. A listed failure fails no run; a listed
promise that passes fails it (exit 1, strict as xfail_strict) and the result file says why; a bad
file is exit 4 (2 for cell and matrix, before anything is installed), one line, never a pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import result_factory as rf
from known_failures_files import DEEP_LINE, ONES, REASON, _env, deep_file, write
from suite_runner import REPO, run_suite

from cpugpu_conformance import results
from cpugpu_conformance.cli.dispatch import main

# ---------------------------------------------------------------------------- the suite, as a user runs it


def test_the_suite_reports_a_listed_failure_as_known_and_exits_0(tmp_path):
    known = write(tmp_path, f'[[known_failure]]\npromise = 2\nreason = "{REASON}"\n')
    run = run_suite(tmp_path, "--impl", ONES, "--promise", "2", "--known-failures", str(known))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    entry = run.result["promises"]["2"]["devices"]["cpu"]
    assert entry["verdict"] == "known_failure" and entry["reason"] == REASON
    assert entry["known_failure"] == {"reason": REASON, "file": str(known), "entry": 1}
    assert entry["failures"] and all(f["reproducer"] for f in entry["failures"])
    assert run.cell.outcome("2", "cpu").kind == "known_failure" and run.cell.answer().clean
    assert run.result["pytest_exitstatus"] == 0
    assert f"failed as {known} lists (known failures)" in run.stdout


def test_the_suite_fails_a_listed_promise_that_passes_and_the_file_says_why(tmp_path):
    known = write(tmp_path, '[[known_failure]]\npromise = 2\nreason = "we thought so"\n')
    run = run_suite(tmp_path, "--promise", "2", "--known-failures", str(known))
    assert run.returncode == 1, run.stdout[-3000:]
    entry = run.result["promises"]["2"]["devices"]["cpu"]
    assert entry["verdict"] == "passed" and entry["known_failure"]["reason"] == "we thought so"
    answer = run.cell.answer()
    assert answer.kind == "failed" and any("remove the entry" in line for line in answer.lines)
    assert "listed as a known failure" in run.stdout and "remove the entry" in run.stdout


def test_an_entry_for_another_torch_leaves_the_failure_a_failure(tmp_path):
    known = write(tmp_path, '[[known_failure]]\npromise = 2\ntorch = "<2.0"\nreason = "old torch"\n')
    run = run_suite(tmp_path, "--impl", ONES, "--promise", "2", "--known-failures", str(known))
    assert run.returncode == 1
    assert run.verdict("2") == "failed" and "known_failure" not in run.result["promises"]["2"]["devices"]["cpu"]


def test_a_bad_file_is_exit_4_one_line_and_an_error_result(tmp_path):
    (tmp_path / "cell.json").write_text(json.dumps(rf.completed("2.13.0")))  # an older pass must not stand
    bad = write(tmp_path, '[[known_failure]]\npromise = 2\ndevice = "gpu"\nreason = "x"\n')
    run = run_suite(tmp_path, "--promise", "2", "--known-failures", str(bad))
    assert run.returncode == 4
    expected = f"--known-failures {bad}: [[known_failure]] 1: device = 'gpu': not a device of the contract"
    assert expected in run.stderr and "Traceback" not in run.stderr
    assert run.result["status"] == "error" and expected in run.result["detail"]


def test_run_takes_the_option_with_a_path_relative_to_the_caller(tmp_path):
    write(tmp_path, f'[[known_failure]]\npromise = 2\nreason = "{REASON}"\n', "kf.toml")
    proc = subprocess.run([sys.executable, "-m", "cpugpu_conformance", "run", "--impl", ONES, "--promise", "2",
                           "--known-failures", "kf.toml", "--cell-result", "out.json", "--hypothesis-profile", "ci"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["promises"]["2"]["devices"]["cpu"]["verdict"] == "known_failure"


# ---------------------------------------------------------------------------- a team's own pytest (the plugin)

TEAM_TESTS = """\
from cpugpu_conformance.testing import ZeroedTests
from cpugpu_conformance.variants import OnesLikeGpuBuffer


class TestOurs(ZeroedTests):
    buffer_cls = OnesLikeGpuBuffer
"""


def team_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "team"
    (project / "tests").mkdir(parents=True, exist_ok=True)
    (project / "tests" / "conftest.py").write_text('pytest_plugins = ["cpugpu_conformance.testing.plugin"]\n')
    (project / "tests" / "test_ours.py").write_text(TEAM_TESTS)
    return subprocess.run([sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider",
                           "--hypothesis-profile", "cpugpu-ci", "--cpugpu-promise", "2", *args],
                          cwd=project, env=_env(), capture_output=True, text=True, timeout=600)


def test_in_a_projects_own_run_a_listed_failure_fails_nothing_and_an_unlisted_one_does(tmp_path):
    assert team_run(tmp_path).returncode == 1  # pytest's own status: a failing test
    known = write(tmp_path, f'[[known_failure]]\npromise = 2\ndevice = "cpu"\nreason = "{REASON}"\n')
    proc = team_run(tmp_path, "--cpugpu-known-failures", str(known))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "known failures" in proc.stdout


def test_in_a_projects_own_run_a_bad_file_is_exit_4_naming_the_option(tmp_path):
    proc = team_run(tmp_path, "--cpugpu-known-failures", str(tmp_path / "nope.toml"))
    assert proc.returncode == 4
    assert f"--cpugpu-known-failures {tmp_path / 'nope.toml'}: no such file of known failures" in proc.stderr


# ---------------------------------------------------------------------------- cell and matrix: checked before anything runs


@pytest.mark.parametrize("command", [["cell", "2.13.0"], ["matrix", "torch-2.13.0-cpu"]])
def test_cell_and_matrix_refuse_a_bad_file_before_installing_anything(tmp_path, capsys, command):
    bad = write(tmp_path, "[[known_failure]]\npromise = 99\nreason = 'x'\n")
    code = main([*command, "--matrix", str(REPO / "matrix.yaml"), "--results", str(tmp_path / "results"),
                 "--known-failures", str(bad)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"cpugpu-conformance {command[0]}: error: --known-failures {bad}: [[known_failure]] 1: "
                   "promise = 99: not a promise of the contract (1-13)"]
    assert not (tmp_path / "results").exists()


def test_cell_hands_the_file_to_the_run_with_an_absolute_path(tmp_path, monkeypatch):
    from cpugpu_conformance.cli.cell import what_to_run

    write(tmp_path, '[[known_failure]]\npromise = 2\nreason = "x"\n', "kf.toml")
    monkeypatch.chdir(tmp_path)
    assert what_to_run(None, Path("kf.toml"), ["-k", "zeroed"]) == (
        None, ["-k", "zeroed", f"--known-failures={tmp_path / 'kf.toml'}"])
    assert what_to_run("tests/test_ours.py::TestOurs", Path("kf.toml"), []) == (
        "tests/test_ours.py::TestOurs", [f"--cpugpu-known-failures={tmp_path / 'kf.toml'}"])
    with pytest.raises(Exception, match="given twice"):
        what_to_run(None, Path("kf.toml"), ["--known-failures=other.toml"])


def test_matrix_hands_the_file_to_every_cell(tmp_path):
    from cpugpu_conformance.cli.matrix import cell_job
    from cpugpu_conformance.runner import matrix as matrices

    matrix = matrices.load(REPO / "matrix.yaml")
    known = write(tmp_path, '[[known_failure]]\npromise = 2\nreason = "x"\n')
    job = cell_job(matrix, matrix.cells[0], envdir=tmp_path, results_dir=tmp_path, pytest_args=["-x"],
                   known_failures=known)
    at = job.command.index("--known-failures")
    assert job.command[at + 1] == str(known) and job.command.index("--") > at and job.command[-1] == "-x"


# ---------------------------------------------------------------------------- a file nested 50,000 deep (issue 28, item 6)


def test_in_a_projects_own_run_a_deep_file_is_exit_4_one_line_and_an_error_result(tmp_path):
    deep = deep_file(tmp_path)
    result = tmp_path / "cell.json"
    proc = team_run(tmp_path, "--cpugpu-known-failures", str(deep), "--cpugpu-cell-result", str(result))
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"--cpugpu-known-failures {deep}: {DEEP_LINE}" in proc.stderr
    assert "INTERNALERROR" not in proc.stdout + proc.stderr and "RecursionError" not in proc.stdout + proc.stderr
    written = results.CellResult.load(result)
    assert written.status == "error" and DEEP_LINE in written["detail"]


def test_run_refuses_a_deep_file_exit_4_with_an_error_result(tmp_path):
    deep = deep_file(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "cpugpu_conformance", "run", "--promise", "2",
                           "--known-failures", str(deep), "--cell-result", "out.json"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"--known-failures {deep}: {DEEP_LINE}" in proc.stderr and "Traceback" not in proc.stderr
    written = results.CellResult.load(tmp_path / "out.json")
    assert written.status == "error" and DEEP_LINE in written["detail"]
