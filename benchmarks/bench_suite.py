"""Speed and memory of the conformance suite, as ratios to baselines measured in the same run.

Runs, in this environment, one after another:
  import torch   `python -c "import torch"`: what every run pays before testing anything
  ceiling        a CPU-bound loop in two processes at once against one after the other:
                 the most any -n 2 can gain on this machine
  collect        pytest --collect-only (interpreter, torch import, collection): the fixed cost
  default        the whole suite against the reference, default profile (and with -n 2)
  ci             the whole suite, ci profile (derandomized), serial and with -n 2
  broken         the whole suite, ci profile, serial, against each broken class (variants.py's
                 that break on the CPU, and a copy that ignores n entirely), each beside a run
                 against the reference in the same round: what judging a failing class costs
  your pytest    the same tests run by a third-party project's own pytest (the library:
                 its pytest.ini, conftest.py enabling the plugin, one subclass of
                 BufferContractTests), ci profile (cpugpu-ci), against the shipped suite's ci;
                 and under hypothesis's own default profile (none of the library's loaded, as
                 a newcomer runs it), the project with a copy that ignores n against the same
                 project with the reference
  pre-fix        the suite against the pre-fix class, time to the first reported failure

and prints seconds, pytest's own test time (its "in N s"), the tests' own time (the sum of
each test's setup, call and teardown, from a JUnit XML report), the process's CPU seconds, and
ratios, with the load average. Targets: ci serial test time at most 3x `import torch` (issue
31); ci with -n 2 at least 1.5x faster than serial (wall); the pre-fix class's first failure
within 1 s of the test session start; peak memory of a ci run under 1.5 GiB; a failing class's
test time at most 2x the reference's, in the shipped suite under ci and in a project's pytest
under hypothesis's own profile (issue 31, item 4); the library in a project's own pytest
at most 1.10x the shipped suite's ci, compared like with like (issue 16; issue 31, item 4): the
tests' own time, and the whole process (pytest's clock starts after the shipped suite's
conftest.py has imported torch to load --impl, but before the project's collection imports it,
so its "in N s" holds an import of torch the shipped suite's does not).

    python benchmarks/bench_suite.py [--repeat 3] [--only broken,project] [--variants all]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
BASE = [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q"]
ENV = {k: v for k, v in os.environ.items() if k != "CI"}
CI = "--hypothesis-profile=ci"

# The broken classes measured by default: the CPU-breaking ones issue 31 names (variants.py), and
# IGNORES_N, a copy that ignores n entirely (a newcomer's class, not a variant: written to a file).
BROKEN = ("ZeroMeansAllBuffer", "ChunkedCopyBuffer", "RebindingBuffer", "PreFixCpuGpuBuffer")
IGNORES_N = "IgnoresNBuffer"
IGNORES_N_SOURCE = '''\
from cpugpu_conformance.reference import CpuGpuBuffer


class IgnoresNBuffer(CpuGpuBuffer):
    """copy_to_gpu(n) and copy_to_cpu(n) copy the whole buffer, whatever n is."""

    def copy_to_gpu(self, n=None):
        return self.gpu.copy_(self.cpu, non_blocking=True)

    def copy_to_cpu(self, n=None):
        return self.cpu.copy_(self.gpu, non_blocking=True)
'''
# The most a failing class's ci test time may be, as a multiple of the reference's in the same round.
BROKEN_TARGET = 2.0
PARTS = ("suite", "broken", "project", "prefix")


class Run(NamedTuple):
    wall: float  # seconds, the whole process
    test: float | None  # pytest's own "in N s"
    last: str  # pytest's summary line
    peak: float  # GiB, the largest resident set of the process and its descendants
    cpu: float  # CPU seconds (user and system) of the process and its descendants
    own: float | None  # the tests' own seconds: each test's setup, call and teardown, summed
    code: int  # pytest's exit status


def timed(args: list[str], base: list[str] = BASE, cwd: Path = ROOT) -> Run:
    """Run pytest with `args` under the wrapper that measures it."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        wrapper = [sys.executable, "-c", _PEAK, *base, *args, f"--junitxml={junit}"]
        t0 = time.perf_counter()
        proc = subprocess.run(wrapper, cwd=cwd, env=ENV, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        own = tests_own_time(junit)
    *output, peak, cpu = proc.stdout.strip().splitlines()
    summary = [line for line in output if re.search(r" in [\d.]+s", line)]
    last = summary[-1] if summary else (output[-1] if output else proc.stderr.strip()[-200:])
    match = re.search(r" in ([\d.]+)s", last)
    return Run(wall, float(match.group(1)) if match else None, last, float(peak), float(cpu), own, proc.returncode)


def tests_own_time(junit: Path) -> float | None:
    """The sum of each test's time in pytest's JUnit XML report (its setup, call and teardown)."""
    try:
        cases = list(ET.parse(junit).getroot().iter("testcase"))
    except (OSError, ET.ParseError):
        return None
    return sum(float(case.get("time") or 0) for case in cases)


# Runs the command and prints, last, the largest resident set of it and its descendants (GiB), then
# their CPU seconds, user and system.
_PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(usage.ru_maxrss / 2**20)\n"
    "print(usage.ru_utime + usage.ru_stime)\n"
    "sys.exit(code)\n"
)


