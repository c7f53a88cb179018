"""Run commands side by side, at most N at a time, and stop them all cleanly on SIGINT, SIGTERM or SIGHUP.

Each command runs in a process of its own, leading its own session: a terminal's Ctrl-C
reaches only this process, which forwards the signal to every command still running and
waits for each to end (a cell runner records itself as interrupted and stops its test
process group), SIGKILL past a grace period. Commands not started by then never start.
Processes rather than threads, because signal handlers belong to a main thread: every
cell runner keeps cell.py's own handling, unchanged.

A command's output is read line by line: kept (its last lines, to explain an unexpected
exit) and, with ``stream``, printed prefixed by the command's name. The caller's progress
lines (on_start, on_finish) are printed between whole lines, never inside one. An output
that closes (the terminal went away, ``| head``) stops the printing, nothing else: every
command's output is still read to its end, so none blocks on a full pipe.
"""

from __future__ import annotations

import collections
import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from cpugpu_conformance.output import say
from cpugpu_conformance.runner.processes import CellInterrupted, interrupts_raised, signal_group

TAIL_LINES = 40
POLL_S = 0.1
STOP_GRACE_S = 60.0  # a cell runner needs two kill grace periods (processes.KILL_GRACE_S) to stop its tests


@dataclass
class Job:
    name: str
    command: list[str]
    log: Path | None = None  # where the command keeps its full output, for progress lines


@dataclass
class Finished:
    name: str
    returncode: int  # negative: killed by that signal
    seconds: float
    started_at: float  # time.time() when it started
    tail: list[str]


@dataclass
class ParallelOutcome:
    finished: list[Finished] = field(default_factory=list)  # in the order they ended
    not_started: list[str] = field(default_factory=list)
    signum: int | None = None  # the signal that stopped the run


@dataclass
class _Running:
    job: Job
    proc: subprocess.Popen[bytes]
    reader: threading.Thread
    clock: float
    started_at: float
    tail: collections.deque[str]


class _Printer:
    """Whole lines to one stream, from several threads; a closed stream is not an error (cell.say)."""

    def __init__(self, out: IO[str]) -> None:
        self.out, self.lock = out, threading.Lock()

    def line(self, text: str) -> None:
        with self.lock:
            say(text, self.out)


def run_jobs(jobs: Sequence[Job], max_jobs: int, *, stream: bool = False, out: IO[str] | None = None,
             cwd: Path | None = None, env: dict[str, str] | None = None,
             on_start: Callable[[Job], str | None] | None = None,
             on_finish: Callable[[Finished], str | None] | None = None,
             stop_grace_s: float = STOP_GRACE_S) -> ParallelOutcome:
    """Run ``jobs`` in order, ``max_jobs`` at a time; returns when all ended, or after a signal
    once every running one has ended (``ParallelOutcome.signum``). Handles SIGINT, SIGTERM and SIGHUP
    (cell.INTERRUPTING_SIGNALS) only in the main thread (elsewhere signals keep their handlers)."""
    if max_jobs < 1:
        raise ValueError("max_jobs must be at least 1")
    printer = _Printer(out or sys.stdout)
    pending, running = list(jobs), {}
    outcome = ParallelOutcome()

    def say(text: str | None) -> None:
        if text:
            printer.line(text)

    def end(r: _Running) -> None:
        r.reader.join(timeout=5)  # the rest of its output; a stray holding the pipe cannot hold us
        outcome.finished.append(Finished(r.job.name, r.proc.returncode, time.monotonic() - r.clock, r.started_at,
                                         list(r.tail)))
        say(on_finish(outcome.finished[-1]) if on_finish else None)

    with interrupts_raised() as interrupts:
        try:
            while pending or running:
                while pending and len(running) < max_jobs:
                    with interrupts.deferred():  # started and registered, or not started at all
                        job = pending.pop(0)
                        running[job.name] = _start(job, printer if stream else None, cwd, env)
                    say(on_start(job) if on_start else None)
                for name in [n for n, r in running.items() if r.proc.poll() is not None]:
                    with interrupts.deferred():
                        end(running.pop(name))
                time.sleep(POLL_S)
        except CellInterrupted as exc:
            with interrupts.deferred():
                outcome.signum = exc.signum
                outcome.not_started = [j.name for j in pending]
                _stop(list(running.values()), exc.signum, stop_grace_s)
                for r in running.values():
                    end(r)
    return outcome


def _start(job: Job, printer: _Printer | None, cwd: Path | None, env: dict[str, str] | None) -> _Running:
    proc = subprocess.Popen(job.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=cwd, env=env, start_new_session=True)
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    reader = threading.Thread(target=_read, args=(proc, job.name, tail, printer), daemon=True)
    reader.start()
    return _Running(job, proc, reader, time.monotonic(), time.time(), tail)


def _read(proc: subprocess.Popen[bytes], name: str, tail: collections.deque[str], printer: _Printer | None) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        tail.append(line)
        if printer:
            printer.line(f"[{name}] {line}")


def _stop(running: list[_Running], signum: int, grace_s: float) -> None:
    """The signal to every running command's process group; SIGKILL for those still there after grace_s."""
    for r in running:
        signal_group(r.proc, signum)
    deadline = time.monotonic() + grace_s
    for r in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            r.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    for r in running:
        if r.proc.poll() is None:
            signal_group(r.proc, signal.SIGKILL)
            r.proc.wait()

