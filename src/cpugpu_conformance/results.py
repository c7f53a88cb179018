"""The cell result: one type that every writer and reader of a result file goes through.

A cell is one torch release on one device. Its result file says how the run ended and,
when the run completed, what each promise did on each device. The suite writes it
(``--cell-result``), the cell runner writes it when the suite never finished (install
failed, crashed, timed out, interrupted), and the CI workflow's fallback writes it when
nox itself failed; summary, report, gate and bisect read it, all through this module.

The rule that decides a verdict lives here and nowhere else:

- ``CellResult.outcome(promise, device)``: a promise on a device *passed* only when at
  least one of its checks ran and every check held. Skipped, missing, empty: each is
  ``untested``, never a pass.
- ``CellResult.answer()``: a cell is clean only when it completed and every promise on
  every device it was asked to test passed or was recorded.
- ``diff(baseline, candidate)``: the one comparison of two cells, for gate and bisect.

Files are read defensively (regular files only, under a size cap, UTF-8, bounded
nesting) and every string in them is stripped of terminal escape sequences and cut to a
length a report can show: a result file is input from another machine.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import functools
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .devices import accelerators_in
from .promises import APPLIES_TO, DEVICES, PROMISES, RECORDED_ONLY, applies, not_applicable

SCHEMA_ID = "cpugpu-conformance/cell-result"
SCHEMA_VERSION = 2

# How the cell ended. Only "completed" carries verdicts that can pass.
CELL_STATUSES = ("completed", "interrupted", "crashed", "timed_out", "not_installed", "wrong_torch", "error")
# A promise on a device, as the writer saw it; outcome() re-derives the answer.
VERDICTS = ("passed", "failed", "skipped", "recorded", "not_applicable", "not_requested")
DEVICE_STATUSES = ("tested", "skipped", "not_requested")

# Outcome kinds that are verdicts: the gate compares these and nothing else.
VERDICT_KINDS = ("passed", "failed", "recorded")
# Outcome kinds for pairs nobody asked about: neither a verdict nor a gap.
NOT_ASKED_KINDS = ("not_applicable", "not_requested")

# A result file is a few hundred KB; anything near this is not one.
MAX_FILE_BYTES = 16 * 1024 * 1024
# Longest text kept from a result: a crashing class can print megabytes.
DETAIL_LIMIT = 20_000  # detail: the tail of a log is what explains a crash
TEXT_LIMIT = 20_000  # messages and reproducers: their head says what failed
SHORT_LIMIT = 2_000  # reasons, observed text, titles, names
# Deepest nesting of a real result is about 7 (promises.N.devices.D.failures[i].message).
MAX_DEPTH = 32


class ResultFileError(Exception):
    """A result file that is missing, unreadable, or not a cell result: one line naming it."""


# ---------------------------------------------------------------------------- text hygiene

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


def _clean_tree(value: Any, key: str | None = None) -> Any:
    if isinstance(value, str):
        limit, keep = _LIMITS.get(key or "", (SHORT_LIMIT, "head"))
        return clean_text(value, limit, keep)
    if isinstance(value, dict):
        return {clean_text(str(k), SHORT_LIMIT): _clean_tree(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_tree(v, key) for v in value]
    return value


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
    """Check ``data`` against the cell-result schema and the contract; return it, or raise ResultFileError."""
    if isinstance(data, dict) and data.get("schema") == SCHEMA_ID and data.get("schema_version") != SCHEMA_VERSION:
        raise ResultFileError(
            f"{source}: cell result schema version {data.get('schema_version')!r}, this tool reads version "
            f"{SCHEMA_VERSION}: run the cell again"
        )
    _check_schema(data, source)
    _check_promise_numbers(data, source)
    return data


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


# ---------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Outcome:
    """What one promise did on one device, decided by the rule.

    kind: passed, failed, recorded (verdicts); untested (asked, but no check ran and
    held: skipped, missing, empty); not_applicable, not_requested (nobody asked); or,
    for a cell that did not complete, its status.
    """

    kind: str
    note: str | None = None
    failures: tuple[dict[str, Any], ...] = ()

    @property
    def is_verdict(self) -> bool:
        return self.kind in VERDICT_KINDS

    @property
    def asked(self) -> bool:
        return self.kind not in NOT_ASKED_KINDS

    def describe(self) -> str:
        return self.kind.replace("_", " ") + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class Answer:
    """A cell's answer: ``kind`` is passed, failed, untested or the status of a cell that
    did not complete; only passed is clean. ``lines`` say why it is not."""

    kind: str
    lines: tuple[str, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return self.kind == "passed"


def _first_line(text: Any, limit: int = 240) -> str | None:
    if not isinstance(text, str):
        return None
    for line in text.splitlines():
        if line.strip():
            line = line.strip().rstrip(":")
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return None


def _last_line(text: Any, limit: int = 160) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()] if isinstance(text, str) else []
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


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
        self._data: dict[str, Any] = _clean_tree(validate(dict(data), source))
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
        return write_json_atomic(path, self._data)

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

    # --- the rule

    def outcome(self, promise: str, device: str) -> Outcome:
        """What ``promise`` did on ``device``: the one place a pass is decided."""
        if not self.completed:
            return Outcome(self.status, _first_line(self.detail))
        dev = self.device_entry(device)
        if dev is None or dev.get("status") == "not_requested":
            return Outcome("not_requested", (dev or {}).get("reason") or f"{device} was not asked for")
        if not applies(promise, device):
            only = " and ".join(APPLIES_TO.get(promise, ()))
            return Outcome("not_applicable", f"promise {promise} is about {only}")
        chosen = self.requested_promises()
        entry = self.entry(promise, device)
        # Before the device's skip: a promise left out by --promise is not untested on a missing device.
        if chosen is not None and promise not in chosen:
            return Outcome("not_requested", (entry or {}).get("reason") or "not selected (--promise)")
        if dev.get("status") == "skipped":
            return Outcome("untested", dev.get("reason") or f"{device} was skipped")
        if (entry or {}).get("verdict") == "not_requested":
            return Outcome("not_requested", entry.get("reason") or "not selected (--promise)")
        if entry is None:
            return Outcome("untested", f"the result has no verdict for promise {promise} on {device}")
        failures = tuple(entry.get("failures") or ())
        verdict = entry.get("verdict")
        if verdict == "failed" or entry.get("failed", 0) > 0 or failures:
            return Outcome("failed", _failure_summary(failures) or entry.get("observed"), failures)
        if verdict in ("passed", "recorded"):
            if entry.get("passed", 0) < 1:
                return Outcome("untested", f"recorded as {verdict}, but no check of it ran")
            kind = "recorded" if promise in RECORDED_ONLY else "passed"
            return Outcome(kind, entry.get("observed") if kind == "recorded" else None)
        if verdict == "not_applicable":
            why = not_applicable(promise, device, accelerators_in(self.environment))  # promise 11 beside an accelerator
            if why is not None:
                return Outcome("not_applicable", why)
            return Outcome("untested", f"the result calls promise {promise} not applicable on {device}; the contract does not")
        return Outcome("untested", entry.get("reason") or "skipped")

    def outcomes(self) -> Iterator[tuple[str, str, Outcome]]:
        """(promise, device, outcome) for every promise the contract or the result knows, on every asked device."""
        for promise in self.promise_numbers():
            for device in self.asked_devices():
                yield promise, device, self.outcome(promise, device)

    def answer(self) -> Answer:
        """The cell's answer: clean only when it completed and every asked pair passed or was recorded."""
        if not self.completed:
            return Answer(self.status, (f"{self.status.replace('_', ' ')}: {_first_line(self.detail) or 'no detail'}",))
        counts = {"passed": 0, "failed": 0, "recorded": 0, "untested": 0}
        failed, untested = [], []
        for promise, device, out in self.outcomes():
            if out.kind in counts:
                counts[out.kind] += 1
            if out.kind == "failed":
                failed.append(f"promise {promise} ({self.title(promise)}) on {device}: failed: {out.note or 'no message'}")
            elif out.kind == "untested":
                untested.append(f"promise {promise} ({self.title(promise)}) on {device}: untested: {out.note}")
        for item in self._data.get("unattributed_failures") or []:
            failed.append(f"{item.get('test')}: {_last_line(item.get('message'))}")
        errors = int((self._data.get("counts") or {}).get("errors", 0))
        if errors and not failed:
            failed.append(f"{errors} test(s) errored outside any promise's check")
        if not self.asked_devices():
            untested.append("no device was asked for")
        if failed:
            return Answer("failed", tuple(failed + untested), counts)
        if untested or not (counts["passed"] + counts["recorded"]):
            return Answer("untested", tuple(untested) or ("no check of any promise ran",), counts)
        return Answer("passed", (), counts)

    def describe(self) -> str:
        """One line for logs and the summary: the answer and its counts."""
        a = self.answer()
        if not self.completed:
            return a.lines[0]
        c = a.counts
        word = {"passed": "passed", "failed": "FAILED", "untested": "UNTESTED"}[a.kind]
        return f"{word} ({c['passed']} passed, {c['failed']} failed, {c['untested']} untested, {c['recorded']} recorded)"


