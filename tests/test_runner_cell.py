"""runner/cell.py: every way a cell can end is recorded, and a cell never passes on the wrong torch.

The fault tests use a fake interpreter (cell_helpers.fake_python). The CI fallback
(record-unfinished) and two runs of the real suite are here too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from cell_helpers import ROOT, fake_python, is_gone, leftovers, on_disk, spec, wait_for, writes_result

from cpugpu_conformance import results
from cpugpu_conformance.cli import dispatch as cli
from cpugpu_conformance.report.marks import MARKS
from cpugpu_conformance.runner import CellSpec, answer, cell, processes
from cpugpu_conformance.runner import install as installer
from cpugpu_conformance.runner.matrix import Release

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
    assert f" -c {answer.SUITE_LAUNCHER} conformance --cell-result " in log, "the fast-exit launcher runs pytest"
    assert "suite args: conformance --cell-result" in log
    assert "--cell-name torch-2.15.0-cpu --hypothesis-profile ci -p no:cacheprovider --device cpu --impl pkg.mod:Cls" in log
    assert leftovers(s) == [], "the staging file and the lock are gone"


def test_failed_promise_is_a_completed_cell_that_is_not_clean(tmp_path: Path) -> None:
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, writes_result("failed")))
    assert result.status == "completed"
    assert result.answer().kind == "failed" and not result.answer().clean
    assert result.describe() == "FAILED (0 passed, 1 failed, 0 untested, 0 recorded)"


def assert_completed_but_untested(result) -> None:
    """A finished run whose answer is UNTESTED: a completed file, never a pass."""
    assert result.status == "completed"
    assert result.answer().kind == "untested" and not result.answer().clean
    assert result.describe().startswith("UNTESTED (0 passed, 0 failed, 1 untested")


def test_a_completed_run_that_checked_nothing_is_untested_not_passed(tmp_path: Path) -> None:
    """The suite said 'passed' but counted no check: the model's rule, not the writer's word, decides."""
    behaviour = writes_result("passed").replace('"passed": int(verdict == "passed")', '"passed": 0', 1)
    assert_completed_but_untested(cell.run_cell(spec(tmp_path), fake_python(tmp_path, behaviour)))


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
    release = installer.base_version(installer.probe_torch(sys.executable)["torch"])
    script = tmp_path / "runner.py"
    script.write_text(textwrap.dedent(f"""\
        import sys
        from pathlib import Path
        from cpugpu_conformance.runner import CellSpec, cell, processes
        from cpugpu_conformance.runner.matrix import Release
        spec = CellSpec(name="torch-{release}-cpu", release=Release({release!r}), device="cpu", hypothesis_profile="ci",
                        time_limit_s=600, results_dir=Path({str(tmp_path / "results")!r}), project_dir=Path({str(ROOT)!r}),
                        pytest_args=("--impl", {str(ROOT / "tests" / "stray_impls.py")!r} + ":StartsASessionOfItsOwn",
                                     "--promise", "1", "-x"))
        try:
            cell.run_cell(spec, sys.executable)
        except processes.CellInterrupted:
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
    assert results.CellResult.load(tmp_path / "results" / f"torch-{release}-cpu.json").status == "interrupted"


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
    assert_completed_but_untested(cell.run_cell(spec(tmp_path), fake_python(tmp_path, behaviour)))


def test_a_suite_that_printed_nothing_is_explained_by_the_log_never_called_empty(tmp_path: Path) -> None:
    s = spec(tmp_path)
    result = cell.run_cell(s, fake_python(tmp_path, "import sys\nsys.exit(3)\n"))
    assert result["status"] == "error"
    assert result["detail"].startswith("pytest exited 3 (internal error); last lines of the log:\n$ ")
    assert "the log is empty" not in result["detail"]


def test_the_log_tail_is_read_from_the_end_of_the_log(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i} {'x' * 90}\n" for i in range(40_000)))  # 4 MB
    assert processes.log_tail(log, 2) == [f"line {i} {'x' * 90}" for i in (39_998, 39_999)]
    assert len(processes.log_tail(log)) == processes.LOG_TAIL_LINES
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    got: list[list[str]] = []
    reader = threading.Thread(target=lambda: got.append(processes.log_tail(fifo)), daemon=True)
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
    from cpugpu_conformance.runner.matrix import load

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



