"""Run the conformance suite in a subprocess, as a user would, and read its result file."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import forked_exec
import forkserver

from cpugpu_conformance import results

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


@dataclass
class SuiteRun:
    returncode: int
    stdout: str
    stderr: str
    result: dict[str, Any] | None

    def verdict(self, promise: str, device: str = "cpu") -> str:
        assert self.result is not None, f"no result file; stderr: {self.stderr[-2000:]}"
        return self.result["promises"][promise]["devices"][device]["verdict"]

    def failures(self, promise: str, device: str = "cpu") -> list[dict[str, Any]]:
        assert self.result is not None
        return self.result["promises"][promise]["devices"][device].get("failures", [])

    @property
    def cell(self) -> results.CellResult:
        """The result file through the model: validated, with outcome() and answer()."""
        assert self.result is not None, f"no result file; stderr: {self.stderr[-2000:]}"
        return results.CellResult(self.result, "cell.json")


def default_sigint() -> None:
    """For preexec_fn: the child takes SIGINT as Python does by default (KeyboardInterrupt).
    A test run started as a background job ignores SIGINT, and its children inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def suite_command(result_path: Path, *args: str, profile: str = "ci") -> list[str]:
    return [
        sys.executable, "-m", "pytest", str(REPO / "conformance"), "-p", "no:cacheprovider", "-q",
        f"--hypothesis-profile={profile}", "--cell-result", str(result_path), *args,
    ]


def suite_env() -> dict[str, str]:
    """The caller's environment, minus what would change how the suite runs."""
    return {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}


def run_suite(tmp_path: Path, *args: str, profile: str = "ci", timeout: float = 600, fork: bool = True,
              env: dict[str, str] | None = None) -> SuiteRun:
    """`python -m pytest conformance ...` from the fork server (forkserver.py: the same command, less
    the imports every run repeats); fork=False for a test about what the process itself imports.
    ``env``: the environment (default: suite_env())."""
    result_path = tmp_path / "cell.json"
    cmd = suite_command(result_path, *args, profile=profile)
    env = suite_env() if env is None else env
    if fork:
        proc = forkserver.run_python(cmd[1:], cwd=REPO, env=env, timeout=timeout)
    else:
        proc = subprocess.run(cmd, cwd=REPO, env=forked_exec.fresh(env), capture_output=True, text=True, timeout=timeout)
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    return SuiteRun(proc.returncode, proc.stdout, proc.stderr, result)


