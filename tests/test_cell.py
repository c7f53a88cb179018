"""cell.py: every way a cell can end is recorded, and a cell never passes on the wrong torch.

The fault tests use a fake interpreter: it answers the torch probe (``python -c``) like
Python, with a fake torch package of the version a test chooses, and does whatever the
test asks instead of running pytest. The interrupt tests run the cell runner in a process
of its own (signals go to a main thread) and poll for what they wait on, with deadlines.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import result_factory as rf
from child_signals import default_sigint

from cpugpu_conformance import cell, results
from cpugpu_conformance.cell import CellSpec, Install, torch_mismatch
from cpugpu_conformance.matrix import Release
from cpugpu_conformance.promises import PROMISES, RECORDED_ONLY, applies

ROOT = Path(__file__).resolve().parents[1]


def fake_torch(where: Path, version: str = "2.15.0+cu130", cuda: str | None = "13.0") -> Path:
    pkg = where / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('a fake torch, only version.py is real')\n")
    (pkg / "version.py").write_text(textwrap.dedent(f"""\
        from typing import Optional
        __version__ = {version!r}
        cuda: Optional[str] = {cuda!r}
        git_version = 'abc123'
    """))
    return where


def fake_python(tmp_path: Path, behaviour: str, *, torch_version: str = "2.15.0+cu130", cuda: str | None = "13.0") -> Path:
    """An interpreter whose torch is fake and whose suite run (`-c LAUNCHER conformance ...` or
    `-m pytest conformance ...`) runs ``behaviour`` (argv kept); any other `-c CODE` is Python's."""
    site = fake_torch(tmp_path / "site", torch_version, cuda)
    script = tmp_path / "behaviour.py"
    script.write_text(textwrap.dedent(behaviour))
    exe = tmp_path / "python"
    exe.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        export PYTHONPATH={site}
        if [ "$1" = "-c" ] && [ "$3" != "conformance" ]; then exec {sys.executable} "$@"; fi
        shift 2  # -c LAUNCHER, or -m pytest
        exec {sys.executable} {script} "$@"
    """))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def spec(tmp_path: Path, *, release: Release | None = None, limit: float = 60, device: str | None = "cpu",
         name: str = "torch-2.15.0-cpu") -> CellSpec:
    return CellSpec(name=name, release=release or Release("2.15.0"), device=device, hypothesis_profile="ci", time_limit_s=limit,
                    results_dir=tmp_path / "results", project_dir=ROOT)


# Writes a completed result where the suite would (argv: conformance --cell-result PATH --cell-name NAME ...):
# promise 1 asked for (--promise 1) and checked on cpu, with the given verdict.
WRITE_RESULT = """\
    import sys
    sys.path.insert(0, {src!r})
    from cpugpu_conformance import results
    args = sys.argv[1:]
    path, name = args[args.index("--cell-result") + 1], args[args.index("--cell-name") + 1]
    verdict = {verdict!r}
    on_cpu = {{"verdict": verdict, "passed": int(verdict == "passed"), "failed": int(verdict == "failed"), "skipped": 0}}
    if verdict == "failed":
        on_cpu["failures"] = [{{"test": "test_shape", "message": "AssertionError: shape differs"}}]
    results.CellResult.new(
        name, "completed", environment={{"torch": {torch!r}}}, duration_s=1.5,
        requested={{"promises": ["1"], "device": "cpu"}},
        devices={{"cpu": {{"status": "tested"}}, "cuda": {{"status": "not_requested", "reason": "--device cpu"}}}},
        promises={{"1": {{"title": "Shape and dtype", "devices": {{"cpu": on_cpu, "cuda": {{"verdict": "not_requested"}}}}}}}},
        counts={{"passed": int(verdict == "passed"), "failed": int(verdict == "failed"), "skipped": 0}}).write(path)
    print("suite args:", " ".join(args))
    sys.exit(0 if verdict == "passed" else 1)
