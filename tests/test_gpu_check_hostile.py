"""tools/gpu_check.py as a hostile or careless user runs it (issue 22's rows for gpu_check).

Whatever sits at a name gpu_check writes (a link, a FIFO, a folder, a socket) is refused in one
line before anything runs, and never written through; a hard link there is replaced, its other
name untouched. An empty output folder is refused; a relative one is resolved once, from the
caller's folder. SIGTERM, SIGHUP, Ctrl-C and ``timeout`` end the suite, the proofs, their xdist
workers and what they started in sessions of their own before gpu_check exits, so nothing is
written after it; summary.txt says the run was stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from suite_runner import REPO
from test_gpu_check import PROOFS, SCRIPT, _gpu_image, gpu_check

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIFOs, POSIX signals and /proc")

NAMES = ("summary.txt", "suite.log", "proofs.log")
OUTSIDE = "precious: must never change\n"


def _cell_json() -> str:
    import torch

    return f"installed-torch-{torch.__version__.split('+')[0]}-cpu.json"


def _command(out, *args, proofs: Path | None = None, jobs: int = 1) -> list[str]:
    return [sys.executable, str(SCRIPT), str(out), "--device", "cpu", "--proofs-for", "cpu", "--jobs", str(jobs),
            *(["--proofs", str(proofs)] if proofs else []), *args]


def _run(tmp_path, out, *args, cwd=None, env=None, proofs=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_command(out, *args, proofs=proofs), cwd=cwd or tmp_path, env=env or _gpu_image(tmp_path),
                          capture_output=True, text=True, timeout=600)


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every name in the folder, with what lstat says of it: a change shows."""
    return {p.name: (p.lstat().st_mode, p.lstat().st_mtime_ns) for p in folder.iterdir()}


def _one_line_refusal(proc, *words):
    assert proc.returncode == 4, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# --- whatever is at a name gpu_check writes ---------------------------------------------------


def _plant(kind: str, path: Path, outside: Path) -> str:
    """Put a `kind` at `path`; returns the words the refusal must say of it."""
    if kind == "link":
        outside.write_text(OUTSIDE)
        path.symlink_to(outside)
        return f"a symbolic link (to {outside})"
    if kind == "dangling link":
        path.symlink_to(outside)  # gpu_check must not make the file it points to
        return "a symbolic link"
    if kind == "fifo":
        os.mkfifo(path)  # opening it to write would block forever
        return "a FIFO"
    if kind == "folder":
        path.mkdir()
        (path / "kept").write_text("a folder's file\n")
        return "a folder"
    if kind == "socket":  # a special file anyone can make, as a device is for root
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
        return "a socket"
    raise AssertionError(kind)


KINDS = ("link", "dangling link", "fifo", "folder", "socket")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", NAMES)
def test_a_name_that_is_not_a_plain_file_is_refused_before_anything_runs(tmp_path, name, kind):
    out, outside = tmp_path / "out", tmp_path / "outside.txt"
    out.mkdir()
    says = _plant(kind, out / name, outside)
    before = _listing(out)
    proc = _run(tmp_path, out)  # a FIFO that were opened would hang here, past the timeout
    _one_line_refusal(proc, str(out / name), says, "not a plain file")
    assert _listing(out) == before, "something was written or removed in the output folder"
    if kind == "link":
        assert outside.read_text() == OUTSIDE
    if kind == "dangling link":
        assert not outside.exists()


@pytest.mark.parametrize("kind", ("link", "fifo", "folder"))
def test_the_result_files_name_is_checked_too(tmp_path, kind):
    out, outside = tmp_path / "out", tmp_path / "outside.json"
    out.mkdir()
    says = _plant(kind, out / _cell_json(), outside)
    before = _listing(out)
    proc = _run(tmp_path, out)
    _one_line_refusal(proc, str(out / _cell_json()), says)
    assert _listing(out) == before  # no suite ran: no log, no summary
    if kind == "link":
        assert outside.read_text() == OUTSIDE


