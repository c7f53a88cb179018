"""Signals and process groups, shared by the cell runner and the parallel matrix run.

``interrupts_raised()`` turns SIGTERM, SIGINT and SIGHUP (a CI cancel, Ctrl-C, the terminal
closed) into CellInterrupted, deferred while cleanup runs. ``run_suite`` runs a command in
its own process group, tees its output to a log and stdout, and kills the group (and, on
Linux, the strays that left it) at the time limit or on an interrupt. ``signal_group`` and
``kill_group`` are the one way a group is signalled or stopped; ``log_tail`` reads the end
of a log without reading all of it.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cpugpu_conformance.output import write_out
from cpugpu_conformance.proctree import Proc, alive, descendants

LOG_TAIL_LINES = 40
KILL_GRACE_S = 5.0
LOG_TAIL_BYTES = 256 * 1024  # the end of a log is read, never all of it (a chatty suite writes gigabytes)


# ---------------------------------------------------------------------------- interrupts


class CellInterrupted(KeyboardInterrupt):
    """SIGTERM, SIGINT or SIGHUP (a CI cancel, Ctrl-C, the terminal closed) reached the cell runner.

    A KeyboardInterrupt, so that nox stops the whole run as it does for Ctrl-C; the cell
    has recorded itself as interrupted by then.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal_name(signum)}")
        self.signum = signum


# SIGHUP: the terminal closed. Like SIGTERM, it stops the run and is recorded, instead of
# killing the runner outright and leaving its tests running. (POSIX only.)
INTERRUPTING_SIGNALS = (signal.SIGTERM, signal.SIGINT, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()))


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Interrupts:
    """Raises CellInterrupted for the first of INTERRUPTING_SIGNALS, once.

    Inside ``deferred()`` (stopping the test process, writing a result) the exception waits
    until the block is done: cleanup cut short by a signal would leave what it cleans up.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._raised = False
        self._deferring = 0

    def handle(self, signum: int, _frame: Any = None) -> None:
        if self.signum is None:
            self.signum = signum
        self._raise_if_due()

    def _raise_if_due(self) -> None:
        if self.signum is not None and not self._raised and not self._deferring:
            self._raised = True
            raise CellInterrupted(self.signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        self._raise_if_due()


@contextlib.contextmanager
def interrupts_raised() -> Iterator[Interrupts]:
    """SIGTERM, SIGINT and SIGHUP become CellInterrupted while the block runs; the previous handlers
    come back after it. Python delivers signals to the main thread only, so elsewhere this
    changes nothing (and ``deferred()`` still works)."""
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = {signum: signal.getsignal(signum) for signum in INTERRUPTING_SIGNALS}
    for signum in INTERRUPTING_SIGNALS:
        signal.signal(signum, interrupts.handle)
    try:
        yield interrupts
    finally:
        for signum, handler in previous.items():
            # None: a handler installed outside Python, which cannot be put back; the default is closest
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


# ---------------------------------------------------------------------------- the test process


@dataclass
class SuiteRun:
    returncode: int | None  # None: killed at the time limit
    seconds: float
    tail: list[str] = field(default_factory=list)
    survivors: list[str] = field(default_factory=list)  # processes it started that outlived the kill

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


# Processes the test process started that left its process group (setsid, a daemon) are out of
# reach of a group kill. They are found by their parent links while the test process lives,
# noted every SWEEP_S (a process is its pid and its start time, so a pid used again is never
# mistaken for it) and killed with the group. Linux only (/proc); elsewhere the group kill
# is all there is. A process that left before it was ever noted (a double fork within
# SWEEP_S) is not found.
SWEEP_S = 1.0
Stray = Proc  # pid, start time (clock ticks since boot)


def _signal_strays(strays: Iterable[Stray], sig: int) -> None:
    for stray in strays:
        if alive(stray):  # still that process, not a pid used again
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(stray[0], sig)


def _outlived(strays: Iterable[Stray]) -> list[str]:
    """The strays still running a moment after SIGKILL, as ``pid N (command)``."""
    deadline = time.monotonic() + KILL_GRACE_S
    left = [s for s in strays if alive(s)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [s for s in left if alive(s)]
    return [f"pid {pid} ({_command_of(pid)})" for pid, _ in sorted(left)]


def _command_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip() or "?"
    except OSError:
        return "?"


def signal_group(proc: subprocess.Popen[Any], signum: int) -> None:
    """``signum`` to the process group ``proc`` leads (started with start_new_session); gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def kill_group(proc: subprocess.Popen[bytes], strays: Iterable[Stray] = ()) -> list[str]:
    """Stop the test process and everything it started: its process group (it leads one) and the
    strays that left it, SIGTERM, a grace period for the leader, then SIGKILL for whatever is
    left. Returns the processes that outlived it."""
    strays = set(strays) | (descendants(proc.pid) if proc.poll() is None else set())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        signal_group(proc, sig)
        _signal_strays(strays, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=KILL_GRACE_S)
    return _outlived(strays)


