"""The suite accepts correct implementations written differently from the reference."""

from __future__ import annotations

import pytest
from alt_impls import ALTERNATIVES
from suite_runner import TESTS, run_suite


@pytest.mark.parametrize("cls", ALTERNATIVES, ids=lambda c: c.__name__)
def test_suite_accepts_correct_alternative(cls, tmp_path):
    run = run_suite(tmp_path, "--impl", f"{TESTS / 'alt_impls.py'}:{cls.__name__}")
    assert run.returncode == 0, f"{cls.__name__} ({cls.__doc__}) was rejected:\n{run.stdout[-6000:]}"
    assert run.result["counts"]["failed"] == 0
    assert run.verdict("11") == "recorded"
