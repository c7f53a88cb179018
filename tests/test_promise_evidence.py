"""A promise passes only when all of it ran (issue 21): in a team's own pytest run, nothing the
run's configuration can do to a test (deselect it, skip it, mark it xfail, override it, rewrite its
report, leave its area out) turns a broken class green. Each way a hostile or careless project
found is a test here, against a class that breaks the promise the trick hides.

The projects run with this environment's pytest (the package installed as `nox -s tests` installs
it) under the project's own profile (third_party.py): few examples, derandomized.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from suite_runner import REPO, outside_env
from third_party import REWRITE_FAILURES, broken_class_project, run_project

BIN = Path(sys.executable).parent

# Broken classes, each breaking one promise: the project's own module.
BROKEN = '''
from cpugpu_conformance.reference import CpuGpuBuffer
from cpugpu_conformance.variants import PreFixCpuGpuBuffer  # noqa: F401


class NoNumpyByDefault(CpuGpuBuffer):
    """Promise 5: callers rely on `.np` without passing the flag; this one defaults it off."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=False):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)


class IgnoresN(CpuGpuBuffer):
    """Promise 8: copy_to_gpu copies everything, whatever n says."""

    def copy_to_gpu(self, n=None):
        return super().copy_to_gpu(None)
'''


def project(tmp_path: Path, body: str = "", buffer: str = "NoNumpyByDefault", bases: str = "BufferContractTests",
            conftest_extra: str = "") -> Path:
    return broken_class_project(tmp_path / "ours", "broken", BROKEN, buffer, body=body, bases=bases,
                                conftest_extra=conftest_extra)


def run(where: Path, *args: str):
    return run_project(BIN, where, *args, result="cell.json")


def entry(run_, promise: str, device: str = "cpu") -> dict:
    return run_.cell.entry(promise, device)


def test_deselecting_a_test_by_k_leaves_its_promise_untested(tmp_path):
    ran = run(project(tmp_path), "-k", "not numpy_view_by_default", "--cpugpu-promise", "5")
    assert ran.returncode == 6, ran.tail()
    outcome = ran.cell.outcome("5", "cpu")
    assert outcome.kind == "untested", outcome
    [test] = entry(ran, "5")["untested_tests"]
    assert test["test"].endswith("test_numpy_view_by_default[device=cpu]") or "test_numpy_view_by_default" in test["test"]
    assert "deselected" in test["why"], test
    # The run's last lines name the test and why.
    assert "test_numpy_view_by_default" in ran.stdout and "deselected" in ran.stdout, ran.tail()


def test_deselect_option_leaves_its_promise_untested(tmp_path):
    where = project(tmp_path)
    ran = run(where, "--deselect", "tests/test_ours.py::TestOurs::test_numpy_view_by_default[cpu]",
              "--cpugpu-promise", "5")
    assert ran.returncode == 6, ran.tail()
    assert ran.cell.outcome("5", "cpu").kind == "untested"
    assert "deselected" in entry(ran, "5")["untested_tests"][0]["why"]


def test_deselecting_under_xdist_leaves_its_promise_untested(tmp_path):
    ran = run(project(tmp_path), "-n", "2", "-k", "not numpy_view_by_default", "--cpugpu-promise", "5")
    assert ran.returncode == 6, ran.tail()
    assert ran.cell.outcome("5", "cpu").kind == "untested"
    assert "deselected" in entry(ran, "5")["untested_tests"][0]["why"]


OPT_OUT = "ours is always built with with_numpy passed explicitly"


def test_a_skip_override_is_waived_with_its_reason_never_passed(tmp_path):
    body = f'''
    @pytest.mark.skip(reason={OPT_OUT!r})
    def test_numpy_view_by_default(self):
        pass
'''
    ran = run(project(tmp_path, body), "--cpugpu-promise", "5")
    assert ran.returncode == 6, ran.tail()
    outcome = ran.cell.outcome("5", "cpu")
    assert outcome.kind == "waived" and OPT_OUT in (outcome.note or ""), outcome
    assert entry(ran, "5")["verdict"] == "waived"
    assert [w["reason"] for w in entry(ran, "5")["waived_tests"]] == [OPT_OUT]
    assert ran.cell.answer().kind == "untested" and not ran.cell.answer().clean
    assert OPT_OUT in ran.stdout, ran.tail()


XFAIL_EVERYTHING = '''

