"""The suite's exit status says what its result says, for `pytest conformance`, `run` and every
cell, with or without --cell-result, and under pytest-xdist (the controller decides):

    0 every promise asked for passed (or was recorded)    1 one failed
    5 nothing was tested                                   6 some went untested, none failed

A run whose tests all passed but that left promises untested (-k, --deselect, a missing
device) is no pass; one that ran no check at all (--collect-only, --setup-only,
--setup-plan) tested nothing.
"""

from __future__ import annotations

import subprocess

import pytest
from suite_runner import REPO, run_command, suite_command, suite_env

from cpugpu_conformance import results
from cpugpu_conformance.exits import SuiteExit
from cpugpu_conformance.testing.verdict.exit_status import exit_status

PRE_FIX = "cpugpu_conformance.variants:PreFixCpuGpuBuffer"
# The command: every test the pre-fix class fails, deselected.
NOT_THE_FAILING = "not mutable and not original_bug and not state_machine"
CONTRACT = "conformance/test_contract.py::TestContract"
# What the pre-fix class fails: the tests of promise 3 alone (MutabilityTests) and the state machine.
THE_FAILING = [f"{CONTRACT}::test_{name}" for name in ("mutable_wherever_made", "original_bug_buffer_made_in_inference_mode",
                                                       "buffer_state_machine")]


def suite(tmp_path, *args: str, via: str = "pytest", result: bool = True) -> tuple[subprocess.CompletedProcess[str], results.CellResult | None]:
    path = tmp_path / "cell.json"
    if via == "run":
        cmd = run_command(path, *args)
    else:
        cmd = suite_command(path, *args)
    if not result:
        at = cmd.index("--cell-result")
        del cmd[at:at + 2]
    proc = subprocess.run(cmd, cwd=tmp_path if via == "run" else REPO, env=suite_env(), capture_output=True,
                          text=True, timeout=600)
    return proc, results.CellResult.load(path) if result else None


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (results.Answer("passed", (), {"passed": 3, "recorded": 1}), 0),
        (results.Answer("untested", ("promise 3 ...",), {"passed": 3, "untested": 1}), SuiteExit.PARTLY_TESTED),
        (results.Answer("untested", ("promise 11 ...",), {"recorded": 1, "untested": 1}), SuiteExit.PARTLY_TESTED),
        (results.Answer("untested", ("no check of any promise ran",), {"passed": 0, "untested": 2}), 5),
        (results.Answer("failed", ("a crash",), {"passed": 3}), 1),
    ],
    ids=["passed", "partly", "partly-recorded", "nothing", "failed"],
)
def test_a_clean_pytest_exit_becomes_the_answers(answer, expected):
    assert exit_status(pytest.ExitCode.OK, answer) == expected


@pytest.mark.parametrize("pytest_status", [1, 2, 3, 4, 5])
def test_any_other_pytest_exit_stands(pytest_status):
    # Already no pass: a failure, an interruption, an internal or usage error, nothing collected.
    clean = results.Answer("passed", (), {"passed": 3})
    assert exit_status(pytest_status, clean) == pytest_status


@pytest.mark.parametrize("via", ["pytest", "run"])
def test_deselecting_what_fails_exits_6_never_0(tmp_path, via):
    proc, cell = suite(tmp_path, "--impl", PRE_FIX, "-k", NOT_THE_FAILING, "--device", "cpu", via=via)
    assert proc.returncode == SuiteExit.PARTLY_TESTED, proc.stdout[-3000:] + proc.stderr
    answer = cell.answer()
    assert answer.kind == "untested" and answer.counts["passed"] > 0, answer
    assert cell.outcome("3", "cpu").kind == "untested"
    assert cell["pytest_exitstatus"] == SuiteExit.PARTLY_TESTED, "the file and the exit status disagree"
    assert "went untested (exit 6)" in proc.stdout and "promise 3 (Mutable wherever they were made)" in proc.stdout


def test_deselect_of_the_failing_tests_exits_6(tmp_path):
    deselect = [arg for test in THE_FAILING for arg in ("--deselect", test)]
    proc, cell = suite(tmp_path, "--impl", PRE_FIX, "--promise", "1,3", "--device", "cpu", *deselect)
    assert proc.returncode == SuiteExit.PARTLY_TESTED, proc.stdout[-3000:] + proc.stderr
    assert cell.outcome("1", "cpu").kind == "passed" and cell.outcome("3", "cpu").kind == "untested"


@pytest.mark.parametrize("cell_result", [True, False], ids=["result", "no-result"])
def test_under_xdist_the_controller_decides(tmp_path, cell_result):
    # Without a result file the controller imports no torch: the workers' reports decide.
    proc, cell = suite(tmp_path, "-n", "2", "--impl", PRE_FIX, "--promise", "1,3", "-k", NOT_THE_FAILING,
                       "--device", "cpu", result=cell_result)
    assert proc.returncode == SuiteExit.PARTLY_TESTED, proc.stdout[-3000:] + proc.stderr
    if cell is not None:
        assert cell.answer().kind == "untested" and cell["pytest_exitstatus"] == SuiteExit.PARTLY_TESTED


@pytest.mark.parametrize("flag", ["--co", "--setup-only", "--setup-plan"])
@pytest.mark.parametrize("cell_result", [True, False], ids=["result", "no-result"])
def test_a_run_that_ran_no_check_tested_nothing(tmp_path, flag, cell_result):
    proc, cell = suite(tmp_path, "--impl", PRE_FIX, "--promise", "1,3", "--device", "cpu", flag, result=cell_result)
    assert proc.returncode == 5, proc.stdout[-3000:] + proc.stderr
    assert "nothing was tested (exit 5)" in proc.stdout
    if cell is not None:
        answer = cell.answer()
        assert answer.kind == "untested" and answer.counts["passed"] == 0, answer
        assert cell["pytest_exitstatus"] == 5


@pytest.mark.parametrize("via", ["pytest", "run"])
def test_a_clean_run_still_exits_0(tmp_path, via):
    proc, cell = suite(tmp_path, "--promise", "1,11", "--device", "cpu", via=via)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert cell.answer().clean and cell["pytest_exitstatus"] == 0
    assert "untested" not in proc.stdout
