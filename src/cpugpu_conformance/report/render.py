"""Result files -> compat.json, COMPAT.md, index.html and badge.json.

``python -m cpugpu_conformance report RESULTS_DIR --out DIR`` reads every ``*.json``
directly inside RESULTS_DIR through ``results.CellResult``. A file that is not a valid cell
result (not a regular file, too big, not UTF-8, not strict JSON, nested too deeply, an
old schema) is named in the report and on stderr, one line each, and skipped: one bad
upload must not hide the rest of the matrix. Two files claiming the same cell name are
both shown, each column labelled with its file, and flagged.

The same results always give the same bytes: what differs between runs of the same torch
(start time, duration, command line, the runner's kernel) is left out as each result is
read (``view.stable_fields``), and nothing in the outputs depends on the clock, the
output folder or the order of keys in a file.

The report is all or nothing: see ``publish``. The model the templates are rendered from
(``Collected``, ``build_compat``, ``build_view``) is page_model.py; every name of it is
importable from here as before.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field  # noqa: F401  (as before the split)
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from ..results import (  # noqa: F401  (Outcome, schema: as before the split)
    CellResult,
    Outcome,
    ResultFileError,
    json_of,
    one_line,
    read_regular_file,
    schema,
)
from . import badge as shields
from . import changes as changelog  # noqa: F401
from . import view
from .changes import ObservationChange, ReleaseStep, VerdictChange  # noqa: F401
from .marks import ANSWER_ORDER, ANSWERS, MARKS, NOTED_KINDS, MarkStyle  # noqa: F401
from .page_model import (  # noqa: F401  (the templates' model; re-exported, this was its home)
    COMPAT_SCHEMA_ID,
    COMPAT_SCHEMA_VERSION,
    NOT_CONFORMING_SHOWN,
    Collected,
    _answer_rows,
    _by_step,
    _cell_ref,
    _changes_json,
    _checked_with,
    _compat_entry,
    _compat_validator,
    _failure_sections,
    _mark_json,
    _matrix_rows,
    _newest_first,
    _observation_histories,
    _promises_text,
    _release_text,
    _row_ref,
    _shown,
    _styles,
    _summary_json,
    _verdict_rows,
    _verdicts_json,
    _worst,
    build_compat,
    build_view,
)
from .publish import ReportError, publish
from .view import Column, DeviceSummary, ReportedCell  # noqa: F401

OUTPUTS = ("compat.json", "COMPAT.md", "index.html", "badge.json")
# Outputs a results folder may hold when --out is that folder: never read as results.
OWN_JSON = frozenset(name for name in OUTPUTS if name.endswith(".json"))

PROG = "cpugpu-conformance report"


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):  # a symlink loop: then it is not our output folder
        return False


def candidate_files(results_dir: Path, out_dir: Path | None = None) -> list[Path]:
    """Every ``*.json`` entry directly in results_dir, whatever it is (CellResult.load refuses
    what is not a regular file), minus hidden files (temporaries, locks) and our own output."""
    try:
        names = sorted(entry.name for entry in os.scandir(results_dir))
    except OSError as exc:
        raise ReportError(f"results directory {one_line(results_dir)} cannot be read: {exc.strerror or exc}") from None
    ours = out_dir is not None and _same_dir(results_dir, out_dir)
    return [results_dir / n for n in names
            if n.endswith(".json") and not n.startswith(".") and not (ours and n in OWN_JSON)]


def load_cell(path: Path) -> CellResult:
    """CellResult.load without the run-specific fields, with every way a hostile file can
    fail as one ResultFileError line."""
    try:
        return CellResult(view.stable_fields(json_of(read_regular_file(path), path)), str(path))
    except ResultFileError:
        raise
    except RecursionError:  # nesting the parser accepted but a walk over the tree did not
        raise ResultFileError(f"{path}: not a cell result: nested too deeply") from None
    except OSError as exc:
        raise ResultFileError(f"{path}: cannot read: {exc.strerror or exc}") from None


def collect(results_dir: Path, out_dir: Path | None = None) -> Collected:
    """Load every result file in results_dir; unreadable ones go to ``skipped`` with the reason."""
    if not results_dir.is_dir():
        raise ReportError(f"results directory {one_line(results_dir)} does not exist or is not a directory")
    files = candidate_files(results_dir, out_dir)
    if not files:
        raise ReportError(f"no result files (*.json) in {one_line(results_dir)}")
    loaded: list[tuple[str, CellResult]] = []
    skipped: list[dict[str, str]] = []
    for path in files:
        try:
            loaded.append((one_line(path.name), load_cell(path)))
        except ResultFileError as exc:
            reason = str(exc).removeprefix(f"{path}: ")
            skipped.append({"file": one_line(path.name), "reason": one_line(reason, 400)})
    if not loaded:
        raise ReportError(f"no valid result files in {one_line(results_dir)} ({len(skipped)} skipped as invalid)", skipped)
    return Collected(view.mark_cells(loaded), skipped)


# --- rendering ---------------------------------------------------------------------------


def _text(value: Any) -> str:
    """Any JSON value as display text (strings as they are)."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


_MD_BACKSLASHED = set("\\`*[]|")


def md_escape(value: Any) -> str:
    """Text from a result, safe inside a Markdown table cell or paragraph.

    '|' would end the cell and a newline the row; '<' and '&' would start HTML that
    GitHub strips (so a reproducer's `<script>` would silently vanish).
    """
    text = _text(value)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = "".join("\\" + ch if ch in _MD_BACKSLASHED else ch for ch in text)
    return "<br>".join(line for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))


def md_fence(value: Any, lang: str = "") -> str:
    """A fenced code block whose fence is longer than any backtick run inside it."""
    text = _text(value).rstrip("\n")
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


def html_dotted(value: Any) -> markupsafe.Markup:
    """A dotted name, escaped, that may wrap after each dot (not mid-word) in a narrow column."""
    return markupsafe.escape(_text(value)).replace(".", markupsafe.Markup(".<wbr>"))


@functools.cache
def _environment(autoescape: bool) -> jinja2.Environment:
    """One environment per escaping mode, kept so each template compiles once per process."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("cpugpu_conformance.report", "templates"),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["text"] = _text
    env.filters["md"] = md_escape
    env.filters["fence"] = md_fence
    env.filters["dotted"] = html_dotted
    env.filters["device"] = view.device_label  # "sim (simulated)"
    return env


def render(got: Collected) -> dict[str, bytes]:
    """File name -> content for every output (OUTPUTS), all rendered before anything is written.

    Encoded with backslashreplace: a lone surrogate that a result's JSON escaped ("\\udc80")
    stays visible as that escape instead of failing the whole report.
    """
    data = build_compat(got)
    page = build_view(got)
    texts = {
        "compat.json": json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
        "COMPAT.md": _environment(autoescape=False).get_template("COMPAT.md.j2").render(**page),
        "index.html": _environment(autoescape=True).get_template("index.html.j2").render(**page),
        "badge.json": json.dumps(shields.badge(got.device_summaries, page["span"], got.skipped), indent=2,
                                 ensure_ascii=False) + "\n",
    }
    return {name: text.encode("utf-8", "backslashreplace") for name, text in texts.items()}


def make_report(results_dir: Path, out_dir: Path) -> Collected:
    got = collect(results_dir, out_dir)
    publish(out_dir, render(got))
    return got

