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
The server listens on a socket; a request carries the command's standard streams as descriptors, and
the `python` runs of sys.executable that a test or a command starts come to it too (forked_exec.py).
One difference is deliberate: what the imports made is frozen (`gc.get_freeze_count()` is not 0),
as the gc docs advise a fork server; no command of the tests looks at the collector.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import forked_exec

TESTS = Path(__file__).resolve().parent

# The server's own code, run as `python -c`: accept a connection, read the request (its length and
# the command's three standard streams, then its JSON), fork a keeper that forks the command and
# answers with its pid, then its wait status. Modules it preloads are the ones every command imports first.
SERVER = r'''
import gc, io, json, os, runpy, select, signal, socket, struct, sys, threading, traceback, types

def die_with_parent():
    """Linux: SIGKILL when the parent goes (the server with its test worker, a command with the
    process that waits for it), so a worker killed outright leaves no command running."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except Exception:
        pass

die_with_parent()
PRELOAD, SOCKET, TESTS = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
for name in PRELOAD:
    __import__(name)
sys.path.insert(0, TESTS)
import forked_exec
sys.path.remove(TESTS)
KEY = forked_exec.env_key(dict(os.environ))
forked_exec.install_in_server(SOCKET, KEY)  # what a command runs of `python` comes back here
# What the imports made lives as long as the server: frozen, out of the collector's sight, so a
# child's collections (pytest runs two at every session's end) walk only what the command made,
# not torch's objects, whose pages each walk would copy from the server.
gc.collect()
gc.freeze()
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(SOCKET)
listener.listen(64)
# No Python thread may run at the fork. (numpy's OpenBLAS starts a native pool at import, and
# shuts it down around a fork itself, as multiprocessing's fork start method relies on.)
alone = threading.active_count() == 1
with os.fdopen(int(sys.argv[4]), "w") as ready:
    ready.write(json.dumps({"ready": alone}) + "\n")


def receive(conn):
    """A request: its 8-byte length with the command's standard streams, then its JSON."""
    head, fds, _, _ = socket.recv_fds(conn, 8, 3)
    while len(head) < 8:
        more = conn.recv(8 - len(head))
        if not more:
            raise EOFError
        head += more
    (size,) = struct.unpack("!Q", head)
    data = b""
    while len(data) < size:
        more = conn.recv(min(size - len(data), 1 << 20))
        if not more:
            raise EOFError
        data += more
    return json.loads(data), fds


def streams(unbuffered):
    """sys.stdin, stdout and stderr over fds 0-2 as the interpreter makes them (-u: unbuffered)."""
    made = []
    for fd in (0, 1, 2):
        raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
        interactive = raw.isatty()
        if fd == 0:
            made.append(io.TextIOWrapper(io.BufferedReader(raw), encoding=sys.stdin.encoding, errors=sys.stdin.errors,
                                         line_buffering=False))
            continue
        old = sys.stdout if fd == 1 else sys.stderr
        buffered = raw if unbuffered else io.BufferedWriter(raw)
        made.append(io.TextIOWrapper(buffered, encoding=old.encoding, errors=old.errors,
                                     line_buffering=not unbuffered and (fd == 2 or interactive),
                                     write_through=unbuffered))
    sys.stdin, sys.stdout, sys.stderr = made
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = made


def command(req, fds, conn):
    """The forked command: its streams, directory and environment, then `python ARGV`."""
    os.setpgid(0, 0)  # its own group: a timeout or an interrupt kills what the command started too
    die_with_parent()
    conn.close()
    for fd, new in zip((0, 1, 2), fds):
        os.dup2(new, fd)
    for new in fds:
        if new > 2:
            os.close(new)
    how = forked_exec.parse(req["argv"])
    streams(how["unbuffered"])
    if how["no_bytecode"]:
        sys.dont_write_bytecode = True
    os.chdir(req["cwd"])
    os.environ.clear()  # the command's own environment (it differs from the server's in PER_COMMAND only)
    os.environ.update(req["env"])
    kind, target, args = how["kind"], how["target"], how["args"]
    code = 0
    try:
        if kind == "module":
            sys.argv = [target, *args]
            sys.path[0] = req["cwd"]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif kind == "command":
            sys.argv = ["-c", *args]
            sys.path[0] = ""
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)
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


def forked(run, *args):
    """The pid of a child running ``run(*args)``, which never returns to this loop."""
    pid = os.fork()
    if pid == 0:
        try:
            run(*args)
        finally:
            os._exit(70)
    return pid


def keeper(req, fds, conn):
    """Between the server and the command: forks it, says its pid, waits for it and says how it
    ended; the caller gone (the connection closed) kills the command's group."""
    listener.close()
    die_with_parent()
    pid = forked(command, req, fds, conn)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    for fd in fds:
        os.close(fd)
    conn.sendall((json.dumps({"pid": pid}) + "\n").encode())
    ended = os.pidfd_open(pid)
    while True:
        readable, _, _ = select.select([conn, ended], [], [])
        if ended in readable:
            break
        if not conn.recv(1):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            break
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    try:
        conn.sendall((json.dumps({"returncode": code}) + "\n").encode())
    except OSError:
        pass


while True:
    conn, _ = listener.accept()
    try:
        req, fds = receive(conn)
    except (OSError, EOFError, ValueError):
        conn.close()
        continue
    how = forked_exec.parse(req.get("argv", []))
    refused = "not a form the server runs" if how is None or len(fds) != 3 else None
    if refused is None and forked_exec.env_key(req["env"]) != KEY:
        refused = "another environment"
    if refused:
        try:
            conn.sendall((json.dumps({"refused": refused}) + "\n").encode())
        except OSError:
            pass
    else:
        sys.stdout.flush(); sys.stderr.flush()
        forked(keeper, req, fds, conn)
    conn.close()
    for fd in fds:
        os.close(fd)
    while True:  # the keepers that ended
        try:
            ended, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if not ended:
            break
'''