def _failure_summary(failures: tuple[dict[str, Any], ...]) -> str | None:
    if not failures:
        return None
    first = failures[0]
    text = f"{first.get('test')}: {_last_line(first.get('message'))}"
    return text if len(failures) == 1 else f"{text} (+{len(failures) - 1} more)"


# ---------------------------------------------------------------------------- comparing two cells

MISSING = object()  # one side of a comparison has no such entry


def _outcome_of_observation(obs: Any) -> Any:
    """What torch did, without the probe's own description ("doc"), which is not torch behaviour."""
    if isinstance(obs, dict):
        return {k: v for k, v in obs.items() if k != "doc"}
    return obs


def observation_text(obs: Any) -> str:
    """One probe's outcome as text: its value, or 'raises Type: message'."""
    outcome = _outcome_of_observation(obs)
    if isinstance(outcome, dict) and set(outcome) == {"value"}:
        value = outcome["value"]
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if isinstance(outcome, dict) and set(outcome) == {"error"} and isinstance(outcome["error"], dict):
        err = outcome["error"]
        return f"raises {err.get('type', '?')}: {err.get('message', '')}"
    return json.dumps(outcome, sort_keys=True, default=str)


NO_ACCELERATOR = "no accelerator"
UNKNOWN_MACHINE = "an unknown machine"


