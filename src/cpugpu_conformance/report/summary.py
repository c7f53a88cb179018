"""The summary table: one row per cell, as results.CellResult.answer() decides it, and the
line that says how many cells are clean (``cpugpu-conformance summary``, the end of a
matrix run, nox's sessions). A cell that is not applicable (its torch cannot host the device
it asked for: sim before torch 2.8) is its own row, counted apart: neither clean nor failed
(``passing``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cpugpu_conformance import results
from cpugpu_conformance.results import rule

SUMMARY_COUNTS = ("passed", "failed", "untested", "recorded")
# The answer of a row whose file is there but is not a cell result (malformed, not JSON, a FIFO...).
UNREADABLE = "unreadable"


@dataclass
class Row:
    """One cell in the summary table, as results.CellResult.answer() decides it."""

    cell: str
    torch: str
    device: str
    answer: str  # passed, failed, untested, not_applicable, a status that is not completed, no_result or unreadable
    counts: dict[str, int]  # promise x device outcomes of a completed cell; empty otherwise
    duration_s: float | None
    clean: bool
    why: str | None = None  # the first reason the cell is not clean
    word: str | None = None  # the answer as results.rule.answer_word says it (a clean cell with no pass is no "passed")

    @property
    def not_applicable(self) -> bool:
        """Its torch cannot host the device it asked for (sim before torch 2.8): no pass, no failure."""
        return self.answer == "not_applicable"

    @property
    def mark(self) -> str:
        if self.clean:
            return self.word or self.answer
        return self.answer.upper().replace("_", " ")


def _row(name: str, path: Path, asked: bool = False) -> Row:
    """The row of the file at ``path``; ``asked``: the cell ``name`` was asked for by name (--cells),
    so a file holding another cell's result (a copied or renamed artifact) is no answer for it."""
    try:
        result = results.CellResult.load(path)
    except results.ResultFileError as exc:
        return _row_without_result(name, path, exc)
    if asked and result.name != name:
        return _row_without_result(name, path, results.ResultFileError(
            f"{path}: holds the result of cell {results.one_line(repr(result.name), 200)} (its \"cell\" key), "
            f"not of {name!r}: another cell's result is never this cell's answer"))
    answer = result.answer()
    device = result.requested.get("device") or ",".join(result.tested_devices()) or "?"
    more = f" (+{len(answer.lines) - 1} more)" if len(answer.lines) > 1 else ""
    states = sum(1 for judged in (result.get("mutable_state") or {}).values()
                 if isinstance(judged, dict) and judged.get("verdict") == "passed")
    return Row(result.name, result.release, str(device), answer.kind, dict(answer.counts) if result.completed else {},
               result.get("duration_s"), answer.clean, answer.lines[0] + more if answer.lines else None,
               word=rule.answer_word(answer, states))


def _row_without_result(name: str, path: Path, error: results.ResultFileError) -> Row:
    named = re.fullmatch(r"(?:installed-)?torch-(.+)-(\w+)", name)  # what the cell would have been
    torch, device = named.groups() if named else ("?", "?")
    missing = not path.exists() and not path.is_symlink()
    return Row(name, torch, device, "no_result" if missing else UNREADABLE, {}, None, False, str(error))


def check_cell_name(name: str) -> str:
    """``name`` if it is a plain cell name (the stem of a file directly in the results folder),
    else ValueError saying why: a name with a slash, '..' or a control character would read
    a file elsewhere, or break the table."""
    if not name or name in (".", "..") or name.startswith(".") or any(c in name for c in "/\\"):
        raise ValueError(f"cell name {results.one_line(repr(name), 200)}: not a plain cell name "
                         "(a result file's name in the results folder, without .json)")
    if results.one_line(name) != name:
        raise ValueError(f"cell name {results.one_line(repr(name), 200)}: has control characters")
    return name


def unanswered_row(path: Path, name: str, why: str) -> Row:
    """A summary row for a cell with no answer from this run, whatever file is at its path: never clean."""
    return replace(_row_without_result(name, path, results.ResultFileError(why)), answer="no_result")


def summarize(results_dir: Path, cells: Iterable[str] | None = None) -> list[Row]:
    """One row per cell: the cells named (missing files show as such), or every result file.

    A named cell must be a plain name (``check_cell_name``): ValueError otherwise.
    """
    results_dir = Path(results_dir)
    names = [check_cell_name(n) for n in cells] if cells is not None else sorted(p.stem for p in results_dir.glob("*.json") if not p.name.startswith("."))
    rows = [_row(name, results_dir / f"{name}.json", asked=cells is not None) for name in names]
    return sorted(rows, key=lambda r: (results.release_key(r.torch), r.device, r.cell))


def _duration(seconds: Any) -> str:
    return f"{seconds:.1f} s" if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else "-"


def format_summary(rows: list[Row]) -> str:
    """The table, one line per cell that is not clean saying why, and the count of clean cells."""
    header = ("cell", "torch", "device", "answer", *SUMMARY_COUNTS, "duration")
    body = []
    for r in rows:
        counts = [str(r.counts.get(k, 0)) if r.counts else "-" for k in SUMMARY_COUNTS]
        # Names and versions come from result files (and file names): one line each, or the table breaks.
        names = [results.one_line(v, 200) for v in (r.cell, r.torch, r.device)]
        body.append((*names, r.mark, *counts, _duration(r.duration_s)))
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(str(v).ljust(w) if i < 4 else str(v).rjust(w) for i, (v, w) in enumerate(zip(line, widths)))
             for line in [header, *body]]
    lines += [f"{results.one_line(r.cell, 200)}: {results.one_line(r.why)}" for r in rows if not r.clean and r.why]
    clean, na = sum(r.clean for r in rows), sum(r.not_applicable for r in rows)
    bad = len(rows) - clean - na
    shown = f"{na} not applicable (neither a pass nor a failure), " if na else ""
    lines.append(f"{len(rows)} cells, {clean} clean, {shown}{bad} not (counts are promise x device outcomes)")
    return "\n".join(lines)


def passing(rows: list[Row]) -> bool:
    """The answer of a set of cells: every cell clean or not applicable, and at least one clean. A cell
    whose torch cannot host its device (sim before 2.8) counts as a promise does on a device it is not
    about: neither for nor against; cells that are all not applicable have proved nothing."""
    return any(r.clean for r in rows) and all(r.clean or r.not_applicable for r in rows)

