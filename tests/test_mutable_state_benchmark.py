"""benchmarks/bench_mutable_state.py: it runs, and says bad input in one line (its numbers are for reading)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from mutable_state_project import REPO, env_with_tests


def run_benchmark(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_mutable_state.py"), *args],
                          capture_output=True, text=True, timeout=300, env=env_with_tests())


def test_the_benchmark_prints_ratios_against_its_own_baseline():
    run = run_benchmark("--tensors", "200", "--repeat", "1", "--big-mib", "1")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("torch ") and "200 tensors" in lines[0]
    for name in ("create", "walk", "check"):
        assert any(line.split()[0] == name and line.endswith("x create") for line in lines[1:]), run.stdout


@pytest.mark.parametrize("args, culprit", [(["--tensors", "3"], "--tensors 3: must be at least 4"),
                                           (["--repeat", "0"], "--repeat 0: must be at least 1")])
def test_the_benchmark_refuses_bad_input_in_one_line(args, culprit):
    run = run_benchmark(*args)
    assert run.returncode == 2 and run.stderr.strip() == culprit and not run.stdout
