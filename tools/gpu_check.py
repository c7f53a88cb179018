"""The first run on a GPU machine without network, in one command, from a copy of the checkout:

    python tools/gpu_check.py OUT_DIR [--device all] [--proofs-for cuda] [--jobs N] [-- SUITE_ARGS]

The standing instruction: a session that can start a GPU machine runs
``python tools/gpu_check.py "$OUT"`` there first (one command, well under ten minutes: the suite
stops at 180 s, the proofs at 240 s), commits the result file and the report it brings back,
gives the machine back, and fixes what it shows.

1. the suite on every device (``--device all``), writing its result file, which ``nox -s
   report`` merges into compat/ as a column per device;
2. the project's proofs for one device (``--proofs-for cuda``): the tests of
   tests/test_variants.py, tests/test_alternatives.py and tests/test_cuda_checks.py marked
   ``@pytest.mark.devices("cuda")``, that is every broken variant rejected there on the promise it
   breaks, with a reproducer that fails on its own, every correct alternative accepted (or
   rejected where its table says it breaks a promise on that device), and what only CUDA shows
   (the sync-refusing method chosen, CUDA_LAUNCH_BLOCKING=1 untested, promise 12's one-GPU skip).

It needs torch, numpy, hypothesis and pytest (pytest-xdist used when present; jsonschema,
pyyaml and nox not at all) and installs nothing: its children find ``src/`` and this folder
through PYTHONPATH, which it sets. They run in the checkout, so relative ``--proofs`` paths are
the checkout's; OUT_DIR is resolved once, at the start. OUT_DIR gets four files, all plain names:

    <cell>.json   the suite's result file (cell ``installed-torch-<release>-<device>``)
    suite.log     the suite's whole output
    proofs.log    the proofs' whole output (the slowest proofs at its end)
    summary.txt   each step's command, exit code and time, the result file's answer; the
                  same lines end the script's own output

Each is replaced whole, never written through: a log is written under a temporary name in
OUT_DIR (``.suite.log.XXXXXXXX``) and renamed when its step ends, summary.txt likewise. Anything
at one of those names that is not a plain file (a link, a FIFO, a folder, a device) is refused
in one line (exit 4) before anything runs.

Before anything runs, on a machine with an NVIDIA GPU that torch cannot use (torch built for a
newer CUDA than the driver's, or without CUDA), the check says so in one line, with the torch
build, its CUDA and the driver's, and exits 6 (untested), unless ``--device cpu`` is asked for.
On a machine with no NVIDIA GPU at all, a check that asks about cuda (the defaults) says so in one
line and exits 6 before anything runs, unless ``--cpu-half`` asks to run it anyway (the cuda half
untested, never a pass); ``--device cpu --proofs-for cpu`` checks the CPU alone.

Exit code: 0 when the suite passed on every device asked for (its result file says so) and
every proof held; otherwise the suite's own code when it was not 0 (1 a promise failed, 2
interrupted or out of time, 3 internal error, 4 bad input, 5 nothing tested, 6 partly
tested), else the proofs' pytest code (1 a proof failed, 5 no proof ran: none is marked
for the device, or the device is missing and every one was skipped, 6 some were skipped).
A suite that exits 0 with a result file that does not say passed is 3: the exit code never
says more than the result file. 4: refused to start (bad option, output folder or name in
it); 6 also: the GPU cannot be used. Stopped: 2 on Ctrl-C (SIGINT), 143 on SIGTERM (what
``timeout`` sends; timeout itself then exits 124), 129 on SIGHUP; the suite, the proofs and
everything they started are ended first, summary.txt says the run was stopped, and nothing is
written into OUT_DIR after gpu_check has exited.

A script of the checkout, not a module of the package: the proofs live in tests/, which the
wheel does not ship. Python, not shell, so its choices (which code wins, what a missing
result file means, when a GPU is unusable) are functions the project's tests call on a
CPU-only machine.

When pytest loads this file as a plugin (``-p gpu_check``, as the proofs step does), it keeps
only the tests marked for the device named in $GPU_CHECK_PROOFS_FOR, the longest first, and a
skipped one makes the run not a pass.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
SRC = REPO / "src"
if str(SRC) not in sys.path:  # the checkout's package, never an installed one: no install on a GPU machine
    sys.path.insert(0, str(SRC))

from cpugpu_conformance.proctree import Proc, descendants  # noqa: E402  (standard library only)
from cpugpu_conformance.proctree import stat_fields as _stat_fields  # noqa: E402

PROOF_MODULES = ("tests/test_variants.py", "tests/test_alternatives.py", "tests/test_cuda_checks.py")
PROOFS_FOR_ENV = "GPU_CHECK_PROOFS_FOR"
LOG_NAMES = {"suite": "suite.log", "proofs": "proofs.log"}
SUMMARY = "summary.txt"
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # what a device machine brings back

STOP_GRACE_S = 15  # for a stopped suite to write its result file
PROBE_TIMEOUT_S = 300  # importing torch from a slow disk
REAP_LIMIT_S = 10  # for what a step left behind to be killed and gone
EXIT_INTERRUPTED = 2
EXIT_INTERNAL = 3
EXIT_USAGE = 4
EXIT_NOTHING = 5
EXIT_PARTLY = 6

# What each exit code of a step means, for the summary (pytest's codes, and the suite's 6).
SUITE_MEANS = {0: "every promise asked for held", 1: "a promise failed", 2: "interrupted or out of time",
               3: "internal error", 4: "bad input, refused to start", 5: "nothing was tested",
               6: "some promises went untested"}
PROOFS_MEANS = {0: "every proof held", 1: "a proof did not hold", 2: "interrupted or out of time",
                3: "internal error", 4: "bad input",
                5: "no proof ran (none is marked for the device, or all were skipped: it is missing)",
                6: "some proofs were skipped (the device is missing)"}


@dataclass(frozen=True)
class Step:
    name: str
    command: list[str]
    log: Path
    code: int
    seconds: float
    timed_out: bool = False
    means: str = ""
    stopped_by: str = ""  # the signal that stopped gpu_check while this step ran

    def line(self) -> str:
        if self.stopped_by:
            how = f"stopped by {self.stopped_by} after {self.seconds:.0f} s"
        elif self.timed_out:
            how = f"timed out, stopped after {self.seconds:.0f} s"
        else:
            how = f"exit {self.code} in {self.seconds:.1f} s"
        return f"{self.name}: {how}" + (f", {self.means}" if self.means else "") + f" ({self.log.name})"


class Refused(Exception):
    """The check cannot start; the message is one line naming the culprit."""


# --- pytest plugin: the proofs for one device ------------------------------------------------


def _marked_for(item, device: str) -> bool:
    return any(device in (str(name) for name in mark.args) for mark in item.iter_markers("devices"))


# How long a proof takes, roughly, from what it runs (the proofs log's slowest list says more).
# xdist's load scheduling hands proofs out round robin when there are fewer than two per worker
# (16 workers, about 30 proofs on the GPU machine): worker i gets the i-th and the (i+n)-th, so
# with the longest first each long proof is paired with a short one. (Work stealing does worse
# there: it hands out neighbours, the two longest to one worker, and cannot steal from a queue of two.)
PROOF_COST = {
    "test_suite_judges_alternative_as_its_table_says": 3,  # the whole suite on the device
    "test_suite_accepts_variant_where_its_bug_cannot_happen": 3,
    "test_suite_accepts_the_reference": 3,
    "test_suite_rejects_variant": 2,  # one promise, shrinking, two reproducers each importing torch
}


def proof_cost(item) -> int:
    """The rank of a proof's expected time: a whole suite that must find a failure (and shrink it) first."""
    cost = PROOF_COST.get(getattr(item, "originalname", item.name), 1)
    return cost + 1 if cost == 3 and "-fails-" in item.name else cost


