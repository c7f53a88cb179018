"""summary: what a hostile or careless results folder, or --cells, must not do to the table.

A result may only speak of the contract's promises; a name from a file stays on its line;
--cells names files in the results folder and nowhere else.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import result_factory as rf
from malformed_results import MALFORMED

from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.promises import PROMISES
from cpugpu_conformance.report import summary

pytestmark = pytest.mark.quick  # the core: nox -s quick


def one_error(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cpugpu-conformance summary: error: "), lines
    return lines[0].removeprefix("cpugpu-conformance summary: error: ")


def test_a_made_up_promise_that_passed_is_never_clean(tmp_path: Path, capsys) -> None:
    forged = rf.completed("2.13.0", cell="torch-2.13.0-cpu")
    forged["promises"]["99"] = {"title": "Made up", "devices": {"cpu": {"verdict": "passed", "passed": 5}}}
    path = tmp_path / "torch-2.13.0-cpu.json"
    path.write_text(json.dumps(forged), encoding="utf-8")
    assert main(["summary", str(tmp_path)]) == 2  # not a cell result: bad input
    out = capsys.readouterr().out
    assert f"torch-2.13.0-cpu: {path}: not a valid cell result at promises: '99' is not a promise of the contract " \
           f"(1-{len(PROMISES)})" in out.splitlines()
    [row] = summary.summarize(tmp_path)
    assert (row.answer, row.clean) == ("unreadable", False)


def test_a_cell_name_with_a_newline_stays_on_its_row(tmp_path: Path, capsys) -> None:
    rf.write(tmp_path, "a.json", rf.completed("2.13.0", cell="torch-2.13.0-cpu\ntorch-9.9.9-cpu  9.9.9  cpu  passed"))
    rf.write(tmp_path, "b.json", rf.incomplete("2.14.1", "crashed", "boom", cell="torch-2.14.1-cpu\nforged"))
    assert main(["summary", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 2 + 1 + 1, lines  # header, two rows, one reason, the count
    assert lines[1].split()[:4] == ["torch-2.13.0-cpu", "torch-9.9.9-cpu", "9.9.9", "cpu"]
    assert lines[2].split()[:3] == ["torch-2.14.1-cpu", "forged", "2.14.1"]
    assert lines[3] == "torch-2.14.1-cpu forged: crashed: boom"


@pytest.mark.parametrize("name", ["../good", "/etc/passwd", "sub/torch-2.13.0-cpu", "..", ".", ".hidden",
                                  "torch-2.13.0-cpu\nx", "a\\b"])
def test_a_cell_name_that_is_not_a_plain_name_is_one_line_exit_2(tmp_path: Path, capsys, name: str) -> None:
    results_dir = tmp_path / "results"
    results_dir.mkdir()
    rf.write(results_dir, "torch-2.13.0-cpu.json", rf.completed("2.13.0", cell="torch-2.13.0-cpu"))
    rf.write(tmp_path, "good.json", rf.completed("2.13.0", cell="good"))  # ../good: outside the folder
    assert main(["summary", str(results_dir), "--cells", f"torch-2.13.0-cpu,{name}"]) == 2
    error = one_error(capsys)
    assert error.startswith("--cells: cell name ")
    assert error.endswith(("not a plain cell name (a result file's name in the results folder, without .json)",
                           "has control characters"))


def test_summarize_itself_refuses_a_name_outside_the_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a plain cell name"):
        summary.summarize(tmp_path, ["../good"])


def test_an_empty_results_dir_argument_is_one_line_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    rf.write(tmp_path, "torch-2.13.0-cpu.json", rf.completed("2.13.0", cell="torch-2.13.0-cpu"))
    assert main(["summary", ""]) == 2
    assert one_error(capsys) == "RESULTS_DIR '': an empty path (it would stand for the current folder)"


def test_a_cell_that_wrote_no_answer_this_run_is_never_its_old_pass(tmp_path: Path, capsys) -> None:
    """nox names each cell whose command ended without an answer: the pass left there is an earlier run's."""
    rf.write(tmp_path, "torch-2.13.0-cpu.json", rf.completed("2.13.0", cell="torch-2.13.0-cpu"))
    rf.write(tmp_path, "torch-2.14.1-cpu.json", rf.completed("2.14.1", cell="torch-2.14.1-cpu"))
    assert main(["summary", str(tmp_path), "--cells", "torch-2.13.0-cpu,torch-2.14.1-cpu",
                 "--no-answer", "torch-2.14.1-cpu"]) == 1
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("torch-")}
    assert rows["torch-2.13.0-cpu"].split()[3] == "passed"
    assert "NO RESULT" in rows["torch-2.14.1-cpu"]
    assert "its cell wrote no answer in this run" in out


