"""`cpugpu-conformance matrix`: cells side by side, each in its own process, stopped cleanly by a signal.

The concurrency tests use small commands that wait for each other (a deadline, never a
sleep that hopes); the signal tests run real cell runners (cells.run_cell) whose suites are
held mid-run by a fake interpreter (tests/test_cell.py), driven by a process of their own
(signal handlers belong to a main thread).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import result_factory as rf
from cell_helpers import fake_python, is_gone, read_one_line_and_hang_up, wait_for
from test_cli_matrix import one_error, write_matrix
from test_runner_processes import HELD_SUITE, chatty_passing_suite, held_suite_pids

from cpugpu_conformance import results
from cpugpu_conformance.cli import dispatch as cli
from cpugpu_conformance.cli import matrix as cli_matrix
from cpugpu_conformance.runner import matrix as matrices
from cpugpu_conformance.runner import parallel

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_env_defaults(monkeypatch):
    monkeypatch.delenv("CONFORMANCE_MATRIX", raising=False)
    monkeypatch.delenv("CONFORMANCE_RESULTS", raising=False)


# A job that says it started, records how many jobs were running then (started, not done),
# waits (with a deadline) until `want` jobs have started, and says it is done.
MEETING = """\
import os, sys, time
folder, name, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
def count(suffix):
    return len([f for f in os.listdir(folder) if f.endswith(suffix)])
open(os.path.join(folder, name + ".started"), "w").close()
with open(os.path.join(folder, name + ".seen"), "w") as fh:
    fh.write(str(count(".started") - count(".done")))
print(name, "is running", flush=True)
deadline = time.monotonic() + 60
while count(".started") < want:
    if time.monotonic() > deadline:
        sys.exit(7)
    time.sleep(0.02)
open(os.path.join(folder, name + ".done"), "w").close()
print(name, "done", flush=True)
"""


def meeting_jobs(tmp_path: Path, names: list[str], want: int) -> list[parallel.Job]:
    script = tmp_path / "meeting.py"
    script.write_text(MEETING)
    folder = tmp_path / "meeting"
    folder.mkdir()
    return [parallel.Job(n, [sys.executable, str(script), str(folder), n, str(want)]) for n in names]


def running_when_started(tmp_path: Path, name: str) -> int:
    return int((tmp_path / "meeting" / f"{name}.seen").read_text())


def test_two_jobs_run_at_once_and_never_more(tmp_path):
    """Jobs a and b can only end once both run; c starts when one of them is done."""
    jobs = meeting_jobs(tmp_path, ["a", "b", "c"], want=2)
    out = io.StringIO()
    outcome = parallel.run_jobs(jobs, 2, out=out, on_start=lambda j: f"start {j.name}",
                                on_finish=lambda f: f"end {f.name} {f.returncode}")
    assert sorted((f.name, f.returncode) for f in outcome.finished) == [("a", 0), ("b", 0), ("c", 0)]
    assert outcome.not_started == [] and outcome.signum is None
    assert running_when_started(tmp_path, "c") <= 2
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["start a", "start b"] and lines.index("start c") > min(lines.index("end a 0"), lines.index("end b 0"))


def test_one_job_at_a_time_runs_them_in_turn(tmp_path):
    jobs = meeting_jobs(tmp_path, ["a", "b"], want=1)
    outcome = parallel.run_jobs(jobs, 1, out=io.StringIO())
    assert [f.name for f in outcome.finished] == ["a", "b"]
    assert running_when_started(tmp_path, "a") == running_when_started(tmp_path, "b") == 1


def test_stream_prefixes_every_line_with_its_job_and_keeps_the_tail(tmp_path):
    jobs = meeting_jobs(tmp_path, ["a", "b"], want=2)
    out = io.StringIO()
    outcome = parallel.run_jobs(jobs, 2, stream=True, out=out)
    lines = out.getvalue().splitlines()
    for name in "ab":
        assert f"[{name}] {name} is running" in lines and f"[{name}] {name} done" in lines
    assert all(line.startswith(("[a] ", "[b] ")) for line in lines), "no line is cut into another"
    assert {f.name: f.tail[-1] for f in outcome.finished} == {"a": "a done", "b": "b done"}


def test_a_failing_job_does_not_stop_the_others(tmp_path):
    jobs = [parallel.Job("bad", [sys.executable, "-c", "print('oops'); raise SystemExit(3)"]),
            parallel.Job("good", [sys.executable, "-c", "print('fine')"])]
    outcome = parallel.run_jobs(jobs, 1, out=io.StringIO())
    assert {(f.name, f.returncode, f.tail[-1]) for f in outcome.finished} == {("bad", 3, "oops"), ("good", 0, "fine")}


# --------------------------------------------------------------------------- signals, real cell runners

RUNNER = """\
import sys
from pathlib import Path
from cpugpu_conformance.runner import CellSpec, processes
from cpugpu_conformance.runner import cell as cells
from cpugpu_conformance.runner.matrix import Release
name, python = sys.argv[1], sys.argv[2]
spec = CellSpec(name=name, release=Release("2.15.0"), device="cpu", hypothesis_profile="ci",
                time_limit_s=600, results_dir=Path({results!r}), project_dir=Path({root!r}))
