"""The gate judges MutableStateTests classes (issue 31, item 1): a result file of a run that holds only
MutableStateTests classes is compared on its ``mutable_state`` section alone (it made the gate exit 2,
"nothing to compare (24 gaps)", even fixed against fixed). A regression is a state class that passed
and now fails, with its paths and reproducer in the answer and the job summary; one line says the
buffer promises were not part of the run. In a run with a buffer class too, the classes are compared
beside the promises.

The result files come from real runs of the plugin (a fixed object and one with the seed's bug), so
the gate reads what the library writes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import forkserver
import pytest
import result_factory as rf
from suite_runner import outside_env
from third_party import SEED_STATES

from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.results import CellResult

STATES = SEED_STATES + '''

class TestEngine(MutableStateTests):
    def make_state(self, device):
        return {cls}(device)

    def warm_up(self, state):
        state.warm_up()
'''
CLS = "test_engine.TestEngine"
NOT_IN_RUN = ("NOT COMPARED: the buffer promises were not part of the run: both cells hold only MutableStateTests "
              "classes (no buffer class under test), so their mutable state alone is compared")


def _run_states(folder: Path, cls: str) -> dict:
    folder.mkdir(parents=True)
    (folder / "conftest.py").write_text('pytest_plugins = ["cpugpu_conformance.testing.plugin"]\n')
    (folder / "test_engine.py").write_text(STATES.format(cls=cls))
    result = folder / "cell.json"
    proc = forkserver.run_python(["-m", "pytest", "-p", "no:cacheprovider", "-q", "--cpugpu-cell-result", str(result)],
                                 cwd=folder, env=outside_env(), timeout=300)
    assert proc.returncode == (0 if cls == "Fixed" else 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(result.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    where = tmp_path_factory.mktemp("states")
    return {cls: _run_states(where / cls, cls) for cls in ("Fixed", "Lazy")}


def gate(tmp_path: Path, baseline: dict, candidate: dict, *extra: str) -> int:
    paths = []
    for name, data in (("baseline.json", baseline), ("candidate.json", candidate)):
        path = tmp_path / name
        path.write_text(json.dumps(data))
        paths.append(str(path))
    return main(["gate", "--baseline", paths[0], "--candidate", paths[1], *extra])


def test_fixed_against_fixed_passes_and_says_once_that_the_buffer_promises_were_not_in_the_run(tmp_path, capsys, runs):
    summary = tmp_path / "summary.md"
    assert gate(tmp_path, runs["Fixed"], runs["Fixed"], "--job-summary", str(summary)) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert captured.err == ""
    assert out.count(NOT_IN_RUN) == 1 and "not requested" not in out and "promise 1 " not in out
    assert out.rstrip().splitlines()[-1].startswith(
        "PASS: all 1 MutableStateTests class(es) that passed in the baseline pass in the candidate")
    text = summary.read_text()
    assert text.startswith("### cpugpu-conformance gate: PASS") and "the buffer promises were not part of the run" in text


def test_a_state_class_that_passed_and_now_fails_is_a_regression_with_its_paths_and_reproducer(tmp_path, capsys, runs):
    summary = tmp_path / "summary.md"
    assert gate(tmp_path, runs["Fixed"], runs["Lazy"], "--job-summary", str(summary)) == 1
    out = capsys.readouterr().out
    assert NOT_IN_RUN in out
    assert f"REGRESSION 1: mutable state of {CLS}: passed -> failed" in out
    assert "  failed: test_engine.py::TestEngine::test_mutable_state[cpu-inference_mode] (cpu, inference_mode)" in out
    assert "    state.workspace: an inference tensor (made under torch.inference_mode())" in out
    assert "  reproducer:\n    # Reproducer: promises 3 and 12" in out and "    mutable_in_place('state.workspace'" in out
    assert out.rstrip().splitlines()[-1] == "FAIL: 1 regression(s) out of 1 MutableStateTests class(es) that passed in the baseline"
    text = summary.read_text()
    assert text.startswith("### cpugpu-conformance gate: FAIL")
    assert "#### Regressions (passed in the baseline, not in the candidate)" in text
    assert "| <code>test&#95;engine.TestEngine</code> | passed | failed |" in text
    assert "- <code>state.workspace</code>: an inference tensor" in text
    assert "```python\n# Reproducer: promises 3 and 12" in text


def _two_classes(first: dict, second: dict) -> dict:
    """A result with two state classes: the first's as test_engine.Kept, the second's as test_engine.Other."""
    both = copy.deepcopy(first)
    both["mutable_state"] = {"test_engine.Kept": copy.deepcopy(first["mutable_state"][CLS]),
                             "test_engine.Other": copy.deepcopy(second["mutable_state"][CLS])}
    return both


def test_a_state_class_that_failed_and_now_passes_is_fixed(tmp_path, capsys, runs):
    assert gate(tmp_path, _two_classes(runs["Fixed"], runs["Lazy"]), _two_classes(runs["Fixed"], runs["Fixed"])) == 0
    out = capsys.readouterr().out
    assert "fixed: mutable state of test_engine.Other: failed -> passed" in out
    assert out.rstrip().splitlines()[-1].startswith("PASS: all 1 MutableStateTests class(es) that passed")


def test_a_baseline_whose_every_state_class_failed_has_no_pass_to_keep(tmp_path, capsys, runs):
    assert gate(tmp_path, runs["Lazy"], runs["Fixed"]) == 2
    assert "passed no MutableStateTests class on cpu: there is no pass for the candidate to keep" in \
        capsys.readouterr().err


def test_a_state_class_failing_in_both_cells_is_still_failing_and_fails_the_gate(tmp_path, capsys, runs):
    assert gate(tmp_path, _two_classes(runs["Fixed"], runs["Lazy"]), _two_classes(runs["Fixed"], runs["Lazy"])) == 1
    out = capsys.readouterr().out
    assert "STILL FAILING: mutable state of test_engine.Other: failed -> failed (" in out
    assert "CANDIDATE NOT CLEAN: mutable state of test_engine.Other: failed:" in out


def test_a_state_class_the_candidate_did_not_run_is_a_gap(tmp_path, capsys, runs):
    candidate = copy.deepcopy(runs["Fixed"])
    candidate["mutable_state"] = {"test_engine.Other": candidate["mutable_state"][CLS]}
    assert gate(tmp_path, runs["Fixed"], candidate) == 2
    err = capsys.readouterr().err
    assert f"has no verdict for the mutable state of {CLS} on cpu: not in that cell's run" in err


def test_an_untested_state_class_is_a_gap_never_a_pass(tmp_path, capsys, runs):
    candidate = copy.deepcopy(runs["Fixed"])
    judged = candidate["mutable_state"][CLS]
    judged["verdict"] = "untested"
    judged["tests"][0].update(verdict="untested", why="deselected (-k)")
    assert gate(tmp_path, runs["Fixed"], candidate) == 2
    err = capsys.readouterr().err
    assert "candidate torch-" in err and f"mutable state of {CLS} on cpu: untested (" in err and "deselected (-k)" in err


@pytest.mark.parametrize("tests", ["none", "only skipped"])
def test_a_state_class_the_file_calls_passed_with_no_test_that_ran_is_untested(tmp_path, capsys, runs, tests):
    """A file whose class says passed, with no tests or only the contract's own skips, was a pass in the
    gate and in the cell's answer: nothing showed the object's state mutable."""
    candidate = copy.deepcopy(runs["Fixed"])
    judged = candidate["mutable_state"][CLS]
    judged["verdict"] = "passed"
    judged["tests"] = [] if tests == "none" else [dict(t, verdict="skipped", why="skipped") for t in judged["tests"]]
    answer = CellResult(candidate).answer()
    assert answer.kind == "untested" and f"mutable state of {CLS}: no test of it ran" in answer.lines, answer
    assert gate(tmp_path, runs["Fixed"], candidate) == 2
    assert f"has no verdict for the mutable state of {CLS} on cpu: untested (no test of it ran here)" in capsys.readouterr().err


def test_a_state_class_waived_in_both_cells_is_not_compared(tmp_path, capsys, runs):
    waived = copy.deepcopy(runs["Fixed"])
    waived["mutable_state"]["test_engine.Waived"] = {"verdict": "waived", "tests": [
        {"test": "test_engine.py::TestWaived::test_mutable_state[cpu-plain]", "verdict": "waived",
         "why": "not ours (ENG-1)", "device": "cpu"}]}
    assert gate(tmp_path, waived, waived) == 0
    assert "NOT COMPARED: mutable state of test_engine.Waived: waived in both cells (" in capsys.readouterr().out


def test_beside_a_buffer_class_the_state_classes_are_compared_too(tmp_path, capsys, runs):
    """A run with a buffer class and a MutableStateTests class: the promises and the class, each judged."""
    mixed_ok, mixed_bad = rf.completed("2.14.1"), rf.completed("2.15.0")
    mixed_ok["mutable_state"] = copy.deepcopy(runs["Fixed"]["mutable_state"])
    mixed_bad["mutable_state"] = copy.deepcopy(runs["Lazy"]["mutable_state"])
    assert gate(tmp_path, mixed_ok, mixed_bad) == 1
    out = capsys.readouterr().out
    assert NOT_IN_RUN not in out
    assert f"REGRESSION 1: mutable state of {CLS}: passed -> failed" in out
    last = out.rstrip().splitlines()[-1]
    assert last.startswith("FAIL: 1 regression(s) out of ") and "promise checks and 1 MutableStateTests class(es)" in last
