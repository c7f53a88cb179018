"""The page in a browser without emoji fonts: every symbol draws in the page font, the answer and the
newest release are in sight at 1400 px, and the answer fits a phone from 360 px with no sideways
scrolling.

These tests run headless Chromium (Debian: ``apt-get install chromium fonts-dejavu-core``) and are
skipped, with the reason, where it is not installed. docs/matrix.md says how to look at the page by
hand.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from report_page_samples import (
    COMPAT,
    page_dir_fixture,  # noqa: F401 - the fixture `page_dir`
)

from cpugpu_conformance.report import marks

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