class ProofTally:
    """In the process that reports (xdist's controller, or the only one): a proof skipped (its
    device is missing here) is not a pass, so the run is not one either: 5 when none ran, 6 when
    some did."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.passed = self.skipped = 0

    def pytest_runtest_logreport(self, report) -> None:
        if report.skipped:
            self.skipped += 1
        elif report.passed and report.when == "call":
            self.passed += 1

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        if session.exitstatus == 0 and self.skipped:
            session.exitstatus = EXIT_PARTLY if self.passed else EXIT_NOTHING

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.skipped:
            terminalreporter.write_line(
                f"gpu_check: {self.skipped} proof(s) for {self.device} skipped, {self.passed} held: not a pass", red=True)


def pytest_configure(config) -> None:
    device = os.environ.get(PROOFS_FOR_ENV)
    if device and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ProofTally(device), "gpu-check-proof-tally")


def pytest_collection_modifyitems(config, items) -> None:
    device = os.environ.get(PROOFS_FOR_ENV)
    if not device:
        return
    keep = [item for item in items if _marked_for(item, device)]
    drop = [item for item in items if not _marked_for(item, device)]
    if drop:
        config.hook.pytest_deselected(items=drop)
    # Stable: every xdist worker collects the same order, as xdist requires.
    items[:] = sorted(keep, key=proof_cost, reverse=True)


# --- signals: stopping gpu_check stops what it started ----------------------------------------


class Stopped(BaseException):
    """SIGINT, SIGTERM or SIGHUP reached gpu_check: end the step, say so, exit. A BaseException,
    as KeyboardInterrupt is, so no `except Exception` swallows it. ``step``: the step it stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.step: Step | None = None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def code(self) -> int:
        """2 for Ctrl-C, as before; 128 + the signal otherwise, as a shell reports it."""
        return EXIT_INTERRUPTED if self.signum == signal.SIGINT else 128 + self.signum


