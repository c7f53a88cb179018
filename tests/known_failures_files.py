"""What the tests of known failures share: a file of known failures written from TOML text (and
one nested 50,000 deep), a listing loaded from its entries, the class that fails promise 2, and
the environment a run of the suite gets."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from suite_runner import REPO, suite_env

from cpugpu_conformance.results import known_failures as kf

ONES = "cpugpu_conformance.variants:OnesLikeGpuBuffer"  # breaks promise 2 (zeroed), on every device
REASON = "our buffer starts as ones (issue 12)"


def write(tmp_path: Path, text: str, name: str = "known-failures.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def listing(tmp_path: Path, *entries: str) -> kf.KnownFailures:
    return kf.load(write(tmp_path, "\n".join(f"[[known_failure]]\n{e}" for e in entries)))


def _env() -> dict[str, str]:
    return dict(suite_env(), PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))


DEEP = 50_000


def deep_file(tmp_path: Path) -> Path:
    path = tmp_path / "deep.toml"
    path.write_text("[[known_failure]]\npromise = 2\nreason = " + "[" * DEEP + '"x"' + "]" * DEEP + "\n")
    return path


DEEP_LINE = "not a file of known failures: nested too deeply"
