"""Issue 29 in a project's own pytest run with the plugin: a workspace only a partial holds, a view of a
parameter taken in the warm-up, and placement: a tensor made without a device or a dtype follows the
context's default (the context leaking into the object, never promise 3), compared against the object
built plainly. And a report a person can read (report.py): what the terminal was shown, once a run;
a build that could not be compared is no pass; twenty bad tensors in at most 250 lines.
"""

from __future__ import annotations

import json
import types

import pytest
import torch
from mutable_state_helpers import CPU_CONTEXTS, INFERENCE_CONTEXTS, SEED_ERROR, inference
from mutable_state_project import CONFTEST, SIMPLE_CLASS, ProjectRun, run_project, run_reproducer

from cpugpu_conformance.testing.engine.checks import placed_as
from cpugpu_conformance.testing.engine.mutable_state import check_state
from cpugpu_conformance.testing.engine.report import PhaseOutcome, Shown, message, misplaced

PLAIN_CLASS = """

class Test{name}(MutableStateTests):
    def make_state(self, device):
        return {name}(device)
"""
ISSUE_29_WARMED = ["PartialKernel", "FixedPartialKernel", "FixedKeywordKernel", "CachedWorkspace", "ParameterView",
                   "FixedParameterView", "PositionsWarmUp", "FixedPositionsWarmUp"]
ISSUE_29_PLAIN = ["ReqToTokenPool", "FixedReqToTokenPool", "Scales"]
META_CONTEXTS = {"default_device_meta", "set_default_device_meta"}


@pytest.fixture(scope="module")
def project29(tmp_path_factory) -> ProjectRun:
    names = ISSUE_29_WARMED + ISSUE_29_PLAIN
    tests = ("import torch\n\nfrom engine_states import " + ", ".join(names)
             + "\nfrom cpugpu_conformance.testing import MutableStateTests\n"
             + "".join(SIMPLE_CLASS.format(name=n) for n in ISSUE_29_WARMED)
             + "".join(PLAIN_CLASS.format(name=n) for n in ISSUE_29_PLAIN))
    return run_project(tmp_path_factory.mktemp("issue29"), {"conftest.py": CONFTEST, "test_engines.py": tests})


def failed_contexts(run: ProjectRun, cls: str) -> set[str]:
    return {c for c, outcome in run.outcomes(cls).items() if outcome == "failed"}


@pytest.mark.parametrize("cls", ["TestFixedPartialKernel", "TestFixedKeywordKernel", "TestCachedWorkspace",
                                 "TestFixedParameterView", "TestFixedReqToTokenPool", "TestFixedPositionsWarmUp"])
def test_fixed_objects_in_new_styles_pass_in_every_context(project29, cls):
    assert project29.outcomes(cls) == dict.fromkeys(CPU_CONTEXTS, "passed"), project29.outcomes(cls)
    record = project29.record(cls, "default_device_meta")
    assert record["checked"] >= 1 and record["placement"] == [] and record["broken"] == [], record


def test_a_workspace_only_a_partial_holds_is_rejected_where_the_warm_up_runs_in_inference_mode(project29):
    assert failed_contexts(project29, "TestPartialKernel") == INFERENCE_CONTEXTS
    record = project29.record("TestPartialKernel", "inference_mode")
    assert {b["path"] for b in record["bad_paths"]} == {"state.kernel.args[0]"} and record["broken"] == ["3"]
    script = record["reproducer"]
    assert "mutable_in_place('state.kernel.args[0]', state.kernel.args[0])\n" in script
    run = run_reproducer(project29, script, "repro_partial.py")
    assert run.returncode == 1 and "AssertionError: state.kernel.args[0]: an inference tensor" in run.stderr, run.stderr
    fixed = script.replace("import PartialKernel\n", "import FixedPartialKernel as PartialKernel\n")
    assert "FixedPartialKernel" in fixed and run_reproducer(project29, fixed, "repro_partial_fixed.py").returncode == 0


