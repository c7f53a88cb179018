"""report's matrix, in index.html and in COMPAT.md: a row per cell and device it was asked for, the
newest release first; each row's answer on its device, where only a clean one reads clean; a cell that
did not complete marked across its row, never a pass; the pass, FAIL, untested, n/a and recorded marks;
a device not asked for, promises left out, a cell that names no device, two cells of one release.
"""

from __future__ import annotations

from pathlib import Path

import result_factory as rf
from report_reading import answer, label, matrix, md_matrix, parse
from report_sample import CRASH_DETAIL, NO_CUDA, OBSERVED_11, ROWS, cuda_missing
from report_sample_dirs import (
    report_dir_fixture,  # noqa: F401 - the fixture `report_dir`
    results_dir_fixture,  # noqa: F401 - the fixture `results_dir`
)

from cpugpu_conformance import results
from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.promises import PROMISES
from cpugpu_conformance.report import view as compat


def test_html_matrix_has_one_row_per_cell_and_asked_device_newest_first(report_dir: Path):
    labels, table = matrix(parse((report_dir / "index.html").read_text(encoding="utf-8")))
    assert labels == [f"{r} {d}" for r, d in ROWS]
    assert list(table) == ["Answer", *(f"{n}. {title}" for n, title in PROMISES.items())]


def test_every_row_shows_its_answer_on_its_device_and_only_a_clean_one_reads_clean(report_dir: Path):
    labels, table = matrix(parse((report_dir / "index.html").read_text(encoding="utf-8")))
    answers = {label: text for label, (_, text) in table["Answer"].items()}
    clean = [row for row, text in answers.items() if text.startswith(answer("passed"))]
    # 2.13.0 passed every promise on cpu; its cuda was not there, so the cell is not clean, and says so
    assert clean == ["2.14.1 cuda", "2.14.0 cpu", "2.13.0 cpu"]
    assert answers["2.14.0 cpu"] == answer("passed")
    assert answers["2.13.0 cpu"] == f"{answer('passed')} cell: {answer('untested')}"
    # untested throughout for one reason: said once, by the answer
    assert answers["2.13.0 cuda"] == f"{answer('untested')} every promise: {NO_CUDA}"
    assert answers["2.14.1 cpu"] == answer("failed")
    assert answers["2.14.1 cuda"] == f"{answer('passed')} cell: {answer('failed')}"
    assert answers["2.12.1 cpu"] == answers["2.12.1 cpu"] == answer("untested")
    assert answers["2.8.0 cpu"] == label("interrupted")
    attrs, _ = table["Answer"]["2.12.1 cpu"]
    assert "promise 4" in attrs["title"] and "a-untested" in attrs["class"]
    cuda_attrs, _ = table["Answer"]["2.13.0 cuda"]
    assert "on cuda: untested" in cuda_attrs["title"] and "on cpu" not in cuda_attrs["title"]
    md_answers = md_matrix((report_dir / "COMPAT.md").read_text(encoding="utf-8"))[1]["Answer"]
    assert [row for row, text in md_answers.items() if text.startswith(answer("passed"))] == clean
    assert md_answers["2.13.0 cpu"] == f"{answer('passed')} (cell: {answer('untested')})"


def test_cells_without_verdicts_are_marked_in_every_row_never_pass(report_dir: Path):
    labels, table = matrix(parse((report_dir / "index.html").read_text(encoding="utf-8")))
    assert len(table) == len(PROMISES) + 1  # and the answer column
    words = {status: label(status) for status in ("crashed", "timed_out", "not_installed", "wrong_torch", "error",
                                                 "interrupted")}
    release_of = {"crashed": "2.15.0", "timed_out": "2.10.0", "not_installed": "2.9.1", "wrong_torch": "2.11.0",
                  "error": "2.12.0", "interrupted": "2.8.0"}
    for status, release in release_of.items():
        cols = [label for label in labels if label.startswith(f"{release} ")]
        assert len(cols) == 1  # the device it asked for
        for title, row in table.items():
            if title == "Answer":
                continue
            for col in cols:
                attrs, text = row[col]
                # one mark across the row, with the status's headline: every promise has it
                assert text.startswith(f"{words[status]} (every promise)")
                assert attrs["colspan"] == str(len(PROMISES))
                assert f"m-{status}" in attrs["class"] and "pass" not in text
    assert table["2. Zeroed"]["2.15.0 cpu"][1] == f"{label('crashed')} (every promise) pytest killed by SIGABRT; last lines of the log"
    # the full detail (the log's tail) is on the page, and the headline on hover
    html = (report_dir / "index.html").read_text(encoding="utf-8")
    assert '<pre class="detail">' + CRASH_DETAIL + "</pre>" in html
    assert table["1. Shape and dtype"]["2.15.0 cpu"][0]["title"] == "pytest killed by SIGABRT; last lines of the log"


