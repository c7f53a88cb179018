"""MutableStateTests in a project's own pytest run with the plugin (issue 25): a test per device and
creation context; each broken engine-shaped class (engine_states.py) rejected on its path in exactly
the contexts that make an inference tensor, each fixed class passing in every context; exclusions,
promise 12 (the caller's grad mode), contexts skipped or that cannot build; a reproducer for each
failure that stands alone; and bad settings refused in one line.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys

import pytest
import torch
from mutable_state_helpers import CPU_CONTEXTS, INFERENCE_CONTEXTS, SEED_ERROR, names
from mutable_state_project import CONFTEST, SIMPLE_CLASS, ProjectRun, run_project, run_reproducer

from cpugpu_conformance.testing import MutableStateTests
from cpugpu_conformance.testing.engine.mutable_state import check_class

# The contexts in which grad mode is on where warm_up runs: switching it off there is a change.
GRAD_ON_CONTEXTS = {"plain", "inference_mode_false_inside_inference_mode", "thread", "default_device_meta",
                    "set_default_device_meta", "set_default_dtype_float16"}


ENGINE_TESTS = '''
import torch

import engine_states as es
from engine_states import (Engine, FixedLazyWorkspace, FixedRequestTables, FixedRotaryModel, FixedScheduler,
                           GradSwitchingRunner, RequestTables, RotaryModel, Scheduler, WeightsAndCache)
from cpugpu_conformance.testing import MutableStateTests


class TestLazyWorkspace(MutableStateTests):
    def make_state(self, device):
        return es.LazyWorkspace(device)

    def warm_up(self, state):
        state.warm_up()


class TestFixedLazyWorkspace(MutableStateTests):
    size = 32

    def make_state(self, device):
        return FixedLazyWorkspace(device, size=self.size)

    def warm_up(self, state):
        state.warm_up()
{classes}

class TestWeightsExcluded(MutableStateTests):
    exclude = {{"weights.w": "read-only weights, loaded in inference mode on purpose"}}

    def make_state(self, device):
        return WeightsAndCache(device)


class TestWeightsNotExcluded(MutableStateTests):
    def make_state(self, device):
        return WeightsAndCache(device)


class TestStaleExclusion(MutableStateTests):
    exclude = {{"weights.w": "read-only weights", "weights.bias": "there is no such tensor"}}

    def make_state(self, device):
        return WeightsAndCache(device)


class TestGradSwitching(MutableStateTests):
    def make_state(self, device):
        return GradSwitchingRunner(device)

    def warm_up(self, state):
        state.warm_up()


class Pool:
    """Free blocks in a set, allocated in inference mode; defined here, so the reproducer holds its source."""

    def __init__(self, device):
        with torch.inference_mode():
            self.free = {{torch.zeros(3, device=device), torch.zeros(2, device=device)}}


def make_pool(device):
    return Pool(device)


class TestPool(MutableStateTests):
    def make_state(self, device):
        return make_pool(device)


class TestRefusesInferenceMode(MutableStateTests):
    skip_contexts = {{"thread": "never built in a thread of its own"}}

    def make_state(self, device):
        if torch.is_inference_mode_enabled():
            raise RuntimeError("build me outside inference mode")
        return FixedLazyWorkspace(device)

    def warm_up(self, state):
        state.warm_up()
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> ProjectRun:
    names = ["RequestTables", "FixedRequestTables", "RotaryModel", "FixedRotaryModel", "Scheduler", "FixedScheduler",
             "Engine"]
    tests = ENGINE_TESTS.format(classes="".join(SIMPLE_CLASS.format(name=n) for n in names))
    return run_project(tmp_path_factory.mktemp("ours"), {"conftest.py": CONFTEST, "test_engines.py": tests})


def test_each_class_is_a_test_per_device_and_creation_context(project):
    assert project.returncode == 1, project.output[-3000:]
    for cls in ("TestLazyWorkspace", "TestFixedRotaryModel", "TestWeightsExcluded"):
        assert sorted(project.outcomes(cls)) == sorted(CPU_CONTEXTS), project.outcomes(cls)
    assert not [r for r in project.reports if "leak" in r], "a test left the caller's grad mode or dtype changed"


@pytest.mark.parametrize("cls", ["TestFixedLazyWorkspace", "TestFixedRequestTables", "TestFixedRotaryModel",
                                 "TestFixedScheduler", "TestEngine", "TestWeightsExcluded"])
def test_the_fixed_classes_pass_in_every_context(project, cls):
    outcomes = project.outcomes(cls)
    assert outcomes == dict.fromkeys(CPU_CONTEXTS, "passed"), outcomes
    record = project.record(cls, "inference_mode")
    assert record["checked"] >= 1 and record["bad_paths"] == [] and record["broken"] == [], record
    assert record["promises"] == ["3", "12"] and record["reproducer"] is None


def test_the_lazy_workspace_fails_exactly_where_its_warm_up_runs_in_inference_mode(project):
    failed = {c for c, outcome in project.outcomes("TestLazyWorkspace").items() if outcome == "failed"}
    assert failed == INFERENCE_CONTEXTS
    record = project.record("TestLazyWorkspace", "decorated_inference_mode")
    assert [(b["path"], b["phase"]) for b in record["bad_paths"]] == [
        ("state.workspace", "built and warmed up in context decorated_inference_mode"),
        ("state.workspace", "built in the plain context, warmed up in context decorated_inference_mode")]
    assert record["broken"] == ["3"] and SEED_ERROR in record["bad_paths"][0]["why"]


@pytest.mark.parametrize("cls, bad_paths", [
    ("TestRequestTables", ["state.tables['default'][0]", "state.tables['default'][1]"]),
    ("TestRotaryModel", ["state.rotary.cos_sin_cache"]),
    ("TestScheduler", ["state.batch.ids[1]"]),
    ("TestWeightsNotExcluded", ["state.weights.w"]),
])
def test_a_class_broken_in_every_context_is_rejected_on_its_path_in_each(project, cls, bad_paths):
    assert project.outcomes(cls) == dict.fromkeys(CPU_CONTEXTS, "failed")
    plain = project.record(cls, "plain")
    assert [b["path"] for b in plain["bad_paths"]] == bad_paths, plain["bad_paths"]
    message = project.report(cls, "plain")["message"]
    assert message.startswith(f"{cls}, device cpu, context plain: promise 3 (Mutable wherever they were made) broken")
    refusal = ("an inference tensor (made under torch.inference_mode()); an in-place update outside inference mode "
               f"raised RuntimeError: {SEED_ERROR}")
    for path in bad_paths:
        assert names(message, path), message
    assert message.count(refusal) == 1, message  # the torch message once, after the paths it refuses


def test_a_module_built_in_inference_mode_has_inference_parameters_too(project):
    record = project.record("TestRotaryModel", "inference_mode")
    first_phase = [b["path"] for b in record["bad_paths"] if b["phase"].startswith("built and warmed up")]
    assert first_phase == ["state.proj.weight", "state.proj.bias", "state.rotary.inv_freq",
                           "state.rotary.cos_sin_cache"]


def test_an_exclusion_is_recorded_and_a_stale_one_fails(project):
    record = project.record("TestWeightsExcluded", "plain")
    assert record["excluded"] == {"state.weights.w": "read-only weights, loaded in inference mode on purpose"}
    assert project.outcomes("TestStaleExclusion") == dict.fromkeys(CPU_CONTEXTS, "failed")
    message = project.report("TestStaleExclusion", "plain")["message"]
    assert "stale exclusion 'state.weights.bias' (there is no such tensor): the walk found no tensor" in message


def test_a_class_that_changes_the_callers_grad_mode_breaks_promise_12(project):
    failed = {c for c, outcome in project.outcomes("TestGradSwitching").items() if outcome == "failed"}
    assert failed == GRAD_ON_CONTEXTS
    record = project.record("TestGradSwitching", "plain")
    assert record["broken"] == ["12"] and record["bad_paths"] == []
    assert record["caller_state_changes"] == ["warm_up changed the caller's grad mode from True to False"]


def test_a_class_that_cannot_be_built_in_a_context_fails_there_and_a_skipped_context_is_untested(project):
    outcomes = project.outcomes("TestRefusesInferenceMode")
    assert {c for c, o in outcomes.items() if o == "failed"} == INFERENCE_CONTEXTS
    assert outcomes["thread"] == "skipped"
    skipped = project.report("TestRefusesInferenceMode", "thread")
    assert "never built in a thread of its own" in skipped["message"]
    assert skipped["properties"]["mutable_state"]["skipped"] == "never built in a thread of its own"
    message = project.report("TestRefusesInferenceMode", "inference_mode")["message"]
    assert "raised RuntimeError: build me outside inference mode" in message
    assert project.record("TestRefusesInferenceMode", "inference_mode")["broken"] == ["3"]


def test_every_failure_has_its_reproducer_and_the_terminal_prints_one_per_class_and_cause(project):
    printed: dict[str, list[str]] = collections.defaultdict(list)  # class -> the contexts whose failure holds one
    for r in project.reports:
        if r.get("outcome") != "failed":
            continue
        record = r["properties"]["mutable_state"]
        assert record["reproducer"] and record["reproducers"][0]["reproducer"] == record["reproducer"], r["nodeid"]
        cls = r["nodeid"].split("::")[1]
        if "\n\nReproducer (" in r["message"]:
            scripts = [x["reproducer"].rstrip() for x in record["reproducers"]]
            assert any(r["message"].rstrip().endswith(script) for script in scripts), r["nodeid"]
            assert r["message"].count("\n\nReproducer (") == len({x["cause"] for x in record["reproducers"]})
            printed[cls].append(record["context"])
        else:  # an earlier failure of its class printed it, and this one says where
            assert "\nreproducer: as printed for context " in r["message"] and printed[cls], r["nodeid"]
            where = r["message"].split("\nreproducer: as printed for context ")[1].split(" above")[0]
            assert set(where.split(", ")) <= set(printed[cls]), (r["nodeid"], where, printed[cls])
    assert printed["TestLazyWorkspace"] == ["inference_mode"]  # one cause, one reproducer, in five failures


def test_the_reproducer_stands_alone_and_fails_with_the_seeds_error(project):
    script = project.record("TestLazyWorkspace", "thread_in_inference_mode")["reproducer"]
    assert "import engine_states as es\n" in script and "def make_state(self, device):\n" in script
    assert "def thread_in_inference_mode(make, *args):" in script and "import threading" in script
    assert "mutable_in_place('state.workspace', state.workspace)\n" in script
    assert "cpugpu_conformance" not in script.split("# Run:")[1]  # torch and the class's modules only
    run = run_reproducer(project, script, "repro_lazy.py")
    assert run.returncode == 1 and "AssertionError: state.workspace: an inference tensor" in run.stderr, run.stderr
    assert SEED_ERROR in run.stderr
    # The same script with the fixed class in it: the promise holds.
    fixed = run_reproducer(project, script.replace("es.LazyWorkspace(", "es.FixedLazyWorkspace("), "repro_fixed.py")
    assert fixed.returncode == 0 and fixed.stdout.strip() == "ok: the promise held", fixed.stderr


def test_the_reproducer_imports_what_make_state_reads_and_holds_its_settings(project):
    script = project.record("TestRequestTables", "plain")["reproducer"]
    assert "from engine_states import RequestTables\n" in script
    run = run_reproducer(project, script, "repro_tables.py")
    assert run.returncode == 1 and "state.tables['default'][0]: an inference tensor" in run.stderr, run.stderr
    fixed = script.replace("from engine_states import RequestTables\n",
                           "from engine_states import FixedRequestTables as RequestTables\n")
    assert run_reproducer(project, fixed, "repro_tables_fixed.py").returncode == 0


def test_the_reproducer_of_a_promise_12_failure_fails_on_the_callers_state(project):
    script = project.record("TestGradSwitching", "thread")["reproducer"]
    run = run_reproducer(project, script, "repro_grad.py")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "AssertionError: warm_up changed the caller's grad mode from True to False" in run.stderr


def test_the_reproducer_holds_what_the_test_module_defines(project, tmp_path):
    script = project.record("TestPool", "plain")["reproducer"]
    assert script.index("class Pool:") < script.index("def make_pool(device):") < script.index("class Tests:")
    assert "test_engines" in script and "import test_engines" not in script and "from test_engines" not in script
    path = tmp_path / "reproducer.py"  # away from the project: it needs nothing of it
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 1 and "AssertionError: set_elements(state.free)[0]: an inference tensor" in run.stderr, \
        run.stderr
    bad = [b["path"] for b in project.record("TestPool", "plain")["bad_paths"]]
    assert bad == ["set_elements(state.free)[0]", "set_elements(state.free)[1]"]


@pytest.mark.parametrize("settings, culprit", [
    ({"skip_contexts": {"nope": "x"}}, "TestOurs.skip_contexts: unknown context 'nope'; expected one of"),
    ({"skip_contexts": {"thread": " "}}, "TestOurs.skip_contexts['thread']: give the reason"),
    ({"exclude": {"w": ""}}, "TestOurs.exclude['w']: give the reason the tensor is excluded"),
    ({"make_state": None}, "TestOurs: override make_state(self, device)"),
])
def test_a_bad_setting_is_refused_naming_it(settings, culprit):
    members = {"make_state": lambda self, device: object(), **settings}
    if members["make_state"] is None:
        del members["make_state"]
    cls = type("TestOurs", (MutableStateTests,), members)
    with pytest.raises(ValueError) as caught:
        check_class(cls)
    assert culprit in str(caught.value)


def test_a_bad_setting_is_a_one_line_collection_error_in_a_run(tmp_path):
    tests = '''
    from cpugpu_conformance.testing import MutableStateTests

    class TestOurs(MutableStateTests):
        skip_contexts = {"nope": "x"}

        def make_state(self, device):
            return None
    '''
    run = run_project(tmp_path, {"conftest.py": CONFTEST, "test_ours.py": tests})
    assert run.returncode == 2, run.output
    assert "\ntest_ours.TestOurs.skip_contexts: unknown context 'nope'; expected one of" in run.output
    assert "Traceback" not in run.output and "generate_tests" not in run.output


def test_a_missing_device_is_skipped_with_its_reason_never_passed(tmp_path):
    tests = ENGINE_TESTS.format(classes="")
    run = run_project(tmp_path, {"conftest.py": CONFTEST, "test_engines.py": tests},
                      "--cpugpu-device", "all", "-k", "TestFixedLazyWorkspace")
    cuda = [r for r in run.reports if "[cuda-" in r.get("nodeid", "")]
    assert cuda, run.output[-2000:]
    if torch.cuda.is_available():
        assert {r["outcome"] for r in cuda} == {"passed"}, [r["message"] for r in cuda if r["outcome"] != "passed"]
    else:
        assert {r["outcome"] for r in cuda} == {"skipped"}
        assert all("no CUDA device" in r["message"] for r in cuda)
    assert {r["outcome"] for r in run.reports if "[cpu-" in r.get("nodeid", "")} == {"passed"}