def machine_kind(environment: Mapping[str, Any]) -> str:
    """What kind of machine a result's environment describes: with no accelerator, with which
    one, or unknown (the result does not say).

    A machine is not a torch release: the accelerator, pin_memory and CUDA probes answer
    differently with a GPU, whatever the torch, so observations are compared only between
    cells of the same kind. The torch's own CUDA build (torch_cuda) is part of the release.
    """
    present = environment.get("cuda_available")
    if present is False:
        return NO_ACCELERATOR
    if present is True:
        name = environment.get("gpu_name")
        return f"CUDA ({one_line(name, 200)})" if isinstance(name, str) and name.strip() else "CUDA (GPU not named)"
    return UNKNOWN_MACHINE


def observation_key(obs: Any) -> str:
    """Canonical form for comparing one probe between two cells."""
    return json.dumps(_outcome_of_observation(obs), sort_keys=True, default=str)


def value_changes(where: str, a: Any, b: Any, depth: int | None = None) -> list[tuple[str, Any, Any]]:
    """(path, before, after) for each differing entry, descending into dicts present on both
    sides up to `depth` levels (None: all the way), so a change names the entry that changed."""
    if a == b:
        return []
    if isinstance(a, dict) and isinstance(b, dict) and (depth is None or depth > 0):
        deeper = None if depth is None else depth - 1
        changes: list[tuple[str, Any, Any]] = []
        for key in sorted(set(a) | set(b), key=str):
            changes += value_changes(f"{where}.{key}", a.get(key, MISSING), b.get(key, MISSING), deeper)
        return changes
    return [(where, a, b)]


def _table(obs: Any) -> dict[str, Any] | None:
    """The entries of a table-valued probe (the dtypes table, say), else None."""
    outcome = _outcome_of_observation(obs)
    if isinstance(outcome, dict) and set(outcome) == {"value"} and isinstance(outcome["value"], dict):
        return outcome["value"]
    return None


