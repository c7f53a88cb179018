"""The page's marks: plain symbols that every Linux font draws, each with its word, never an emoji,
in every output, the legend and the docs; waived and known failure as marks of their own; and
marks.py below view.py, with no import circle in the report. These tests always run.
"""

from __future__ import annotations

import json
import re
import subprocess
import unicodedata
from pathlib import Path

import pytest
from emoji_data import emoji_in, is_emoji
from report_page_samples import (
    COMPAT,
    ROOT,
    every_kind,
    page_dir_fixture,  # noqa: F401 - the fixture `page_dir`
    write_report,
)
from report_reading import matrix, md_matrix, parse

from cpugpu_conformance.promises import PROMISES
from cpugpu_conformance.report import marks, render, view
from cpugpu_conformance.results import Outcome

WAIVED = "promise 6: bfloat16 is not used by this engine (ENG-42)"
KNOWN = "torch#12345: pin_memory on cpu raises, fixed in 2.16"


@pytest.fixture
def team_marks(monkeypatch):
    """waived and known_failure as results.rule will give them (the lead's known-failures work):
    promise 6 waived on every device, promise 11 a known failure on cpu."""
    real = view.ReportedCell.mark

    def mark(self, promise: str, device: str) -> Outcome:
        out = real(self, promise, device)
        if not self.completed or not out.asked:
            return out
        if promise == "6":
            return Outcome("waived", WAIVED)
        if promise == "11" and device == "cpu":
            return Outcome("known_failure", KNOWN)
        return out

    monkeypatch.setattr(view.ReportedCell, "mark", mark)


def outputs(out: Path) -> dict[str, str]:
    return {name: (out / name).read_text(encoding="utf-8") for name in render.OUTPUTS}


# --- no emoji, and every mark says its word: always run ----------------------------------


@pytest.mark.parametrize("styles", ["MARKS", "ANSWERS"])
def test_every_mark_is_a_plain_symbol_and_a_word(styles: str):
    table: dict[str, marks.MarkStyle] = getattr(marks, styles)
    symbols = [style.symbol for style in table.values()]
    assert len(set(symbols)) == len(symbols), "two kinds share a symbol"
    for kind, style in table.items():
        assert len(style.symbol) == 1 and not is_emoji(style.symbol), (kind, style.symbol)
        # a symbol or punctuation, nothing invisible, no variation selector to turn it into an emoji
        assert unicodedata.category(style.symbol)[0] in "SP", (kind, unicodedata.category(style.symbol))
        assert re.fullmatch(r"[A-Za-z][A-Za-z /]*", style.word), (kind, style.word)
        assert style.label == f"{style.symbol} {style.word}"
        assert style.meaning and not emoji_in(style.meaning)


def test_waived_and_known_failure_have_their_own_marks():
    waived, known = marks.MARKS["waived"], marks.MARKS["known_failure"]
    assert (waived.word, known.word) == ("waived", "known failure")
    assert "not tested" in waived.meaning and "never a pass" in waived.meaning
    assert "tested" in known.meaning and "not a regression" in known.meaning and "not a pass" in known.meaning
    others = [s for k, s in marks.MARKS.items() if k not in ("waived", "known_failure")]
    assert {waived.symbol, known.symbol}.isdisjoint(s.symbol for s in others)


def test_no_output_has_an_emoji(page_dir: Path):
    for name, text in outputs(page_dir).items():
        assert emoji_in(text) == [], name


def test_the_committed_page_has_no_emoji():
    for name in render.OUTPUTS:
        assert emoji_in((COMPAT / name).read_text(encoding="utf-8")) == [], name


def test_every_mark_on_the_page_shows_its_word(page_dir: Path):
    html, md = (page_dir / "index.html").read_text(encoding="utf-8"), (page_dir / "COMPAT.md").read_text(encoding="utf-8")
    labels, table = matrix(parse(html))
    md_labels, md_table = md_matrix(md)
    assert md_labels == labels
    seen = set()
    for title, column in table.items():
        styles = marks.ANSWERS if title == "Answer" else marks.MARKS
        for row, (attrs, text) in column.items():
            [kind] = [c[2:] for c in attrs["class"].split() if c[:2] in ("m-", "a-")]
            assert text.startswith(styles[kind].label), (title, row, text)
            assert md_table[title][row].startswith(styles[kind].label), (title, row, md_table[title][row])
            seen.add(kind)
    # every mark the rule gives today is on this page
    assert set(marks.MARKS) - {"waived", "known_failure"} <= seen


