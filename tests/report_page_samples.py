"""The pages the tests of the report's page read: one made from a matrix with every kind of mark
(the fixture `page_dir`, written once a module), one written from given results, and the
committed compat/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import result_factory as rf
from report_sample import cuda_missing

from cpugpu_conformance.cli.dispatch import main

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / "compat"
NO_CUDA = "no CUDA device on this machine"


def every_kind() -> dict[str, dict[str, Any]]:
    """A matrix with every mark the rule gives today: pass, FAIL, recorded, untested, n/a,
    not requested, and a cell of each status that did not complete."""
    fails = {("3", "cpu"): [rf.failure("test_mutable_after_inference", "AssertionError: refused", "import torch\n")]}
    chosen = rf.completed("2.12.1", cell="torch-2.12.1-cpu")
    chosen["requested"]["promises"] = ["1", "2"]
    for number, promise in chosen["promises"].items():
        if number not in ("1", "2"):
            promise["devices"]["cpu"] = {"verdict": "not_requested"}
    cells = {
        "torch-2.11.0-all.json": rf.completed("2.11.0", cell="torch-2.11.0-all", cuda=True),
        "torch-2.12.1-cpu.json": chosen,
        "torch-2.13.0-all.json": cuda_missing(rf.completed("2.13.0", cell="torch-2.13.0-all")),
        "torch-2.14.1-all.json": rf.completed("2.14.1", cell="torch-2.14.1-all", cuda=True, failed=fails),
        "torch-2.15.0-all.json": rf.completed("2.15.0", cell="torch-2.15.0-all", cuda=True),
    }
    statuses = ("interrupted", "crashed", "timed_out", "not_installed", "wrong_torch", "error")
    for i, status in enumerate(statuses):
        release = f"2.{4 + i}.0"
        cells[f"torch-{release}-cpu.json"] = rf.incomplete(release, status, f"{status}: see the log",
                                                          cell=f"torch-{release}-cpu")
    return cells


def write_report(tmp_path: Path, cells: dict[str, dict[str, Any]]) -> Path:
    results = tmp_path / "results"
    results.mkdir(parents=True, exist_ok=True)
    for name, result in cells.items():
        rf.write(results, name, result)
    out = tmp_path / "compat"
    assert main(["report", str(results), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module", name="page_dir")
def page_dir_fixture(tmp_path_factory) -> Path:
    return write_report(tmp_path_factory.mktemp("page"), every_kind())
