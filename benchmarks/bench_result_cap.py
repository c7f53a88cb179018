"""Memory and time of report and gate over result files at the caps (issue 22), as ratios to
report and gate over ordinary result files measured in the same run.

First (unless --skip-suite) it measures what the caps rest on: the result file the shipped suite
writes (ci profile, this machine's devices) for the reference class and for the classes of
tests/loud_impls.py, which fail every promise at once (their size, and their JSON values).

Then it builds three result files of each shape below, each as large as the caps let a file be
(results.MAX_FILE_BYTES bytes, results.MAX_VALUES values), and runs, each in a fresh process:

  report   python -m cpugpu_conformance report DIR --out OUT     (the three files)
  gate     python -m cpugpu_conformance gate --baseline A --candidate B   (two of them)

printing the peak resident memory (MB) and wall time of each, and both as a ratio to the same
command over ordinary files (16 probes' worth of a real matrix cell, a few failures with long
messages and reproducers, cpu and cuda). Shapes:

  ordinary        the baseline
  long texts      valid: every judged promise on cpu and cuda fails, messages and reproducers of
                  19,000 ASCII characters, as many as the byte cap holds
  wide texts      the same in 4-byte UTF-8 characters (the most bytes a kept character takes)
  many values     valid: an observation holding as many empty objects as the value cap lets
  unknown key     the issue's file: an unknown top-level key padded with zeros to the byte cap
                  (refused before parsing: too many values)
  unknown string  an unknown top-level key holding one string to the byte cap (refused, parsed)

Issue 22 saw, before the caps (16 MiB, no value cap, unknown keys copied): report 4.0 GB and
44 s over three padded files, gate 850 MB.

    python benchmarks/bench_result_cap.py [--repeat 1] [--skip-suite] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
sys.path.insert(0, str(TESTS))

import result_factory as rf  # noqa: E402  (the tests' own builder of result files)

from cpugpu_conformance import observe, results  # noqa: E402
from cpugpu_conformance.promises import PROMISES, RECORDED_ONLY, applies  # noqa: E402

MESSAGE = "\n".join(["AssertionError: the host tensor refused an in-place write after inference_mode()"]
                    + [f"E     at index ({i}, 3): expected 1.0, got 0.0" for i in range(30)])
REPRODUCER = "\n".join(["import torch", "from mypkg.buffers import CpuGpuBuffer as Buffer", ""]
                       + [f"step_{i} = buf.cpu[{i}].add_(1)  # write {i}" for i in range(34)])
JUDGED = [(p, d) for p in PROMISES for d in ("cpu", "cuda") if p not in RECORDED_ONLY and applies(p, d)]


def _observations() -> dict[str, Any]:
    return {name: {"doc": probe.doc, "value": [1.0, 2.0]} for name, probe in observe.PROBES.items()}


def ordinary(release: str) -> dict[str, Any]:
    failed = {(p, "cpu"): [rf.failure(f"test_promise_{p}", MESSAGE, REPRODUCER)] for p in ("3", "5", "9")}
    return rf.completed(release, cuda=True, failed=failed, observations=_observations())


def _dumps(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _texts(release: str, char: str) -> dict[str, Any]:
    """Failures of every judged promise with 19,000-character texts, as many as fit the byte cap."""
    text = char * 19_000

    def build(per_pair: int, extra: int) -> dict[str, Any]:
        failed = {pair: [rf.failure(f"test_{pair[0]}_{i}", text, text) for i in range(per_pair + (j < extra))]
                  for j, pair in enumerate(JUDGED)}
        return rf.completed(release, cuda=True, failed=failed, observations=_observations())

    one = len(_dumps(build(1, 0))) - len(_dumps(build(0, 0)))  # the bytes of a failure per judged pair
    count = (results.MAX_FILE_BYTES - len(_dumps(build(0, 0)))) * len(JUDGED) // one
    while count and len(_dumps(build(*divmod(count, len(JUDGED))))) > results.MAX_FILE_BYTES:
        count -= 1
    return build(*divmod(count, len(JUDGED)))


def long_texts(release: str) -> dict[str, Any]:
    return _texts(release, "x")


def wide_texts(release: str) -> dict[str, Any]:
    return _texts(release, "\U0001f4a5")


def many_values(release: str) -> dict[str, Any]:
    data = ordinary(release)
    room = (results.MAX_VALUES - results.count_values(_dumps(data))) // 2 - 10  # "{}," counts twice
    data["observations"]["padding"] = {"value": [{}] * room}  # an empty object: the dearest value to parse
    return data


def _padded(release: str, padding: Callable[[int], Any]) -> dict[str, Any]:
    """An ordinary result with an unknown top-level key, ``padding(n)`` grown to just under the byte cap."""
    data = ordinary(release)
    base = len(_dumps(dict(data, padding=padding(0))))
    per_unit = len(_dumps(dict(data, padding=padding(1000)))) - base
    data["padding"] = padding((results.MAX_FILE_BYTES - base) * 1000 // per_unit - 10)
    return data


def unknown_key(release: str) -> dict[str, Any]:
    return _padded(release, lambda n: [0] * n)


def unknown_string(release: str) -> dict[str, Any]:
    return _padded(release, lambda n: "x" * n)


SHAPES: dict[str, Callable[[str], dict[str, Any]]] = {
    "ordinary": ordinary, "long texts": long_texts, "wide texts": wide_texts, "many values": many_values,
    "unknown key": unknown_key, "unknown string": unknown_string,
}
RELEASES = ("2.13.0", "2.14.1", "2.15.0")


def write_shape(folder: Path, make: Callable[[str], dict[str, Any]]) -> list[Path]:
    """Three files of a shape, written raw (as a hand-made or hostile file would be, not cut to fit)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for release in RELEASES:
        path = folder / f"torch-{release}.json"
        path.write_bytes(_dumps(make(release)))
        paths.append(path)
    return paths