"""


def writes_result(verdict: str = "passed", torch: str = "2.15.0+cu130") -> str:
    return WRITE_RESULT.format(src=str(ROOT / "src"), verdict=verdict, torch=torch)


def on_disk(s: CellSpec) -> results.CellResult:
    return results.load(s.result_path)


def leftovers(s: CellSpec) -> list[str]:
    """Hidden files in the results folder: staging files, locks, temporary writes."""
    return sorted(p.name for p in s.results_dir.glob(".*"))


# --------------------------------------------------------------------------- outcomes of the test process


def test_finished_run_keeps_the_suites_result_and_the_command_it_was_given(tmp_path: Path) -> None:
    s = spec(tmp_path)
    s.pytest_args = ("--impl", "pkg.mod:Cls")
    result = cell.run_cell(s, fake_python(tmp_path, writes_result("passed")))
    assert isinstance(result, results.CellResult)
    assert result == on_disk(s)
    assert result.status == "completed" and result.answer().clean
    assert result.describe() == "passed (1 passed, 0 failed, 0 untested, 0 recorded)"
    # what the cell asked for, and what the suite says it was asked (its own keys win)
    assert result["requested"]["torch"] == "2.15.0" and result["requested"]["device"] == "cpu"
    assert result["requested"]["promises"] == ["1"]
    log = s.log_path.read_text()
    assert f" -c {cell.SUITE_LAUNCHER} conformance --cell-result " in log, "the fast-exit launcher runs pytest"
    assert "suite args: conformance --cell-result" in log
    assert "--cell-name torch-2.15.0-cpu --hypothesis-profile ci -p no:cacheprovider --device cpu --impl pkg.mod:Cls" in log
    assert leftovers(s) == [], "the staging file and the lock are gone"


def test_failed_promise_is_a_completed_cell_that_is_not_clean(tmp_path: Path) -> None:
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, writes_result("failed")))
    assert result.status == "completed"
    assert result.answer().kind == "failed" and not result.answer().clean
    assert result.describe() == "FAILED (0 passed, 1 failed, 0 untested, 0 recorded)"


def test_a_completed_run_that_checked_nothing_is_untested_not_passed(tmp_path: Path) -> None:
    """The suite said 'passed' but counted no check: the model's rule, not the writer's word, decides."""
    behaviour = writes_result("passed").replace('"passed": int(verdict == "passed")', '"passed": 0', 1)
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, behaviour))
    assert result.status == "completed"
    assert result.answer().kind == "untested" and not result.answer().clean
    assert result.describe().startswith("UNTESTED (0 passed, 0 failed, 1 untested")


def test_abort_is_recorded_as_crashed_with_the_log_tail(tmp_path: Path) -> None:
    s = spec(tmp_path)
    result = cell.run_cell(s, fake_python(tmp_path, "import os\nprint('collecting the buffer tests')\nos.abort()\n"))
    assert result == on_disk(s)
    assert result["status"] == "crashed"
    assert result.describe().startswith("crashed: killed by SIGABRT")
    assert result["detail"].startswith("killed by SIGABRT; last lines of the log:")
    assert "collecting the buffer tests" in result["detail"]
    assert result["environment"]["torch"] == "2.15.0+cu130"  # what the cell had, for the report
    assert "promises" not in result
    assert leftovers(s) == []


def test_killed_like_out_of_memory_is_crashed(tmp_path: Path) -> None:
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"))
    assert result["status"] == "crashed" and result["detail"].startswith("killed by SIGKILL")


def test_stale_pass_does_not_survive_a_crash(tmp_path: Path) -> None:
    s = spec(tmp_path)
    cell.run_cell(s, fake_python(tmp_path / "a", writes_result("passed")))
    assert on_disk(s)["status"] == "completed"
    cell.run_cell(s, fake_python(tmp_path / "b", "import os\nos.abort()\n"))
    assert on_disk(s)["status"] == "crashed"


def test_past_the_time_limit_is_timed_out_and_the_process_group_is_gone(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    behaviour = f"""\
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("still testing", flush=True)
        time.sleep(60)
    """
    s = spec(tmp_path, limit=1)
    started = time.monotonic()
    result = cell.run_cell(s, fake_python(tmp_path, behaviour))
    assert time.monotonic() - started < 30
    assert result["status"] == "timed_out"
    assert result["detail"].startswith("killed after the cell's time limit of 1 s; last lines of the log:")
    assert "still testing" in result["detail"]
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the child is killed; it is reaped by init shortly after
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        state = Path(f"/proc/{child}/stat").read_text().split()[2] if Path(f"/proc/{child}/stat").exists() else "X"
        if state in ("Z", "X"):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the test process's child {child} outlived the time limit")


def test_past_the_time_limit_a_child_in_a_session_of_its_own_is_killed_too(tmp_path: Path) -> None:
    """A child that called setsid is out of the group kill's reach; the cell finds it by its parent."""
    pidfile = tmp_path / "child.pid"
    behaviour = f"""\
        import os, subprocess, time
        child = subprocess.Popen(["sleep", "60"], start_new_session=True)
        open({str(pidfile)!r} + ".tmp", "w").write(str(child.pid))
        os.replace({str(pidfile)!r} + ".tmp", {str(pidfile)!r})
        print("started a session of its own", flush=True)
        time.sleep(60)
    """
    result = cell.run_cell(spec(tmp_path, limit=5), fake_python(tmp_path, behaviour))
    assert result["status"] == "timed_out"
    child = int(pidfile.read_text())
    try:
        wait_for(lambda: is_gone(child), f"the child {child} in its own session to end", timeout=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    assert "outlived" not in result["detail"]


def test_a_class_that_starts_a_session_of_its_own_leaves_nothing_running(tmp_path: Path) -> None:
    """The real suite, the class of tests/stray_impls.py; the cell runner is stopped (SIGTERM) once the child runs."""
    pidfile = tmp_path / "stray.pid"
    release = cell.base_version(cell.probe_torch(sys.executable)["torch"])
    script = tmp_path / "runner.py"
    script.write_text(textwrap.dedent(f"""\
        import sys
        from pathlib import Path
        from cpugpu_conformance import cell
        from cpugpu_conformance.matrix import Release
        spec = cell.CellSpec(name="torch-{release}-cpu", release=Release({release!r}), device="cpu", hypothesis_profile="ci",
                             time_limit_s=600, results_dir=Path({str(tmp_path / "results")!r}), project_dir=Path({str(ROOT)!r}),
                             pytest_args=("--impl", {str(ROOT / "tests" / "stray_impls.py")!r} + ":StartsASessionOfItsOwn",
                                          "--promise", "1", "-x"))
        try:
            cell.run_cell(spec, sys.executable)
        except cell.CellInterrupted:
            sys.exit(3)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, STRAY_PIDFILE=str(pidfile)))
    child = None
    try:
        child = int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), "the class to start its child", timeout=180))
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 3, out
        wait_for(lambda: is_gone(child), f"the class's child {child} (its own session) to end", timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
    assert results.load(tmp_path / "results" / f"torch-{release}-cpu.json").status == "interrupted"


@pytest.mark.parametrize(
    ("behaviour", "headline"),
    [
        ("import sys\nprint('ERROR: usage: bad --impl')\nsys.exit(4)\n", "pytest exited 4 (usage error)"),
        ("import sys\nsys.exit(5)\n", "pytest exited 5 (nothing tested) without a usable result file"),
        ("print('all fine, honest')\n", "pytest exited 0 without a usable result file"),
    ],
    ids=["usage-error", "nothing-collected", "no-result-file"],
)
def test_a_run_that_did_not_finish_its_job_is_an_error(tmp_path: Path, behaviour: str, headline: str) -> None:
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, behaviour))
    assert result["status"] == "error"
    assert result["detail"].startswith(headline)
    assert not result.answer().clean


@pytest.mark.parametrize("code", [5, 6], ids=["nothing-tested", "partly-tested"])
def test_a_suite_that_left_promises_untested_is_a_finished_run_whose_answer_is_untested(tmp_path: Path, code: int) -> None:
    """Exit 5 (a cuda cell on a machine without a GPU) and 6 come with a completed result file: it holds the answer."""
    behaviour = writes_result("skipped").replace('sys.exit(0 if verdict == "passed" else 1)', f"sys.exit({code})")
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, behaviour))
    assert result.status == "completed"
    assert result.answer().kind == "untested" and not result.answer().clean
    assert result.describe().startswith("UNTESTED (0 passed, 0 failed, 1 untested")


def test_a_suite_that_printed_nothing_is_explained_by_the_log_never_called_empty(tmp_path: Path) -> None:
    s = spec(tmp_path)
    result = cell.run_cell(s, fake_python(tmp_path, "import sys\nsys.exit(3)\n"))
    assert result["status"] == "error"
    assert result["detail"].startswith("pytest exited 3 (internal error); last lines of the log:\n$ ")
    assert "the log is empty" not in result["detail"]


def test_the_log_tail_is_read_from_the_end_of_the_log(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i} {'x' * 90}\n" for i in range(40_000)))  # 4 MB
    assert cell._log_tail(log, 2) == [f"line {i} {'x' * 90}" for i in (39_998, 39_999)]
    assert len(cell._log_tail(log)) == cell.LOG_TAIL_LINES
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    got: list[list[str]] = []
    reader = threading.Thread(target=lambda: got.append(cell._log_tail(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():
        with open(fifo, "w"):  # let the blocked open go
            pass
        pytest.fail("reading a FIFO as a log blocked")
    assert got == [[]]


def test_pytest_exit_2_is_interrupted_never_completed_or_error(tmp_path: Path) -> None:
    behaviour = "import sys\nprint('!!!!!!!!!!!!!!!!!!! KeyboardInterrupt !!!!!!!!!!!!!!!!!!!')\nsys.exit(2)\n"
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, behaviour))
    assert result.status == "interrupted"
    assert result["detail"].startswith("pytest exited 2 (interrupted); last lines of the log:")
    assert "KeyboardInterrupt" in result["detail"]
    assert result.answer().kind == "interrupted" and not result.answer().clean


def test_a_result_under_another_name_or_profile_is_an_error_not_published(tmp_path: Path) -> None:
    """An owned option that reached pytest anyway (a plugin, a conftest): the suite's result says so, the cell refuses it."""
    behaviour = writes_result("passed").replace(
        'name = args[args.index("--cell-result") + 1], args[args.index("--cell-name") + 1]',
        'name = args[args.index("--cell-result") + 1], "torch-2.15.0-cpu-smuggled"')
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, behaviour))
    assert result.status == "error" and result.name == "torch-2.15.0-cpu"
    assert result["detail"] == ("the suite recorded cell 'torch-2.15.0-cpu-smuggled' with hypothesis profile None, the cell set "
                                "'torch-2.15.0-cpu' with 'ci': an option the cell sets itself reached pytest")


def test_an_invalid_result_file_is_an_error_not_a_pass(tmp_path: Path) -> None:
    behaviour = """\
        import sys
        args = sys.argv[1:]
        open(args[args.index("--cell-result") + 1], "w").write('{"status": "completed"}')
    """
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, behaviour))
    assert result["status"] == "error"
    assert "not a valid cell result" in result["detail"]


