"""The gate's answer in Markdown, for a CI job summary (``gate --job-summary FILE``; GitHub's
$GITHUB_STEP_SUMMARY): the answer first, then what regressed with each reproducer folded in
``<details>``, the known failures, the listed promises that passed, and the rest folded.

Words, never emoji or colour alone. Every text from a result file is escaped (it is another
machine's output): HTML in a table cell or a summary, a reproducer in a code fence longer than
any run of backticks it holds. GitHub keeps at most 1 MiB of a step's summary, so a long
reproducer is cut with a note and at most MAX_SHOWN changes of a kind are listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ..results import NOT_PROBED, CellResult, Change, Comparison, StateChange, one_line

MAX_SHOWN = 50  # changes of one kind listed; the rest are counted
REPRODUCER_LIMIT = 20_000  # characters of one reproducer

HEADLINES = {0: "PASS", 1: "FAIL", 2: "NO ANSWER"}


# What Markdown (GitHub's: CommonMark with tables, strikethrough and autolinks) reads as syntax in a
# line of text: links and images (their brackets), emphasis, code spans, strikethrough, headings,
# list markers, backslash escapes, table pipes. Each becomes a character reference, which GitHub
# shows as the character itself and never as syntax; HTML's own characters keep their names.
_ESCAPED = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;",
            **{ch: f"&#{ord(ch)};" for ch in "[]*_`~\\|"}}
# Syntax only where a line starts: a heading, a list item, a setext rule, an ordered list ("1. ").
_LINE_START = re.compile(r"[#+=-]|\d+[.)](?:\s|$)")


def _is_syntax(text: str, i: int) -> bool:
    """Whether text[i] would start Markdown syntax besides _ESCAPED's: at the start of the line
    (_LINE_START), or an autolink, which needs no brackets (a scheme's "://", "www.", an "@")."""
    ch = text[i]
    if i == 0 and _LINE_START.match(text):
        return True
    return ch == "@" or (ch == ":" and text.startswith("//", i + 1)) or (ch == "." and text[max(0, i - 3):i].lower() == "www")


def cell_text(text: object, limit: int = 300) -> str:
    """Text for a table cell or a summary line: one line, HTML escaped, and every character that
    Markdown would read as a link, an image, emphasis, code, a heading or a table break escaped, so
    a failure message from another machine shows as the text it is (html.unescape gives it back)."""
    raw = one_line(str(text), limit)
    return "".join(_ESCAPED.get(ch) or (f"&#{ord(ch)};" if _is_syntax(raw, i) else ch) for i, ch in enumerate(raw))


def code_block(text: str, language: str = "python") -> str:
    """``text`` in a fence no line of it can close."""
    if len(text) > REPRODUCER_LIMIT:
        text = text[:REPRODUCER_LIMIT] + f"\n# ... cut at {REPRODUCER_LIMIT:,} characters: the result file has it all\n"
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def _side(label: str, cell: CellResult) -> str:
    return f"{label} <code>{cell_text(cell.name, 120)}</code> (torch {cell_text(cell.release, 60)})"


def _table(changes: Sequence[Change], extra: str | None = None) -> list[str]:
    head = "| promise | device | baseline | candidate |" + (f" {extra} |" if extra else "")
    rule = "|---|---|---|---|" + ("---|" if extra else "")
    rows = [head, rule]
    for c in changes[:MAX_SHOWN]:
        row = (f"| {c.promise} {cell_text(c.title, 80)} | {cell_text(c.device, 20)} | {cell_text(c.before.describe())} "
               f"| {cell_text(c.after.describe())} |")
        if extra:
            row += f" {cell_text(c.after.listed or c.after.note or '')} |"
        rows.append(row)
    if len(changes) > MAX_SHOWN:
        rows.append(f"\n... and {len(changes) - MAX_SHOWN} more (the gate's log lists every one)")
    return rows


def _reproducers(changes: Iterable[Change]) -> list[str]:
    out = []
    for c in list(changes)[:MAX_SHOWN]:
        for failure in c.after.failures:
            test = cell_text(failure.get("test"), 200)
            message = str(failure.get("message") or "").strip()
            body = [f"<details><summary>Reproducer: promise {c.promise} on {cell_text(c.device, 20)}: "
                    f"<code>{test}</code></summary>", ""]
            if message:
                body += [code_block(message, "text"), ""]
            reproducer = failure.get("reproducer")
            body += [code_block(str(reproducer)) if reproducer else "(no reproducer recorded)", "", "</details>"]
            out += body
    return out


def _state_table(changes: Sequence[StateChange]) -> list[str]:
    rows = ["| MutableStateTests class | baseline | candidate |", "|---|---|---|"]
    rows += [f"| <code>{cell_text(c.cls, 200)}</code> | {cell_text(c.before)} | {cell_text(c.after)} |"
             for c in changes[:MAX_SHOWN]]
    if len(changes) > MAX_SHOWN:
        rows.append(f"\n... and {len(changes) - MAX_SHOWN} more (the gate's log lists every one)")
    return rows


def _state_reproducers(changes: Iterable[StateChange]) -> list[str]:
    """Each test of a class that did not pass in the candidate: where the walk found a tensor that
    refuses an in-place update (its path and why), then its reproducer, folded."""
    out: list[str] = []
    for c in list(changes)[:MAX_SHOWN]:
        for test in c.tests[:MAX_SHOWN]:
            where = ", ".join(cell_text(test[k], 40) for k in ("device", "context") if test.get(k))
            out += [f"<details><summary>Reproducer: mutable state of <code>{cell_text(c.cls, 200)}</code>"
                    f"{f' ({where})' if where else ''}: <code>{cell_text(test.get('test'), 200)}</code></summary>", ""]
            paths = [p for p in test.get("bad_paths") or [] if isinstance(p, dict)]
            out += [f"- <code>{cell_text(p.get('path'), 200)}</code>: {cell_text(p.get('why'), 500)}"
                    + (f" ({cell_text(p.get('phase'), 200)})" if p.get("phase") else "") for p in paths[:MAX_SHOWN]]
            out += [f"- {cell_text(line, 500)}" for line in (test.get("caller_state_changes") or [])[:MAX_SHOWN]]
            if not paths and not test.get("caller_state_changes"):
                out.append(f"- {cell_text(test.get('why') or 'no reason given', 500)}")
            reproducer = test.get("reproducer")
            out += ["", code_block(str(reproducer)) if reproducer else "(no reproducer recorded)", "", "</details>"]
    return out


def _section(title: str, lines: list[str]) -> list[str]:
    return ["", f"#### {title}", "", *lines] if lines else []


def _folded(title: str, lines: Sequence[str]) -> list[str]:
    if not lines:
        return []
    items = [f"- {cell_text(line, 500)}" for line in lines[:MAX_SHOWN]]
    if len(lines) > MAX_SHOWN:
        items.append(f"- ... and {len(lines) - MAX_SHOWN} more")
    return ["", f"<details><summary>{title} ({len(lines)})</summary>", "", *items, "", "</details>"]


def comparison_markdown(baseline: CellResult, candidate: CellResult, cmp: Comparison, text: str, code: int) -> str:
    """The job summary of a comparable pair: ``text`` is the gate's plain report (its last line is
    the answer, said once for both), ``code`` its exit code."""
    verdict = text.rstrip().splitlines()[-1] if text.strip() else HEADLINES.get(code, "")
    out = [f"### cpugpu-conformance gate: {HEADLINES.get(code, f'exit {code}')}", "",
           f"**{cell_text(verdict, 600)}** (exit {code})", "",
           f"{_side('baseline', baseline)}, {_side('candidate', candidate)}; devices: "
           f"{cell_text(', '.join(cmp.devices), 100)}"]
    if cmp.buffer_not_in_run:
        out += ["", f"Not compared: {cell_text(cmp.buffer_not_in_run, 400)}."]
    regressed = _table(cmp.regressions) + [""] + _reproducers(cmp.regressions) if cmp.regressions else []
    if cmp.state_regressions:
        regressed += [*([""] if regressed else []), *_state_table(cmp.state_regressions), "",
                      *_state_reproducers(cmp.state_regressions)]
    out += _section("Regressions (passed in the baseline, not in the candidate)", regressed)
    out += _section("Known failures (listed in your known-failures file: not regressions)",
                    _table(cmp.known_failures) + [""] + _reproducers(cmp.known_failures)
                    if cmp.known_failures else [])
    out += _section("Listed as known failures, but the candidate passes them: remove the entries",
                    _table(cmp.listed_but_passed, "listing") if cmp.listed_but_passed else [])
    still = _table(cmp.still_failing) if cmp.still_failing else []
    if cmp.state_still_failing:
        still += [*([""] if still else []), *_state_table(cmp.state_still_failing)]
    out += _section("Still failing (in the baseline too: not regressions)", still)
    fixed: list[Change | StateChange] = [*cmp.fixed, *cmp.state_fixed]
    waived: list[Change | StateChange] = [*cmp.not_compared, *cmp.state_not_compared]
    out += _folded("Fixed", [c.line() for c in fixed])
    out += _folded("Not compared (waived in both cells)", [c.line() for c in waived])
    observed = [f"observed torch behaviour {probe}: {before if before is not None else NOT_PROBED} -> "
                f"{after if after is not None else NOT_PROBED}" for probe, before, after in cmp.observation_changes]
    warnings = [*cmp.warnings, *(c.line() for c in cmp.recorded_changes), *observed,
                *([cmp.observations_not_compared] if cmp.observations_not_compared else [])]
    out += _folded("Warnings", warnings)
    return "\n".join(out) + "\n"


def refusal_markdown(lines: Sequence[str], code: int) -> str:
    """The job summary of a gate that could not compare (exit 2): each gap, one line."""
    out = [f"### cpugpu-conformance gate: {HEADLINES.get(code, f'exit {code}')}", "",
           f"**Nothing to compare, refusing to pass** (exit {code}):", ""]
    out += [f"- {cell_text(line, 500)}" for line in lines[:MAX_SHOWN]]
    if len(lines) > MAX_SHOWN:
        out.append(f"- ... and {len(lines) - MAX_SHOWN} more")
    return "\n".join(out) + "\n"
