"""report: result files -> compat.json, COMPAT.md, index.html, badge.json."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest
import result_factory as rf

from cpugpu_conformance import results
from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.promises import PROMISES
from cpugpu_conformance.report import marks
from cpugpu_conformance.report import render as report
from cpugpu_conformance.report import view as compat

REPRODUCER = 'import torch\nprint("<script>alert(1)</script> | pipe")\n'
OBSERVED_11 = "RuntimeError: accelerator | none\nsecond line <b>"
# the shape cell.py writes: what happened, then the log's tail
CRASH_DETAIL = "pytest killed by SIGABRT; last lines of the log:\ncollected 40 items\nFatal Python error: Aborted"
NO_CUDA = "no CUDA device on this machine"


def cuda_missing(result: dict) -> dict:
    """A cell asked for every device on a machine without CUDA, as the suite records it."""
    result["requested"]["device"] = "all"
    result["devices"]["cuda"] = {"status": "skipped", "reason": NO_CUDA}
    for promise in result["promises"].values():
        promise["devices"]["cuda"] = {"verdict": "skipped", "reason": NO_CUDA}
    return result


# Module-scoped: building and rendering the matrix once keeps the file fast; tests only read it.
@pytest.fixture(scope="module")
def results_dir(tmp_path_factory) -> Path:
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


@pytest.fixture(scope="module")
def report_dir(results_dir: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "compat"
    assert main(["report", str(results_dir), "--out", str(out)]) == 0
    return out


class Page(HTMLParser):
    """Collects the tables of the page and checks that tags nest properly."""

    VOID = frozenset({"meta", "br", "img", "hr", "input", "link", "wbr"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tables: dict[str, list[list[tuple[str, dict[str, str], str]]]] = {}
        self._table: str | None = None
        self._row: list | None = None
        self._cell: list | None = None

    def handle_starttag(self, tag, attrs):
        attrs = {k: v or "" for k, v in attrs}
        if tag not in self.VOID:
            self.stack.append(tag)
        if tag == "table":
            self._table = attrs.get("id", f"table{len(self.tables)}")
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self._row = []
            self.tables[self._table].append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = [tag, attrs, ""]
            self._row.append(self._cell)

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()
        if tag in ("td", "th"):
            self._cell = None
        elif tag == "tr":
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[2] += data


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    assert page.errors == [] and page.stack == [], (page.errors, page.stack)
    return page


def matrix(page: Page) -> tuple[list[str], dict[str, dict[str, tuple[dict[str, str], str]]]]:
    """(row labels, newest first; promise title -> row label -> (attrs, text)) of the matrix,
    whose rows are release x device and whose columns are the promises; each row's answer is
    under the title "Answer"."""
    header, *rows = page.tables["matrix"]
    titles = [" ".join(text.split()) for _, _, text in header[1:]]
    assert header[0][2].strip() == "Release, device" and titles[0] == "Answer", titles
    labels, table = [], {title: {} for title in titles}
    for row in rows:
        label = " ".join(row[0][2].split())
        # a cell spanning columns (a cell that did not complete: one mark for every promise) stands in each
        cells = [cell for cell in row[1:] for _ in range(int(cell[1].get("colspan") or 1))]
        assert row[0][0] == "th" and len(cells) == len(titles), f"row {label!r} has {len(cells)} cells, header {len(header)}"
        labels.append(label)
        for title, (_, attrs, text) in zip(titles, cells):
            table[title][label] = (attrs, " ".join(text.split()))
    return labels, table


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


class Attributes(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.seen.extend((tag, k, v or "") for k, v in attrs)


def test_html_is_self_contained(report_dir: Path):
    html = (report_dir / "index.html").read_text(encoding="utf-8")
    lowered = html.lower()
    for external in ("<link", "<script", "<img", "<iframe", "@import", "url("):
        assert external not in lowered, external
    attrs = Attributes()
    attrs.feed(html)
    assert not [a for a in attrs.seen if a[1] in ("src", "srcset", "action", "data", "background")]
    hrefs = [v for _, k, v in attrs.seen if k == "href"]
    assert hrefs and all(h.startswith("#") for h in hrefs), hrefs
    # URLs quoted in torch's error messages stay text, never links
    assert "https://example.org/torch-issue" in html


def test_html_escapes_result_text(report_dir: Path):
    html = (report_dir / "index.html").read_text(encoding="utf-8")
    assert "<script>" not in html and "<b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    page = parse(html)
    # The reproducer survives verbatim once unescaped, so it can be pasted into a bug report.
    assert REPRODUCER.strip() in html.replace("&lt;", "<").replace("&gt;", ">").replace("&#34;", '"')
    assert {"matrix", "verdict-changes-table", "observation-changes-table", "unchanged-probes-table",
            "observations-table", "legend-table", "environments-table"} <= set(page.tables)


RELEASES = ["2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0"]
# A row per device each cell was asked to test: 2.13.0 asked for cuda and had none.


# The matrix's rows: newest release first, each cell's devices in contract order.
ROWS = [(r, d) for r in reversed(RELEASES) for d in (("cpu", "cuda") if r in ("2.13.0", "2.14.1") else ("cpu",))]


def test_html_matrix_has_one_row_per_cell_and_asked_device_newest_first(report_dir: Path):
    labels, table = matrix(parse((report_dir / "index.html").read_text(encoding="utf-8")))
    assert labels == [f"{r} {d}" for r, d in ROWS]
    assert list(table) == ["Answer", *(f"{n}. {title}" for n, title in PROMISES.items())]


def label(kind: str) -> str:
    """How a mark reads on the page: its symbol and its word."""
    return marks.MARKS[kind].label


def answer(kind: str) -> str:
    return marks.ANSWERS[kind].label


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


def test_html_links_each_failure_to_its_reproducer(report_dir: Path):
    html = (report_dir / "index.html").read_text(encoding="utf-8")
    anchors = re.findall(r'<a href="#(fail-[0-9]+-3)">', html)
    assert len(anchors) == 1
    section = html[html.index(f'<section id="{anchors[0]}">'):]
    section = section[: section.index("</section>")]
    assert "test_mutable_after_inference" in section and 'class="reproducer"' in section


def test_the_full_probe_table_highlights_changes_against_the_previous_release(report_dir: Path):
    page = parse((report_dir / "index.html").read_text(encoding="utf-8"))
    header, *rows = page.tables["observations-table"]
    # Cells that never ran have no observations and no column here; each column names its machine.
    assert [t.strip() for _, _, t in header[1:]] == [
        "2.12.1 torch-2.12.1 no accelerator", "2.13.0 torch-2.13.0 no accelerator",
        "2.14.0 torch-2.14.0 no accelerator", "2.14.1 torch-2.14.1 CUDA (NVIDIA H200)"]
    by_probe = {row[0][2].strip(): row[1:] for row in rows}
    changed = by_probe["numpy.dtypes"]
    assert ["changed" in attrs.get("class", "") for _, attrs, _ in changed] == [False, False, True, False]
    assert changed[2][1]["title"] == "differs from 2.13.0"
    assert changed[2][2].strip() == 'changed: ["bool", "float32", "int64", "uint16"]'
    # 2.14.1 differs from 2.14.0, but on another kind of machine: listed, never highlighted as a change
    gpu_only = by_probe["inference_tensor.is_inference"]
    assert [text.strip() for _, _, text in gpu_only] == ["true", "true", "true", "false"]
    assert not any("changed" in attrs.get("class", "") for _, attrs, _ in gpu_only)
    # only probes that changed are rows here; the others are folded into their own table
    assert "numpy.bfloat16" not in by_probe
    unchanged = {row[0][2].strip(): [text.strip() for _, _, text in row[1:]]
                 for row in page.tables["unchanged-probes-table"][1:]}
    # the probe's description is a column of its own, not part of the value
    assert unchanged["numpy.bfloat16"] == ["raises TypeError: Got unsupported ScalarType BFloat16",
                                           "torch.zeros(2, dtype=torch.bfloat16).numpy()"]


def test_a_changed_probe_description_is_not_a_behaviour_change(tmp_path: Path):
    d = tmp_path / "r"
    d.mkdir()
    reworded = {k: dict(v, doc="reworded") for k, v in rf.BASE_OBSERVATIONS.items()}
    rf.write(d, "a.json", rf.completed("2.13.0"))
    rf.write(d, "b.json", rf.completed("2.14.1", observations=reworded))
    assert main(["report", str(d), "--out", str(tmp_path / "o")]) == 0
    html = (tmp_path / "o" / "index.html").read_text(encoding="utf-8")
    page = parse(html)
    assert 'class="changed"' not in html and "observation-changes-table" not in page.tables
    assert "No observed behaviour changed between consecutive releases." in html
    # the newest description is the one shown
    docs = [row[-1][2] for row in page.tables["unchanged-probes-table"][1:]]
    assert len(docs) == len(rf.BASE_OBSERVATIONS) and set(docs) == {"reworded"}
    data = json.loads((tmp_path / "o" / "compat.json").read_text(encoding="utf-8"))
    assert data["changes"]["observations"] == []


def markdown_table(md: str) -> list[list[str]]:
    """The matrix of COMPAT.md (the table whose header starts with 'Release, device'), row by row."""
    lines = md[md.index("\n| Release, device |") + 1:].split("\n\n", 1)[0].splitlines()
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def md_matrix(md: str) -> tuple[list[str], dict[str, dict[str, str]]]:
    """(row labels, newest first; column title -> row label -> text) of COMPAT.md's matrix, as matrix() reads the page."""
    header, rule, *rows = markdown_table(md)
    assert header[:2] == ["Release, device", "Answer"] and all(len(r) == len(header) for r in [rule, *rows])
    labels = [row[0].removeprefix("**").removesuffix("**") for row in rows]
    return labels, {title: {label: row[i] for label, row in zip(labels, rows)} for i, title in enumerate(header[1:], 1)}


