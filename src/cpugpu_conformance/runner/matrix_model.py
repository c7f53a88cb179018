"""The matrix's model: a Release (a torch entry of matrix.yaml) on a RunnerDevice makes a
MatrixCell; a Matrix holds them, and pairs a release that matrix.yaml does not list (bisect).

Read from matrix.yaml, and validated, by runner/matrix.py (``load``); the cell runner and the
installer need only this module (and packaging).

A torch entry's version is a final release (2.13.0), a pre-release or nightly
(2.16.0rc1, 2.16.0.dev20261201; installed with pre-releases allowed for torch), or the
word ``latest``: the newest final release on the entry's index (or find_links folder),
looked up when the cell runs. Its cell is ``torch-latest-<device>``; the result file's
``requested`` says ``torch_asked: latest`` and ``torch: <the release it resolved to>``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

LATEST = "latest"  # a torch entry resolved, when its cell runs, to the newest final release


@dataclass(frozen=True)
class Release:
    version: str
    numpy: str | None = None
    extra_packages: tuple[str, ...] = ()
    build: str | None = None
    time_limit_s: float | None = None
    index_url: str | None = None  # this entry's own index, in place of the project-wide one
    find_links: str | None = None  # this entry's own folder of wheels (absolute), in place of the project-wide one
    asked: str | None = None  # what matrix.yaml asked for, when the version was resolved from it (latest)

    @property
    def key(self) -> tuple[int, ...]:
        return release_numbers(self.version)

    @property
    def is_latest(self) -> bool:
        return self.version == LATEST

    @property
    def is_prerelease(self) -> bool:
        """A pre-release or nightly, which the installer takes only when told to."""
        return not self.is_latest and Version(self.version).is_prerelease

    def requirements(self) -> list[str]:
        """What to install for this release, torch first (unpinned for a latest entry not yet resolved)."""
        torch = "torch" if self.is_latest else f"torch=={self.version}"
        return [torch, f"numpy{self.numpy or ''}", *self.extra_packages]

    def resolved(self, version: str) -> Release:
        """This entry, pinned to the release its ``latest`` resolved to."""
        return replace(self, version=version, asked=self.version)


@dataclass(frozen=True)
class RunnerDevice:
    name: str
    runner: str | tuple[str, ...]


@dataclass(frozen=True)
class MatrixCell:
    release: Release
    device: RunnerDevice
    time_limit_s: float
    index_url: str | None = None  # where torch comes from: the entry's, else the project-wide one
    find_links: str | None = None
    offline: bool = False
    hypothesis_profile: str = "ci"

    @property
    def torch(self) -> str:
        return self.release.version

    @property
    def name(self) -> str:
        """Also the result file's stem: results/<name>.json."""
        return cell_name(self.torch, self.device.name)

    @property
    def tag(self) -> str:
        return f"torch-{self.torch}"

    @property
    def tags(self) -> list[str]:
        """What selects this cell: `nox -t TAG`, `cpugpu-conformance matrix TAG`."""
        return [self.tag, f"device-{self.device.name}"]

    @property
    def session(self) -> str:
        """The nox session that runs this cell, exactly as `nox -l` names it."""
        return f"conformance(torch={self.torch!r}, device={self.device.name!r})"


