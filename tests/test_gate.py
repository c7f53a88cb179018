"""gate: baseline cell vs candidate cell -> exit 0, 1 (regression) or 2 (cannot compare).

The gate compares verdicts only: every promise and device it is asked about needs a verdict
on both sides, or it refuses (exit 2) naming each gap. Nothing untested is ever a pass.
"""

from __future__ import annotations

import html
import json
import os
import stat
from pathlib import Path

import pytest
import result_factory as rf
from malformed_results import MALFORMED
from markdown_text import outside_code

from cpugpu_conformance import results
from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.promises import PROMISES, RECORDED_ONLY, applies

pytestmark = pytest.mark.quick  # the core: nox -s quick

# Pairs a clean CPU cell has verdicts for, judged (not recorded); and promises that apply on CUDA.
JUDGED_ON_CPU = sum(1 for p in PROMISES if p not in RECORDED_ONLY and applies(p, "cpu"))
APPLY_ON_CUDA = sum(1 for p in PROMISES if applies(p, "cuda"))

REPRODUCER = "import torch\nb = torch.zeros(4)\nb.add_(1)  # raises on 2.15.0\n"


def gate(tmp_path: Path, baseline, candidate, *extra: str) -> int:
    """Run the gate on two results (dicts are written to files; paths are used as they are)."""
    paths = []
    for name, result in (("baseline.json", baseline), ("candidate.json", candidate)):
        if isinstance(result, dict):
            result = rf.write(tmp_path, name, result)
        paths.append(str(result))
    return main(["gate", "--baseline", paths[0], "--candidate", paths[1], *extra])


def test_same_verdicts_pass(tmp_path, capsys):
    assert gate(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0")) == 0
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1].startswith(f"PASS: all {JUDGED_ON_CPU} promise checks")
    assert "compared devices: cpu" in out and "WARNING" not in out


def test_a_failed_promise_is_a_regression_with_its_reproducer(tmp_path, capsys):
    candidate = rf.completed(
        "2.15.0", failed={("3", "cpu"): [rf.failure("test_mutable_outside_inference", "AssertionError: refused", REPRODUCER)]}
    )
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 1
    out = capsys.readouterr().out
    assert "REGRESSION 1: promise 3 (Mutable wherever they were made) on cpu: passed -> failed" in out
    assert "test_mutable_outside_inference" in out and "AssertionError: refused" in out
    # the reproducer is printed whole, indented, ready to copy
    assert "\n    import torch\n    b = torch.zeros(4)\n    b.add_(1)  # raises on 2.15.0\n" in out
    assert out.rstrip().splitlines()[-1] == f"FAIL: 1 regression(s) out of {JUDGED_ON_CPU} promise checks that passed in the baseline"


def errors(capsys) -> list[str]:
    captured = capsys.readouterr()
    assert captured.out == "", "a refused comparison prints no verdict"
    lines = captured.err.strip().splitlines()
    assert all(line.startswith("cpugpu-conformance gate: error: ") for line in lines), lines
    return [line.removeprefix("cpugpu-conformance gate: error: ") for line in lines]


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


def test_a_promise_that_already_failed_is_no_regression_and_a_fix_is_reported(tmp_path, capsys):
    """Not a regression, but the candidate still fails promise 2: its own answer fails the gate."""
    f = [rf.failure("test_zeroed", "not zero", None)]
    baseline = rf.completed("2.14.1", failed={("2", "cpu"): f, ("4", "cpu"): f})
    candidate = rf.completed("2.15.0", failed={("2", "cpu"): f})
    assert gate(tmp_path, baseline, candidate) == 1
    out = capsys.readouterr().out
    assert "fixed: promise 4 (Two storages) on cpu: failed (test_zeroed: not zero) -> passed" in out
    assert "REGRESSION" not in out and "PASS" not in out
    assert "CANDIDATE NOT CLEAN: promise 2 (Zeroed) on cpu: failed: test_zeroed: not zero" in out.splitlines()
    assert out.rstrip().splitlines()[-1] == "FAIL: the candidate's own answer is FAILED (1 reason(s) above), whatever the baseline's was"
    fixed_everything = rf.completed("2.15.0")
    assert gate(tmp_path, baseline, fixed_everything) == 0
    assert f"PASS: all {JUDGED_ON_CPU - 2} promise checks" in capsys.readouterr().out