# Runs the command and prints its peak resident memory (MB). A small process of its own starts it:
# Linux carries a process's peak over fork and exec, so a child of this script (which holds the
# files it built) would report this script's memory too.
_PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, code)\n"
)


def measured(args: list[str]) -> tuple[float, float, int]:
    """(peak resident MB, wall seconds, exit code) of ``python args`` in a fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _PEAK, sys.executable, *args], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    wall = time.perf_counter() - t0
    peak, code = proc.stdout.split()
    return float(peak), wall, int(code)


def median_of(repeat: int, args: list[str]) -> tuple[float, float, int]:
    runs = [measured(args) for _ in range(repeat)]
    return (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), runs[-1][2])


def suite_sizes(scratch: Path) -> None:
    """What the caps rest on: the shipped suite's own result files, for passing and loudly failing classes."""
    classes = {"reference": "cpugpu_conformance.reference:CpuGpuBuffer",
               **{name: f"{TESTS / 'loud_impls.py'}:{name}" for name in ("BreaksEverything", "RaisesLoudly", "RaisesWide")}}
    print("result files the shipped suite writes (ci profile, this machine's devices):")
    for name, impl in classes.items():
        path = scratch / f"suite-{name}.json"
        subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "conformance"), "-p", "no:cacheprovider", "-q",
                        "--hypothesis-profile=ci", "--impl", impl, "--cell-result", str(path)],
                       cwd=ROOT, capture_output=True, check=False)
        data = path.read_bytes()
        cell = results.CellResult.load(path)
        texts = [f.get("message") or "" for _, _, out in cell.outcomes() for f in out.failures]
        longest = max((len(t) for t in texts), default=0)
        fitted = any("characters cut" in t and len(t) < results.TEXT_LIMIT for t in texts)  # cut below TEXT_LIMIT: by fit
        cut = " (cut further to fit the caps when written)" if fitted else ""
        print(f"  {name:<17} {len(data) / 1e6:6.2f} MB  {results.count_values(data):>6,} values  "
              f"{cell.answer().counts.get('failed', 0):>3} failed pairs  longest message {longest:,} characters{cut}")
    print(f"  (the caps: {results.MAX_FILE_BYTES / 2**20:.0f} MiB, {results.MAX_VALUES:,} values)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each measurement; the median is printed")
    parser.add_argument("--skip-suite", action="store_true", help="do not run the suite to measure its own files")
    parser.add_argument("--keep", type=Path, help="build the files and reports here, and keep them")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = args.keep or Path(scratch_dir)
        if not args.skip_suite:
            suite_sizes(scratch)
            print()
        rows = []
        for shape, make in SHAPES.items():
            folder = scratch / shape.replace(" ", "-")
            paths = write_shape(folder / "results", make)
            size = max(p.stat().st_size for p in paths)
            out = folder / "compat"
            report = median_of(args.repeat, ["-m", "cpugpu_conformance", "report", str(folder / "results"),
                                             "--out", str(out)])
            gate = median_of(args.repeat, ["-m", "cpugpu_conformance", "gate", "--baseline", str(paths[0]),
                                           "--candidate", str(paths[1])])
            compat = out / "compat.json"
            rows.append((shape, size, report, gate, compat.stat().st_size if compat.exists() else None))

    (_, _, base_report, base_gate, _) = rows[0]
    print(f"{'three files of':<15} {'file MB':>8} | {'report MB':>9} {'x':>5} {'s':>6} {'x':>5} {'exit':>4} "
          f"{'compat MB':>9} | {'gate MB':>7} {'x':>5} {'s':>6} {'x':>5} {'exit':>4}")
    for shape, size, report, gate, compat in rows:
        compat_mb = f"{compat / 1e6:9.2f}" if compat is not None else f"{'-':>9}"
        print(f"{shape:<15} {size / 1e6:8.2f} | {report[0]:9.0f} {report[0] / base_report[0]:5.1f} {report[1]:6.2f} "
              f"{report[1] / base_report[1]:5.1f} {report[2]:>4} {compat_mb} | {gate[0]:7.0f} "
              f"{gate[0] / base_gate[0]:5.1f} {gate[1]:6.2f} {gate[1] / base_gate[1]:5.1f} {gate[2]:>4}")
    print("\nx: the ratio to the same command over three ordinary files (the first row), measured in this run. "
          "Exit 2 where the shape is refused (one line naming the file and why).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
