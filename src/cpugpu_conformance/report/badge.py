"""The matrix as a shields.io endpoint badge: compat/badge.json.

    {"schemaVersion": 1, "label": "torch 2.0-2.15", "message": "cpu 16/16 conform | cuda: never run",
     "color": "yellow"}

A README shows it with
``https://img.shields.io/endpoint?url=<the URL where compat/badge.json is published>``.
The message counts, per device, the releases that conform there out of those run there
(view.DeviceSummary); a device of the contract that no result asked for says so. The
colour never says more than the words: green only when every release conforms on every
device of the contract, red when a check failed anywhere, yellow for everything between
(something untested, a cell that did not complete, a known failure, a waived promise, or a
device never run: nothing untested is a pass). A result file the report could not read (one
release's upload cut short, say) is said in the message ("1 result file unreadable") and keeps the
badge from green: the release it held is missing from the counts, and nothing says it conformed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .view import DeviceSummary, device_label

SCHEMA_VERSION = 1  # shields.io's endpoint format: https://shields.io/badges/endpoint-badge
GREEN, YELLOW, RED = "brightgreen", "yellow", "red"

_MAJOR_MINOR = re.compile(r"^(\d+\.\d+)")


def series(release: str) -> str:
    """'2.15.0' -> '2.15'; a release that is not a version number stays as it is."""
    match = _MAJOR_MINOR.match(release)
    return match.group(1) if match else release


def label(span: tuple[str, str] | None) -> str:
    """'torch 2.0-2.15' for the oldest and newest release, 'torch 2.15' for one series."""
    if span is None:
        return "torch"
    oldest, newest = series(span[0]), series(span[1])
    return f"torch {oldest}" if oldest == newest else f"torch {oldest}-{newest}"


def device_text(summary: DeviceSummary) -> str:
    name = device_label(summary.device)  # "sim (simulated)"
    if summary.never_run:
        return f"{name}: never run"
    if not summary.tested:
        return f"{name}: never tested"
    return f"{name} {len(summary.conforming)}/{len(summary.releases)} conform"


def colour(summaries: list[DeviceSummary], unreadable: int = 0) -> str:
    answers = [answer for s in summaries for _, answer in s.rows]
    if any(answer.kind == "failed" for answer in answers):
        return RED
    if answers and all(answer.conforms for answer in answers) and not any(s.never_run for s in summaries) \
            and not unreadable:
        return GREEN
    return YELLOW


def unreadable_text(count: int) -> str:
    return f"{count} result file{'' if count == 1 else 's'} unreadable"


def badge(summaries: list[DeviceSummary], span: tuple[str, str] | None,
          unreadable: Sequence[Any] = ()) -> dict[str, Any]:
    """The endpoint JSON for the matrix summarised by ``summaries`` (view.device_summaries);
    ``unreadable``: the result files the report left out (render.Collected.skipped)."""
    parts = [device_text(s) for s in summaries]
    if unreadable:
        parts.append(unreadable_text(len(unreadable)))
    return {
        "schemaVersion": SCHEMA_VERSION,
        "label": label(span),
        "message": " | ".join(parts),
        "color": colour(summaries, len(unreadable)),
    }
