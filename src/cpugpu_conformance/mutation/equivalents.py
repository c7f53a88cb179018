"""The reviewed equivalent mutants: reading a list (equivalents.yaml, beside this module, for the
reference), the source lines a mutation changed, and attaching each mutant its entry (score.Equivalent)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .score import BadInput, Equivalent, Mutant

REFERENCE_FILE = Path(__file__).resolve().parents[1] / "reference.py"
DEFAULT_EQUIVALENTS = Path(__file__).resolve().parent / "equivalents.yaml"


def _normalize(text: str) -> str:
    return "\n".join(line.strip() for line in text.strip().splitlines())


def changed_lines(original: str, mutated: str) -> tuple[str, str]:
    """The lines a mutation changed, stripped: what identifies it across unrelated edits."""
    a, b = original.splitlines(), mutated.splitlines()
    before: list[str] = []
    after: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            before += a[i1:i2]
            after += b[j1:j2]
    return _normalize("\n".join(before)), _normalize("\n".join(after))


def load_equivalents(path: Path) -> list[Equivalent]:
    """The reviewed equivalents in a YAML (or JSON) file: ``equivalents: [{operator, before, after?, reason}]``."""
    try:
        import yaml
    except ImportError:
        raise BadInput("pyyaml is not installed: pip install 'cpugpu-conformance[test]'") from None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"--equivalents {str(path)!r}: no such file") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadInput(f"--equivalents {str(path)!r}: unreadable: {reason}") from None
    if not isinstance(data, dict) or not isinstance(data.get("equivalents"), list):
        raise BadInput(f"--equivalents {str(path)!r}: expected a mapping with an 'equivalents' list")
    return [_entry(path, number, raw) for number, raw in enumerate(data["equivalents"], 1)]


def _entry(path: Path, number: int, raw: Any) -> Equivalent:
    where = f"--equivalents {str(path)!r}: entry {number}"
    if not isinstance(raw, dict):
        raise BadInput(f"{where}: expected a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - {"operator", "before", "after", "reason", "cpu_only"})
    if unknown:
        raise BadInput(f"{where}: unknown key {unknown[0]!r}")
    for key in ("operator", "before", "reason"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise BadInput(f"{where}: {key!r} must be a non-empty string")
    after = raw.get("after")
    if after is not None and not isinstance(after, str):
        raise BadInput(f"{where}: 'after' must be a string")
    if not isinstance(raw.get("cpu_only", False), bool):
        raise BadInput(f"{where}: 'cpu_only' must be true or false")
    return Equivalent(
        operator=raw["operator"].strip(),
        before=_normalize(raw["before"]),
        after=None if after is None else _normalize(after),
        reason=" ".join(raw["reason"].split()),
        cpu_only=raw.get("cpu_only", False),
    )


def default_equivalents(target: Path) -> list[Equivalent]:
    """The committed list applies to the reference only, wherever it lies: to reference.py and to a
    byte-identical copy of it (the review was of that content, not of a path); other targets
    start with none."""
    return load_equivalents(DEFAULT_EQUIVALENTS) if is_the_reference(target) else []


def is_the_reference(target: Path) -> bool:
    if target == REFERENCE_FILE:
        return True
    try:
        return target.stat().st_size == REFERENCE_FILE.stat().st_size and target.read_bytes() == REFERENCE_FILE.read_bytes()
    except OSError:
        return False


def suite_tests_cuda(extra: Sequence[str]) -> bool:
    """Whether the suite will test a CUDA device: it tests every device this machine has unless told --device cpu."""
    if "--device=cpu" in extra or any(a == "--device" and b == "cpu" for a, b in zip(extra, extra[1:])):
        return False
    import torch

    return torch.cuda.is_available()


def applicable(equivalents: list[Equivalent], extra: Sequence[str]) -> list[Equivalent]:
    if any(e.cpu_only for e in equivalents) and suite_tests_cuda(extra):
        return [e for e in equivalents if not e.cpu_only]
    return equivalents


def match_equivalents(mutants: Sequence[Mutant], equivalents: Sequence[Equivalent]) -> list[Equivalent]:
    """Attach each mutant's entry; return the stale entries (those that match no mutant)."""
    used: set[int] = set()
    for mutant in mutants:
        for index, entry in enumerate(equivalents):
            if entry.matches(mutant):
                mutant.equivalent = entry
                used.add(index)
                break
    return [entry for index, entry in enumerate(equivalents) if index not in used]
