"""A test's key: its name and parameters, in an order that does not depend on pytest's ids,
``test_partial_copy[device=cpu,method=copy_to_gpu]``. What the contract requires (manifest.py)
and what a collected test reports (reports.py) name tests by it, so the two can be matched."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest


def canonical(value: Any) -> str:
    """A parameter's value as a key names it: a context by its name, a size as 4x3."""
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return name
    if isinstance(value, (tuple, list)):
        return "x".join(str(v) for v in value) or "()"
    return str(value)


def test_key(name: str, params: Mapping[str, Any]) -> str:
    inside = ",".join(f"{arg}={canonical(params[arg])}" for arg in sorted(params))
    return f"{name}[{inside}]" if inside else name


def key_of_item(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    name = getattr(item, "originalname", None) or item.name
    return test_key(name, callspec.params if callspec is not None else {})