# --------------------------------------------------------------------------- the torch it asked for


def test_wrong_torch_version_stops_the_cell_before_testing(tmp_path: Path) -> None:
    s = spec(tmp_path)
    result = cell.run_cell(s, fake_python(tmp_path, writes_result("passed"), torch_version="2.14.1+cu130"))
    assert result["status"] == "wrong_torch"
    assert result["detail"].startswith("asked for torch 2.15.0, the environment has torch 2.14.1+cu130 (")
    assert "suite args" not in s.log_path.read_text(), "the suite never ran"
    assert not result.answer().clean


def test_torch_the_suite_imported_is_checked_too(tmp_path: Path) -> None:
    # version.py said 2.15.0 but the suite reports 2.14.1: trust the suite, refuse the verdicts.
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, writes_result("passed", torch="2.14.1")))
    assert result["status"] == "wrong_torch"
    assert result["detail"] == "asked for torch 2.15.0, the suite imported torch 2.14.1"
    assert "promises" not in result


@pytest.mark.parametrize(
    ("probe", "release", "device", "problem"),
    [
        ({"torch": "2.15.0+cu130", "torch_cuda": "13.0", "numpy": "2.1.0"}, Release("2.15.0"), "cuda", None),
        ({"torch": "2.15.0", "torch_cuda": None}, Release("2.15.0"), "cpu", None),
        ({"torch": "2.15.0+cu130", "torch_cuda": "13.0"}, Release("2.15.0", build="cpu"), "cpu", "the cu130 build"),
        ({"torch": "2.15.0", "torch_cuda": None}, Release("2.15.0", build="cu130"), "cpu", "the default build"),
        ({"torch": "2.15.0+cpu", "torch_cuda": None}, Release("2.15.0"), "cuda", "a CPU-only build"),
        ({"torch": "2.1.2+cu121", "numpy": "2.1.0"}, Release("2.1.2", numpy="<2"), "cpu", "the environment has numpy 2.1.0"),
        ({"torch": "2.1.2+cu121", "numpy": "1.26.4"}, Release("2.1.2", numpy="<2"), "cpu", None),
        ({"torch_error": "SyntaxError: bad"}, Release("2.1.2"), "cpu", "SyntaxError: bad"),
        ({}, Release("2.1.2"), "cpu", "torch is not importable"),
        ({"probe_error": "No such file"}, Release("2.1.2"), "cpu", "cannot inspect the environment"),
        ({"torch": "2.13.0"}, Release("2.1.3"), "cpu", "the environment has torch 2.13.0"),
    ],
)
def test_torch_mismatch(probe: dict, release: Release, device: str, problem: str | None) -> None:
    found = torch_mismatch(probe, release, device)
    assert (found is None) if problem is None else (problem in (found or "")), found


