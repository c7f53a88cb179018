"""What the contract requires a run to have run: every test of each promise on each device.

A promise passes on a device only when every one of its tests that applies there (each
method, each parametrization) ran its body to the end (judge.py). Which tests those are
comes from the library's own classes (buffer/contract.py's AREAS, which the plugin hands in: the
verdict imports no area), never from what a run collected:
a class that subclasses one area only, an override, ``-k``, ``--deselect`` or a conftest
hook cannot shrink the list. Each test is named by its key (keys.py), as a collected one is,
so the two can be matched.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Iterable
from typing import Any

from cpugpu_conformance.promises import not_applicable

from ..shared.marks import DEVICES_MARK, PROMISE_MARK
from .keys import test_key
from .plan import DevicePlan, marked_devices


def _marks(function: Any, name: str) -> list[Any]:
    return [mark for mark in getattr(function, "pytestmark", []) if mark.name == name]


def _parametrizations(function: Any) -> list[list[dict[str, Any]]]:
    """Each @pytest.mark.parametrize of a test, as the list of argument dicts it makes."""
    out = []
    for mark in _marks(function, "parametrize"):
        argnames, argvalues = mark.args[0], mark.args[1]
        names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
        rows = []
        for value in argvalues:
            values = getattr(value, "values", None)  # a pytest.param(...)
            if values is None:
                values = (value,) if len(names) == 1 else tuple(value)
            rows.append(dict(zip(names, values)))
        out.append(rows)
    return out


def _uses_context(cls: type, function: Any) -> bool:
    """Whether the plugin parametrizes the test by creation context: it asks for `context`, or for
    a fixture of its class that does (side_effects.py's changing_context)."""
    names = list(inspect.signature(function).parameters)
    if "context" in names:
        return True
    for name in names:
        fixture = getattr(cls, name, None)
        if fixture is None or not hasattr(fixture, "_fixture_function_marker") and \
                not hasattr(fixture, "_pytestfixturefunction"):
            continue
        try:
            if "context" in inspect.signature(fixture).parameters:
                return True
        except (TypeError, ValueError):
            continue
    return False


def contract_tests(areas: Iterable[type]) -> list[tuple[type, str, Any]]:
    """(area class, test name, function) for every test the library's classes define."""
    return [(cls, name, fn) for cls in areas for name, fn in vars(cls).items()
            if name.startswith("test") and callable(fn)]


def required(plan: DevicePlan, chosen: frozenset[str] | None, areas: Iterable[type]) -> dict[str, dict[str, list[str]]]:
    """promise -> device -> the keys of every contract test of it that must run there: the devices
    this run makes tests for (tested, or asked for and missing), the promises it asked for."""
    from ..shared.contexts import contexts_for

    out: dict[str, dict[str, list[str]]] = {}
    for cls, name, function in contract_tests(areas):
        promises = sorted({str(n) for mark in _marks(function, PROMISE_MARK) for n in mark.args}, key=int)
        allowed_names = [str(n) for mark in _marks(function, DEVICES_MARK) for n in mark.args]
        allowed = marked_devices(allowed_names) if allowed_names else None
        per_context = _uses_context(cls, function)
        for device in plan.parametrized:
            if allowed is not None and device not in allowed:
                continue
            axes = _parametrizations(function)
            if per_context:
                axes.append([{"context": c} for c in contexts_for(device)])
            for combo in itertools.product(*axes):
                params: dict[str, Any] = {"device": device}
                for part in combo:
                    params.update(part)
                key = test_key(name, params)
                for promise in promises:
                    if chosen is not None and promise not in chosen:
                        continue
                    if not_applicable(promise, device, plan.accelerators) is not None:
                        continue
                    out.setdefault(promise, {}).setdefault(device, []).append(key)
    return out


def area_of(areas: Iterable[type]) -> dict[str, str]:
    """test name -> the area class that defines it: what a class must include to run it."""
    return {name: cls.__name__ for cls, name, _ in contract_tests(areas)}


def state_required(plan: DevicePlan, classes: Iterable[str]) -> dict[str, list[str]]:
    """MutableStateTests class -> the keys of the tests it must run: every creation context of
    every device the run makes tests for (mutable_state.generate_tests)."""
    from ..shared.contexts import contexts_for

    keys = [test_key("test_mutable_state", {"device": d, "context": c}) for d in plan.parametrized
            for c in contexts_for(d)]
    return {cls: list(keys) for cls in classes}
