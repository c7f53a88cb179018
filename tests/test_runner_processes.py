"""runner/processes.py and the suite's launcher: signals and process groups.

The suite process ends right after pytest; a signal stops the test group and is recorded;
one run per result path. The interrupt tests run the cell runner in a process of its own
(signals go to a main thread) and poll for what they wait on, with deadlines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from cell_helpers import (
    ROOT,
    fake_python,
    is_gone,
    leftovers,
    on_disk,
    read_one_line_and_hang_up,
    spec,
    wait_for,
    writes_result,
)
from child_signals import default_sigint

from cpugpu_conformance import results
from cpugpu_conformance.cli import dispatch as cli
from cpugpu_conformance.runner import answer, cell, processes
from cpugpu_conformance.runner import install as installer

# --------------------------------------------------------------------------- the test process ends right after pytest
# answer.SUITE_LAUNCHER: pytest.main, flush, os._exit with pytest's code (no interpreter teardown).

PASSING = "def test_ok():\n    assert True\n"
FAILING = "def test_not_ok():\n    assert False, 'broken'\n"
# Writes a result file when the session finishes (as the suite's recorder does) and leaves an
# atexit marker: the marker is written only if the interpreter is torn down normally.
RECORDING_CONFTEST = """\
import atexit, sys
from pathlib import Path
sys.path.insert(0, {src!r})
from cpugpu_conformance import results

def pytest_sessionfinish(session, exitstatus):
    results.write_text_atomic(Path({folder!r}) / "result.json", '{{"exitstatus": %d}}' % exitstatus)

atexit.register(lambda: (Path({folder!r}) / "torn-down").write_text("yes"))
"""


def suite_process(tmp_path: Path, tests: str, *args: str, launcher: list[str] | None = None,
                  python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    """The cell's test process (or ``launcher``, e.g. ``-m pytest``) on a folder of tests."""
    (tmp_path / "test_it.py").write_text(tests)
    (tmp_path / "conftest.py").write_text(RECORDING_CONFTEST.format(src=str(ROOT / "src"), folder=str(tmp_path)))
    return subprocess.run([python, *(launcher or ["-c", answer.SUITE_LAUNCHER]), str(tmp_path), "-p", "no:cacheprovider",
                           *args], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("tests", "args", "code"), [(PASSING, (), 0), (FAILING, (), 1), (PASSING, ("--no-such-option",), 4),
                                                     (PASSING, ("-k", "nothing_matches"), 5)],
                         ids=["passed", "failed", "usage-error", "no-tests"])
def test_the_suite_process_keeps_pytests_exit_code_and_all_its_output(tmp_path: Path, tests: str, args: tuple, code: int) -> None:
    proc = suite_process(tmp_path, tests, *args)
    assert proc.returncode == code, proc.stdout + proc.stderr
    if code in (0, 1):
        assert proc.stdout.rstrip().splitlines()[-1].startswith("=") and " in " in proc.stdout.rstrip().splitlines()[-1], (
            "the summary line, the last thing pytest prints, reached the pipe")
    if code == 4:
        assert "--no-such-option" in proc.stderr


def test_the_suite_process_writes_its_result_then_skips_the_interpreters_teardown(tmp_path: Path) -> None:
    fast, control = tmp_path / "fast", tmp_path / "control"
    fast.mkdir()
    control.mkdir()
    proc = suite_process(fast, FAILING)
    assert proc.returncode == 1
    assert json.loads((fast / "result.json").read_text()) == {"exitstatus": 1}, "written, whole, before the exit"
    assert not (fast / "torn-down").exists(), "no teardown: atexit handlers do not run"
    assert not [p.name for p in fast.glob(".result.json.*")], "no temporary file left"
    slow = suite_process(control, FAILING, launcher=["-m", "pytest"])
    assert slow.returncode == 1 and (control / "torn-down").exists(), "python -m pytest tears the interpreter down"


# Marks a gc.collect() called after the session finished (pytest's closing collections);
# automatic collections are turned off then, so that only a called one counts.
GC_WATCH = """
import gc
from pathlib import Path
_finished = []
def pytest_sessionfinish(session, exitstatus):
    gc.disable()
    _finished.append(True)
def _watch(phase, info):
    if phase == "start" and info["generation"] == 2 and _finished:
        Path({folder!r}, "collected-after-the-session").touch()
gc.callbacks.append(_watch)
"""


def test_the_suite_process_skips_pytests_closing_garbage_collection(tmp_path: Path) -> None:
    fast, control = tmp_path / "fast", tmp_path / "control"
    for folder, launcher in ((fast, None), (control, ["-m", "pytest"])):
        folder.mkdir()
        (folder / "conftest_gc.py").write_text(GC_WATCH.format(folder=str(folder)))
        proc = suite_process(folder, PASSING, "-p", "conftest_gc", launcher=launcher)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (control / "collected-after-the-session").exists(), "python -m pytest collects garbage at its end"
    assert not (fast / "collected-after-the-session").exists(), "the cell's test process does not"


