"""Run one matrix cell: install its torch, check it got that torch, run the suite, keep its answer.

Whatever happens, the cell ends with results/<cell>.json and results/<cell>.log: the
suite's own result when pytest finished (exit 0, 1, 5 or 6), otherwise a result with status
not_installed, wrong_torch, timed_out, crashed, interrupted or error and a ``detail``
saying why (the installer's error, the tail of the log). A cell that did not run never
looks like one that passed: from the moment a run claims the result path until it writes
its answer, the path holds an ``interrupted`` placeholder, and a second run on the same
path refuses to start; a result path it cannot write is one line (ResultPathUnusable).
SIGTERM, SIGINT or SIGHUP (a CI cancel, Ctrl-C, the terminal closed) stops the test process
group, and what left it (Linux), and records ``interrupted``; a closed stdout stops only
the echo. A ``latest`` entry is resolved to the newest final release where the cell takes
torch from (index.newest_final_release) once it holds its result path; an index that cannot be read makes it not_installed. The installer's output
reaches stdout and the log line by line as it comes, with a heartbeat line while it is
quiet (a download of gigabytes). Results are read and written only through
results.CellResult, whose answer() decides what a cell's outcome is. The cell, matrix and
bisect commands (and so nox's conformance, matrix and bisect sessions) and nox's installed
session all come here; a matrix cell describes its own run (CellSpec.from_matrix_cell).

The command lines around it are ``cpugpu-conformance cell|summary|record-unfinished``
(cli_cell, cli_summary, cli_record); ``python -m cpugpu_conformance.cell summary|record-unfinished``
still works.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import json
import os
import queue
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from cpugpu_conformance import results
from cpugpu_conformance.index import ReleaseListingError, newest_final_release
from cpugpu_conformance.matrix import Cell, Release, release_key
from cpugpu_conformance.output import say, write_out  # noqa: F401  (cells.say: the runner's commands print through it)

LOG_TAIL_LINES = 40
INSTALL_KEPT_LINES = 200  # of the installer's output, for the not_installed detail
HEARTBEAT_S = 10.0  # a quiet installer (a 3 GB download) still gets a line this often
KILL_GRACE_S = 5.0
# The suite: 0 every promise asked for passed, 1 one failed, 5 nothing was tested, 6 some promises
# went untested (none failed). Each is a finished run whose result file holds the answer (a cuda
# cell on a machine without a GPU: untested). Anything else means the suite did not finish its job.
PYTEST_FINISHED = (0, 1, 5, 6)
PYTEST_INTERRUPTED = 2
PYTEST_EXIT_NAMES = {2: "interrupted", 3: "internal error", 4: "usage error", 5: "nothing tested",
                     6: "some promises untested"}
LOG_TAIL_BYTES = 256 * 1024  # the end of a log is read, never all of it (a chatty suite writes gigabytes)

# Runs inside the cell's interpreter. Reads torch/version.py instead of importing torch,
# which takes seconds; the suite's own result file later records the torch it imported.
_PROBE = r"""
import importlib.util, json, os, platform, runpy, sys
out = {"python": platform.python_version(), "prefix": sys.prefix, "platform": platform.platform()}
spec = importlib.util.find_spec("torch")
locations = list(spec.submodule_search_locations or []) if spec else []
if locations:
    out["torch_location"] = os.path.realpath(locations[0])
    try:
        v = runpy.run_path(os.path.join(locations[0], "version.py"))
        out.update(torch=v.get("__version__"), torch_git_version=v.get("git_version"), torch_cuda=v.get("cuda"))
    except Exception as exc:
        out["torch_error"] = f"{type(exc).__name__}: {exc}"
try:
    from importlib.metadata import version
    out["numpy"] = version("numpy")
except Exception:
    out["numpy"] = None
print(json.dumps(out))
"""


# `python -m pytest ARGS`, minus the interpreter's teardown: tearing down an interpreter with torch
# loaded takes about a second after pytest has written the cell's result. The suite's recorder
# writes (and fsyncs) its result file during the session and releases its lock when pytest
# unconfigures, both before pytest.main returns; so flush what pytest printed and end the process
# with pytest's exit code. Nor does it take pytest's closing garbage collections (a quarter of a
# second with torch loaded, after the result is written; they only look for exceptions raised in
# finalizers, which pytest still reports after each test): the iterations come from a stash key
# pytest keeps for that purpose, where this pytest has it. Ctrl-C stays pytest's
# KeyboardInterrupt (exit 2), SIGTERM still ends the process. No pytest is the error
# `python -m pytest` gives. One line, for the log.
SUITE_LAUNCHER = (
    "import os, sys, types, importlib.util as u; "
    "u.find_spec('pytest') or sys.exit(sys.executable + ': No module named pytest'); "
    "import pytest; "
    "no_final_gc = types.SimpleNamespace(pytest_configure=lambda config: (k := getattr("
    "sys.modules.get('_pytest.unraisableexception'), 'gc_collect_iterations_key', None)) is None "
    "or config.stash.__setitem__(k, 0)); "
    "code = pytest.main(sys.argv[1:], plugins=[no_final_gc]); sys.stdout.flush(); sys.stderr.flush(); os._exit(int(code))"
)


# ---------------------------------------------------------------------------- environments


def find_uv() -> str | None:
    """uv on PATH, or the one the `uv` package ships (nox's own fallback)."""
    found = shutil.which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found]

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return None