def load() -> str:
    """The load averages over 1, 5 and 15 minutes, as uptime prints them."""
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def import_torch() -> tuple[float]:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return (time.perf_counter() - t0,)


_SPIN = "x = 0\nfor i in range(20_000_000):\n    x += i\n"


def parallel_ceiling() -> tuple[float]:
    """What two processes side by side get from this machine: the same CPU-bound loop twice in
    a row against twice at once (1.0: no gain; 2.0: two free cores). No -n 2 can beat it."""
    spin = [sys.executable, "-c", _SPIN]
    t0 = time.perf_counter()
    subprocess.run(spin, check=True)
    subprocess.run(spin, check=True)
    serial = time.perf_counter() - t0
    t0 = time.perf_counter()
    both = [subprocess.Popen(spin) for _ in range(2)]
    for proc in both:
        proc.wait()
    return (serial / (time.perf_counter() - t0),)


def first_failure(args: list[str]) -> tuple[float, float]:
    """Seconds from process start, and from pytest's session start, to the first FAILED line."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(BASE[:-1] + ["-v"] + args, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, text=True)
    session_start = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.perf_counter() - t0
            if session_start is None and "test session starts" in line:
                session_start = now
            if "FAILED" in line:
                return now, now - (session_start or 0.0)
    finally:
        proc.kill()
        proc.wait()
    raise SystemExit("the pre-fix class produced no failure: the suite has lost its teeth")


# A team's own project: its configuration, its conftest.py, one subclass of the library's class.
PROJECT = {
    "pytest.ini": "[pytest]\naddopts = --strict-markers -p no:cacheprovider\nfilterwarnings = error\nxfail_strict = true\n",
    "tests/conftest.py": 'pytest_plugins = ["cpugpu_conformance.testing.plugin"]\n',
    "tests/test_our_buffer.py": (
        "from cpugpu_conformance.reference import CpuGpuBuffer\n"
        "from cpugpu_conformance.testing import BufferContractTests\n\n\n"
        "class TestOurBuffer(BufferContractTests):\n    buffer_cls = CpuGpuBuffer\n"
    ),
}


# The same project with a class of its own in place of the reference: the copy that ignores n.
BROKEN_PROJECT = {
    **PROJECT,
    "tests/our_buffer.py": IGNORES_N_SOURCE,
    "tests/test_our_buffer.py": (
        f"from our_buffer import {IGNORES_N}\n"
        "from cpugpu_conformance.testing import BufferContractTests\n\n\n"
        f"class TestOurBuffer(BufferContractTests):\n    buffer_cls = {IGNORES_N}\n"
    ),
}


def write_project(folder: Path, files: dict[str, str] = PROJECT) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def broken_classes(which: str, folder: Path) -> dict[str, str]:
    """The classes the broken rows measure, name -> --impl spec: `default` (BROKEN and the copy that
    ignores n), `all` (every variant that breaks on the CPU, and the copy that ignores n), or names,
    comma-separated. The copy that ignores n is written into `folder`."""
    from cpugpu_conformance.variants import VARIANTS

    on_cpu = {v.name: v.spec for v in VARIANTS if "cpu" in v.fails_on}
    path = folder / "ignores_n.py"
    path.write_text(IGNORES_N_SOURCE)
    known = {**on_cpu, IGNORES_N: f"{path}:{IGNORES_N}"}
    if which == "all":
        names = [*on_cpu, IGNORES_N]
    elif which == "default":
        names = [*BROKEN, IGNORES_N]
    else:
        names = [name.strip() for name in which.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise SystemExit(f"--variants: no class that breaks on the CPU is named {', '.join(unknown) or repr(which)} "
                         f"(known: {', '.join(known)})")
    return {name: known[name] for name in names}


def judge_broken(classes: dict[str, str], rounds: int) -> dict[str, list[tuple[Run, Run]]]:
    """Each round: the reference under ci, then each broken class, so that each ratio is of two runs
    minutes apart at most, whatever the load does over the whole benchmark. A class the suite does
    not fail (exit 1) ends the benchmark: its time would be no failure's."""
    runs: dict[str, list[tuple[Run, Run]]] = {name: [] for name in classes}
    for _ in range(rounds):
        reference = timed([CI])
        for name, spec in classes.items():
            run = timed([CI, "--impl", spec])
            if run.code != 1:
                raise SystemExit(f"{name}: the suite exited {run.code}, not 1 (a failure): {run.last}")
            runs[name].append((reference, run))
    return runs


