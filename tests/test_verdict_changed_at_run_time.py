"""What changes while the run goes on cannot talk the verdict out of anything either: a fixture
that patches torch for each test (and undoes it), a patch below the names the check reads, the
class under test swapped on the test class after collection. Each used to pass the pre-fix class.
"""

from __future__ import annotations

import pytest
from verdict_projects import project, run

# pytest's monkeypatch undoes the patch at the test's teardown: by the end of the run torch is torch again.
PATCHING_WHILE_EACH_TEST_RUNS = '''

import torch

_REAL = torch.inference_mode


@pytest.fixture(autouse=True)
def no_inference_mode(monkeypatch):
    monkeypatch.setattr(torch, "inference_mode", lambda mode=True: _REAL(False))
'''

# Below the names a conftest would patch first: the mode's own methods, and the C++ guard they call.
PATCHING_THE_MODES_METHODS = '''

from torch.autograd import grad_mode

grad_mode.inference_mode.__enter__ = lambda self: None
grad_mode.inference_mode.__exit__ = lambda self, *exc: None
'''

PATCHING_THE_GUARD = '''

import contextlib

import torch

torch._C._InferenceMode = lambda mode: contextlib.nullcontext()
'''


@pytest.mark.parametrize("conftest, named", [
    (PATCHING_WHILE_EACH_TEST_RUNS, "ran: torch.inference_mode (now conftest.no_inference_mode.<locals>.<lambda>)"),
    (PATCHING_THE_MODES_METHODS, "torch.inference_mode.__enter__ (now conftest.<lambda>); torch.inference_mode.__exit__"),
    (PATCHING_THE_GUARD, "torch._C._InferenceMode (now conftest.<lambda>)"),
], ids=["monkeypatch-per-test", "the-modes-methods", "the-cpp-guard"])
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_torch_patched_out_of_the_checks_sight_is_still_an_error(tmp_path, conftest, named, workers):
    """Each patch passed the pre-fix class (exit 0, every promise passed) until the plugin looked
    after each test's call and at the modes' own methods."""
    ran = run(project(tmp_path, buffer="PreFixCpuGpuBuffer", conftest_extra=conftest), "--cpugpu-promise", "3", *workers)
    assert ran.returncode == 4, ran.tail()
    assert ran.cell.status == "error" and named in ran.cell.detail, ran.cell.detail


SWAPPING_THE_CLASS = '''

from cpugpu_conformance.reference import CpuGpuBuffer


@pytest.fixture(autouse=True)
def _swap(request):
    if request.cls is not None:
        request.cls.buffer_cls = CpuGpuBuffer  # the request.cls idiom, once the run has collected the class
'''


def test_the_class_under_test_swapped_after_collection_leaves_every_test_untested(tmp_path):
    """The result file names the class collection found: a test run against another shows nothing of it."""
    ran = run(project(tmp_path, buffer="PreFixCpuGpuBuffer", conftest_extra=SWAPPING_THE_CLASS), "--cpugpu-promise", "3")
    assert ran.returncode in (5, 6), ran.tail()
    assert ran.cell.outcome("3", "cpu").kind == "untested"
    whys = {t["why"] for t in ran.cell.entry("3", "cpu")["untested_tests"]}
    assert all("the class under test is cpugpu_conformance.reference:CpuGpuBuffer here" in why
               and "PreFixCpuGpuBuffer, what its result names" in why for why in whys), whys


FIXING_ADAPTER = '''
    def make_buffer(self, *size, **options):
        import torch

        with torch.inference_mode(False):  # the adapter, not the class, leaves inference mode
            return self.buffer_cls(*size, **options)
'''


def test_an_adapter_that_builds_the_class_its_own_way_is_named_in_the_result(tmp_path):
    """make_buffer building the pre-fix class outside inference mode passes promise 3; the file named
    only the class, as if the class had passed."""
    ran = run(project(tmp_path, buffer="PreFixCpuGpuBuffer", body=FIXING_ADAPTER), "--cpugpu-promise", "3")
    assert ran.returncode == 0, ran.tail()
    impl = ran.cell["impl"]
    assert impl.startswith("cpugpu_conformance.variant_buffers:PreFixCpuGpuBuffer built by "
                           "test_ours.TestOurs.make_buffer (source sha256 "), impl


SWAPPING_THE_ADAPTER = '''

@pytest.fixture(autouse=True)
def _swap(request):
    if request.cls is not None:
        def make_buffer(self, *size, **options):
            return self.buffer_cls(*size, **options)

        request.cls.make_buffer = make_buffer  # an adapter other than the one the result names
'''


def test_the_adapter_swapped_after_collection_leaves_every_test_untested(tmp_path):
    ran = run(project(tmp_path, buffer="PreFixCpuGpuBuffer", body=FIXING_ADAPTER, conftest_extra=SWAPPING_THE_ADAPTER),
              "--cpugpu-promise", "3")
    assert ran.returncode in (5, 6), ran.tail()
    assert ran.cell.outcome("3", "cpu").kind == "untested"