def env_python(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def create_env(env_dir: Path, python_version: str) -> Path:
    """A virtual environment at env_dir (reused when it exists); returns its interpreter."""
    python = env_python(env_dir)
    if python.exists():
        return python
    uv = find_uv()
    if uv:
        cmd = [uv, "venv", "--quiet", "--python", python_version, str(env_dir)]
    else:
        base = shutil.which(f"python{python_version}") or sys.executable
        cmd = [base, "-m", "venv", str(env_dir)]
    subprocess.run(cmd, check=True)
    return python


@dataclass
class Install:
    ok: bool
    command: list[str]
    output: str
    seconds: float

    def error(self, lines: int = LOG_TAIL_LINES) -> str:
        tail = "\n".join(self.output.strip().splitlines()[-lines:])
        return f"{' '.join(self.command)} failed:\n{tail}"


def install_command(python: Path, release: Release, *, index_url: str | None, requirements_file: Path | None,
                    find_links: str | None = None, offline: bool = False) -> list[str]:
    """One resolver run for torch, its NumPy, the extras and (from a requirements file) the project.

    The project does not depend on torch or numpy, so adding it cannot move them. uv
    rebuilds a local project named on its command line every time, but one named in a
    requirements file only when its pyproject.toml changed: 0.1 s instead of 0.8 s for
    an environment that is already complete. The index is an *extra* one: uv tries it
    first (torch comes from it when it has it) and falls back to the ordinary index.
    A find-links folder is searched too; offline, nothing but it and uv's cache is.
    A pre-release torch comes with ``--prerelease explicit``: allowed for torch, pinned to
    one, whatever UV_PRERELEASE says, while NumPy and the rest stay on final releases
    (``allow`` would take a NumPy release candidate too).
    """
    if release.is_latest:
        raise ValueError("torch latest must be resolved to a release before it is installed (resolve_latest)")
    uv = find_uv()
    cmd = [uv, "pip", "install", "--python", str(python)] if uv else [str(python), "-m", "pip", "install"]
    cmd += release.requirements()
    if requirements_file:
        cmd += ["-r", str(requirements_file)]
    if index_url:
        cmd += ["--extra-index-url", index_url]
    if find_links:
        cmd += ["--find-links", find_links]
    if offline:
        cmd += ["--offline"] if uv else ["--no-index"]
    if release.is_prerelease:
        cmd += ["--prerelease", "explicit"] if uv else ["--pre"]
    return cmd


def install(python: Path, release: Release, *, index_url: str | None = None, find_links: str | None = None,
            offline: bool = False, project: Path | None = None, log_path: Path | None = None,
            heartbeat_s: float = HEARTBEAT_S) -> Install:
    """Install a release (and the project, editable) into the environment of ``python``; never raises."""
    with tempfile.TemporaryDirectory(prefix="cell-install-") as tmp:
        requirements_file = None
        if project:
            requirements_file = Path(tmp) / "project.txt"
            requirements_file.write_text(f"-e {Path(project).resolve()}\n", encoding="utf-8")
        cmd = install_command(python, release, index_url=index_url, requirements_file=requirements_file,
                              find_links=find_links, offline=offline)
        return run_installer(cmd, log_path=log_path, heartbeat_s=heartbeat_s)


# uv's lines without a terminal (no progress bars): "Downloading torch (846.9MiB)", " Downloaded torch".
_DOWNLOADING = re.compile(r"^\s*Downloading (\S+) \(([^)]*)\)\s*$")
_DOWNLOADED = re.compile(r"^\s*Downloaded (\S+)\s*$")


@dataclass
class _InstallProgress:
    """What the installer has said so far: its last lines, and the downloads it has not finished."""

    started: float = field(default_factory=time.monotonic)
    kept: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=INSTALL_KEPT_LINES))
    downloading: dict[str, str] = field(default_factory=dict)  # package -> size

    def add(self, line: str) -> None:
        self.kept.append(line)
        if found := _DOWNLOADING.match(line):
            self.downloading[found[1]] = found[2]
        elif found := _DOWNLOADED.match(line):
            self.downloading.pop(found[1], None)

    def heartbeat(self, log_path: Path | None) -> str:
        parts = [f"{time.monotonic() - self.started:.0f} s"]
        if self.downloading:
            parts.append("downloading " + ", ".join(f"{name} ({size})" for name, size in self.downloading.items()))
        if log_path:
            parts.append(f"log: {log_path}")
        return f"cell: still installing ({'; '.join(parts)})"