def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.xfail(strict=False, reason="we are flaky"))
'''


def test_xfail_on_every_test_fails_a_broken_promise_and_leaves_the_rest_untested(tmp_path):
    where = project(tmp_path, buffer="IgnoresN", conftest_extra=XFAIL_EVERYTHING)
    ran = run(where, "--cpugpu-promise", "1,8")
    assert ran.returncode == 1, ran.tail()
    assert ran.cell.outcome("8", "cpu").kind == "failed"  # its body raised: an xfail marker does not hide it
    one = ran.cell.outcome("1", "cpu")
    assert one.kind == "untested" and "xfail" in (one.note or ""), one  # xpassed: no verdict either way


EMPTY_OVERRIDES = '''
    def test_mutable_wherever_made(self):
        pass

    def test_original_bug_buffer_made_in_inference_mode(self, record, device):
        pass

    def test_buffer_state_machine(self, record, device):
        pass
'''


def test_overrides_with_an_empty_body_leave_the_promise_untested(tmp_path):
    ran = run(project(tmp_path, EMPTY_OVERRIDES, buffer="PreFixCpuGpuBuffer"), "--cpugpu-promise", "3")
    assert ran.returncode == 5, ran.tail()  # the overrides ran; nothing of the contract did
    outcome = ran.cell.outcome("3", "cpu")
    assert outcome.kind == "untested", outcome
    whys = {t["why"] for t in entry(ran, "3")["untested_tests"]}
    assert all("override" in why for why in whys), whys


def test_a_hook_that_rewrites_failures_to_passes_cannot_make_a_pass(tmp_path):
    where = project(tmp_path, buffer="PreFixCpuGpuBuffer", conftest_extra=REWRITE_FAILURES)
    ran = run(where, "--cpugpu-promise", "3")
    assert ran.returncode == 1, ran.tail()
    outcome = ran.cell.outcome("3", "cpu")
    assert outcome.kind == "failed" and "inference tensor" in (outcome.note or ""), outcome
    # The evidence came from the contract's own body, and so does the reproducer.
    assert any(f.get("reproducer") for f in outcome.failures), outcome.failures


def test_one_area_class_cannot_pass_a_promise_it_does_not_cover(tmp_path):
    where = project(tmp_path, bases="StateMachineTests")
    ran = run(where, "--cpugpu-promise", "3,5,8,9")
    assert ran.returncode == 6, ran.tail()
    outcome = ran.cell.outcome("5", "cpu")
    assert outcome.kind == "untested", outcome
    whys = " ".join(t["why"] for t in entry(ran, "5")["untested_tests"])
    assert "NumpyViewTests" in whys and "EngineScaleTests" in whys, whys


def test_a_skip_from_a_projects_autouse_fixture_is_untested(tmp_path):
    skip_numpy = '''

@pytest.fixture(autouse=True)
def no_numpy_tests(request):
    if "numpy_view_by_default" in request.node.name:
        pytest.skip("not today")
'''
    ran = run(project(tmp_path, conftest_extra=skip_numpy), "--cpugpu-promise", "5")
    assert ran.returncode == 6, ran.tail()
    assert "not today" in (ran.cell.outcome("5", "cpu").note or "")


def test_the_reference_passes_every_promise_through_the_plugin(tmp_path):
    ran = run(project(tmp_path, buffer="CpuGpuBuffer"))
    assert ran.returncode == 0, ran.tail()
    assert ran.cell.answer().clean


@pytest.mark.parametrize("how", ["argument", "PYTEST_ADDOPTS"])
def test_run_with_k_is_untested_not_a_pass(tmp_path, how):
    """`cpugpu-conformance run -k ...`: the shipped suite, the same rule."""
    import subprocess

    (tmp_path / "broken.py").write_text(BROKEN)
    env = outside_env()
    k = ["-k", "not numpy_view_by_default"]
    if how == "PYTEST_ADDOPTS":
        env["PYTEST_ADDOPTS"] = " ".join(f'"{a}"' if " " in a else a for a in k)
        k = []
    proc = subprocess.run([str(BIN / "cpugpu-conformance"), "run", "--impl", f"{tmp_path / 'broken.py'}:NoNumpyByDefault",
                           "--promise", "5", "--cell-result", str(tmp_path / "cell.json"), *k],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 6, proc.stdout[-3000:] + proc.stderr[-2000:]
    from cpugpu_conformance import results

    cell = results.CellResult.load(tmp_path / "cell.json")
    assert cell.outcome("5", "cpu").kind == "untested"
    assert REPO.exists()