def test_a_no_answer_name_that_is_not_a_plain_name_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["summary", str(tmp_path), "--no-answer", "../x"]) == 2
    assert "../x" in one_error(capsys)


def test_hidden_files_are_not_cells(tmp_path: Path, capsys) -> None:
    """A staging or editor file (.x.json) is no cell of the results folder."""
    rf.write(tmp_path, "torch-2.13.0-cpu.json", rf.completed("2.13.0", cell="torch-2.13.0-cpu"))
    (tmp_path / ".torch-2.14.1-cpu.json").write_text("{", encoding="utf-8")
    assert main(["summary", str(tmp_path)]) == 0
    assert [row.cell for row in summary.summarize(tmp_path)] == ["torch-2.13.0-cpu"]


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_file_is_its_row_and_one_line_naming_it_exit_2(tmp_path: Path, capsys, case: str) -> None:
    """Issue 22: any JSON that is not an object, wrong types anywhere: one line, exit 2, never a traceback."""
    text, key = MALFORMED[case]
    rf.write(tmp_path, "torch-2.13.0-cpu.json", rf.completed("2.13.0", cell="torch-2.13.0-cpu"))
    bad = tmp_path / "torch-2.14.1-cpu.json"
    bad.write_text(text, encoding="utf-8")
    assert main(["summary", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.err == ""
    lines = captured.out.splitlines()
    [row] = [line for line in lines if line.startswith("torch-2.14.1-cpu ")]
    assert row.split()[1:4] == ["2.14.1", "cpu", "UNREADABLE"]
    [why] = [line for line in lines if line.startswith("torch-2.14.1-cpu: ")]
    assert why.startswith(f"torch-2.14.1-cpu: {bad}: not a ") and (key is None or key in why), why
    assert lines[-1] == "2 cells, 1 clean, 1 not (counts are promise x device outcomes)"


def test_a_missing_cell_is_still_exit_1_not_bad_input(tmp_path: Path, capsys) -> None:
    rf.write(tmp_path, "torch-2.13.0-cpu.json", rf.completed("2.13.0", cell="torch-2.13.0-cpu"))
    assert main(["summary", str(tmp_path), "--cells", "torch-2.13.0-cpu,torch-2.14.1-cpu"]) == 1
    assert "torch-2.14.1-cpu: " in capsys.readouterr().out


def test_a_cell_asked_for_whose_file_holds_another_cells_result_has_no_answer(tmp_path: Path, capsys) -> None:
    """A copied artifact: --cells torch-2.14.1-cpu found torch-2.14.1-cpu.json holding the clean 2.13.0
    cell's result, and showed that cell's pass as its row, exit 0."""
    rf.write(tmp_path, "torch-2.14.1-cpu.json", rf.completed("2.13.0", cell="torch-2.13.0-cpu"))
    assert main(["summary", str(tmp_path), "--cells", "torch-2.14.1-cpu"]) == 2
    lines = capsys.readouterr().out.splitlines()
    [row] = [line for line in lines if line.startswith("torch-2.14.1-cpu ")]
    assert "UNREADABLE" in row.split()
    [why] = [line for line in lines if line.startswith("torch-2.14.1-cpu: ")]
    assert "holds the result of cell 'torch-2.13.0-cpu'" in why, why
    assert lines[-1] == "1 cells, 0 clean, 1 not (counts are promise x device outcomes)"