def test_torch_from_outside_the_cell_environment_is_wrong(tmp_path: Path) -> None:
    probe = {"torch": "2.15.0", "torch_location": str(tmp_path / "elsewhere" / "torch")}
    assert "imported from outside it" in torch_mismatch(probe, Release("2.15.0"), "cpu", env_dir=tmp_path / "env")
    probe["torch_location"] = str((tmp_path / "env" / "lib" / "torch").resolve())
    assert torch_mismatch(probe, Release("2.15.0"), "cpu", env_dir=tmp_path / "env") is None


def test_probe_reads_the_torch_without_importing_it(tmp_path: Path) -> None:
    probe = cell.probe_torch(fake_python(tmp_path, "", torch_version="2.9.1+cu128", cuda="12.8"))
    assert (probe["torch"], probe["torch_cuda"], probe["torch_git_version"]) == ("2.9.1+cu128", "12.8", "abc123")
    assert probe["torch_location"] == str((tmp_path / "site" / "torch").resolve())


# --------------------------------------------------------------------------- a matrix cell's run


def test_a_matrix_cell_describes_its_own_run(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    path = tmp_path / "matrix.yaml"
    path.write_text(textwrap.dedent("""\
        python: "3.11"
        baseline: "2.14.1"
        candidates: ["2.15.0"]
        hypothesis_profile: thorough
        time_limit_s: 300
        index_url: https://download.pytorch.org/whl/cpu
        offline: true
        find_links: wheels
        torch:
          - {version: "2.14.1"}
          - {version: "2.15.0", time_limit_s: 900, index_url: "https://example.org/simple", numpy: "<3"}
        """))
    from cpugpu_conformance.matrix import load

    cells = load(path).cells
    s = CellSpec.from_matrix_cell(cells[1], results_dir=tmp_path / "results", project_dir=ROOT, pytest_args=["-k", "x"])
    assert (s.name, s.release, s.device, s.hypothesis_profile, s.time_limit_s) == (
        "torch-2.15.0-cpu", cells[1].release, "cpu", "thorough", 900)
    assert (s.index_url, s.find_links, s.offline) == ("https://example.org/simple", str(tmp_path / "wheels"), True)
    assert s.results_dir == (tmp_path / "results").resolve() and s.pytest_args == ("-k", "x")
    first = CellSpec.from_matrix_cell(cells[0], results_dir=tmp_path, project_dir=ROOT)
    assert (first.time_limit_s, first.index_url) == (300, "https://download.pytorch.org/whl/cpu"), "the matrix-wide ones"


def test_an_environment_that_cannot_be_made_is_the_cells_answer(tmp_path: Path) -> None:
    s = spec(tmp_path)
    result = cell.create_env_and_run(s, tmp_path / "env", "3.99")
    assert result.status == "not_installed" and result == on_disk(s)
    assert result["detail"].startswith(f"cannot make the environment {tmp_path / 'env'} (Python 3.99): ")
    assert leftovers(s) == []


# --------------------------------------------------------------------------- the test process ends right after pytest
# cell.SUITE_LAUNCHER: pytest.main, flush, os._exit with pytest's code (no interpreter teardown).

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
    return subprocess.run([python, *(launcher or ["-c", cell.SUITE_LAUNCHER]), str(tmp_path), "-p", "no:cacheprovider",
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
    proc = suite_process(tmp_path, PASSING, python=str(cell.env_python(venv)))
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"{cell.env_python(venv)}: No module named pytest"


def test_ctrl_c_in_the_suite_process_is_pytests_interrupted_exit(tmp_path: Path) -> None:
    started = tmp_path / "started"
    (tmp_path / "test_it.py").write_text(
        f"import time\ndef test_waits():\n    open({str(started)!r}, 'w').close()\n    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", cell.SUITE_LAUNCHER, str(tmp_path), "-p", "no:cacheprovider"],
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


# --------------------------------------------------------------------------- installing


def test_release_that_does_not_exist_is_not_installed_with_the_installers_error(tmp_path: Path) -> None:
    python = cell.create_env(tmp_path / "env", f"{sys.version_info.major}.{sys.version_info.minor}")
    s = spec(tmp_path, release=Release("99.0.0"), name="torch-99.0.0-cpu")
    result = cell.install_and_run(s, python, env_dir=tmp_path / "env")
    assert result == on_disk(s)
    assert result["status"] == "not_installed"
    assert "torch==99.0.0" in result["detail"]
    assert result["requested"]["requirements"] == ["torch==99.0.0", "numpy"]
    assert "torch==99.0.0" in s.log_path.read_text()


def test_install_command_takes_torch_from_the_index_and_the_project_from_a_file() -> None:
    cmd = cell.install_command(Path("/env/bin/python"), Release("2.1.2", numpy="<2", extra_packages=("setuptools",)),
                               index_url="https://download.pytorch.org/whl/cpu", requirements_file=Path("/tmp/p.txt"))
    tail = ["torch==2.1.2", "numpy<2", "setuptools", "-r", "/tmp/p.txt", "--extra-index-url", "https://download.pytorch.org/whl/cpu"]
    assert cmd[-len(tail):] == tail


def test_install_error_keeps_the_end_of_the_installers_output() -> None:
    out = "\n".join(f"line {i}" for i in range(100))
    detail = Install(False, ["uv", "pip", "install", "torch==99"], out, 0.1).error()
    assert detail.startswith("uv pip install torch==99 failed:\n")
    assert detail.endswith("line 99") and "line 59" not in detail


# --------------------------------------------------------------------------- the installer's output, as it comes

# A fake uv: says what it downloads (on stderr, as uv does), then waits for the test's go-ahead
# (a file) before it finishes, so the test can look at the output while it is still running.
SLOW_INSTALLER = """\
    import os, sys, time
    gate, pidfile, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(pidfile + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(pidfile + ".tmp", pidfile)
    print("Resolved 30 packages in 395ms", file=sys.stderr, flush=True)
    print("Downloading torch (846.9MiB)", file=sys.stderr, flush=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)
    print(" Downloaded torch", file=sys.stderr, flush=True)
    print("Installed 30 packages in 359ms", flush=True)
    sys.exit(code)
"""

# The cell runner's installer step in a process of its own, its stdout a pipe as in CI.
INSTALL_RUNNER = """\
    import sys
    from pathlib import Path
    from cpugpu_conformance import cell
    done = cell.run_installer({cmd!r}, log_path=Path({log!r}), heartbeat_s={heartbeat!r})
    print("runner:", "ok" if done.ok else "failed", "kept:", done.output.replace(chr(10), " | "), flush=True)
"""


class Installing:
    """A runner process whose fake installer is held mid-download until ``release()``."""

    def __init__(self, tmp_path: Path, heartbeat_s: float = 600, code: int = 0) -> None:
        installer = tmp_path / "installer.py"
        installer.write_text(textwrap.dedent(SLOW_INSTALLER))
        self.gate, self.pid_file, self.log = tmp_path / "go", tmp_path / "installer.pid", tmp_path / "cell.log"
        cmd = [sys.executable, str(installer), str(self.gate), str(self.pid_file), str(code)]
        script = tmp_path / "runner.py"
        script.write_text(textwrap.dedent(INSTALL_RUNNER.format(cmd=cmd, log=str(self.log), heartbeat=heartbeat_s)))
        self.proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(line.rstrip("\n") for line in self.proc.stdout),
                                       daemon=True)
        self.reader.start()

    def said(self, text: str) -> list[str]:
        return [line for line in list(self.lines) if text in line]

    def installer_pid(self) -> int:
        return int(wait_for(lambda: self.pid_file.exists() and self.pid_file.read_text(), "the installer to start"))

    def release(self) -> list[str]:
        self.gate.write_text("go")
        self.proc.wait(timeout=60)
        self.reader.join(timeout=10)
        return list(self.lines)

    def cleanup(self) -> None:
        self.gate.write_text("go")
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def installing(tmp_path: Path):
    runs: list[Installing] = []

    def start(**kw) -> Installing:
        runs.append(Installing(tmp_path, **kw))
        return runs[-1]

    yield start
    for run in runs:
        run.cleanup()


def test_the_installers_lines_reach_the_output_and_the_log_while_it_runs(installing) -> None:
    run = installing()
    wait_for(lambda: run.said("Downloading torch (846.9MiB)"), "the first download line, before the installer ends")
    pid = run.installer_pid()
    assert not is_gone(pid), "the installer is still running: it waits for the test"
    assert run.said("cell: ") and run.said("installer.py"), "the command line comes first"
    assert "Resolved 30 packages in 395ms\nDownloading torch (846.9MiB)\n" in run.log.read_text(), "the log has it too, already"
    assert not run.said("Installed 30 packages")
    lines = run.release()
    assert run.proc.returncode == 0
    assert lines[-3:-1] == [" Downloaded torch", "Installed 30 packages in 359ms"]
    assert lines[-1].startswith("runner: ok kept: Resolved 30 packages in 395ms | Downloading torch (846.9MiB) |")
    assert run.log.read_text().endswith(" Downloaded torch\nInstalled 30 packages in 359ms\n")


def test_a_quiet_installer_gets_a_heartbeat_that_names_the_download_and_the_log(installing) -> None:
    run = installing(heartbeat_s=0.1)
    # (an earlier beat may come before the installer has said anything: it names no download)
    [beat, *_] = wait_for(lambda: run.said("; downloading torch (846.9MiB); "), "a heartbeat naming the download")
    assert beat.startswith("cell: still installing (") and beat.endswith(f" s; downloading torch (846.9MiB); log: {run.log})")
    lines = run.release()
    assert "still installing" not in run.log.read_text(), "heartbeats are not the installer's output"
    assert "still installing" not in lines[-1], "nor part of the tail kept for not_installed"


def test_a_heartbeat_names_only_the_downloads_not_yet_done() -> None:
    progress = cell._InstallProgress()
    for line in ["Downloading torch (846.9MiB)", "Downloading nvidia-cudnn-cu13 (674.0MiB)", " Downloaded torch"]:
        progress.add(line)
    assert progress.heartbeat(None).endswith(" s; downloading nvidia-cudnn-cu13 (674.0MiB))")
    progress.add(" Downloaded nvidia-cudnn-cu13")
    assert progress.heartbeat(Path("r/x.log")).endswith(" s; log: r/x.log)")


def test_a_failed_install_keeps_the_tail_for_not_installed(installing) -> None:
    run = installing(code=1)
    wait_for(lambda: run.said("Downloading torch"), "the installer to start")
    lines = run.release()
    assert lines[-1].startswith("runner: failed kept: Resolved 30 packages")


def test_an_installer_that_cannot_start_is_a_failed_install_not_a_crash(tmp_path: Path) -> None:
    done = cell.run_installer([str(tmp_path / "no-uv-here"), "pip", "install", "torch==2.15.0"], log_path=tmp_path / "log")
    assert not done.ok
    assert done.error().startswith(f"{tmp_path / 'no-uv-here'} pip install torch==2.15.0 failed:\ncannot start the installer: ")
    assert "cannot start the installer" in (tmp_path / "log").read_text()


# The cell runner installing (held) in a process of its own, for the signal.
INSTALL_AND_RUN = """\
    import sys
    from pathlib import Path
    from cpugpu_conformance import cell
    from cpugpu_conformance.matrix import Release
    cell.install_command = lambda *args, **kw: {cmd!r}
    spec = cell.CellSpec(name="torch-2.15.0-cpu", release=Release("2.15.0"), device="cpu", hypothesis_profile="ci",
                         time_limit_s=600, results_dir=Path({results!r}), project_dir=Path({root!r}))
    try:
        cell.install_and_run(spec, Path(sys.executable))
    except cell.CellInterrupted as exc:
        print("runner stopped by", exc.signum, flush=True)
        sys.exit(3)
"""


def test_a_signal_while_installing_stops_the_installer_and_records_interrupted(tmp_path: Path) -> None:
    installer = tmp_path / "installer.py"
    installer.write_text(textwrap.dedent(SLOW_INSTALLER))
    pid_file = tmp_path / "installer.pid"
    cmd = [sys.executable, str(installer), str(tmp_path / "never"), str(pid_file), "0"]
    script = tmp_path / "runner.py"
    s = spec(tmp_path)
    script.write_text(textwrap.dedent(INSTALL_AND_RUN.format(cmd=cmd, results=str(s.results_dir), root=str(ROOT))))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pid = None
    try:
        pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), "the installer to start"))
        wait_for(lambda: "Downloading torch" in s.log_path.read_text(), "the installer's first lines in the log")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 3 and f"runner stopped by {int(signal.SIGTERM)}" in out, out
        wait_for(lambda: is_gone(pid), "the installer to be stopped with the cell", timeout=15)
        result = on_disk(s)
        assert result.status == "interrupted"
        assert result["detail"].startswith("interrupted by SIGTERM") and "Downloading torch (846.9MiB)" in result["detail"]
        assert leftovers(s) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        if pid is not None and not is_gone(pid):
            os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- summary


