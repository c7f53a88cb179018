"""Run one matrix cell: install its torch, check it got that torch, run the suite, keep a verdict.

Whatever happens, the cell ends with results/<cell>.json and results/<cell>.log:
the suite's own result when pytest finished (exit 0 or 1), otherwise a result with
status not_installed, wrong_torch, timed_out, crashed or error and a ``detail`` saying
why (the installer's error, the tail of the log). A cell that did not run never looks
like one that passed. The noxfile's conformance and bisect sessions both come here.

    python -m cpugpu_conformance.cell summary [RESULTS_DIR] [--cells A,B]

prints the table of every cell and exits 1 when any of them is not a clean pass.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from cpugpu_conformance import results
from cpugpu_conformance.matrix import Release, release_key

LOG_TAIL_LINES = 40
KILL_GRACE_S = 5.0
# pytest: 0 all passed, 1 some failed. Anything else means the suite did not finish its job.
PYTEST_FINISHED = (0, 1)
PYTEST_EXIT_NAMES = {2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected"}

# Runs inside the cell's interpreter. Reads torch/version.py instead of importing torch,
# which takes seconds; the suite's own result file later records the torch it imported.
_PROBE = r"""
import importlib.util, json, os, platform, runpy, sys
out = {"python": platform.python_version(), "prefix": sys.prefix, "platform": platform.platform()}
spec = importlib.util.find_spec("torch")
locations = list(spec.submodule_search_locations or []) if spec else []
if locations:
    out["torch_location"] = os.path.realpath(locations[0])
    try:
        v = runpy.run_path(os.path.join(locations[0], "version.py"))
        out.update(torch=v.get("__version__"), torch_git_version=v.get("git_version"), torch_cuda=v.get("cuda"))
    except Exception as exc:
        out["torch_error"] = f"{type(exc).__name__}: {exc}"
try:
    from importlib.metadata import version
    out["numpy"] = version("numpy")
except Exception:
    out["numpy"] = None
print(json.dumps(out))
"""


# ---------------------------------------------------------------------------- environments


def find_uv() -> str | None:
    """uv on PATH, or the one the `uv` package ships (nox's own fallback)."""
    found = shutil.which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found]

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return None


