"""Where a cell's suite comes from, and where its environment goes: this package, as the command
that runs the cell has it.

- **A checkout** (the package imported from ``<checkout>/src``, with ``conformance/`` beside it:
  nox, this project's CI, a developer's editable install): the cell installs the checkout into its
  environment, editable, and runs its ``conformance/`` from the checkout.
- **An installed package** (a wheel, a git install: ``site-packages/cpugpu_conformance``, whose
  suite ships inside it as ``suite/``): the cell installs the package's own requirements
  (hypothesis, pytest) beside torch, and runs the suite from a copy of the package, with its
  dist-info, put first on the test process's ``PYTHONPATH`` (``InstalledPackage.copy``). That copy
  is all the cell's interpreter sees of the environment the command runs in: never its torch. With
  ``--python`` an interpreter that has torch, numpy, hypothesis and pytest is enough.

The cells' environments go, unless the command is told where: to ``.nox/`` of the checkout when
the command runs inside it (nox's own, reused), else to a cache folder
(``$XDG_CACHE_HOME/cpugpu-conformance/envs/python<X.Y>``, ``~/.cache/...`` by default): never the
folder the command runs in, nor a checkout it does not run in.

Standard library only (and ``packaging`` for the requirements' markers, as the rest of the runner).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "cpugpu-conformance"
SUITE_INI = "suite.ini"  # cli/run.py's INI_NAME: the suite's own pytest configuration
# What the package needs to run its suite, where its metadata cannot be read (pyproject.toml's dependencies).
FALLBACK_REQUIREMENTS = ("hypothesis>=6.100", "pytest>=7.4")


class NoSuite(Exception):
    """Neither a checkout nor an installed package with its suite: one line says where it looked."""


@dataclass(frozen=True)
class InstalledPackage:
    """The installed ``cpugpu_conformance`` folder (its suite inside, as ``suite/``) and its dist-info."""

    folder: Path
    dist_info: Path | None = None

    @property
    def suite(self) -> Path:
        return self.folder / "suite"

    def requirements(self) -> list[str]:
        """What the package needs beside torch and numpy (hypothesis, pytest): its metadata's
        requirements that no extra guards."""
        from packaging.requirements import InvalidRequirement, Requirement

        if self.dist_info is None:
            return list(FALLBACK_REQUIREMENTS)
        try:
            listed = metadata.PathDistribution(self.dist_info).requires or []
        except OSError:
            return list(FALLBACK_REQUIREMENTS)
        wanted = []
        for line in listed:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                wanted.append(str(requirement))
        return wanted or list(FALLBACK_REQUIREMENTS)

    @contextlib.contextmanager
    def copy(self) -> Iterator[Path]:
        """A temporary folder holding a copy of the package (and its dist-info, for pytest's entry
        point), to put first on the test process's ``PYTHONPATH``; gone when the block ends.

        A copy, not the folder itself: pytest inserts the folder above a test package's top into
        ``sys.path``, which for the installed suite is the site-packages of the command's own
        environment, with its torch. Above the copy there is only the copy."""
        with tempfile.TemporaryDirectory(prefix="cpugpu-conformance-suite-") as tmp:
            skip = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(self.folder, Path(tmp) / self.folder.name, ignore=skip)
            if self.dist_info is not None and self.dist_info.is_dir():
                shutil.copytree(self.dist_info, Path(tmp) / self.dist_info.name, ignore=skip)
            yield Path(tmp)


def package_folder() -> Path:
    """The ``cpugpu_conformance`` folder this command was imported from."""
    return Path(__file__).resolve().parents[1]


def checkout_of(package: Path) -> Path | None:
    """The checkout ``package`` lives in (``<checkout>/src/cpugpu_conformance``, beside
    ``conformance/`` and ``pyproject.toml``), or None."""
    root = package.parent.parent
    if package.parent.name == "src" and (root / "pyproject.toml").is_file() \
            and (root / "conformance" / "conftest.py").is_file():
        return root
    return None


def _dist_info_of(package: Path) -> Path | None:
    """The dist-info of the distribution whose files hold ``package``, if it can be found."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    try:
        if Path(str(dist.locate_file(f"{package.name}/__init__.py"))).resolve() != package / "__init__.py":
            return None  # another copy of the distribution, elsewhere on the path
    except OSError:
        return None
    found = getattr(dist, "_path", None)  # PathDistribution's folder: the only kind pip, uv and hatch make
    return Path(found) if found is not None and Path(found).is_dir() else None


def this_package(package: Path | None = None) -> Path | InstalledPackage:
    """The checkout the cells install and run (a Path), or the installed package whose suite they
    run. NoSuite (one line) when ``package`` is neither (a copy without its suite)."""
    package = package or package_folder()
    checkout = checkout_of(package)
    if checkout is not None:
        return checkout
    installed = InstalledPackage(package)
    if (installed.suite / "conftest.py").is_file() and (installed.suite / SUITE_INI).is_file():
        return InstalledPackage(package, _dist_info_of(package))
    raise NoSuite(f"{package}: neither a checkout of cpugpu-conformance (src/ beside conformance/) nor an installed "
                  "package with its suite (suite/): install the wheel, or run from the checkout")


def cache_folder() -> Path:
    """Where the cells' environments go when the command runs outside a checkout."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cpugpu-conformance" / "envs"


def default_envdir(source: Path | InstalledPackage, python_version: str, cwd: Path | None = None) -> Path:
    """The folder of the cells' environments (a cell's is ``<it>/<cell>``) when none is named: the
    checkout's ``.nox`` when the command runs inside that checkout (nox's environments, reused),
    else the cache folder, one per Python (an environment is made with one)."""
    here = (cwd or Path.cwd()).resolve()
    if isinstance(source, Path) and here.is_relative_to(source.resolve()):
        return source / ".nox"
    return cache_folder() / f"python{python_version}"