def test_a_candidate_that_did_not_complete_is_refused(tmp_path, capsys):
    candidate = rf.incomplete("2.15.0", "crashed", "killed by SIGABRT; last lines of the log:\nFatal Python error: Aborted")
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 2
    lines = errors(capsys)
    assert lines[1].startswith("candidate torch-2.15.0 (") and lines[1].endswith("did not complete: crashed: killed by SIGABRT; last lines of the log")


@pytest.mark.parametrize("status", ["interrupted", "timed_out", "not_installed", "wrong_torch", "error"])
def test_no_incomplete_candidate_passes(tmp_path, capsys, status):
    assert gate(tmp_path, rf.completed("2.14.1"), rf.incomplete("2.15.0", status, "why")) == 2
    assert f"did not complete: {status.replace('_', ' ')}: why" in errors(capsys)[1]


@pytest.mark.parametrize("problem", ["missing", "not-json", "not-a-result"])
@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_an_unreadable_file_is_exit_2_naming_it(tmp_path, capsys, problem, side):
    bad = tmp_path / f"bad-{side}.json"
    if problem == "not-json":
        bad.write_text("{", encoding="utf-8")
    elif problem == "not-a-result":
        bad.write_text(json.dumps({"cell": "x"}), encoding="utf-8")
    good = rf.completed("2.14.1")
    args = (good, bad) if side == "candidate" else (bad, good)
    assert gate(tmp_path, *args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and err[0].startswith("cpugpu-conformance gate: error: ")


def test_promise_11_recording_something_else_is_a_warning_never_a_regression(tmp_path, capsys):
    baseline = rf.completed("2.14.1", observed_11="RuntimeError: no accelerator")
    candidate = rf.completed("2.15.0", observed_11="dropped the hint: not pinned")
    assert gate(tmp_path, baseline, candidate, "--strict") == 0
    out = capsys.readouterr().out
    assert ("WARNING: promise 11 (pin_memory=True with no accelerator (implementation-defined)) on cpu recorded something else: "
            "recorded (RuntimeError: no accelerator) -> recorded (dropped the hint: not pinned) (recorded, not judged)") in out


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


def test_observation_changes_warn_and_fail_only_with_strict(tmp_path, capsys):
    changed = dict(rf.BASE_OBSERVATIONS, **{"pin_memory.no_accelerator": {"value": False}})
    baseline, candidate = rf.completed("2.14.1"), rf.completed("2.15.0", observations=changed)
    assert gate(tmp_path, baseline, candidate) == 0
    out = capsys.readouterr().out
    assert (
        "WARNING: observed torch behaviour pin_memory.no_accelerator: "
        "raises RuntimeError: Cannot access accelerator device -> false"
    ) in out
    assert gate(tmp_path, baseline, candidate, "--strict") == 1
    out = capsys.readouterr().out
    assert "CHANGED: observed torch behaviour pin_memory.no_accelerator" in out
    assert out.rstrip().splitlines()[-1] == "FAIL (--strict): 1 change(s) in observed torch behaviour"


def test_a_reworded_probe_description_is_no_change(tmp_path, capsys):
    reworded = {k: dict(v, doc="reworded") for k, v in rf.BASE_OBSERVATIONS.items()}
    assert gate(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0", observations=reworded), "--strict") == 0
    assert "observed torch behaviour" not in capsys.readouterr().out


def test_a_probe_that_appears_or_disappears_is_a_change(tmp_path, capsys):
    fewer = {k: v for k, v in rf.BASE_OBSERVATIONS.items() if k != "numpy.dtypes"}
    assert gate(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0", observations=fewer), "--strict") == 1
    assert f"numpy.dtypes: [\"bool\", \"float32\", \"int64\"] -> {results.NOT_PROBED}" in capsys.readouterr().out


def test_an_entry_a_table_probe_lost_is_the_newer_torchs_and_the_job_summary_says_so(tmp_path, capsys):
    table = {"float32": {"numpy": "float32"}, "float8_e4m3fnuz": {"numpy": "raises TypeError"}}
    shrunk = {"float32": {"numpy": "float32"}}
    summary = tmp_path / "summary.md"
    baseline = rf.completed("2.14.1", observations={"dtypes": {"value": table}})
    candidate = rf.completed("2.15.0", observations={"dtypes": {"value": shrunk}})
    assert gate(tmp_path, baseline, candidate, "--job-summary", str(summary)) == 0
    line = ('observed torch behaviour dtypes.float8_e4m3fnuz: {"numpy": "raises TypeError"} -> (no such dtype: '
            'torch 2.15.0 has no float8_e4m3fnuz)')
    assert f"WARNING: {line}" in capsys.readouterr().out
    assert "no such dtype: torch 2.15.0 has no float8&#95;e4m3fnuz" in summary.read_text()
    assert results.NOT_PROBED not in summary.read_text()


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


def test_a_regression_on_cuda_is_caught_when_both_tested_it(tmp_path, capsys):
    candidate = rf.completed("2.15.0", cuda=True, failed={("10", "cuda"): [rf.failure("test_nonblocking", "stale", REPRODUCER)]})
    assert gate(tmp_path, rf.completed("2.14.1", cuda=True), candidate) == 1
    out = capsys.readouterr().out
    assert "compared devices: cpu, cuda" in out
    assert "promise 10 (Devices) on cuda: passed -> failed" in out and "PASS: all" not in out


def test_a_device_the_candidate_skipped_is_exit_2(tmp_path, capsys):
    candidate = rf.completed("2.15.0")
    candidate["devices"]["cpu"] = {"status": "skipped", "reason": "no such device"}
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 2
    assert "on cpu: untested (no such device)" in errors(capsys)[1]


def test_different_implementations_are_flagged(tmp_path, capsys):
    """Different profiles are refused (like with like: tests/test_gate_settings.py); a different class is a warning."""
    candidate = rf.completed("2.15.0")
    candidate["impl"] = "cpugpu_conformance.variants:PreFixBuffer"
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 0
    out = capsys.readouterr().out
    assert "WARNING: the cells tested different implementations" in out


def test_a_table_valued_probe_changes_entry_by_entry(tmp_path, capsys):
    table = {"float32": {"numpy": "float32"}, "bfloat16": {"numpy": "raises TypeError"}}
    grown = dict(table, bcomplex32={"numpy": "raises TypeError"}, float32={"numpy": "float64"})
    baseline = rf.completed("2.13.0", observations={"dtypes": {"value": table}})
    candidate = rf.completed("2.14.1", observations={"dtypes": {"value": grown}})
    assert gate(tmp_path, baseline, candidate) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("WARNING")]
    # Both cells ran the dtypes probe: the older torch has no bcomplex32, which is what the line says
    # (issue 31, item 5), not that its run had no such probe.
    assert warnings == [
        'WARNING: observed torch behaviour dtypes.bcomplex32: (no such dtype: torch 2.13.0 has no bcomplex32) -> '
        '{"numpy": "raises TypeError"}',
        'WARNING: observed torch behaviour dtypes.float32: {"numpy": "float32"} -> {"numpy": "float64"}',
    ]


def test_an_unknown_device_is_one_line_exit_2(tmp_path, capsys):
    assert gate(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0"), "--device", "tpu") == 2
    assert errors(capsys) == ["--device 'tpu': unknown device; expected one of cpu, cuda, sim"]


# --- a baseline that is not clean, a file against itself, names from a file ---------------------


PRE_FIX = {("3", "cpu"): [rf.failure("test_mutable_outside_inference", "RuntimeError: Inplace update to inference tensor",
                                     REPRODUCER)]}


@pytest.mark.parametrize("strict", [False, True])
def test_a_failed_cell_against_itself_is_no_regression_but_says_so(tmp_path, capsys, strict):
    """The pre-fix class's cell against itself: promise 3 fails in both. Not a regression, but
    the candidate's own answer is FAILED: exit 1, with or without --strict. Each promise failing
    in both is named, and comparing a file with itself is a warning of its own."""
    path = rf.write(tmp_path, "prefix.json", rf.completed("2.13.0", failed=PRE_FIX))
    assert gate(tmp_path, path, path, *(["--strict"] if strict else [])) == 1
    out = capsys.readouterr().out
    assert ("STILL FAILING: promise 3 (Mutable wherever they were made) on cpu: failed (test_mutable_outside_inference: "
            "RuntimeError: Inplace update to inference tensor) -> failed (test_mutable_outside_inference: RuntimeError: "
            "Inplace update to inference tensor) (failed in the baseline too: not a regression)") in out
    assert (f"WARNING: the baseline and the candidate are the same file ({path}): "
            "a cell compared with itself shows no change, whatever the torch") in out
    assert ("CANDIDATE NOT CLEAN: promise 3 (Mutable wherever they were made) on cpu: failed: "
            "test_mutable_outside_inference: RuntimeError: Inplace update to inference tensor") in out.splitlines()
    assert out.rstrip().splitlines()[-1] == (
        "FAIL: the candidate's own answer is FAILED (1 reason(s) above), whatever the baseline's was")


def test_a_copy_of_the_same_result_is_a_warning_too(tmp_path, capsys):
    result = rf.completed("2.13.0")
    assert gate(tmp_path, result, result) == 0
    assert ("WARNING: the baseline and the candidate are the same result (one file copied?): "
            "a cell compared with itself shows no change, whatever the torch") in capsys.readouterr().out


def test_a_promise_still_failing_does_not_hide_a_regression(tmp_path, capsys):
    both = {**PRE_FIX, ("2", "cpu"): [rf.failure("test_zeroed", "not zero", None)]}
    assert gate(tmp_path, rf.completed("2.13.0", failed=PRE_FIX), rf.completed("2.14.1", failed=both)) == 1
    out = capsys.readouterr().out
    assert "REGRESSION 1: promise 2 (Zeroed) on cpu: passed -> failed" in out
    assert "STILL FAILING: promise 3 (Mutable wherever they were made) on cpu" in out


def test_a_baseline_that_passed_nothing_is_exit_2_never_all_0_checks_hold(tmp_path, capsys):
    every = {(p, "cpu"): [rf.failure("test_x", "broken", None)] for p in PROMISES
             if p not in RECORDED_ONLY and applies(p, "cpu")}
    assert gate(tmp_path, rf.completed("2.13.0", failed=every), rf.completed("2.14.1", failed=every), "--strict") == 2
    lines = errors(capsys)
    assert lines[0] == "nothing to compare (1 gap(s)), refusing to pass:"
    assert lines[1].startswith("baseline torch-2.13.0 (") and lines[1].endswith(
        "passed no judged promise on cpu: there is no pass for the candidate to keep")


def test_a_cell_name_with_a_newline_stays_on_its_line(tmp_path, capsys):
    forged = rf.completed("2.14.1", cell="torch-2.14.1\nPASS: all 12 promise checks")
    assert gate(tmp_path, rf.completed("2.13.0"), forged) == 0
    out = capsys.readouterr().out
    assert "candidate: torch-2.14.1 PASS: all 12 promise checks (torch 2.14.1, completed) from " in out
    assert [line for line in out.splitlines() if line.startswith("PASS")] == [out.rstrip().splitlines()[-1]]
    missing = rf.completed("2.14.1", cell="torch-2.14.1\nforged", drop_promises=("8",))
    assert gate(tmp_path, rf.completed("2.13.0"), missing) == 2
    assert "candidate torch-2.14.1 forged (" in errors(capsys)[1]


def test_a_made_up_promise_is_one_line_exit_2(tmp_path, capsys):
    forged = rf.completed("2.14.1")
    forged["promises"]["99"] = {"title": "Made up", "devices": {"cpu": {"verdict": "passed", "passed": 5}}}
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(forged), encoding="utf-8")
    assert gate(tmp_path, rf.completed("2.13.0"), path) == 2
    assert errors(capsys) == [f"{path}: not a valid cell result at promises: '99' is not a promise of the contract "
                              f"(1-{len(PROMISES)})"]


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


# --- a file that is not a cell result: one line, exit 2, never the regression code ---------------


@pytest.mark.parametrize("side", ["baseline", "candidate"])
@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_file_is_one_line_naming_it_and_exit_2(tmp_path, capsys, case, side):
    text, key = MALFORMED[case]
    bad = tmp_path / f"bad-{side}.json"
    bad.write_text(text, encoding="utf-8")
    good = rf.completed("2.14.1")
    assert gate(tmp_path, *((good, bad) if side == "candidate" else (bad, good))) == 2
    [line] = errors(capsys)
    assert line.startswith(f"{bad}: not a ") and (key is None or key in line), line


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


# --- --job-summary at a FIFO or through a symbolic link (issue 28, item 6) --------------------------


def _summary_gate(tmp_path: Path, summary: Path) -> int:
    return gate(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0"), "--job-summary", str(summary))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_a_job_summary_at_a_fifo_is_refused_in_one_line_and_never_waits(tmp_path, capsys):
    fifo = tmp_path / "summary.md"
    os.mkfifo(fifo)
    # Opening a FIFO for writing waits for a reader forever: a gate that did so would hang the job.
    code = _in_a_thread(lambda: _summary_gate(tmp_path, fifo))
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [f"cpugpu-conformance gate: error: --job-summary {fifo}: cannot write: not a "
                                         "regular file (a FIFO); the summary is appended only to a regular file"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="symbolic links")
@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_a_job_summary_through_a_symbolic_link_is_refused_and_its_target_untouched(tmp_path, capsys, dangling):
    target = tmp_path / "precious.txt"
    if not dangling:
        target.write_text("keep me\n")
    link = tmp_path / "summary.md"
    link.symlink_to(target)
    assert _in_a_thread(lambda: _summary_gate(tmp_path, link)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"cpugpu-conformance gate: error: --job-summary {link}: cannot write: a symbolic link (to {target}); the "
        "summary is appended only to a regular file, never through a link"]
    assert (target.read_text() == "keep me\n") if not dangling else not target.exists()
    assert link.is_symlink()


def test_a_job_summary_that_is_a_regular_file_or_new_is_appended_to(tmp_path, capsys):
    existing = tmp_path / "summary.md"
    existing.write_text("before\n")
    assert _summary_gate(tmp_path, existing) == 0
    assert existing.read_text().startswith("before\n### cpugpu-conformance gate: PASS")
    new = tmp_path / "new.md"
    assert _summary_gate(tmp_path, new) == 0
    assert new.read_text().startswith("### cpugpu-conformance gate: PASS")


def _in_a_thread(call, timeout: float = 20):
    """``call()`` in a thread: a gate that blocks (on a FIFO) fails the test instead of hanging it."""
    import threading

    done: list = []
    thread = threading.Thread(target=lambda: done.append(call()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert done, f"the gate still runs after {timeout} s (blocked opening the job summary?)"
    return done[0]


# --- Markdown in failure messages is escaped in the job summary (issue 28, item 6) ------------------

HOSTILE_MESSAGE = ("AssertionError: see [the fix](https://evil.example/phish) ![pwned](https://evil.example/x.png) "
                   "**now** _or_ `never` ~~ok~~ www.evil.example mail@evil.example")


def test_markdown_in_a_failure_message_is_shown_as_text_in_the_job_summary(tmp_path, capsys):
    failing = {("3", "cpu"): [rf.failure("test_mutable[**x**]", HOSTILE_MESSAGE, REPRODUCER)]}
    summary = tmp_path / "summary.md"
    code = gate(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0", failed=failing), "--job-summary", str(summary))
    assert code == 1
    text = outside_code(summary.read_text())
    # No link, image, emphasis, code span, strikethrough or autolink can form outside the fences:
    for syntax in ("[the fix]", "](https", "![pwned]", "**now**", "**x**", "_or_", "`never`", "~~ok~~", "://",
                   "www.evil", "mail@evil", "[**x**]"):
        assert syntax not in text, (syntax, text)
    row = next(line for line in text.splitlines() if line.startswith("| 3 "))
    assert HOSTILE_MESSAGE in html.unescape(row), "the message itself is all there, as text"
    assert html.unescape(text).count("test_mutable[**x**]") >= 2  # in the table and the reproducer's summary


# --- a hand-made candidate: another torch than it asked for, duplicate keys (issue 28, item 6) -------


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_a_cell_that_ran_another_torch_than_it_asked_for_is_refused(tmp_path, capsys, side):
    forged = rf.completed("2.15.0")
    forged["environment"]["torch"] = "2.14.1+cpu"  # the baseline's torch, in a cell asked as 2.15.0
    pair = (forged, rf.completed("2.15.0")) if side == "baseline" else (rf.completed("2.14.1"), forged)
    assert gate(tmp_path, *pair) == 2
    line, = errors(capsys)
    assert line == (f"{tmp_path / (side + '.json')}: not a valid cell result: environment.torch is '2.14.1+cpu', but "
                    "the cell asked for torch '2.15.0' (requested.torch); a cell that got another torch is 'wrong "
                    "torch', never completed")


def test_a_local_label_or_a_shorter_spelling_is_the_same_torch(tmp_path, capsys):
    candidate = rf.completed("2.15.0")
    candidate["environment"]["torch"] = "2.15+cu128"
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 0


def test_a_result_file_with_a_key_twice_is_refused(tmp_path, capsys):
    text = json.dumps(rf.completed("2.15.0"), indent=2, sort_keys=True)
    # The verdict of promise 3 twice: Python's json keeps the last one, other readers the first.
    verdict = '"verdict": "passed"'
    first = text.index(verdict)
    twice = text[:first] + '"verdict": "failed", ' + text[first:]
    candidate = tmp_path / "candidate.json"
    candidate.write_text(twice)
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 2
    line, = errors(capsys)
    assert line == (f"{candidate}: not strict JSON: the key 'verdict' appears twice in one object (which one counts "
                    "depends on the reader): write it once")
