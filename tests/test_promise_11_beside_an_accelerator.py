"""Promise 11 (a machine with no accelerator) is not applicable beside an accelerator (item 4): where it
applies, the accelerators the plan knows, its tests deselected, the recorder's entry and why, the rule
and a comparison of two cells, and a whole suite run on the CPU of a (simulated) machine with one.
"""

from __future__ import annotations

import result_factory as rf
from cuda_check_helpers import evidence, judgement, recorder_with
from suite_runner import run_suite

from cpugpu_conformance import promises, results
from cpugpu_conformance.testing.verdict import plan

AN_ACCELERATOR = {}  # devices.unavailable() on a machine that has every device
NO_ACCELERATOR = {"cuda": "no CUDA device: simulated"}


def test_promise_11_applies_only_on_a_machine_with_no_accelerator():
    assert promises.not_applicable("11", "cpu", ()) is None
    why = promises.not_applicable("11", "cpu", ("cuda",))
    assert why.startswith("promise 11 is about a machine with no accelerator, and this one has cuda")
    assert promises.not_applicable("11", "cuda", ()) == "promise 11 is about cpu"
    assert promises.not_applicable("3", "cpu", ("cuda",)) is None


def test_the_plan_knows_the_accelerators_the_machine_has_asked_for_or_not():
    assert plan.plan_devices("cpu", AN_ACCELERATOR).accelerators == ("cuda",)
    assert plan.plan_devices(None, AN_ACCELERATOR).accelerators == ("cuda",)
    assert plan.plan_devices("all", NO_ACCELERATOR).accelerators == ()
    facts = plan.from_facts(plan.as_facts(plan.plan_devices("cpu", AN_ACCELERATOR)))
    assert facts.accelerators == ("cuda",)


def test_promise_11_tests_are_deselected_beside_an_accelerator():
    assert plan.wanted({"11"}, "cpu", None, accelerators=())
    assert not plan.wanted({"11"}, "cpu", None, accelerators=("cuda",))
    assert plan.wanted({"3"}, "cpu", None, accelerators=("cuda",))


def test_the_recorder_writes_promise_11_not_applicable_with_why_beside_an_accelerator(tmp_path):
    recorder = recorder_with(plan.plan_devices("cpu", AN_ACCELERATOR), tmp_path)
    entry = recorder._entry(judgement(required={}), "11", "cpu")
    assert entry["verdict"] == "not_applicable" and entry["reason"] == promises.not_applicable("11", "cpu", ("cuda",))
    alone = recorder_with(plan.plan_devices("cpu", NO_ACCELERATOR), tmp_path)
    held = evidence("t[device=cpu,size=4]", "cpu", "11", "completed", "passed",
                    observed="size (4,): raises RuntimeError: no")
    judged = judgement(held, required={"11": {"cpu": [held.facts["key"]]}})
    entry = alone._entry(judged, "11", "cpu")
    assert entry["verdict"] == "recorded" and entry["observed"] == "size (4,): raises RuntimeError: no"


def _cell_with_11(verdict: str, cuda_available: bool) -> results.CellResult:
    entry = {"verdict": verdict, "passed": 0, "failed": 0, "skipped": 0, "reason": "why"}
    return results.CellResult.new(
        "torch-2.13.0", "completed",
        requested={"device": "cpu", "promises": None}, environment={"cuda_available": cuda_available},
        devices={"cpu": {"status": "tested"}, "cuda": {"status": "not_requested", "reason": "not requested"}},
        promises={"11": {"title": promises.PROMISES["11"], "devices": {"cpu": entry}}},
    )


def test_the_rule_accepts_promise_11_not_applicable_only_where_the_machine_had_an_accelerator():
    beside = _cell_with_11("not_applicable", cuda_available=True).outcome("11", "cpu")
    assert beside.kind == "not_applicable" and not beside.asked
    assert beside.note.startswith("promise 11 is about a machine with no accelerator")
    claimed = _cell_with_11("not_applicable", cuda_available=False).outcome("11", "cpu")
    assert claimed.kind == "untested" and "the contract does not" in claimed.note


def _gpu_cell(torch_release: str) -> results.CellResult:
    data = rf.completed(torch_release, cuda=True)
    data["promises"]["11"]["devices"]["cpu"] = {"verdict": "not_applicable", "reason": "beside an accelerator",
                                                "passed": 0, "failed": 0, "skipped": 0}
    return results.CellResult(data)


def test_two_cells_beside_an_accelerator_compare_without_a_gap_on_promise_11():
    cmp = results.diff(_gpu_cell("2.13.0"), _gpu_cell("2.14.1"))
    assert cmp.devices == ["cpu", "cuda"] and cmp.comparable, cmp.unusable
    assert not cmp.verdict_changes and not cmp.regressions and cmp.checked > 0


FAKE_ACCELERATOR = '''
"""Loaded with -p: the registry reports every device present, as on a machine with a GPU."""
from cpugpu_conformance import devices

_environment = devices.environment
devices.unavailable = lambda: {}
devices.unavailable_to_run = lambda option: {}
devices.environment = lambda: {**_environment(), "cuda_available": True, "gpu_name": "simulated"}
'''


def test_a_run_beside_an_accelerator_records_promise_11_not_applicable(tmp_path, monkeypatch):
    """The whole suite on the CPU of a (simulated) machine with an accelerator: promise 11 is n/a, with why."""
    (tmp_path / "fake_accelerator.py").write_text(FAKE_ACCELERATOR)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    run = run_suite(tmp_path, "-p", "fake_accelerator", "--device", "cpu", "--promise", "2,11")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    entry = run.result["promises"]["11"]["devices"]["cpu"]
    assert entry["verdict"] == "not_applicable" and entry["passed"] == 0
    assert entry["reason"] == promises.not_applicable("11", "cpu", ("cuda",))
    assert run.cell.outcome("11", "cpu").kind == "not_applicable" and run.cell.answer().clean
    assert "test_pin_memory_on_cpu_is_recorded" not in run.stdout