def run_installer(cmd: Sequence[str], *, log_path: Path | None = None, heartbeat_s: float = HEARTBEAT_S,
                  env: dict[str, str] | None = None) -> Install:
    """Run the installer, passing each line of its output to stdout and the log as it comes.

    While it is quiet (a download of gigabytes prints nothing for a minute) a heartbeat
    line says so every ``heartbeat_s`` on stdout; heartbeats stay out of the log and the
    kept tail. Never raises for the installer's failure; an exception here (an interrupt)
    stops the installer first.
    """
    cmd = [str(c) for c in cmd]
    say(f"cell: {' '.join(cmd)}")
    progress = _InstallProgress()
    with open(log_path, "a", encoding="utf-8") if log_path else contextlib.nullcontext() as log:
        if log:
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                    env=env, start_new_session=True)  # its own group: stopped whole on an interrupt
        except OSError as exc:
            line = f"cannot start the installer: {exc}"
            if log:
                log.write(line + "\n")
            return Install(False, cmd, line, time.monotonic() - progress.started)
        lines: queue.Queue[str | None] = queue.Queue()
        reader = threading.Thread(target=_read_lines, args=(proc, lines), daemon=True)
        reader.start()
        try:
            _pass_lines(lines, progress, log, log_path, heartbeat_s)
            proc.wait()
        finally:
            if proc.poll() is None:
                _kill_group(proc)  # type: ignore[arg-type]
            reader.join(timeout=KILL_GRACE_S)
    output = "\n".join(progress.kept)
    return Install(proc.returncode == 0, cmd, output, time.monotonic() - progress.started)


def _read_lines(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line.rstrip("\n"))
    lines.put(None)  # the installer closed its output


def _pass_lines(lines: queue.Queue[str | None], progress: _InstallProgress, log: Any, log_path: Path | None,
                heartbeat_s: float) -> None:
    """Echo and log each line until the output ends; a heartbeat whenever heartbeat_s passes without one."""
    quiet_since = time.monotonic()
    while True:
        try:
            line = lines.get(timeout=max(0.0, quiet_since + heartbeat_s - time.monotonic()))
        except queue.Empty:
            say(progress.heartbeat(log_path))
            quiet_since = time.monotonic()
            continue
        if line is None:
            return
        progress.add(line)
        say(line)
        if log:
            log.write(line + "\n")
            log.flush()
        quiet_since = time.monotonic()


def resolve_latest(spec: CellSpec) -> CellSpec:
    """The spec with a ``latest`` entry pinned to the newest final release where the cell takes
    torch from (its find_links folder and, unless offline, its index); other specs as they are.
    Raises ReleaseListingError (one line) when nothing can be listed."""
    release = spec.release
    if release is None or not release.is_latest:
        return spec
    folders = [spec.find_links] if spec.find_links else []
    version = newest_final_release(spec.index_url, folders, offline=spec.offline)
    return replace(spec, release=release.resolved(version))


# ---------------------------------------------------------------------------- which torch


def probe_torch(python: Path | str) -> dict[str, Any]:
    """The torch (and numpy) the interpreter would import, read without importing torch."""
    proc = subprocess.run([str(python), "-c", _PROBE], check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"probe_error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return json.loads(proc.stdout)


def base_version(version: str) -> str:
    return version.split("+", 1)[0]


def torch_mismatch(probe: dict[str, Any], release: Release, device: str | None, env_dir: Path | None = None) -> str | None:
    """Why the environment does not hold the torch the cell asked for, or None when it does."""
    asked = f"torch {release.version}" + (f"+{release.build}" if release.build else "")
    if "probe_error" in probe:
        return f"asked for {asked}; cannot inspect the environment: {probe['probe_error']}"
    found = probe.get("torch")
    if not found:
        why = probe.get("torch_error") or "torch is not importable"
        return f"asked for {asked}; {why} (python {probe.get('prefix')})"
    where = probe.get("torch_location")
    if base_version(found) != release.version:
        return f"asked for {asked}, the environment has torch {found} ({where})"
    local = found.partition("+")[2] or None
    if release.build and local != release.build:
        return f"asked for {asked}, the environment has the {local or 'default'} build: torch {found} ({where})"
    if device == "cuda" and not probe.get("torch_cuda"):
        return f"asked for torch {release.version} to test cuda, the environment has a CPU-only build: torch {found} ({where})"
    if env_dir is not None and where and not Path(where).is_relative_to(Path(env_dir).resolve()):
        return f"asked for {asked} from {env_dir}, torch is imported from outside it: {where}"
    if release.numpy and probe.get("numpy"):
        try:
            if Version(probe["numpy"]) not in SpecifierSet(release.numpy):
                return f"asked for numpy{release.numpy} with {asked}, the environment has numpy {probe['numpy']}"
        except (InvalidSpecifier, InvalidVersion):
            pass
    return None


def _environment(probe: dict[str, Any]) -> dict[str, Any]:
    keys = ("torch", "torch_git_version", "torch_cuda", "numpy", "python", "platform")
    return {k: probe[k] for k in keys if k in probe}


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
Stray = tuple[int, int]  # pid, start time (clock ticks since boot)


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: state, ppid, ..., start time at index 19."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].decode().split()
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> set[Stray]:
    """Every process below ``pid`` by parent links, now (empty without /proc)."""
    children: dict[int, list[Stray]] = collections.defaultdict(list)
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        fields = _stat_fields(int(entry)) if entry.isdigit() else None
        if fields and len(fields) > 19:
            children[int(fields[1])].append((int(entry), int(fields[19])))
    found: set[Stray] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child[0])
    return found