try:
    result = cells.run_cell(spec, python)
except processes.CellInterrupted as exc:
    sys.exit(128 + exc.signum)
sys.exit(0 if result.answer().clean else 1)
"""

# cli_matrix.run_cells over those runners, as `cpugpu-conformance matrix --jobs 2` runs its cells.
DRIVER = """\
import json, sys
from pathlib import Path
from cpugpu_conformance.cli import matrix as cli_matrix
from cpugpu_conformance.runner import parallel
jobs = [parallel.Job(name, command, Path(log)) for name, command, log in json.loads(sys.argv[1])]
sys.exit(cli_matrix.run_cells(jobs, 2, Path({results!r})))
"""


class HeldMatrix:
    """Three held cells, two at a time, under a driver process."""

    def __init__(self, tmp_path: Path) -> None:
        self.results = tmp_path / "results"
        self.names = ["torch-a-cpu", "torch-b-cpu", "torch-c-cpu"]
        self.pid_files = {n: tmp_path / f"{n}.pids" for n in self.names}
        runner = tmp_path / "runner.py"
        runner.write_text(textwrap.dedent(RUNNER.format(results=str(self.results), root=str(ROOT))))
        driver = tmp_path / "driver.py"
        driver.write_text(textwrap.dedent(DRIVER.format(results=str(self.results))))
        jobs = [(n, [sys.executable, str(runner), n,
                     str(fake_python(tmp_path / n, HELD_SUITE.format(pids=str(self.pid_files[n]))))],
                 str(self.results / f"{n}.log")) for n in self.names]

        self.proc = subprocess.Popen([sys.executable, str(driver), json.dumps(jobs)], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.pids: list[int] = []

    def wait_until_two_are_testing(self) -> None:
        def two() -> list[int] | None:
            if self.proc.poll() is not None:
                pytest.fail(f"the driver ended (exit {self.proc.returncode}):\n{self.proc.communicate()[0]}")
            found = [held_suite_pids(self.pid_files[n]) for n in self.names[:2]]
            return [p for pids in found for p in pids] if all(found) else None

        self.pids = wait_for(two, "two cells to be testing", timeout=120)  # type: ignore[assignment]

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=30)
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_stops_every_running_cell_each_records_interrupted_and_no_other_starts(tmp_path, sig):
    held = HeldMatrix(tmp_path)
    try:
        held.wait_until_two_are_testing()
        held.proc.send_signal(sig)
        out, _ = held.proc.communicate(timeout=90)
        assert held.proc.returncode == 128 + sig, out
        for name in held.names[:2]:
            result = results.CellResult.load(held.results / f"{name}.json")
            assert result.status == "interrupted", name
            assert result["detail"].startswith(f"interrupted by {sig.name}") and "still testing" in result["detail"]
        assert not (held.results / "torch-c-cpu.json").exists() and not held.pid_files["torch-c-cpu"].exists()
        for pid in held.pids:  # each suite and the child it started
            wait_for(lambda pid=pid: is_gone(pid), f"process {pid} of a test group to end", timeout=15)
        assert "torch-a-cpu  " in out and "torch-b-cpu  " in out and "INTERRUPTED" in out, "the summary table"
        assert f"not started (stopped by {sig.name}): torch-c-cpu" in out
        assert not [p.name for p in held.results.glob(".*")], "no staging file, lock or temporary file is left"
    finally:
        held.cleanup()


# run_cells one cell at a time, streaming every line, as `cpugpu-conformance matrix --jobs 1 --stream` runs them.
STREAMING_DRIVER = """\
import json, sys
from pathlib import Path
from cpugpu_conformance.cli import matrix as cli_matrix
from cpugpu_conformance.runner import parallel
jobs = [parallel.Job(name, command, Path(log)) for name, command, log in json.loads(sys.argv[1])]
sys.exit(cli_matrix.run_cells(jobs, 1, Path({results!r}), stream=True))
"""


def test_a_closed_output_changes_no_cells_answer_and_every_cell_runs(tmp_path):
    """`matrix ... | head -1`: no traceback, every cell runs to its own answer, the exit code is theirs."""
    out = tmp_path / "results"
    runner, driver = tmp_path / "runner.py", tmp_path / "driver.py"
    runner.write_text(textwrap.dedent(RUNNER.format(results=str(out), root=str(ROOT))))
    driver.write_text(STREAMING_DRIVER.format(results=str(out)))
    names = ["torch-a-cpu", "torch-b-cpu"]
    jobs = [(n, [sys.executable, str(runner), n, str(chatty_passing_suite(tmp_path / n))], str(out / f"{n}.log"))
            for n in names]
    code, err = read_one_line_and_hang_up([sys.executable, str(driver), json.dumps(jobs)], timeout=180, cwd=ROOT)
    assert code == 0 and "Traceback" not in err, err
    for name in names:
        result = results.CellResult.load(out / f"{name}.json")
        assert result.status == "completed" and result.answer().clean, f"{name}: {result.describe()}"


def test_a_cell_stopped_before_it_held_its_path_is_recorded_interrupted_not_its_old_pass(tmp_path):
    path = tmp_path / "torch-2.13.0-cpu.json"
    results.CellResult(rf.completed("2.13.0", cell="torch-2.13.0-cpu")).write(path)
    job = parallel.Job("torch-2.13.0-cpu", ["true"])
    progress = cli_matrix.Progress(tmp_path, [job])  # noted before the cell starts
    progress.finished(parallel.Finished(job.name, -signal.SIGTERM, 0.1, time.time(), []))
    progress.record_interrupted(signal.SIGTERM)
    result = results.CellResult.load(path)
    assert result.status == "interrupted" and "before the cell started" in result["detail"]
    assert progress.unanswered == {}, "the matrix's own record answers for it"

    progress = cli_matrix.Progress(tmp_path, [job])
    fresh = results.CellResult(rf.completed("2.13.0", cell="torch-2.13.0-cpu"))
    fresh.write(path)  # the cell's own answer, written during the run
    progress.finished(parallel.Finished(job.name, 143, 0.1, time.time() - 5, []))
    progress.record_interrupted(signal.SIGTERM)
    assert results.CellResult.load(path) == fresh, "this run's own answer stands"


# A cell command that ends without touching its result file, as one that cannot take its lock did
# (a traceback, exit 1) or one that refuses (exit 2).
NO_ANSWER = "import sys; print('Traceback (most recent call last): ...'); print('OSError: cannot write'); sys.exit({code})"


@pytest.mark.parametrize("code", [1, 2, 0], ids=["traceback", "refused", "exit-0"])
def test_an_earlier_runs_pass_never_answers_for_a_cell_that_wrote_nothing_this_run(tmp_path, capsys, code):
    out = tmp_path / "results"
    path = out / "torch-2.13.0-cpu.json"
    results.CellResult(rf.completed("2.13.0", cell="torch-2.13.0-cpu")).write(path)
    before = path.read_bytes()
    jobs = [parallel.Job("torch-2.13.0-cpu", [sys.executable, "-c", NO_ANSWER.format(code=code)])]
    assert cli_matrix.run_cells(jobs, 1, out) == 1
    text = capsys.readouterr().out
    assert "torch-2.13.0-cpu: NO ANSWER written this run" in text
    assert "passed (" not in text
    row = next(line for line in text.splitlines() if line.startswith("torch-2.13.0-cpu  "))
    assert row.split()[:5] == ["torch-2.13.0-cpu", "2.13.0", "cpu", "NO", "RESULT"]
    assert (f"torch-2.13.0-cpu: no answer written this run (the cell command exited {code}: OSError: cannot write); "
            f"{path} is left from an earlier run") in text
    assert "1 cells, 0 clean, 1 not" in text
    assert path.read_bytes() == before, "the matrix does not write over it either"


def test_a_cell_that_cannot_take_its_lock_shows_no_answer_not_its_old_pass(tmp_path, capsys):
    """As root nothing is read-only: a folder where the cell's lock file goes blocks the cell all the same."""
    m, out = write_matrix(tmp_path), tmp_path / "results"
    path = out / "torch-98.0.0-cpu.json"
    results.CellResult(rf.completed("98.0.0", cell="torch-98.0.0-cpu")).write(path)
    results.lock_path(path).mkdir()
    code = cli.main(["matrix", "torch-98.0.0", "--matrix", str(m), "--results", str(out), "--envdir", str(tmp_path / "envs")])
    text = capsys.readouterr().out
    assert code == 1, text
    assert "torch-98.0.0-cpu: NO ANSWER written this run" in text and "passed (" not in text
    assert f"cannot write the cell's result and log there ({results.lock_path(path)}: the lock file is not a regular file (a directory); remove it)" in text
    assert "Traceback" not in text
    assert results.CellResult.load(path).answer().clean, "the old file is left as it was"