def test_an_interpreter_without_pytest_fails_like_python_m_pytest(tmp_path: Path) -> None:
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    proc = suite_process(tmp_path, PASSING, python=str(installer.env_python(venv)))
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"{installer.env_python(venv)}: No module named pytest"


def test_ctrl_c_in_the_suite_process_is_pytests_interrupted_exit(tmp_path: Path) -> None:
    started = tmp_path / "started"
    (tmp_path / "test_it.py").write_text(
        f"import time\ndef test_waits():\n    open({str(started)!r}, 'w').close()\n    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", answer.SUITE_LAUNCHER, str(tmp_path), "-p", "no:cacheprovider"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=default_sigint)  # a background job's SIGINT is ignored, and inherited
    try:
        wait_for(started.exists, "the test to start", timeout=60)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 2, out
        assert "KeyboardInterrupt" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


# --------------------------------------------------------------------------- one run per result path, interrupts

# The suite, held mid-run: it takes its staging file and lock as the recorder does, starts a
# child, says where they are, and waits to be stopped.
HELD_SUITE = """\
    import os, subprocess, sys, time
    args = sys.argv[1:]
    staging = args[args.index("--cell-result") + 1]
    open(staging, "w").write("{{}}")
    open(os.path.join(os.path.dirname(staging), "." + os.path.basename(staging) + ".lock"), "w").write("held")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print("still testing", flush=True)
    with open({pids!r} + ".tmp", "w") as fh:
        fh.write(f"{{os.getpid()}} {{child.pid}}")
    os.replace({pids!r} + ".tmp", {pids!r})
    time.sleep(120)
"""

# The cell runner in a process of its own (signal handlers belong to a main thread).
RUNNER = """\
    import sys
    from pathlib import Path
    from cpugpu_conformance.runner import CellSpec, cell, processes
    from cpugpu_conformance.runner.matrix import Release
    spec = CellSpec(name="torch-2.15.0-cpu", release=Release("2.15.0"), device="cpu", hypothesis_profile="ci",
                    time_limit_s=600, results_dir=Path({results!r}), project_dir=Path({root!r}))
    try:
        cell.run_cell(spec, {python!r})
    except processes.CellInterrupted as exc:
        print("runner stopped by", exc.signum, flush=True)
        sys.exit(3)
"""


def held_suite_pids(pids: Path) -> list[int] | None:
    try:
        return [int(p) for p in pids.read_text().split()]
    except (FileNotFoundError, ValueError):
        return None