def test_markdown_table_has_every_row_and_escapes_cell_text(report_dir: Path):
    md = (report_dir / "COMPAT.md").read_text(encoding="utf-8")
    labels, table = md_matrix(md)
    assert labels == [f"{r} {d}" for r, d in ROWS]
    assert list(table) == ["Answer", *(f"{n}. {title}" for n, title in PROMISES.items())]
    recorded = table[f"11. {PROMISES['11']}"]["2.14.1 cpu"]
    assert recorded == "¶ recorded: RuntimeError: accelerator \\| none<br>second line &lt;b&gt;"
    assert all(column["2.15.0 cpu"] == label("crashed") for column in table.values())
    assert "<script>" not in md.replace("```python\n" + REPRODUCER, "")  # only inside its code fence


def test_markdown_lists_legend_environments_and_reproducers(report_dir: Path):
    md = (report_dir / "COMPAT.md").read_text(encoding="utf-8")
    for style in [*marks.MARKS.values(), *marks.ANSWERS.values()]:
        assert f"| {style.label} |" in md
    assert "### torch-2.14.1" in md and "- gpu_name: NVIDIA H200" in md
    assert "```python\n" + REPRODUCER + "```" in md
    assert "Fatal Python error: Aborted" in md
    # Markdown has no hover: each untested mark's reason is listed, once for a missing device
    untested = md[md.index("## Untested"):md.index("## Failures")]
    assert f"- 2.13.0 cuda: {NO_CUDA}" in untested
    assert "2.13.0 cuda, promise" not in untested
    assert "- 2.12.1 cpu, promise 4: the result has no verdict for promise 4 on cpu" in untested


