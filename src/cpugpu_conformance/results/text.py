"""Text from result files, made safe: no terminal escapes or control characters, and cut to
a length a report can show (a result file is input from another machine).

Also the one-line helpers every command uses on such text: ``one_line`` for a table cell or
a message, ``first_line`` / ``last_line`` for the line of a long text that says the most; and
``json_kind``, the kind of a parsed value, for a message that names what a file held instead.
"""

from __future__ import annotations

import re
from typing import Any

DETAIL_LIMIT = 20_000  # detail: the tail of a log is what explains a crash
TEXT_LIMIT = 20_000  # messages and reproducers: their head says what failed
SHORT_LIMIT = 2_000  # reasons, observed text, titles, names


# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), other two-byte ESC sequences,
# then C0/C1 control characters except tab and newline.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATES = re.compile(r"[\ud800-\udfff]")  # JSON can carry them; no UTF-8 writer can


def clean_text(text: str, limit: int | None = None, keep: str = "head") -> str:
    """Text safe for a terminal, Markdown and HTML: no escape sequences or control
    characters (tab and newline kept, CR folded), and at most ``limit`` characters with a
    note saying how much was cut (``keep="tail"`` keeps the end, for log tails)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _SURROGATES.sub("\ufffd", _CONTROLS.sub("", _ESCAPES.sub("", text)))
    if limit is None or len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep == "tail":
        return f"[... {cut:,} characters cut ...]\n" + text[-limit:]
    return text[:limit] + f"\n[... {cut:,} characters cut ...]"


def one_line(text: Any, limit: int = SHORT_LIMIT) -> str:
    """Text from outside (a cell name, a file name, an error) as one printable line: no escape or
    control sequences, no newlines or tabs, and no lone surrogates (a non-UTF-8 file name) to
    break encoding. For tables and one-line messages; clean_text keeps newlines for blocks."""
    text = str(text).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return " ".join(clean_text(text, limit).split("\n")).replace("\t", " ")


# Per key, how much of a string value to keep; other strings get SHORT_LIMIT.
_LIMITS = {"detail": (DETAIL_LIMIT, "tail"), "message": (TEXT_LIMIT, "head"), "reproducer": (TEXT_LIMIT, "head")}


class KeysCollide(ValueError):
    """Two keys of one object that clean to the same text ("3" and "3\x1b[0m"): keeping either would
    let the other's value stand in for it, a passed verdict for a failed one."""


def clean_tree(value: Any, key: str | None = None) -> Any:
    if isinstance(value, str):
        limit, keep = _LIMITS.get(key or "", (SHORT_LIMIT, "head"))
        return clean_text(value, limit, keep)
    if isinstance(value, dict):
        cleaned: dict[str, Any] = {}
        for k, v in value.items():
            name = clean_text(str(k), SHORT_LIMIT)
            if name in cleaned:
                raise KeysCollide(f"two keys read as {one_line(repr(name), 200)} once their control characters "
                                  f"are gone (one is {one_line(ascii(k), 200)}): a forged or corrupt file")
            cleaned[name] = clean_tree(v, str(k))
        return cleaned
    if isinstance(value, list):
        return [clean_tree(v, key) for v in value]
    return value


def first_line(text: Any, limit: int = 240) -> str | None:
    if not isinstance(text, str):
        return None
    for line in text.splitlines():
        if line.strip():
            line = line.strip().rstrip(":")
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return None


def last_line(text: Any, limit: int | None = 160, default: str = "") -> str:
    """The last line of a text that is not blank, stripped, cut to ``limit`` (… marks a cut); ``default`` for none."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()] if isinstance(text, str) else []
    if not lines:
        return default
    line = lines[-1]
    return line if limit is None or len(line) <= limit else line[: limit - 1] + "…"


def json_kind(value: Any) -> str | None:
    """JSON's name for the kind of a parsed value (a result file's JSON, a matrix's YAML): "null",
    "boolean", "number", "string", "array" or "object"; None for a type JSON has not (a YAML date).
    Each message that names a kind puts it in its own words. A bool is checked before the numbers:
    to isinstance, True is an int."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return None
