"""The fork server (forkserver.py) runs a command as a fresh `python` would: the same argv, working
directory, sys.path, streams and exit status, and a hang is a timeout that leaves it serving."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import forkserver
import pytest

pytestmark = pytest.mark.fresh_processes  # each test compares the fork server with a fresh `python`

PROBE = """\
import os, sys, threading
print(sys.argv)
print(os.getcwd())
print(sys.path[0])
print(__name__)
print(sys.stdin.read() == "")
threading.Thread(target=lambda: print("thread joined")).start()
import atexit
atexit.register(lambda: print("atexit ran"))
print("to stderr", file=sys.stderr)
"""


def fresh(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.fixture
def probe(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    return path


def test_a_script_sees_what_a_fresh_interpreter_shows_it(probe, tmp_path):
    forked = forkserver.run_python([str(probe), "one", "two"], cwd=tmp_path, timeout=120)
    plain = fresh([str(probe), "one", "two"], tmp_path)
    assert forked.returncode == plain.returncode == 0, forked.stderr
    assert forked.stdout == plain.stdout and forked.stderr == plain.stderr
    assert "thread joined" in forked.stdout and forked.stdout.endswith("atexit ran\n"), forked.stdout


def test_a_module_sees_what_python_m_shows_it(tmp_path):
    (tmp_path / "probemod.py").write_text(PROBE)
    forked = forkserver.run_python(["-m", "probemod", "x"], cwd=tmp_path, timeout=120)
    plain = fresh(["-m", "probemod", "x"], tmp_path)
    assert forked.returncode == plain.returncode == 0, forked.stderr
    assert forked.stdout == plain.stdout, (forked.stdout, plain.stdout)


@pytest.mark.parametrize(("source", "code", "stderr"), [
    ("import sys\nsys.exit(3)\n", 3, ""),
    ("import sys\nsys.exit('a message')\n", 1, "a message\n"),
    ("raise ValueError('boom')\n", 1, "ValueError: boom\n"),
    ("import os\nos.kill(os.getpid(), 9)\n", -9, ""),
    ("import os\nos._exit(0)\n", 0, ""),
], ids=["exit-3", "exit-message", "exception", "killed", "os-exit"])
def test_the_exit_status_is_a_fresh_interpreter_s(tmp_path, source, code, stderr):
    script = tmp_path / "ends.py"
    script.write_text(source)
    forked = forkserver.run_python([str(script)], cwd=tmp_path, timeout=120)
    plain = fresh([str(script)], tmp_path)
    assert forked.returncode == plain.returncode == code
    assert forked.stderr.endswith(stderr) and plain.stderr.endswith(stderr), (forked.stderr, plain.stderr)


def test_a_hang_is_a_timeout_and_the_server_serves_the_next_command(tmp_path):
    hang = tmp_path / "hang.py"
    hang.write_text("import time\nprint('started', flush=True)\ntime.sleep(300)\n")
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        forkserver.run_python([str(hang)], cwd=tmp_path, timeout=3)
    assert caught.value.output == "started\n"
    ok = tmp_path / "ok.py"
    ok.write_text("print('next')\n")
    assert forkserver.run_python([str(ok)], cwd=tmp_path, timeout=120).stdout == "next\n"


def test_torch_is_not_used_before_the_command_uses_it(tmp_path):
    """The server imported torch and did nothing with it: no thread pool started, no op run."""
    script = tmp_path / "threads.py"
    script.write_text("import threading, torch\nprint(threading.active_count(), torch.get_num_threads())\n")
    forked = forkserver.run_python([str(script)], cwd=tmp_path, timeout=120)
    assert forked.stdout == fresh([str(script)], tmp_path).stdout, forked.stderr


def test_a_childs_collections_walk_only_what_the_command_made(tmp_path):
    """What the server's imports made is frozen (out of the collector's sight: pytest collects at
    every session's end, and walking torch's objects would copy their pages); what the command
    makes is collected as in a fresh interpreter."""
    script = tmp_path / "gc_probe.py"
    script.write_text(
        "import gc, weakref\n"
        "class Cycle:\n    pass\n"
        "a = Cycle(); a.me = a; alive = weakref.ref(a); del a\n"
        "gc.collect()\n"
        "print(gc.get_freeze_count() > 10_000, alive() is None)\n"
    )
    forked = forkserver.run_python([str(script)], cwd=tmp_path, timeout=120)
    assert forked.stdout == "True True\n", forked.stdout + forked.stderr
    assert fresh([str(script)], tmp_path).stdout == "False True\n"


def test_each_environment_is_served_as_given_and_an_option_is_a_plain_subprocess(tmp_path, monkeypatch):
    script = tmp_path / "env.py"
    script.write_text("import os, sys\nprint(os.environ.get('ONLY_HERE'), sys.flags.isolated)\n")
    env = {**os.environ, "ONLY_HERE": "yes"}
    assert forkserver.run_python([str(script)], cwd=tmp_path, env=env, timeout=120).stdout == "yes 0\n"
    assert forkserver.run_python(["-I", str(script)], cwd=tmp_path, timeout=120).stdout == "None 1\n"
    served = len(forkserver._zygotes)
    monkeypatch.setenv("FORKSERVER", "0")
    assert not forkserver.enabled()
    assert forkserver.run_python([str(script)], cwd=tmp_path, timeout=120).stdout == "None 0\n"
    assert len(forkserver._zygotes) == served


def test_a_new_test_reuses_the_server_and_its_command_sees_its_own_environment(tmp_path):
    """pytest renames PYTEST_CURRENT_TEST under every test: one server serves them all (a server per
    test would cost each test the imports the server exists to save), and each command sees the
    environment it was given, that name included or left out."""
    script = tmp_path / "current.py"
    script.write_text("import os\nprint(os.environ.get('PYTEST_CURRENT_TEST'), os.environ.get('ONLY_HERE'))\n")
    base = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    servers = []
    for name, extra in (("a (call)", {}), ("b (call)", {"ONLY_HERE": "x"}), (None, {"ONLY_HERE": "x"})):
        env = {**base, **extra, **({"PYTEST_CURRENT_TEST": name} if name else {})}
        run = forkserver.run_python([str(script)], cwd=tmp_path, env=env, timeout=120)
        assert run.stdout == f"{name} {extra.get('ONLY_HERE')}\n", run.stdout + run.stderr
        servers.append(forkserver._zygotes[forkserver.server_key(env, forkserver.SCRIPT_MODULES)])
    assert servers[1] is servers[2] and servers[0] is not servers[1]
    assert servers[1].proc.poll() is None


def test_servers_beyond_keep_are_closed(tmp_path):
    """Each server holds torch: a run of tests that each change the environment must not pile them up."""
    script = tmp_path / "which.py"
    script.write_text("import os\nprint(os.environ['WHICH'])\n")
    started = []
    for i in range(forkserver.KEEP + 2):
        env = {**os.environ, "WHICH": str(i)}
        assert forkserver.run_python([str(script)], cwd=tmp_path, env=env, timeout=120).stdout == f"{i}\n"
        started.append(forkserver._zygotes[forkserver.server_key(env, forkserver.SCRIPT_MODULES)])
    assert len(forkserver._zygotes) <= forkserver.KEEP
    assert all(z.proc.poll() is not None for z in started[:2]), "an evicted server is still running"
    assert started[-1].proc.poll() is None


def _gone(pid: int, within: float = 30) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for its parent is gone too
            if stat.read().split(") ")[-1].startswith("Z"):
                return True
        time.sleep(0.1)
    return False


HANGS = "import os, pathlib, sys, time\npathlib.Path(sys.argv[1]).write_text(str(os.getpid()))\ntime.sleep(300)\n"


def test_ctrl_c_in_the_test_kills_the_command_and_the_next_gets_a_fresh_server(tmp_path):
    hang, marker = tmp_path / "hang.py", tmp_path / "pid"
    hang.write_text(HANGS)

    def interrupt(signum, frame):
        # Ctrl-C once the command runs: a fixed delay could land while a slow machine still starts
        # the server (over 5 s under load), and then no command had started to be killed.
        if marker.exists():
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2, 0.2)
        with pytest.raises(KeyboardInterrupt):
            forkserver.run_python([str(hang), str(marker)], cwd=tmp_path, timeout=120)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists() and _gone(int(marker.read_text())), "the interrupted command is still running"
    ok = tmp_path / "ok.py"
    ok.write_text("print('next')\n")
    assert forkserver.run_python([str(ok)], cwd=tmp_path, timeout=120).stdout == "next\n"


def test_a_test_worker_killed_outright_leaves_no_command_running(tmp_path):
    hang, marker = tmp_path / "hang.py", tmp_path / "pid"
    hang.write_text(HANGS)
    # Killed outright, the worker cannot remove its server's folder: it goes in one the test removes.
    with tempfile.TemporaryDirectory(prefix="fs-", ignore_cleanup_errors=True) as temporary:
        worker = subprocess.Popen([sys.executable, "-c", (
            "import sys, pathlib; sys.path.insert(0, sys.argv[1]); import forkserver; "
            "forkserver.run_python([sys.argv[2], sys.argv[3]], cwd=pathlib.Path(sys.argv[4]), timeout=300)"),
            str(Path(__file__).parent), str(hang), str(marker), str(tmp_path)], env={**os.environ, "TMPDIR": temporary})
        try:
            deadline = time.monotonic() + 120
            while not marker.exists() and time.monotonic() < deadline:
                assert worker.poll() is None, "the worker ended early"
                time.sleep(0.1)
            assert marker.exists(), "the command never started"
        finally:
            worker.kill()
            worker.wait(60)
    assert _gone(int(marker.read_text())), "the command outlived its test worker"


def test_a_missing_script_or_folder_is_what_python_and_subprocess_say(tmp_path):
    missing = tmp_path / "nowhere.py"
    forked = forkserver.run_python([str(missing)], cwd=tmp_path, timeout=120)
    plain = fresh([str(missing)], tmp_path)
    assert forked.returncode == plain.returncode == 2
    assert forked.stderr == plain.stderr, (forked.stderr, plain.stderr)
    with pytest.raises(FileNotFoundError):
        forkserver.run_python([str(missing)], cwd=tmp_path / "no-such-folder", timeout=120)


def test_each_test_worker_gives_its_runs_its_share_of_the_cores(monkeypatch):
    """conftest.py: two workers on this machine's cores, each with torch's own count of threads in
    every suite run, would spin against each other; a count the caller set is kept."""
    import conftest
    import torch

    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        conftest.share_the_cores_between_workers()
        share = max(1, (os.cpu_count() or 1) // 2)
        assert os.environ["OMP_NUM_THREADS"] == str(share) and torch.get_num_threads() == share
        monkeypatch.setenv("OMP_NUM_THREADS", "7")
        conftest.share_the_cores_between_workers()
        assert os.environ["OMP_NUM_THREADS"] == "7"
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
        conftest.share_the_cores_between_workers()
        assert "OMP_NUM_THREADS" not in os.environ
    finally:
        torch.set_num_threads(before)


LEAVES_TWO_FOLDERS = """\
import os, pathlib, subprocess, sys
sys.path.insert(0, sys.argv[1])
import forkserver
forkserver.route_subprocesses()
script = pathlib.Path(sys.argv[2])
for _ in range(2):  # the server for scripts, then a `python` the hook sends to it
    assert forkserver.run_python([str(script)], cwd=script.parent, timeout=120).stdout == "ran\\n"
assert subprocess.run([sys.executable, str(script)], capture_output=True, text=True).stdout == "ran\\n"
print(sorted(os.listdir(os.environ["TMPDIR"])))
"""


def test_a_process_that_ran_servers_leaves_no_folder_of_theirs_when_it_exits(tmp_path):
    """Each server has a folder in the temporary directory (its socket, the stand-in for `python`), as
    has the hook: a test run left hundreds there before they were removed at exit."""
    script = tmp_path / "ran.py"
    script.write_text("print('ran')\n")
    # A short path: a socket's must fit in 108 bytes (under tmp_path it may not, and no server starts).
    with tempfile.TemporaryDirectory(prefix="fs-") as temporary:
        run = subprocess.run([sys.executable, "-c", LEAVES_TWO_FOLDERS, str(Path(__file__).parent), str(script)],
                             env={**os.environ, "TMPDIR": temporary}, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        during = ast.literal_eval(run.stdout.strip().splitlines()[-1])
        assert any(name.startswith("forkserver-") for name in during) and any(
            name.startswith("forked-exec-") for name in during), during
        assert os.listdir(temporary) == [], "left behind in the temporary directory"
