"""matrix.yaml -> a validated Matrix (runner/matrix_model.py), refusing a bad file before anything
is installed: ``load`` raises MatrixError with one line per problem, each naming the file and the
key, e.g. ``matrix.yaml: torch[3].version: '2.x' is not a version like 2.13.0``.
The noxfile and the CI workflow read the matrix only through ``load``; the command that checks a
file, ``python -m cpugpu_conformance.matrix [PATH] [--json]``, is cli/matrix_file.py.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from cpugpu_conformance.results import ResultFileError, read_regular_file, schema
from cpugpu_conformance.results.text import json_kind

# The model, which the rest of the package names through this module too (matrices.Matrix).
from .matrix_model import (
    LATEST,
    Matrix,
    MatrixCell,
    Release,
    RunnerDevice,
    cell_name,
    default_release,
    release_numbers,
    same_version,
)

__all__ = [
    "DEFAULT_PATH", "LATEST", "SCHEMA", "Matrix", "MatrixCell", "MatrixError", "Release", "RunnerDevice", "cell_name",
    "default_release", "for_release", "is_torch_version", "load", "release_numbers", "same_version",
]

DEFAULT_PATH = Path("matrix.yaml")
DEFAULT_TIME_LIMIT_S = 600.0
MAX_TIME_LIMIT_S = 86400  # a day: more is a typo, and a huge number overflows every timeout it reaches
MAX_MATRIX_BYTES = 1024 * 1024  # a matrix is a few kB; the cap keeps a huge file (or /dev/zero) out of memory
MAX_YAML_DEPTH = 32  # a matrix nests four levels; PyYAML recurses once per level
MAX_PROBLEMS_SHOWN = 20  # a file of a million mistakes is told in a screenful

# The file's schema is schemas/matrix.schema.json ("x-expect" is ours: what a value should look like,
# for errors a person can act on); tests/test_schemas.py checks that its device names are
# devices.NAMES and its profiles the suite's (testing/budget.PROFILES).
SCHEMA: dict[str, Any] = schema("matrix")


_FORMATS = jsonschema.FormatChecker(formats=())


@_FORMATS.checks("torch-version")
def is_torch_version(value: object) -> bool:
    """latest, or X.Y.Z with an optional pre-, post- or dev-release part; no epoch, no +local
    (the build key says which local build). Canonical spelling is checked separately."""
    if not isinstance(value, str) or value == LATEST:
        return True  # a non-string is the type check's to refuse
    try:
        version = Version(value)
    except InvalidVersion:
        return False
    return len(version.release) == 3 and not version.epoch and version.local is None


class MatrixError(Exception):
    """matrix.yaml is unusable; ``lines`` holds one message per problem (the first
    MAX_PROBLEMS_SHOWN of them, then one line saying how many more)."""

    def __init__(self, lines: list[str], path: Path | None = None):
        if len(lines) > MAX_PROBLEMS_SHOWN:
            more = len(lines) - MAX_PROBLEMS_SHOWN
            where = f"{path}: " if path else ""
            lines = lines[:MAX_PROBLEMS_SHOWN] + [f"{where}... {more:,} more problem{'s' if more > 1 else ''}"]
        super().__init__("\n".join(lines))
        self.lines = lines



# ---------------------------------------------------------------------------- loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; a matrix with two `baseline:` is a mistake.

    Anchors and aliases are refused before any node is built: nine levels of nine aliases
    expand to gigabytes (an alias bomb), and a matrix has nothing worth sharing. Nesting is
    capped too, since PyYAML composes each level with one more recursive call.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            sign = "*" if isinstance(event, yaml.AliasEvent) else "&"
            raise yaml.composer.ComposerError(
                None, None, f"{sign}{event.anchor}: anchors and aliases are not accepted in a matrix (write the value out)",
                event.start_mark)
        if self._depth >= MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", event.start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load(path: str | Path = DEFAULT_PATH) -> Matrix:
    """Read and validate matrix.yaml; raise MatrixError naming the file and each bad key."""
    path = Path(path)
    try:
        # Regular files only (a FIFO would block every command, nox -l included), of a matrix's size.
        text = read_regular_file(path, max_bytes=MAX_MATRIX_BYTES, what="file").decode("utf-8")
    except ResultFileError as exc:
        raise MatrixError([str(exc)]) from None
    except UnicodeDecodeError as exc:
        raise MatrixError([f"{path}: cannot read: {exc}"]) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        context = ""
        if exc.context and exc.context_mark and exc.problem:
            context = f" ({exc.context} at line {exc.context_mark.line + 1}, column {exc.context_mark.column + 1})"
        raise MatrixError([f"{path}{where}: not valid YAML: {exc.problem or exc.context}{context}"]) from None
    except yaml.YAMLError as exc:
        raise MatrixError([f"{path}: not valid YAML: {exc}"]) from None
    except ValueError as exc:  # an integer of over 4300 digits, which int() refuses to read
        raise MatrixError([f"{path}: not valid YAML: {exc}"]) from None
    if not isinstance(data, dict):
        raise MatrixError([f"{path}: expected a mapping of keys ({', '.join(SCHEMA['properties'])}), got {_kind(data)}"])

    errors = jsonschema.Draft202012Validator(SCHEMA, format_checker=_FORMATS).iter_errors(data)
    problems = [f"{path}: {line}" for err in errors for line in _describe(err)]
    if problems:
        raise MatrixError(list(dict.fromkeys(problems)), path)
    problems = [f"{path}: {line}" for line in _semantic_problems(data) + _source_problems(path, data)]
    if problems:
        raise MatrixError(problems, path)
    return _build(path, data)


NO_MATRIX_TIME_LIMIT_S = 1800.0  # bump-target's default: a cell on a machine nobody sized


def for_release(version: str, device: str, python: str, *, path: Path = DEFAULT_PATH) -> Matrix:
    """The matrix of one release on one device, paired as bisect and bump-target pair a release no
    matrix lists (matrix_model.default_release), the ci profile, PyPI, a 30-minute limit: what
    ``cell RELEASE`` runs where there is no matrix.yaml. MatrixError (one line) for a version that
    is no torch release or a device the matrix format does not know."""
    problems = []
    if version != LATEST and not (is_torch_version(version) and str(Version(version)) == version):
        problems.append(f"torch {version!r}: not a torch release like 2.13.0 (or latest)")
    if device not in SCHEMA["properties"]["devices"]["properties"]:
        known = ", ".join(SCHEMA["properties"]["devices"]["properties"])
        problems.append(f"--device {device!r}: not a device a cell tests ({known})")
    if problems:
        raise MatrixError(problems, path)
    release = Release(LATEST) if version == LATEST else default_release(version)
    return Matrix(path=path, python=python, devices=(RunnerDevice(device, "this machine"),), hypothesis_profile="ci",
                  time_limit_s=NO_MATRIX_TIME_LIMIT_S, index_url=None, baseline=version, candidates=(),
                  releases=(release,))


def _semantic_problems(data: dict[str, Any]) -> list[str]:
    """What the schema cannot say: canonical versions, finite limits, duplicates, specifiers,
    and references to listed releases."""
    problems = _noncanonical_versions(data) + _unbounded_time_limits(data)
    listed: dict[Version | str, int] = {}
    for i, entry in enumerate(data["torch"]):
        key = _version_key(entry["version"])
        if key in listed:
            problems.append(f"torch[{i}].version: duplicate cell: {entry['version']!r} is already torch[{listed[key]}]")
        listed.setdefault(key, i)
        if "numpy" in entry:
            spec = entry["numpy"]
            try:
                SpecifierSet(spec)
            except InvalidSpecifier:
                problems.append(f"torch[{i}].numpy: {spec!r} is not a version requirement like '<2' or '==1.26.4'")
        for j, pkg in enumerate(entry.get("extra_packages", [])):
            try:
                name = canonicalize_name(Requirement(pkg).name)
            except InvalidRequirement:
                name = None
            if name in (None, "torch", "numpy"):
                problems.append(f"torch[{i}].extra_packages[{j}]: {pkg!r} is not an extra requirement (torch and numpy have their own keys)")
    for key, value in [("baseline", data["baseline"])] + [(f"candidates[{i}]", v) for i, v in enumerate(data["candidates"])]:
        if _version_key(value) not in listed:
            problems.append(f"{key}: {value!r} is not one of the torch releases listed")
    seen: dict[str, int] = {}
    for i, value in enumerate(data["candidates"]):
        if value == data["baseline"]:
            problems.append(f"candidates[{i}]: {value!r} is the baseline")
        elif value in seen:
            problems.append(f"candidates[{i}]: duplicate: {value!r} is already candidates[{seen[value]}]")
        seen.setdefault(value, i)
    return problems


def _version_key(version: str) -> Version | str:
    """What makes two entries the same cell: equal versions (2.16.0rc1 is not 2.16.0), or latest."""
    return version if version == LATEST else Version(version)


def _noncanonical_versions(data: dict[str, Any]) -> list[str]:
    """A version is written as packaging normalizes it: "02.13.0" would name a cell, a session
    and a pin that differ from the torch that gets installed (2.13.0), and end as wrong_torch."""
    named = [(f"torch[{i}].version", e["version"]) for i, e in enumerate(data["torch"])]
    named += [("baseline", data["baseline"])] + [(f"candidates[{i}]", v) for i, v in enumerate(data["candidates"])]
    problems = []
    for key, value in named:
        canonical = value if value == LATEST else str(Version(value))
        if canonical != value:
            why = "no leading zeros" if re.sub(r"(?<![0-9])0+(?=[0-9])", "", value) == canonical else "as PEP 440 spells it"
            problems.append(f"{key}: {value!r} is not written canonically ({why}): write {canonical!r}")
    return problems


def _source_problems(path: Path, data: dict[str, Any]) -> list[str]:
    """find_links folders that are not there, and a latest entry that, offline, has nowhere to look."""
    problems = []
    folders = [("find_links", data.get("find_links"))]
    folders += [(f"torch[{i}].find_links", e.get("find_links")) for i, e in enumerate(data["torch"])]
    for key, folder in folders:
        if folder is not None and not _folder(path, folder).is_dir():
            problems.append(f"{key}: {folder!r} is not a folder (looked for {_folder(path, folder)})")
    if data.get("offline"):
        for i, entry in enumerate(data["torch"]):
            if entry["version"] == LATEST and not (entry.get("find_links") or data.get("find_links")):
                problems.append(f"torch[{i}].version: latest with offline: true needs find_links "
                                "(a folder of wheels to find the newest release in)")
    return problems


def _folder(matrix_path: Path, folder: str) -> Path:
    """A find_links folder, relative to the matrix file's own folder."""
    return (matrix_path.parent / folder).resolve()


