"""Start the tests' Python subprocesses from a process that has already imported torch.

Most of what the project's tests spend is Python processes started to run the suite or a
reproducer, as a user would: each begins by importing torch, numpy, pytest and hypothesis
(1.5-2 s of CPU with bytecode cached, twice that without), the same work every time. A fork server
(the zygote) does it once per test worker and forks a child for each command; the child sets the
command's working directory, argv, sys.path and standard streams as `python -m MOD ARGS` or
`python SCRIPT` would, runs it, runs the atexit handlers and joins the threads as an exiting
interpreter does, and ends with the command's exit code (a signal's death reads as subprocess's
negative return code).

Only what a fresh interpreter cannot tell apart goes through it: the zygote imports the modules
and nothing else (no torch op, no Python thread: it refuses to serve where one runs),
and it serves the environment it was started with, since torch reads some variables at import:
another environment gets a server of its own. (Those no import reads, which pytest changes under
every test, are PER_COMMAND: each child takes its command's whole environment.) A command with an
interpreter option (`-I`, `-X`) runs as a plain subprocess. FORKSERVER=0 turns it off (every command a subprocess), to rule it out.
One difference is deliberate: what the imports made is frozen (`gc.get_freeze_count()` is not 0),
as the gc docs advise a fork server; no command of the tests looks at the collector.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# The server's own code, run as `python -c`: read a request line, fork, answer with the pid, then
# the wait status. Modules it preloads are the ones every command imports first.
SERVER = r'''
import gc, json, os, runpy, sys, threading, traceback

def die_with_parent():
    """Linux: SIGKILL when the parent goes (the server with its test worker, a child with the
    server), so a worker killed outright leaves no command running."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except Exception:
        pass

die_with_parent()
PRELOAD = json.loads(sys.argv[1])
for name in PRELOAD:
    __import__(name)
# What the imports made lives as long as the server: frozen, out of the collector's sight, so a
# child's collections (pytest runs two at every session's end) walk only what the command made,
# not torch's objects, whose pages each walk would copy from the server.
gc.collect()
gc.freeze()
requests, answers = os.fdopen(int(sys.argv[2]), "r"), os.fdopen(int(sys.argv[3]), "w")
# No Python thread may run at the fork. (numpy's OpenBLAS starts a native pool at import, and
# shuts it down around a fork itself, as multiprocessing's fork start method relies on.)
alone = threading.active_count() == 1
answers.write(json.dumps({"ready": alone}) + "\n"); answers.flush()

def child(req):
    os.setpgid(0, 0)  # its own group: a timeout or an interrupt kills what the command started too
    die_with_parent()
    requests.close(); answers.close()
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, req["stdout"], os.O_WRONLY), (2, req["stderr"], os.O_WRONLY)):
        new = os.open(path, flags)
        os.dup2(new, fd)
        os.close(new)
    os.chdir(req["cwd"])
    os.environ.clear()  # the command's own environment (it differs from the server's in PER_COMMAND only)
    os.environ.update(req["env"])
    kind, target, args = req["kind"], req["target"], req["args"]
    code = 0
    try:
        if kind == "module":
            sys.argv = [target, *args]
            sys.path[0] = req["cwd"]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif not os.path.isfile(target):  # what python says of a script it cannot open
            print(f"{sys.executable}: can't open file {os.path.abspath(target)!r}: [Errno 2] No such file or directory",
                  file=sys.stderr)
            code = 2
        else:
            sys.argv = [target, *args]
            sys.path[0] = os.path.dirname(os.path.abspath(target))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code & 0xFF)