def judge_project(project: Path, rounds: int) -> list[tuple[Run, Run]]:
    """Each round: the shipped suite under ci, then the project's own pytest under cpugpu-ci."""
    theirs = [sys.executable, "-m", "pytest", "tests", "-q"]
    return [(timed([CI]), timed(["--hypothesis-profile=cpugpu-ci"], theirs, project)) for _ in range(rounds)]


def judge_own_profile(rounds: int) -> list[tuple[Run, Run]]:
    """Each round: the project with the reference, then with the copy that ignores n, under no profile
    of the library's (hypothesis's own default: 100 examples, random, the explain phase, a database),
    each in a fresh folder, so that no example database carries a failure from one run to the next."""
    theirs = [sys.executable, "-m", "pytest", "tests", "-q"]
    pairs = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as good, tempfile.TemporaryDirectory() as bad:
            reference = timed([], theirs, write_project(Path(good)))
            broken = timed([], theirs, write_project(Path(bad), BROKEN_PROJECT))
        if broken.code != 1:
            raise SystemExit(f"{IGNORES_N} in a project's pytest: exit {broken.code}, not 1 (a failure): {broken.last}")
        pairs.append((reference, broken))
    return pairs


def ratio(a: float | None, b: float | None) -> float:
    return a / b if a is not None and b else float("nan")