class StopSignals:
    """Turns the first stopping signal into Stopped, once: while a step is being ended a second
    one is ignored. Inside ``deferred()`` (a child being started, a file being renamed into place)
    it is held until the block ends, so no child is started that nothing will stop."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.caught: int | None = None
        self.held = False
        self.pending = False

    def install(self) -> None:
        for signum in self.SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup, a background job: still ignored
                signal.signal(signum, self._handle)

    def ignore_from_now(self) -> None:
        """The run is over (its summary is being written): a late signal changes nothing."""
        for signum in self.SIGNALS:
            signal.signal(signum, signal.SIG_IGN)

    def _handle(self, signum: int, frame) -> None:
        if self.caught is not None:
            return
        self.caught = signum
        if self.held:
            self.pending = True
        else:
            raise Stopped(signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        held, self.held = self.held, True
        try:
            yield
        finally:
            self.held = held
        if self.pending and not held:
            self.pending = False
            raise Stopped(self.caught)


SIGNALS = StopSignals()


# --- processes: a step's process group, and everything below gpu_check ------------------------

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


def _in_the_child(parent: int) -> None:
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
        fields = _stat_fields(pid)
        if fields and len(fields) > 19 and int(fields[19]) == started:  # still that process
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _exited(proc: subprocess.Popen, timeout: float) -> bool:
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
    if not _exited(proc, STOP_GRACE_S):
        strays |= descendants(proc.pid)
    end_group(proc, strays)


# --- the output folder: every file replaced whole, or refused before anything runs ------------


def _what_is(info: os.stat_result, path: Path) -> str:
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        with contextlib.suppress(OSError):
            return f"a symbolic link (to {os.readlink(path)})"
        return "a symbolic link"
    kinds = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket",
             stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device"}
    return next((kind for test, kind in kinds.items() if test(mode)), "not a plain file")


def refuse_unless_replaceable(path: Path) -> None:
    """Nothing at ``path``, or a plain file, which gpu_check replaces whole; anything else (a link,
    a FIFO, a folder, a device) is refused: gpu_check never writes through what is there."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise Refused(f"gpu_check: cannot look at {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise Refused(f"gpu_check: {path} is {_what_is(info, path)}, not a plain file: gpu_check replaces its "
                      "files whole and writes through nothing; remove it or name another output folder")


def refuse_unless_a_result(path: Path) -> None:
    """The result file's name holds nothing, or one of our result files (an earlier check's), which is
    removed before the suite runs: anything else there (notes, another tool's JSON) is refused untouched."""
    from cpugpu_conformance import results

    try:
        results.check_result_path(path)
    except results.NotRegularFile as exc:
        raise Refused(f"gpu_check: {exc}") from None
    except OSError as exc:
        raise Refused(f"gpu_check: cannot look at {path}: {exc.strerror or exc}") from None


def prepare_out(raw: str) -> Path:
    """The output folder, absolute and made, checked before anything runs: writable, and nothing
    but plain files at the names gpu_check writes (the result file's is checked once known)."""
    if not raw:
        raise Refused("gpu_check: the output folder is '' (empty): name one, e.g. python tools/gpu_check.py out")
    try:
        out = Path(raw) if os.path.isabs(raw) else Path.cwd() / raw  # the children run in the checkout
        out.mkdir(parents=True, exist_ok=True)
        out = out.resolve(strict=True)
    except OSError as exc:
        raise Refused(f"gpu_check: cannot make the output folder {raw!r}: {exc.strerror or exc}") from None
    if not out.is_dir():
        raise Refused(f"gpu_check: the output folder {raw!r} is not a folder")
    for name in (*LOG_NAMES.values(), SUMMARY):
        refuse_unless_replaceable(out / name)
    try:
        fd, probe = tempfile.mkstemp(dir=out, prefix=".gpu_check.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise Refused(f"gpu_check: cannot write in the output folder {str(out)!r}: {exc.strerror or exc}") from None
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _new_beside(path: Path):
    """A new file in ``path``'s folder under a temporary name (created exclusively: never through a
    link), with the permissions a plain open would give; returns (file object, its path)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:
        raise Refused(f"gpu_check: cannot write {path}: {exc.strerror or exc}") from None
    os.fchmod(fd, 0o666 & ~_umask())
    return os.fdopen(fd, "wb"), Path(tmp)


def _into_place(tmp: Path, path: Path) -> None:
    try:
        os.replace(tmp, path)  # replaces a link or FIFO planted since the check, never what it points to
    except OSError as exc:
        raise Refused(f"gpu_check: cannot put {path.name} in place: {exc.strerror or exc}; "
                      f"what was written is in {tmp.name}") from None


def write_whole(path: Path, text: str) -> None:
    """``text`` into ``path``, atomically: a reader sees the old file or the new one."""
    with SIGNALS.deferred():
        out, tmp = _new_beside(path)
        try:
            with out:
                out.write(text.encode())
        except BaseException:
            tmp.unlink()
            raise
        _into_place(tmp, path)


class StepLog:
    """A step's log, written under a temporary name beside its own and renamed into place at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with SIGNALS.deferred():
            self.file, self.tmp = _new_beside(path)

    def write(self, text: str) -> None:
        self.file.write(text.encode())
        self.file.flush()

    def finish(self, last_line: str) -> None:
        with SIGNALS.deferred():
            with self.file:
                self.write(f"\n{last_line}\n")
            _into_place(self.tmp, self.path)


# --- the machine: can torch use its GPU? -------------------------------------------------------


@dataclass(frozen=True)
class GpuFacts:
    """What decides whether the GPU can be used, from the torch the children import and the machine."""

    torch: str  # torch.__version__, e.g. 2.11.0+cu130
    torch_cuda: str | None = None  # torch.version.cuda: the CUDA it was built for; None: without CUDA
    cuda_available: bool = False  # torch.cuda.is_available()
    torch_said: str = ""  # what torch warned while it looked for a GPU
    nvidia: str | None = None  # what shows the machine has an NVIDIA GPU; None: nothing does
    driver: str | None = None  # the driver's version
    driver_cuda: str | None = None  # the newest CUDA the driver supports

    @property
    def release(self) -> str:
        """Without the local part: 2.11.0+cu130 -> 2.11.0."""
        return self.torch.split("+")[0]


def gpu_unusable(device: str, facts: GpuFacts) -> str | None:
    """One line when this machine has an NVIDIA GPU that the torch cannot use, so the check would
    be a CPU-only pass; None when it can, when there is none, or when only the CPU is asked for."""
    if device == "cpu" or facts.cuda_available or not facts.nvidia:
        return None
    built = f"built for CUDA {facts.torch_cuda}" if facts.torch_cuda else "built without CUDA"
    driver = f"driver {facts.driver or 'version unknown'}" + (f", CUDA {facts.driver_cuda}" if facts.driver_cuda else "")
    if not facts.torch_cuda:
        why = "this torch has no CUDA"
    elif facts.driver_cuda and _version(facts.torch_cuda) > _version(facts.driver_cuda):
        why = f"its CUDA {facts.torch_cuda} is newer than the driver's {facts.driver_cuda}"
    else:
        why = "torch.cuda.is_available() is False"
    said = f"; torch says: {facts.torch_said}" if facts.torch_said else ""
    line = (f"gpu_check: untested: this machine has an NVIDIA GPU ({facts.nvidia}; {driver}) that torch "
            f"{facts.torch} ({built}) cannot use: {why}{said}; install a torch built for this driver, or ask for "
            "--device cpu alone")
    return " ".join(line.split())[:800]  # one line, whatever torch said


def no_gpu(device: str, proofs_for: str, facts: GpuFacts, cpu_half: bool = False) -> str | None:
    """One line when the check is asked about CUDA (the suite on ``all`` or ``cuda``, the proofs for
    cuda: the defaults) on a machine with no NVIDIA GPU at all: the suite's cuda half and every cuda
    proof would be skipped after minutes, and the answer could not be a pass. None when there is a GPU
    (usable or not: gpu_unusable judges that), when only the CPU is asked about, or with ``cpu_half``
    (--cpu-half: run anyway, knowing the cuda half goes untested)."""
    asks_cuda = device in ("all", "cuda") or proofs_for == "cuda"
    if cpu_half or not asks_cuda or facts.cuda_available or facts.nvidia:
        return None
    asked = [part for part, wanted in ((f"the suite on --device {device}", device in ("all", "cuda")),
                                       (f"the proofs for {proofs_for}", proofs_for == "cuda")) if wanted]
    return (f"gpu_check: untested: no NVIDIA GPU on this machine (torch {facts.torch} sees no CUDA device; no "
            f"/proc/driver/nvidia/version, nvidia-smi or /dev/nvidia0), so {' and '.join(asked)} would check nothing "
            "of a GPU: nothing was run; run it on the GPU machine, or here check the CPU alone with --device cpu "
            "--proofs-for cpu, or add --cpu-half to run this check anyway (its cuda half untested, never a pass)")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def run_briefly(command: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[int, str, str] | None:
    """A short command's exit code and output; None when it cannot start or runs past ``timeout``."""
    with SIGNALS.deferred():
        try:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, errors="replace", env=env)
        except OSError:
            return None
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as exc:
        proc.kill()
        proc.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            return None
        raise
    return proc.returncode, out, err


# Run with the children's python and environment: the torch they import, what it says of the
# GPU, and the newest CUDA of the driver it would talk to (libcuda's own answer, which a
# forward-compatibility libcuda raises; nvidia-smi's header would not).
PROBE = r"""
import ctypes, json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
    available = bool(torch.cuda.is_available())
said = [" ".join(str(w.message).split()) for w in caught]
said = [text for text in said if any(word in text for word in ("CUDA", "NVIDIA", "driver", "GPU"))]
driver_cuda = None
try:
    version = ctypes.c_int()
    if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value:
        driver_cuda = "%d.%d" % (version.value // 1000, version.value % 1000 // 10)
except (OSError, AttributeError):
    pass
facts = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "cuda_available": available,
         "torch_said": "; ".join(said)[:300], "driver_cuda": driver_cuda}
print("gpu_check facts: " + json.dumps(facts))
"""
FACTS_PREFIX = "gpu_check facts: "


def probe_torch(python: str = sys.executable) -> dict:
    """What the children's torch is and says of the GPU; Refused when it cannot be imported."""
    ran = run_briefly([python, "-c", PROBE], PROBE_TIMEOUT_S, env=child_env())
    if ran is None:
        raise Refused(f"gpu_check: {python} could not import torch within {PROBE_TIMEOUT_S} s")
    code, out, err = ran
    lines = [line for line in out.splitlines() if line.startswith(FACTS_PREFIX)]
    if code != 0 or not lines:
        last = (err.strip().splitlines() or ["no output"])[-1]
        raise Refused(f"gpu_check: {python} cannot import torch: {last}")
    return json.loads(lines[-1][len(FACTS_PREFIX):])


DRIVER_IN_PROC = re.compile(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)?)\s")


def nvidia_on_this_machine(proc_version: Path = Path("/proc/driver/nvidia/version"),
                           device: Path = Path("/dev/nvidia0"), smi: str | None = None,
                           driver_cuda: str | None = None) -> dict:
    """Whether the machine has an NVIDIA GPU and which driver, without torch: the kernel module's
    version file, nvidia-smi (``smi``, default: PATH's), the device node. ``driver_cuda``: the
    driver's CUDA when already known (nvidia-smi's header is asked otherwise)."""
    smi = smi if smi is not None else shutil.which("nvidia-smi")
    nvidia = driver = None
    with contextlib.suppress(OSError, UnicodeDecodeError):
        found = DRIVER_IN_PROC.search(proc_version.read_text())
        nvidia, driver = str(proc_version), found.group(1) if found else None
    if smi:
        nvidia = nvidia or f"{smi} is here"
        if driver is None:
            ran = run_briefly([smi, "--query-gpu=driver_version", "--format=csv,noheader"], 30)
            driver = ran[1].split()[0] if ran and ran[0] == 0 and ran[1].split() else None
        if driver_cuda is None:
            ran = run_briefly([smi], 30)
            found = re.search(r"CUDA Version:\s*(\d+\.\d+)", ran[1]) if ran and ran[0] == 0 else None
            driver_cuda = found.group(1) if found else None
    if nvidia is None and device.exists():
        nvidia = str(device)
    return {"nvidia": nvidia, "driver": driver, "driver_cuda": driver_cuda}


def gather_facts(device: str, python: str = sys.executable, gpu_asked: bool | None = None) -> GpuFacts:
    """The torch's facts; the machine's too where they decide something (a GPU asked for, torch sees
    none). ``gpu_asked``: whether anything of the check is about cuda (default: the suite's device is
    not cpu)."""
    found = probe_torch(python)
    driver_cuda = found.pop("driver_cuda", None)
    facts = GpuFacts(**found, driver_cuda=driver_cuda)
    if not (device != "cpu" if gpu_asked is None else gpu_asked) or facts.cuda_available:
        return facts
    return GpuFacts(**found, **nvidia_on_this_machine(driver_cuda=driver_cuda))


# --- the steps --------------------------------------------------------------------------------


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
                                        preexec_fn=functools.partial(_in_the_child, os.getpid()))
            except OSError as exc:
                log.finish(f"{name}: cannot start: {exc}")
                raise Refused(f"gpu_check: cannot start the {name}: {exc.strerror or exc}") from None
        if _exited(proc, timeout):
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


