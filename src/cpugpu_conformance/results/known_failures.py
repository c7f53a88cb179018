"""Known failures the team owns: a TOML file naming the promises its class fails, and why.

    [[known_failure]]
    promise = 5
    device = "cuda"          # optional: every device when absent
    torch = "<2.3"           # optional: a PEP 440 specifier the torch that ran must satisfy
    reason = "torch < 2.3 has no uint16 in numpy()"

A listed promise is still tested. Where it failed, its entry in the result file becomes
``known_failure``, with the listed reason and the failures (reproducers included): no pass,
and no failure of the run. Where it passed, the entry stays ``passed`` with the listing beside
it (``known_failure`` key): the entry is stale, and the cell's answer fails until it is removed
(strict, as pytest's xfail_strict is), so the exit code says what the file says. An entry whose
device or torch does not match the cell does not apply to it at all.

``load(path)`` reads and checks a file (KnownFailuresError: one line naming the file, the entry
and the key); ``mark(entry, listed, promise, device, torch)`` applies it to one verdict entry
(the suite's recorder, on each promise and device); ``apply(result, listed)`` re-applies it to a
whole result file (the gate). Plain data, no torch: xdist's controller and the gate run it.
tomllib is the standard library's from Python 3.11 (tomli before, which pytest itself depends
on there); specifiers are packaging's, which pytest depends on too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..promises import DEVICES, PROMISES
from .files import ResultFileError, read_regular_file

TABLE = "known_failure"  # the file's array of tables, and the key of a listing in a result entry
KEYS = ("promise", "device", "torch", "reason")
MAX_BYTES = 1 << 20  # a file of known failures is a few lines; anything this big is a mistake


class KnownFailuresError(ValueError):
    """The file cannot be used; the message is one line naming the file, the entry and the key."""


@dataclass(frozen=True)
class KnownFailure:
    """One listed promise (on one device, for some torch releases: None is every one)."""

    promise: str
    reason: str
    file: str
    entry: int  # its place in the file, from 1
    device: str | None = None
    torch: str | None = None  # a PEP 440 specifier, as written

    def applies(self, promise: str, device: str, torch_version: str | None) -> bool:
        if promise != self.promise or (self.device is not None and device != self.device):
            return False
        if self.torch is None:
            return True
        return torch_version is not None and torch_satisfies(torch_version, self.torch)

    def as_data(self) -> dict[str, Any]:
        """The listing beside a verdict in the result file (schema: promise_on_device.known_failure)."""
        data: dict[str, Any] = {"reason": self.reason, "file": self.file, "entry": self.entry}
        if self.torch is not None:
            data["torch"] = self.torch
        return data


@dataclass(frozen=True)
class KnownFailures:
    """A file's entries, in file order: the first that applies to a promise and device is its listing."""

    file: str
    entries: tuple[KnownFailure, ...] = ()

    def find(self, promise: str, device: str, torch_version: str | None) -> KnownFailure | None:
        return next((e for e in self.entries if e.applies(promise, device, torch_version)), None)


# ---------------------------------------------------------------------------- reading the file


def _toml() -> Any:
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    import tomli  # a dependency below Python 3.11 (pytest's too)

    return tomli


