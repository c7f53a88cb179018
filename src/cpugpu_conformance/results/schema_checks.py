"""The checks a cell result passes before anything reads it: depth, the JSON schema
(``schemas/cell-result.schema.json``), the contract's promise numbers, and no verdict where a
promise does not apply. Moved out of model.py, which re-exports every name.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from ..promises import APPLIES_TO, DEVICES, PROMISES, applies
from .files import RESULT_SCHEMA_ID, ResultFileError
from .text import clean_text, json_kind, one_line

SCHEMA_ID = RESULT_SCHEMA_ID  # files.py: the writers replace only a file that says it is one
SCHEMA_VERSION = 2

# Deepest nesting of a real result is about 7 (promises.N.devices.D.failures[i].message).
MAX_DEPTH = 32


def _check_depth(value: Any, source: str) -> None:
    """Refuse nesting deeper than any result has, before anything recurses into it."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ResultFileError(f"{source}: not a cell result: nested too deeply (over {MAX_DEPTH} levels)")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


# ---------------------------------------------------------------------------- schema


@functools.cache
def schema(name: str = "cell-result") -> dict[str, Any]:
    """A JSON schema shipped in the package (``schemas/<name>.schema.json``)."""
    text = resources.files("cpugpu_conformance").joinpath("schemas", f"{name}.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


@functools.cache
def _validator(name: str) -> Any:
    import jsonschema  # only readers and tools need it; the suite can write without it

    return jsonschema.Draft202012Validator(schema(name))


def _check_schema(data: Any, source: str, name: str = "cell-result") -> None:
    try:
        validator = _validator(name)
    except ImportError:
        return  # a minimal environment (torch, numpy, hypothesis, pytest): the model still shapes what it writes
    import jsonschema

    try:
        validator.validate(data)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        message = clean_text(exc.message, 200)
        raise ResultFileError(f"{source}: not a valid cell result at {where}: {message}") from None
    except RecursionError:
        raise ResultFileError(f"{source}: not a cell result: nested too deeply") from None


def validate(data: Any, source: str = "<result>") -> dict[str, Any]:
    """Check ``data`` against the cell-result schema and the contract; return it, or raise ResultFileError.

    Every reader and writer goes through here (CellResult), so a file that is not a result is
    one line naming the file and, where there is one, the key: never a traceback further on.
    The top level is checked first and by hand, so that a string or a list, or a key the
    schema does not define, reads the same with or without jsonschema installed.
    """
    if not isinstance(data, dict):
        raise ResultFileError(f"{source}: not a cell result: the JSON is {_json_kind(data)}, not an object")
    if data.get("schema") == SCHEMA_ID and data.get("schema_version") != SCHEMA_VERSION:
        raise ResultFileError(
            f"{source}: cell result schema version {data.get('schema_version')!r}, this tool reads version "
            f"{SCHEMA_VERSION}: run the cell again"
        )
    unknown = sorted((k for k in data if k not in schema()["properties"]), key=str)
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise ResultFileError(f"{source}: not a valid cell result: unknown key {one_line(repr(unknown[0]), 80)} at the "
                              f"top level{more}; a result has only the keys of schemas/cell-result.schema.json")
    _check_schema(data, source)
    _check_promise_numbers(data, source)
    _check_applicable(data, source)
    return data


_JSON_WORDS = {"null": "null", "boolean": "a boolean", "number": "a number", "string": "a string", "array": "an array"}


def _json_kind(value: Any) -> str:
    return _JSON_WORDS.get(json_kind(value) or "") or f"a {type(value).__name__}"


def _check_applicable(data: dict[str, Any], source: str) -> None:
    """A verdict of a promise on a device the contract says it does not apply to (promise 10 on
    cpu, 11 on cuda) is no result the suite writes: the rule reads such a pair as not applicable
    whatever it says, so a failure recorded there would be hidden. Refused instead.

    The suite writes 'not_applicable' there, with the counts of any test of several promises
    that ran anyway; a failure of one it moves to unattributed_failures, where it fails the cell.
    """
    promises = data.get("promises")
    for promise, entry in promises.items() if isinstance(promises, dict) else ():
        devices = entry.get("devices") if isinstance(entry, dict) else None
        if promise not in APPLIES_TO or not isinstance(devices, dict):
            continue  # (a shape the schema refuses; without jsonschema, the model's accessors skip it)
        for device, verdict in devices.items():
            if device not in DEVICES or applies(promise, device) or not isinstance(verdict, dict):
                continue
            if verdict.get("verdict") in _VERDICTS_OF_A_CHECK or verdict.get("failures"):
                raise ResultFileError(
                    f"{source}: not a valid cell result at promises/{promise}/devices/{device}: it records a verdict "
                    f"of promise {promise} on {device} ({one_line(verdict.get('verdict'), 40)}), where the contract says "
                    f"it does not apply (it is about {' and '.join(APPLIES_TO[promise])})")


# What a promise entry says only when a check of it ran.
_VERDICTS_OF_A_CHECK = ("passed", "failed", "recorded", "known_failure")


def _check_promise_numbers(data: Any, source: str) -> None:
    """A result speaks only of the contract's promises (promises.PROMISES): a made-up one would
    read as a clean row in the report and the summary, and add a row to every other cell."""
    if not isinstance(data, dict):
        return
    verdicts = data.get("promises")
    asked = (data.get("requested") or {}).get("promises") if isinstance(data.get("requested"), dict) else None
    places = [("promises", list(verdicts) if isinstance(verdicts, dict) else []),
              ("requested/promises", list(asked) if isinstance(asked, list) else [])]
    for where, numbers in places:
        for number in numbers:
            if number not in PROMISES:
                shown = one_line(repr(number), 80)
                raise ResultFileError(f"{source}: not a valid cell result at {where}: {shown} is not a promise "
                                      f"of the contract (1-{len(PROMISES)})")
