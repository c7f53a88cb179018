"""Result files -> compat.json, COMPAT.md and index.html.

``python -m cpugpu_conformance report RESULTS_DIR --out DIR`` reads every ``*.json``
directly inside RESULTS_DIR. A file that is not a valid cell result is named in the
report and on stderr, and skipped: one bad upload must not hide the rest of the matrix.
Everything is rendered in memory before anything is written, and each output file is
replaced atomically, so a failed run leaves the previous report intact.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import jsonschema

from . import compat
from .compat import MARKS, Cell, Column
from .results import ResultFileError, load

COMPAT_SCHEMA_ID = "cpugpu-conformance/compat"
COMPAT_SCHEMA_VERSION = 1

_mark_kinds = sorted(MARKS)

COMPAT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["schema", "schema_version", "generated_from", "promises", "marks", "cells", "skipped_files"],
    "additionalProperties": False,
    "properties": {
        "schema": {"const": COMPAT_SCHEMA_ID},
        "schema_version": {"const": COMPAT_SCHEMA_VERSION},
        "generated_from": {"type": "array", "items": {"type": "string"}},
        "promises": {"type": "object", "additionalProperties": {"type": "string"}},
        "marks": {
            "type": "object",
            "propertyNames": {"enum": _mark_kinds},
            "additionalProperties": {
                "type": "object",
                "required": ["symbol", "label", "meaning"],
                "properties": {k: {"type": "string"} for k in ("symbol", "label", "meaning")},
            },
        },
        "cells": {
            "type": "array",
            "items": {
                "type": "object",
                # The cell's own result (environment, verdicts, failures, observations)
                # is carried whole; these are the keys the report adds or relies on.
                "required": ["cell", "source", "release", "status", "devices_shown", "marks"],
                "properties": {
                    "cell": {"type": "string", "minLength": 1},
                    "source": {"type": "string"},
                    "release": {"type": "string"},
                    "status": {"type": "string"},
                    "devices_shown": {"type": "array", "items": {"type": "string"}},
                    "marks": {
                        "type": "object",
                        "additionalProperties": {
                            "type": "object",
                            "additionalProperties": {
                                "type": "object",
                                "required": ["mark", "note"],
                                "properties": {
                                    "mark": {"enum": _mark_kinds},
                                    "note": {"type": ["string", "null"]},
                                },
                            },
                        },
                    },
                },
            },
        },
        "skipped_files": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["file", "reason"],
                "properties": {"file": {"type": "string"}, "reason": {"type": "string"}},
            },
        },
    },
}


# Built once: jsonschema.validate() would re-check the schema itself on every call.
_COMPAT_VALIDATOR = jsonschema.Draft202012Validator(COMPAT_SCHEMA)


class ReportError(Exception):
    """The report cannot be made at all (no results, unwritable output): exit 2."""


@dataclass
class Collected:
    cells: list[Cell] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)


def collect(results_dir: Path, exclude: Path | None = None) -> Collected:
    """Load every result file in results_dir; invalid ones go to ``skipped`` with the reason."""
    if not results_dir.is_dir():
        raise ReportError(f"results directory {results_dir} does not exist or is not a directory")
    files = sorted(p for p in results_dir.glob("*.json") if not p.name.startswith("."))
    if exclude is not None:
        # --out may be RESULTS_DIR itself; our own compat.json is not a cell result.
        files = [p for p in files if p.resolve() != exclude.resolve()]
    if not files:
        raise ReportError(f"no result files (*.json) in {results_dir}")
    got = Collected()
    for path in files:
        try:
            got.cells.append(Cell(path.name, load(path)))
        except ResultFileError as exc:
            reason = str(exc)
            prefix = f"{path}: "
            got.skipped.append({"file": path.name, "reason": reason.removeprefix(prefix)})
    if not got.cells:
        raise ReportError(f"no valid result files in {results_dir} ({len(got.skipped)} skipped as invalid)")
    return got


# --- the model handed to the templates ------------------------------------------------


def build_compat(got: Collected) -> dict[str, Any]:
    cells = sorted(got.cells, key=lambda c: c.sort_key)
    numbers = compat.promise_numbers(p for c in cells for p in (c.result.get("promises") or {}))
    entries = []
    for cell in cells:
        entry = {k: v for k, v in cell.result.items() if k not in ("schema", "schema_version")}
        entry.update(
            source=cell.source,
            release=cell.release,
            devices_shown=cell.devices(),
            marks={
                p: {d: {"mark": m.kind, "note": m.note} for d in cell.devices() for m in [cell.mark(p, d)]}
                for p in numbers
            },
        )
        entries.append(entry)
    data = {
        "schema": COMPAT_SCHEMA_ID,
        "schema_version": COMPAT_SCHEMA_VERSION,
        "generated_from": [c.source for c in cells],
        "promises": {p: compat.promise_title(p, cells) for p in numbers},
        "marks": {k: {"symbol": s.symbol, "label": s.word, "meaning": s.meaning} for k, s in MARKS.items()},
        "cells": entries,
        "skipped_files": list(got.skipped),
    }
    # A report that breaks its own schema is a bug here, not bad input: let it raise.
    _COMPAT_VALIDATOR.validate(data)
    return data


def _column_label(col: Column, ambiguous: set[str]) -> str:
    label = f"{col.cell.release} {col.device}"
    # Two cells of one release (a CPU-only run and a GPU machine's run, say) need their names.
    return f"{label} ({col.cell.name})" if col.cell.release in ambiguous else label


def build_view(got: Collected) -> dict[str, Any]:
    cells = sorted(got.cells, key=lambda c: c.sort_key)
    cols = compat.columns(cells)
    releases = [c.release for c in cells]
    ambiguous = {r for r in releases if releases.count(r) > 1}
    numbers = compat.promise_numbers(p for c in cells for p in (c.result.get("promises") or {}))

    rows = []
    for number in numbers:
        row_marks = []
        for col in cols:
            mark = col.cell.mark(number, col.device)
            row_marks.append({"mark": mark, "style": mark.style, "anchor": f"fail-{col.index}-{number}"})
        rows.append({"number": number, "title": compat.promise_title(number, cells), "marks": row_marks})

    failures = []
    col_of = {(c.cell.source, c.device): c for c in cols}
    for cell in cells:
        for number, device, items in cell.failures():
            col = col_of[(cell.source, device)]
            failures.append(
                {
                    "anchor": f"fail-{col.index}-{number}",
                    "cell": cell,
                    "device": device,
                    "number": number,
                    "title": compat.promise_title(number, cells),
                    "items": items,
                }
            )

    observed_cells, observation_rows = compat.observation_table(cells)
    env_keys = sorted({k for c in cells for k in (c.result.get("environment") or {})})

    # Markdown has no hover: list why each skip happened, once per device where the whole device was skipped.
    skip_notes = []
    for c in cols:
        if not c.cell.completed:
            continue
        label = _column_label(c, ambiguous)
        status, reason = c.cell.device_status(c.device)
        if status == "skipped":
            skip_notes.append((label, reason or "no reason given"))
            continue
        for number in numbers:
            mark = c.cell.mark(number, c.device)
            if mark.kind == "skipped":
                skip_notes.append((f"{label}, promise {number}", mark.note or "no reason given"))

    return {
        "cells": cells,
        "skip_notes": skip_notes,
        "columns": [{"col": c, "label": _column_label(c, ambiguous)} for c in cols],
        "rows": rows,
        "marks": MARKS,
        "failures": failures,
        "incomplete": [c for c in cells if not c.completed],
        "observed_cells": observed_cells,
        "unobserved_cells": [c for c in cells if not c.observations()],
        "observation_rows": observation_rows,
        "env_keys": env_keys,
        "skipped_files": got.skipped,
        "generated_from": [c.source for c in cells],
    }


# --- rendering ---------------------------------------------------------------------------


def _text(value: Any) -> str:
    """Any JSON value as display text (strings as they are)."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


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