def test_a_view_of_a_parameter_taken_in_the_warm_up_is_rejected_in_grad_mode(project29):
    # Under no_grad() the view is made in no_grad mode: torch refuses it in grad mode all the same.
    assert failed_contexts(project29, "TestParameterView") == INFERENCE_CONTEXTS | {"no_grad"}
    record = project29.record("TestParameterView", "decorated_inference_mode")
    [bad] = {b["why"] for b in record["bad_paths"]}
    assert bad.startswith("a view that requires grad: an in-place update in grad mode raised RuntimeError: A view "
                          "was created in inference mode"), bad
    run = run_reproducer(project29, record["reproducer"], "repro_view.py")
    assert run.returncode == 1 and "AssertionError: state.head: a view that requires grad" in run.stderr, run.stderr


def test_a_tensor_made_without_a_device_is_a_placement_failure_under_a_default_device(project29):
    assert failed_contexts(project29, "TestReqToTokenPool") == META_CONTEXTS
    record = project29.record("TestReqToTokenPool", "default_device_meta")
    assert record["broken"] == ["placement"] and record["bad_paths"] == [] and record["errors"] == []
    assert record["placement"] == [{"path": "state.req_generation", "phase": "built in context default_device_meta",
                                    "here": {"device": "meta", "dtype": "int64", "shape": [8]},
                                    "plain": {"device": "cpu", "dtype": "int64", "shape": [8]}}]
    message = project29.report("TestReqToTokenPool", "default_device_meta")["message"]
    first = message.splitlines()[0]
    assert first.startswith("TestReqToTokenPool, device cpu, context default_device_meta: placement (the context "
                            "leaks into the object") and "promise 3" not in first, first
    assert ("\n  state.req_generation: on meta, int64, shape (8,) here; built plainly, on cpu, int64, shape (8,)"
            in message), message
    run = run_reproducer(project29, record["reproducer"], "repro_pool.py")
    assert run.returncode == 1, run.stderr
    assert ("AssertionError: state.req_generation: on meta, int64, shape (8,) here; built plainly, on cpu, int64, "
            "shape (8,)") in run.stderr, run.stderr
    assert "# Reproducer: placement" in record["reproducer"]


def test_a_tensor_made_without_a_dtype_is_a_placement_failure_under_a_default_dtype(project29):
    assert failed_contexts(project29, "TestScales") == {"set_default_dtype_float16"}
    [entry] = project29.record("TestScales", "set_default_dtype_float16")["placement"]
    assert (entry["path"], entry["here"]["dtype"], entry["plain"]["dtype"]) == ("state.scales", "float16", "float32")


def test_a_warm_up_that_raises_only_under_a_default_device_is_that_context_leaking_not_promise_3(project29):
    assert failed_contexts(project29, "TestPositionsWarmUp") == META_CONTEXTS
    record = project29.record("TestPositionsWarmUp", "set_default_device_meta")
    assert record["broken"] == ["placement"] and record["errors"] == [], record
    assert [(p["phase"], p["raised"].split(":")[0]) for p in record["placement"]] == [
        ("built and warmed up in context set_default_device_meta", "RuntimeError"),
        ("built in the plain context, warmed up in context set_default_device_meta", "RuntimeError")]
    assert "tensors created without a device follow the ambient default device" in record["placement"][0]["leak"]
    message = project29.report("TestPositionsWarmUp", "set_default_device_meta")["message"]
    assert "promise 3" not in message.splitlines()[0] and "(placement, not promise 3)" in message, message
    assert "warm_up raised RuntimeError: index_copy(): self, index and source expected to be in the same device" in \
        message
    run = run_reproducer(project29, record["reproducer"], "repro_positions.py")
    assert run.returncode == 1 and "RuntimeError: index_copy()" in run.stderr, run.stderr