def load(path: str | os.PathLike[str]) -> KnownFailures:
    """The known failures in ``path``; KnownFailuresError (one line) for anything wrong with it."""
    name = os.fspath(path)
    if not name:
        raise KnownFailuresError("'': an empty path is no file")
    try:
        raw = read_regular_file(name, max_bytes=MAX_BYTES, what="file of known failures")
    except ResultFileError as exc:
        raise KnownFailuresError(str(exc)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KnownFailuresError(f"{name}: not UTF-8 text (byte {exc.start})") from None
    toml = _toml()
    try:
        data = toml.loads(text)
        return parse(data, name)
    except toml.TOMLDecodeError as exc:
        raise KnownFailuresError(f"{name}: not valid TOML: {_one_line(str(exc))}") from None
    except RecursionError:  # arrays or tables nested thousands deep: the parser recurses per level
        raise KnownFailuresError(f"{name}: not a file of known failures: nested too deeply (it holds "
                                 f"[[{TABLE}]] tables of plain keys and values)") from None


def parse(data: Mapping[str, Any], name: str) -> KnownFailures:
    """The entries of a parsed file; KnownFailuresError naming ``name``, the entry and the key."""
    unknown = [k for k in data if k != TABLE]
    if unknown:
        raise KnownFailuresError(f"{name}: unknown key {_shown(unknown[0])}: the file holds [[{TABLE}]] entries only")
    tables = data.get(TABLE, [])
    if not isinstance(tables, list):
        raise KnownFailuresError(f"{name}: {TABLE} = {_shown(tables)}: write each entry as a [[{TABLE}]] table")
    entries: list[KnownFailure] = []
    seen: dict[tuple[str, str | None, str | None], int] = {}
    for number, table in enumerate(tables, 1):
        where = f"{name}: [[{TABLE}]] {number}"
        if not isinstance(table, dict):
            raise KnownFailuresError(f"{where}: {_shown(table)}: not a table")
        entry = _entry(table, where, name, number)
        key = (entry.promise, entry.device, entry.torch)
        if key in seen:
            raise KnownFailuresError(f"{where}: the same promise, device and torch as entry {seen[key]}")
        seen[key] = number
        entries.append(entry)
    return KnownFailures(name, tuple(entries))


def _entry(table: Mapping[str, Any], where: str, name: str, number: int) -> KnownFailure:
    for key in table:
        if key not in KEYS:
            raise KnownFailuresError(f"{where}: unknown key {_shown(key)} (the keys: {', '.join(KEYS)})")
    if "promise" not in table:
        raise KnownFailuresError(f"{where}: no promise (a number of CONTRACT.md, 1-{len(PROMISES)})")
    promise = table["promise"]
    number_text = str(promise) if isinstance(promise, int) and not isinstance(promise, bool) else \
        promise.strip() if isinstance(promise, str) else None
    if number_text not in PROMISES:
        raise KnownFailuresError(f"{where}: promise = {_shown(promise)}: not a promise of the contract "
                                 f"(1-{len(PROMISES)})")
    device = table.get("device")
    if device is not None and device not in DEVICES:
        raise KnownFailuresError(f"{where}: device = {_shown(device)}: not a device of the contract "
                                 f"({', '.join(DEVICES)}; leave it out for every device)")
    torch = table.get("torch")
    if torch is not None:
        if not isinstance(torch, str) or not torch.strip():
            raise KnownFailuresError(f"{where}: torch = {_shown(torch)}: not a version specifier like \"<2.3\"")
        problem = specifier_problem(torch)
        if problem:
            raise KnownFailuresError(f"{where}: torch = {_shown(torch)}: {problem}")
        torch = torch.strip()
    reason = table.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        said = "no reason" if reason is None else f"reason = {_shown(reason)}"
        raise KnownFailuresError(f"{where}: {said}: say why it fails (the report shows it)")
    return KnownFailure(number_text, _one_line(reason.strip()), name, number, device, torch)


def specifier_problem(text: str) -> str | None:
    """Why ``text`` is no PEP 440 specifier set ("<2.3", ">=2.1,<2.4", "==2.2.*"), or None."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        return 'not a version specifier like "<2.3" or ">=2.1,<2.4" (PEP 440)'
    return None


def torch_satisfies(version: str, specifier: str) -> bool:
    """Whether a torch version (2.2.2+cpu, 2.16.0.dev20261201) satisfies a specifier. Pre-releases
    and nightlies are matched too (a nightly of 2.16 is ">=2.16.0.dev0", and not "<2.16", as PEP 440
    orders it); the local label (+cpu, +cu121) is ignored unless the specifier names one."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Version(version)
    except InvalidVersion:
        return False
    return SpecifierSet(specifier).contains(parsed, prereleases=True)


def _shown(value: Any) -> str:
    """A value as the file wrote it: repr escapes line breaks, so it stays one line."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


# ---------------------------------------------------------------------------- applying it


def unmarked(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A verdict entry as it was before any known-failures file was applied to it."""
    out = dict(entry)
    listing = out.pop(TABLE, None)
    if out.get("verdict") == TABLE:
        out["verdict"] = "failed"
        if isinstance(listing, dict) and out.get("reason") == listing.get("reason"):
            out.pop("reason", None)
    return out


def mark(entry: Mapping[str, Any], listed: KnownFailures | None, promise: str, device: str,
         torch_version: str | None) -> dict[str, Any]:
    """One promise on one device with the file applied: ``known_failure`` where a listed promise
    failed, the listing beside a listed promise that passed (stale: the answer then fails), and
    every other entry as it is (untested, waived, not asked: a listing says nothing there)."""
    base = unmarked(entry)
    found = listed.find(promise, device, torch_version) if listed is not None else None
    if found is None:
        return base
    if base.get("verdict") == "failed":
        return {**base, "verdict": TABLE, "reason": found.reason, TABLE: found.as_data()}
    if base.get("verdict") in ("passed", "recorded"):
        return {**base, TABLE: found.as_data()}
    return base


def torch_of(result: Mapping[str, Any]) -> str | None:
    """The torch a result ran (its environment), else the one it asked for."""
    for where in ("environment", "requested"):
        block = result.get(where)
        if isinstance(block, dict) and isinstance(block.get("torch"), str):
            return block["torch"]
    return None


def apply(data: Mapping[str, Any], listed: KnownFailures | None) -> dict[str, Any]:
    """A result file's data with ``listed`` applied afresh to every verdict (a listing the file
    no longer has is taken off); the torch that ran decides the entries with a torch specifier."""
    out = dict(data)
    promises = data.get("promises")
    if not isinstance(promises, dict):
        return out
    torch_version = torch_of(data)
    new: dict[str, Any] = {}
    for promise, block in promises.items():
        if not isinstance(block, dict) or not isinstance(block.get("devices"), dict):
            new[promise] = block
            continue
        devices = {device: mark(entry, listed, promise, device, torch_version) if isinstance(entry, dict) else entry
                   for device, entry in block["devices"].items()}
        new[promise] = {**block, "devices": devices}
    out["promises"] = new
    return out
