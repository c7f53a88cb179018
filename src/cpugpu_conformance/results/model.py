"""The model: one type, ``CellResult``, that every writer and reader of a result file goes through.

A cell is one torch release on one device. Its result file says how the run ended and,
when the run completed, what each promise did on each device. The suite writes it
(``--cell-result``), the cell runner writes it when the suite never finished (install
failed, crashed, timed out, interrupted), and the CI workflow's fallback writes it when
nox itself failed; summary, report, gate and bisect read it, all through this type.
A result is validated against ``schemas/cell-result.schema.json`` and the contract, and
every string in it cleaned (text.py), when it is made or read. What it means is the rule
(rule.py); how two compare is compare.py.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from ..promises import APPLIES_TO, DEVICES, PROMISES, applies
from . import rule
from .files import (
    MAX_FILE_BYTES,
    MAX_VALUES,
    RESULT_SCHEMA_ID,
    ResultFileError,
    count_values,
    json_of,
    now,
    read_regular_file,
    write_json_atomic,
)
from .rule import Answer, Outcome
from .text import clean_text, clean_tree, one_line

SCHEMA_ID = RESULT_SCHEMA_ID  # files.py: the writers replace only a file that says it is one
SCHEMA_VERSION = 2

# How the cell ended. Only "completed" carries verdicts that can pass.
CELL_STATUSES = ("completed", "interrupted", "crashed", "timed_out", "not_installed", "wrong_torch", "error")
# A promise on a device, as the writer saw it; outcome() re-derives the answer.
VERDICTS = ("passed", "failed", "skipped", "recorded", "not_applicable", "not_requested", "waived", "known_failure")
DEVICE_STATUSES = ("tested", "skipped", "not_requested")
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


def _json_kind(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"


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


def promise_order(numbers: Iterable[str]) -> list[str]:
    """The contract's promises in order, then any others a result carries, so none is dropped."""
    known = list(PROMISES)
    others = sorted(set(numbers) - set(known), key=lambda p: (not p.isdigit(), int(p) if p.isdigit() else 0, p))
    return known + others


