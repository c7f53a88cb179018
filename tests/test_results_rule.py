"""results: the rule that decides a verdict, for a promise on a device and for a cell's answer.

Each case of the rule has its own test: a pass needs a check that ran and held, and
nothing untested (skipped, missing, empty, interrupted, crashed) is ever a pass.
"""

from __future__ import annotations

import pytest
import result_factory as rf
from edited_results import cell

from cpugpu_conformance.promises import PROMISES, RECORDED_ONLY, applies
from cpugpu_conformance.results import CellResult

pytestmark = pytest.mark.quick  # the core: nox -s quick


def set_entry(promise: str, device: str = "cpu", **entry):
    return lambda data: data["promises"][promise]["devices"].__setitem__(device, entry)


# ----------------------------------------------------------------------------- a promise on a device


def test_a_check_that_ran_and_held_is_a_pass():
    assert cell().outcome("1", "cpu").kind == "passed"


def test_a_pass_with_no_check_that_ran_is_untested():
    out = cell(set_entry("1", verdict="passed", passed=0, failed=0, skipped=3)).outcome("1", "cpu")
    assert (out.kind, out.note) == ("untested", "recorded as passed, but no check of it ran")
    out = cell(set_entry("1", verdict="passed")).outcome("1", "cpu")  # no counts at all
    assert out.kind == "untested"


def test_a_pass_that_names_a_test_left_out_is_untested():
    """Issue 21: whatever the writer's verdict, an entry that names a test of the promise that did not
    run to its end is no pass."""
    left_out = [{"test": "t.py::T::test_x[cpu]", "why": "deselected (-k, -m, --deselect or a conftest hook)"}]
    out = cell(set_entry("5", verdict="passed", passed=6, failed=0, skipped=1, untested_tests=left_out)).outcome("5", "cpu")
    assert out.kind == "untested" and "deselected" in (out.note or "")


def test_a_waived_promise_is_no_pass_and_says_why():
    entry = {"verdict": "waived", "passed": 1, "failed": 0, "skipped": 1, "reason": "never in a thread",
             "waived_tests": [{"test": "t.py::T::test_x", "reason": "never in a thread"}]}
    result = cell(set_entry("12", **entry))
    assert (result.outcome("12", "cpu").kind, result.outcome("12", "cpu").note) == ("waived", "never in a thread")
    answer = result.answer()
    assert answer.kind == "untested" and not answer.clean and answer.counts["waived"] == 1
    assert any("waived: never in a thread" in line for line in answer.lines)


def test_a_skipped_promise_is_untested_with_its_reason():
    out = cell(set_entry("5", verdict="skipped", reason="numpy missing", skipped=2)).outcome("5", "cpu")
    assert (out.kind, out.note) == ("untested", "numpy missing")


def test_a_missing_promise_is_untested():
    out = cell(drop_promises=("8",)).outcome("8", "cpu")
    assert (out.kind, out.note) == ("untested", "the result has no verdict for promise 8 on cpu")


def test_any_failure_is_a_failure_whatever_the_verdict_string_says():
    failure = rf.failure("test_x", "AssertionError: boom", "print(1)")
    out = cell(set_entry("2", verdict="passed", passed=5, failed=1, failures=[failure])).outcome("2", "cpu")
    assert out.kind == "failed" and out.note == "test_x: AssertionError: boom" and out.failures == (failure,)


def test_recorded_needs_a_check_that_ran_too():
    assert cell().outcome("11", "cpu").kind == "recorded"
    assert cell(set_entry("11", verdict="recorded", observed="x")).outcome("11", "cpu").kind == "untested"


def test_a_promise_of_another_device_is_not_applicable_and_cannot_be_claimed_otherwise():
    assert cell().outcome("10", "cpu").kind == "not_applicable"
    assert cell(cuda=True).outcome("11", "cuda").kind == "not_applicable"
    # a result that calls an applicable promise 'not applicable' has not tested it
    assert cell(set_entry("3", verdict="not_applicable")).outcome("3", "cpu").kind == "untested"