def exit_code(suite: int, says_passed: bool, proofs: int) -> int:
    """The suite's code first (it is the result file's); a 0 the result file does not back is an
    internal error; then the proofs' code."""
    if suite != 0:
        return suite
    if not says_passed:
        return EXIT_INTERNAL
    return proofs


class Summary:
    """The lines of summary.txt, gathered as the run goes, written whole at its end."""

    def __init__(self, out: Path) -> None:
        self.path = out / SUMMARY
        self.commands: list[str] = []
        self.lines: list[str] = []

    def add(self, step: Step) -> None:
        self.commands.append(shlex.join(step.command))
        self.lines.append(step.line())

    def end(self, code: int, why: str) -> int:
        SIGNALS.ignore_from_now()
        self.lines.append(f"gpu_check: exit {code}" + (f" ({why})" if code else ""))
        write_whole(self.path, "".join(f"{line}\n" for line in [*self.commands, *self.lines]))
        print("\n".join(self.lines), file=sys.stdout if code == 0 else sys.stderr, flush=True)
        return code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """Bad options are bad input: one line and exit 4, as every other refusal."""
        print(f"gpu_check: {message} (python tools/gpu_check.py --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = _Parser(prog="python tools/gpu_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder for the result file, the logs and summary.txt (made if missing)")
    parser.add_argument("--device", default="all", help="the suite's --device (default: all, every device of the registry)")
    parser.add_argument("--proofs-for", default="cuda", help="the device whose variant and alternative proofs run (default: cuda)")
    parser.add_argument("--cpu-half", action="store_true",
                        help="on a machine with no NVIDIA GPU, run the check anyway: only its CPU half can run, the "
                             "cuda half is untested and the answer is no pass (without it, such a machine is refused "
                             "in one line, exit 6, before anything runs)")
    parser.add_argument("--proofs-k", default="", help="a pytest -k expression narrowing the proofs further")
    parser.add_argument("--proofs", nargs="+", default=list(PROOF_MODULES), metavar="PATH",
                        help=f"the test files holding the proofs, relative to the checkout (default: {' '.join(PROOF_MODULES)})")
    parser.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 16),
                        help="pytest-xdist workers (default: the cores, at most 16; serial without pytest-xdist)")
    parser.add_argument("--profile", default="ci", help="the suite's hypothesis profile (default: ci)")
    parser.add_argument("--suite-timeout", type=float, default=180, help="seconds before the suite is stopped (default: 180)")
    parser.add_argument("--proofs-timeout", type=float, default=240, help="seconds before the proofs are stopped (default: 240)")
    parser.epilog = "After --, more of the suite's options: -- --impl SPEC --promise N ..."
    ours, suite_args = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser.parse_args(ours)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: at least 1")
    args.suite_args = suite_args
    return args