# --------------------------------------------------------------------------- the CI fallback (record-unfinished)


def test_fallback_records_a_missing_result_as_error_with_the_nox_tail(tmp_path: Path) -> None:
    log = tmp_path / "nox.log"
    log.write_text("nox > Running session conformance\nnox > Python interpreter 3.11 not found\n")
    path = tmp_path / "results" / "torch-2.15.0-cpu.json"
    line = cell.record_unfinished(path, "torch-2.15.0-cpu", "conformance(torch='2.15.0', device='cpu')", log)
    assert line == f"{path}: recorded as error"
    result = results.CellResult.load(path)
    assert result.status == "error" and result.name == "torch-2.15.0-cpu"
    assert result["detail"].startswith("nox -s conformance(torch='2.15.0', device='cpu') ended without a result file\n")
    assert result["detail"].endswith("Python interpreter 3.11 not found")


def test_fallback_adds_the_nox_tail_to_a_placeholder_and_keeps_it_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "torch-2.15.0-cpu.json"
    results.placeholder("torch-2.15.0-cpu", requested={"torch": "2.15.0", "device": "cpu"}).write(path)
    log = tmp_path / "nox.log"
    log.write_text("nox > Running session conformance\nError: The operation was canceled.\n")
    assert cell.record_unfinished(path, "torch-2.15.0-cpu", "s", log) == f"{path}: recorded as interrupted"
    result = results.CellResult.load(path)
    assert result.status == "interrupted" and result.requested["torch"] == "2.15.0"
    assert "did not finish" in result["detail"] and result["detail"].endswith("The operation was canceled.")


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b'{"status": "completed"}'], ids=["json", "utf8", "schema"])
def test_fallback_replaces_an_unreadable_result_with_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "torch-2.15.0-cpu.json"
    path.write_bytes(content)
    assert cell.record_unfinished(path, "torch-2.15.0-cpu", "s", tmp_path / "no-log") == f"{path}: recorded as error"
    result = results.CellResult.load(path)
    assert result.status == "error"
    assert result["detail"].startswith(f"nox -s s left a result file that cannot be read ({path}: ")
    assert result["detail"].endswith("nox -s s left no output")


def test_fallback_keeps_an_answer_that_stands(tmp_path: Path) -> None:
    path = tmp_path / "torch-2.15.0-cpu.json"
    results.CellResult.new("torch-2.15.0-cpu", "crashed", detail="SIGABRT").write(path)
    before = path.read_bytes()
    assert cell.record_unfinished(path, "torch-2.15.0-cpu", "s") is None
    assert path.read_bytes() == before
    assert cli.main(["record-unfinished", str(path), "--cell", "torch-2.15.0-cpu", "--session", "s"]) == 0


# --------------------------------------------------------------------------- the real suite (issue 4)
# These run `pytest conformance` with the torch of the interpreter running the tests.

ABORTING_IMPL = """\
import os


class Buffer:
    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        os.abort()
"""


def real_cell(tmp_path: Path, name: str, *pytest_args: str, limit: float = 600, profile: str = "ci") -> dict:
    installed = installer.base_version(installer.probe_torch(sys.executable)["torch"])
    s = CellSpec(name=name, release=Release(installed), device="cpu", hypothesis_profile=profile, time_limit_s=limit,
                 results_dir=tmp_path / "results", project_dir=ROOT, pytest_args=pytest_args)
    return cell.run_cell(s, sys.executable)


def test_each_fault_gets_its_own_mark_in_the_report_while_the_other_cells_stand(tmp_path: Path) -> None:
    impl = tmp_path / "aborting.py"
    impl.write_text(ABORTING_IMPL)
    real_cell(tmp_path, "reference", "--promise", "1,2")
    real_cell(tmp_path, "aborting-impl", "--impl", f"{impl}:Buffer", "--promise", "1")
    real_cell(tmp_path, "one-second-limit", limit=1)
    python = installer.create_env(tmp_path / "env", f"{sys.version_info.major}.{sys.version_info.minor}")
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
    for kind in ("crashed", "timed_out", "not_installed", "passed"):
        assert MARKS[kind].label in markdown


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