def test_a_device_asked_for_but_missing_is_untested_on_every_promise():
    def no_cuda(data):
        data["devices"]["cuda"] = {"status": "skipped", "reason": "no CUDA device"}

    c = cell(no_cuda)
    assert c.asked_devices() == ["cpu", "cuda"] and c.tested_devices() == ["cpu"]
    assert {c.outcome(p, "cuda").kind for p in map(str, range(1, 11))} == {"untested"}


def test_on_a_missing_device_only_the_promises_asked_for_are_untested():
    """--promise 1 --device all without CUDA: promise 1 is untested on cuda, the others were not asked for."""
    def no_cuda_promise_1(data):
        data["devices"]["cuda"] = {"status": "skipped", "reason": "no CUDA device"}
        data["requested"]["promises"] = ["1"]

    c = cell(no_cuda_promise_1)
    assert c.outcome("1", "cuda").kind == "untested"
    assert {c.outcome(p, "cuda").kind for p in map(str, range(2, 10))} == {"not_requested"}
    assert [line for line in c.answer().lines if "cuda" in line and "promise 2" in line] == []


def test_a_device_nobody_asked_for_is_not_requested():
    assert cell().outcome("1", "cuda").kind == "not_requested"
    assert cell().asked_devices() == ["cpu"]


def test_promises_left_out_with_dash_dash_promise_are_not_requested():
    def subset(data):
        data["requested"]["promises"] = ["1"]

    c = cell(subset)
    assert c.outcome("1", "cpu").kind == "passed"
    assert (c.outcome("2", "cpu").kind, c.outcome("2", "cpu").note) == ("not_requested", "not selected (--promise)")


@pytest.mark.parametrize("status", ["interrupted", "crashed", "timed_out", "not_installed", "wrong_torch", "error"])
def test_a_cell_that_did_not_complete_has_no_verdict_even_with_verdicts_inside(status):
    data = rf.completed("2.13.0")
    data.update(status=status, detail="killed by SIGSEGV; last lines of the log:\n...")
    c = CellResult(data)
    out = c.outcome("1", "cpu")
    assert out.kind == status and out.note == "killed by SIGSEGV; last lines of the log" and not out.is_verdict
    assert c.answer().kind == status and not c.answer().clean


# ----------------------------------------------------------------------------- a cell's answer


def test_a_cell_where_everything_asked_passed_or_was_recorded_is_clean():
    answer = cell().answer()
    assert answer.clean and answer.kind == "passed" and answer.lines == ()
    judged = sum(1 for p in PROMISES if p not in RECORDED_ONLY and applies(p, "cpu"))
    assert dict(answer.counts) == {"passed": judged, "failed": 0, "recorded": 1, "untested": 0, "waived": 0,
                                   "known_failure": 0, "listed_but_passed": 0}
    assert cell().describe() == f"passed ({judged} passed, 0 failed, 0 untested, 1 recorded)"


def test_one_untested_promise_makes_the_cell_untested_not_clean():
    answer = cell(set_entry("7", verdict="skipped", reason="no such dtype", skipped=1)).answer()
    assert answer.kind == "untested" and not answer.clean
    assert answer.lines == ("promise 7 (No silent wrong views) on cpu: untested: no such dtype",)


def test_a_failure_makes_the_cell_failed_and_says_which():
    answer = cell(failed={("4", "cpu"): [rf.failure("t", "shared", None)]}).answer()
    assert answer.kind == "failed" and answer.lines == ("promise 4 (Two storages) on cpu: failed: t: shared",)


def test_unattributed_failures_and_errors_fail_the_cell():
    def unattributed(data):
        data["unattributed_failures"] = [{"test": "conformance/test_x.py::t", "message": "worker crashed"}]

    assert cell(unattributed).answer().kind == "failed"

    def errored(data):
        data["counts"]["errors"] = 2

    assert cell(errored).answer().lines == ("2 test(s) errored outside any promise's check",)


def test_a_completed_cell_that_tested_nothing_is_untested():
    def nothing(data):
        data["devices"] = {"cpu": {"status": "not_requested"}, "cuda": {"status": "not_requested"}}
        data["requested"]["device"] = None

    answer = cell(nothing).answer()
    assert answer.kind == "untested" and "no device was asked for" in answer.lines


def test_every_asked_pair_deselected_is_untested_not_a_pass():
    def subset(data):
        data["requested"]["promises"] = []

    assert cell(subset).answer().kind == "untested"
