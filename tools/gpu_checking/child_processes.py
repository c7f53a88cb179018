"""Processes: a step's process group, and everything below gpu_check (as subreaper), stopped,
killed and reaped, so nothing a step started outlives it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

from cpugpu_conformance.proctree import Proc, descendants, stat_fields  # standard library only
from gpu_checking.outcomes import EXIT_INTERRUPTED

STOP_GRACE_S = 15  # for a stopped suite to write its result file
REAP_LIMIT_S = 10  # for what a step left behind to be killed and gone

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()
IS_SUBREAPER = False  # set by main(): orphans of what gpu_check started become its children


def become_subreaper() -> bool:
    """Linux: a process a step started that outlives its parent (a setsid'd stray, an xdist worker
    of a dead controller) is handed to gpu_check, not to init, so gpu_check can find and end it."""
    global IS_SUBREAPER
    IS_SUBREAPER = bool(_LIBC is not None and _LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    return IS_SUBREAPER


def in_the_child(parent: int) -> None:
    """Between fork and exec of a step's process (its own session already): Ctrl-C as Python's
    default (a background job ignores it, and the ignoring is inherited, but stop() needs it),
    and death with gpu_check, should gpu_check be killed outright."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # gpu_check died before the line above
        os._exit(EXIT_INTERRUPTED)


def _kill(procs: set[Proc]) -> None:
    for pid, started in procs:
        fields = stat_fields(pid)
        if fields and len(fields) > 19 and int(fields[19]) == started:  # still that process
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def exited(proc: subprocess.Popen, timeout: float) -> bool:
    """Whether the step's process ended within ``timeout``, left unreaped: while it is a zombie its
    pid, the id of its process group, cannot be given to another group, so the group can be
    killed after it without hitting a stranger."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:  # reaped already
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def end_orphans(limit_s: float = REAP_LIMIT_S) -> None:
    """As subreaper, after a step: kill what is still below gpu_check and reap it, until nothing is.
    (Only in gpu_check's own process, where every child is a step's: never in a test's.)"""
    if not IS_SUBREAPER:
        return
    deadline = time.monotonic() + limit_s
    while (left := descendants(os.getpid())) and time.monotonic() < deadline:
        _kill(left)
        for pid, _ in left:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.02)


def end_group(proc: subprocess.Popen, strays: set[Proc] = frozenset()) -> None:
    """After the step's process has ended or been given up on: SIGKILL to what is left of its group
    (xdist workers) and to ``strays`` (processes that left the group), then reap it, then the orphans."""
    _signal_group(proc.pid, signal.SIGKILL)
    _kill(set(strays))
    proc.wait()
    end_orphans()


def stop(proc: subprocess.Popen) -> None:
    """Ctrl-C to the whole group (xdist workers included), so the suite writes what it found in
    its result file as an interrupted run; killed, with all it started, if it has not ended
    after the grace."""
    strays = descendants(proc.pid)  # while the parent links still lead here
    _signal_group(proc.pid, signal.SIGINT)
    if not exited(proc, STOP_GRACE_S):
        strays |= descendants(proc.pid)
    end_group(proc, strays)
