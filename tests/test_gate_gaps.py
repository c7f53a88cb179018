"""gate: exit 2 (cannot compare) where a promise and device it is asked about has no verdict on
either side: missing, skipped, no check that ran, a run that did not finish, a device not tested.
The gate refuses naming each gap; nothing untested is ever a pass.
"""

from __future__ import annotations

import pytest
import result_factory as rf
from gate_runner import APPLY_ON_CUDA, JUDGED_ON_CPU, errors, gate

from cpugpu_conformance.promises import PROMISES, RECORDED_ONLY, applies

pytestmark = pytest.mark.quick  # the core: nox -s quick


def test_a_promise_missing_from_the_candidate_is_exit_2_naming_it(tmp_path, capsys):
    assert gate(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0", drop_promises=("8",))) == 2
    lines = errors(capsys)
    assert lines[0] == "nothing to compare (1 gap(s)), refusing to pass:"
    assert "candidate torch-2.15.0" in lines[1] and "no verdict for promise 8 (Partial copies) on cpu: untested" in lines[1]


def test_a_promise_skipped_in_the_candidate_is_exit_2_naming_it(tmp_path, capsys):
    candidate = rf.completed("2.15.0")
    candidate["promises"]["5"]["devices"]["cpu"] = {"verdict": "skipped", "reason": "numpy missing"}
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 2
    assert "no verdict for promise 5 (A true NumPy view) on cpu: untested (numpy missing)" in errors(capsys)[1]


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_a_pass_with_no_check_that_ran_is_no_verdict(tmp_path, capsys, side):
    empty = rf.completed("2.14.1")
    empty["promises"]["2"]["devices"]["cpu"] = {"verdict": "passed", "passed": 0, "failed": 0, "skipped": 0}
    pair = (empty, rf.completed("2.15.0")) if side == "baseline" else (rf.completed("2.13.0"), empty)
    assert gate(tmp_path, *pair) == 2
    assert "untested (recorded as passed, but no check of it ran)" in errors(capsys)[1]


def test_a_baseline_that_tested_nothing_is_exit_2_never_all_0_checks_hold(tmp_path, capsys):
    """--device cuda on a machine without CUDA: every promise skipped. The old gate said 'all 0 hold'."""
    nothing = rf.completed("2.14.1")
    nothing["devices"] = {"cpu": {"status": "not_requested", "reason": "--device cuda"},
                          "cuda": {"status": "skipped", "reason": "no CUDA device"}}
    assert gate(tmp_path, nothing, rf.completed("2.15.0")) == 2
    lines = errors(capsys)
    # every promise that applies to cuda: the baseline skipped them, the candidate was never asked
    assert len(lines) == 1 + 2 * APPLY_ON_CUDA
    assert sum("baseline torch-2.14.1" in line and "on cuda: untested (no CUDA device)" in line for line in lines) == APPLY_ON_CUDA
    assert sum("candidate torch-2.15.0" in line and "on cuda: not requested" in line for line in lines) == APPLY_ON_CUDA


@pytest.mark.parametrize("status", ["interrupted", "timed_out", "crashed"])
def test_a_baseline_from_a_run_that_did_not_finish_is_exit_2(tmp_path, capsys, status):
    assert gate(tmp_path, rf.incomplete("2.14.1", status, "killed"), rf.completed("2.15.0")) == 2
    lines = errors(capsys)
    assert "baseline torch-2.14.1" in lines[1] and f"did not complete: {status.replace('_', ' ')}: killed" in lines[1]


def test_asking_for_a_promise_subset_run_is_exit_2(tmp_path, capsys):
    subset = rf.completed("2.15.0")
    subset["requested"]["promises"] = ["1", "3"]
    assert gate(tmp_path, rf.completed("2.14.1"), subset) == 2
    lines = errors(capsys)
    assert len(lines) == 1 + JUDGED_ON_CPU - 1  # promise 11 is recorded, so only 1 and 3 of the judged ones ran
    assert all("untested" not in line and "not requested" in line for line in lines[1:])


def test_a_candidate_that_did_not_complete_is_refused(tmp_path, capsys):
    candidate = rf.incomplete("2.15.0", "crashed", "killed by SIGABRT; last lines of the log:\nFatal Python error: Aborted")
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 2
    lines = errors(capsys)
    assert lines[1].startswith("candidate torch-2.15.0 (") and lines[1].endswith("did not complete: crashed: killed by SIGABRT; last lines of the log")


@pytest.mark.parametrize("status", ["interrupted", "timed_out", "not_installed", "wrong_torch", "error"])
def test_no_incomplete_candidate_passes(tmp_path, capsys, status):
    assert gate(tmp_path, rf.completed("2.14.1"), rf.incomplete("2.15.0", status, "why")) == 2
    assert f"did not complete: {status.replace('_', ' ')}: why" in errors(capsys)[1]


def test_a_device_the_candidate_did_not_test_is_refused_unless_left_out(tmp_path, capsys):
    baseline = rf.completed("2.14.1", cuda=True)
    # the candidate ran on a machine without a GPU: it has no cuda verdicts
    candidate = rf.completed("2.15.0", cuda=False)
    assert gate(tmp_path, baseline, candidate) == 2
    lines = errors(capsys)
    assert len(lines) == 1 + APPLY_ON_CUDA
    assert all(line.endswith("not requested (not requested: no CUDA device)") for line in lines[1:])
    assert gate(tmp_path, baseline, candidate, "--device", "cpu") == 0
    assert "compared devices: cpu\n" in capsys.readouterr().out


def test_a_device_the_candidate_skipped_is_exit_2(tmp_path, capsys):
    candidate = rf.completed("2.15.0")
    candidate["devices"]["cpu"] = {"status": "skipped", "reason": "no such device"}
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 2
    assert "on cpu: untested (no such device)" in errors(capsys)[1]


def test_an_unknown_device_is_one_line_exit_2(tmp_path, capsys):
    assert gate(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0"), "--device", "tpu") == 2
    assert errors(capsys) == ["--device 'tpu': unknown device; expected one of cpu, cuda, sim"]


def test_a_baseline_that_passed_nothing_is_exit_2_never_all_0_checks_hold(tmp_path, capsys):
    every = {(p, "cpu"): [rf.failure("test_x", "broken", None)] for p in PROMISES
             if p not in RECORDED_ONLY and applies(p, "cpu")}
    assert gate(tmp_path, rf.completed("2.13.0", failed=every), rf.completed("2.14.1", failed=every), "--strict") == 2
    lines = errors(capsys)
    assert lines[0] == "nothing to compare (1 gap(s)), refusing to pass:"
    assert lines[1].startswith("baseline torch-2.13.0 (") and lines[1].endswith(
        "passed no judged promise on cpu: there is no pass for the candidate to keep")
