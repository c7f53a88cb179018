"""A verdict nothing in the run can talk out of (issue 28): reruns and repeats, helpers a subclass
overrides or shadows, a profile under the plugin's name or one that runs next to nothing, a patched
torch. Each trial is a project of its own (third_party.py), running the contract against a class
that breaks a promise; none may come out clean, and the reference must still pass with reruns.
"""

from __future__ import annotations

import subprocess

import pytest
from suite_runner import REPO, outside_env
from third_party import make_project, run_project
from verdict_projects import BIN, FIRST_USE, failure_of, project, run

# --- 1. Every attempt counts


@pytest.mark.parametrize("how", ["option", "PYTEST_ADDOPTS", "xdist"])
def test_a_rerun_that_passes_does_not_wash_out_a_failure(tmp_path, how):
    where = project(tmp_path)
    env = None
    args = ["--cpugpu-promise", "3"]
    if how == "option":
        args += ["--reruns", "1"]
    elif how == "xdist":
        args += ["-n", "2", "--reruns", "1"]
    else:
        env = dict(outside_env(), PYTEST_ADDOPTS="--reruns 1")
    ran = run(where, *args, env=env)
    assert ran.returncode == 1, ran.tail()
    failure = failure_of(ran)
    assert failure["attempts"] == {"total": 2, "failed": 1}, failure
    assert "Inplace update to inference tensor" in failure["message"] and failure.get("reproducer")
    # The run's last lines name the promise, and say why a passing rerun changed nothing.
    assert "promise 3 (Mutable wherever they were made) on cpu: failed" in ran.stdout[-3000:], ran.tail()
    assert "whatever a rerun did" in ran.stdout[-3000:], ran.tail()


FLAKY_HOOK = '''

def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.flaky(reruns=2))
'''


def test_a_flaky_marker_a_conftest_adds_does_not_wash_out_a_failure(tmp_path):
    ran = run(project(tmp_path, conftest_extra=FLAKY_HOOK), "--cpugpu-promise", "3")
    assert ran.returncode == 1, ran.tail()
    assert failure_of(ran)["attempts"]["failed"] == 1


def test_a_repeat_that_fails_is_a_failure_of_the_test(tmp_path):
    """pytest-repeat's --count makes several tests of one: each is an attempt at the contract's test."""
    ran = run(project(tmp_path), "--cpugpu-promise", "3", "--count", "2")
    assert ran.returncode == 1, ran.tail()
    assert ran.cell.outcome("3", "cpu").kind == "failed"


TWICE = '''

@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A plugin that calls each test twice, and keeps the second call's outcome."""
    try:
        pyfuncitem.obj(**{a: pyfuncitem.funcargs[a] for a in pyfuncitem._fixtureinfo.argnames})
    except Exception:
        pass
'''


def test_a_plugin_that_calls_a_test_twice_cannot_hide_the_first_call(tmp_path):
    ran = run(project(tmp_path, conftest_extra=TWICE), "--cpugpu-promise", "3")
    assert ran.returncode == 1, ran.tail()
    assert failure_of(ran)["attempts"] == {"total": 2, "failed": 1}


def test_the_reference_still_passes_with_reruns_and_repeats(tmp_path):
    ran = run(project(tmp_path, buffer="CpuGpuBuffer"), "--reruns", "1", "--count", "2")
    assert ran.returncode == 0, ran.tail()
    assert ran.cell.answer().clean


@pytest.mark.parametrize("result", [True, False], ids=["result-file", "plain"])
def test_blocking_the_recorder_is_refused(tmp_path, result):
    """`-p no:cpugpu-cell-recorder` would leave no one to judge the run: a failing class with a
    passing rerun exited 0, its file still "in progress". It is bad input: exit 4, the file says so."""
    where = project(tmp_path)
    args = ["--cpugpu-promise", "3", "--reruns", "1", "-p", "no:cpugpu-cell-recorder"]
    if result:
        ran = run(where, *args)
        assert ran.cell.status == "error" and "-p no:cpugpu-cell-recorder" in ran.cell.detail, ran.cell.detail
    else:
        ran = subprocess.run([str(BIN / "pytest"), *args], cwd=where, env=outside_env(), capture_output=True, text=True,
                             timeout=600)
    assert ran.returncode == 4, (ran.stdout[-3000:], ran.stderr[-2000:])
    assert "the recorder is what judges the run" in ran.stderr, ran.stderr[-2000:]