def _write(dirpath: Path, name: str, status: str, **fields) -> None:
    results.CellResult.new(name, status, **fields).write(dirpath / f"{name}.json")


def _write_dict(dirpath: Path, name: str, data: dict) -> None:
    results.CellResult(data).write(dirpath / f"{name}.json")


def summary_folder(tmp_path: Path) -> Path:
    """One cell of every kind of answer, and two without a readable result."""
    d = tmp_path / "results"
    _write_dict(d, "torch-2.13.0-cpu", rf.completed("2.13.0", cell="torch-2.13.0-cpu"))
    _write_dict(d, "torch-2.14.1-cpu", rf.completed("2.14.1", cell="torch-2.14.1-cpu", failed={
        ("3", "cpu"): [rf.failure("test_mutable", "RuntimeError: Inplace update to inference tensor", "print(1)")]}))
    _write_dict(d, "torch-2.12.0-cpu", rf.completed("2.12.0", cell="torch-2.12.0-cpu", drop_promises=("2",)))
    _write(d, "torch-2.9.1-cpu", "crashed", requested={"torch": "2.9.1", "device": "cpu"}, detail="killed by SIGABRT")
    _write(d, "torch-99.0.0-cpu", "not_installed", requested={"torch": "99.0.0", "device": "cpu"}, detail="no torch")
    results.placeholder("torch-2.11.0-cpu", requested={"torch": "2.11.0", "device": "cpu"}).write(d / "torch-2.11.0-cpu.json")
    (d / "torch-2.10.0-cpu.json").write_text("{not json")
    return d


