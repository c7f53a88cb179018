"""A torch bump, as a change to a team's repository makes it: the torch pinned before and after,
read from the files a dependency bot edits, and the two-cell matrix that gates it.

Files read (by name, wherever they are in the repository): requirements and constraints files
(``*requirements*.txt``, ``*requirements*.in``, ``constraints*.txt``: ``torch==X``, ``torch===X``,
``torch @ .../torch-X-...whl``), ``pyproject.toml`` (PEP 621 dependencies and optional
dependencies, dependency groups, Poetry's ``torch = "X"``), the TOML lock files ``uv.lock``,
``poetry.lock`` and ``pdm.lock`` (``[[package]]`` named torch) and ``Pipfile.lock``. Only exact
pins count: a range (``torch>=2.3``) names no release, and the lock file beside it does. The
local label (``+cpu``) is dropped: the cell installs the release from its index.

``changed_pins(repo, base_ref)`` compares each such file in the working tree with the same file
at ``base_ref`` (``git show``); ``bump(...)`` turns what changed into one (before, after) pair or
BumpError, one line naming the files. ``matrix_data(...)`` is matrix.yaml's content for the two
cells (default_release's pairing of each torch with its NumPy).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from cpugpu_conformance.runner.matrix_model import default_release

TOML_LOCKS = ("uv.lock", "poetry.lock", "pdm.lock")
# torch==2.14.1, Torch === 2.14.1, torch[opt]==2.14.1+cpu ; python_version>"3.9"
_PINNED = re.compile(r"^\s*torch\s*(?:\[[^\]]*\])?\s*===?\s*v?([0-9][^\s;,#\\]*)", re.IGNORECASE)
# torch @ https://download.pytorch.org/whl/cpu/torch-2.14.1%2Bcpu-cp311-cp311-linux_x86_64.whl
_WHEEL = re.compile(r"^\s*torch\s*(?:\[[^\]]*\])?\s*@\s*\S*?/torch-([0-9][^-/\s]*)-[^/\s]*\.whl", re.IGNORECASE)
_EXACT = re.compile(r"^\s*(?:===?\s*)?v?([0-9]+(?:\.[0-9A-Za-z]+)*(?:\+[0-9A-Za-z.]+)?)\s*$")


class BumpError(ValueError):
    """No single torch bump can be read; the message is one line naming what was looked at."""


def is_pin_file(path: str) -> bool:
    name = PurePosixPath(path).name.lower()
    if name in (*TOML_LOCKS, "pyproject.toml", "pipfile.lock"):
        return True
    stem, _, suffix = name.rpartition(".")
    return (suffix in ("txt", "in") and "requirements" in stem) or (suffix == "txt" and stem.startswith("constraints"))


def _release(version: str) -> str:
    return version.split("+", 1)[0].replace("%2B", "+").split("+", 1)[0]


def requirement_pin(line: str) -> str | None:
    """The torch release a requirement pins exactly (PEP 508, or a wheel URL), else None."""
    line = line.split(" #", 1)[0]
    found = _PINNED.match(line) or _WHEEL.match(line)
    return _release(found.group(1)) if found else None


def _requirements(text: str) -> set[str]:
    joined = re.sub(r"\\\n", " ", text)  # line continuations
    return {pin for line in joined.splitlines() if not line.lstrip().startswith("#")
            if (pin := requirement_pin(line)) is not None}


def _toml(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python < 3.11
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}  # a file git holds that is not TOML pins nothing we can read


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def _pyproject(text: str) -> set[str]:
    data = _toml(text)
    project = data.get("project") if isinstance(data.get("project"), dict) else {}
    strings = [*_strings(project.get("dependencies")), *_strings(project.get("optional-dependencies")),
               *_strings(data.get("dependency-groups"))]
    pins = {pin for s in strings if (pin := requirement_pin(s)) is not None}
    poetry = ((data.get("tool") or {}).get("poetry") or {}) if isinstance(data.get("tool"), dict) else {}
    tables = [poetry.get("dependencies")] + [g.get("dependencies") for g in (poetry.get("group") or {}).values()
                                             if isinstance(g, dict)]
    for table in tables:
        spec = table.get("torch") if isinstance(table, dict) else None
        spec = spec.get("version") if isinstance(spec, dict) else spec
        if isinstance(spec, str) and (exact := _EXACT.match(spec)):
            pins.add(_release(exact.group(1)))
    return pins


def _toml_lock(text: str) -> set[str]:
    packages = _toml(text).get("package")
    return {_release(str(p["version"])) for p in packages or [] if isinstance(p, dict)
            and str(p.get("name", "")).lower() == "torch" and p.get("version")} if isinstance(packages, list) else set()


def _pipfile_lock(text: str) -> set[str]:
    try:
        data = json.loads(text)
    except ValueError:
        return set()
    pins = set()
    for section in ("default", "develop"):
        entry = (data.get(section) or {}).get("torch") if isinstance(data, dict) else None
        version = entry.get("version") if isinstance(entry, dict) else None
        if isinstance(version, str) and (exact := _EXACT.match(version)):
            pins.add(_release(exact.group(1)))
    return pins


def torch_pins(path: str, text: str) -> set[str]:
    """The torch releases a file pins exactly (usually one; none for a range or no torch)."""
    name = PurePosixPath(path).name.lower()
    if name == "pyproject.toml":
        return _pyproject(text)
    if name in TOML_LOCKS:
        return _toml_lock(text)
    if name == "pipfile.lock":
        return _pipfile_lock(text)
    return _requirements(text)


# ---------------------------------------------------------------------------- git


@dataclass(frozen=True)
class PinChange:
    path: str
    before: frozenset[str]
    after: frozenset[str]


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    except OSError as exc:
        raise BumpError(f"cannot run git: {exc}") from None


def changed_pins(repo: Path, base_ref: str) -> tuple[list[PinChange], list[str]]:
    """Each pin file that differs from ``base_ref`` whose torch pins changed, and every pin file looked at."""
    if not base_ref or base_ref.startswith("-"):
        raise BumpError(f"--base-ref {base_ref!r}: not a git revision")
    found = _git(repo, "rev-parse", "--verify", "--quiet", f"{base_ref}^{{commit}}")
    if found.returncode != 0:
        raise BumpError(f"--base-ref {base_ref!r}: no such commit in {repo} (on CI, check out with fetch-depth: 0)")
    diff = _git(repo, "diff", "--name-only", "--no-renames", base_ref, "--")
    if diff.returncode != 0:
        raise BumpError(f"git diff {base_ref} failed in {repo}: {(diff.stderr.strip().splitlines() or ['?'])[-1]}")
    looked, changes = [], []
    for path in sorted(p for p in diff.stdout.splitlines() if p and is_pin_file(p)):
        looked.append(path)
        old = _git(repo, "show", f"{base_ref}:{path}")
        before = torch_pins(path, old.stdout) if old.returncode == 0 else set()
        current = repo / path
        after = torch_pins(path, current.read_text(encoding="utf-8", errors="replace")) if current.is_file() else set()
        if before != after:
            changes.append(PinChange(path, frozenset(before), frozenset(after)))
    return changes, looked


def bump(changes: Sequence[PinChange], looked: Sequence[str], base_ref: str) -> tuple[str, str]:
    """The one (before, after) torch pair the changes agree on; BumpError naming the files otherwise."""
    if not changes:
        where = ", ".join(looked) if looked else "no requirements, pyproject or lock file changed"
        raise BumpError(f"no exact torch pin changed since {base_ref} ({where}): give the candidate release")
    before = set().union(*(c.before for c in changes))
    after = set().union(*(c.after for c in changes))
    if len(before) != 1 or len(after) != 1:
        told = "; ".join(f"{c.path}: {_shown(c.before)} -> {_shown(c.after)}" for c in changes)
        raise BumpError(f"the torch pins since {base_ref} do not name one bump ({told}): give baseline and candidate")
    return next(iter(before)), next(iter(after))


def _shown(pins: Iterable[str]) -> str:
    return ", ".join(sorted(pins)) or "(none)"


# ---------------------------------------------------------------------------- the two cells


def matrix_data(baseline: str, candidate: str, *, device: str, python: str, hypothesis_profile: str = "ci",
                time_limit_s: float = 1800, index_url: str | None = None,
                extra_packages: Sequence[str] = ()) -> dict[str, Any]:
    """matrix.yaml's content for the two cells of a bump (runner: the job that runs them)."""
    entries = []
    for version in (baseline, candidate):
        release = default_release(version)
        entry: dict[str, Any] = {"version": version}
        if release.numpy:
            entry["numpy"] = release.numpy
        packages = [*release.extra_packages, *extra_packages]
        if packages:
            entry["extra_packages"] = list(dict.fromkeys(packages))
        entries.append(entry)
    return {"python": python, "devices": {device: {"runner": "this job"}}, "hypothesis_profile": hypothesis_profile,
            "time_limit_s": time_limit_s, "index_url": index_url, "baseline": baseline, "candidates": [candidate],
            "torch": entries}