def test_run_with_reruns_is_a_failure(tmp_path):
    """`cpugpu-conformance run ... --reruns 1`: the shipped suite, the same rule."""
    (tmp_path / "firstuse.py").write_text(FIRST_USE)
    proc = subprocess.run([str(BIN / "cpugpu-conformance"), "run", "--impl", f"{tmp_path / 'firstuse.py'}:FirstTimeBroken",
                           "--promise", "3", "--cell-result", str(tmp_path / "cell.json"), "--reruns", "1"],
                          cwd=tmp_path, env=outside_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    from cpugpu_conformance import results

    assert results.CellResult.load(tmp_path / "cell.json").outcome("3", "cpu").kind == "failed"
    assert REPO.exists()


# --- 2. The overridable surface is declared and enforced

DO_NOTHING_SCENARIO = '''
    def scenario(self, record, device, **values):
        class Nothing:
            def call(self, *args, **kwargs):
                return None

            def __getitem__(self, name):
                return None

        return Nothing()
'''

WRAPPING_GETATTRIBUTE = '''
    def __getattribute__(self, name):
        value = object.__getattribute__(self, name)
        if name.startswith("test_"):
            return lambda *args, **kwargs: None
        return value
'''


@pytest.mark.parametrize("body, name", [(DO_NOTHING_SCENARIO, "`scenario`"),
                                        (WRAPPING_GETATTRIBUTE, "__getattribute__")])
def test_a_subclass_that_defines_a_library_helper_leaves_every_test_untested(tmp_path, body, name):
    ran = run(project(tmp_path, buffer="PreFixCpuGpuBuffer", body=body), "--cpugpu-promise", "3,8")
    assert ran.returncode in (5, 6), ran.tail()
    for promise in ("3", "8"):
        outcome = ran.cell.outcome(promise, "cpu")
        assert outcome.kind == "untested", outcome
    whys = {t["why"] for t in ran.cell.entry("3", "cpu")["untested_tests"]}
    assert all(name in why and "TestOurs defines" in why for why in whys), whys
    assert any(name in w and "every test of" in w for w in ran.cell.warnings), ran.cell.warnings


def test_a_helper_in_a_mixin_of_the_team_is_caught_too(tmp_path):
    """A class in the bases that is not the library's: the same collision, named by its class."""
    module = '''
from cpugpu_conformance.testing import BufferContractTests
from firstuse import ZeroMeansAll


class OurHelpers:
    def build(self, *args, **kwargs):  # a team's own helper that happens to share the name
        raise RuntimeError("ours")


class TestOurs(OurHelpers, BufferContractTests):
    buffer_cls = ZeroMeansAll
'''
    where = make_project(tmp_path / "ours", {"test_ours.py": module})
    (where / "firstuse.py").write_text(FIRST_USE)
    ran = run(where, "--cpugpu-promise", "8")
    assert ran.returncode in (5, 6), ran.tail()
    assert ran.cell.outcome("8", "cpu").kind == "untested"
    assert any("OurHelpers defines `build`" in w and "rename it" in w for w in ran.cell.warnings), ran.cell.warnings


@pytest.mark.parametrize("owner, why", [
    ("self", "hides the library's"),
    # The class-level fixture idiom (request.cls.NAME = ...): the class gains the name after collection.
    ("type(self)", "TestOurs defines `build`"),
], ids=["instance", "class-at-runtime"])
def test_an_attribute_set_at_runtime_that_hides_a_helper_is_caught(tmp_path, owner, why):
    body = f'''
    @pytest.fixture(autouse=True)
    def _ours(self):
        {owner}.build = lambda *args, **kwargs: None
'''
    ran = run(project(tmp_path, buffer="ZeroMeansAll", body=body), "--cpugpu-promise", "8")
    assert ran.returncode in (5, 6), ran.tail()
    untested = ran.cell.entry("8", "cpu")["untested_tests"]
    assert any(why in t["why"] for t in untested), untested


def test_the_declared_surface_is_allowed(tmp_path):
    """buffer_cls, buffer_import and make_buffer (the adapter) are the surface: no collision."""
    body = '''
    buffer_import = "from firstuse import ZeroMeansAll as Buffer"

    def make_buffer(self, *size, **options):
        return self.buffer_cls(*size, **options)
'''
    ran = run(project(tmp_path, buffer="ZeroMeansAll", body=body), "--cpugpu-promise", "8")
    assert ran.returncode == 1, ran.tail()
    assert ran.cell.outcome("8", "cpu").kind == "failed"


STATE_MODULE = '''
import torch

from cpugpu_conformance.testing import MutableStateTests


class Runner:
    def __init__(self, device):
        self.table = torch.zeros(4, device=device)  # the seed's bug: made in the caller's mode


class TestRunner(MutableStateTests):
    def make_state(self, device):
        return Runner(device)
{body}
'''

HELPER_BODIES = {
    "_phases": "\n    def _phases(self, context):\n        return []\n",
    "_run": "\n    def _run(self, device, phase):\n        raise AssertionError('never')\n",
}


@pytest.mark.parametrize("helper", sorted(HELPER_BODIES))
def test_a_mutable_state_class_cannot_replace_the_librarys_helpers(tmp_path, helper):
    """MutableStateTests keeps its helpers out of the class (module functions): a subclass's own
    `_phases` or `_run` is never called, and the broken object fails as it would without it."""
    where = make_project(tmp_path / "ours", {"test_state.py": STATE_MODULE.format(body=HELPER_BODIES[helper])})
    ran = run_project(BIN, where, result="cell.json")
    assert ran.returncode == 1, ran.tail()
    [judged] = ran.cell["mutable_state"].values()
    assert judged["verdict"] == "failed", judged


def test_a_mutable_state_class_that_intercepts_lookups_is_untested(tmp_path):
    body = "\n    def __getattribute__(self, name):\n        return object.__getattribute__(self, name)\n"
    where = make_project(tmp_path / "ours", {"test_state.py": STATE_MODULE.format(body=body)})
    ran = run_project(BIN, where, result="cell.json")
    assert ran.returncode != 0, ran.tail()
    [judged] = ran.cell["mutable_state"].values()
    assert judged["verdict"] == "untested", judged
    assert all("__getattribute__" in t["why"] for t in judged["tests"]), judged["tests"]


# --- 3. The settings that ran are evidence

TINY_PROFILE_UNDER_OUR_NAME = '''
settings.register_profile("cpugpu-ci", max_examples=1, derandomize=True, database=None)
settings.load_profile("cpugpu-ci")
'''

EXPLICIT_ONLY = '''
settings.register_profile("explicit-only", phases=[Phase.explicit], database=None)
settings.load_profile("explicit-only")
'''


def test_a_profile_under_the_plugins_name_with_one_example_is_untested(tmp_path):
    ran = run(project(tmp_path, buffer="ZeroMeansAll", conftest_extra=TINY_PROFILE_UNDER_OUR_NAME),
              "--cpugpu-promise", "8")
    assert ran.returncode in (5, 6), ran.tail()
    outcome = ran.cell.outcome("8", "cpu")
    assert outcome.kind == "untested", outcome
    whys = " ".join(t["why"] for t in ran.cell.entry("8", "cpu")["untested_tests"])
    assert "at most 1 example(s), below this test's floor" in whys, whys
    ran_under = ran.cell["hypothesis_ran"]
    # Each test's settings as it ran: the whole-budget tests got the profile's one example.
    partial = next(v for k, v in ran_under.items() if "test_partial_copy[" in k and "1024" not in k)
    assert partial["max_examples"] == 1 and partial["examples"] <= 1, partial


ONE_STEP_UNDER_OUR_NAME = '''
from cpugpu_conformance.testing.shared import budget

settings.register_profile("cpugpu-ci", **dict(budget.PROFILES["ci"], stateful_step_count=1))
settings.load_profile("cpugpu-ci")
'''


def test_a_profile_that_gives_the_state_machine_one_step_leaves_it_untested(tmp_path):
    """A state machine of one step a example is no sequence of calls: a class that only a second copy
    after a NumPy write catches passed the whole contract under such a profile, named cpugpu-ci."""
    ran = run(project(tmp_path, buffer="CpuGpuBuffer", conftest_extra=ONE_STEP_UNDER_OUR_NAME), "--cpugpu-promise", "9")
    assert ran.returncode in (5, 6), ran.tail()
    assert ran.cell.outcome("9", "cpu").kind == "untested"
    whys = {t["test"]: t["why"] for t in ran.cell.entry("9", "cpu")["untested_tests"]}
    machine = [why for test, why in whys.items() if "test_buffer_state_machine" in test]
    assert machine and all("at most 1 step(s) a state machine example, below this test's floor of 10" in why
                           for why in machine), whys
    ran_under = next(v for k, v in ran.cell["hypothesis_ran"].items() if "test_buffer_state_machine" in k)
    assert ran_under["stateful_step_count"] == 1 and ran_under["step_floor"] == 10, ran_under


def test_a_profile_without_the_generate_phase_is_untested_not_failed(tmp_path):
    """The reverse: the reference under phases=[explicit] is no failure (hypothesis ran nothing)."""
    ran = run(project(tmp_path, buffer="CpuGpuBuffer", conftest_extra=EXPLICIT_ONLY), "--cpugpu-promise", "2,8")
    assert ran.returncode in (5, 6), ran.tail()
    for promise in ("2", "8"):
        outcome = ran.cell.outcome(promise, "cpu")
        assert outcome.kind == "untested" and "generate phase" in (outcome.note or ""), outcome


def test_the_result_file_records_the_settings_and_examples_of_each_test(tmp_path):
    ran = run(project(tmp_path, buffer="CpuGpuBuffer"), "--cpugpu-promise", "8")
    assert ran.returncode == 0, ran.tail()
    ran_under = ran.cell["hypothesis_ran"]
    partial = next(v for k, v in ran_under.items() if "test_partial_copy" in k)
    assert partial["max_examples"] == 20 and partial["derandomize"] is True and "generate" in partial["phases"]
    assert partial["floor"] <= partial["examples"] <= partial["max_examples"], partial


# --- 4. torch is torch

PATCHING_CONFTEST = '''

import contextlib

import torch

torch.inference_mode = lambda *args, **kwargs: contextlib.nullcontext()
'''

PATCHING_FIXTURE = '''

import torch


@pytest.fixture(autouse=True)
def leave_zeros_patched():
    yield
    torch.Tensor.copy_ = lambda self, other, non_blocking=False: self
'''


def test_a_conftest_that_patches_torch_makes_the_run_an_error(tmp_path):
    ran = run(project(tmp_path, buffer="PreFixCpuGpuBuffer", conftest_extra=PATCHING_CONFTEST), "--cpugpu-promise", "3")
    assert ran.returncode == 4, ran.tail()
    assert ran.cell.status == "error" and "torch.inference_mode (now conftest.<lambda>)" in ran.cell.detail
    assert "torch is not torch's own" in ran.stderr


@pytest.mark.parametrize("selected, when", [
    # The first test's teardown patched it: the next test's call ran against it, and says so.
    ([], " ran: "),
    # The only test's teardown patched it: the check at the end finds it.
    (["-k", "test_starts_zeroed"], "at the end of the run: "),
], ids=["a-later-test", "the-last-test"])
def test_a_test_that_leaves_torch_patched_makes_the_run_an_error(tmp_path, selected, when):
    ran = run(project(tmp_path, buffer="CpuGpuBuffer", conftest_extra=PATCHING_FIXTURE), "--cpugpu-promise", "2",
              *selected)
    assert ran.returncode == 4, ran.tail()
    assert ran.cell.status == "error" and f"{when}torch.Tensor.copy_ (now conftest.leave_zeros_patched." in ran.cell.detail, \
        ran.cell.detail

