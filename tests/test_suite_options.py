"""The suite's command line: options, bad input, the result file, the order of a run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy
import pytest
import torch
from suite_runner import REPO, SLEEPING_IMPL, TESTS, default_sigint, run_pytest, run_suite, suite_env

from cpugpu_conformance import results


def pytest_suite(*args: str, timeout: float = 300, fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """`python -m pytest conformance ARGS` (suite_runner.run_pytest: forked, or fresh)."""
    return run_pytest(["conformance", "-p", "no:cacheprovider", *args], cwd=REPO, env=suite_env(), timeout=timeout,
                      fresh=fresh)


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
@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_bad_impl_is_a_one_line_usage_error(impl, culprit, xdist):
    # With -n the controller only checks that the spec names something; a class that fails
    # to load fails in the workers, which hand the refusal back: still one line, exit 4.
    proc = pytest_suite("--impl", impl, *xdist)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert culprit in lines[0] and impl in lines[0], lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_impl_failing_at_import_under_xdist_is_one_line(tmp_path):
    impl = tmp_path / "boom.py"
    impl.write_text("raise RuntimeError('boom at import')\n")
    proc = pytest_suite("--impl", f"{impl}:Buffer", "-n", "2")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert _one_line(proc) == f"ERROR: --impl '{impl}:Buffer': importing '{impl}' failed: RuntimeError: boom at import"
    assert "node down" not in proc.stdout and "passed" not in proc.stdout


@pytest.mark.fresh_processes  # what a fresh controller imports
def test_xdist_controller_imports_no_torch(tmp_path):
    """The controller of -n N runs no test: it must not import torch or the class before
    starting the workers (that import is what -n 2 would otherwise pay twice, in series)."""
    probe = tmp_path / "controller.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-p", "controller_probe",
         "-n", "2", "--promise", "11"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "CONTROLLER_PROBE": str(probe), "PYTHONPATH": str(TESTS)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" in proc.stdout.splitlines()[-1]
    assert json.loads(probe.read_text()) == []


GC_PROBE_IMPL = """
import gc, pathlib, weakref

from cpugpu_conformance.reference import CpuGpuBuffer

PROBE = pathlib.Path({probe!r})


class Cycle:
    pass


class GcProbe(CpuGpuBuffer):
    def __init__(self, *size, **kwargs):
        made = Cycle()
        made.me = made
        alive = weakref.ref(made)
        del made
        gc.collect()
        PROBE.write_text(f"{{gc.get_freeze_count() > 10_000}} {{alive() is None}}")
        super().__init__(*size, **kwargs)
