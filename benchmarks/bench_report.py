"""Speed of the report and the gate on a realistic matrix (issue 7).

Builds 16 cells shaped like the suite's own result files (every promise on cpu, four
cells with cuda too, the 61 probes of observe.py with values that change between
releases, a few failures with long messages and reproducers, one crashed and one
not-installed cell), then measures, one after another:

  import        python -c "import cpugpu_conformance": the fixed cost of any command
  report        python -m cpugpu_conformance report RESULTS --out OUT
  gate          python -m cpugpu_conformance gate --baseline A --candidate B
  in-process    report.make_report() in this process, templates already compiled

and prints the median of --repeat runs of each, in seconds and as a ratio to the import
baseline measured in this same run. Target: report and gate each well under 2 s. It also
checks that a second report of the same results, into another folder, has the same bytes.

    python benchmarks/bench_report.py [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import result_factory as rf  # noqa: E402  (the tests' own builder of v2 result files)
from timing import median_seconds  # noqa: E402  (beside this script)

from cpugpu_conformance import observe  # noqa: E402
from cpugpu_conformance.report import render as report  # noqa: E402

RELEASES = ["2.0.1", "2.1.2", "2.2.2", "2.3.1", "2.4.1", "2.5.1", "2.6.0", "2.7.1",
            "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"]
CUDA = {"2.12.1", "2.13.0", "2.14.1", "2.15.0"}
MESSAGE = "\n".join(
    ["AssertionError: the host tensor refused an in-place write after inference_mode()"]
    + [f"E     at index ({i}, 3): expected 1.0, got 0.0" for i in range(30)]
)
REPRODUCER = "\n".join(
    ["# Reproducer: CpuGpuBuffer promise 3 (Mutable wherever they were made), device cpu.",
     "import numpy as np", "import torch", "", "from mypkg.buffers import CpuGpuBuffer as Buffer", ""]
    + [f"step_{i} = buf.cpu[{i}].add_(1)  # write {i}" for i in range(34)]
    + ["print('ok: the promise held')"]
)


def observations(index: int) -> dict:
    """The probes of observe.py, some changing value every few releases, as a real matrix does."""
    obs = {}
    for n, (name, probe) in enumerate(observe.PROBES.items()):
        if name == "dtypes":
            value = {"float32": "float32", "bfloat16": None if index < 8 else "bfloat16", "uint16": index > 10}
            obs[name] = {"doc": probe.doc, "value": value}
        elif n % 7 == 0:
            obs[name] = {"doc": probe.doc, "error": {"type": "RuntimeError", "message": f"Inplace update refused ({n})"}}
        else:
            obs[name] = {"doc": probe.doc, "value": [1.0, float(index // (3 + n % 5))]}
    return obs


def build_matrix(folder: Path) -> tuple[Path, Path]:
    """16 result files; returns (baseline, candidate) for the gate."""
    for i, release in enumerate(RELEASES):
        name = f"torch-{release}.json"
        if release == "2.9.1":
            rf.write(folder, name, rf.incomplete(release, "not_installed", "No solution found when resolving: torch"))
            continue
        if release == "2.15.0":
            log = "\n".join(f"collected line {k}" for k in range(200))
            rf.write(folder, name, rf.incomplete(release, "crashed", f"pytest killed by SIGABRT; last lines:\n{log}"))
            continue
        failed = {}
        if release in ("2.3.1", "2.14.1"):
            failed = {(p, "cpu"): [rf.failure(f"test_promise_{p}", MESSAGE, REPRODUCER)] for p in ("3", "5", "9")}
        rf.write(folder, name, rf.completed(release, cuda=release in CUDA, failed=failed, observations=observations(i)))
    return folder / "torch-2.13.0.json", folder / "torch-2.14.1.json"


def command(args: list[str], ok: tuple[int, ...] = (0,)):
    def run() -> None:
        proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True)
        if proc.returncode not in ok:
            raise SystemExit(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return run


def same_bytes(results: Path, out: Path, again: Path) -> bool:
    report.make_report(results, again)
    return all((out / name).read_bytes() == (again / name).read_bytes() for name in report.OUTPUTS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the median is printed")
    parser.add_argument("--keep", type=Path, help="build the matrix and the report here, and keep them")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        results, out = root / "results", root / "compat"
        results.mkdir(parents=True, exist_ok=True)
        baseline, candidate = build_matrix(results)
        size = sum(p.stat().st_size for p in results.glob("*.json"))
        print(f"{len(RELEASES)} cells, {len(observe.PROBES)} probes each, {size / 1e6:.1f} MB of result files")

        report.make_report(results, out)  # warm: compile the templates once, as a long-lived process would
        timings = {
            "import": median_seconds(command(["-c", "import cpugpu_conformance"]), args.repeat),
            "report": median_seconds(command(["-m", "cpugpu_conformance", "report", str(results), "--out", str(out)]),
                                     args.repeat),
            # 1: the candidate regressed (it has failures): the gate still does all its work
            "gate": median_seconds(command(["-m", "cpugpu_conformance", "gate", "--baseline", str(baseline),
                                            "--candidate", str(candidate)], ok=(0, 1)), args.repeat),
            "in-process": median_seconds(lambda: report.make_report(results, out), args.repeat),
        }
        sizes = ", ".join(f"{p.name} {p.stat().st_size / 1e3:.0f} kB" for p in sorted(out.iterdir()))
        print(f"report: {sizes}")
        same = same_bytes(results, out, root / "compat-again")
        print(f"a second report of the same results: {'the same bytes' if same else 'DIFFERENT BYTES'}")

    base = timings["import"]
    print(f"\n{'measurement':<12} {'median s':>9} {'x import':>9}   target")
    for name, seconds in timings.items():
        target = "< 2 s" if name in ("report", "gate") else ""
        verdict = ("ok" if seconds < 2 else "SLOW") if target else ""
        print(f"{name:<12} {seconds:>9.3f} {seconds / base:>9.1f}   {target} {verdict}")
    print(f"\nreport subprocess / in-process: {timings['report'] / timings['in-process']:.1f}x "
          "(the difference is interpreter start, imports and template compilation)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