def _unbounded_time_limits(data: dict[str, Any]) -> list[str]:
    """YAML's .nan and .inf are numbers the schema accepts, but no time limit (and not JSON);
    a limit over a day is a typo (and 1e308, or 330 digits, overflows the timeouts it reaches)."""
    limits = [("time_limit_s", data.get("time_limit_s"))]
    limits += [(f"torch[{i}].time_limit_s", e.get("time_limit_s")) for i, e in enumerate(data["torch"])]
    problems = []
    for key, value in limits:
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{key}: {value!r} is not a finite number of seconds above 0")
        elif isinstance(value, (int, float)) and value > MAX_TIME_LIMIT_S:
            problems.append(f"{key}: {_short_number(value)} is over the limit of {MAX_TIME_LIMIT_S} seconds (a day)")
    return problems


def _short_number(value: int | float) -> str:
    """A number as written, or its size when it is too long to be worth a line."""
    text = repr(value)
    return text if len(text) <= 24 else f"a {len(text)}-digit number ({text[:8]}...)"


def _build(path: Path, data: dict[str, Any]) -> Matrix:
    devices = data.get("devices") or {"cpu": {"runner": "ubuntu-latest"}}
    return Matrix(
        path=path,
        python=data["python"],
        devices=tuple(
            RunnerDevice(name, runner if isinstance(runner := spec["runner"], str) else tuple(runner))
            for name, spec in devices.items()
        ),
        hypothesis_profile=data.get("hypothesis_profile", "ci"),
        time_limit_s=float(data.get("time_limit_s", DEFAULT_TIME_LIMIT_S)),
        index_url=data.get("index_url"),
        find_links=str(_folder(path, data["find_links"])) if data.get("find_links") else None,
        offline=bool(data.get("offline", False)),
        baseline=data["baseline"],
        candidates=tuple(data["candidates"]),
        releases=tuple(
            Release(
                version=e["version"],
                numpy=e.get("numpy"),
                extra_packages=tuple(e.get("extra_packages", ())),
                build=e.get("build"),
                time_limit_s=float(e["time_limit_s"]) if "time_limit_s" in e else None,
                index_url=e.get("index_url"),
                find_links=str(_folder(path, e["find_links"])) if e.get("find_links") else None,
            )
            for e in data["torch"]
        ),
    )


