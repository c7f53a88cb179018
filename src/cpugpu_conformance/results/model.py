"""The model: one type, ``CellResult``, that every writer and reader of a result file goes through.

A cell is one torch release on one device. Its result file says how the run ended and,
when the run completed, what each promise did on each device. The suite writes it
(``--cell-result``), the cell runner writes it when the suite never finished (install
failed, crashed, timed out, interrupted), and the CI workflow's fallback writes it when
nox itself failed; summary, report, gate and bisect read it, all through this type.
A result is validated against ``schemas/cell-result.schema.json`` and the contract, and
every string in it cleaned (text.py), when it is made or read. What it means is the rule
(rule.py); how two compare is compare.py.

The checks a result passes are in schema_checks.py, ``fit`` in fitting.py, ``machine_kind`` and
the release keys in machine.py; every name of theirs is importable from here as before.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..promises import APPLIES_TO, DEVICES, PROMISES, applies  # noqa: F401  (APPLIES_TO, applies: as before the split)
from . import rule
from .files import (  # noqa: F401  (MAX_VALUES, RESULT_SCHEMA_ID, ResultFileError, count_values: as before the split)
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
from .fitting import _FIT_FAILURES, _FIT_LIMITS, _TEXT_KEYS, _cut_failures, _cut_texts, _fits, fit  # noqa: F401
from .machine import NO_ACCELERATOR, UNKNOWN_MACHINE, machine_kind, release_key, same_release  # noqa: F401
from .rule import Answer, Outcome
from .schema_checks import (  # noqa: F401  (the checks a result passes; re-exported, this was their home)
    _VERDICTS_OF_A_CHECK,
    MAX_DEPTH,
    SCHEMA_ID,
    SCHEMA_VERSION,
    _check_applicable,
    _check_depth,
    _check_promise_numbers,
    _check_schema,
    _json_kind,
    _validator,
    schema,
    validate,
)
from .text import KeysCollide, clean_text, clean_tree, one_line  # noqa: F401

# How the cell ended. Only "completed" carries verdicts that can pass.
CELL_STATUSES = ("completed", "interrupted", "crashed", "timed_out", "not_installed", "wrong_torch", "error")
# A promise on a device, as the writer saw it; outcome() re-derives the answer.
VERDICTS = ("passed", "failed", "skipped", "recorded", "not_applicable", "not_requested", "waived", "known_failure")
DEVICE_STATUSES = ("tested", "skipped", "not_requested")


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
        try:
            self._data: dict[str, Any] = clean_tree(validate(plain, source))
        except KeysCollide as exc:
            raise ResultFileError(f"{source}: {exc}") from None
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
