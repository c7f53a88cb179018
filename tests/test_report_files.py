"""report: result files -> compat.json, COMPAT.md, index.html, badge.json. The four files and nothing
else; compat.json valid against its schema, with every cell, and every mark and answer kind known to the
schema; corrupt, invalid and duplicate cells named, never fatal; the same bytes from the same results;
its own output never read back as results; no results, or an --out it cannot write, is exit 2.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
import result_factory as rf
from report_reading import matrix, md_matrix, parse
from report_sample import NO_CUDA, RELEASES, REPRODUCER
from report_sample_dirs import (
    report_dir_fixture,  # noqa: F401 - the fixture `report_dir`
    results_dir_fixture,  # noqa: F401 - the fixture `results_dir`
)

from cpugpu_conformance import results
from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.report import marks


def test_writes_the_four_files_and_no_temporaries(report_dir: Path):
    assert sorted(p.name for p in report_dir.iterdir()) == ["COMPAT.md", "badge.json", "compat.json", "index.html"]


def test_compat_json_validates_against_its_schema_and_carries_every_cell(report_dir: Path):
    data = json.loads((report_dir / "compat.json").read_text(encoding="utf-8"))
    jsonschema.validate(data, results.schema("compat"))
    assert (data["schema"], data["schema_version"]) == ("cpugpu-conformance/compat", 5)
    names = {c["cell"] for c in data["cells"]}
    assert names == {f"torch-{v}" for v in RELEASES}
    assert sorted(data["generated_from"]) == sorted(f"{n}.json" for n in names)
    by_name = {c["cell"]: c for c in data["cells"]}
    assert by_name["torch-2.14.1"]["environment"]["gpu_name"] == "NVIDIA H200"
    failed = by_name["torch-2.14.1"]["promises"]["3"]["devices"]["cpu"]
    assert failed["verdict"] == "failed" and failed["failures"][0]["reproducer"] == REPRODUCER
    assert by_name["torch-2.14.1"]["marks"]["3"]["cpu"]["mark"] == "failed"
    assert by_name["torch-2.13.0"]["marks"]["1"]["cuda"] == {"mark": "untested", "note": NO_CUDA}
    assert by_name["torch-2.12.1"]["marks"]["4"]["cpu"]["mark"] == "untested"
    assert by_name["torch-2.14.0"]["marks"]["10"]["cpu"]["mark"] == "not_applicable"
    assert by_name["torch-2.8.0"]["marks"]["1"]["cpu"]["mark"] == "interrupted"
    answers = {name: cell["answer"]["kind"] for name, cell in by_name.items()}
    assert answers["torch-2.14.0"] == "passed" and answers["torch-2.14.1"] == "failed"
    assert answers["torch-2.13.0"] == answers["torch-2.12.1"] == "untested"
    assert answers["torch-2.15.0"] == "crashed" and answers["torch-2.8.0"] == "interrupted"
    assert data["duplicate_cells"] == []


def test_the_marks_are_the_outcome_kinds_and_the_schema_knows_them_all():
    mark_kinds = results.schema("compat")["$defs"]["mark_kind"]["enum"]
    answer_kinds = results.schema("compat")["$defs"]["answer_kind"]["enum"]
    statuses = [s for s in results.CELL_STATUSES if s != "completed"]
    assert set(mark_kinds) == set(marks.MARKS) == {"passed", "failed", "recorded", "untested", "not_applicable",
                                                   "not_requested", "waived", "known_failure", *statuses}
    assert set(answer_kinds) == set(marks.ANSWERS) == {"passed", "failed", "untested", "waived", "known_failure",
                                                       "not_applicable", *statuses}
    assert {*results.VERDICT_KINDS, *results.NOT_ASKED_KINDS} <= set(marks.MARKS)
    for styles in (marks.MARKS, marks.ANSWERS):
        labels = [style.label for style in styles.values()]
        assert len(set(labels)) == len(labels)
        # only a pass reads as one: no other mark's word says pass or clean
        assert [k for k, s in styles.items() if "pass" in s.word or "clean" in s.word] == ["passed"]


def test_compat_json_schema_rejects_a_pass_mark_it_does_not_know(report_dir: Path):
    data = json.loads((report_dir / "compat.json").read_text(encoding="utf-8"))
    data["cells"][0]["marks"]["1"]["cpu"]["mark"] = "ok"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, results.schema("compat"))


def test_corrupt_and_invalid_files_are_named_not_fatal(results_dir: Path, tmp_path: Path, capsys):
    out = tmp_path / "out"
    assert main(["report", str(results_dir), "--out", str(out)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 2
    assert any("corrupt.json" in w and "not JSON" in w for w in warnings)
    assert any("invalid.json" in w and "not a valid cell result" in w for w in warnings)
    data = json.loads((out / "compat.json").read_text(encoding="utf-8"))
    assert {s["file"] for s in data["skipped_files"]} == {"corrupt.json", "invalid.json"}
    assert "corrupt.json" in (out / "index.html").read_text(encoding="utf-8")
    assert "corrupt.json" in (out / "COMPAT.md").read_text(encoding="utf-8")


def test_report_is_deterministic(results_dir: Path, report_dir: Path, tmp_path: Path):
    again = tmp_path / "again"
    assert main(["report", str(results_dir), "--out", str(again)]) == 0
    for name in ("compat.json", "COMPAT.md", "index.html"):
        assert (again / name).read_bytes() == (report_dir / name).read_bytes()


def test_out_inside_results_dir_does_not_read_its_own_output(results_dir: Path, tmp_path: Path, capsys):
    own = shutil.copytree(results_dir, tmp_path / "results")
    assert main(["report", str(own), "--out", str(own)]) == 0
    assert main(["report", str(own), "--out", str(own)]) == 0
    err = capsys.readouterr().err
    assert "compat.json" not in err and "badge.json" not in err
    assert len(json.loads((own / "compat.json").read_text(encoding="utf-8"))["cells"]) == len(RELEASES)


@pytest.mark.parametrize("case", ["missing", "empty", "all-corrupt"])
def test_no_results_is_exit_2_naming_the_folder(tmp_path: Path, capsys, case):
    d = tmp_path / "results"
    if case != "missing":
        d.mkdir()
    if case == "all-corrupt":
        (d / "x.json").write_text("[", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["report", str(d), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("cpugpu-conformance report: error: ") and str(d) in err[-1]
    assert not out.exists()


def test_unwritable_output_is_exit_2_and_keeps_what_was_there(results_dir: Path, tmp_path: Path, capsys):
    blocker = tmp_path / "out"
    blocker.write_text("a file where the folder should be", encoding="utf-8")
    assert main(["report", str(results_dir), "--out", str(blocker)]) == 2
    assert "cannot write the report" in capsys.readouterr().err
    assert blocker.read_text(encoding="utf-8") == "a file where the folder should be"


def test_duplicate_cell_names_are_flagged_and_each_column_names_its_file(tmp_path: Path, capsys):
    d = tmp_path / "r"
    d.mkdir()
    rf.write(d, "first.json", rf.completed("2.13.0"))
    rf.write(d, "second.json", rf.completed("2.13.0", failed={("3", "cpu"): [rf.failure("t", "boom", None)]}))
    out = tmp_path / "o"
    assert main(["report", str(d), "--out", str(out)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "torch-2.13.0" in warnings[0]
    assert "first.json" in warnings[0] and "second.json" in warnings[0]
    labels, _ = md_matrix((out / "COMPAT.md").read_text(encoding="utf-8"))
    assert labels == ["2.13.0 cpu (torch-2.13.0, from second.json)", "2.13.0 cpu (torch-2.13.0, from first.json)"]
    md = (out / "COMPAT.md").read_text(encoding="utf-8")
    assert "**Duplicate cells**" in md and "- torch-2.13.0: `first.json`, `second.json`" in md
    html = (out / "index.html").read_text(encoding="utf-8")
    labels, _ = matrix(parse(html))
    assert len(set(labels)) == 2 and 'id="duplicate-cells"' in html
    data = json.loads((out / "compat.json").read_text(encoding="utf-8"))
    assert data["duplicate_cells"] == [{"cell": "torch-2.13.0", "files": ["first.json", "second.json"]}]
    assert [(c["source"], c["duplicate"]) for c in data["cells"]] == [("first.json", True), ("second.json", True)]
