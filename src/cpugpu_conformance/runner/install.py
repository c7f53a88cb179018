"""Environments and the installer: one uv environment per torch, the install with its
progress (each line of the installer's output as it comes, a heartbeat while it is quiet),
and the check that the environment holds the torch the cell asked for (read without
importing torch).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from cpugpu_conformance.output import say
from cpugpu_conformance.runner.matrix_model import Release
from cpugpu_conformance.runner.processes import KILL_GRACE_S, LOG_TAIL_LINES, kill_group

INSTALL_KEPT_LINES = 200  # of the installer's output, for the not_installed detail
HEARTBEAT_S = 10.0  # a quiet installer (a 3 GB download) still gets a line this often

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


def install_command(python: Path, release: Release, *, index_url: str | None, requirements_file: Path | None,
                    find_links: str | None = None, offline: bool = False, also: Sequence[str] = ()) -> list[str]:
    """One resolver run for torch, its NumPy, the extras and (from a requirements file) the project.

    The project does not depend on torch or numpy, so adding it cannot move them. uv
    rebuilds a local project named on its command line every time, but one named in a
    requirements file only when its pyproject.toml changed: 0.1 s instead of 0.8 s for
    an environment that is already complete. The index is an *extra* one: uv tries it
    first (torch comes from it when it has it) and falls back to the ordinary index.
    A find-links folder is searched too; offline, nothing but it and uv's cache is.
    A pre-release torch comes with ``--prerelease explicit``: allowed for torch, pinned to
    one, whatever UV_PRERELEASE says, while NumPy and the rest stay on final releases
    (``allow`` would take a NumPy release candidate too). ``also``: more requirements (an installed
    package's own, source.InstalledPackage.requirements).
    """
    if release.is_latest:
        raise ValueError("torch latest must be resolved to a release before it is installed (resolve_latest)")
    uv = find_uv()
    cmd = [uv, "pip", "install", "--python", str(python)] if uv else [str(python), "-m", "pip", "install"]
    cmd += [*release.requirements(), *also]
    if requirements_file:
        cmd += ["-r", str(requirements_file)]
    if index_url:
        cmd += ["--extra-index-url", index_url]
    if find_links:
        cmd += ["--find-links", find_links]
    if offline:
        cmd += ["--offline"] if uv else ["--no-index"]
    if release.is_prerelease:
        cmd += ["--prerelease", "explicit"] if uv else ["--pre"]
    return cmd


def install(python: Path, release: Release, *, index_url: str | None = None, find_links: str | None = None,
            offline: bool = False, project: Path | None = None, also: Sequence[str] = (),
            log_path: Path | None = None, heartbeat_s: float = HEARTBEAT_S) -> Install:
    """Install a release (the checkout ``project``, editable, and the requirements ``also``) into the
    environment of ``python``; never raises."""
    with tempfile.TemporaryDirectory(prefix="cell-install-") as tmp:
        requirements_file = None
        if project:
            requirements_file = Path(tmp) / "project.txt"
            requirements_file.write_text(f"-e {Path(project).resolve()}\n", encoding="utf-8")
        cmd = install_command(python, release, index_url=index_url, requirements_file=requirements_file,
                              find_links=find_links, offline=offline, also=also)
        return run_installer(cmd, log_path=log_path, heartbeat_s=heartbeat_s)


# uv's lines without a terminal (no progress bars): "Downloading torch (846.9MiB)", " Downloaded torch".
_DOWNLOADING = re.compile(r"^\s*Downloading (\S+) \(([^)]*)\)\s*$")
_DOWNLOADED = re.compile(r"^\s*Downloaded (\S+)\s*$")


@dataclass
class _InstallProgress:
    """What the installer has said so far: its last lines, and the downloads it has not finished."""

    started: float = field(default_factory=time.monotonic)
    kept: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=INSTALL_KEPT_LINES))
    downloading: dict[str, str] = field(default_factory=dict)  # package -> size

    def add(self, line: str) -> None:
        self.kept.append(line)
        if found := _DOWNLOADING.match(line):
            self.downloading[found[1]] = found[2]
        elif found := _DOWNLOADED.match(line):
            self.downloading.pop(found[1], None)

    def heartbeat(self, log_path: Path | None) -> str:
        parts = [f"{time.monotonic() - self.started:.0f} s"]
        if self.downloading:
            parts.append("downloading " + ", ".join(f"{name} ({size})" for name, size in self.downloading.items()))
        if log_path:
            parts.append(f"log: {log_path}")
        return f"cell: still installing ({'; '.join(parts)})"


def run_installer(cmd: Sequence[str], *, log_path: Path | None = None, heartbeat_s: float = HEARTBEAT_S,
                  env: dict[str, str] | None = None) -> Install:
    """Run the installer, passing each line of its output to stdout and the log as it comes.

    While it is quiet (a download of gigabytes prints nothing for a minute) a heartbeat
    line says so every ``heartbeat_s`` on stdout; heartbeats stay out of the log and the
    kept tail. Never raises for the installer's failure; an exception here (an interrupt)
    stops the installer first.
    """
    cmd = [str(c) for c in cmd]
    say(f"cell: {' '.join(cmd)}")
    progress = _InstallProgress()
    with open(log_path, "a", encoding="utf-8") if log_path else contextlib.nullcontext() as log:
        if log:
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                    env=env, start_new_session=True)  # its own group: stopped whole on an interrupt
        except OSError as exc:
            line = f"cannot start the installer: {exc}"
            if log:
                log.write(line + "\n")
            return Install(False, cmd, line, time.monotonic() - progress.started)
        lines: queue.Queue[str | None] = queue.Queue()
        reader = threading.Thread(target=_read_lines, args=(proc, lines), daemon=True)
        reader.start()
        try:
            _pass_lines(lines, progress, log, log_path, heartbeat_s)
            proc.wait()
        finally:
            if proc.poll() is None:
                kill_group(proc)  # type: ignore[arg-type]
            reader.join(timeout=KILL_GRACE_S)
    output = "\n".join(progress.kept)
    return Install(proc.returncode == 0, cmd, output, time.monotonic() - progress.started)


def _read_lines(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line.rstrip("\n"))
    lines.put(None)  # the installer closed its output


def _pass_lines(lines: queue.Queue[str | None], progress: _InstallProgress, log: Any, log_path: Path | None,
                heartbeat_s: float) -> None:
    """Echo and log each line until the output ends; a heartbeat whenever heartbeat_s passes without one."""
    quiet_since = time.monotonic()
    while True:
        try:
            line = lines.get(timeout=max(0.0, quiet_since + heartbeat_s - time.monotonic()))
        except queue.Empty:
            say(progress.heartbeat(log_path))
            quiet_since = time.monotonic()
            continue
        if line is None:
            return
        progress.add(line)
        say(line)
        if log:
            log.write(line + "\n")
            log.flush()
        quiet_since = time.monotonic()


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


def environment_of(probe: dict[str, Any]) -> dict[str, Any]:
    keys = ("torch", "torch_git_version", "torch_cuda", "numpy", "python", "platform")
    return {k: probe[k] for k in keys if k in probe}

