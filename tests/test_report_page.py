"""The page people read on any machine: marks that every Linux font draws, each with its word,
never an emoji; the answer first; the newest releases in sight at 1400 px.

The tests that need a browser run headless Chromium (Debian: ``apt-get install chromium
fonts-dejavu-core``) and are skipped, with the reason, where it is not installed; the others
always run. docs/matrix.md says how to look at the page by hand.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import result_factory as rf
from compat_sample import results_from_compat
from emoji_data import emoji_in, is_emoji
from test_report import cuda_missing, matrix, md_matrix, parse

from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.promises import PROMISES
from cpugpu_conformance.report import marks, render, view
from cpugpu_conformance.results import Outcome

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / "compat"
NO_CUDA = "no CUDA device on this machine"
WAIVED = "promise 6: bfloat16 is not used by this engine (ENG-42)"
KNOWN = "torch#12345: pin_memory on cpu raises, fixed in 2.16"


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


@pytest.fixture(scope="module")
def page_dir(tmp_path_factory) -> Path:
    return write_report(tmp_path_factory.mktemp("page"), every_kind())


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


# --- in a browser without emoji fonts --------------------------------------------------------

CHROMIUM = next((path for name in ("chromium", "chromium-browser", "google-chrome")
                 if (path := shutil.which(name))), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install chromium fonts-dejavu-core)")


def chromium(tmp_path: Path, page: Path, *args: str) -> str:
    """Run headless Chromium on a file at 1400 x 900; its stdout."""
    proc = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1400,900", *args, page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def with_script(html: str, script: str) -> str:
    """The page with a script that writes its findings, as JSON, into <pre id="probe"> (the
    published page has no script; this copy is only for the check)."""
    return html.replace("</body>", f'<pre id="probe"></pre>\n<script>\n{script}\n</script>\n</body>')


def probe(tmp_path: Path, html: str, script: str) -> Any:
    page = tmp_path / "probe.html"
    page.write_text(with_script(html, script), encoding="utf-8")
    dom = chromium(tmp_path, page, "--dump-dom")
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found and found.group(1), dom[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                      .replace("&amp;", "&"))


# Draws a character on a canvas in the page's own font and compares the pixels with those of
# code points no font has (U+0378 and U+0379 are unassigned): equal pixels are the empty box.
GLYPHS = """
const font = getComputedStyle(document.body).fontFamily;
function pixels(ch) {
  const canvas = document.createElement('canvas'); canvas.width = 80; canvas.height = 80;
  const g = canvas.getContext('2d'); g.font = '48px ' + font; g.fillStyle = '#000'; g.fillText(ch, 8, 60);
  return Array.from(g.getImageData(0, 0, 80, 80).data).join(',');
}
const box = pixels('\\u0378'), blank = pixels(' ');
const found = {font: font, box_is_drawn: box !== blank, box_is_stable: box === pixels('\\u0379'), symbols: {}};
for (const ch of SYMBOLS) { const p = pixels(ch); found.symbols[ch] = p === box ? 'box' : (p === blank ? 'blank' : 'glyph'); }
document.getElementById('probe').textContent = JSON.stringify(found);
"""


@needs_chromium
def test_every_symbol_draws_in_the_page_font_without_an_emoji_font(page_dir: Path, tmp_path: Path):
    symbols = sorted({s.symbol for s in [*marks.MARKS.values(), *marks.ANSWERS.values()]})
    html = (page_dir / "index.html").read_text(encoding="utf-8")
    found = probe(tmp_path, html, GLYPHS.replace("SYMBOLS", json.dumps(symbols)))
    assert found["box_is_drawn"] and found["box_is_stable"], found  # the check can tell a box from a glyph
    assert found["symbols"] == {ch: "glyph" for ch in symbols}, found


# Where the answer and the newest row are on the first screen, and whether the matrix's
# first column and its answers are in sight without scrolling sideways.
LAYOUT = """
const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const rows = document.querySelectorAll('#matrix tbody tr');
const first = rows[0];
document.getElementById('probe').textContent = JSON.stringify({
  width: window.innerWidth, height: window.innerHeight,
  answer: box(document.getElementById('answer-table')),
  newest_label: first.querySelector('th').textContent.replace(/\\s+/g, ' ').trim(),
  newest_th: box(first.querySelector('th')),
  newest_answer: box(first.querySelector('td.answer')),
  newest_cells: Array.from(first.querySelectorAll('td')).map(box),
  scroller: box(document.querySelector('#matrix').closest('.scroll')),
});
"""


def visible(rect: list[float], width: float, height: float | None = None) -> bool:
    left, top, right, bottom = rect
    return left >= 0 and right <= width and (height is None or (top >= 0 and bottom <= height))


@needs_chromium
@pytest.mark.parametrize("source", ["committed", "every kind"])
def test_at_1400_px_the_answer_and_the_newest_release_are_in_sight(source: str, page_dir: Path, tmp_path: Path):
    html = ((COMPAT if source == "committed" else page_dir) / "index.html").read_text(encoding="utf-8")
    found = probe(tmp_path, html, LAYOUT)
    width, height = found["width"], found["height"]
    assert width == 1400, found
    assert visible(found["answer"], width, height), found  # the answer: on the first screen, whole
    newest = "2.15.0 cpu"
    assert found["newest_label"] == newest, found
    # the newest row, its label and its answer: in the first screen, no sideways scrolling
    assert visible(found["newest_th"], width) and visible(found["newest_answer"], width), found
    assert found["newest_th"][1] < height and found["newest_answer"][1] < height, found
    if source == "committed":  # 13 promises at 1400 px: every mark of the newest release is in sight
        assert all(visible(cell, width) for cell in found["newest_cells"]), found
    # a screenshot to look at (docs/matrix.md): tmp_path keeps it after the run
    shot = tmp_path / f"{source.replace(' ', '-')}-1400x900.png"
    page = tmp_path / "page.html"
    page.write_text(html, encoding="utf-8")
    chromium(tmp_path, page, f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


# --- on a phone: the answer fits any width from 360 px (issue 31, item 7) ---------------------
# Headless Chromium will not make a window narrower than 500 px, so the page is measured in an
# iframe of the phone's width: its own viewport, as on a phone (the page's meta viewport is
# width=device-width), and its media queries answer to that width.

NARROW = """
const frame = document.getElementById('frame');
frame.addEventListener('load', () => {
  const w = frame.contentWindow, d = frame.contentDocument;
  const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  // what sticks out of the viewport, outside the boxes that scroll on purpose (.scroll, pre)
  const out = Array.from(d.body.querySelectorAll('*'))
    .filter(e => e.getBoundingClientRect().right > w.innerWidth + 0.5
                 && !(e.parentElement && e.parentElement.closest('.scroll, pre')))
    .slice(0, 10).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + ' ' + e.getBoundingClientRect().right);
  document.getElementById('probe').textContent = JSON.stringify({
    width: w.innerWidth, page_width: d.documentElement.scrollWidth, sticking_out: out,
    answer: box(d.getElementById('answer')), table: box(d.getElementById('answer-table')),
    cells: Array.from(d.querySelectorAll('#answer-table th, #answer-table td')).map(box),
    not_conforming: box(Array.from(d.querySelectorAll('#answer-table thead th')).pop()),
  });
});
"""


def in_a_frame(tmp_path: Path, html: str, width: int, script: str) -> Any:
    import html as markup

    page = tmp_path / f"frame-{width}.html"
    page.write_text(f'<!DOCTYPE html><html><body style="margin:0"><iframe id="frame" style="border:0;width:{width}px;'
                    f'height:844px" srcdoc="{markup.escape(html, quote=True)}"></iframe><pre id="probe"></pre>'
                    f'<script>{script}</script></body></html>', encoding="utf-8")
    dom = chromium(tmp_path, page, "--dump-dom")
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found and found.group(1), dom[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                      .replace("&amp;", "&"))


def inside(inner: list[float], outer: list[float]) -> bool:
    return inner[0] >= outer[0] - 0.5 and inner[2] <= outer[2] + 0.5


@needs_chromium
@pytest.mark.parametrize("width", [360, 390, 1400])
@pytest.mark.parametrize("source", ["committed", "every kind"])
def test_the_answer_fits_a_phone_and_the_page_never_scrolls_sideways(source: str, width: int, page_dir: Path,
                                                                      tmp_path: Path):
    html = ((COMPAT if source == "committed" else page_dir) / "index.html").read_text(encoding="utf-8")
    found = in_a_frame(tmp_path, html, width, NARROW)
    assert found["width"] == width, found
    assert found["page_width"] <= width, found  # no sideways scrolling of the page
    assert found["sticking_out"] == [], found
    assert inside(found["table"], found["answer"]) and found["answer"][2] <= width, found  # the table in its box
    assert all(inside(cell, found["table"]) for cell in found["cells"]), found
    assert found["not_conforming"][2] <= width, found  # "Releases that do not conform", in sight


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