def test_md_escape_and_fence():
    assert report.md_escape("a|b\nc\r\nd") == "a\\|b<br>c<br>d"
    assert report.md_escape("<x> & `y` *z*") == "&lt;x&gt; &amp; \\`y\\` \\*z\\*"
    assert report.md_escape(None) == "—" and report.md_escape({"b": 1}) == '{"b": 1}'
    fenced = report.md_fence("a\n````\nb")
    assert fenced.startswith("`````\n") and fenced.endswith("\n`````")


def test_report_is_deterministic(results_dir: Path, report_dir: Path, tmp_path: Path):
    again = tmp_path / "again"
    assert main(["report", str(results_dir), "--out", str(again)]) == 0
    for name in ("compat.json", "COMPAT.md", "index.html"):
        assert (again / name).read_bytes() == (report_dir / name).read_bytes()


def test_two_cells_of_one_release_are_told_apart(tmp_path: Path):
    d = tmp_path / "r"
    d.mkdir()
    rf.write(d, "cpu.json", rf.completed("2.13.0", cell="torch-2.13.0"))
    rf.write(d, "gpu.json", rf.completed("2.13.0+cu128", cell="local-h200", cuda=True))
    assert main(["report", str(d), "--out", str(tmp_path / "o")]) == 0
    labels, _ = md_matrix((tmp_path / "o" / "COMPAT.md").read_text(encoding="utf-8"))
    # the same release: in cell order, reversed as the rows are (newest first), each cell's devices in order
    assert labels == ["2.13.0 cpu (torch-2.13.0)", "2.13.0 cpu (local-h200)", "2.13.0 cuda (local-h200)"]


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