ALL_CELLS = ["torch-2.13.0-cpu", "torch-2.14.1-cpu", "torch-2.12.0-cpu", "torch-2.9.1-cpu", "torch-99.0.0-cpu",
             "torch-2.11.0-cpu", "torch-2.10.0-cpu", "torch-2.15.0-cpu"]


def test_summary_table_shows_each_cells_answer_and_why(tmp_path: Path) -> None:
    d = summary_folder(tmp_path)
    rows = cell.summarize(d, ALL_CELLS)
    assert [(r.cell, r.torch, r.device, r.mark, r.clean) for r in rows] == [
        ("torch-2.9.1-cpu", "2.9.1", "cpu", "CRASHED", False),
        ("torch-2.10.0-cpu", "2.10.0", "cpu", "UNREADABLE", False),
        ("torch-2.11.0-cpu", "2.11.0", "cpu", "INTERRUPTED", False),  # a run in progress or killed: its placeholder
        ("torch-2.12.0-cpu", "2.12.0", "cpu", "UNTESTED", False),
        ("torch-2.13.0-cpu", "2.13.0", "cpu", "passed", True),
        ("torch-2.14.1-cpu", "2.14.1", "cpu", "FAILED", False),
        ("torch-2.15.0-cpu", "2.15.0", "cpu", "NO RESULT", False),  # a cell without a file is shown, not dropped
        ("torch-99.0.0-cpu", "99.0.0", "cpu", "NOT INSTALLED", False),
    ]
    lines = cell.format_summary(rows).splitlines()
    assert lines[0].split() == ["cell", "torch", "device", "answer", "passed", "failed", "untested", "recorded", "duration"]
    assert lines[1].split() == ["torch-2.9.1-cpu", "2.9.1", "cpu", "CRASHED", "-", "-", "-", "-", "-"]
    judged = str(sum(applies(p, "cpu") and p not in RECORDED_ONLY for p in PROMISES))  # a clean cell's passes on cpu
    fewer = str(int(judged) - 1)
    assert lines[4].split() == ["torch-2.12.0-cpu", "2.12.0", "cpu", "UNTESTED", fewer, "0", "1", "1", "12.5", "s"]
    assert lines[5].split() == ["torch-2.13.0-cpu", "2.13.0", "cpu", "passed", judged, "0", "0", "1", "12.5", "s"]
    assert lines[6].split() == ["torch-2.14.1-cpu", "2.14.1", "cpu", "FAILED", fewer, "1", "0", "1", "12.5", "s"]
    assert lines[8].split()[:5] == ["torch-99.0.0-cpu", "99.0.0", "cpu", "NOT", "INSTALLED"]
    why = lines[9:-1]
    assert why[0] == "torch-2.9.1-cpu: crashed: killed by SIGABRT"
    assert why[1].startswith(f"torch-2.10.0-cpu: {d / 'torch-2.10.0-cpu.json'}: not JSON")
    assert why[2].startswith("torch-2.11.0-cpu: interrupted: the run that started at ")
    assert why[3].startswith("torch-2.12.0-cpu: promise 2 (Zeroed) on cpu: untested")
    assert why[4].startswith("torch-2.14.1-cpu: promise 3 (Mutable wherever they were made) on cpu: failed")
    assert why[5] == f"torch-2.15.0-cpu: {d / 'torch-2.15.0-cpu.json'}: no such result file"
    assert why[6] == "torch-99.0.0-cpu: not installed: no torch"
    assert len(why) == 7, "the clean cell needs no reason"
    assert lines[-1] == "8 cells, 1 clean, 7 not (counts are promise x device outcomes)"