SUITE_MODULES = ("torch", "numpy", "pytest", "hypothesis")
SCRIPT_MODULES = ("torch", "numpy")


class Zygote:
    """One server: a process with ``preload`` imported, under ``env``, forking a child a command.
    It listens on a socket of its own: the tests' run() and the shim (forked_exec.py) connect to it."""

    def __init__(self, env: dict[str, str], preload: tuple[str, ...]):
        self.env = env
        self.folder = Path(tempfile.mkdtemp(prefix="forkserver-"))
        self.socket = str(self.folder / "server.sock")
        ready_read, ready_write = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, json.dumps(list(preload)), self.socket, str(TESTS), str(ready_write)],
            env=env, pass_fds=(ready_write,), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(ready_write)
        with os.fdopen(ready_read, "r") as ready_pipe:
            line = ready_pipe.readline()
        ready = json.loads(line) if line else None
        self.usable = bool(ready and ready.get("ready"))

    def close(self) -> None:
        """End the server (the commands it runs go with it) and remove its socket."""
        self.proc.kill()
        self.proc.wait(timeout=60)
        shutil.rmtree(self.folder, ignore_errors=True)

    def run(self, kind: str, target: str, args: list[str], cwd: Path, env: dict[str, str],
            timeout: float) -> subprocess.CompletedProcess[str]:
        if not Path(cwd).is_dir():  # subprocess.run's error for a missing working directory
            raise FileNotFoundError(2, "No such file or directory", str(cwd))
        argv = [*(["-m"] if kind == "module" else []), target, *args]
        cmd = [sys.executable, *argv]
        with tempfile.TemporaryDirectory(prefix="forkserver-") as tmp, \
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            stdout, stderr = Path(tmp) / "stdout", Path(tmp) / "stderr"
            try:
                conn.connect(self.socket)
            except OSError as exc:
                raise RuntimeError(f"the fork server is gone ({exc})") from None
            with open(os.devnull, "rb") as stdin, stdout.open("wb") as out, stderr.open("wb") as err:
                payload = json.dumps({"argv": argv, "cwd": str(cwd), "env": env}).encode()
                socket.send_fds(conn, [struct.pack("!Q", len(payload))], [stdin.fileno(), out.fileno(), err.fileno()])
                conn.sendall(payload)
            answers = conn.makefile("r")
            started = _answer(answers)
            if started is None or "pid" not in started:
                raise RuntimeError(f"the fork server did not run the command: {started}")
            pid = started["pid"]
            done: list[dict | None] = []
            reader = threading.Thread(target=lambda: done.append(_answer(answers)), daemon=True)
            reader.start()
            try:
                reader.join(timeout)
            except BaseException:
                _kill_group(pid)  # Ctrl-C (or any other exception) in the test: the command goes with it
                raise
            if reader.is_alive():
                _kill_group(pid)
                reader.join(60)
                raise subprocess.TimeoutExpired(cmd, timeout, stdout.read_text(errors="replace"),
                                                stderr.read_text(errors="replace"))
            if not done or done[0] is None:
                raise RuntimeError("the fork server died")
            return subprocess.CompletedProcess(cmd, done[0]["returncode"], stdout.read_text(errors="replace"),
                                               stderr.read_text(errors="replace"))