def test_html_marks_pass_fail_untested_na_recorded(report_dir: Path):
    _, table = matrix(parse((report_dir / "index.html").read_text(encoding="utf-8")))
    row3 = table["3. Mutable wherever they were made"]
    assert row3["2.13.0 cpu"][1] == "✓ pass" == label("passed")
    assert row3["2.14.1 cpu"][1] == "✗ FAIL" == label("failed")
    assert row3["2.14.1 cuda"][1] == label("passed")
    # a device asked for but missing is untested, with the reason, and never looks like a pass
    untested_attrs, untested_text = row3["2.13.0 cuda"]
    # the reason is on hover, and said once for the row by its answer (every promise there is untested for it)
    assert untested_text == "? untested" and untested_attrs["title"] == NO_CUDA
    assert "m-untested" in untested_attrs["class"]
    missing_attrs, missing_text = table["4. Two storages"]["2.12.1 cpu"]
    assert missing_text.startswith(label("untested")) and "no verdict for promise 4" in missing_attrs["title"]
    assert table["10. Devices"]["2.14.0 cpu"][1] == "– n/a" == label("not_applicable")
    assert table["10. Devices"]["2.14.1 cuda"][1] == label("passed")
    row11 = table[f"11. {PROMISES['11']}"]
    assert row11["2.14.1 cpu"][1] == " ".join(f"¶ recorded {OBSERVED_11}".split())


def test_two_cells_of_one_release_are_told_apart(tmp_path: Path):
    d = tmp_path / "r"
    d.mkdir()
    rf.write(d, "cpu.json", rf.completed("2.13.0", cell="torch-2.13.0"))
    rf.write(d, "gpu.json", rf.completed("2.13.0+cu128", cell="local-h200", cuda=True))
    assert main(["report", str(d), "--out", str(tmp_path / "o")]) == 0
    labels, _ = md_matrix((tmp_path / "o" / "COMPAT.md").read_text(encoding="utf-8"))
    # the same release: in cell order, reversed as the rows are (newest first), each cell's devices in order
    assert labels == ["2.13.0 cpu (torch-2.13.0)", "2.13.0 cpu (local-h200)", "2.13.0 cuda (local-h200)"]


def test_a_device_the_cell_was_not_asked_for_gets_no_column(tmp_path: Path):
    d = tmp_path / "r"
    d.mkdir()
    cpu_only = rf.completed("2.13.0", cell="torch-2.13.0-cpu")  # cuda: not requested
    missing_gpu = cuda_missing(rf.completed("2.14.1", cell="torch-2.14.1-all"))  # asked for cuda, had none
    crashed = rf.incomplete("2.15.0", "crashed", "killed by SIGABRT", cell="torch-2.15.0-cpu")
    for name, result in (("a.json", cpu_only), ("b.json", missing_gpu), ("c.json", crashed)):
        rf.write(d, name, result)
    assert main(["report", str(d), "--out", str(tmp_path / "o")]) == 0
    labels, table = md_matrix((tmp_path / "o" / "COMPAT.md").read_text(encoding="utf-8"))
    assert labels == ["2.15.0 cpu", "2.14.1 cpu", "2.14.1 cuda", "2.13.0 cpu"]
    promises = [column for title, column in table.items() if title != "Answer"]
    assert all(column["2.14.1 cuda"].startswith(label("untested")) for column in promises[:10]), \
        "a device asked for but missing is untested"
    assert promises[10]["2.14.1 cuda"] == label("not_applicable")  # promise 11 is about cpu only
    assert [table["Answer"][row] for row in labels] == [
        label("crashed"), f"{answer('passed')} (cell: {answer('untested')})", answer("untested"), answer("passed")]
    assert all("crashed" in column["2.15.0 cpu"] for column in table.values())


def test_promises_left_out_with_promise_are_not_requested_and_not_untested(tmp_path: Path):
    d = tmp_path / "r"
    d.mkdir()
    chosen = rf.completed("2.13.0")
    chosen["requested"]["promises"] = ["3"]
    for number, promise in chosen["promises"].items():
        if number != "3":
            promise["devices"]["cpu"] = {"verdict": "not_requested"}
    rf.write(d, "a.json", chosen)
    assert main(["report", str(d), "--out", str(tmp_path / "o")]) == 0
    _, table = md_matrix((tmp_path / "o" / "COMPAT.md").read_text(encoding="utf-8"))
    assert table["Answer"]["2.13.0 cpu"] == answer("passed")
    assert [column["2.13.0 cpu"] for column in list(table.values())[2:5]] == [
        label("not_requested"), label("passed"), label("not_requested")]


def test_a_cell_that_names_no_device_still_gets_a_column(tmp_path: Path):
    d = tmp_path / "r"
    d.mkdir()
    rf.write(d, "a.json", rf.completed("2.13.0"))
    rf.write(d, "b.json", rf.validate(results.CellResult.new("ci-fallback", "error", detail="nox failed before the cell ran")))
    assert main(["report", str(d), "--out", str(tmp_path / "o")]) == 0
    labels, table = md_matrix((tmp_path / "o" / "COMPAT.md").read_text(encoding="utf-8"))
    assert labels == [f"unknown {compat.NO_DEVICE}", "2.13.0 cpu"]
    assert all(column[labels[0]] == label("error") for column in table.values())
