"""The sample results folder and its report, made once a module: the fixture `results_dir` (cells of
every kind: passed; failed, with a reproducer; observations that changed; each status of a cell that did
not complete; a promise with no verdict; a corrupt and an invalid file) and `report_dir` (what
`cpugpu-conformance report` made of it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import result_factory as rf
from report_sample import CRASH_DETAIL, OBSERVED_11, REPRODUCER, cuda_missing

from cpugpu_conformance.cli.dispatch import main


# Module-scoped: building and rendering the matrix once a module keeps the tests fast; they only read it.
@pytest.fixture(scope="module", name="results_dir")
def results_dir_fixture(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("results")
    rf.write(d, "torch-2.13.0.json", cuda_missing(rf.completed("2.13.0")))
    # torch changed on the CPU-only machine at 2.14.0 (a dtype more); 2.14.1 ran on a GPU machine
    grown = dict(rf.BASE_OBSERVATIONS, **{"numpy.dtypes": {"value": ["bool", "float32", "int64", "uint16"]}})
    rf.write(d, "torch-2.14.0.json", rf.completed("2.14.0", observations=grown))
    changed = dict(rf.BASE_OBSERVATIONS, **{"inference_tensor.is_inference": {"value": False}})
    rf.write(
        d,
        "torch-2.14.1.json",
        rf.completed(
            "2.14.1",
            cuda=True,
            observations=changed,
            observed_11=OBSERVED_11,
            failed={("3", "cpu"): [rf.failure("test_mutable_after_inference", "AssertionError: tensor | refused, see https://example.org/torch-issue", REPRODUCER)]},
        ),
    )
    rf.write(d, "torch-2.15.0.json", rf.incomplete("2.15.0", "crashed", CRASH_DETAIL))
    rf.write(d, "torch-2.9.1.json", rf.incomplete("2.9.1", "not_installed", "No solution found when resolving: torch==2.9.1"))
    rf.write(d, "torch-2.10.0.json", rf.incomplete("2.10.0", "timed_out", "cell ran past its 600 s limit"))
    rf.write(d, "torch-2.11.0.json", rf.incomplete("2.11.0", "wrong_torch", "asked for 2.11.0, got 2.8.0"))
    rf.write(d, "torch-2.12.0.json", rf.incomplete("2.12.0", "error", "pytest exited 4: bad --impl"))
    rf.write(d, "torch-2.12.1.json", rf.completed("2.12.1", drop_promises=("4",)))
    rf.write(d, "torch-2.8.0.json", rf.incomplete("2.8.0", "interrupted", "the run that started at 19:00 did not finish"))
    (d / "corrupt.json").write_text('{"schema": "cpugpu-conformance/cell-result", ', encoding="utf-8")
    (d / "invalid.json").write_text(json.dumps({"schema": "something-else"}), encoding="utf-8")
    (d / "notes.txt").write_text("not a result file, not *.json", encoding="utf-8")
    return d


@pytest.fixture(scope="module", name="report_dir")
def report_dir_fixture(results_dir: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "compat"
    assert main(["report", str(results_dir), "--out", str(out)]) == 0
    return out