class HeldRun:
    """A cell runner process whose suite is held mid-run."""

    def __init__(self, tmp_path: Path) -> None:
        self.pids_file = tmp_path / "suite.pids"
        self.spec = spec(tmp_path)
        python = fake_python(tmp_path / "held", HELD_SUITE.format(pids=str(self.pids_file)))
        script = tmp_path / "runner.py"
        script.write_text(textwrap.dedent(RUNNER.format(results=str(self.spec.results_dir), root=str(ROOT), python=str(python))))
        self.proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.pids: list[int] = wait_for(lambda: held_suite_pids(self.pids_file), "the suite to start")  # type: ignore[assignment]

    def stop(self, sig: int) -> tuple[int, str]:
        self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=60)
        return self.proc.returncode, out

    def cleanup(self) -> None:
        """Whatever the test did, leave no process behind."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=30)
        for pid in self.pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@pytest.fixture
def held_run(tmp_path: Path):
    runs: list[HeldRun] = []

    def start() -> HeldRun:
        runs.append(HeldRun(tmp_path))
        return runs[-1]

    yield start
    for run in runs:
        run.cleanup()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_ends_the_test_group_records_interrupted_and_leaves_no_files(held_run, sig: int) -> None:
    run = held_run()
    code, out = run.stop(sig)
    assert code == 3 and f"runner stopped by {int(sig)}" in out, out
    result = on_disk(run.spec)
    assert result.status == "interrupted"
    assert result["detail"].startswith(f"interrupted by {sig.name} (a cancelled CI job, Ctrl-C, a kill); last lines of the log:")
    assert "still testing" in result["detail"]
    assert result["environment"]["torch"] == "2.15.0+cu130" and result["requested"]["torch"] == "2.15.0"
    assert result.answer().kind == "interrupted" and not result.answer().clean
    for pid in run.pids:  # the suite and the child it started
        wait_for(lambda pid=pid: is_gone(pid), f"process {pid} of the test group to end", timeout=15)
    assert leftovers(run.spec) == [], "no staging file, no lock, no temporary write"


def test_a_second_run_on_the_same_result_path_refuses_and_leaves_the_first_alone(held_run, tmp_path: Path) -> None:
    run = held_run()
    # The runner copies the suite's output into the log as it comes: under load the line the suite
    # printed before it wrote its pids may not be there yet.
    def log_with_the_line() -> str | None:
        text = run.spec.log_path.read_text()
        return text if "still testing" in text else None

    first_log = wait_for(log_with_the_line, "the held suite's line in the log")
    before = run.spec.result_path.read_bytes()
    with pytest.raises(results.ResultPathBusy) as refused:
        cell.run_cell(spec(tmp_path), fake_python(tmp_path / "second", writes_result("passed")))
    message = str(refused.value)
    assert message.startswith(f"{run.spec.result_path}: another run is writing this result file")
    assert "\n" not in message
    assert run.spec.result_path.read_bytes() == before, "the running cell's file is untouched"
    assert run.spec.log_path.read_text().startswith(first_log), "and so is its log"
    assert run.proc.poll() is None, "the first run goes on"
    assert on_disk(run.spec).status == "interrupted", "while it runs, its path holds the placeholder"
    code, _ = run.stop(signal.SIGTERM)
    assert code == 3


def test_a_runner_killed_outright_leaves_interrupted_never_the_old_pass(held_run, tmp_path: Path) -> None:
    s = spec(tmp_path)
    cell.run_cell(s, fake_python(tmp_path / "earlier", writes_result("passed")))
    assert on_disk(s).answer().clean
    run = held_run()
    code, _ = run.stop(signal.SIGKILL)  # no handler runs: the placeholder is what remains
    assert code == -signal.SIGKILL
    result = on_disk(s)
    assert result.status == "interrupted"
    assert "did not finish: it was killed, or is still running" in result["detail"]
    assert cli.main(["summary", str(s.results_dir)]) == 1
    run.cleanup()  # its suite outlived it (its own session); the next run must not mind the leftovers
    after = cell.run_cell(s, fake_python(tmp_path / "later", writes_result("passed")))
    assert after.answer().clean and on_disk(s) == after
    assert leftovers(s) == []


# A suite that prints far more than a pipe holds (64 KiB) before it writes a passing result.
CHATTY = "for i in range(20000):\n    print('a chatty suite, line', i, flush=True)\n"


def chatty_passing_suite(where: Path) -> Path:
    return fake_python(where, CHATTY + textwrap.dedent(writes_result("passed")))


def test_a_closed_output_changes_nothing_in_the_cells_answer(tmp_path: Path) -> None:
    """`cell ... | head -1`: the runner stops printing, keeps reading the suite, and its answer stands."""
    s = spec(tmp_path)
    script = tmp_path / "runner.py"
    script.write_text(textwrap.dedent(RUNNER.format(results=str(s.results_dir), root=str(ROOT),
                                                    python=str(chatty_passing_suite(tmp_path / "chatty")))))
    code, err = read_one_line_and_hang_up([sys.executable, str(script)], timeout=120)
    assert code == 0 and "Traceback" not in err, err
    result = on_disk(s)
    assert result.status == "completed" and result.answer().clean, result.describe()
    assert "a chatty suite, line 19999" in s.log_path.read_text(), "the log still has every line"
    assert leftovers(s) == []


def _in_main_thread() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers belong to the main thread")


def test_a_signal_during_cleanup_waits_until_the_cleanup_is_done() -> None:
    _in_main_thread()
    previous = signal.getsignal(signal.SIGTERM)
    done = []
    with processes.interrupts_raised() as interrupts:
        assert signal.getsignal(signal.SIGTERM) == interrupts.handle
        with pytest.raises(processes.CellInterrupted) as raised:
            with interrupts.deferred():
                signal.raise_signal(signal.SIGTERM)  # runs the handler before it returns
                done.append("cleaned up")
        assert done == ["cleaned up"] and raised.value.signum == signal.SIGTERM
        signal.raise_signal(signal.SIGINT)  # once is enough: the run is already stopping
    assert signal.getsignal(signal.SIGTERM) == previous, "the previous handler is back"


def test_a_runner_bug_is_recorded_as_error_not_left_as_the_placeholder(tmp_path: Path, monkeypatch) -> None:
    s = spec(tmp_path)

    def broken_probe(python):
        raise RuntimeError("probe exploded")

    monkeypatch.setattr(cell, "probe_torch", broken_probe)
    with pytest.raises(RuntimeError):
        cell.run_cell(s, sys.executable)
    result = on_disk(s)
    assert result.status == "error" and result["detail"] == "the cell runner failed: RuntimeError: probe exploded"
    assert leftovers(s) == []


