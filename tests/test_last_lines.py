"""The last lines of a failing run name the promise (issue 31, item 3): after pytest's FAILED test
names, the plugin lists each promise and device that did not pass, with its verdict and a one-line
reason, as the result file has them, with or without a result file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from third_party import make_project, run_project

BIN = Path(sys.executable).parent

MODULE = '''
from cpugpu_conformance.testing import BufferContractTests
from cpugpu_conformance.variants import ZeroMeansAllBuffer


class TestOurs(BufferContractTests):
    buffer_cls = ZeroMeansAllBuffer
'''


@pytest.mark.parametrize("result", [None, "cell.json"])
def test_a_failing_run_ends_with_the_promise_it_broke(tmp_path, result):
    where = make_project(tmp_path / "ours", {"test_ours.py": MODULE})
    ran = run_project(BIN, where, "--cpugpu-promise", "8", "-q", result=result)
    assert ran.returncode == 1, ran.tail()
    lines = [line for line in ran.stdout.splitlines() if line.strip()]
    last = lines[-1]
    assert " failed" in last and " in " in last, last  # pytest's own closing line stays last
    ours = lines[lines.index("cpugpu-conformance: the contract does not hold:") + 1:-1]
    assert ours and ours[0].startswith("  promise 8 (Partial copies) on cpu: failed: "), lines[-8:]
    # The reason is the check's own words, never hypothesis's reproduce_failure blob.
    assert "reproduce_failure" not in ours[0] and "AssertionError: " in ours[0], ours[0]
    # After pytest's FAILED lines, not before them.
    failed_at = max(i for i, line in enumerate(lines) if line.startswith("FAILED "))
    assert failed_at < lines.index("cpugpu-conformance: the contract does not hold:"), lines[-12:]