def _alive(stray: Stray) -> bool:
    fields = _stat_fields(stray[0])
    return bool(fields) and len(fields) > 19 and int(fields[19]) == stray[1] and fields[0] not in ("Z", "X")


def _signal_strays(strays: Iterable[Stray], sig: int) -> None:
    for stray in strays:
        if _alive(stray):  # still that process, not a pid used again
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(stray[0], sig)


def _outlived(strays: Iterable[Stray]) -> list[str]:
    """The strays still running a moment after SIGKILL, as ``pid N (command)``."""
    deadline = time.monotonic() + KILL_GRACE_S
    left = [s for s in strays if _alive(s)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [s for s in left if _alive(s)]
    return [f"pid {pid} ({_command_of(pid)})" for pid, _ in sorted(left)]


def _command_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip() or "?"
    except OSError:
        return "?"


def _kill_group(proc: subprocess.Popen[bytes], strays: Iterable[Stray] = ()) -> list[str]:
    """Stop the test process and everything it started: its process group (it leads one) and the
    strays that left it, SIGTERM, a grace period for the leader, then SIGKILL for whatever is
    left. Returns the processes that outlived it."""
    strays = set(strays) | (descendants(proc.pid) if proc.poll() is None else set())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
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
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(map(str, cmd))}\n".encode())
        log.flush()

        def pump(proc: subprocess.Popen[bytes]) -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                log.flush()
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
                    survivors = _kill_group(proc, strays)
                if reader is not None:
                    reader.join(timeout=KILL_GRACE_S)
    return SuiteRun(returncode, time.monotonic() - started, list(tail), survivors)


def _exit_description(returncode: int) -> str:
    signum = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else None
    if signum:
        return f"killed by {signal_name(signum)}"
    return f"pytest exited {returncode} ({PYTEST_EXIT_NAMES.get(returncode, 'unexpected')})"


def _status_of_exit(returncode: int) -> str:
    """The cell status of a pytest that did not finish its job (exit not 0 or 1)."""
    if returncode < 0 or returncode > 128:
        return "crashed"
    if returncode == PYTEST_INTERRUPTED:
        return "interrupted"  # pytest stopped early (Ctrl-C, errors during collection): never completed
    return "error"


def _with_tail(headline: str, tail: list[str]) -> str:
    return headline + ("; last lines of the log:\n" + "\n".join(tail) if tail else "; the log is empty")


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
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


# ---------------------------------------------------------------------------- one cell