@dataclass(frozen=True)
class Matrix:
    path: Path
    python: str
    devices: tuple[RunnerDevice, ...]
    hypothesis_profile: str
    time_limit_s: float
    index_url: str | None
    baseline: str
    candidates: tuple[str, ...]
    releases: tuple[Release, ...]
    find_links: str | None = None  # absolute
    offline: bool = False  # install with no network: torch from find_links folders and uv's cache

    @property
    def cells(self) -> list[MatrixCell]:
        return [self._cell(release, device) for release in self.releases for device in self.devices]

    def _cell(self, release: Release, device: RunnerDevice) -> MatrixCell:
        return MatrixCell(release, device, release.time_limit_s or self.time_limit_s,
                    index_url=release.index_url or self.index_url, find_links=release.find_links or self.find_links,
                    offline=self.offline, hypothesis_profile=self.hypothesis_profile)

    def cell(self, torch: str, device: str) -> MatrixCell:
        for cell in self.cells:
            if cell.torch == torch and cell.device.name == device:
                return cell
        raise KeyError(f"{self.path}: no cell for torch {torch} on {device}")

    def device(self, name: str) -> RunnerDevice:
        for device in self.devices:
            if device.name == name:
                return device
        raise KeyError(f"{self.path}: no device {name!r} (devices: {', '.join(d.name for d in self.devices)})")

    def cell_for_release(self, version: str, device: str) -> MatrixCell:
        """The cell of any release on a device of the matrix (bisect): a listed release's own
        cell, otherwise the default pairing with the matrix-wide index and time limit."""
        return self._cell(self.release(version), self.device(device))

    def select(self, selectors: list[str]) -> list[MatrixCell]:
        """The cells named by cell names (torch-2.15.0-cpu) or tags (torch-2.15.0, device-cpu),
        in matrix order; every cell when there are none. KeyError names the first unknown one."""
        cells = self.cells
        for selector in selectors:
            if not any(selector == c.name or selector in c.tags for c in cells):
                raise KeyError(f"{self.path}: no cell or tag {selector!r} "
                               "(a cell like torch-2.15.0-cpu, or a tag like torch-2.15.0 or device-cpu)")
        return [c for c in cells if not selectors or any(s == c.name or s in c.tags for s in selectors)]

    def release(self, version: str) -> Release:
        """The matrix entry for a release, or the default pairing for one not listed (bisect)."""
        for release in self.releases:
            if same_version(release.version, version):
                return release
        return default_release(version)

    def as_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "python": self.python,
            "hypothesis_profile": self.hypothesis_profile,
            "time_limit_s": self.time_limit_s,
            "index_url": self.index_url,
            "find_links": self.find_links,
            "offline": self.offline,
            "baseline": self.baseline,
            "candidates": list(self.candidates),
            "devices": {d.name: {"runner": d.runner} for d in self.devices},
            "cells": [
                {
                    "name": c.name,
                    "session": c.session,
                    "tag": c.tag,
                    "torch": c.torch,
                    "device": c.device.name,
                    "runner": c.device.runner,
                    "requirements": c.release.requirements(),
                    "build": c.release.build,
                    "time_limit_s": c.time_limit_s,
                    "result": f"results/{c.name}.json",
                    **self._own_source(c),
                }
                for c in self.cells
            ],
        }

    def _own_source(self, cell: MatrixCell) -> dict[str, str | None]:
        """The index and folder of a cell whose entry sets its own (the others use the top-level ones)."""
        own = {"index_url": cell.index_url, "find_links": cell.find_links}
        return {k: v for k, v in own.items() if v != getattr(self, k)}


def cell_name(torch: str, device: str) -> str:
    return f"torch-{torch}-{device}"


def release_numbers(version: str) -> tuple[int, ...]:
    """The release numbers (2, 16, 0 for 2.16.0rc1), for pairing a release with its NumPy; latest
    comes after every release. (Sorting releases: results.release_key.)"""
    if version == LATEST:
        return (sys.maxsize,)
    return Version(version).release


def same_version(a: str, b: str) -> bool:
    """Equal as versions (2.13 and 2.13.0), or the same word."""
    if a == b:
        return True
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return False


def default_release(version: str) -> Release:
    """How to pair a release that matrix.yaml does not list (CONTRACT.md, measured facts)."""
    key = release_numbers(version)
    return Release(
        version=version,
        numpy="<2" if key < (2, 3) else None,  # built against NumPy 1
        extra_packages=("setuptools",) if key < (2, 2) else (),  # torch._dynamo imports it
    )