def _entry_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def observation_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[tuple[str, str | None, str | None]]:
    """(probe, before text, after text) for every probe whose outcome differs; None: not probed.

    A table-valued probe changes entry by entry ("dtypes.bcomplex32"), so a new dtype
    reads as one line, not as two copies of the whole table.
    """
    changes: list[tuple[str, str | None, str | None]] = []
    for probe in sorted(set(before) | set(after)):
        b_table, a_table = _table(before.get(probe)), _table(after.get(probe))
        if b_table is not None and a_table is not None:
            for path, b_entry, a_entry in value_changes(probe, b_table, a_table, depth=1):
                changes.append((path, None if b_entry is MISSING else _entry_text(b_entry),
                                None if a_entry is MISSING else _entry_text(a_entry)))
            continue
        b = observation_key(before[probe]) if probe in before else None
        a = observation_key(after[probe]) if probe in after else None
        if a != b:
            changes.append((probe, observation_text(before[probe]) if probe in before else None,
                            observation_text(after[probe]) if probe in after else None))
    return changes


@dataclass(frozen=True)
class Change:
    """One promise on one device, compared."""

    promise: str
    title: str
    device: str
    before: Outcome
    after: Outcome

    def line(self) -> str:
        return f"promise {self.promise} ({self.title}) on {self.device}: {self.before.describe()} -> {self.after.describe()}"


@dataclass
class Comparison:
    """The difference between a baseline and a candidate cell.

    ``unusable`` lists, one line each, every promise and device one side has no verdict
    for (and every side that did not complete): such a comparison proves nothing.
    """

    devices: list[str] = field(default_factory=list)
    checked: int = 0  # (promise, device) pairs that passed in the baseline
    unusable: list[str] = field(default_factory=list)
    regressions: list[Change] = field(default_factory=list)
    fixed: list[Change] = field(default_factory=list)
    still_failing: list[Change] = field(default_factory=list)  # failed in both: no regression, but no pass
    verdict_changes: list[Change] = field(default_factory=list)  # every pair whose outcome differs
    recorded_changes: list[Change] = field(default_factory=list)
    observation_changes: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    # Why observations were not compared (the cells ran on different kinds of machine); None: they were.
    observations_not_compared: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def comparable(self) -> bool:
        return not self.unusable

    def change_lines(self) -> list[str]:
        """Every difference in the answer, one line each: verdicts, then observed behaviour."""
        lines = [c.line() for c in self.verdict_changes]
        for probe, before, after in self.observation_changes:
            lines.append(f"observation {probe}: {before if before is not None else '(absent)'} -> "
                         f"{after if after is not None else '(absent)'}")
        return lines


def _answer_of(promise: str, outcome: Outcome) -> tuple[str, str | None]:
    """What must stay equal for two cells to answer alike: the kind, and what a recorded promise recorded."""
    return outcome.kind, outcome.note if promise in RECORDED_ONLY else None


def _label(side: str, cell: CellResult) -> str:
    return f"{side} {one_line(cell.name)} ({one_line(cell.source)})"


