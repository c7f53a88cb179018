"""report's pages as text: index.html self-contained, every result's text escaped, each failure linked
to its reproducer, the probe tables (a change against the previous release highlighted, a reworded
description no change); COMPAT.md's table escaped, its legend, environments, untested reasons and
reproducers; md_escape and md_fence.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import result_factory as rf
from report_reading import label, md_matrix, parse
from report_sample import NO_CUDA, REPRODUCER, ROWS
from report_sample_dirs import (
    report_dir_fixture,  # noqa: F401 - the fixture `report_dir`
    results_dir_fixture,  # noqa: F401 - the fixture `results_dir`
)

from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.promises import PROMISES
from cpugpu_conformance.report import marks
from cpugpu_conformance.report import render as report


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
