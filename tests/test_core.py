"""The core, end to end, in a minute (nox -s quick): the shipped suite passes the reference, rejects
the class the project exists for on the promise it breaks with a reproducer that fails on its own,
and never passes a promise when some of its tests did not run. The rest of tests/ proves each part
at length; this is what a change must never break."""

from __future__ import annotations

import pytest
from suite_runner import run_script, run_suite

pytestmark = pytest.mark.quick

INFERENCE_ERROR = "Inplace update to inference tensor outside InferenceMode"


def test_the_reference_passes_the_whole_contract(tmp_path):
    run = run_suite(tmp_path, "--device", "cpu")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert run.cell.answer().clean


def test_the_pre_fix_class_fails_promise_3_with_a_reproducer_that_fails_alone(tmp_path):
    run = run_suite(tmp_path, "--impl", "cpugpu_conformance.variants:PreFixCpuGpuBuffer", "--promise", "3",
                    "--device", "cpu", "-x")
    assert run.returncode == 1, run.stdout[-3000:]
    [first, *_] = run.failures("3")
    assert INFERENCE_ERROR in first["message"]
    alone = run_script(tmp_path, first["reproducer"])
    assert alone.returncode != 0 and INFERENCE_ERROR in alone.stderr, alone.stderr[-2000:]


def test_a_promise_with_a_test_deselected_is_untested_never_passed(tmp_path):
    run = run_suite(tmp_path, "--promise", "5", "--device", "cpu", "-k", "not numpy_view_by_default")
    assert run.returncode == 6, run.stdout[-3000:]
    assert run.cell.outcome("5", "cpu").kind == "untested"
    assert "deselected" in run.result["promises"]["5"]["devices"]["cpu"]["untested_tests"][0]["why"]