@dataclass
class CellSpec:
    """Everything a cell run needs to know besides its interpreter."""

    name: str
    release: Release | None  # None: whatever torch is installed (the `installed` session)
    device: str | None  # passed as --device; None leaves the suite's default
    hypothesis_profile: str
    time_limit_s: float
    results_dir: Path
    project_dir: Path
    index_url: str | None = None
    pytest_args: tuple[str, ...] = ()
    find_links: str | None = None  # a folder of wheels the installer searches too
    offline: bool = False  # the installer uses no network

    @classmethod
    def from_matrix_cell(cls, cell: Cell, *, results_dir: Path, project_dir: Path, pytest_args: Sequence[str] = (),
                         name: str | None = None) -> CellSpec:
        """The run of a matrix cell: its release, device, time limit, profile and where its torch comes from."""
        return cls(name=name or cell.name, release=cell.release, device=cell.device.name,
                   hypothesis_profile=cell.hypothesis_profile, time_limit_s=cell.time_limit_s,
                   results_dir=Path(results_dir).resolve(), project_dir=Path(project_dir), index_url=cell.index_url,
                   pytest_args=tuple(pytest_args), find_links=cell.find_links, offline=cell.offline)

    @classmethod
    def for_installed_torch(cls, torch_version: str, *, name: str, device: str | None, hypothesis_profile: str,
                            time_limit_s: float, results_dir: Path, project_dir: Path,
                            pytest_args: Sequence[str] = ()) -> CellSpec:
        """The run of a torch already installed (``2.15.0+cu130``): nothing is installed, but the
        cell still checks that the suite imports that release and build."""
        version, _, build = torch_version.partition("+")
        return cls(name=name, release=Release(version, build=build or None), device=device,
                   hypothesis_profile=hypothesis_profile, time_limit_s=time_limit_s,
                   results_dir=Path(results_dir).resolve(), project_dir=Path(project_dir),
                   pytest_args=tuple(pytest_args))

    @property
    def result_path(self) -> Path:
        return self.results_dir / f"{self.name}.json"

    @property
    def log_path(self) -> Path:
        return self.results_dir / f"{self.name}.log"

    @property
    def staging_path(self) -> Path:
        """Where the suite writes; only a finished run's file becomes the result."""
        return self.results_dir / f".{self.name}.json.part"

    def remove_staging(self) -> None:
        """The staging file and the lock the suite holds on it, which a killed suite leaves
        behind. Only while this run holds the result path."""
        self.staging_path.unlink(missing_ok=True)
        results.lock_path(self.staging_path).unlink(missing_ok=True)

    def requested(self) -> dict[str, Any]:
        asked: dict[str, Any] = {"device": self.device or "default", "hypothesis_profile": self.hypothesis_profile,
                                 "time_limit_s": self.time_limit_s}
        if self.release:
            asked.update(torch=self.release.version, numpy=self.release.numpy, build=self.release.build,
                         requirements=self.release.requirements(), index_url=self.index_url)
            if self.release.asked:  # latest: what was asked, beside the release it resolved to (torch)
                asked.update(torch_asked=self.release.asked)
            if self.find_links:
                asked.update(find_links=self.find_links)
            if self.offline:
                asked.update(offline=True)
        return asked


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass
class CellRun:
    """One run of a cell, from claiming its result path to writing its answer."""

    spec: CellSpec
    interrupts: Interrupts
    started: str = field(default_factory=_now)
    clock: float = field(default_factory=time.monotonic)
    environment: dict[str, Any] = field(default_factory=dict)
    claimed: bool = False  # this run holds the result path
    answered: bool = False  # its answer replaced the placeholder

    def fault(self, status: str, detail: str) -> results.CellResult:
        """The answer of a run whose suite did not finish: its status and why."""
        return self.finish(results.CellResult.new(
            self.spec.name, status, detail=detail, requested=self.spec.requested(),
            environment=self.environment or None, started=self.started,
            duration_s=round(time.monotonic() - self.clock, 3), hypothesis_profile=self.spec.hypothesis_profile))

    def finish(self, result: results.CellResult) -> results.CellResult:
        """Write the answer over the placeholder; a signal now waits until it is written."""
        with self.interrupts.deferred():
            result.write(self.spec.result_path)
            self.answered = True
        say(f"cell {self.spec.name}: {result.describe()} -> {self.spec.result_path}")
        return result


class ResultPathUnusable(results.ResultPathBusy):
    """The cell cannot write its result file or log where it was told (a file where its folder
    should be, no permission, a read-only file system). A ResultPathBusy, so that every command
    that refuses a busy result path (cell, bisect, nox's sessions) refuses this one the same
    way: one line naming the path, nothing run."""


def file_in_the_way(folder: Path) -> Path | None:
    """The first of ``folder`` and its parents that exists and is not a folder, if any."""
    for path in (folder, *folder.parents):
        try:
            if path.exists() or path.is_symlink():
                return None if path.is_dir() else path
        except OSError:  # cannot even look: the error that follows will say why
            return None
    return None


def _cannot_write(spec: CellSpec, exc: OSError) -> ResultPathUnusable:
    culprit = file_in_the_way(spec.results_dir)
    if culprit is not None:
        why = f"{culprit} is not a folder"
    else:
        why = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)
    return ResultPathUnusable(f"{spec.results_dir}: cannot write the cell's result and log there ({why})")


def _claim(spec: CellSpec, run: CellRun, stack: contextlib.ExitStack) -> None:
    """Take the lock, put the placeholder at the result path and start a fresh log."""
    try:
        stack.enter_context(results.exclusive(spec.result_path))
        run.claimed = True
        stack.callback(spec.remove_staging)
        results.placeholder(spec.name, requested=spec.requested()).write(spec.result_path)
        spec.log_path.write_text("")  # a fresh log per run
    except OSError as exc:
        raise _cannot_write(spec, exc) from None


