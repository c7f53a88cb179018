"""Reading what `cpugpu-conformance report` writes, for the tests: the page's tables (`parse` checks
that its tags nest), the matrix of index.html (`matrix`) and of COMPAT.md (`md_matrix`) as row labels and
column -> row -> cell, and how each mark and answer reads (`label`, `answer`).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from cpugpu_conformance.report import marks


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


def label(kind: str) -> str:
    """How a mark reads on the page: its symbol and its word."""
    return marks.MARKS[kind].label


def answer(kind: str) -> str:
    return marks.ANSWERS[kind].label
