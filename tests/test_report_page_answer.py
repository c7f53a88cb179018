"""The page's answer comes first, per device, and the newest release is the first row; the committed
compat/ is what the report makes of its own data. These tests always run.
"""

from __future__ import annotations

import json
from pathlib import Path

import result_factory as rf
from compat_sample import results_from_compat
from report_page_samples import (
    COMPAT,
    page_dir_fixture,  # noqa: F401 - the fixture `page_dir`
    write_report,
)
from report_reading import matrix, parse

from cpugpu_conformance.report import marks, render

# --- the answer first -----------------------------------------------------------------------


def test_the_answer_comes_first_per_device(page_dir: Path):
    html = (page_dir / "index.html").read_text(encoding="utf-8")
    assert html.index('<h1>') < html.index('id="answer"') < html.index('<nav') < html.index('<table id="matrix">')
    rows = {row[0][2].strip(): [" ".join(text.split()) for _, _, text in row[1:]]
            for row in parse(html).tables["answer-table"][1:]}
    # cpu: 2.15.0, 2.13.0 and 2.11.0 conform; 2.14.1 failed, 2.12.1 left promises out (clean), six did not complete
    assert rows["cpu"][0] == "4 of 11"
    assert rows["cpu"][1] == f"2.15.0: {marks.ANSWERS['passed'].label}"
    assert rows["cpu"][2].startswith("2.14.1 (FAILED), 2.9.0 (error), 2.8.0 (wrong torch)")
    # cuda was asked for in four releases: it conformed in three (2.14.1 failed on cpu only); 2.13.0 had no GPU
    assert rows["cuda"] == ["3 of 4", f"2.15.0: {marks.ANSWERS['passed'].label}", "2.13.0 (UNTESTED)"]
    md = (page_dir / "COMPAT.md").read_text(encoding="utf-8")
    assert md.index("## The answer") < md.index("\n| Release, device |")
    assert f"| **cuda** | 3 of 4 | 2.15.0: {marks.ANSWERS['passed'].label} | 2.13.0 (UNTESTED) |" in md


def test_a_device_never_run_says_so_first(tmp_path: Path):
    out = write_report(tmp_path, {"a.json": rf.completed("2.14.1"), "b.json": rf.completed("2.15.0")})
    html = (out / "index.html").read_text(encoding="utf-8")
    rows = {row[0][2].strip(): [" ".join(text.split()) for _, _, text in row[1:]]
            for row in parse(html).tables["answer-table"][1:]}
    assert rows == {"cpu": ["2 of 2", f"2.15.0: {marks.ANSWERS['passed'].label}", "none"],
                    "cuda": ["never run: no result file asked for cuda"]}
    md = (out / "COMPAT.md").read_text(encoding="utf-8")
    assert "| **cuda** | **never run**: no result file asked for cuda | — | — |" in md
    summary = json.loads((out / "compat.json").read_text(encoding="utf-8"))["summary"]
    assert summary["releases"] == {"oldest": "2.14.1", "newest": "2.15.0"}
    cuda = summary["devices"][1]
    assert (cuda["device"], cuda["never_run"], cuda["releases"], cuda["newest"]) == ("cuda", True, [], [])


def test_the_newest_release_is_the_first_row(page_dir: Path):
    labels, _ = matrix(parse((page_dir / "index.html").read_text(encoding="utf-8")))
    assert labels[:2] == ["2.15.0 cpu", "2.15.0 cuda"] and labels[-1] == "2.4.0 cpu"


# --- the committed compat/ is what report makes of its own data -----------------------------


def test_the_committed_compat_is_what_the_report_makes_of_its_data(tmp_path: Path):
    """compat/ was made from a real 16-release run; its result files are read back out of
    compat.json (tests/compat_sample.py) and reported again: the same bytes, or compat/ is stale.
    Regenerate it as docs/matrix.md says."""
    data = json.loads((COMPAT / "compat.json").read_text(encoding="utf-8"))
    out = write_report(tmp_path, results_from_compat(data))
    for name in render.OUTPUTS:
        assert (out / name).read_bytes() == (COMPAT / name).read_bytes(), f"compat/{name} is stale: regenerate it"