@contextlib.contextmanager
def claimed(spec: CellSpec) -> Iterator[CellRun]:
    """Hold the cell's result path for the whole run.

    A second run on the same path raises results.ResultPathBusy before touching the
    result or the log; a path the cell cannot write raises ResultPathUnusable (one line)
    before anything runs. While the run lasts the path holds an ``interrupted`` placeholder,
    so a run killed outright (SIGKILL) never leaves an older result standing. SIGTERM,
    SIGINT or SIGHUP stops the test process, records ``interrupted`` naming the signal, and raises
    CellInterrupted; a bug in the runner is recorded as ``error``. The lock and staging
    files are removed on the way out.
    """
    stack = contextlib.ExitStack()
    interrupts = stack.enter_context(interrupts_raised())
    run = CellRun(spec, interrupts)
    try:
        with interrupts.deferred():  # a signal waits until the path is ours and says so
            _claim(spec, run, stack)
        yield run
    except ResultPathUnusable as exc:
        if run.claimed and not run.answered:  # the placeholder went in, the log did not
            with contextlib.suppress(OSError):
                run.fault("error", str(exc))
        raise
    except CellInterrupted as exc:
        if run.claimed and not run.answered:
            headline = f"interrupted by {signal_name(exc.signum)} (a cancelled CI job, Ctrl-C, a kill)"
            run.fault("interrupted", _with_tail(headline, _log_tail(spec.log_path)))
        raise
    except Exception as exc:
        if run.claimed and not run.answered:
            run.fault("error", f"the cell runner failed: {type(exc).__name__}: {exc}")
        raise
    finally:
        with interrupts.deferred():  # the lock and staging files go even if a signal comes now
            stack.close()


def install_and_run(spec: CellSpec, python: Path, env_dir: Path | None = None) -> results.CellResult:
    """Claim the result path, install the cell's release into the environment of ``python``,
    then check the torch and run the suite (see run_cell)."""
    with claimed(spec) as run:
        return _install_check_and_test(run, python, env_dir)


def create_env_and_run(spec: CellSpec, env_dir: Path, python_version: str) -> results.CellResult:
    """install_and_run in the environment at ``env_dir``, made (or reused) once the cell holds
    its result path: a signal while it is made is recorded like any other, and an environment
    that cannot be made is the cell's answer (not_installed), not an exception."""
    with claimed(spec) as run:
        try:
            python = create_env(env_dir, python_version)
        except (OSError, subprocess.CalledProcessError) as exc:
            return run.fault("not_installed", f"cannot make the environment {env_dir} (Python {python_version}): {exc}")
        return _install_check_and_test(run, python, env_dir)


def _install_check_and_test(run: CellRun, python: Path, env_dir: Path | None) -> results.CellResult:
    spec = run.spec
    assert spec.release is not None
    try:
        run.spec = resolve_latest(spec)
    except ReleaseListingError as exc:
        return run.fault("not_installed", f"cannot resolve torch latest: {exc}")
    release = run.spec.release
    assert release is not None
    if release.asked:
        _note(spec.log_path, f"cell: torch {release.asked} is {release.version}, the newest final release "
                             f"{_where_from(run.spec)}")
    done = install(python, release, index_url=spec.index_url, find_links=spec.find_links, offline=spec.offline,
                   project=spec.project_dir, log_path=spec.log_path)
    if not done.ok:
        return run.fault("not_installed", done.error())
    return _check_and_test(run, python, env_dir)


def _where_from(spec: CellSpec) -> str:
    places = [f"in {spec.find_links}"] if spec.find_links else []
    if not spec.offline:
        places.append(f"on {spec.index_url or 'PyPI'}")
    return " and ".join(places)


def _note(log_path: Path, line: str) -> None:
    """A line of the runner's own, on stdout and in the cell's log."""
    say(line)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(line + "\n")


def run_cell(spec: CellSpec, python: Path | str, *, env_dir: Path | None = None) -> results.CellResult:
    """Claim the result path, check the torch, run the suite in its own process group, and
    write the cell's answer. Raises results.ResultPathBusy when another run holds the path (or
    ResultPathUnusable, one, when it cannot be written), CellInterrupted (after recording it)
    on SIGTERM, SIGINT or SIGHUP."""
    with claimed(spec) as run:
        return _check_and_test(run, python, env_dir)


def _check_and_test(run: CellRun, python: Path | str, env_dir: Path | None) -> results.CellResult:
    spec = run.spec
    probe = probe_torch(python)
    run.environment = _environment(probe)
    if spec.release is not None:
        problem = torch_mismatch(probe, spec.release, spec.device, env_dir)
        if problem:
            return run.fault("wrong_torch", problem)
    spec.remove_staging()  # a killed run's leftovers are not this run's result
    suite = run_suite(_suite_command(spec, python), log_path=spec.log_path, time_limit_s=spec.time_limit_s,
                      cwd=spec.project_dir, interrupts=run.interrupts)
    return _answer(run, suite)