def env_python(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def create_env(env_dir: Path, python_version: str) -> Path:
    """A virtual environment at env_dir (reused when it exists); returns its interpreter."""
    python = env_python(env_dir)
    if python.exists():
        return python
    uv = find_uv()
    if uv:
        cmd = [uv, "venv", "--quiet", "--python", python_version, str(env_dir)]
    else:
        base = shutil.which(f"python{python_version}") or sys.executable
        cmd = [base, "-m", "venv", str(env_dir)]
    subprocess.run(cmd, check=True)
    return python


@dataclass
class Install:
    ok: bool
    command: list[str]
    output: str
    seconds: float

    def error(self, lines: int = LOG_TAIL_LINES) -> str:
        tail = "\n".join(self.output.strip().splitlines()[-lines:])
        return f"{' '.join(self.command)} failed:\n{tail}"


def install_command(python: Path, release: Release, *, index_url: str | None, requirements_file: Path | None) -> list[str]:
    """One resolver run for torch, its NumPy, the extras and (from a requirements file) the project.

    The project does not depend on torch or numpy, so adding it cannot move them. uv
    rebuilds a local project named on its command line every time, but one named in a
    requirements file only when its pyproject.toml changed: 0.1 s instead of 0.8 s for
    an environment that is already complete. The index is an *extra* one: uv tries it
    first (torch comes from it when it has it) and falls back to the ordinary index.
    """
    uv = find_uv()
    cmd = [uv, "pip", "install", "--python", str(python)] if uv else [str(python), "-m", "pip", "install"]
    cmd += release.requirements()
    if requirements_file:
        cmd += ["-r", str(requirements_file)]
    if index_url:
        cmd += ["--extra-index-url", index_url]
    return cmd


def install(python: Path, release: Release, *, index_url: str | None = None, project: Path | None = None,
            log_path: Path | None = None) -> Install:
    """Install a release (and the project, editable) into the environment of ``python``; never raises."""
    with tempfile.TemporaryDirectory(prefix="cell-install-") as tmp:
        requirements_file = None
        if project:
            requirements_file = Path(tmp) / "project.txt"
            requirements_file.write_text(f"-e {Path(project).resolve()}\n", encoding="utf-8")
        cmd = install_command(python, release, index_url=index_url, requirements_file=requirements_file)
        print(f"cell: {' '.join(cmd)}", flush=True)
        started = time.monotonic()
        proc = subprocess.run(cmd, check=False, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    outcome = Install(proc.returncode == 0, cmd, proc.stdout, time.monotonic() - started)
    sys.stdout.write(proc.stdout)
    sys.stdout.flush()
    if log_path:
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"$ {' '.join(cmd)}\n{proc.stdout}")
    return outcome


# ---------------------------------------------------------------------------- which torch


def probe_torch(python: Path | str) -> dict[str, Any]:
    """The torch (and numpy) the interpreter would import, read without importing torch."""
    proc = subprocess.run([str(python), "-c", _PROBE], check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"probe_error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return json.loads(proc.stdout)


def base_version(version: str) -> str:
    return version.split("+", 1)[0]


def torch_mismatch(probe: dict[str, Any], release: Release, device: str | None, env_dir: Path | None = None) -> str | None:
    """Why the environment does not hold the torch the cell asked for, or None when it does."""
    asked = f"torch {release.version}" + (f"+{release.build}" if release.build else "")
    if "probe_error" in probe:
        return f"asked for {asked}; cannot inspect the environment: {probe['probe_error']}"
    found = probe.get("torch")
    if not found:
        why = probe.get("torch_error") or "torch is not importable"
        return f"asked for {asked}; {why} (python {probe.get('prefix')})"
    where = probe.get("torch_location")
    if base_version(found) != release.version:
        return f"asked for {asked}, the environment has torch {found} ({where})"
    local = found.partition("+")[2] or None
    if release.build and local != release.build:
        return f"asked for {asked}, the environment has the {local or 'default'} build: torch {found} ({where})"
    if device == "cuda" and not probe.get("torch_cuda"):
        return f"asked for torch {release.version} to test cuda, the environment has a CPU-only build: torch {found} ({where})"
    if env_dir is not None and where and not Path(where).is_relative_to(Path(env_dir).resolve()):
        return f"asked for {asked} from {env_dir}, torch is imported from outside it: {where}"
    if release.numpy and probe.get("numpy"):
        try:
            if Version(probe["numpy"]) not in SpecifierSet(release.numpy):
                return f"asked for numpy{release.numpy} with {asked}, the environment has numpy {probe['numpy']}"
        except (InvalidSpecifier, InvalidVersion):
            pass
    return None


def _environment(probe: dict[str, Any]) -> dict[str, Any]:
    keys = ("torch", "torch_git_version", "torch_cuda", "numpy", "python", "platform")
    return {k: probe[k] for k in keys if k in probe}


# ---------------------------------------------------------------------------- the test process


@dataclass
class SuiteRun:
    returncode: int | None  # None: killed at the time limit
    seconds: float
    tail: list[str] = field(default_factory=list)

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the test process and anything it started (it leads its own process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def run_suite(cmd: Sequence[str], *, log_path: Path, time_limit_s: float, cwd: Path | None = None,
              env: dict[str, str] | None = None, echo: bool = True) -> SuiteRun:
    """Run cmd, tee its output to log_path (appending) and stdout, kill it at the time limit."""
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")  # the log tail must be current at a crash
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
    started = time.monotonic()
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(map(str, cmd))}\n".encode())
        log.flush()
        proc = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd=cwd, env=env, start_new_session=True)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                log.flush()
                text = line.decode("utf-8", "replace")
                tail.append(text.rstrip("\n"))
                if echo:
                    sys.stdout.write(text)
                    sys.stdout.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        returncode: int | None
        try:
            returncode = proc.wait(timeout=time_limit_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            returncode = None
        except BaseException:  # Ctrl-C: leave no test process behind
            _kill_group(proc)
            raise
        else:
            _kill_group(proc)  # stray children that outlived pytest
        reader.join(timeout=KILL_GRACE_S)
    return SuiteRun(returncode, time.monotonic() - started, list(tail))


def _exit_description(returncode: int) -> str:
    signum = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else None
    if signum:
        try:
            return f"killed by {signal.Signals(signum).name}"
        except ValueError:
            return f"killed by signal {signum}"
    return f"pytest exited {returncode} ({PYTEST_EXIT_NAMES.get(returncode, 'unexpected')})"


def _with_tail(headline: str, tail: list[str]) -> str:
    return headline + ("; last lines of the log:\n" + "\n".join(tail) if tail else "; the log is empty")


# ---------------------------------------------------------------------------- one cell


@dataclass
class CellSpec:
    """Everything a cell run needs to know besides its interpreter."""

    name: str
    release: Release | None  # None: whatever torch is installed (the `installed` session)
    device: str | None  # passed as --device; None leaves the suite's default
    hypothesis_profile: str
    time_limit_s: float
    results_dir: Path
    project_dir: Path
    index_url: str | None = None
    pytest_args: tuple[str, ...] = ()

    @property
    def result_path(self) -> Path:
        return self.results_dir / f"{self.name}.json"

    @property
    def log_path(self) -> Path:
        return self.results_dir / f"{self.name}.log"

    def requested(self) -> dict[str, Any]:
        asked: dict[str, Any] = {"device": self.device or "default", "hypothesis_profile": self.hypothesis_profile,
                                 "time_limit_s": self.time_limit_s}
        if self.release:
            asked.update(torch=self.release.version, numpy=self.release.numpy, build=self.release.build,
                         requirements=self.release.requirements(), index_url=self.index_url)
        return asked


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _finish(spec: CellSpec, result: dict[str, Any]) -> dict[str, Any]:
    results.write_atomic(spec.result_path, result)
    print(f"cell {spec.name}: {describe(result)} -> {spec.result_path}", flush=True)
    return result


def install_and_run(spec: CellSpec, python: Path, env_dir: Path | None = None) -> dict[str, Any]:
    """Install the cell's release into the environment of ``python``, then run_cell."""
    assert spec.release is not None
    spec.results_dir.mkdir(parents=True, exist_ok=True)
    spec.log_path.write_text("")  # a fresh log per run
    started, clock = _now(), time.monotonic()
    done = install(python, spec.release, index_url=spec.index_url, project=spec.project_dir, log_path=spec.log_path)
    if not done.ok:
        return _finish(spec, results.new_result(
            spec.name, "not_installed", detail=done.error(), requested=spec.requested(),
            started=started, duration_s=round(time.monotonic() - clock, 3)))
    return run_cell(spec, python, env_dir=env_dir, fresh_log=False)


def run_cell(spec: CellSpec, python: Path | str, *, env_dir: Path | None = None, fresh_log: bool = True) -> dict[str, Any]:
    """Check the torch, run the suite in its own process, write the cell's result file."""
    spec.results_dir.mkdir(parents=True, exist_ok=True)
    if fresh_log:
        spec.log_path.write_text("")
    started, clock = _now(), time.monotonic()
    probe = probe_torch(python)
    environment = _environment(probe)

    def fault(status: str, detail: str) -> dict[str, Any]:
        return _finish(spec, results.new_result(
            spec.name, status, detail=detail, requested=spec.requested(), environment=environment,
            started=started, duration_s=round(time.monotonic() - clock, 3), hypothesis_profile=spec.hypothesis_profile))

    if spec.release is not None:
        problem = torch_mismatch(probe, spec.release, spec.device, env_dir)
        if problem:
            return fault("wrong_torch", problem)

    # The suite writes here; only a finished run's file is moved into place, so an old
    # result never survives a run that died.
    staging = spec.results_dir / f".{spec.name}.json.part"
    staging.unlink(missing_ok=True)
    cmd = [str(python), "-m", "pytest", "conformance", "--cell-result", str(staging.resolve()),
           "--cell-name", spec.name, "--hypothesis-profile", spec.hypothesis_profile, "-p", "no:cacheprovider"]
    if spec.device:
        cmd += ["--device", spec.device]
    cmd += list(spec.pytest_args)
    run = run_suite(cmd, log_path=spec.log_path, time_limit_s=spec.time_limit_s, cwd=spec.project_dir)
    try:
        if run.timed_out:
            return fault("timed_out", _with_tail(f"killed after the cell's time limit of {spec.time_limit_s:g} s", run.tail))
        if run.returncode not in PYTEST_FINISHED:
            status = "crashed" if run.returncode < 0 or run.returncode > 128 else "error"
            return fault(status, _with_tail(_exit_description(run.returncode), run.tail))
        try:
            result = results.load(staging)
        except results.ResultFileError as exc:
            return fault("error", _with_tail(f"pytest exited {run.returncode} without a usable result file ({exc})", run.tail))
        result.setdefault("requested", spec.requested())
        got = (result.get("environment") or {}).get("torch")
        if spec.release is not None and got and base_version(str(got)) != spec.release.version:
            # The pre-check read torch/version.py; this is the torch the suite really imported.
            for key in ("promises", "counts", "devices"):
                result.pop(key, None)
            result.update(status="wrong_torch", detail=f"asked for torch {spec.release.version}, the suite imported torch {got}")
        return _finish(spec, result)
    finally:
        staging.unlink(missing_ok=True)


# ---------------------------------------------------------------------------- summary


@dataclass
class Row:
    cell: str
    torch: str
    device: str
    status: str
    verdicts: dict[str, int]
    duration_s: float | None
    ok: bool


def verdict_counts(result: dict[str, Any]) -> dict[str, int]:
    """Promise x device verdicts of a completed cell."""
    counts = collections.Counter({"passed": 0, "failed": 0, "skipped": 0, "recorded": 0})
    for promise in (result.get("promises") or {}).values():
        for on_device in (promise.get("devices") or {}).values():
            counts[on_device.get("verdict", "skipped")] += 1
    return dict(counts)


def is_ok(result: dict[str, Any]) -> bool:
    """A clean pass: the suite finished and no promise failed on any device."""
    return (result.get("status") == "completed" and verdict_counts(result)["failed"] == 0
            and (result.get("counts") or {}).get("failed", 0) == 0)


def describe(result: dict[str, Any]) -> str:
    if result.get("status") != "completed":
        return result.get("status", "?") + ": " + ((result.get("detail") or "").splitlines() or [""])[0]
    v = verdict_counts(result)
    word = "passed" if is_ok(result) else "FAILED"
    return f"{word} ({v['passed']} passed, {v['failed']} failed, {v['skipped']} skipped, {v['recorded']} recorded)"


def _row(name: str, path: Path) -> Row:
    try:
        result = results.load(path)
    except results.ResultFileError:
        named = re.fullmatch(r"torch-([0-9.]+)-(\w+)", name)  # what the cell would have been
        torch, device = named.groups() if named else ("?", "?")
        return Row(name, torch, device, "unreadable" if path.exists() else "no result", {}, None, False)
    asked = result.get("requested") or {}
    env = result.get("environment") or {}
    torch = asked.get("torch") or (base_version(str(env["torch"])) if env.get("torch") else "?")
    device = asked.get("device") or ",".join(d for d, s in (result.get("devices") or {}).items() if s.get("status") == "tested") or "?"
    return Row(result["cell"], torch, device, result["status"], verdict_counts(result) if result["status"] == "completed" else {},
               result.get("duration_s"), is_ok(result))


def summarize(results_dir: Path, cells: Iterable[str] | None = None) -> list[Row]:
    """One row per cell: the cells named (missing files show as such), or every result file."""
    results_dir = Path(results_dir)
    names = list(cells) if cells is not None else sorted(p.stem for p in results_dir.glob("*.json"))
    rows = [_row(name, results_dir / f"{name}.json") for name in names]
    return sorted(rows, key=lambda r: (_sort_key(r.torch), r.device, r.cell))


def _sort_key(torch: str) -> tuple[int, ...]:
    try:
        return release_key(torch)
    except ValueError:
        return (1 << 30,)


def format_summary(rows: list[Row]) -> str:
    header = ("cell", "torch", "device", "status", "passed", "failed", "skipped", "recorded", "duration")
    body = []
    for r in rows:
        mark = ("passed" if r.ok else "FAILED") if r.status == "completed" else r.status.upper().replace("_", " ")
        counts = [str(r.verdicts[k]) if r.verdicts else "-" for k in ("passed", "failed", "skipped", "recorded")]
        body.append((r.cell, r.torch, r.device, mark, *counts, f"{r.duration_s:.1f} s" if r.duration_s is not None else "-"))
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(str(v).ljust(w) if i < 4 else str(v).rjust(w) for i, (v, w) in enumerate(zip(line, widths)))
             for line in [header, *body]]
    bad = sum(not r.ok for r in rows)
    lines.append(f"{len(rows)} cells, {len(rows) - bad} clean, {bad} not (promise counts are promise x device verdicts)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cpugpu_conformance.cell")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summary", help="table of the cells' outcomes; exit 1 unless every cell passed cleanly")
    s.add_argument("results_dir", nargs="?", default="results")
    s.add_argument("--cells", help="comma-separated cell names (default: every results_dir/*.json)")
    args = parser.parse_args(argv)
    rows = summarize(Path(args.results_dir), args.cells.split(",") if args.cells else None)
    if not rows:
        print(f"{args.results_dir}: no result files", file=sys.stderr)
        return 2
    print(format_summary(rows))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
