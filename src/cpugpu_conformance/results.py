"""The per-cell result file: its schema, an atomic writer and a validating loader.

One file per matrix cell (torch release x machine). The suite writes it with
``--cell-result``; the nox cell writes one itself when the suite never got to run
(install failed, crashed, timed out), so a cell that did not run is never absent.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_ID = "cpugpu-conformance/cell-result"
SCHEMA_VERSION = 1

# How the cell ended. Only "completed" carries verdicts.
CELL_STATUSES = ("completed", "crashed", "timed_out", "not_installed", "wrong_torch", "error")
# A promise on a device: "recorded" is for implementation-defined promises (11).
VERDICTS = ("passed", "failed", "skipped", "recorded")

_failure = {
    "type": "object",
    "required": ["test", "message"],
    "properties": {
        "test": {"type": "string"},
        "message": {"type": "string"},
        "reproducer": {"type": ["string", "null"]},
    },
}

_promise_on_device = {
    "type": "object",
    "required": ["verdict"],
    "properties": {
        "verdict": {"enum": list(VERDICTS)},
        "passed": {"type": "integer", "minimum": 0},
        "failed": {"type": "integer", "minimum": 0},
        "skipped": {"type": "integer", "minimum": 0},
        "reason": {"type": ["string", "null"]},
        "observed": {"type": ["string", "null"]},
        "failures": {"type": "array", "items": _failure},
    },
}

CELL_RESULT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["schema", "schema_version", "cell", "status"],
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "schema_version": {"const": SCHEMA_VERSION},
        "cell": {"type": "string", "minLength": 1},
        "status": {"enum": list(CELL_STATUSES)},
        "detail": {"type": ["string", "null"]},
        "requested": {"type": "object"},
        "started": {"type": ["string", "null"]},
        "duration_s": {"type": ["number", "null"]},
        "impl": {"type": ["string", "null"]},
        "hypothesis_profile": {"type": ["string", "null"]},
        "environment": {"type": "object"},
        "devices": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["status"],
                "properties": {
                    "status": {"enum": ["tested", "skipped"]},
                    "reason": {"type": ["string", "null"]},
                },
            },
        },
        "promises": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["title", "devices"],
                "properties": {
                    "title": {"type": "string"},
                    "devices": {"type": "object", "additionalProperties": _promise_on_device},
                },
            },
        },
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "observations": {"type": "object"},
    },
}


class ResultFileError(Exception):
    """A result file that is missing, unreadable, or not a cell result."""


def new_result(cell: str, status: str, **fields: Any) -> dict[str, Any]:
    """A result skeleton; callers fill in what they know."""
    if status not in CELL_STATUSES:
        raise ValueError(f"unknown cell status {status!r}; expected one of {CELL_STATUSES}")
    result: dict[str, Any] = {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "cell": cell,
        "status": status,
    }
    result.update(fields)
    return result


# Built once: jsonschema.validate() re-checks the schema itself on every call.
_VALIDATOR = jsonschema.Draft202012Validator(CELL_RESULT_SCHEMA)


def validate(result: Any, source: str = "<result>") -> dict[str, Any]:
    try:
        _VALIDATOR.validate(result)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise ResultFileError(f"{source}: not a valid cell result at {where}: {exc.message}") from None
    return result


def write_atomic(path: str | os.PathLike[str], result: dict[str, Any]) -> Path:
    """Validate, then write via a temporary file in the same folder and rename it into place.

    A reader never sees half a file, and a failed write leaves the old file untouched.
    """
    validate(result, str(path))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate one result file, or raise ResultFileError naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultFileError(f"{path}: no such result file") from None
    except OSError as exc:
        raise ResultFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultFileError(f"{path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    return validate(data, str(path))
