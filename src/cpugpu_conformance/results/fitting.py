"""What a writer may write: ``fit`` cuts a result's long texts, then its long lists of
failures, until the file fits what every reader accepts. Moved out of model.py, which
re-exports every name.
"""

from __future__ import annotations

import json
from typing import Any

from .files import MAX_FILE_BYTES, MAX_VALUES, count_values
from .text import clean_text

# How far each text is cut, step by step, when a result does not fit: its head says what
# failed (the tail, for a crash's log), which is kept.
_FIT_LIMITS = (5_000, 1_000, 200)
# Failures kept per list, once the texts are as short as they go: the counts still say how many.
_FIT_FAILURES = 20


def fit(data: dict[str, Any], *, max_bytes: int = MAX_FILE_BYTES, max_values: int = MAX_VALUES) -> dict[str, Any]:
    """``data`` as a result file can hold it: whole when it fits the readers' caps (bytes and
    values, files.py), else with its long texts cut (messages, reproducers, the detail), then
    with long lists of failures cut to their first few, until it fits.

    So a run that fails loudly (a 100 kB message in every test, wide characters, a team's
    suite parametrized many times over) still leaves a file every command can read; the
    verdicts and counts are never cut, only the texts that explain them.
    """
    if _fits(data, max_bytes, max_values):
        return data
    for limit in _FIT_LIMITS:
        data = _cut_texts(data, limit)
        if _fits(data, max_bytes, max_values):
            return data
    return _cut_failures(data, _FIT_FAILURES)  # still over (it never was, measured): the reader names the size


def _fits(data: dict[str, Any], max_bytes: int, max_values: int) -> bool:
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return len(text) <= max_bytes and count_values(text) <= max_values


_TEXT_KEYS = {"message": "head", "reproducer": "head", "detail": "tail"}


def _cut_texts(value: Any, limit: int, key: str | None = None) -> Any:
    if isinstance(value, str) and key in _TEXT_KEYS:
        return clean_text(value, limit, _TEXT_KEYS[key])
    if isinstance(value, dict):
        return {k: _cut_texts(v, limit, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_texts(v, limit, key) for v in value]
    return value


def _cut_failures(data: dict[str, Any], keep: int) -> dict[str, Any]:
    def cut(failures: Any) -> Any:
        if not isinstance(failures, list) or len(failures) <= keep:
            return failures
        note = {"test": "(cut)", "message": f"{len(failures) - keep:,} more failures cut: the result file would not "
                                            "fit what a reader accepts", "reproducer": None}
        return failures[:keep] + [note]

    data = dict(data)
    if "unattributed_failures" in data:
        data["unattributed_failures"] = cut(data["unattributed_failures"])
    if "promises" in data:
        data["promises"] = {
            number: dict(entry, devices={device: dict(verdict, failures=cut(verdict["failures"])) if "failures" in verdict
                                         else verdict for device, verdict in entry["devices"].items()})
            for number, entry in data["promises"].items()}
    return data
