"""Speed and memory of the conformance suite, as ratios to baselines measured in the same run.

Runs, in this environment, one after another:
  import torch   `python -c "import torch"`: what every run pays before testing anything
  ceiling        a CPU-bound loop in two processes at once against one after the other:
                 the most any -n 2 can gain on this machine
  collect        pytest --collect-only (interpreter, torch import, collection): the fixed cost
  default        the whole suite against the reference, default profile (and with -n 2)
  ci             the whole suite, ci profile (derandomized), serial and with -n 2
  pre-fix        the suite against the pre-fix class, time to the first reported failure
  your pytest    the same tests run by a third-party project's own pytest (the library:
                 its pytest.ini, conftest.py enabling the plugin, one subclass of
                 BufferContractTests), ci profile (cpugpu-ci), against the shipped suite's ci

and prints seconds, pytest's own test time (its "in N s"), and ratios. Targets (issue 8):
ci serial test time at most 5x `import torch`; ci with -n 2 at least 1.5x faster than
serial (wall); the pre-fix class's first failure within 1 s of the test session start;
peak memory of a ci run under 1.5 GiB; the library in a project's own pytest adds at most
10 % to the shipped suite's ci test time (issue 16).

    python benchmarks/bench_suite.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q"]
ENV = {k: v for k, v in os.environ.items() if k != "CI"}


def timed(args: list[str], base: list[str] = BASE, cwd: Path = ROOT) -> tuple[float, float | None, str, float]:
    """Wall seconds, pytest's test seconds, its last line, and the peak memory (GiB) of the run."""
    wrapper = [sys.executable, "-c", _PEAK, *base, *args]
    t0 = time.perf_counter()
    proc = subprocess.run(wrapper, cwd=cwd, env=ENV, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    *output, peak = proc.stdout.strip().splitlines()
    last = output[-1] if output else ""
    match = re.search(r" in ([\d.]+)s", last)
    return wall, float(match.group(1)) if match else None, last, float(peak)


# Runs the command and prints, last, the largest resident set of it and its descendants (GiB).
_PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20)\n"
    "sys.exit(code)\n"
)


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


def write_project(folder: Path) -> Path:
    for name, text in PROJECT.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the median is printed")
    parser.add_argument("--thorough", action="store_true",
                        help="also the thorough profile, serial and -n 2 (minutes): where -n 2 has work to share")
    options = parser.parse_args()
    n = options.repeat

    def median(fn, *args):
        """The run with the median first figure (wall time), over --repeat runs."""
        runs = sorted((fn(*args) for _ in range(n)), key=lambda run: run[0])
        return runs[len(runs) // 2]

    torch_import = median(import_torch)[0]
    ceiling = median(parallel_ceiling)[0]
    baseline = median(timed, ["--collect-only"])
    rows = [
        ("default", median(timed, [])),
        ("default -n 2", median(timed, ["-n", "2"])),
        ("ci", median(timed, ["--hypothesis-profile=ci"])),
        ("ci -n 2", median(timed, ["--hypothesis-profile=ci", "-n", "2"])),
    ]
    if options.thorough:
        rows += [("thorough", timed(["--hypothesis-profile=thorough"])),
                 ("thorough -n 2", timed(["--hypothesis-profile=thorough", "-n", "2"]))]
    print(f"import torch: {torch_import:.2f} s; collect only: {baseline[0]:.2f} s wall")
    print(f"{'run':<14} {'wall s':>7} {'test s':>7} {'x import':>9} {'peak GiB':>9}  pytest")
    for name, (wall, test, line, peak) in rows:
        print(f"{name:<14} {wall:7.2f} {test or float('nan'):7.2f} {(test or 0) / torch_import:9.2f} {peak:9.2f}  {line}")
    ci, ci_n2 = rows[2][1], rows[3][1]
    print(f"ci serial test time / import torch: {ci[1] / torch_import:.2f}x (target at most 5x)")
    print(f"ci -n 2 speed-up over serial: {ci[0] / ci_n2[0]:.2f}x wall, {ci[1] / ci_n2[1]:.2f}x test time (target at least 1.5x)")
    # Each xdist worker imports torch, hypothesis and pytest and collects before its first test
    # (about the collect-only time), and the cores give no more than the ceiling.
    print(f"this machine's ceiling for two processes: {ceiling:.2f}x (a CPU-bound loop twice at once against twice in a row)")
    if options.thorough:
        (_, serial), (_, parallel) = rows[4], rows[5]
        print(f"thorough -n 2 speed-up over serial: {serial[0] / parallel[0]:.2f}x wall, {serial[1] / parallel[1]:.2f}x test time")
    print(f"ci peak memory: {ci[3]:.2f} GiB serial, {ci_n2[3]:.2f} GiB largest process with -n 2 (target under 1.5 GiB)")
    with tempfile.TemporaryDirectory() as tmp:
        project = write_project(Path(tmp))
        theirs = median(timed, ["--hypothesis-profile=cpugpu-ci"], [sys.executable, "-m", "pytest", "tests", "-q"], project)
    print(f"your pytest (the library, cpugpu-ci): {theirs[1]:.2f} s test time, {theirs[1] / ci[1]:.2f}x the shipped "
          f"suite's ci ({ci[1]:.2f} s; target at most 1.10x); {theirs[2]}")
    from_start, from_session = median(first_failure, ["--impl", "cpugpu_conformance.variants:PreFixCpuGpuBuffer"])
    print(
        f"pre-fix first failure: {from_session:.2f} s after the test session starts (target within 1 s; "
        f"{from_start:.2f} s after the process starts, {from_start / torch_import:.2f}x import torch)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
