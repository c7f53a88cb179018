"""The suite's command line: options, bad input, the result file, the order of a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy
import pytest
import torch
from suite_runner import REPO, TESTS, run_suite

from cpugpu_conformance import results


def pytest_suite(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )


@pytest.mark.parametrize(
    ("impl", "culprit"),
    [
        ("no_such_module:Buffer", "no module named 'no_such_module'"),
        ("cpugpu_conformance.reference:NoSuchClass", "has no attribute 'NoSuchClass'"),
        ("missing/file.py:Buffer", "no such file"),
        ("cpugpu_conformance.reference", "expected 'module.path:Attr'"),
        (f"{TESTS / 'bad_impls.py'}:PositionalFlags", "does not take the contract's arguments"),
        (f"{TESTS / 'bad_impls.py'}:NoDevice", "does not take the contract's arguments"),
        (f"{TESTS / 'bad_impls.py'}:NOT_A_CLASS", "not a class"),
    ],
)
def test_bad_impl_is_a_one_line_usage_error(impl, culprit):
    proc = pytest_suite("--impl", impl)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert culprit in lines[0] and impl in lines[0], lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_unknown_device_is_refused():
    proc = pytest_suite("--device", "tpu")
    assert proc.returncode == 4
    assert "--device: invalid choice: 'tpu'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_promise_is_refused():
    proc = pytest_suite("--promise", "3,12")
    assert proc.returncode == 4
    assert "unknown promise 12" in proc.stderr


def test_help_lists_the_options():
    out = pytest_suite("--help").stdout
    for option in ("--impl", "--device", "--cell-result", "--cell-name", "--promise", "--hypothesis-profile"):
        assert option in out, option


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_missing_device_is_skipped_never_passed(tmp_path):
    run = run_suite(tmp_path, "--device", "cuda", profile="default")
    assert run.returncode == 5, "no device tested must not exit 0"
    assert "nothing was tested" in run.stdout
    assert " passed" not in run.stdout.splitlines()[-1]
    assert run.result["devices"]["cuda"]["status"] == "skipped"
    assert "torch.cuda.is_available() is False" in run.result["devices"]["cuda"]["reason"]
    assert {p["devices"]["cuda"]["verdict"] for p in run.result["promises"].values()} == {"skipped"}


def test_cell_result_file(tmp_path):
    run = run_suite(tmp_path, "--promise", "1,11", "--cell-name", "my-cell", "--device", "all", profile="default")
    assert run.returncode == 0, run.stdout
    loaded = results.load(tmp_path / "cell.json")  # validates the schema
    assert loaded["cell"] == "my-cell" and loaded["status"] == "completed"
    assert loaded["impl"] == "cpugpu_conformance.reference:CpuGpuBuffer"
    assert loaded["hypothesis_profile"] == "default"
    env = loaded["environment"]
    assert env["torch"] == torch.__version__ and env["numpy"] == numpy.__version__
    assert env["torch_cuda"] == torch.version.cuda and "python" in env and "platform" in env
    assert loaded["promises"]["1"]["devices"]["cpu"]["verdict"] == "passed"
    assert loaded["promises"]["2"]["devices"]["cpu"] == {"verdict": "skipped", "reason": "not selected (--promise)"}
    assert loaded["observations"], "the cell carries the torch observations"
    assert not list(tmp_path.glob(".*.tmp")), "the atomic write left a temporary file"


def test_profiles_and_ci_default(tmp_path):
    run = run_suite(tmp_path, "--promise", "11", profile="thorough")
    assert run.result["hypothesis_profile"] == "thorough"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "--promise", "11",
         "--cell-result", str(tmp_path / "ci.json")],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "CI": "true"},
    )
    assert proc.returncode == 0
    assert json.loads((tmp_path / "ci.json").read_text())["hypothesis_profile"] == "ci"


def test_original_bug_runs_first_and_fails_the_pre_fix_class():
    proc = pytest_suite("-v", "-x", "--impl", "cpugpu_conformance.variants:PreFixCpuGpuBuffer")
    first = next(line for line in proc.stdout.splitlines() if "::" in line)
    assert "test_original_bug_buffer_made_in_inference_mode" in first and "FAILED" in first, first
    assert "Inplace update to inference tensor outside InferenceMode" in proc.stdout
