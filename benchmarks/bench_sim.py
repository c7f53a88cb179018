"""The simulated accelerator's cost: its build, cold and cached, and the suite on sim against cpu.

Measures, one after another, in this same run:

  import        python -c "import torch": the fixed cost of any torch process (the baseline)
  build cold    python -c "sim.load()" with an empty build cache: compiling the backend
  build cached  the same with the cache filled: what every later run pays to load sim
  suite cpu     pytest conformance --device cpu (ci profile)
  suite sim     pytest conformance --device sim (ci profile)

and prints the median of --repeat runs of each (the cold build once unless --repeat-cold), in
seconds and as ratios: each build against the import, the suite on sim against the suite on cpu.
The cold build uses a fresh cache folder and MAX_JOBS (default 2); nothing is downloaded.

    python benchmarks/bench_sim.py [--repeat 3] [--repeat-cold 1] [--skip-suite]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOAD = "from cpugpu_conformance import sim; sim.load()"


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return took


def median(cmd: list[str], env: dict[str, str], repeat: int) -> float:
    return statistics.median(timed(cmd, env) for _ in range(repeat))


def suite(device: str) -> list[str]:
    return [sys.executable, "-m", "pytest", str(ROOT / "conformance"), "-q", "-p", "no:cacheprovider",
            "--hypothesis-profile=ci", "--device", device]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--repeat-cold", type=int, default=1, help="cold builds (each from an empty cache)")
    parser.add_argument("--skip-suite", action="store_true", help="the build only")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env.setdefault("MAX_JOBS", "2")
    rows: list[tuple[str, float]] = [("import torch", median([sys.executable, "-c", "import torch"], env, args.repeat))]
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as cache:
        cold_times = []
        for i in range(args.repeat_cold):
            fresh = {**env, "CPUGPU_SIM_CACHE": str(Path(cache) / f"cold{i}")}
            cold_times.append(timed([sys.executable, "-c", LOAD], fresh))
        rows.append(("build cold (sim.load, empty cache)", statistics.median(cold_times)))
        warm = {**env, "CPUGPU_SIM_CACHE": str(Path(cache) / "cold0")}
        rows.append(("build cached (sim.load)", median([sys.executable, "-c", LOAD], warm, args.repeat)))
        if not args.skip_suite:
            rows.append(("suite --device cpu", median(suite("cpu"), warm, args.repeat)))
            rows.append(("suite --device sim", median(suite("sim"), warm, args.repeat)))
    base = rows[0][1]
    by_name = dict(rows)
    width = max(len(name) for name, _ in rows)
    for name, seconds in rows:
        print(f"{name:<{width}}  {seconds:7.2f} s  {seconds / base:6.2f}x import torch")
    if not args.skip_suite:
        print(f"suite on sim / suite on cpu: {by_name['suite --device sim'] / by_name['suite --device cpu']:.2f}x")
    cached = by_name["build cached (sim.load)"]
    print(f"build cold / cached: {by_name['build cold (sim.load, empty cache)'] / cached:.2f}x; "
          f"loading a cached build costs {cached - base:+.2f} s over import torch")


if __name__ == "__main__":
    main()
