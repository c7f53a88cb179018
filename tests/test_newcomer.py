"""What a newcomer tripped on (issue 24, item 6): every run says why tests were deselected, a
reproducer's example uses the simplest dtype that fails, and `run` leaves nothing in the folder it
was started from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from suite_runner import outside_env, run_suite

from cpugpu_conformance.testing.shared import dtypes

BIN = Path(sys.executable).parent


def test_a_run_says_why_the_plugin_deselected_tests(tmp_path):
    run = run_suite(tmp_path, "--promise", "2,10", "--device", "cpu")
    assert run.returncode == 0, run.stdout[-3000:]
    [line] = [line for line in run.stdout.splitlines() if line.startswith("cpugpu-conformance deselected")]
    assert "promise 10 is about cuda" in line and "not asked for (--promise 2,10)" in line, line


def test_a_reproducer_names_the_simplest_dtype_that_fails(tmp_path):
    run = run_suite(tmp_path, "--impl", "cpugpu_conformance.variants:OnesLikeGpuBuffer", "--promise", "2",
                    "--device", "cpu")
    assert run.returncode == 1, run.stdout[-3000:]
    failures = run.failures("2")  # the zeroed test and the engine-scale one
    assert failures and all("dtype = torch.float32" in f["reproducer"] for f in failures), failures


def test_the_simplest_dtypes_come_first():
    names = [info.name for info in dtypes.simplest_first(dtypes.all_dtypes("cpu"))]
    assert names[:3] == ["float32", "float64", "float16"]
    numpy_ones = [info.name for info in dtypes.all_dtypes("cpu") if info.numpy is not None]
    assert set(names[3:len(numpy_ones)]) <= set(numpy_ones)  # what NumPy has, before what it lacks


def test_run_leaves_no_hypothesis_folder_where_it_was_started(tmp_path):
    proc = subprocess.run([str(BIN / "cpugpu-conformance"), "run", "--promise", "2", "-q"], cwd=tmp_path,
                          env={k: v for k, v in outside_env().items() if k != "HYPOTHESIS_STORAGE_DIRECTORY"},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "run left files where it was started"
    assert "warning" not in proc.stdout.lower(), proc.stdout[-2000:]
