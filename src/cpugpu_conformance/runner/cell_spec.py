"""What a cell is asked to run (CellSpec) and the record of one run of it (CellRun): where its
result, log and staging file lie, what it records as requested, and how its answer is written
over the placeholder. Below both the run (cell.py) and the answer (answer.py), which read them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cpugpu_conformance import results
from cpugpu_conformance.output import say
from cpugpu_conformance.runner.matrix_model import MatrixCell, Release
from cpugpu_conformance.runner.processes import Interrupts
from cpugpu_conformance.runner.source import InstalledPackage

LIBRARY_PROFILE_PREFIX = "cpugpu-"  # testing/plugin.py's PROFILE_PREFIX (the runner imports no pytest plugin)


@dataclass
class CellSpec:
    """Everything a cell run needs to know besides its interpreter."""

    name: str
    release: Release | None  # None: whatever torch is installed (the `installed` session)
    device: str | None  # passed as --device; None leaves the suite's default
    hypothesis_profile: str
    time_limit_s: float
    results_dir: Path
    # The checkout the cell installs (editable) and whose conformance/ it runs there; with ``package``,
    # the folder the suite runs in (the user's own).
    project_dir: Path
    index_url: str | None = None
    pytest_args: tuple[str, ...] = ()
    find_links: str | None = None  # a folder of wheels the installer searches too
    offline: bool = False  # the installer uses no network
    # A team's own tests (the library: their pytest, with the plugin) in place of the shipped suite,
    # run in ``workdir`` (their checkout); None: the shipped suite, in ``workdir`` when given (the
    # user's folder, for a checkout's suite run from outside it), else in project_dir.
    tests: str | None = None
    workdir: Path | None = None
    # An installed package (a wheel, a git install) in place of a checkout: the cell installs its
    # requirements and runs the suite from a copy of it (source.py).
    package: InstalledPackage | None = None

    @classmethod
    def from_matrix_cell(cls, cell: MatrixCell, *, results_dir: Path, project_dir: Path, pytest_args: Sequence[str] = (),
                         name: str | None = None, tests: str | None = None, workdir: Path | None = None,
                         package: InstalledPackage | None = None) -> CellSpec:
        """The run of a matrix cell: its release, device, time limit, profile and where its torch comes
        from; with ``tests``, a team's own tests run by their pytest in ``workdir`` (the library's
        profiles are the matrix's, prefixed: cpugpu-ci); with ``package``, the installed package's suite."""
        profile = f"{LIBRARY_PROFILE_PREFIX}{cell.hypothesis_profile}" if tests else cell.hypothesis_profile
        return cls(name=name or cell.name, release=cell.release, device=cell.device.name,
                   hypothesis_profile=profile, time_limit_s=cell.time_limit_s,
                   results_dir=Path(results_dir).resolve(), project_dir=Path(project_dir), index_url=cell.index_url,
                   pytest_args=tuple(pytest_args), find_links=cell.find_links, offline=cell.offline,
                   tests=tests, workdir=Path(workdir).resolve() if workdir else None, package=package)

    @classmethod
    def for_installed_torch(cls, torch_version: str, *, name: str, device: str | None, hypothesis_profile: str,
                            time_limit_s: float, results_dir: Path, project_dir: Path,
                            pytest_args: Sequence[str] = ()) -> CellSpec:
        """The run of a torch already installed (``2.15.0+cu130``): nothing is installed, but the
        cell still checks that the suite imports that release and build."""
        version, _, build = torch_version.partition("+")
        return cls(name=name, release=Release(version, build=build or None), device=device,
                   hypothesis_profile=hypothesis_profile, time_limit_s=time_limit_s,
                   results_dir=Path(results_dir).resolve(), project_dir=Path(project_dir),
                   pytest_args=tuple(pytest_args))

    @property
    def result_path(self) -> Path:
        return self.results_dir / f"{self.name}.json"

    @property
    def log_path(self) -> Path:
        return self.results_dir / f"{self.name}.log"

    @property
    def staging_path(self) -> Path:
        """Where the suite writes; only a finished run's file becomes the result."""
        return self.results_dir / f".{self.name}.json.part"

    def remove_staging(self) -> None:
        """The staging file and the lock the suite holds on it, which a killed suite leaves
        behind. Only while this run holds the result path."""
        self.staging_path.unlink(missing_ok=True)
        results.lock_path(self.staging_path).unlink(missing_ok=True)

    def requested(self) -> dict[str, Any]:
        asked: dict[str, Any] = {"device": self.device or "default", "hypothesis_profile": self.hypothesis_profile,
                                 "time_limit_s": self.time_limit_s}
        if self.tests:
            asked.update(tests=self.tests)
        if self.release:
            asked.update(torch=self.release.version, numpy=self.release.numpy, build=self.release.build,
                         requirements=self.release.requirements(), index_url=self.index_url)
            if self.release.asked:  # latest: what was asked, beside the release it resolved to (torch)
                asked.update(torch_asked=self.release.asked)
            if self.find_links:
                asked.update(find_links=self.find_links)
            if self.offline:
                asked.update(offline=True)
        return asked


@dataclass
class CellRun:
    """One run of a cell, from claiming its result path to writing its answer."""

    spec: CellSpec
    interrupts: Interrupts
    started: str = field(default_factory=results.now)
    clock: float = field(default_factory=time.monotonic)
    environment: dict[str, Any] = field(default_factory=dict)
    claimed: bool = False  # this run holds the result path
    answered: bool = False  # its answer replaced the placeholder

    def fault(self, status: str, detail: str) -> results.CellResult:
        """The answer of a run whose suite did not finish: its status and why."""
        return self.finish(results.CellResult.new(
            self.spec.name, status, detail=detail, requested=self.spec.requested(),
            environment=self.environment or None, started=self.started,
            duration_s=round(time.monotonic() - self.clock, 3), hypothesis_profile=self.spec.hypothesis_profile))

    def finish(self, result: results.CellResult) -> results.CellResult:
        """Write the answer over the placeholder; a signal now waits until it is written."""
        with self.interrupts.deferred():
            result.write(self.spec.result_path)
            self.answered = True
        say(f"cell {self.spec.name}: {result.describe()} -> {self.spec.result_path}")
        return result