for line in requests:
    req = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            child(req)
        finally:
            os._exit(70)
    answers.write(json.dumps({"pid": pid}) + "\n"); answers.flush()
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    answers.write(json.dumps({"returncode": code}) + "\n"); answers.flush()
'''

SUITE_MODULES = ("torch", "numpy", "pytest", "hypothesis")
SCRIPT_MODULES = ("torch", "numpy")


class Zygote:
    """One server: a process with ``preload`` imported, under ``env``, forking a child a command."""

    def __init__(self, env: dict[str, str], preload: tuple[str, ...]):
        self.env = env
        req_read, self._req_write = os.pipe()
        self._ans_read, ans_write = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, json.dumps(list(preload)), str(req_read), str(ans_write)],
            env=env, pass_fds=(req_read, ans_write), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(req_read)
        os.close(ans_write)
        self._requests = os.fdopen(self._req_write, "w")
        self._answers = os.fdopen(self._ans_read, "r")
        ready = self._answer()
        self.usable = bool(ready and ready.get("ready"))
        self.broken = False

    def close(self) -> None:
        """End the server: with its requests closed it leaves its loop; kill it if it does not (or
        at once, if it is broken: its answer would never be read)."""
        if self.broken:
            self.proc.kill()
        for pipe in (self._requests, self._answers):
            try:
                pipe.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=60)

    def _answer(self) -> dict | None:
        line = self._answers.readline()
        return json.loads(line) if line else None

    def run(self, kind: str, target: str, args: list[str], cwd: Path, env: dict[str, str],
            timeout: float) -> subprocess.CompletedProcess[str]:
        if not Path(cwd).is_dir():  # subprocess.run's error for a missing working directory
            raise FileNotFoundError(2, "No such file or directory", str(cwd))
        with tempfile.TemporaryDirectory(prefix="forkserver-") as tmp:
            stdout, stderr = Path(tmp) / "stdout", Path(tmp) / "stderr"
            stdout.touch()
            stderr.touch()
            request = {"kind": kind, "target": target, "args": args, "cwd": str(cwd), "env": env,
                       "stdout": str(stdout), "stderr": str(stderr)}
            self._requests.write(json.dumps(request) + "\n")
            self._requests.flush()
            started = self._answer()
            if started is None:
                raise RuntimeError("the fork server died")
            pid = started["pid"]
            done: list[dict | None] = []
            reader = threading.Thread(target=lambda: done.append(self._answer()), daemon=True)
            reader.start()
            try:
                reader.join(timeout)
            except BaseException:
                # Ctrl-C (or any other exception) in the test: the command goes with it, and this
                # server, whose answer to it is still to come, serves no other.
                _kill_group(pid)
                self.broken = True
                raise
            cmd = [sys.executable, *(["-m"] if kind == "module" else []), target, *args]
            if reader.is_alive():
                _kill_group(pid)
                reader.join(60)
                raise subprocess.TimeoutExpired(cmd, timeout, stdout.read_text(errors="replace"),
                                                stderr.read_text(errors="replace"))
            if not done or done[0] is None:
                raise RuntimeError("the fork server died")
            return subprocess.CompletedProcess(cmd, done[0]["returncode"], stdout.read_text(errors="replace"),
                                               stderr.read_text(errors="replace"))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, 9)
    except ProcessLookupError:
        pass


# The servers this process keeps, most recently used last. Each holds torch (half a GB): a test that
# changes the environment gets a server of its own, and the oldest is closed beyond KEEP.
KEEP = 5  # the environments the tests use: the suite's, the caller's, outside_env()'s, each for modules and scripts
_zygotes: dict[tuple[tuple[tuple[str, str], ...], tuple[str, ...]], Zygote | None] = {}

# Variables that change from one test to the next, which no preloaded module reads at import:
# pytest names the running test in PYTEST_CURRENT_TEST. Keyed on them, each test would start
# servers of its own (1.5-2 s each); a child is handed its command's whole environment instead.
PER_COMMAND = frozenset({"PYTEST_CURRENT_TEST"})


def server_key(env: dict[str, str], preload: tuple[str, ...]) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """Which server runs a command under ``env``: one per environment, less PER_COMMAND."""
    return tuple(sorted((k, v) for k, v in env.items() if k not in PER_COMMAND)), preload


def _zygote(env: dict[str, str], preload: tuple[str, ...]) -> Zygote | None:
    key = server_key(env, preload)
    if key in _zygotes:
        zygote = _zygotes.pop(key)
        if zygote is None or not zygote.broken:
            _zygotes[key] = zygote  # the most recently used, last
            return zygote
        zygote.close()
    while len(_zygotes) >= KEEP:
        oldest = _zygotes.pop(next(iter(_zygotes)))
        if oldest is not None:
            oldest.close()
    zygote = Zygote(env, preload)
    _zygotes[key] = zygote if zygote.usable else None
    if not zygote.usable:
        zygote.close()
    return _zygotes[key]


def enabled() -> bool:
    return os.environ.get("FORKSERVER", "1") != "0" and hasattr(os, "fork") and sys.platform != "darwin"


def run_python(args: list[str], *, cwd: Path, env: dict[str, str] | None = None,
               timeout: float) -> subprocess.CompletedProcess[str]:
    """`python ARGS` (``-m MOD ...`` or ``SCRIPT ...``), captured as text, as subprocess.run would."""
    env = dict(os.environ) if env is None else env
    if enabled() and args and (args[0] == "-m" or not args[0].startswith("-")):
        kind, target, rest = ("module", args[1], args[2:]) if args[0] == "-m" else ("script", args[0], args[1:])
        zygote = _zygote(env, SUITE_MODULES if kind == "module" else SCRIPT_MODULES)
        if zygote is not None:
            return zygote.run(kind, target, list(rest), cwd, env, timeout)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