def test_hard_links_at_every_name_are_replaced_and_their_other_names_untouched(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    precious = {}
    # At the result file's name, an earlier result of ours (anything else there is refused untouched).
    earlier = json.dumps({"schema": "cpugpu-conformance/cell-result", "said": "an earlier check's"})
    for name in (*NAMES, _cell_json()):
        keep = tmp_path / f"precious-{name}"
        keep.write_text(earlier if name == _cell_json() else OUTSIDE)
        os.link(keep, out / name)
        precious[name] = (keep, keep.read_text())
    proofs = tmp_path / "test_proofs.py"
    proofs.write_text(PROOFS)
    proc = _run(tmp_path, out, "--", "--promise", "1", proofs=proofs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name, (keep, text) in precious.items():
        assert keep.read_text() == text, f"{name}'s other name was written through"
        assert (out / name).read_text() != text and (out / name).stat().st_nlink == 1, name
    assert "gpu_check: exit 0" in (out / "summary.txt").read_text()
    assert sorted(p.name for p in out.iterdir()) == sorted([*NAMES, _cell_json()])  # no temporary file left


# --- the output folder named ------------------------------------------------------------------


def test_an_empty_output_folder_is_refused(tmp_path):
    caller = tmp_path / "caller"  # an empty name once meant the caller's folder
    caller.mkdir()
    proc = _run(tmp_path, "", cwd=caller)
    _one_line_refusal(proc, "the output folder is '' (empty)")
    assert list(caller.iterdir()) == []


def test_a_relative_output_folder_is_the_callers_whatever_the_childrens_folder(tmp_path):
    caller = tmp_path / "caller"
    caller.mkdir()
    relative = f"gpu-check-rel-{os.getpid()}/out"
    proofs = tmp_path / "test_proofs.py"
    proofs.write_text(PROOFS)
    try:
        proc = _run(tmp_path, relative, "--", "--promise", "1", cwd=caller, proofs=proofs)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out = caller / relative
        assert sorted(p.name for p in out.iterdir()) == sorted([*NAMES, _cell_json()])
        assert f"--cell-result {out / _cell_json()}" in (out / "summary.txt").read_text()
        assert not (REPO / relative.split("/")[0]).exists(), "something landed in the checkout"
    finally:
        shutil.rmtree(REPO / relative.split("/")[0], ignore_errors=True)


@pytest.mark.parametrize(("args", "words"), [
    (["--device", "../../escape"], ["not a plain file name", "--device"]),
    (["--device", "a/b"], ["not a plain file name"]),
    (["--jobs", "0"], ["--jobs 0: at least 1"]),
    (["--jobs", "many"], ["--jobs", "invalid int value"]),
], ids=["device-climbs-out", "device-with-a-slash", "no-jobs", "jobs-not-a-number"])
def test_bad_options_are_one_line_and_exit_4(tmp_path, args, words):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out), *args], cwd=tmp_path, env=_gpu_image(tmp_path),
                          capture_output=True, text=True, timeout=600)
    _one_line_refusal(proc, *words)
    assert not out.exists() or not any(out.iterdir())
    assert not (tmp_path / "escape").exists()


# --- stopping gpu_check stops everything it started --------------------------------------------

# Each process that runs a test notes its pid and start time, then starts a process in a session
# of its own (out of its group's reach, as `setsid sleep` is) and notes it too, then waits.
RECORDING_SLEEPER = '''
import os
import pathlib
import subprocess
import time

from cpugpu_conformance.reference import CpuGpuBuffer

PIDS = pathlib.Path({pids!r})


def note(pid, what):
    fields = pathlib.Path(f"/proc/{{pid}}/stat").read_text().rsplit(")", 1)[1].split()
    part = PIDS / f"{{pid}}.part"
    part.write_text(f"{{fields[19]}} {{what}}")
    part.replace(PIDS / str(pid))


class Sleeper(CpuGpuBuffer):
    def __init__(self, *size, **kwargs):
        stray = subprocess.Popen(["sleep", "600"], start_new_session=True)
        note(stray.pid, "a process in a session of its own")
        note(os.getpid(), "the process running a test")
        time.sleep(600)
        super().__init__(*size, **kwargs)
'''

SLEEPING_PROOF = '''
import os
import pathlib
import time

import pytest


@pytest.mark.devices("cpu")
def test_a_proof_that_takes_its_time():
    fields = pathlib.Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    part = pathlib.Path({pids!r}) / "proof.part"
    part.write_text(f"{{fields[19]}} the process running a proof")
    part.replace(part.with_name(str(os.getpid())))
    time.sleep(600)
'''