def _wait_noting_strays(proc: subprocess.Popen[bytes], time_limit_s: float, strays: set[Stray]) -> int:
    """proc.wait(timeout=time_limit_s), noting the processes below it every SWEEP_S."""
    deadline = time.monotonic() + time_limit_s
    while True:
        strays |= descendants(proc.pid)
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, time_limit_s)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout=min(left, SWEEP_S))


def run_suite(cmd: Sequence[str], *, log_path: Path, time_limit_s: float, cwd: Path | None = None,
              env: dict[str, str] | None = None, echo: bool = True, interrupts: Interrupts | None = None) -> SuiteRun:
    """Run cmd in its own process group, tee its output to log_path (appending) and stdout,
    kill it at the time limit. However this returns or raises, the group is gone."""
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")  # the log tail must be current at a crash
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
    uninterrupted = interrupts.deferred if interrupts else contextlib.nullcontext
    started = time.monotonic()
    log_failed: list[OSError] = []  # a full disk: the log stops, the pipe is still drained
    with open(log_path, "ab", buffering=0) as log:  # unbuffered: a write that fails leaves nothing to flush at close
        log.write(f"$ {' '.join(map(str, cmd))}\n".encode())

        def pump(proc: subprocess.Popen[bytes]) -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if not log_failed:
                    try:
                        log.write(line)
                    except OSError as exc:  # a reader that stopped would block the suite on its next print
                        log_failed.append(exc)
                        if echo:
                            write_out(f"[the log {log_path} stops here: {exc.strerror or exc}]\n")
                text = line.decode("utf-8", "replace")
                tail.append(text.rstrip("\n"))
                if echo:
                    write_out(text)

        proc: subprocess.Popen[bytes] | None = None
        reader: threading.Thread | None = None
        returncode: int | None = None
        strays: set[Stray] = set()
        survivors: list[str] = []
        try:
            with uninterrupted():  # a signal waits until the group exists and this try guards it
                proc = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        cwd=cwd, env=env, start_new_session=True)
                reader = threading.Thread(target=pump, args=(proc,), daemon=True)
                reader.start()
            returncode = _wait_noting_strays(proc, time_limit_s, strays)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:  # the time limit, an interrupt, or strays that outlived pytest
            with uninterrupted():
                if proc is not None:
                    survivors = kill_group(proc, strays)
                if reader is not None:
                    reader.join(timeout=KILL_GRACE_S)
        if log_failed:
            tail.append(f"[the log {log_path} stopped here: {log_failed[0].strerror or log_failed[0]}]")
    return SuiteRun(returncode, time.monotonic() - started, list(tail), survivors)




def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last lines of a log, from its last LOG_TAIL_BYTES; none for a log that cannot be read."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return []  # a FIFO would block, a device never end
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - LOG_TAIL_BYTES))
            data = fh.read(LOG_TAIL_BYTES)
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace").splitlines()
    if size > LOG_TAIL_BYTES and text:
        text = text[1:]  # the first line was cut
    return text[-lines:]