def diff(baseline: CellResult, candidate: CellResult, devices: Iterable[str] | None = None) -> Comparison:
    """Compare two cells on ``devices`` (default: every device the baseline was asked to test).

    Only verdicts are compared. Where either side has no verdict for a promise and device
    it is asked about, the comparison is ``unusable`` and names each such pair. Observed
    torch behaviour is compared only when both cells ran on the same kind of machine
    (``machine_kind``); otherwise ``observations_not_compared`` says why, and no probe counts
    as changed.
    """
    cmp = Comparison()
    for side, cell in (("baseline", baseline), ("candidate", candidate)):
        if not cell.completed:
            cmp.unusable.append(f"{_label(side, cell)} did not complete: {cell.answer().lines[0]}")
    if cmp.unusable:
        return cmp
    cmp.devices = list(devices) if devices is not None else baseline.asked_devices()
    if not cmp.devices:
        cmp.unusable.append(f"{_label('baseline', baseline)} was asked to test no device")
        return cmp
    for key, what in (("impl", "tested different implementations"), ("hypothesis_profile", "ran different hypothesis profiles")):
        if baseline.get(key) != candidate.get(key):
            cmp.warnings.append(f"the cells {what}: baseline {baseline.get(key)!r}, candidate {candidate.get(key)!r}")
    for side, cell in (("baseline", baseline), ("candidate", candidate)):
        cmp.warnings += [f"{side}: {w}" for w in cell.warnings]

    numbers = promise_order(set(baseline.promise_numbers()) | set(candidate.promise_numbers()))
    for promise in numbers:
        for device in cmp.devices:
            before, after = baseline.outcome(promise, device), candidate.outcome(promise, device)
            if (not applies(promise, device) and promise in PROMISES) or before.kind == after.kind == "not_applicable":
                continue
            if baseline.machine != candidate.machine and "not_applicable" in (before.kind, after.kind):
                # Promise 11 is not applicable beside an accelerator: the machines differ, not the torch.
                out = before if before.kind == "not_applicable" else after
                cmp.warnings.append(f"promise {promise} ({baseline.title(promise)}) on {device} not compared: "
                                    f"{out.describe()} (baseline: {baseline.machine}; candidate: {candidate.machine})")
                continue
            change = Change(promise, baseline.title(promise), device, before, after)
            if _answer_of(promise, before) != _answer_of(promise, after):
                cmp.verdict_changes.append(change)
            gaps = [(s, c, o) for s, c, o in (("baseline", baseline, before), ("candidate", candidate, after)) if not o.is_verdict]
            if gaps:
                for side, cell, out in gaps:
                    cmp.unusable.append(f"{_label(side, cell)} has no verdict for promise {promise} "
                                        f"({cell.title(promise)}) on {device}: {out.describe()}")
                continue
            if promise in RECORDED_ONLY:  # implementation-defined: what changed is told, never judged
                if (before.kind, before.note) != (after.kind, after.note):
                    cmp.recorded_changes.append(change)
                continue
            if before.kind == "passed":
                cmp.checked += 1
                if after.kind != "passed":
                    cmp.regressions.append(change)
            elif before.kind == "failed" and after.kind == "passed":
                cmp.fixed.append(change)
            elif before.kind == "failed":
                cmp.still_failing.append(change)
    if not cmp.unusable and not cmp.checked:
        # Nothing passed in the baseline, so nothing could regress: "all 0 checks hold" proves nothing.
        cmp.unusable.append(f"{_label('baseline', baseline)} passed no judged promise on {', '.join(cmp.devices)}: "
                            "there is no pass for the candidate to keep")
    if baseline.machine == candidate.machine:
        cmp.observation_changes = observation_changes(baseline.observations, candidate.observations)
    elif baseline.observations or candidate.observations:
        cmp.observations_not_compared = (
            f"observed torch behaviour not compared: the cells ran on different kinds of machine "
            f"(baseline: {baseline.machine}; candidate: {candidate.machine}), and a machine is not a torch release")
    return cmp


# ---------------------------------------------------------------------------- files


