"""gate: the candidate's own answer (issue 22): a candidate that is not clean never passes, whatever
the baseline; each reason is its own line; a promise waived in both cells is not compared.
"""

from __future__ import annotations

import pytest
import result_factory as rf
from gate_runner import APPLY_ON_CUDA, JUDGED_ON_CPU, REPRODUCER, errors, gate

from cpugpu_conformance.cli.dispatch import main

pytestmark = pytest.mark.quick  # the core: nox -s quick


@pytest.mark.parametrize("strict", [False, True])
def test_a_candidate_that_fails_promise_11_never_passes(tmp_path, capsys, strict):
    """Recorded, not judged against the baseline; but a check of it that failed fails the candidate's own answer."""
    baseline = rf.completed("2.14.1", observed_11="RuntimeError: no accelerator")
    candidate = rf.completed("2.15.0", observed_11="dropped the hint: not pinned")
    candidate["promises"]["11"]["devices"]["cpu"]["verdict"] = "failed"
    assert gate(tmp_path, baseline, candidate, *(["--strict"] if strict else [])) == 1
    out = capsys.readouterr().out
    assert ("recorded (RuntimeError: no accelerator) -> failed (dropped the hint: not pinned) (recorded, not judged)") in out
    assert [line for line in out.splitlines() if line.startswith("CANDIDATE")] == [
        "CANDIDATE NOT CLEAN: promise 11 (pin_memory=True with no accelerator (implementation-defined)) on cpu: "
        "failed: dropped the hint: not pinned"]
    assert out.rstrip().splitlines()[-1].startswith("FAIL: the candidate's own answer is FAILED (1 reason(s) above)")


# --- the candidate's own answer (issue 22): never a pass when it is not clean ---------------------


def _unattributed(data):
    data["unattributed_failures"] = [{"test": "conformance/test_contract.py::TestContract::test_x", "message":
                                      "E   RuntimeError: boom\nE   in a fixture, outside any promise's check"}]


def _errored(data):
    data["counts"]["errors"] = 2


def _fails_11(data):
    data["promises"]["11"]["devices"]["cpu"] = {"verdict": "failed", "passed": 1, "failed": 1, "skipped": 0,
                                                "failures": [rf.failure("test_pin_memory", "neither raised nor dropped",
                                                                        REPRODUCER)]}


# case -> (edit of the candidate, the one CANDIDATE NOT CLEAN line it must print)
NOT_CLEAN = {
    "unattributed failure": (_unattributed, "conformance/test_contract.py::TestContract::test_x: "
                                            "E   in a fixture, outside any promise's check"),
    "tests that errored": (_errored, "2 test(s) errored outside any promise's check"),
    "promise 11 failed": (_fails_11, "promise 11 (pin_memory=True with no accelerator (implementation-defined)) on cpu: "
                                     "failed: test_pin_memory: neither raised nor dropped"),
}


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("case", list(NOT_CLEAN))
@pytest.mark.parametrize("baseline_too", [False, True], ids=["baseline-clean", "baseline-alike"])
def test_a_candidate_whose_own_answer_is_failed_never_passes(tmp_path, capsys, case, strict, baseline_too):
    """Issue 22: the gate said exit 0, even with --strict, for these; the baseline failing alike changes nothing."""
    edit, reason = NOT_CLEAN[case]
    baseline, candidate = rf.completed("2.14.1"), rf.completed("2.15.0")
    edit(candidate)
    if baseline_too:
        edit(baseline)
    assert gate(tmp_path, baseline, candidate, *(["--strict"] if strict else [])) == 1
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("CANDIDATE")] == [f"CANDIDATE NOT CLEAN: {reason}"]
    assert out.rstrip().splitlines()[-1] == (
        "FAIL: the candidate's own answer is FAILED (1 reason(s) above), whatever the baseline's was")
    assert "PASS" not in out


