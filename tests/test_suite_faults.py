"""A suite run that does not end normally never leaves a pass behind.

Interrupted (SIGINT), killed (SIGKILL), a second run on the same result path, a crashed
xdist worker, a usage error, a -x stop, and a class that patches torch at import: each
is run for real, in a subprocess, and the result file is read through the model.
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from suite_runner import REPO, TESTS, default_sigint, run_suite, start_sleeping_suite, suite_command, suite_env

from cpugpu_conformance import results

pytestmark = pytest.mark.skipif(os.name != "posix", reason="sends POSIX signals")


def test_sigint_writes_interrupted_never_completed(tmp_path):
    path = tmp_path / "cell.json"
    run = start_sleeping_suite(tmp_path, path)
    try:
        run.wait_until_testing()
        os.kill(run.proc.pid, signal.SIGINT)
        returncode = run.finish()
    finally:
        run.kill()
    assert returncode == 2, run.output()
    cell = results.CellResult.load(path)
    assert cell.status == "interrupted", cell.detail
    assert "KeyboardInterrupt" in cell.detail and cell["pytest_exitstatus"] == 2
    assert not cell.answer().clean
    assert not path.with_name(f".{path.name}.lock").exists(), "the lock outlived the run"


def test_sigkill_leaves_the_in_progress_placeholder(tmp_path):
    path = tmp_path / "cell.json"
    results.CellResult.new("torch-old", "completed").write(path)  # an older run's file
    run = start_sleeping_suite(tmp_path, path)
    try:
        run.wait_until_testing()
        run.proc.send_signal(signal.SIGKILL)
        run.finish()
    finally:
        run.kill()
    cell = results.CellResult.load(path)
    assert cell.status == "interrupted" and "did not finish" in cell.detail, cell.detail
    assert cell.requested == {"device": "cpu", "promises": ["3"]}
    assert not cell.answer().clean


def test_second_run_on_the_same_path_refuses_and_leaves_the_file_alone(tmp_path):
    path = tmp_path / "cell.json"
    first = start_sleeping_suite(tmp_path, path)
    try:
        first.wait_until_testing()
        before = path.read_bytes(), path.stat().st_mtime_ns
        second = subprocess.run(suite_command(path, "--promise", "11"), cwd=REPO, env=suite_env(),
                                capture_output=True, text=True, timeout=300)
        after = path.read_bytes(), path.stat().st_mtime_ns
        assert first.proc.poll() is None, "the second run disturbed the first"
    finally:
        first.kill()
    assert second.returncode == 4, second.stdout + second.stderr
    lines = [line for line in second.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(path) in lines[0] and "another run" in lines[0], second.stderr
    assert after == before, "the refused run touched the first run's result file"
    assert results.CellResult.load(path).status == "interrupted"  # still the first run's placeholder


def test_crashed_xdist_worker_makes_the_cell_crashed(tmp_path):
    # The reported case: a constructor that segfaults on its fifth call, run with -n 2.
    run = run_suite(tmp_path, "--impl", f"{TESTS / 'bad_impls.py'}:SegfaultsOnFifth", "-n", "2",
                    "--device", "cpu", "--promise", "1,2")
    assert run.returncode != 0, run.stdout[-3000:]
    cell = run.cell
    assert cell.status == "crashed", (cell.status, cell.detail)
    assert "SIGSEGV" in cell.detail and "test_contract.py::TestContract::test_" in cell.detail, cell.detail
    assert cell.answer().kind == "crashed"
    assert cell.outcome("1", "cpu").kind == "crashed"
    assert "killed by SIGSEGV" in run.stdout, "the terminal report does not name the signal"


@pytest.mark.parametrize(
    ("args", "culprit"),
    [(("--impl", "no_such_module:Buffer"), "no module named 'no_such_module'"), (("--promise", "3,99"), "unknown promise 99")],
    ids=["impl", "promise"],
)
def test_usage_error_replaces_the_result_with_an_error(tmp_path, args, culprit):
    path = tmp_path / "cell.json"
    results.CellResult.new("torch-old", "completed").write(path)  # an older run's file
    proc = subprocess.run(suite_command(path, *args), cwd=REPO, env=suite_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and culprit in lines[0], proc.stderr
    cell = results.CellResult.load(path)
    assert cell.status == "error" and culprit in cell.detail, cell.detail


def test_stop_after_first_failure_under_xdist_is_a_completed_cell_with_its_failure(tmp_path):
    # xdist reports -x as an interruption (exit 2); the failure is still a verdict.
    run = run_suite(tmp_path, "--impl", "cpugpu_conformance.variants:PreFixCpuGpuBuffer", "-n", "2", "-x",
                    "--device", "cpu", "--promise", "3")
    assert run.returncode in (1, 2), run.stdout[-3000:]
    cell = run.cell
    assert cell.status == "completed", cell.detail
    assert cell.outcome("3", "cpu").kind == "failed"
    assert any("-x/--maxfail" in w for w in cell.warnings), cell.warnings
    assert cell.answer().kind == "failed"


PATCHING_IMPL = """
import contextlib

import torch

from cpugpu_conformance.reference import CpuGpuBuffer


def my_fake(mode=True):
    return contextlib.nullcontext()  # a "fix" that makes inference mode go away


torch.inference_mode = my_fake
"""


def test_impl_that_patches_torch_is_an_error_that_names_the_function(tmp_path):
    """torch is torch (issue 28, item 4): the run stops before any test, exit 4, the file says why."""
    impl = tmp_path / "patching_impl.py"
    impl.write_text(PATCHING_IMPL)
    run = run_suite(tmp_path, "--impl", f"{impl}:CpuGpuBuffer", "--promise", "11", "--device", "cpu")
    assert run.returncode == 4, run.stdout[-3000:]
    assert run.cell.status == "error" and "torch.inference_mode (now " in run.cell.detail, run.cell.detail
    assert "warning: importing --impl" in run.stdout and "torch.inference_mode" in run.stdout


# A correct buffer whose constructor takes a Ctrl-C and swallows the KeyboardInterrupt, as a
# gc callback or a library's `except BaseException` does: pytest never sees the interrupt.
SWALLOWS_SIGINT = '''
import os
import signal
import threading
import time

from cpugpu_conformance.reference import CpuGpuBuffer


class SwallowsSigint(CpuGpuBuffer):
    def __init__(self, *args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            return super().__init__(*args, **kwargs)  # the handler runs in the main thread: not swallowed there
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # Python runs the handler here, inside the try
        except KeyboardInterrupt:
            pass
        super().__init__(*args, **kwargs)
'''


def test_a_sigint_that_pytest_never_saw_is_still_an_interrupted_run(tmp_path):
    (tmp_path / "swallows.py").write_text(SWALLOWS_SIGINT)
    path = tmp_path / "cell.json"
    cmd = suite_command(path, "--impl", f"{tmp_path / 'swallows.py'}:SwallowsSigint", "--promise", "2")
    proc = subprocess.run(cmd, cwd=REPO, env=suite_env(), capture_output=True, text=True, timeout=600,
                          preexec_fn=default_sigint)
    cell = results.CellResult.load(path)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr
    assert cell.status == "interrupted" and "SIGINT" in cell.detail, cell.detail
    assert cell["pytest_exitstatus"] == 2 and not cell.answer().clean