def run_pytest(args: Sequence[str], *, cwd: Path, env: dict[str, str], timeout: float,
               fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """`python -m pytest ARGS` from the fork server; a fresh interpreter when asked (fresh: a test of
    what the process imports). Under `-n` the controller is a subprocess of the caller's, forked
    where a server serves the environment (forked_exec.py), as its workers are."""
    command = ["-m", "pytest", *args]
    if fresh:
        return subprocess.run([sys.executable, *command], cwd=cwd, env=forked_exec.fresh(env), capture_output=True,
                              text=True, timeout=timeout)
    if "-n" not in args:
        return forkserver.run_python(command, cwd=cwd, env=env, timeout=timeout)
    return subprocess.run([sys.executable, *command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def run_script(tmp_path: Path, source: str, name: str = "reproducer.py") -> subprocess.CompletedProcess[str]:
    """`python NAME` in tmp_path (a reproducer, as a user runs it), from the fork server."""
    path = tmp_path / name
    path.write_text(source)
    return forkserver.run_python([str(path)], cwd=tmp_path, timeout=120)


# A correct buffer whose constructor says a test is running (by creating MARKER, which holds
# the pid of the process running it), then waits to be interrupted or killed: a suite run
# caught in the middle of a test.
SLEEPING_IMPL = '''
import os
import pathlib
import time

from cpugpu_conformance.reference import CpuGpuBuffer

MARKER = pathlib.Path({marker!r})


class Sleeper(CpuGpuBuffer):
    def __init__(self, *size, **kwargs):
        ready = MARKER.with_name(MARKER.name + ".part")
        ready.write_text(str(os.getpid()))
        ready.replace(MARKER)
        time.sleep(300)
        super().__init__(*size, **kwargs)
'''


@dataclass
class Background:
    """A suite run in a subprocess, caught in the middle of its first test."""

    proc: subprocess.Popen[bytes]
    marker: Path
    log: Path

    def wait_until_testing(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not self.marker.exists():
            assert self.proc.poll() is None, f"the suite exited {self.proc.returncode} early:\n{self.output()}"
            assert time.monotonic() < deadline, f"no test started within {timeout} s:\n{self.output()}"
            time.sleep(0.1)

    def finish(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout=timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=60)


def run_command(result_path: Path, *args: str, profile: str = "ci") -> list[str]:
    """`cpugpu-conformance run` with the same arguments as suite_command."""
    return [sys.executable, "-m", "cpugpu_conformance", "run", "-q", f"--hypothesis-profile={profile}",
            "--cell-result", str(result_path), *args]


def start_sleeping_suite(tmp_path: Path, result_path: Path, *args: str, via_run: bool = False) -> Background:
    """Start the suite (`pytest conformance`, or `cpugpu-conformance run`) on a class that blocks
    in its constructor (the original-bug test runs first), taking SIGINT as it would in a terminal."""
    marker = tmp_path / "testing.marker"
    impl = tmp_path / "sleeping_impl.py"
    impl.write_text(SLEEPING_IMPL.format(marker=str(marker)))
    log = tmp_path / "background.log"
    command = run_command if via_run else suite_command
    cmd = command(result_path, "--impl", f"{impl}:Sleeper", "--promise", "3", "--device", "cpu", *args)
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=suite_env(), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, preexec_fn=default_sigint)
    return Background(proc, marker, log)


# --- the suite as installed from the wheel, in environments of its own

TORCH_FOR_ENVS = "torch==2.13.0"  # the torch the project's own tests use (noxfile TESTS_TORCH)
PRE_FIX_IMPL = "import torch\n\n\n{source}"  # variants.PreFixCpuGpuBuffer, as a user's own file


def find_uv() -> str:
    """uv from the `uv` package (the test extra), or from PATH."""
    try:
        from uv import find_uv_bin
    except ImportError:
        found = shutil.which("uv")
        assert found, "uv is needed to build the wheel and make environments: pip install -e '.[test]'"
        return found
    return find_uv_bin()


def run_uv(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """uv from its cache first (seconds, no network), then with the index if the cache lacks something."""
    for extra in (["--offline"], []):
        proc = subprocess.run([find_uv(), *args, *extra], capture_output=True, text=True, timeout=timeout, env=suite_env())
        if proc.returncode == 0:
            return proc
    raise AssertionError(f"uv {' '.join(args)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")


def build_wheel(out: Path) -> Path:
    """The project's wheel, built from this checkout as a release would be."""
    run_uv("build", "--wheel", "--out-dir", str(out), str(REPO))
    [wheel] = out.glob("cpugpu_conformance-*.whl")
    return wheel


def make_env(where: Path, *requirements: str, no_deps: Sequence[str] = ()) -> Path:
    """A fresh virtual environment holding ``requirements`` (and ``no_deps``, installed without
    their dependencies); returns its bin/ folder."""
    run_uv("venv", "--python", sys.executable, str(where))
    python = where / "bin" / "python"
    run_uv("pip", "install", "--python", str(python), *requirements)
    if no_deps:
        run_uv("pip", "install", "--python", str(python), "--no-deps", *no_deps)
    return where / "bin"


def outside_env() -> dict[str, str]:
    """suite_env() without anything that would let an environment see this checkout."""
    return {k: v for k, v in suite_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def run_installed(bin_dir: Path, cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`cpugpu-conformance ARGS` from the environment's console script, in ``cwd``."""
    return subprocess.run([str(bin_dir / "cpugpu-conformance"), *args], cwd=cwd, env=outside_env(),
                          capture_output=True, text=True, timeout=timeout)


# What a user's project may hold where they run the suite: none of it may change the run.
HOSTILE_PYTEST_INI = """\
[pytest]
addopts = -x -k no_test_has_this_name -p no:hypothesispytest --strict-config
python_files = nothing_*.py
testpaths = elsewhere
filterwarnings = error
"""
HOSTILE_CONFTEST = 'raise RuntimeError("the conftest.py of the directory the suite was run from was loaded")\n'


def hostile_cwd(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    (where / "pytest.ini").write_text(HOSTILE_PYTEST_INI)
    (where / "conftest.py").write_text(HOSTILE_CONFTEST)
    return where