def test_every_reason_the_candidate_is_not_clean_is_its_own_line(tmp_path, capsys):
    candidate = rf.completed("2.15.0", failed={("2", "cpu"): [rf.failure("test_zeroed", "not\nzero", None)]})
    for edit, _ in NOT_CLEAN.values():
        edit(candidate)
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("CANDIDATE NOT CLEAN: ")]
    assert len(lines) == 3, out  # promise 2, promise 11, the unattributed failure (errors then add no line of their own)
    assert "CANDIDATE NOT CLEAN: promise 2 (Zeroed) on cpu: failed: test_zeroed: zero" in lines
    assert "REGRESSION 1: promise 2 (Zeroed) on cpu: passed -> failed" in out
    assert out.rstrip().splitlines()[-1].startswith("FAIL: 1 regression(s)"), "a regression is still named first"


def test_a_candidate_with_no_verdict_on_a_device_not_compared_is_no_pass(tmp_path, capsys):
    """--device cpu compares cpu only; the candidate was asked for cuda too and has no verdict there."""
    candidate = rf.completed("2.15.0")
    candidate["requested"]["device"] = "all"
    candidate["devices"]["cuda"] = {"status": "skipped", "reason": "no CUDA device"}
    assert gate(tmp_path, rf.completed("2.14.1"), candidate, "--device", "cpu") == 2
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("CANDIDATE NOT CLEAN: ")]
    assert len(lines) == APPLY_ON_CUDA and all(line.endswith("on cuda: untested: no CUDA device") for line in lines)
    assert out.rstrip().splitlines()[-1] == (
        f"NO PASS: the candidate's own answer is UNTESTED ({APPLY_ON_CUDA} reason(s) above): "
        "nothing to compare where it has no verdict")


def test_a_candidate_that_failed_on_a_device_not_compared_never_passes(tmp_path, capsys):
    baseline = rf.completed("2.14.1", cuda=True)
    candidate = rf.completed("2.15.0", cuda=True, failed={("10", "cuda"): [rf.failure("test_nonblocking", "stale", None)]})
    assert gate(tmp_path, baseline, candidate, "--device", "cpu") == 1
    out = capsys.readouterr().out
    assert "CANDIDATE NOT CLEAN: promise 10 (Devices) on cuda: failed: test_nonblocking: stale" in out.splitlines()


def test_the_gate_help_states_every_exit_code(capsys):
    assert main(["gate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for words in ("exit 0: may upgrade", "1: a regression (with its reproducer), or the candidate's own answer is FAILED",
                  "2: nothing to compare"):
        assert words in text, text


def waived(result: dict, promise: str, reason: str = "ours is never built in a thread") -> dict:
    result["promises"][promise]["devices"]["cpu"] = {
        "verdict": "waived", "passed": 3, "failed": 0, "skipped": 1, "reason": reason,
        "waived_tests": [{"test": "tests/test_ours.py::TestOurs::test_x", "reason": reason}]}
    return result


def test_a_promise_waived_in_both_cells_is_not_compared_and_the_rest_may_pass(tmp_path, capsys):
    """Issue 21, item 2: the team's opt-out on both sides is no gap and no pass; the gate judges the rest."""
    assert gate(tmp_path, waived(rf.completed("2.14.1"), "12"), waived(rf.completed("2.15.0"), "12")) == 0
    out = capsys.readouterr().out
    assert "NOT COMPARED: promise 12 (No side effects on the caller) on cpu: waived in both cells " \
           "(ours is never built in a thread)" in out
    assert "CANDIDATE NOT CLEAN" not in out
    assert out.rstrip().splitlines()[-1].startswith(f"PASS: all {JUDGED_ON_CPU - 1} promise checks")


def test_a_promise_waived_in_the_candidate_only_is_a_gap(tmp_path, capsys):
    assert gate(tmp_path, rf.completed("2.14.1"), waived(rf.completed("2.15.0"), "12")) == 2
    assert "no verdict for promise 12 (No side effects on the caller) on cpu: waived (ours is never built in a thread)" \
        in errors(capsys)[1]


def test_a_waiver_does_not_hide_another_gap_of_the_candidate(tmp_path, capsys):
    candidate = waived(rf.completed("2.15.0"), "12")
    candidate["promises"]["5"]["devices"]["cpu"] = {"verdict": "skipped", "reason": "numpy missing"}
    assert gate(tmp_path, waived(rf.completed("2.14.1"), "12"), candidate) == 2
