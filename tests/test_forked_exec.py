"""A `python` the tests (or the commands they run) start is forked from a fork server where one
serves its environment (forked_exec.py), and is then what a fresh interpreter would be to its
caller: the same output, exit status, streams, signals; killed, it leaves nothing running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import forked_exec
import forkserver
import pytest
from suite_runner import REPO, suite_env

# Whether the command was forked: the server froze what its imports made; a fresh interpreter froze nothing.
PROBE = "import gc, sys; print('forked' if gc.get_freeze_count() else 'fresh'); print(sys.argv[1:])"


@pytest.fixture
def env(tmp_path):
    """An environment a server serves (it is started here if none runs yet)."""
    environment = suite_env()
    nothing = tmp_path / "nothing.py"
    nothing.write_text("")
    forkserver.run_python([str(nothing)], cwd=tmp_path, env=environment, timeout=120)
    return environment


def run(args: list[str], env: dict[str, str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120, **kwargs)


def test_a_command_is_forked_and_says_what_a_fresh_one_says(env, tmp_path):
    forked = run(["-c", PROBE + "; sys.exit(3)", "a", "b"], env)
    assert forked.stdout == "forked\n['a', 'b']\n" and forked.returncode == 3, forked
    plain = run(["-c", PROBE + "; sys.exit(3)", "a", "b"], {k: v for k, v in env.items() if k != forked_exec.ENABLED})
    assert plain.stdout == "fresh\n['a', 'b']\n" and plain.returncode == 3, plain
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    assert run([str(script), "x"], env, cwd=tmp_path).stdout == "forked\n['x']\n"


def test_stdin_stdout_and_stderr_are_the_callers_pipes_and_u_is_unbuffered(env):
    code = "import sys; print(sys.stdin.readline().strip()[::-1]); print('err', file=sys.stderr); print(sys.stdout.write_through)"
    forked = run(["-u", "-c", code], env, input="hello\n")
    assert (forked.stdout, forked.stderr, forked.returncode) == ("olleh\nTrue\n", "err\n", 0), forked
    assert run(["-c", code], env, input="abc\n").stdout == "cba\nFalse\n"


def test_a_death_by_signal_reads_as_one(env):
    assert run(["-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], env).returncode == -signal.SIGTERM


def test_a_signal_sent_to_the_process_reaches_the_command(env, tmp_path):
    ready = tmp_path / "ready"
    code = ("import pathlib, signal, sys, time; import torch\n"
            "signal.signal(signal.SIGUSR1, lambda *a: sys.exit(7))\n"
            f"pathlib.Path({str(ready)!r}).write_text('x'); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    _wait_for(ready)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=60) == 7


def test_the_command_goes_with_its_stand_in_killed_outright(env, tmp_path):
    pid_file = tmp_path / "pid"
    code = f"import os, pathlib, time; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    _wait_for(pid_file)
    command = int(pid_file.read_text())
    assert command != proc.pid  # forked, not the process the caller holds
    proc.kill()
    proc.wait(timeout=60)
    deadline = time.monotonic() + 30
    while _alive(command):
        assert time.monotonic() < deadline, f"the command {command} outlived its stand-in"
        time.sleep(0.05)


def test_a_server_that_dies_under_its_command_is_exit_70_and_a_line_that_says_so(tmp_path):
    """Not the command's failure: the shim says what ended it, and nothing of the command is left."""
    environment = dict(suite_env(), CPUGPU_TESTS_A_SERVER_OF_ITS_OWN="1")  # one no other test uses
    nothing = tmp_path / "nothing.py"
    nothing.write_text("")
    forkserver.run_python([str(nothing)], cwd=tmp_path, env=environment, timeout=120)
    server = forkserver._zygotes[forkserver.server_key(environment, forkserver.SCRIPT_MODULES)]
    pid_file = tmp_path / "pid"
    code = f"import os, pathlib, time; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], env=environment, stderr=subprocess.PIPE, text=True)
    _wait_for(pid_file)
    command = int(pid_file.read_text())
    assert command != proc.pid
    server.proc.kill()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 70, (proc.returncode, stderr)
    assert stderr.startswith("python-forked: the fork server at ") and stderr.endswith(" ended before the command did\n")
    deadline = time.monotonic() + 30
    while _alive(command):
        assert time.monotonic() < deadline, f"the command {command} outlived its server"
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["an interpreter option", "preexec_fn", "a new session", "no server for the environment"])
def test_what_the_server_cannot_stand_for_runs_fresh(env, how):
    args, kwargs, environment = ["-c", PROBE], {}, env
    if how == "an interpreter option":
        args = ["-X", "utf8", "-c", PROBE]
    elif how == "preexec_fn":
        kwargs = {"preexec_fn": lambda: None}
    elif how == "a new session":
        kwargs = {"start_new_session": True}
    else:
        environment = dict(env, CPUGPU_TESTS_NO_SERVER_HAS_THIS="1")
    assert run(args, environment, **kwargs).stdout.startswith("fresh\n")


def test_a_nested_pytest_under_xdist_gets_forked_workers(env, tmp_path):
    """The workers execnet starts for `pytest -n 2` are forked too (the slowest part of a nested run)."""
    (tmp_path / "test_where.py").write_text("import gc\n\ndef test_where():\n    assert gc.get_freeze_count()\n")
    forked = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", str(tmp_path / "test_where.py")], env,
                 cwd=REPO)
    assert forked.returncode == 0, forked.stdout[-2000:] + forked.stderr[-2000:]


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for the caller
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_a_server_gone_before_the_command_leaves_a_plain_python_running_it(env, tmp_path):
    """The shim finds no server at its socket (closed between the hook's look and the connection):
    the command runs in a fresh interpreter, never fails for it."""
    gone = f"{forked_exec.SOCKET_ARG}{tmp_path / 'no-server.sock'}"
    ran = subprocess.run([str(forked_exec._shim), gone, "-c", PROBE + "; sys.exit(4)", "z"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert (ran.stdout, ran.returncode) == ("fresh\n['z']\n", 4), ran
