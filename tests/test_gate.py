"""gate: baseline cell vs candidate cell -> exit 0, 1 (regression) or 2 (cannot compare)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import result_factory as rf

from cpugpu_conformance.__main__ import main

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
    assert out.rstrip().splitlines()[-1].startswith("PASS: all 10 promise checks")
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
    assert out.rstrip().splitlines()[-1] == "FAIL: 1 regression(s) out of 10 promise checks that passed in the baseline"


def test_a_promise_missing_from_the_candidate_is_a_regression(tmp_path, capsys):
    assert gate(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0", drop_promises=("8",))) == 1
    assert "promise 8 (Partial copies) on cpu: passed -> missing" in capsys.readouterr().out


def test_a_promise_skipped_in_the_candidate_is_a_regression(tmp_path, capsys):
    candidate = rf.completed("2.15.0")
    candidate["promises"]["5"]["devices"]["cpu"] = {"verdict": "skipped", "reason": "numpy missing"}
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 1
    assert "promise 5 (A true NumPy view) on cpu: passed -> skipped" in capsys.readouterr().out


def test_a_promise_that_already_failed_is_no_regression_and_a_fix_is_reported(tmp_path, capsys):
    f = [rf.failure("test_zeroed", "not zero", None)]
    baseline = rf.completed("2.14.1", failed={("2", "cpu"): f, ("4", "cpu"): f})
    candidate = rf.completed("2.15.0", failed={("2", "cpu"): f})
    assert gate(tmp_path, baseline, candidate) == 0
    out = capsys.readouterr().out
    assert "fixed: promise 4 (Two storages) on cpu: failed -> passed" in out
    assert "REGRESSION" not in out and "PASS: all 8 promise checks" in out


def test_a_candidate_that_did_not_complete_fails_the_gate(tmp_path, capsys):
    candidate = rf.incomplete("2.15.0", "crashed", "collected 40 items\nFatal Python error: Aborted")
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 1
    out = capsys.readouterr().out
    assert "REGRESSION: candidate cell did not complete: crashed" in out
    assert "    Fatal Python error: Aborted" in out
    assert "PASS" not in out


@pytest.mark.parametrize("status", ["timed_out", "not_installed", "wrong_torch", "error"])
def test_no_incomplete_candidate_passes(tmp_path, capsys, status):
    assert gate(tmp_path, rf.completed("2.14.1"), rf.incomplete("2.15.0", status, "why")) == 1
    assert f"did not complete: {status}" in capsys.readouterr().out


def test_a_baseline_that_did_not_complete_is_exit_2(tmp_path, capsys):
    assert gate(tmp_path, rf.incomplete("2.14.1", "timed_out", "limit"), rf.completed("2.15.0")) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "baseline cell torch-2.14.1" in err and "timed_out" in err


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


def test_promise_11_never_fails_the_gate_but_a_change_is_a_warning(tmp_path, capsys):
    baseline = rf.completed("2.14.1", observed_11="RuntimeError: no accelerator")
    candidate = rf.completed("2.15.0", observed_11="dropped the hint: not pinned")
    candidate["promises"]["11"]["devices"]["cpu"]["verdict"] = "failed"  # even a 'failed' record is not judged
    assert gate(tmp_path, baseline, candidate, "--strict") == 0
    out = capsys.readouterr().out
    assert "WARNING: promise 11" in out and "'dropped the hint: not pinned'" in out


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
    assert "numpy.dtypes: [\"bool\", \"float32\", \"int64\"] -> (not probed)" in capsys.readouterr().out


def test_only_devices_tested_by_both_are_compared(tmp_path, capsys):
    baseline = rf.completed("2.14.1", cuda=True)
    # the candidate ran on a machine without a GPU: cuda skipped, so its cuda verdicts are not compared
    candidate = rf.completed("2.15.0", cuda=False)
    assert gate(tmp_path, baseline, candidate) == 0
    out = capsys.readouterr().out
    assert "compared devices: cpu" in out
    assert "WARNING: device cuda was tested in the baseline but not in the candidate (skipped: no CUDA device" in out


def test_a_regression_on_cuda_is_caught_when_both_tested_it(tmp_path, capsys):
    candidate = rf.completed("2.15.0", cuda=True, failed={("10", "cuda"): [rf.failure("test_nonblocking", "stale", REPRODUCER)]})
    assert gate(tmp_path, rf.completed("2.14.1", cuda=True), candidate) == 1
    out = capsys.readouterr().out
    assert "compared devices: cpu, cuda" in out
    assert "promise 10 (Devices) on cuda: passed -> failed" in out and "PASS: all" not in out


def test_no_device_tested_by_both_is_exit_2(tmp_path, capsys):
    candidate = rf.completed("2.15.0")
    candidate["devices"]["cpu"] = {"status": "skipped", "reason": "--device cuda"}
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 2
    assert "no device was tested by both cells" in capsys.readouterr().err


def test_different_implementations_or_profiles_are_flagged(tmp_path, capsys):
    candidate = rf.completed("2.15.0", profile="default")
    candidate["impl"] = "cpugpu_conformance.variants:PreFixBuffer"
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 0
    out = capsys.readouterr().out
    assert "WARNING: the cells tested different implementations" in out
    assert "WARNING: the cells ran different hypothesis profiles" in out


def test_a_table_valued_probe_changes_entry_by_entry(tmp_path, capsys):
    table = {"float32": {"numpy": "float32"}, "bfloat16": {"numpy": "raises TypeError"}}
    grown = dict(table, bcomplex32={"numpy": "raises TypeError"}, float32={"numpy": "float64"})
    baseline = rf.completed("2.13.0", observations={"dtypes": {"value": table}})
    candidate = rf.completed("2.14.1", observations={"dtypes": {"value": grown}})
    assert gate(tmp_path, baseline, candidate) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("WARNING")]
    assert warnings == [
        'WARNING: observed torch behaviour dtypes.bcomplex32: (not probed) -> {"numpy": "raises TypeError"}',
        'WARNING: observed torch behaviour dtypes.float32: {"numpy": "float32"} -> {"numpy": "float64"}',
    ]