def read_regular_file(path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES,
                      what: str = "result file") -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; anything else is a ResultFileError.
    ``what`` names the kind of file in the messages ("no such result file").

    FIFOs and devices are refused before they are opened (opening a FIFO blocks), and
    opened without blocking in case the file changed in between.
    """
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ResultFileError(f"{path}: no such {what}") from None
    except OSError as exc:
        why = "a symbolic link loop" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        raise ResultFileError(f"{path}: cannot read: {why}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ResultFileError(f"{path}: not a regular file ({_kind_of(info.st_mode)})")
    if info.st_size > max_bytes:
        raise ResultFileError(f"{path}: {info.st_size:,} bytes, over the {max_bytes:,}-byte limit for a {what}")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ResultFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ResultFileError(f"{path}: not a regular file")
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ResultFileError(f"{path}: over the {max_bytes:,}-byte limit for a {what}")
    return data


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a plain file"


def json_of(data: bytes, source: str | os.PathLike[str]) -> Any:
    """Parse UTF-8 JSON bytes, turning every way it can fail into one ResultFileError line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultFileError(f"{source}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ResultFileError(f"{source}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise ResultFileError(f"{source}: not a cell result: nested too deeply") from None
    except ValueError as exc:
        raise ResultFileError(f"{source}: not strict JSON: {exc}") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


class NotRegularFile(OSError):
    """A path a writer was given exists and is not a regular file (a FIFO, a device, a
    directory, a socket): writers never replace one. The message names the path and its kind."""


def check_writable(path: str | os.PathLike[str]) -> None:
    """Refuse, before anything is written, a ``path`` that exists and is not a regular file.

    A path that does not exist yet (a dangling symbolic link included) is fine; a symbolic
    link is judged by what it points to, since that is what a reader opens.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile(f"{path}: a symbolic link loop") from None
        raise
    if not stat.S_ISREG(info.st_mode):
        raise NotRegularFile(f"{path}: not a regular file ({_kind_of(info.st_mode)}); a result is written only to a "
                             "regular file or a new path")


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    """Write JSON via a temporary file in the same folder, renamed into place, mode 0644.

    A reader never sees half a file, and a failed write leaves the old file untouched.
    NaN and infinities are refused: strict JSON parsers reject them. A path that is not a
    regular file is refused (NotRegularFile) before anything is written.
    """
    path = Path(path)
    text = json.dumps(data, indent=2, sort_keys=True, allow_nan=False, ensure_ascii=False) + "\n"
    write_text_atomic(path, text)
    return path


def write_text_atomic(path: str | os.PathLike[str], text: str, mode: int = 0o644) -> None:
    path = Path(path)
    # The rename would put a regular file where a FIFO or a device node was (as root,
    # /dev/null): refuse first, and make no temporary file beside such a path either.
    check_writable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)  # mkstemp makes 0600: a published file must be readable
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------- one writer at a time


class ResultPathBusy(Exception):
    """Another run is writing the same result file."""


def lock_path(path: str | os.PathLike[str]) -> Path:
    """The lock file ``exclusive`` holds beside a result file (a killed run leaves it behind)."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def exclusive(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold ``.<name>.lock`` beside the result file for the whole run; a second run refuses.

    The lock is an flock, so a killed run releases it with its process; the lock file is
    removed on the way out.
    """
    import fcntl

    path = Path(path)
    check_writable(path)  # nothing, not even the lock, beside a path no writer may replace
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = lock_path(path)
    while True:
        fd = _open_lock(lock)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = ""
            with contextlib.suppress(OSError):
                holder = lock.read_text().strip()
            raise ResultPathBusy(
                f"{path}: another run is writing this result file{f' ({holder})' if holder else ''}; "
                "wait for it or choose another path"
            ) from None
        # The file we locked may have been removed by the previous holder in between.
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}, since {_now()}\n".encode())
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        os.close(fd)


def _open_lock(lock: Path) -> int:
    """The lock file, opened (or made) as a regular file of its own: never through a symbolic
    link (the truncation would hit its target) and never a FIFO or device planted there."""
    with contextlib.suppress(FileNotFoundError):  # refused unopened: opening a device can act on it
        mode = os.lstat(lock).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"{lock}: the lock file is not a regular file ({_lock_kind(mode)}); remove it")
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(lock, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW: a symbolic link put there since the look
            raise NotRegularFile(f"{lock}: the lock file is not a regular file (a symbolic link); remove it") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # replaced between the look and the open
        os.close(fd)
        raise NotRegularFile(f"{lock}: the lock file is not a regular file ({_lock_kind(mode)}); remove it")
    return fd


def _lock_kind(mode: int) -> str:
    return "a symbolic link" if stat.S_ISLNK(mode) else _kind_of(mode)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def placeholder(cell: str, **fields: Any) -> CellResult:
    """What a result path holds while its run is in progress: ``interrupted``, so a run that
    is killed before it writes its own answer can never leave an older pass behind."""
    return CellResult.new(cell, "interrupted", detail=(
        f"the run that started at {_now()} (pid {os.getpid()}) did not finish: it was killed, "
        "or is still running"), started=_now(), **fields)


# ---------------------------------------------------------------------------- shorthands

def new_result(cell: str, status: str, **fields: Any) -> CellResult:
    return CellResult.new(cell, status, **fields)


def load(path: str | os.PathLike[str]) -> CellResult:
    return CellResult.load(path)


def write_atomic(path: str | os.PathLike[str], result: Mapping[str, Any]) -> Path:
    """Validate (through CellResult), then write atomically."""
    cell = result if isinstance(result, CellResult) else CellResult(result, str(path))
    return cell.write(path)