@pytest.mark.parametrize("where", ["a-file", "under-a-file"])
def test_matrix_results_that_cannot_be_a_folder_are_one_line_exit_2(tmp_path, capsys, where):
    (tmp_path / "taken").write_text("not a folder")
    out = tmp_path / "taken" if where == "a-file" else tmp_path / "taken" / "results"
    assert cli.main(["matrix", "--matrix", str(write_matrix(tmp_path)), "--results", str(out),
                     "--envdir", str(tmp_path / "envs")]) == 2
    assert one_error(capsys, "matrix") == f"{out}: cannot hold result files: {tmp_path / 'taken'} is not a folder (--results)"
    assert not (tmp_path / "envs").exists()


# --------------------------------------------------------------------------- the command


def test_matrix_runs_every_cell_in_its_own_environment_and_ends_with_the_summary(tmp_path, capsys):
    m, out, envs = write_matrix(tmp_path), tmp_path / "results", tmp_path / "envs"
    code = cli.main(["matrix", "--jobs", "2", "--matrix", str(m), "--results", str(out), "--envdir", str(envs)])
    assert code == 1, "cells that cannot be installed are not clean"
    text = capsys.readouterr().out
    for name in ("torch-98.0.0-cpu", "torch-99.0.0-cpu"):
        assert results.CellResult.load(out / f"{name}.json").status == "not_installed"
        assert (envs / name / "bin" / "python").exists(), "one environment per cell"
        assert f"{name}: started (log: {out / name}.log)" in text
        assert f"{name}: not installed: " in text
    table = text[text.index("cell  "):].splitlines()
    assert [line.split()[:4] for line in table[1:3]] == [["torch-98.0.0-cpu", "98.0.0", "cpu", "NOT"],
                                                         ["torch-99.0.0-cpu", "99.0.0", "cpu", "NOT"]]
    assert "2 cells, 0 clean, 2 not" in text
    assert not [p.name for p in out.glob(".*")]