def _as_a_terminal_would() -> None:
    """For preexec_fn: Ctrl-C reaches gpu_check as in a terminal (a test run in the background
    ignores SIGINT, and its children would inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _under_nohup() -> None:
    _as_a_terminal_would()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


class Started:
    """gpu_check (or `timeout` running it) in the background, its output in a file, and the pids
    its children note."""

    def __init__(self, tmp_path: Path, *args: str, during: str = "suite", jobs: int = 1, via_timeout: bool = False,
                 preexec=_as_a_terminal_would) -> None:
        self.pids = tmp_path / "pids"
        self.pids.mkdir()
        self.out = tmp_path / "out"
        if during == "suite":
            impl = tmp_path / "recording_sleeper.py"
            impl.write_text(RECORDING_SLEEPER.format(pids=str(self.pids)))
            proofs, extra = None, ["--", "--promise", "3", "--impl", f"{impl}:Sleeper"]
        else:
            proofs = tmp_path / "test_sleeping_proof.py"
            proofs.write_text(SLEEPING_PROOF.format(pids=str(self.pids)))
            extra = ["--", "--promise", "1"]
        command = _command(self.out, *args, *extra, proofs=proofs, jobs=jobs)
        if via_timeout:
            command = ["timeout", "600", *command]  # SIGALRM, below, is its time running out
        self.log = tmp_path / "gpu_check.out"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(command, cwd=tmp_path, env=_gpu_image(tmp_path), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec)

    def noted(self) -> dict[int, str]:
        return {int(p.name): p.read_text() for p in self.pids.iterdir() if p.name.isdigit()}

    def wait_until_testing(self, at_least: int = 1, limit_s: float = 300) -> None:
        """Until a test (or proof) has started; an event, not a measured time."""
        deadline = time.monotonic() + limit_s
        while len(self.noted()) < at_least:
            assert self.proc.poll() is None, f"gpu_check exited {self.proc.returncode} early:\n{self.output()}"
            assert time.monotonic() < deadline, f"no test started within {limit_s} s:\n{self.output()}"
            time.sleep(0.1)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> list[str]:
        """The noted processes still running (a pid used again by another process is not one of them)."""
        left = []
        for pid, note in self.noted().items():
            started, what = note.split(" ", 1)
            fields = gpu_check._stat_fields(pid)
            if fields and fields[19] == started:
                left.append(f"pid {pid} ({what}, state {fields[0]})")
        return left

    def clean_up(self) -> None:
        """Whatever a failed test left: killed by the pids it noted (never by name)."""
        for pid in [*self.noted(), self.proc.pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait(timeout=60)

    # A test runs its steps in `with Started(...) as started:`, so what it started is cleaned up
    # however the test ends.
    def __enter__(self) -> Started:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.clean_up()


def _after_exit(started: Started, code: int, summary_says: str) -> str:
    """What must hold once gpu_check has exited: its code, nothing it started still running (so
    nothing can write into the folder later), no temporary file left, the summary saying why."""
    assert started.proc.wait(timeout=600) == code, started.output()
    assert started.alive() == [], f"left running after gpu_check exited: {started.alive()}"
    names = [p.name for p in started.out.iterdir()]
    # (the suite's own lock file stays if it had to be killed: the suite's, not gpu_check's)
    assert not [n for n in names if n.startswith(".") and not n.endswith(".lock")], names
    summary = (started.out / "summary.txt").read_text()
    assert summary_says in summary, summary
    assert "gpu_check: exit 0" not in summary
    return summary


@pytest.mark.parametrize(("signum", "code", "jobs"), [
    (signal.SIGTERM, 143, 4),  # the suite with two xdist workers
    (signal.SIGHUP, 129, 1),
    (signal.SIGINT, 2, 1),
], ids=["SIGTERM-xdist", "SIGHUP", "SIGINT"])
def test_a_signal_during_the_suite_ends_it_all_and_the_summary_says_so(tmp_path, signum, code, jobs):
    with Started(tmp_path, during="suite", jobs=jobs) as started:
        started.wait_until_testing(at_least=2)  # a test process and the process it set apart
        os.kill(started.proc.pid, signum)
        name = signal.Signals(signum).name
        summary = _after_exit(started, code, f"gpu_check: exit {code} (stopped by {name} during the suite: not a pass)")
        assert f"suite: stopped by {name}" in summary and "proofs for" not in summary
        if jobs == 1:  # the suite, Ctrl-C'd, wrote its result file before gpu_check exited (xdist may need
            assert "interrupted" in summary  # more than the grace on a loaded machine, and be killed)
        assert not (started.out / "proofs.log").exists()
        assert f"stopped by {name}" in (started.out / "suite.log").read_text()


def test_timeout_ends_it_all(tmp_path):
    with Started(tmp_path, during="suite", via_timeout=True) as started:
        started.wait_until_testing(at_least=2)
        os.kill(started.proc.pid, signal.SIGALRM)  # `timeout`'s own alarm: its time ran out, it sends SIGTERM
        _after_exit(started, 124, "stopped by SIGTERM during the suite")


def test_a_signal_during_the_proofs_ends_them_and_keeps_the_suites_lines(tmp_path):
    with Started(tmp_path, during="proofs") as started:
        started.wait_until_testing()
        os.kill(started.proc.pid, signal.SIGTERM)
        summary = _after_exit(started, 143, "gpu_check: exit 143 (stopped by SIGTERM during the proofs: not a pass)")
        assert "suite: exit 0" in summary and "proofs for cpu: stopped by SIGTERM" in summary
        assert (started.out / "proofs.log").is_file()


def test_a_hangup_that_nohup_ignores_stays_ignored(tmp_path):
    with Started(tmp_path, during="suite", preexec=_under_nohup) as started:
        started.wait_until_testing(at_least=2)
        os.kill(started.proc.pid, signal.SIGHUP)  # ignored, so gone at once: the SIGTERM after it stops the run
        os.kill(started.proc.pid, signal.SIGTERM)
        _after_exit(started, 143, "stopped by SIGTERM during the suite")


def test_a_suite_whose_gpu_check_is_killed_outright_dies_with_it(tmp_path):
    """SIGKILL cannot be caught: the suite's own process (which alone writes the result file) is
    killed with gpu_check, so no result of a later end of it can appear."""
    with Started(tmp_path, during="suite") as started:
        started.wait_until_testing(at_least=2)
        [suite] = [pid for pid, _ in gpu_check.descendants(started.proc.pid)
                   if gpu_check._stat_fields(pid)[1] == str(started.proc.pid)]
        os.kill(started.proc.pid, signal.SIGKILL)
        assert started.proc.wait(timeout=60) == -signal.SIGKILL
        deadline = time.monotonic() + 60
        while (fields := gpu_check._stat_fields(suite)) and fields[0] not in ("Z", "X"):
            assert time.monotonic() < deadline, "the suite outlived gpu_check"
            time.sleep(0.1)
        result = started.out / _cell_json()
        assert not result.exists() or json.loads(result.read_text())["status"] != "completed"


# --- what is planted at a name while the run goes (after the check) is replaced, never written through

PLANTING_PROOF = '''
import os
import pathlib

import pytest

OUT = pathlib.Path({out!r})


@pytest.mark.devices("cpu")
def test_plants_while_the_run_goes():
    os.symlink({outside!r}, OUT / "proofs.log")
    {summary}
'''


@pytest.mark.parametrize(("at_summary", "code"), [("os.mkfifo(OUT / 'summary.txt')", 0),
                                                   ("(OUT / 'summary.txt').mkdir()", 4)], ids=["fifo", "folder"])
def test_what_is_planted_during_the_run_is_replaced_or_refused_never_written_through(tmp_path, at_summary, code):
    out, outside = tmp_path / "out", tmp_path / "outside.txt"
    outside.write_text(OUTSIDE)
    proofs = tmp_path / "test_planting.py"
    proofs.write_text(PLANTING_PROOF.format(out=str(out), outside=str(outside), summary=at_summary))
    proc = _run(tmp_path, out, "--", "--promise", "1", proofs=proofs)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert outside.read_text() == OUTSIDE
    assert (out / "proofs.log").is_file() and not (out / "proofs.log").is_symlink()
    assert "1 passed" in (out / "proofs.log").read_text()
    if code == 0:
        assert (out / "summary.txt").is_file() and "gpu_check: exit 0" in (out / "summary.txt").read_text()
    else:
        line = _one_line_refusal(proc, "cannot put summary.txt in place")
        [kept] = out.glob(".summary.txt.*")  # what was written is where the line says
        assert kept.name in line and "gpu_check: exit 0" in kept.read_text()