# ---------------------------------------------------------------------------- messages

_JSON_TYPES = {"string": "a string", "number": "a number", "integer": "an integer", "array": "a list",
               "object": "a mapping", "boolean": "true/false", "null": "null"}


# What a value found is called: the words of the type expected, but null said plainly.
_FOUND_KINDS = {**_JSON_TYPES, "null": "nothing (null)"}


def _kind(value: Any) -> str:
    return _FOUND_KINDS.get(json_kind(value) or "") or type(value).__name__


def _where(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _describe(err: jsonschema.ValidationError) -> list[str]:
    where = _where(err.absolute_path)
    value, schema = err.instance, err.schema
    if err.validator == "additionalProperties":
        allowed = ", ".join(schema.get("properties", {}))
        extra = [k for k in value if k not in schema.get("properties", {})]
        return [f"{_where([*err.absolute_path, k])}: unknown key (expected one of: {allowed})" for k in extra]
    if err.validator == "required":
        missing = [k for k in err.validator_value if k not in value]
        return [f"{_where([*err.absolute_path, k])}: missing" for k in missing]
    if err.validator == "type":
        wanted = " or ".join(_JSON_TYPES[t] for t in ([err.validator_value] if isinstance(err.validator_value, str) else err.validator_value))
        hint = ""
        if isinstance(value, (int, float)) and not isinstance(value, bool) and ("pattern" in schema or "format" in schema):
            hint = '; quote it ("2.10.0" unquoted reads as a number)'
        return [f"{where}: expected {wanted}, got {value!r} ({_kind(value)}){hint}"]
    if err.validator == "enum":
        return [f"{where}: {value!r} is not one of {', '.join(map(str, err.validator_value))}"]
    if err.validator in ("minItems", "minProperties"):
        return [f"{where}: must not be empty"]
    if "x-expect" in schema:
        return [f"{where}: {value!r} is not {schema['x-expect']}"]
    return [f"{where}: {err.message}"]