class CellResult(Mapping[str, Any]):
    """One cell result, validated and cleaned; read-only, with the JSON as a mapping.

    ``CellResult.load(path)`` reads a file; ``CellResult.new(cell, status, **fields)``
    makes one to write; ``write(path)`` writes it atomically (mode 0644).
    """

    def __init__(self, data: Mapping[str, Any], source: str = "<result>") -> None:
        _check_depth(data, source)
        plain = dict(data) if isinstance(data, Mapping) else data  # anything else: validate names it
        self._data: dict[str, Any] = clean_tree(validate(plain, source))
        self.source = source

    # --- construction, reading, writing

    @classmethod
    def new(cls, cell: str, status: str, **fields: Any) -> CellResult:
        if status not in CELL_STATUSES:
            raise ValueError(f"unknown cell status {status!r}; expected one of {CELL_STATUSES}")
        data: dict[str, Any] = {"schema": SCHEMA_ID, "schema_version": SCHEMA_VERSION, "cell": cell, "status": status}
        data.update({k: v for k, v in fields.items() if v is not None or k == "detail"})
        return cls(data, f"<new result {cell}>")

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES) -> CellResult:
        return cls(json_of(read_regular_file(path, max_bytes=max_bytes), path), str(path))

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically, cut to fit what every reader accepts (``fit``)."""
        return write_json_atomic(path, fit(self._data))

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._data))

    # --- Mapping

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CellResult):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<CellResult {self.name} {self.status} from {self.source}>"

    # --- what the run was

    @property
    def name(self) -> str:
        return self._data["cell"]

    @property
    def status(self) -> str:
        return self._data["status"]

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def detail(self) -> str | None:
        return self._data.get("detail")

    @property
    def requested(self) -> dict[str, Any]:
        asked = self._data.get("requested")
        return asked if isinstance(asked, dict) else {}

    @property
    def environment(self) -> dict[str, Any]:
        env = self._data.get("environment")
        return env if isinstance(env, dict) else {}

    @property
    def machine(self) -> str:
        """The kind of machine the cell ran on (see machine_kind): observations of torch are
        compared only between cells of the same kind."""
        return machine_kind(self.environment)

    @property
    def observations(self) -> dict[str, Any]:
        obs = self._data.get("observations")
        return obs if isinstance(obs, dict) else {}

    @property
    def warnings(self) -> list[str]:
        return list(self._data.get("warnings") or [])

    @property
    def release(self) -> str:
        """The torch release a cell stands for: what it asked for, else what it ran, minus +local."""
        torch = self.requested.get("torch") or self.environment.get("torch")
        return str(torch).split("+", 1)[0] if torch else "unknown"

    def torch_mismatch(self) -> str | None:
        """One line when a completed cell ran another torch than the one it asked for
        (``environment.torch`` against ``requested.torch``, the local label aside): no run of the
        tools writes that (the cell is ``wrong_torch`` then), so the file was made or edited by hand."""
        asked, ran = self.requested.get("torch"), self.environment.get("torch")
        if not self.completed or not isinstance(asked, str) or not isinstance(ran, str) or same_release(asked, ran):
            return None
        return (f"{self.source}: not a valid cell result: environment.torch is {one_line(repr(ran), 80)}, but the cell "
                f"asked for torch {one_line(repr(asked), 80)} (requested.torch); a cell that got another torch is "
                "'wrong torch', never completed")

    def promise_numbers(self) -> list[str]:
        return promise_order(self._data.get("promises") or {})

    def requested_promises(self) -> set[str] | None:
        chosen = self.requested.get("promises")
        return set(chosen) if chosen is not None else None

    def device_entry(self, device: str) -> dict[str, Any] | None:
        entry = (self._data.get("devices") or {}).get(device)
        return entry if isinstance(entry, dict) else None

    def asked_devices(self) -> list[str]:
        """Devices the run was asked to test (tested, or asked for and missing), contract order first.

        A cell that did not complete stands for the device it asked for.
        """
        entries = self._data.get("devices") or {}
        asked = [d for d, e in entries.items() if isinstance(e, dict) and e.get("status") in ("tested", "skipped")]
        if not asked:
            wanted = self.requested.get("device")
            if wanted in DEVICES:
                asked = [wanted]
            elif wanted == "all":
                asked = list(DEVICES)
        return [d for d in DEVICES if d in asked] + sorted(d for d in asked if d not in DEVICES)

    def tested_devices(self) -> list[str]:
        return [d for d in self.asked_devices() if (self.device_entry(d) or {}).get("status") == "tested"]

    def entry(self, promise: str, device: str) -> dict[str, Any] | None:
        p = (self._data.get("promises") or {}).get(promise)
        if not isinstance(p, dict):
            return None
        e = (p.get("devices") or {}).get(device)
        return e if isinstance(e, dict) else None

    def title(self, promise: str) -> str:
        if promise in PROMISES:
            return PROMISES[promise]
        p = (self._data.get("promises") or {}).get(promise)
        return str(p.get("title")) if isinstance(p, dict) and p.get("title") else f"promise {promise}"

    # --- the rule (rule.py)

    def outcome(self, promise: str, device: str) -> Outcome:
        """What ``promise`` did on ``device``: the one place a pass is decided."""
        return rule.outcome(self, promise, device)

    def outcomes(self) -> Iterator[tuple[str, str, Outcome]]:
        return rule.outcomes(self)

    def answer(self) -> Answer:
        return rule.answer(self)

    def describe(self) -> str:
        """One line for logs and the summary: the answer and its counts."""
        return rule.describe(self)


# ---------------------------------------------------------------------------- what a writer may write

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


NO_ACCELERATOR = "no accelerator"
UNKNOWN_MACHINE = "an unknown machine"


def machine_kind(environment: Mapping[str, Any]) -> str:
    """What kind of machine a result's environment describes: with no accelerator, with which
    one, or unknown (the result does not say).

    A machine is not a torch release: the accelerator, pin_memory and CUDA probes answer
    differently with a GPU, whatever the torch, so observations are compared only between
    cells of the same kind. The torch's own CUDA build (torch_cuda) is part of the release.
    """
    if environment.get("sim_loaded") is True:  # sim was the accelerator (cpugpu_conformance.sim)
        return "sim (simulated accelerator)"
    present = environment.get("cuda_available")
    if present is False:
        return NO_ACCELERATOR
    if present is True:
        name = environment.get("gpu_name")
        return f"CUDA ({one_line(name, 200)})" if isinstance(name, str) and name.strip() else "CUDA (GPU not named)"
    return UNKNOWN_MACHINE


def same_release(a: str, b: str) -> bool:
    """Whether two torch versions are one release, local labels (+cpu, +cu121) aside: 2.15 and
    2.15.0 are; 2.15.0 and 2.14.1 are not."""
    from packaging.version import InvalidVersion, Version  # the suite writes results without packaging

    a, b = a.split("+", 1)[0].strip(), b.split("+", 1)[0].strip()
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def release_key(release: str) -> tuple:
    """The one sort key of torch releases: versions in version order (2.16.0rc1 before 2.16.0),
    then ``latest`` (the newest, whatever it resolves to), then anything unparseable, by name."""
    from packaging.version import InvalidVersion, Version  # the suite writes results without packaging

    if release == "latest":
        return (1, Version("0"), "")
    try:
        return (0, Version(release), "")
    except InvalidVersion:
        return (2, Version("0"), release)


def placeholder(cell: str, **fields: Any) -> CellResult:
    """What a result path holds while its run is in progress: ``interrupted``, so a run that
    is killed before it writes its own answer can never leave an older pass behind."""
    return CellResult.new(cell, "interrupted", detail=(
        f"the run that started at {now()} (pid {os.getpid()}) did not finish: it was killed, "
        "or is still running"), started=now(), **fields)


def write_atomic(path: str | os.PathLike[str], result: Mapping[str, Any]) -> Path:
    """Validate (through CellResult), then write atomically."""
    cell = result if isinstance(result, CellResult) else CellResult(result, str(path))
    return cell.write(path)