def test_summary_exits_0_only_when_every_cell_is_clean(tmp_path: Path) -> None:
    d = summary_folder(tmp_path)
    assert cell.main(["summary", str(d)]) == 1
    assert cell.main(["summary", str(d), "--cells", "torch-2.13.0-cpu"]) == 0
    for name in ALL_CELLS:
        if name != "torch-2.13.0-cpu":
            assert cell.main(["summary", str(d), "--cells", f"torch-2.13.0-cpu,{name}"]) == 1, name
    assert cell.main(["summary", str(tmp_path / "empty")]) == 2


def test_summary_without_names_reads_every_result_file(tmp_path: Path) -> None:
    d = summary_folder(tmp_path)
    names = {r.cell for r in cell.summarize(d)}
    assert names == set(ALL_CELLS) - {"torch-2.15.0-cpu"}


@pytest.mark.parametrize("kind", ["directory", "fifo", "not-a-result", "old-schema"])
def test_summary_of_an_unreadable_file_is_its_own_row_and_never_clean(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "torch-2.13.0-cpu.json"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "not-a-result":
        path.write_text('{"status": "completed"}')
    else:
        path.write_text(json.dumps({**rf.completed("2.13.0"), "schema_version": 1}))
    [row] = cell.summarize(tmp_path, ["torch-2.13.0-cpu"])
    assert (row.answer, row.clean, row.mark) == ("unreadable", False, "UNREADABLE")
    assert row.why.startswith(str(path))


def test_result_file_json_is_what_the_schema_accepts(tmp_path: Path) -> None:
    s = spec(tmp_path)
    cell.run_cell(s, fake_python(tmp_path, "import os\nos.abort()\n"))
    data = json.loads(s.result_path.read_text())
    results.validate(data)
    assert data["schema_version"] == results.SCHEMA_VERSION
    assert data["requested"] == {"device": "cpu", "hypothesis_profile": "ci", "time_limit_s": 60, "torch": "2.15.0",
                                 "numpy": None, "build": None, "requirements": ["torch==2.15.0", "numpy"],
                                 "index_url": None}


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
    from cpugpu_conformance import cell
    from cpugpu_conformance.matrix import Release
    spec = cell.CellSpec(name="torch-2.15.0-cpu", release=Release("2.15.0"), device="cpu", hypothesis_profile="ci",
                         time_limit_s=600, results_dir=Path({results!r}), project_dir=Path({root!r}))
    try:
        cell.run_cell(spec, {python!r})
    except cell.CellInterrupted as exc:
        print("runner stopped by", exc.signum, flush=True)
        sys.exit(3)
"""


def wait_for(condition: Callable[[], object], what: str, timeout: float = 30) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"waited {timeout:g} s for {what}")


def is_gone(pid: int) -> bool:
    """Not running: no such process, or a zombie waiting for init to reap it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


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
    first_log = run.spec.log_path.read_text()
    assert "still testing" in first_log
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
    assert cell.main(["summary", str(s.results_dir)]) == 1
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
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline()
        proc.stdout.close()  # what `| head -1` does after its line
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err
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
    with cell.interrupts_raised() as interrupts:
        assert signal.getsignal(signal.SIGTERM) == interrupts.handle
        with pytest.raises(cell.CellInterrupted) as raised:
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


# --------------------------------------------------------------------------- the CI fallback (record-unfinished)


def test_fallback_records_a_missing_result_as_error_with_the_nox_tail(tmp_path: Path) -> None:
    log = tmp_path / "nox.log"
    log.write_text("nox > Running session conformance\nnox > Python interpreter 3.11 not found\n")
    path = tmp_path / "results" / "torch-2.15.0-cpu.json"
    line = cell.record_unfinished(path, "torch-2.15.0-cpu", "conformance(torch='2.15.0', device='cpu')", log)
    assert line == f"{path}: recorded as error"
    result = results.load(path)
    assert result.status == "error" and result.name == "torch-2.15.0-cpu"
    assert result["detail"].startswith("nox -s conformance(torch='2.15.0', device='cpu') ended without a result file\n")
    assert result["detail"].endswith("Python interpreter 3.11 not found")


def test_fallback_adds_the_nox_tail_to_a_placeholder_and_keeps_it_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "torch-2.15.0-cpu.json"
    results.placeholder("torch-2.15.0-cpu", requested={"torch": "2.15.0", "device": "cpu"}).write(path)
    log = tmp_path / "nox.log"
    log.write_text("nox > Running session conformance\nError: The operation was canceled.\n")
    assert cell.record_unfinished(path, "torch-2.15.0-cpu", "s", log) == f"{path}: recorded as interrupted"
    result = results.load(path)
    assert result.status == "interrupted" and result.requested["torch"] == "2.15.0"
    assert "did not finish" in result["detail"] and result["detail"].endswith("The operation was canceled.")


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b'{"status": "completed"}'], ids=["json", "utf8", "schema"])
def test_fallback_replaces_an_unreadable_result_with_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "torch-2.15.0-cpu.json"
    path.write_bytes(content)
    assert cell.record_unfinished(path, "torch-2.15.0-cpu", "s", tmp_path / "no-log") == f"{path}: recorded as error"
    result = results.load(path)
    assert result.status == "error"
    assert result["detail"].startswith(f"nox -s s left a result file that cannot be read ({path}: ")
    assert result["detail"].endswith("nox -s s left no output")