def _suite_command(spec: CellSpec, python: Path | str) -> list[str]:
    cmd = [str(python), "-c", SUITE_LAUNCHER, "conformance", "--cell-result", str(spec.staging_path.resolve()),
           "--cell-name", spec.name, "--hypothesis-profile", spec.hypothesis_profile, "-p", "no:cacheprovider"]
    if spec.device:
        cmd += ["--device", spec.device]
    return cmd + list(spec.pytest_args)


def _answer(run: CellRun, suite: SuiteRun) -> results.CellResult:
    """The cell's answer from how the suite ended and what it wrote."""
    spec = run.spec
    tail = suite.tail or _log_tail(spec.log_path)  # a suite that printed nothing: the log's own last lines
    outlived = [f"processes it started outlived the kill: {', '.join(suite.survivors)}"] if suite.survivors else []

    def fault(status: str, headline: str) -> results.CellResult:
        return run.fault(status, _with_tail("; ".join([headline, *outlived]), tail))

    if suite.timed_out:
        return fault("timed_out", f"killed after the cell's time limit of {spec.time_limit_s:g} s")
    if suite.returncode not in PYTEST_FINISHED:
        return fault(_status_of_exit(suite.returncode), _exit_description(suite.returncode))
    try:
        written = results.load(spec.staging_path)
    except results.ResultFileError as exc:
        return fault("error", f"{_finished_description(suite.returncode)} without a usable result file ({exc})")
    if problem := _not_what_the_cell_set(spec, written):
        return run.fault("error", problem)
    return run.finish(_as_cell_result(spec, written, warnings=outlived))


def _finished_description(returncode: int) -> str:
    name = PYTEST_EXIT_NAMES.get(returncode) if returncode not in (0, 1) else None
    return f"pytest exited {returncode}" + (f" ({name})" if name else "")


def _not_what_the_cell_set(spec: CellSpec, written: results.CellResult) -> str | None:
    """The suite's result under another name or profile than the cell gave it: an option the cell
    sets itself reached pytest some way the refusal did not see (a plugin, a conftest)."""
    profile = written.get("hypothesis_profile")
    if written.name == spec.name and profile in (None, spec.hypothesis_profile):
        return None
    return (f"the suite recorded cell {written.name!r} with hypothesis profile {profile!r}, the cell set "
            f"{spec.name!r} with {spec.hypothesis_profile!r}: an option the cell sets itself reached pytest")


def _as_cell_result(spec: CellSpec, written: results.CellResult, warnings: Sequence[str] = ()) -> results.CellResult:
    """The suite's result, with what the cell asked for (and the runner's warnings), refused when the
    suite imported another torch."""
    data = written.to_json()
    if warnings:
        data["warnings"] = [*written.warnings, *warnings]
    data["requested"] = {**spec.requested(), **written.requested}  # the suite's own keys (promises) win
    got = written.environment.get("torch")
    if spec.release is not None and got and base_version(str(got)) != spec.release.version:
        # The pre-check read torch/version.py; this is the torch the suite really imported.
        for key in ("promises", "counts", "devices", "unattributed_failures"):
            data.pop(key, None)
        data.update(status="wrong_torch", detail=f"asked for torch {spec.release.version}, the suite imported torch {got}")
    return results.CellResult(data, str(spec.result_path))


# ---------------------------------------------------------------------------- summary

SUMMARY_COUNTS = ("passed", "failed", "untested", "recorded")


@dataclass
class Row:
    """One cell in the summary table, as results.CellResult.answer() decides it."""

    cell: str
    torch: str
    device: str
    answer: str  # passed, failed, untested, a status that is not completed, no_result or unreadable
    counts: dict[str, int]  # promise x device outcomes of a completed cell; empty otherwise
    duration_s: float | None
    clean: bool
    why: str | None = None  # the first reason the cell is not clean

    @property
    def mark(self) -> str:
        return self.answer if self.clean else self.answer.upper().replace("_", " ")


def _row(name: str, path: Path) -> Row:
    try:
        result = results.load(path)
    except results.ResultFileError as exc:
        return _row_without_result(name, path, exc)
    answer = result.answer()
    device = result.requested.get("device") or ",".join(result.tested_devices()) or "?"
    more = f" (+{len(answer.lines) - 1} more)" if len(answer.lines) > 1 else ""
    return Row(result.name, result.release, str(device), answer.kind, dict(answer.counts) if result.completed else {},
               result.get("duration_s"), answer.clean, answer.lines[0] + more if answer.lines else None)


def _row_without_result(name: str, path: Path, error: results.ResultFileError) -> Row:
    named = re.fullmatch(r"(?:installed-)?torch-(.+)-(\w+)", name)  # what the cell would have been
    torch, device = named.groups() if named else ("?", "?")
    missing = not path.exists() and not path.is_symlink()
    return Row(name, torch, device, "no_result" if missing else "unreadable", {}, None, False, str(error))


