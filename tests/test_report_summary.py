"""report/summary.py: the summary table of a results folder, as the rule decides each row.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import result_factory as rf
from cell_helpers import fake_python, spec

from cpugpu_conformance import results
from cpugpu_conformance.cli import dispatch as cli
from cpugpu_conformance.promises import PROMISES, RECORDED_ONLY, applies
from cpugpu_conformance.report import summary
from cpugpu_conformance.runner import cell

# --------------------------------------------------------------------------- summary


def _write(dirpath: Path, name: str, status: str, **fields) -> None:
    results.CellResult.new(name, status, **fields).write(dirpath / f"{name}.json")


def _write_dict(dirpath: Path, name: str, data: dict) -> None:
    results.CellResult(data).write(dirpath / f"{name}.json")


def summary_folder(tmp_path: Path) -> Path:
    """One cell of every kind of answer, and two without a readable result."""
    d = tmp_path / "results"
    _write_dict(d, "torch-2.13.0-cpu", rf.completed("2.13.0", cell="torch-2.13.0-cpu"))
    _write_dict(d, "torch-2.14.1-cpu", rf.completed("2.14.1", cell="torch-2.14.1-cpu", failed={
        ("3", "cpu"): [rf.failure("test_mutable", "RuntimeError: Inplace update to inference tensor", "print(1)")]}))
    _write_dict(d, "torch-2.12.0-cpu", rf.completed("2.12.0", cell="torch-2.12.0-cpu", drop_promises=("2",)))
    _write(d, "torch-2.9.1-cpu", "crashed", requested={"torch": "2.9.1", "device": "cpu"}, detail="killed by SIGABRT")
    _write(d, "torch-99.0.0-cpu", "not_installed", requested={"torch": "99.0.0", "device": "cpu"}, detail="no torch")
    results.placeholder("torch-2.11.0-cpu", requested={"torch": "2.11.0", "device": "cpu"}).write(d / "torch-2.11.0-cpu.json")
    (d / "torch-2.10.0-cpu.json").write_text("{not json")
    return d


ALL_CELLS = ["torch-2.13.0-cpu", "torch-2.14.1-cpu", "torch-2.12.0-cpu", "torch-2.9.1-cpu", "torch-99.0.0-cpu",
             "torch-2.11.0-cpu", "torch-2.10.0-cpu", "torch-2.15.0-cpu"]


def test_summary_table_shows_each_cells_answer_and_why(tmp_path: Path) -> None:
    d = summary_folder(tmp_path)
    rows = summary.summarize(d, ALL_CELLS)
    assert [(r.cell, r.torch, r.device, r.mark, r.clean) for r in rows] == [
        ("torch-2.9.1-cpu", "2.9.1", "cpu", "CRASHED", False),
        ("torch-2.10.0-cpu", "2.10.0", "cpu", "UNREADABLE", False),
        ("torch-2.11.0-cpu", "2.11.0", "cpu", "INTERRUPTED", False),  # a run in progress or killed: its placeholder
        ("torch-2.12.0-cpu", "2.12.0", "cpu", "UNTESTED", False),
        ("torch-2.13.0-cpu", "2.13.0", "cpu", "passed", True),
        ("torch-2.14.1-cpu", "2.14.1", "cpu", "FAILED", False),
        ("torch-2.15.0-cpu", "2.15.0", "cpu", "NO RESULT", False),  # a cell without a file is shown, not dropped
        ("torch-99.0.0-cpu", "99.0.0", "cpu", "NOT INSTALLED", False),
    ]
    lines = summary.format_summary(rows).splitlines()
    assert lines[0].split() == ["cell", "torch", "device", "answer", "passed", "failed", "untested", "recorded", "duration"]
    assert lines[1].split() == ["torch-2.9.1-cpu", "2.9.1", "cpu", "CRASHED", "-", "-", "-", "-", "-"]
    judged = str(sum(applies(p, "cpu") and p not in RECORDED_ONLY for p in PROMISES))  # a clean cell's passes on cpu
    fewer = str(int(judged) - 1)
    assert lines[4].split() == ["torch-2.12.0-cpu", "2.12.0", "cpu", "UNTESTED", fewer, "0", "1", "1", "12.5", "s"]
    assert lines[5].split() == ["torch-2.13.0-cpu", "2.13.0", "cpu", "passed", judged, "0", "0", "1", "12.5", "s"]
    assert lines[6].split() == ["torch-2.14.1-cpu", "2.14.1", "cpu", "FAILED", fewer, "1", "0", "1", "12.5", "s"]
    assert lines[8].split()[:5] == ["torch-99.0.0-cpu", "99.0.0", "cpu", "NOT", "INSTALLED"]
    why = lines[9:-1]
    assert why[0] == "torch-2.9.1-cpu: crashed: killed by SIGABRT"
    assert why[1].startswith(f"torch-2.10.0-cpu: {d / 'torch-2.10.0-cpu.json'}: not JSON")
    assert why[2].startswith("torch-2.11.0-cpu: interrupted: the run that started at ")
    assert why[3].startswith("torch-2.12.0-cpu: promise 2 (Zeroed) on cpu: untested")
    assert why[4].startswith("torch-2.14.1-cpu: promise 3 (Mutable wherever they were made) on cpu: failed")
    assert why[5] == f"torch-2.15.0-cpu: {d / 'torch-2.15.0-cpu.json'}: no such result file"
    assert why[6] == "torch-99.0.0-cpu: not installed: no torch"
    assert len(why) == 7, "the clean cell needs no reason"
    assert lines[-1] == "8 cells, 1 clean, 7 not (counts are promise x device outcomes)"


def test_summary_exits_0_only_when_every_cell_is_clean(tmp_path: Path) -> None:
    d = summary_folder(tmp_path)
    assert cli.main(["summary", str(d)]) == 2  # torch-2.10.0-cpu.json is not JSON
    assert cli.main(["summary", str(d), "--cells", "torch-2.13.0-cpu"]) == 0
    for name in ALL_CELLS:
        if name != "torch-2.13.0-cpu":  # a file that is not a cell result is bad input: 2
            expected = 2 if name == "torch-2.10.0-cpu" else 1
            assert cli.main(["summary", str(d), "--cells", f"torch-2.13.0-cpu,{name}"]) == expected, name
    assert cli.main(["summary", str(tmp_path / "empty")]) == 2


def test_summary_without_names_reads_every_result_file(tmp_path: Path) -> None:
    d = summary_folder(tmp_path)
    names = {r.cell for r in summary.summarize(d)}
    assert names == set(ALL_CELLS) - {"torch-2.15.0-cpu"}


@pytest.mark.parametrize("kind", ["directory", "fifo", "not-a-result", "old-schema"])
def test_summary_of_an_unreadable_file_is_its_own_row_and_never_clean(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "torch-2.13.0-cpu.json"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "not-a-result":
        path.write_text('{"status": "completed"}')
    else:
        path.write_text(json.dumps({**rf.completed("2.13.0"), "schema_version": 1}))
    [row] = summary.summarize(tmp_path, ["torch-2.13.0-cpu"])
    assert (row.answer, row.clean, row.mark) == ("unreadable", False, "UNREADABLE")
    assert row.why.startswith(str(path))


def test_result_file_json_is_what_the_schema_accepts(tmp_path: Path) -> None:
    s = spec(tmp_path)
    cell.run_cell(s, fake_python(tmp_path, "import os\nos.abort()\n"))
    data = json.loads(s.result_path.read_text())
    results.validate(data)
    assert data["schema_version"] == results.SCHEMA_VERSION
    assert data["requested"] == {"device": "cpu", "hypothesis_profile": "ci", "time_limit_s": 60, "torch": "2.15.0",
                                 "numpy": None, "build": None, "requirements": ["torch==2.15.0", "numpy"],
                                 "index_url": None}


