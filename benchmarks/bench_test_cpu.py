"""Where the CPU of the project's own tests goes: fresh Python processes (nested pytest-xdist
workers, the tools' children, subprocesses the tests start), how much of them is importing torch,
what tests/forkserver.py's servers fork (the suite runs and reproducers of most tests), and the
rest, against `python -c "import torch"` measured in the same run.

    python benchmarks/bench_test_cpu.py [--top 15] [--repeat 3] [-- PYTEST_ARGS]

SIGINT, SIGTERM or SIGHUP stops pytest and the run (exit 128 + its number, one line, nothing measured).

PYTEST_ARGS default to `tests -n 2 -q -p no:cacheprovider`. How it counts: for the run, a .pth
file in this interpreter's site-packages makes every fresh process of this environment write, at
exit, its own CPU seconds and its waited-for children's, whether it imported torch (and execnet:
an xdist worker or controller), its parent and its command line, into a folder CPUGPU_PROCESS_LOG
names; the file is removed afterwards, whatever happens. A forked child is not a fresh process: a
fork server's children count as its children's CPU. A process killed by a signal, or started with
an environment that drops the variable, writes nothing: the report says how many it saw. The
machine's total comes from /proc/stat, so run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_ARGS = ["tests", "-n", "2", "-q", "-p", "no:cacheprovider"]
VARIABLE = "CPUGPU_PROCESS_LOG"
HOOK_NAME = "_cpugpu_process_log"

# Imported by the .pth line in every fresh process of the environment; inert unless VARIABLE is set.
HOOK = f'''\
import os as _os

_DIR = _os.environ.get({VARIABLE!r})
if _DIR:
    import atexit as _atexit
    import sys as _sys

    _PID = _os.getpid()

    def _write() -> None:
        if _os.getpid() != _PID:  # a forked child exiting through the interpreter: not a fresh process
            return
        try:
            t = _os.times()
            flags = "%d\\t%d\\t%d" % ("torch" in _sys.modules, "execnet" in _sys.modules, _os.getppid())
            argv = " ".join(_sys.argv)[:400].replace("\\t", " ").replace("\\n", " ")
            cpu = "%.3f\\t%.3f" % (t.user + t.system, t.children_user + t.children_system)
            fd = _os.open(_os.path.join(_DIR, str(_PID)), _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC, 0o644)
            _os.write(fd, ("%s\\t%s\\t%s\\n" % (cpu, flags, argv)).encode())
            _os.close(fd)
        except Exception:
            pass

    _atexit.register(_write)
'''


@dataclass(frozen=True)
class Process:
    cpu: float
    children: float  # the CPU of the children it waited for (a fork server's: the commands it forked)
    torch: bool
    execnet: bool  # imported execnet: a pytest-xdist worker, or its controller
    ppid: int
    argv: str

    def kind(self, run_pid: int = 0) -> str:
        if self.execnet and self.argv.startswith("-c"):  # execnet's bootstrap (a controller imports it too)
            return "the run's own test workers" if self.ppid == run_pid else "pytest-xdist workers the tests start"
        if "pytest" in self.argv.split(" ", 1)[0]:
            return "pytest (python -m pytest, or its script)"
        if self.fork_server:
            return "fork servers (tests/forkserver.py)"
        if self.argv.startswith("-c"):
            return "python -c"
        return "scripts and tools"

    @property
    def fork_server(self) -> bool:
        return self.argv.startswith('-c ["')  # its argv: the modules it preloads, as JSON, and two descriptors


def read_log(folder: Path) -> tuple[list[Process], int]:
    """The processes the folder's files describe, and how many files could not be read (cut short)."""
    processes, unreadable = [], 0
    for path in folder.iterdir():
        try:
            cpu, children, torch, execnet, ppid, argv = path.read_text(errors="replace").rstrip("\n").split("\t", 5)
            processes.append(Process(float(cpu), float(children), torch == "1", execnet == "1", int(ppid), argv))
        except ValueError:
            unreadable += 1
    return processes, unreadable


@contextlib.contextmanager
def hook_installed(site: Path) -> Iterator[None]:
    """The hook module and its .pth line in ``site`` for the block; both gone afterwards, even on Ctrl-C."""
    module, pth = site / f"{HOOK_NAME}.py", site / f"{HOOK_NAME}.pth"
    for path in (module, pth):
        if path.exists():
            raise SystemExit(f"{path}: already there (an earlier run interrupted?); remove it and run again")
    try:
        try:
            module.write_text(HOOK)
            pth.write_text(f"import {HOOK_NAME}\n")
        except OSError as exc:
            raise SystemExit(f"{site}: cannot write the counting hook there ({exc.strerror})") from None
        yield
    finally:
        for path in (pth, module):
            path.unlink(missing_ok=True)