def test_matrix_streams_prefixed_lines_of_the_cells_chosen(tmp_path, capsys):
    m, out = write_matrix(tmp_path), tmp_path / "results"
    assert cli.main(["matrix", "torch-99.0.0", "--stream", "--matrix", str(m), "--results", str(out),
                     "--envdir", str(tmp_path / "envs")]) == 1
    text = capsys.readouterr().out
    assert "[torch-99.0.0-cpu] cell: " in text and "torch==99.0.0" in text
    assert "torch-98.0.0" not in text and not (out / "torch-98.0.0-cpu.json").exists()


def test_each_cell_gets_the_cell_command_with_the_pytest_arguments(tmp_path):
    m = matrices.load(write_matrix(tmp_path))
    job = cli_matrix.cell_job(m, m.cells[1], envdir=tmp_path / "envs", results_dir=tmp_path / "r", pytest_args=["--promise", "1"])
    assert job.name == "torch-99.0.0-cpu" and job.log == tmp_path / "r" / "torch-99.0.0-cpu.log"
    assert job.command[1:] == ["-m", "cpugpu_conformance", "cell", "99.0.0", "--device", "cpu",
                               "--env", str(tmp_path / "envs" / "torch-99.0.0-cpu"), "--matrix", str(m.path.resolve()),
                               "--results", str(tmp_path / "r"), "--", "--promise", "1"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nope"], "{m}: no cell or tag 'nope' (a cell like torch-2.15.0-cpu, or a tag like torch-2.15.0 or device-cpu)"),
        (["--jobs", "0"], "--jobs 0: run at least one cell at a time"),
        (["--", "--device", "cuda"], "--device among the pytest arguments: set devices in matrix.yaml"),
    ],
    ids=["unknown-cell", "no-jobs", "owned-option"],
)
def test_matrix_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, message):
    m = write_matrix(tmp_path)
    head, tail = (argv[:argv.index("--")], argv[argv.index("--"):]) if "--" in argv else (argv, [])
    assert cli.main(["matrix", *head, "--matrix", str(m), "--results", str(tmp_path / "r"), *tail]) == 2
    assert one_error(capsys, "matrix") == message.format(m=m)
    assert not (tmp_path / "r").exists()
