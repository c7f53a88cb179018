"""Speed of the conformance suite (issue: the conformance suite).

Runs, in this environment, one after another:
  baseline       pytest --collect-only (interpreter, torch import, collection): the fixed cost
  default        the whole suite against the reference, default profile
  default -n 2   the same with pytest-xdist on two workers
  ci             the whole suite, ci profile (derandomized), and again with -n 2
  pre-fix        the suite against the pre-fix class, time to the first reported failure

and prints each as seconds, as pytest's own "test time" (its "in N s"), and as a ratio to
the baseline measured in this same run. Targets: default < 20 s of test time, -n 2 faster
than without, ci < 60 s, first pre-fix failure < 3 s after the run starts.

    python benchmarks/bench_suite.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q"]
ENV = {k: v for k, v in os.environ.items() if k != "CI"}


def timed(args: list[str]) -> tuple[float, float | None, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(BASE + args, cwd=ROOT, env=ENV, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    match = re.search(r" in ([\d.]+)s", proc.stdout.strip().splitlines()[-1])
    return wall, float(match.group(1)) if match else None, proc.stdout.strip().splitlines()[-1]


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the median is printed")
    n = parser.parse_args().repeat

    def median(fn, *args):
        """The run with the median first figure (wall time), over --repeat runs."""
        runs = sorted((fn(*args) for _ in range(n)), key=lambda run: run[0])
        return runs[len(runs) // 2]

    baseline = median(timed, ["--collect-only"])
    rows = [
        ("default", median(timed, [])),
        ("default -n 2", median(timed, ["-n", "2"])),
        ("ci", median(timed, ["--hypothesis-profile=ci"])),
        ("ci -n 2", median(timed, ["--hypothesis-profile=ci", "-n", "2"])),
    ]
    print(f"baseline (collect only): {baseline[0]:.2f} s wall")
    print(f"{'run':<14} {'wall s':>7} {'test s':>7} {'x baseline':>10}  pytest")
    for name, (wall, test, line) in rows:
        print(f"{name:<14} {wall:7.2f} {test or float('nan'):7.2f} {wall / baseline[0]:10.2f}  {line}")
    # Each xdist worker imports torch again (seconds), so -n 2 wins by more as the work grows.
    for (name, serial), (_, parallel) in ((rows[0], rows[1]), (rows[2], rows[3])):
        print(f"-n 2 speed-up over serial, {name} profile: {serial[1] / parallel[1]:.2f}x test time, {serial[0] / parallel[0]:.2f}x wall")
    from_start, from_session = median(first_failure, ["--impl", "cpugpu_conformance.variants:PreFixCpuGpuBuffer"])
    print(
        f"pre-fix first failure: {from_session:.2f} s after the test session starts "
        f"({from_start:.2f} s after the process starts; {from_start / baseline[0]:.2f}x baseline)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
