"""The steps: the suite's and the proofs' commands, the environment their children run in, a step
run in its own process group with its log, and what the suite's result file answers."""

from __future__ import annotations

import functools
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpu_checking import REPO, SRC, TOOLS
from gpu_checking.child_processes import end_group, exited, in_the_child, stop
from gpu_checking.out_folder import StepLog
from gpu_checking.outcomes import EXIT_INTERRUPTED, Refused, Step
from gpu_checking.proof_selection import PROOFS_FOR_ENV
from gpu_checking.stop_signals import SIGNALS, Stopped

PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # what a device machine brings back


def child_env(proofs_for: str | None = None) -> dict[str, str]:
    """This environment, with src/ and tools/ first on PYTHONPATH (no install needed), nothing
    that would change how pytest runs, and the device whose proofs are selected."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", PROOFS_FOR_ENV)}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(TOOLS), *filter(None, [os.environ.get("PYTHONPATH")])])
    if proofs_for:
        env[PROOFS_FOR_ENV] = proofs_for
    return env


def has_xdist() -> bool:
    import importlib.util

    return importlib.util.find_spec("xdist") is not None


def parallel(jobs: int) -> list[str]:
    """pytest-xdist's -n when it is installed and more than one job is asked for; serial otherwise.
    Load scheduling, named: with the longest proofs first it pairs each with a short one."""
    return ["-n", str(jobs), "--dist", "load"] if jobs > 1 and has_xdist() else []


def cell_name(release: str, device: str) -> str:
    cell = f"installed-torch-{release}-{device}"
    if not PLAIN_NAME.fullmatch(cell):
        raise Refused(f"gpu_check: the result file's name {cell + '.json'!r} is not a plain file name "
                      "(letters, digits, '.', '_', '-'): check --device")
    return cell


def suite_command(result: Path, cell: str, device: str, jobs: int, profile: str, extra: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", "-rfE",
        f"--hypothesis-profile={profile}", "--device", device, "--cell-result", str(result), "--cell-name", cell,
        *parallel(jobs), *extra,
    ]


def proofs_command(modules: list[str], jobs: int, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", *modules, "-p", "gpu_check", "-p", "no:cacheprovider", "-q", "-rfEs",
            "--durations=10", *parallel(jobs), *extra]


def run_step(name: str, command: list[str], log_path: Path, env: dict[str, str], timeout: float,
             means: dict[int, str]) -> Step:
    """Run ``command`` in its own process group, its output (both streams) into ``log_path``
    (renamed into place when it ends); past ``timeout`` the group is stopped. However it ends,
    nothing it started is left running. A stopping signal stops it and is raised again, with
    the step."""
    start = time.monotonic()
    stopped: Stopped | None = None
    timed_out = False
    proc: subprocess.Popen | None = None
    try:
        with SIGNALS.deferred():  # no log and no child that nothing would finish or stop
            log = StepLog(log_path)
            log.write(f"$ {shlex.join(command)}\n")
            try:
                proc = subprocess.Popen(command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log.file,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        preexec_fn=functools.partial(in_the_child, os.getpid()))
            except OSError as exc:
                log.finish(f"{name}: cannot start: {exc}")
                raise Refused(f"gpu_check: cannot start the {name}: {exc.strerror or exc}") from None
        if exited(proc, timeout):
            end_group(proc)
        else:
            stop(proc)
            timed_out = True
    except (Stopped, KeyboardInterrupt) as exc:
        stopped = exc if isinstance(exc, Stopped) else Stopped(signal.SIGINT)
        if proc is not None:
            stop(proc)
    code = EXIT_INTERRUPTED if timed_out or proc is None else proc.returncode
    what = means[EXIT_INTERRUPTED] if stopped else means.get(code, "unexpected exit code")
    step = Step(name, command, log_path, code, time.monotonic() - start, timed_out, what,
                stopped.name if stopped else "")
    log.finish(step.line())
    if stopped:
        stopped.step = step
        raise stopped
    return step


def result_answer(path: Path) -> tuple[bool, list[str]]:
    """Whether the result file says passed, and its lines for the summary (why not, when not)."""
    if not os.path.lexists(path):
        return False, [f"no result file {path.name}"]
    from cpugpu_conformance import results

    try:
        cell = results.CellResult.load(path)
    except (OSError, results.ResultFileError) as exc:
        return False, [f"result file {path.name}: unreadable: {exc}"]
    answer = cell.answer()
    environment = cell.get("environment") or {}
    lines = [f"result file {path.name}: {cell.describe()}",
             f"machine: torch {environment.get('torch')}, CUDA available: {environment.get('cuda_available')}, "
             f"GPU: {environment.get('gpu_name')}"]
    return answer.clean, lines + [f"  {line}" for line in answer.lines]