def main(argv: list[str] | None = None) -> int:
    SIGNALS.install()
    args = parse(sys.argv[1:] if argv is None else argv)
    become_subreaper()
    try:
        return check(args)
    except Refused as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except (Stopped, KeyboardInterrupt) as exc:  # before the output folder was ready: nothing to write
        stopped = exc if isinstance(exc, Stopped) else Stopped(signal.SIGINT)
        print(f"gpu_check: stopped by {stopped.name} before any step ran", file=sys.stderr)
        return stopped.code
    finally:
        end_orphans()


def check(args: argparse.Namespace) -> int:
    out = prepare_out(args.out)
    summary = Summary(out)
    phase = "the checks before the suite"
    try:
        facts = gather_facts(args.device, gpu_asked=args.device in ("all", "cuda") or args.proofs_for == "cuda")
        cell = cell_name(facts.release, args.device)
        result = out / f"{cell}.json"
        refuse_unless_replaceable(result)
        refuse_unless_a_result(result)
        with contextlib.suppress(FileNotFoundError):
            result.unlink()  # an earlier check's pass must not stand for a suite that writes nothing this time
        unusable = gpu_unusable(args.device, facts)
        if unusable:
            summary.lines.append(unusable)
            return summary.end(EXIT_PARTLY, "untested: no step ran, torch cannot use this machine's GPU")
        absent = no_gpu(args.device, args.proofs_for, facts, args.cpu_half)
        if absent:
            summary.lines.append(absent)
            return summary.end(EXIT_PARTLY, "untested: no step ran, this machine has no NVIDIA GPU")
        # The suite's workers each open a CUDA context: half the cores is plenty for its ~130 tests.
        phase = "the suite"
        command = suite_command(result, cell, args.device, max(1, args.jobs // 2), args.profile, args.suite_args)
        suite = run_step("suite", command, out / LOG_NAMES["suite"], child_env(), args.suite_timeout, SUITE_MEANS)
        summary.add(suite)
        says_passed, answer = result_answer(result)
        summary.lines += answer
        phase = "the proofs"
        extra = ["-k", args.proofs_k] if args.proofs_k else []
        proofs = run_step(f"proofs for {args.proofs_for}", proofs_command(args.proofs, args.jobs, extra),
                          out / LOG_NAMES["proofs"], child_env(args.proofs_for), args.proofs_timeout, PROOFS_MEANS)
        summary.add(proofs)
    except (Stopped, KeyboardInterrupt) as exc:
        stopped = exc if isinstance(exc, Stopped) else Stopped(signal.SIGINT)
        if stopped.step is not None:
            summary.add(stopped.step)
            if stopped.step.name == "suite":
                summary.lines += result_answer(result)[1]
        end_orphans()
        return summary.end(stopped.code, f"stopped by {stopped.name} during {phase}: not a pass")
    code = exit_code(suite.code, says_passed, proofs.code)
    why = ("the suite exited 0 but its result file does not say passed" if suite.code == 0 and not says_passed
           else "not a pass: see the lines above and the logs")
    return summary.end(code, why)


if __name__ == "__main__":
    sys.exit(main())