# --- publishing: all or nothing -------------------------------------------------------------


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every entry of a folder, hidden ones included: nothing may be left behind or lost."""
    return {p.name: (p.read_bytes() if p.is_file() else b"<dir>") for p in folder.iterdir()}


@pytest.fixture
def previous(results_dir: Path, tmp_path: Path) -> Path:
    """An --out folder holding a previous report and a file the user keeps there."""
    out = tmp_path / "out"
    assert main(["report", str(results_dir), "--out", str(out)]) == 0
    for name in report.OUTPUTS:
        (out / name).write_text(f"previous {name}\n", encoding="utf-8")
    (out / "README.txt").write_text("mine\n", encoding="utf-8")
    return out


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line]


def test_a_report_keeps_other_files_in_out_and_publishes_0644(results_dir: Path, previous: Path, capsys):
    old_umask = os.umask(0o077)
    try:
        assert main(["report", str(results_dir), "--out", str(previous)]) == 0
    finally:
        os.umask(old_umask)
    assert sorted(p.name for p in previous.iterdir()) == ["COMPAT.md", "README.txt", "badge.json", "compat.json",
                                                          "index.html"]
    assert (previous / "README.txt").read_text(encoding="utf-8") == "mine\n"
    for name in report.OUTPUTS:
        assert not (previous / name).read_text(encoding="utf-8").startswith("previous")
        assert stat.S_IMODE((previous / name).stat().st_mode) == 0o644


@pytest.mark.parametrize("blocker", ["read-only index.html", "directory named COMPAT.md"])
def test_a_partly_unwritable_out_keeps_the_previous_report(results_dir: Path, previous: Path, capsys, blocker):
    if blocker == "read-only index.html":
        (previous / "index.html").chmod(0o444)
    else:
        (previous / "COMPAT.md").unlink()
        (previous / "COMPAT.md").mkdir()
    before = snapshot(previous)
    capsys.readouterr()
    assert main(["report", str(results_dir), "--out", str(previous)]) == 2
    [line] = error_lines(capsys)
    assert line.startswith("cpugpu-conformance report: error: cannot write the report to ")
    assert ("index.html" if "index" in blocker else "COMPAT.md") in line and "previous report is left as it was" in line
    assert snapshot(previous) == before


def test_a_failure_while_swapping_in_rolls_back_to_the_previous_report(results_dir: Path, previous: Path, capsys,
                                                                      monkeypatch):
    before = snapshot(previous)
    real_replace = os.replace
    calls = []

    def replace_then_fail(src, dst):
        calls.append(Path(dst).name)
        if len(calls) == 2:  # the second output: the first is already swapped in
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(report.os, "replace", replace_then_fail)
    capsys.readouterr()
    assert main(["report", str(results_dir), "--out", str(previous)]) == 2
    monkeypatch.undo()
    [line] = error_lines(capsys)
    assert "No space left on device" in line
    assert snapshot(previous) == before  # the first output restored, no staged or backup file left


def test_nothing_is_written_when_rendering_fails(results_dir: Path, previous: Path, monkeypatch):
    before = snapshot(previous)

    def broken(got):
        raise RuntimeError("a bug in rendering")

    monkeypatch.setattr(report, "build_view", broken)
    with pytest.raises(RuntimeError):
        main(["report", str(results_dir), "--out", str(previous)])
    assert snapshot(previous) == before
