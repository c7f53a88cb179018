"""What the tests of the cell runner share: a fake interpreter (it answers the torch probe
like Python, with a fake torch package of the version a test chooses, and does whatever
the test asks instead of running pytest), a cell spec, and what a run left on disk."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cpugpu_conformance import results
from cpugpu_conformance.runner import CellSpec
from cpugpu_conformance.runner.matrix import Release

ROOT = Path(__file__).resolve().parents[1]


def fake_torch(where: Path, version: str = "2.15.0+cu130", cuda: str | None = "13.0") -> Path:
    pkg = where / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('a fake torch, only version.py is real')\n")
    (pkg / "version.py").write_text(textwrap.dedent(f"""\
        from typing import Optional
        __version__ = {version!r}
        cuda: Optional[str] = {cuda!r}
        git_version = 'abc123'
    """))
    return where


def fake_python(tmp_path: Path, behaviour: str, *, torch_version: str = "2.15.0+cu130", cuda: str | None = "13.0") -> Path:
    """An interpreter whose torch is fake and whose suite run (`-c LAUNCHER conformance ...` or
    `-m pytest conformance ...`) runs ``behaviour`` (argv kept); any other `-c CODE` is Python's."""
    site = fake_torch(tmp_path / "site", torch_version, cuda)
    script = tmp_path / "behaviour.py"
    script.write_text(textwrap.dedent(behaviour))
    exe = tmp_path / "python"
    exe.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        export PYTHONPATH={site}
        if [ "$1" = "-c" ] && [ "$3" != "conformance" ]; then exec {sys.executable} "$@"; fi
        shift 2  # -c LAUNCHER, or -m pytest
        exec {sys.executable} {script} "$@"
    """))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def spec(tmp_path: Path, *, release: Release | None = None, limit: float = 60, device: str | None = "cpu",
         name: str = "torch-2.15.0-cpu") -> CellSpec:
    return CellSpec(name=name, release=release or Release("2.15.0"), device=device, hypothesis_profile="ci", time_limit_s=limit,
                    results_dir=tmp_path / "results", project_dir=ROOT)


def unreleased_matrix(tmp_path: Path, rest: str) -> Path:
    """tmp_path/matrix.yaml for this interpreter's Python, comparing releases that do not exist (98.0.0
    against 99.0.0), with ``rest`` (its other keys) after: the head the matrix and nox tests share."""
    path = tmp_path / "matrix.yaml"
    path.write_text(f'python: "{sys.version_info.major}.{sys.version_info.minor}"\n'
                    'baseline: "98.0.0"\ncandidates: ["99.0.0"]\n' + rest)
    return path


# Writes a completed result where the suite would (argv: conformance --cell-result PATH --cell-name NAME ...):
# promise 1 asked for (--promise 1) and checked on cpu, with the given verdict.
WRITE_RESULT = """\
    import sys
    sys.path.insert(0, {src!r})
    from cpugpu_conformance import results
    args = sys.argv[1:]
    path, name = args[args.index("--cell-result") + 1], args[args.index("--cell-name") + 1]
    verdict = {verdict!r}
    on_cpu = {{"verdict": verdict, "passed": int(verdict == "passed"), "failed": int(verdict == "failed"), "skipped": 0}}
    if verdict == "failed":
        on_cpu["failures"] = [{{"test": "test_shape", "message": "AssertionError: shape differs"}}]
    results.CellResult.new(
        name, "completed", environment={{"torch": {torch!r}}}, duration_s=1.5,
        requested={{"promises": ["1"], "device": "cpu"}},
        devices={{"cpu": {{"status": "tested"}}, "cuda": {{"status": "not_requested", "reason": "--device cpu"}}}},
        promises={{"1": {{"title": "Shape and dtype", "devices": {{"cpu": on_cpu, "cuda": {{"verdict": "not_requested"}}}}}}}},
        counts={{"passed": int(verdict == "passed"), "failed": int(verdict == "failed"), "skipped": 0}}).write(path)
    print("suite args:", " ".join(args))
    sys.exit(0 if verdict == "passed" else 1)
"""


def writes_result(verdict: str = "passed", torch: str = "2.15.0+cu130") -> str:
    return WRITE_RESULT.format(src=str(ROOT / "src"), verdict=verdict, torch=torch)


def on_disk(s: CellSpec) -> results.CellResult:
    return results.CellResult.load(s.result_path)


def leftovers(s: CellSpec) -> list[str]:
    """Hidden files in the results folder: staging files, locks, temporary writes."""
    return sorted(p.name for p in s.results_dir.glob(".*"))


def wait_for(condition: Callable[[], object], what: str, timeout: float = 30) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"waited {timeout:g} s for {what}")


def is_gone(pid: int) -> bool:
    """Not running: no such process, or a zombie waiting for init to reap it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def read_one_line_and_hang_up(command: list[str], *, timeout: float, cwd: Path | None = None) -> tuple[int, str]:
    """Run ``command``, read its first line of output and close the pipe, as ``| head -1`` does;
    its exit code and stderr once it has ended (killed if it has not within ``timeout``)."""
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline()
        proc.stdout.close()
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    return proc.returncode, err