def test_the_legend_lists_every_mark_and_answer_with_its_word(page_dir: Path):
    page = parse((page_dir / "index.html").read_text(encoding="utf-8"))
    legend = [" ".join(text.split()) for _, _, text in (row[0] for row in page.tables["legend-table"][1:])]
    assert legend == [style.label for style in marks.MARKS.values()]
    answers = [" ".join(row[0][2].split()) for row in page.tables["answers-table"][1:]]
    assert [s.label for k, s in marks.ANSWERS.items() if k in ("passed", "failed", "known_failure", "untested", "waived")] \
        == answers[:5]
    md = (page_dir / "COMPAT.md").read_text(encoding="utf-8")
    for style in [*marks.MARKS.values(), *marks.ANSWERS.values()]:
        assert f"| {style.label} | {style.meaning} |" in md


def test_waived_and_known_failure_show_as_their_own_marks_with_their_reasons(tmp_path: Path, team_marks):
    out = write_report(tmp_path, every_kind())
    files = outputs(out)
    labels, table = matrix(parse(files["index.html"]))
    waived = table[f"6. {PROMISES['6']}"]["2.15.0 cpu"]
    assert "m-waived" in waived[0]["class"] and waived[1] == f"{marks.MARKS['waived'].label} {WAIVED}"
    known = table[f"11. {PROMISES['11']}"]["2.15.0 cpu"]
    assert "m-known_failure" in known[0]["class"] and known[1] == f"{marks.MARKS['known_failure'].label} {KNOWN}"
    # the same reason on the same device one release down: named, not shown again
    assert table[f"6. {PROMISES['6']}"]["2.14.1 cuda"][1] == f"{marks.MARKS['waived'].label} same as 2.15.0 cuda"
    # neither is a pass: the row's answer on the device says which, worst first
    assert table["Answer"]["2.15.0 cpu"][1].startswith(marks.ANSWERS["known_failure"].label)
    assert table["Answer"]["2.15.0 cuda"][1].startswith(marks.ANSWERS["waived"].label)
    _, md = md_matrix(files["COMPAT.md"])
    assert md[f"6. {PROMISES['6']}"]["2.15.0 cpu"] == f"{marks.MARKS['waived'].label}: {WAIVED}"
    assert md[f"11. {PROMISES['11']}"]["2.15.0 cpu"] == f"{marks.MARKS['known_failure'].label}: {KNOWN}"
    data = json.loads(files["compat.json"])  # validated against schema 5 as it was written
    cell = next(c for c in data["cells"] if c["cell"] == "torch-2.15.0-all")
    assert cell["marks"]["6"]["cuda"] == {"mark": "waived", "note": WAIVED}
    assert cell["marks"]["11"]["cpu"] == {"mark": "known_failure", "note": KNOWN}
    for text in files.values():
        assert emoji_in(text) == []


# --- marks.py stands below view.py: no import circle in the report ----------------------------

REPORT = ROOT / "src" / "cpugpu_conformance" / "report"


def report_imports() -> dict[str, set[str]]:
    """Module -> the report modules it imports, TYPE_CHECKING imports included (they are a circle too)."""
    import ast

    modules = {p.stem for p in REPORT.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name in modules:
        tree = ast.parse((REPORT / f"{name}.py").read_text(encoding="utf-8"))
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                found |= {node.module} if node.module else {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cpugpu_conformance.report."):
                found.add(node.module.rsplit(".", 1)[1])
        graph[name] = found & modules
    return graph


def test_the_report_modules_import_each_other_in_one_direction():
    graph = report_imports()
    assert graph["marks"] == set(), "marks.py is the bottom of the report"
    assert "marks" in graph["view"] and "view" in graph["changes"] and "view" in graph["badge"]

    def reaches(start: str, goal: str, seen: frozenset[str] = frozenset()) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in graph[start])

    assert [m for m in graph if reaches(m, m)] == [], graph


@pytest.mark.parametrize("module", ["marks", "view", "changes", "badge", "render"])
def test_each_report_module_imports_alone(module: str):
    import sys

    proc = subprocess.run([sys.executable, "-c", f"import cpugpu_conformance.report.{module}"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


def test_the_docs_list_every_mark_as_the_page_shows_it():
    docs = (ROOT / "docs" / "matrix.md").read_text(encoding="utf-8")
    for style in marks.MARKS.values():
        assert f"| {style.label} |" in docs, style.label
    for style in marks.ANSWERS.values():
        assert style.label in docs, style.label
    assert emoji_in(docs) == []