def test_placement_compares_device_dtype_and_shape_and_names_a_tensor_only_one_build_has():
    plain = check_state(types.SimpleNamespace(a=torch.zeros(2), b=torch.zeros(3), c=torch.zeros(4)))
    here = check_state(types.SimpleNamespace(a=torch.zeros(2, device="meta"), b=torch.zeros(5), d=torch.zeros(1)))
    assert misplaced(plain, here) == [("state.a", ("meta", "float32", (2,)), ("cpu", "float32", (2,))),
                                      ("state.b", ("cpu", "float32", (5,)), ("cpu", "float32", (3,))),
                                      ("state.d", ("cpu", "float32", (1,)), None),
                                      ("state.c", None, ("cpu", "float32", (4,)))]
    assert misplaced(plain, plain) == []


def test_the_placement_check_of_a_reproducer_fails_on_a_path_that_leads_nowhere():
    state = types.SimpleNamespace()
    with pytest.raises(AssertionError, match=r"^state\.c: no tensor here; built plainly, on cpu, float32, shape \(4,\)$"):
        placed_as("state.c", lambda: state.c, ("cpu", "float32", (4,)))
    placed_as("state.c", lambda: state.c, None)  # neither build has one: nothing differs


def test_what_the_terminal_was_shown_is_of_one_run_only():
    shown, run, again = Shown(), object(), object()
    shown.start(run)
    outcome = PhaseOutcome("built in the plain context", "plain", checked=check_state(inference(1)), script="x = 1\n")
    first = message("TestOurs", "m.TestOurs", "cpu", "plain", [outcome], shown)
    assert "Reproducer (" in first and "  state: an inference tensor" in first
    shown.start(run)  # the same run: the same memory
    assert "the 1 named above" in message("TestOurs", "m.TestOurs", "cpu", "plain", [outcome], shown)
    shown.start(again)  # pytest run again in this process: named in full again
    assert message("TestOurs", "m.TestOurs", "cpu", "plain", [outcome], shown) == first


def test_a_build_that_could_not_be_compared_is_no_pass_and_says_so():
    outcome = PhaseOutcome("built in context default_device_meta", "default_device_meta",
                           checked=check_state(torch.zeros(1)),
                           placement_error="placement not compared: built plainly, make_state raised ValueError: no")
    assert not outcome.ok and outcome.broken() == []
    text = message("TestOurs", "m.TestOurs", "cpu", "default_device_meta", [outcome], Shown())
    assert text.splitlines()[:2] == [
        "TestOurs, device cpu, context default_device_meta: not all of it could be checked, which is no pass",
        "built in context default_device_meta: placement not compared: built plainly, make_state raised ValueError: no"]
    assert "eproducer" not in text  # none was made: no pointer to one


def test_a_class_with_twenty_bad_tensors_prints_at_most_250_lines_at_q(tmp_path):
    tests = ("from engine_states import TwentyTables\nfrom cpugpu_conformance.testing import MutableStateTests\n"
             + SIMPLE_CLASS.format(name="TwentyTables"))
    result = tmp_path / "cell.json"
    # -rN: the short summary as a terminal shows it; in CI pytest prints it untruncated, each failure's
    # whole message again (416 lines here): the bound is on the report, measured without it.
    run = run_project(tmp_path, {"conftest.py": CONFTEST, "test_twenty.py": tests}, "--cpugpu-cell-result",
                      str(result), "-rN")
    lines = run.output.splitlines()
    assert run.returncode == 1 and len(run.reports) >= 12, run.output[-2000:]
    assert len(lines) <= 250, f"{len(lines)} lines at -q"
    for i in range(20):  # each bad path named once, the torch message once, one reproducer
        assert lines.count(f"  state.tables['t{i}']") == 1, i
    assert sum(SEED_ERROR in line for line in lines if line.startswith("    refused: ")) == 1
    assert run.output.count("\n\nReproducer (") == 1
    assert run.output.count("\nreproducer: as printed for context plain") == len(CPU_CONTEXTS) - 1
    tests_in_file = json.loads(result.read_text())["mutable_state"]["test_twenty.TestTwentyTables"]["tests"]
    scripts = [x["reproducer"] for t in tests_in_file for x in t["reproducers"]]
    assert len(scripts) == 1 + 2 * (len(CPU_CONTEXTS) - 1)  # the file keeps every one
    assert all("mutable_in_place(\"state.tables['t19']\", state.tables['t19'])" in x for x in scripts)