@functools.cache
def _environment(autoescape: bool) -> jinja2.Environment:
    """One environment per escaping mode, kept so each template compiles once per process."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("cpugpu_conformance", "templates"),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["text"] = _text
    env.filters["md"] = md_escape
    env.filters["fence"] = md_fence
    return env


def render(got: Collected) -> dict[str, str]:
    """File name -> content for the three outputs."""
    data = build_compat(got)
    view = build_view(got)
    html = _environment(autoescape=True).get_template("index.html.j2").render(**view)
    markdown = _environment(autoescape=False).get_template("COMPAT.md.j2").render(**view)
    return {
        "compat.json": json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
        "COMPAT.md": markdown,
        "index.html": html,
    }


def write_text_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def make_report(results_dir: Path, out_dir: Path) -> Collected:
    got = collect(results_dir, exclude=out_dir / "compat.json")
    outputs = render(got)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in outputs.items():
            write_text_atomic(out_dir / name, text)
    except OSError as exc:
        raise ReportError(f"cannot write the report to {out_dir}: {exc.strerror or exc}") from None
    return got


# --- command line ------------------------------------------------------------------------

HELP = "merge cell result files into compat.json, COMPAT.md and index.html"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", metavar="RESULTS_DIR", type=Path, help="folder holding one <cell>.json per cell")
    parser.add_argument("--out", type=Path, default=Path("compat"), help="output folder (default: compat)")


def run(args: argparse.Namespace) -> int:
    try:
        got = make_report(args.results_dir, args.out)
    except ReportError as exc:
        print(f"cpugpu-conformance report: error: {exc}", file=sys.stderr)
        return 2
    for skipped in got.skipped:
        print(f"cpugpu-conformance report: warning: skipped {skipped['file']}: {skipped['reason']}", file=sys.stderr)
    incomplete = sum(1 for c in got.cells if not c.completed)
    print(
        f"wrote {args.out / 'compat.json'}, {args.out / 'COMPAT.md'}, {args.out / 'index.html'}: "
        f"{len(got.cells)} cells ({incomplete} did not complete), {len(got.skipped)} files skipped"
    )
    return 0
