"""gate: what it finds comparing a baseline cell with a candidate that both have verdicts: a pass
kept, a regression (exit 1, with its reproducer), a fix, a promise still failing, a recorded
promise or an observation of torch that changed (a warning; a failure only with --strict).
"""

from __future__ import annotations

import pytest
import result_factory as rf
from gate_runner import JUDGED_ON_CPU, REPRODUCER, gate

from cpugpu_conformance import results

pytestmark = pytest.mark.quick  # the core: nox -s quick


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


def test_promise_11_recording_something_else_is_a_warning_never_a_regression(tmp_path, capsys):
    baseline = rf.completed("2.14.1", observed_11="RuntimeError: no accelerator")
    candidate = rf.completed("2.15.0", observed_11="dropped the hint: not pinned")
    assert gate(tmp_path, baseline, candidate, "--strict") == 0
    out = capsys.readouterr().out
    assert ("WARNING: promise 11 (pin_memory=True with no accelerator (implementation-defined)) on cpu recorded something else: "
            "recorded (RuntimeError: no accelerator) -> recorded (dropped the hint: not pinned) (recorded, not judged)") in out


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


def test_a_regression_on_cuda_is_caught_when_both_tested_it(tmp_path, capsys):
    candidate = rf.completed("2.15.0", cuda=True, failed={("10", "cuda"): [rf.failure("test_nonblocking", "stale", REPRODUCER)]})
    assert gate(tmp_path, rf.completed("2.14.1", cuda=True), candidate) == 1
    out = capsys.readouterr().out
    assert "compared devices: cpu, cuda" in out
    assert "promise 10 (Devices) on cuda: passed -> failed" in out and "PASS: all" not in out


@pytest.mark.parametrize("candidate_impl", [
    "cpugpu_conformance.reference:CpuGpuBuffer",
    "ours:OurBuffer built by test_ours.TestOurs.make_buffer (source sha256 0123456789ab)",
], ids=["another class", "the class through an adapter"])
def test_different_implementations_are_refused(tmp_path, capsys, candidate_impl):
    """Like with like, as for profiles (tests/test_gate_settings.py): a candidate run against another
    class, or through an adapter, passing says nothing of the baseline's class (it was exit 0, a warning)."""
    baseline, candidate = rf.completed("2.14.1"), rf.completed("2.15.0")
    baseline["impl"], candidate["impl"] = "ours:OurBuffer", candidate_impl
    assert gate(tmp_path, baseline, candidate) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert "the cells tested different implementations: baseline 'ours:OurBuffer', candidate " in line, line


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


# --- a baseline that is not clean, a file against itself ---------------------------------------


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