def _answer(answers) -> dict | None:
    line = answers.readline()
    return json.loads(line) if line else None


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, 9)
    except ProcessLookupError:
        pass


# The servers this process keeps, most recently used last. Each holds torch (half a GB): a test that
# changes the environment gets a server of its own, and the oldest is closed beyond KEEP.
KEEP = 6  # the environments the tests use: the suite's, the caller's, outside_env()'s, each for modules and scripts
_zygotes: dict[tuple[str, tuple[str, ...]], Zygote | None] = {}

# Variables that change from one test to the next, which no preloaded module reads at import:
# pytest names the running test in PYTEST_CURRENT_TEST. Keyed on them, each test would start
# servers of its own (1.5-2 s each); a child is handed its command's whole environment instead.
PER_COMMAND = forked_exec.PER_COMMAND


def server_key(env: dict[str, str], preload: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """Which server runs a command under ``env``: one per environment less PER_COMMAND (the digest
    the server itself and forked_exec's hook compare), and per set of imports."""
    return forked_exec.env_key(env), preload


def _zygote(env: dict[str, str], preload: tuple[str, ...]) -> Zygote | None:
    key = server_key(env, preload)
    if key in _zygotes:
        zygote = _zygotes.pop(key)
        if zygote is None or zygote.proc.poll() is None:
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


def close_all() -> None:
    """End this process's servers and remove their folders (at exit: a server dies with its process,
    but its folder would stay behind in the temporary directory)."""
    if os.getpid() != _OWNER:  # a forked child inherited the table: the servers are its parent's
        return
    while _zygotes:
        zygote = _zygotes.pop(next(iter(_zygotes)))
        if zygote is not None:
            zygote.close()


_OWNER = os.getpid()
atexit.register(close_all)


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


_seen: dict[tuple[str, tuple[str, ...]], int] = {}  # how often an environment was asked for


def serving(env: dict[str, str], kind: str) -> str | None:
    """The socket of a server for ``env`` (forked_exec's hook): the one whose imports fit ``kind``
    (pytest and hypothesis for a module), else the other. None where none runs, the first time an
    environment is asked for (one command pays no server's start); the second time one is started."""
    order = (SUITE_MODULES, SCRIPT_MODULES) if kind == "module" else (SCRIPT_MODULES, SUITE_MODULES)
    for preload in order:
        zygote = _zygotes.get(server_key(env, preload))
        if zygote is not None and zygote.proc.poll() is None:
            return zygote.socket
    key = server_key(env, order[0])
    _seen[key] = _seen.get(key, 0) + 1
    if _seen[key] < 2:
        return None
    zygote = _zygote(env, order[0])
    return zygote.socket if zygote is not None else None


def route_subprocesses() -> None:
    """This process's runs of sys.executable go to a running server of their environment (forked_exec.py)."""
    if enabled():
        forked_exec.install(serving)
        os.environ[forked_exec.ENABLED] = "1"