def test_fallback_keeps_an_answer_that_stands(tmp_path: Path) -> None:
    path = tmp_path / "torch-2.15.0-cpu.json"
    results.CellResult.new("torch-2.15.0-cpu", "crashed", detail="SIGABRT").write(path)
    before = path.read_bytes()
    assert cell.record_unfinished(path, "torch-2.15.0-cpu", "s") is None
    assert path.read_bytes() == before
    assert cell.main(["record-unfinished", str(path), "--cell", "torch-2.15.0-cpu", "--session", "s"]) == 0


# --------------------------------------------------------------------------- the real suite (issue 4)
# These run `pytest conformance` with the torch of the interpreter running the tests.

ABORTING_IMPL = """\
import os


class Buffer:
    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        os.abort()
"""


def real_cell(tmp_path: Path, name: str, *pytest_args: str, limit: float = 600, profile: str = "ci") -> dict:
    installed = cell.base_version(cell.probe_torch(sys.executable)["torch"])
    s = CellSpec(name=name, release=Release(installed), device="cpu", hypothesis_profile=profile, time_limit_s=limit,
                 results_dir=tmp_path / "results", project_dir=ROOT, pytest_args=pytest_args)
    return cell.run_cell(s, sys.executable)


def test_each_fault_gets_its_own_mark_in_the_report_while_the_other_cells_stand(tmp_path: Path) -> None:
    impl = tmp_path / "aborting.py"
    impl.write_text(ABORTING_IMPL)
    real_cell(tmp_path, "reference", "--promise", "1,2")
    real_cell(tmp_path, "aborting-impl", "--impl", f"{impl}:Buffer", "--promise", "1")
    real_cell(tmp_path, "one-second-limit", limit=1)
    python = cell.create_env(tmp_path / "env", f"{sys.version_info.major}.{sys.version_info.minor}")
    cell.install_and_run(spec(tmp_path, release=Release("99.0.0"), name="torch-99.0.0-cpu"), python)

    out = tmp_path / "compat"
    proc = subprocess.run([sys.executable, "-m", "cpugpu_conformance", "report", str(tmp_path / "results"), "--out", str(out)],
                          check=False, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    cells = {c["cell"]: c for c in json.loads((out / "compat.json").read_text())["cells"]}
    assert set(cells) == {"reference", "aborting-impl", "one-second-limit", "torch-99.0.0-cpu"}
    expected = {"aborting-impl": "crashed", "one-second-limit": "timed_out", "torch-99.0.0-cpu": "not_installed"}
    for name, status in expected.items():
        assert cells[name]["status"] == status
        marks = {m["mark"] for by_device in cells[name]["marks"].values() for m in by_device.values()}
        assert marks == {status}, (name, marks)
    assert cells["reference"]["status"] == "completed"
    assert cells["reference"]["marks"]["1"]["cpu"]["mark"] == "passed"
    assert cells["reference"]["marks"]["2"]["cpu"]["mark"] == "passed"
    assert "SIGABRT" in cells["aborting-impl"]["detail"]
    markdown = (out / "COMPAT.md").read_text()
    for label in ("💥 crashed", "⏱ timed out", "📦 not installed", "✅ pass"):
        assert label in markdown


def _verdicts(result: dict) -> dict:
    return {(p, d): (v["verdict"], v.get("passed"), v.get("failed"), v.get("skipped"),
                     [(f["test"], f["message"], f.get("reproducer")) for f in v.get("failures") or []])
            for p, promise in result["promises"].items() for d, v in promise["devices"].items()}


def test_ci_profile_gives_the_same_verdicts_twice(tmp_path: Path) -> None:
    """The gate compares two runs; with the derandomized profile a run is a function of torch and the class."""
    # A broken class, so that there are failures (and their minimal examples) to compare, not only passes.
    args = ("--impl", "cpugpu_conformance.variants:HalfFixedCpuGpuBuffer")
    first = real_cell(tmp_path / "a", "twice", *args)
    second = real_cell(tmp_path / "b", "twice", *args)
    assert first["status"] == second["status"] == "completed"
    assert any(v[0] == "failed" for v in _verdicts(first).values()), "the broken class must fail something"
    assert any(v[0] == "passed" for v in _verdicts(first).values())
    assert _verdicts(first) == _verdicts(second)
    assert first["observations"] == second["observations"]