"""


def test_what_the_start_made_is_frozen_and_what_the_tests_make_is_collected(tmp_path):
    """conftest.py freezes what the suite's start made (torch's objects among it): the full collections
    of a run walk only what the tests make, and that is collected as ever. A fresh process, as a user runs
    it (the tests' fork server freezes its own imports)."""
    probe = tmp_path / "gc.txt"
    impl = tmp_path / "gc_probe.py"
    impl.write_text(GC_PROBE_IMPL.format(probe=str(probe)))
    proc = pytest_suite("--impl", f"{impl}:GcProbe", "--promise", "2", "--device", "cpu", fresh=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert probe.read_text() == "True True"


def test_class_that_kills_every_worker_at_import_is_never_a_pass(tmp_path):
    """The controller of -n does not import the class; a class whose import kills the process
    takes every worker down: the run ends, non-zero, saying nothing was tested."""
    impl = tmp_path / "segfaults_at_import.py"
    impl.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    proc = pytest_suite("--impl", f"{impl}:Buffer", "-n", "2")
    assert proc.returncode not in (0, 1), proc.stdout + proc.stderr
    assert "no pytest-xdist worker finished its run" in proc.stdout and "the run is not a pass" in proc.stdout
    assert " passed" not in proc.stdout


def test_ctrl_c_under_xdist_is_interrupted_and_says_nothing_else(tmp_path):
    """Ctrl-C reaches the controller and its workers (the terminal's process group): exit 2,
    pytest's own interrupted summary, and no claim that the workers went down."""
    marker = tmp_path / "testing.marker"
    impl = tmp_path / "sleeping_impl.py"
    impl.write_text(SLEEPING_IMPL.format(marker=str(marker)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", "-n", "2", "--impl", f"{impl}:Sleeper"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=default_sigint,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "no test started"
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 2, out
    assert "KeyboardInterrupt" in out
    assert "worker finished" not in out and " passed" not in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_nothing_testable_under_xdist_is_never_a_pass():
    """The plan comes from the workers: every asked device missing still reads as untested."""
    proc = pytest_suite("--device", "cuda", "-n", "2")
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert "nothing was tested: no requested device is available (cuda: no CUDA device" in proc.stdout


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and "usage:" not in proc.stderr
    return lines[0]


def test_unknown_device_is_refused(tmp_path):
    proc = pytest_suite("--device", "tpu", "--cell-result", str(tmp_path / "cell.json"))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert _one_line(proc) == "ERROR: --device 'tpu': unknown device; expected cpu, cuda, sim or all"
    refused = results.CellResult.load(tmp_path / "cell.json")  # the refusal replaces an older result
    assert refused["status"] == "error" and "--device 'tpu'" in refused["detail"]


def test_unknown_device_is_refused_by_run_too():
    proc = subprocess.run(
        [sys.executable, "-m", "cpugpu_conformance", "run", "--device", "tpu"],
        cwd=TESTS, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--device 'tpu': unknown device" in _one_line(proc)


def test_unknown_promise_is_refused():
    proc = pytest_suite("--promise", "3,14")
    assert proc.returncode == 4
    assert "unknown promise 14" in _one_line(proc)


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
    assert run.result["devices"]["cpu"] == {"status": "not_requested", "reason": "not requested (--device cuda)"}
    assert run.result["requested"] == {"device": "cuda", "promises": None}
    verdicts = {p: e["devices"]["cuda"]["verdict"] for p, e in run.result["promises"].items()}
    assert verdicts.pop("11") == "not_applicable", "promise 11 is about the CPU"
    assert set(verdicts.values()) == {"skipped"}
    answer = run.cell.answer()
    assert answer.kind == "untested" and not answer.clean, answer


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
@pytest.mark.parametrize(
    ("device_args", "requested", "reason"),
    [
        ((), "default", "not requested (default: the devices this machine has): no CUDA device"),
        (("--device", "cpu"), "cpu", "not requested (--device cpu)"),
    ],
    ids=["default", "cpu"],
)
def test_cuda_not_asked_for_is_not_requested(tmp_path, device_args, requested, reason):
    run = run_suite(tmp_path, "--promise", "10,11", *device_args)
    assert run.returncode == 0, run.stdout[-3000:]
    assert run.result["devices"]["cpu"] == {"status": "tested"}
    assert run.result["devices"]["cuda"]["status"] == "not_requested"
    assert run.result["devices"]["cuda"]["reason"].startswith(reason)
    assert run.result["requested"] == {"device": requested, "promises": ["10", "11"]}
    for promise in run.result["promises"].values():
        assert promise["devices"]["cuda"]["verdict"] == "not_requested"
    # Promise 10 is about CUDA: on the CPU it has nothing to check, which is not a skip.
    assert run.result["promises"]["10"]["devices"]["cpu"] == {
        "verdict": "not_applicable", "reason": "promise 10 is about cuda and sim", "passed": 0, "failed": 0, "skipped": 0}
    assert run.verdict("11") == "recorded"
    assert "test_cuda_pinned_memory" not in run.stdout, "a test of a promise that does not apply ran"
    assert run.cell.answer().clean


def test_cell_result_file(tmp_path):
    run = run_suite(tmp_path, "--promise", "1,11", "--cell-name", "my-cell", "--device", "all", profile="default")
    # --device all asks for CUDA too: on a machine without it, its pairs went untested (exit 6).
    expected = 0 if torch.cuda.is_available() else 6
    assert run.returncode == expected, run.stdout
    loaded = results.CellResult.load(tmp_path / "cell.json")  # validates the schema
    assert loaded["cell"] == "my-cell" and loaded["status"] == "completed"
    assert loaded["impl"] == "cpugpu_conformance.reference:CpuGpuBuffer"
    assert loaded["hypothesis_profile"] == "default"
    env = loaded["environment"]
    assert env["torch"] == torch.__version__ and env["numpy"] == numpy.__version__
    assert env["torch_cuda"] == torch.version.cuda and "python" in env and "platform" in env
    assert loaded["promises"]["1"]["devices"]["cpu"]["verdict"] == "passed"
    assert loaded["promises"]["1"]["devices"]["cpu"]["passed"] >= 1
    # Promise 4: no test of promise 1 or 11 checks it too (the engine-scale test of 1 also checks 2).
    assert loaded["promises"]["4"]["devices"]["cpu"] == {
        "verdict": "not_requested", "reason": "not selected (--promise)", "passed": 0, "failed": 0, "skipped": 0}
    assert loaded["requested"] == {"device": "all", "promises": ["1", "11"]}
    assert loaded["pytest_exitstatus"] == expected and loaded["warnings"] == []
    assert loaded.outcome("2", "cpu").kind == "not_requested"
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
