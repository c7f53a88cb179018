"""A test's key: its name and parameters, in an order that does not depend on pytest's ids,
``test_partial_copy[device=cpu,method=copy_to_gpu]``. What the contract requires (manifest.py)
and what a collected test reports (reports.py) name tests by it, so the two can be matched."""

from __future__ import annotations

import inspect
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


# The parameters the plugin gives the library's tests; the others come from the test's own
# parametrize marks, and so are arguments of its function.
PLUGIN_PARAMS = ("device", "context")


def key_of_item(item: pytest.Item) -> str:
    """The key of a collected test. Parameters another plugin adds (pytest-repeat's
    ``__pytest_repeat_step_number``) are no part of it: every repeat is an attempt at the same
    test, and the judge counts each (judge.py)."""
    callspec = getattr(item, "callspec", None)
    name = getattr(item, "originalname", None) or item.name
    params = dict(callspec.params) if callspec is not None else {}
    function = getattr(item, "function", None)
    try:
        own = set(inspect.signature(function).parameters) if function is not None else set(params)
    except (TypeError, ValueError):
        own = set(params)
    return test_key(name, {k: v for k, v in params.items() if k in own or k in PLUGIN_PARAMS})