def middle(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the median is printed")
    parser.add_argument("--thorough", action="store_true",
                        help="also the thorough profile, serial and -n 2 (minutes): where -n 2 has work to share")
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"the parts to run, comma-separated, of {', '.join(PARTS)} (default: all); import "
                             "torch and the reference's ci run are measured whatever is chosen")
    parser.add_argument("--variants", default="default",
                        help="the broken classes: default (" + ", ".join([*BROKEN, IGNORES_N]) + "), all (every "
                             "variant that breaks on the CPU, and the copy that ignores n), or names, comma-separated")
    options = parser.parse_args()
    n = options.repeat
    parts = {part.strip() for part in options.only.split(",") if part.strip()}
    if parts - set(PARTS):
        parser.error(f"--only: unknown part(s) {', '.join(sorted(parts - set(PARTS)))} (of {', '.join(PARTS)})")
    folder = tempfile.TemporaryDirectory()  # the copy that ignores n, as a file --impl names
    classes = broken_classes(options.variants, Path(folder.name)) if "broken" in parts else {}

    def median(fn, *args):
        """The run with the median first figure (wall time), over --repeat runs."""
        runs = sorted((fn(*args) for _ in range(n)), key=lambda run: run[0])
        return runs[len(runs) // 2]

    print(f"load average at the start: {load()} (1, 5 and 15 minutes; {os.cpu_count()} cores)")
    torch_import = median(import_torch)[0]
    rows = [("ci", median(timed, [CI]))]
    if "suite" in parts:
        ceiling = median(parallel_ceiling)[0]
        baseline = median(timed, ["--collect-only"])
        rows = [("default", median(timed, [])), ("default -n 2", median(timed, ["-n", "2"])),
                *rows, ("ci -n 2", median(timed, [CI, "-n", "2"]))]
        if options.thorough:
            rows += [("thorough", timed(["--hypothesis-profile=thorough"])),
                     ("thorough -n 2", timed(["--hypothesis-profile=thorough", "-n", "2"]))]
        print(f"import torch: {torch_import:.2f} s; collect only: {baseline.wall:.2f} s wall")
    else:
        print(f"import torch: {torch_import:.2f} s")
    print(f"{'run':<14} {'wall s':>7} {'test s':>7} {'own s':>7} {'cpu s':>7} {'x import':>9} {'peak GiB':>9}  pytest")
    for name, run in rows:
        print(f"{name:<14} {run.wall:7.2f} {run.test or float('nan'):7.2f} {run.own or float('nan'):7.2f} "
              f"{run.cpu:7.2f} {ratio(run.test, torch_import):9.2f} {run.peak:9.2f}  {run.last}")
    ci = dict(rows)["ci"]
    print(f"ci serial test time / import torch: {ratio(ci.test, torch_import):.2f}x (target at most 3x; "
          f"load {load()})")
    if "suite" in parts:
        ci_n2 = dict(rows)["ci -n 2"]
        print(f"ci -n 2 speed-up over serial: {ci.wall / ci_n2.wall:.2f}x wall, {ratio(ci.test, ci_n2.test):.2f}x "
              "test time (target at least 1.5x)")
        # Each xdist worker imports torch, hypothesis and pytest and collects before its first test
        # (about the collect-only time), and the cores give no more than the ceiling.
        print(f"this machine's ceiling for two processes: {ceiling:.2f}x (a CPU-bound loop twice at once against "
              "twice in a row)")
        if options.thorough:
            serial, parallel = dict(rows)["thorough"], dict(rows)["thorough -n 2"]
            print(f"thorough -n 2 speed-up over serial: {serial.wall / parallel.wall:.2f}x wall, "
                  f"{ratio(serial.test, parallel.test):.2f}x test time")
        print(f"ci peak memory: {ci.peak:.2f} GiB serial, {ci_n2.peak:.2f} GiB largest process with -n 2 "
              "(target under 1.5 GiB)")
    if classes:
        print(f"broken classes, ci, serial, each beside the reference in {n} round(s) (load {load()}):")
        judged = judge_broken(classes, n)
        folder.cleanup()
        print(f"{'class':<28} {'test s':>7} {'ref s':>7} {'x ref':>7} {'cpu x ref':>10}  pytest")
        worst = ("", 0.0)
        for name, pairs in judged.items():
            times = middle([ratio(run.test, ref.test) for ref, run in pairs])
            cpus = middle([ratio(run.cpu, ref.cpu) for ref, run in pairs])
            run = sorted((run for _, run in pairs), key=lambda r: r.test or 0)[len(pairs) // 2]
            ref = sorted((ref for ref, _ in pairs), key=lambda r: r.test or 0)[len(pairs) // 2]
            print(f"{name:<28} {run.test or float('nan'):7.2f} {ref.test or float('nan'):7.2f} {times:7.2f} "
                  f"{cpus:10.2f}  {run.last}")
            worst = max(worst, (name, times), key=lambda w: w[1])
        print(f"worst failing class: {worst[0]}, {worst[1]:.2f}x the reference's ci test time (target at most "
              f"{BROKEN_TARGET:g}x; the median of the rounds' ratios; load {load()})")
    if "project" in parts:
        print(f"your pytest (the library, cpugpu-ci), each beside the shipped suite's ci in {n} round(s) "
              f"(load {load()}):")
        with tempfile.TemporaryDirectory() as tmp:
            pairs = judge_project(write_project(Path(tmp)), n)
        own = middle([ratio(theirs.own, shipped.own) for shipped, theirs in pairs])
        wall = middle([ratio(theirs.wall, shipped.wall) for shipped, theirs in pairs])
        clock = middle([ratio(theirs.test, shipped.test) for shipped, theirs in pairs])
        cpu = middle([ratio(theirs.cpu, shipped.cpu) for shipped, theirs in pairs])
        shipped, theirs = sorted(pairs, key=lambda pair: ratio(pair[1].own, pair[0].own))[len(pairs) // 2]
        print(f"  tests' own time: {own:.2f}x ({theirs.own or float('nan'):.2f} s against "
              f"{shipped.own or float('nan'):.2f} s); "
              f"the whole process: {wall:.2f}x wall, {cpu:.2f}x CPU (target at most 1.10x; the median of the rounds' "
              f"ratios; load {load()}); {theirs.last}")
        print(f"  pytest's 'in N s': {clock:.2f}x ({theirs.test} s against {shipped.test} s), not like with like: the "
              "project's holds its collection's import of torch and the library, while the shipped suite's conftest.py "
              "imported torch (loading --impl) before pytest's clock started")
        print(f"your pytest under hypothesis's own default profile, a copy that ignores n beside the reference "
              f"in {n} round(s) (load {load()}):")
        pairs = judge_own_profile(n)
        times = middle([ratio(broken.test, reference.test) for reference, broken in pairs])
        reference, broken = sorted(pairs, key=lambda pair: ratio(pair[1].test, pair[0].test))[len(pairs) // 2]
        print(f"  {times:.2f}x the reference's test time ({broken.test} s against {reference.test} s; target at most "
              f"{BROKEN_TARGET:g}x; the median of the rounds' ratios; load {load()}); {broken.last}")
    if "prefix" in parts:
        from_start, from_session = median(first_failure, ["--impl", "cpugpu_conformance.variants:PreFixCpuGpuBuffer"])
        print(
            f"pre-fix first failure: {from_session:.2f} s after the test session starts (target within 1 s; "
            f"{from_start:.2f} s after the process starts, {from_start / torch_import:.2f}x import torch)"
        )
    print(f"load average at the end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