def check_cell_name(name: str) -> str:
    """``name`` if it is a plain cell name (the stem of a file directly in the results folder),
    else ValueError saying why: a name with a slash, '..' or a control character would read
    a file elsewhere, or break the table."""
    if not name or name in (".", "..") or name.startswith(".") or any(c in name for c in "/\\"):
        raise ValueError(f"cell name {results.one_line(repr(name), 200)}: not a plain cell name "
                         "(a result file's name in the results folder, without .json)")
    if results.one_line(name) != name:
        raise ValueError(f"cell name {results.one_line(repr(name), 200)}: has control characters")
    return name


def unanswered_row(path: Path, name: str, why: str) -> Row:
    """A summary row for a cell with no answer from this run, whatever file is at its path: never clean."""
    return replace(_row_without_result(name, path, results.ResultFileError(why)), answer="no_result")


def summarize(results_dir: Path, cells: Iterable[str] | None = None) -> list[Row]:
    """One row per cell: the cells named (missing files show as such), or every result file.

    A named cell must be a plain name (``check_cell_name``): ValueError otherwise.
    """
    results_dir = Path(results_dir)
    names = [check_cell_name(n) for n in cells] if cells is not None else sorted(p.stem for p in results_dir.glob("*.json") if not p.name.startswith("."))
    rows = [_row(name, results_dir / f"{name}.json") for name in names]
    return sorted(rows, key=lambda r: (_sort_key(r.torch), r.device, r.cell))


def _sort_key(torch: str) -> tuple[int, ...]:
    try:
        return release_key(torch)
    except ValueError:
        return (1 << 30,)


def _duration(seconds: Any) -> str:
    return f"{seconds:.1f} s" if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else "-"


def format_summary(rows: list[Row]) -> str:
    """The table, one line per cell that is not clean saying why, and the count of clean cells."""
    header = ("cell", "torch", "device", "answer", *SUMMARY_COUNTS, "duration")
    body = []
    for r in rows:
        counts = [str(r.counts.get(k, 0)) if r.counts else "-" for k in SUMMARY_COUNTS]
        # Names and versions come from result files (and file names): one line each, or the table breaks.
        names = [results.one_line(v, 200) for v in (r.cell, r.torch, r.device)]
        body.append((*names, r.mark, *counts, _duration(r.duration_s)))
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(str(v).ljust(w) if i < 4 else str(v).rjust(w) for i, (v, w) in enumerate(zip(line, widths)))
             for line in [header, *body]]
    lines += [f"{results.one_line(r.cell, 200)}: {results.one_line(r.why)}" for r in rows if not r.clean and r.why]
    bad = sum(not r.clean for r in rows)
    lines.append(f"{len(rows)} cells, {len(rows) - bad} clean, {bad} not (counts are promise x device outcomes)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- the CI fallback


def record_unfinished(path: Path, cell: str, session: str, nox_log: Path | None = None) -> str | None:
    """After nox ended, make sure ``path`` answers for the cell, with nox's output where it helps.

    No file (nox failed before the cell ran) or an unreadable one: ``error``. An
    ``interrupted`` one (the placeholder of a run that was killed, or a run stopped by a
    signal): still ``interrupted``, with nox's output added. Any other answer stands.
    Returns what was recorded, or None.
    """
    tail = _log_tail(nox_log) if nox_log else []
    output = "\n".join([f"nox -s {session} output, last lines:", *tail] if tail else [f"nox -s {session} left no output"])
    try:
        found = results.load(path)
    except results.ResultFileError as exc:
        missing = not path.exists() and not path.is_symlink()
        why = "ended without a result file" if missing else f"left a result file that cannot be read ({exc})"
        answer = results.CellResult.new(cell, "error", detail=f"nox -s {session} {why}\n{output}")
    else:
        if found.status != "interrupted":
            return None
        data = found.to_json()
        data["detail"] = f"{found.detail or 'interrupted'}\n{output}"
        answer = results.CellResult(data, str(path))
    answer.write(path)  # replaces a file, a link or a FIFO alike
    return f"{path}: recorded as {answer.status}"


# ---------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    """The old entry point, ``python -m cpugpu_conformance.cell summary|record-unfinished ...``:
    the same as ``cpugpu-conformance summary|record-unfinished ...``."""
    from cpugpu_conformance.__main__ import main as cli

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("summary", "record-unfinished"):
        print("usage: python -m cpugpu_conformance.cell summary|record-unfinished ... "
              "(now: cpugpu-conformance summary|record-unfinished)", file=sys.stderr)
        return 2
    return cli(argv)


if __name__ == "__main__":
    sys.exit(main())
