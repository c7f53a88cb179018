"""`subprocess` runs of this interpreter, forked from a fork server rather than started afresh.

The tests and the suite runs they start spawn `python` (sys.executable) themselves: a nested
`pytest -n 2` starts its workers through execnet, a test runs `python -m pytest ...` with
subprocess. Each such process began by importing torch (2-3 s of CPU here), about half of what
`nox -s tests` spent. Where a fork server (forkserver.py) serves the command's environment, the
hook below runs a small launcher (the shim) in place of the interpreter: it hands the server its
argv, working directory, environment and standard streams (the file descriptors themselves), the
server forks the command, and the shim waits for it, passes on the signals it is sent, and exits
as the command did (a signal's death as that signal). Killed outright, the shim takes the command
with it. What the caller sees is a child process that behaves as `python` would, less the imports.

Not routed (a plain `python` runs): a command whose environment no server has, another
interpreter, an interpreter option other than -u and -B, `preexec_fn`, a new session or process
group, `pass_fds`, a changed user. The shim stands in the caller's process group but the command
does not, so the tests about signals and process trees (marked `fresh_processes`) turn it off.
This module is imported by the fork servers too: the standard library only.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

# In the tests' environment while routing is on (conftest.py); a command's environment without it
# (a test marked fresh_processes) is never routed, nor are the commands that command starts.
ENABLED = "CPUGPU_TESTS_FORKED_EXEC"
# Variables no preloaded module reads at import, which change from one command to the next
# (pytest sets PYTEST_VERSION for the length of a session; it names the running test). GNU
# readline, which pytest's debugging plugin imports, sets COLUMNS and LINES in the C environment a
# child inherits, but not in os.environ: the `pytest -n 2` a serial test run starts asked with
# them and was refused (its workers ran fresh).
PER_COMMAND = frozenset({"PYTEST_CURRENT_TEST", "PYTEST_VERSION", "COLUMNS", "LINES", ENABLED})
SOCKET_ARG = "--forked-exec-socket="


def env_key(env: dict[str, str]) -> str:
    """Which server may run a command under ``env``: a digest of it less PER_COMMAND."""
    items = sorted((k, v) for k, v in env.items() if k not in PER_COMMAND)
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()


def fresh(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a command that must be a fresh interpreter, and whose own commands too."""
    return {k: v for k, v in env.items() if k != ENABLED}


def parse(argv: list[str]) -> dict[str, Any] | None:
    """``python ARGV`` as the server runs it: {kind, target, args, unbuffered, no_bytecode}; None for
    a form it does not run (any other option, `-c` glued to its code, no command at all)."""
    unbuffered = no_bytecode = False
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-c", "-m"):
        letters = argv[i][1:]
        if not letters or not set(letters) <= {"u", "B"}:
            return None
        unbuffered |= "u" in letters
        no_bytecode |= "B" in letters
        i += 1
    if i >= len(argv):
        return None
    if argv[i] in ("-c", "-m"):
        if i + 1 >= len(argv):
            return None
        kind = "command" if argv[i] == "-c" else "module"
        target, args = argv[i + 1], argv[i + 2:]
    else:
        kind, target, args = "script", argv[i], argv[i + 1:]
    return {"kind": kind, "target": target, "args": list(args), "unbuffered": unbuffered, "no_bytecode": no_bytecode}


# --- the shim: run by the interpreter itself, isolated (-I -S), so it starts in milliseconds
SHIM = r'''#!{python} -IS
import json, os, signal, socket, struct, sys

REAL = {python!r}
argv = sys.argv[1:]
path = argv.pop(0)[len({prefix!r}):]


def plain():
    os.execv(REAL, [REAL, *argv])


try:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    payload = json.dumps({{"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
    socket.send_fds(conn, [struct.pack("!Q", len(payload))], [0, 1, 2])
    conn.sendall(payload)
    answers = conn.makefile("r")
    first = json.loads(answers.readline() or "{{}}")
except (OSError, ValueError):
    plain()
if "pid" not in first:
    plain()
pid = first["pid"]


def forward(signum, frame):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
    signal.signal(getattr(signal, name), forward)
try:
    last = json.loads(answers.readline() or "{{}}")
except (OSError, ValueError):
    last = {{}}
if "returncode" not in last:  # the server (or the command's keeper) died under the command, which went with it
    sys.stderr.write(f"python-forked: the fork server at {{path}} ended before the command did\n")
    sys.stderr.flush()
    os._exit(70)  # EX_SOFTWARE
code = last["returncode"]
if code < 0:  # die of the command's signal (SIGKILL and SIGSTOP take no handler to reset)
    if -code not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
os._exit(code & 0xFF)
'''


def write_shim(folder: Path, python: str) -> Path:
    path = folder / "python-forked"
    path.write_text(SHIM.format(python=python, prefix=SOCKET_ARG))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# --- the hook in subprocess: which commands go to the shim
_original = subprocess.Popen._execute_child  # type: ignore[attr-defined]
_find: Callable[[dict[str, str], str], str | None] | None = None  # (env, kind) -> a server's socket
_shim: Path | None = None


def _routed(args: Any, executable: Any, preexec_fn: Any, pass_fds: Any, env: Any, shell: bool, gid: Any,
            gids: Any, uid: Any, umask: int, start_new_session: bool, process_group: Any) -> list[str] | None:
    if _find is None or _shim is None or shell or executable is not None or preexec_fn is not None or pass_fds:
        return None
    if start_new_session or process_group not in (None, -1) or uid is not None or gid is not None or gids is not None or umask >= 0:
        return None
    if not isinstance(args, (list, tuple)) or not args or args[0] != sys.executable:
        return None
    environment = os.environ if env is None else env
    if environment.get(ENABLED) != "1" or not all(isinstance(a, str) for a in args):
        return None
    how = parse(list(args[1:]))
    if how is None:
        return None
    socket_path = _find(dict(environment), how["kind"])
    if socket_path is None:
        return None
    return [args[0], SOCKET_ARG + socket_path, *args[1:]]


def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags,
                   shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, restore_signals, gid, gids, uid,
                   umask, start_new_session, process_group):
    routed = _routed(args, executable, preexec_fn, pass_fds, env, shell, gid, gids, uid, umask, start_new_session,
                     process_group)
    if routed is not None:
        args, executable = routed, str(_shim)
    return _original(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags,
                     shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, restore_signals, gid, gids, uid,
                     umask, start_new_session, process_group)


def install(find: Callable[[dict[str, str], str], str | None], folder: Path | None = None) -> None:
    """Route this process's runs of sys.executable to the server ``find`` names (None: a plain run);
    the shim is written into ``folder`` (default: a new temporary one)."""
    global _find, _shim
    if folder is None:  # a folder of this process's own, removed when it exits
        folder = Path(tempfile.mkdtemp(prefix="forked-exec-"))
        atexit.register(_remove, folder, os.getpid())
    _shim = write_shim(folder, sys.executable)
    _find = find
    subprocess.Popen._execute_child = _execute_child  # type: ignore[attr-defined]


def _remove(folder: Path, owner: int) -> None:
    if os.getpid() == owner:  # not in a forked child, which inherits the handler
        shutil.rmtree(folder, ignore_errors=True)


def install_in_server(socket_path: str, key: str) -> None:
    """In a fork server: its children route the commands whose environment is the server's to it."""
    install(lambda env, kind: socket_path if env_key(env) == key else None, Path(socket_path).parent)