def machine_cpu() -> tuple[float, float]:
    """(busy, idle) seconds of all cores since boot, from /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / ticks, idle / ticks


def import_torch_cpu(repeat: int) -> float:
    """The median CPU seconds of `python -c "import torch"` (the process's own and its children's)."""
    times = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(times)


def report(processes: list[Process], busy: float, idle: float, wall: float, torch_cpu: float, top: int,
           run_pid: int = 0, unreadable: int = 0) -> str:
    busy = max(busy, 0.01)  # a run too short for /proc/stat's ticks
    fresh = sum(p.cpu for p in processes)
    forked = sum(p.children for p in processes if p.fork_server)
    with_torch = [p for p in processes if p.torch]
    lines = [
        f"import torch: {torch_cpu:.2f} s of CPU (median)",
        f"the run: {wall:.0f} s; the machine: {busy:.0f} s of CPU busy, {idle / (busy + idle):.0%} idle",
        f"fresh Python processes seen: {len(processes)}, {fresh:.0f} s of CPU ({fresh / busy:.0%} of the machine's busy time)"
        + (f"; {unreadable} more wrote a record cut short, left out" if unreadable else ""),
        f"  that imported torch: {len(with_torch)}, {sum(p.cpu for p in with_torch):.0f} s; their imports of torch "
        f"alone about {len(with_torch) * torch_cpu:.0f} s ({len(with_torch) * torch_cpu / busy:.0%})",
    ]
    kinds: dict[str, list[Process]] = {}
    for p in with_torch:
        kinds.setdefault(p.kind(run_pid), []).append(p)
    for kind, group in sorted(kinds.items(), key=lambda item: -sum(p.cpu for p in item[1])):
        cpu = sum(p.cpu for p in group)
        lines.append(f"    {kind}: {len(group)}, {cpu:.0f} s ({cpu / len(group) / torch_cpu:.2f}x import torch each)")
    lines.append(f"what the fork servers forked (suite runs, reproducers), as their servers saw it end: {forked:.0f} s "
                 f"({forked / busy:.0%})")
    rest = busy - fresh - forked
    lines.append(f"everything else (what other programs and uncounted processes spent): {rest:.0f} s ({rest / busy:.0%})")
    lines.append(f"the {top} costliest fresh processes, by their own CPU:")
    lines += [f"  {p.cpu:6.2f} s  {p.argv[:150]}" for p in sorted(processes, key=lambda p: -p.cpu)[:top]]
    return "\n".join(lines)


def site_packages() -> Path:
    """Where the hook goes: this environment's site-packages, read by every fresh process of it."""
    return Path(sysconfig.get_paths()["purelib"])


def run_counted(pytest_args: list[str], folder: Path) -> tuple[int, int]:
    """pytest's exit code and pid. It runs in a session of its own, so that a signal to this script reaches
    it once: forwarded to its group, waited for, and this script then ends with 128 + the signal's number."""
    stopped_by: list[int] = []
    started: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, _frame: object) -> None:
        stopped_by.append(signum)
        for run in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.pid, signum)

    # Caught before the start, not ignored: exec gives pytest these signals' defaults even where this
    # script was started ignoring SIGINT (a background job), and none can come between.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    run = subprocess.Popen([sys.executable, "-m", "pytest", *pytest_args], cwd=REPO, start_new_session=True,
                           env={**os.environ, VARIABLE: str(folder)})
    started.append(run)
    if stopped_by:  # a signal while it started
        forward(stopped_by[0], None)
    code = run.wait()
    if stopped_by:
        print(f"bench_test_cpu: interrupted by {signal.Signals(stopped_by[0]).name}: pytest ended with {code}; "
              "nothing measured", file=sys.stderr)
        raise SystemExit(128 + stopped_by[0])
    return code, run.pid


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, pytest_args = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, DEFAULT_ARGS)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15, help="the costliest fresh processes to list (default 15)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of `import torch`, the median taken (default 3)")
    args = parser.parse_args(ours)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, not {args.repeat}")
    torch_cpu = import_torch_cpu(args.repeat)
    try:
        folder = Path(tempfile.mkdtemp(prefix="bench-test-cpu-"))
    except OSError as exc:
        raise SystemExit(f"{tempfile.gettempdir()}: cannot make the folder the processes write to ({exc.strerror})") from None
    try:
        with hook_installed(site_packages()):
            busy0, idle0 = machine_cpu()
            start = time.monotonic()
            code, pytest_pid = run_counted(pytest_args, folder)
            wall = time.monotonic() - start
            busy1, idle1 = machine_cpu()
        processes, unreadable = read_log(folder)
        print(f"\npytest {' '.join(pytest_args)}: exit {code}")
        print(report(processes, busy1 - busy0, idle1 - idle0, wall, torch_cpu, args.top, pytest_pid, unreadable))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
