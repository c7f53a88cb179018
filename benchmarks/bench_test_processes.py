"""What one of the project's tests pays for a suite run, the unit most of `nox -s tests` is made of,
three ways, against `python -c "import torch"` in the same run:

- cold:   a subprocess compiling everything (an empty PYTHONPYCACHEPREFIX), as each did on a
          machine with PYTHONDONTWRITEBYTECODE before tools/warm_bytecode.py;
- warmed: a subprocess reading the bytecode tools/warm_bytecode.py wrote (run it first);
- forked: from tests/forkserver.py's server, as run_suite does now.

    python benchmarks/bench_test_processes.py [--repeat 3]

The run is the suite on the reference, promise 3, on cpu (tests/test_variants.py's kind of run).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from timing import median_seconds

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import forkserver  # noqa: E402  (tests/, put on the path above)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, the median taken (default 3)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, not {args.repeat}")

    with tempfile.TemporaryDirectory(prefix="bench-test-processes-") as tmp:
        suite = ["-m", "pytest", str(REPO / "conformance"), "-q", "-p", "no:cacheprovider",
                 "--hypothesis-profile=ci", "--promise", "3", "--device", "cpu",
                 "--cell-result", str(Path(tmp) / "cell.json")]
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "PYTHONPYCACHEPREFIX")}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        cold_env = {**env, "PYTHONPYCACHEPREFIX": str(Path(tmp) / "empty-cache")}

        def plain(command: list[str], environment: dict[str, str]) -> None:
            subprocess.run([sys.executable, *command], cwd=REPO, env=environment, check=True, capture_output=True)

        def forked() -> None:
            done = forkserver.run_python(suite, cwd=REPO, env=env, timeout=600)
            if done.returncode != 0:
                raise SystemExit(f"bench_test_processes: the forked suite run exited {done.returncode}:\n{done.stdout[-2000:]}")

        forked()  # the server's own start, once per test worker, is not what each run pays
        baseline = median_seconds(lambda: plain(["-c", "import torch"], env), args.repeat)
        rows = [
            ("cold subprocess", median_seconds(lambda: plain(suite, cold_env), args.repeat)),
            ("warmed subprocess", median_seconds(lambda: plain(suite, env), args.repeat)),
            ("forked from the server", median_seconds(forked, args.repeat)),
        ]
    print(f'python -c "import torch" (warmed): {baseline:.2f} s, the baseline')
    for name, seconds in rows:
        print(f"{name:24} {seconds:6.2f} s  {seconds / baseline:5.2f}x the baseline  {seconds / rows[0][1]:5.2f}x cold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
