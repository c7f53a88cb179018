"""The evidence a contract test leaves with its own code: how its body ended.

A promise passes only when every test of it ran its body to the end (judge.py). pytest's
report alone cannot say so: a conftest hook can rewrite it, an override can replace the
body, a marker can skip it. So each of the library's test functions is wrapped by
``stamped``, which notes on the test's Record how the contract's own body ended:

    completed   the body returned
    raised      the body raised (an assertion, an error, hypothesis's falsifying example)
    skipped     the contract skipped it itself: a check this machine cannot make (contract_skip)
    stopped     a skip raised from inside the body by code that is not the contract's (an
                adapter calling pytest.skip): untested, never passed

The wrapped functions are registered by name (``CONTRACT_TESTS``); a collected test counts
as the contract's only when its function *is* the registered one, so an override, whatever
its body, is told apart from the test it replaces.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

# The library's test functions, by name (names are unique across the library's classes).
CONTRACT_TESTS: dict[str, Callable[..., Any]] = {}

COMPLETED, RAISED, SKIPPED, STOPPED = "completed", "raised", "skipped", "stopped"


def stamped(test: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a library test so that its Record (the ``record`` fixture) says how its body ended."""
    name = test.__name__
    if name in CONTRACT_TESTS:
        raise ValueError(f"two contract tests are named {name}: the evidence is matched by name")

    @functools.wraps(test)
    def contract_body(self: Any, *args: Any, **kwargs: Any) -> Any:
        record = kwargs.get("record")
        if record is None:
            raise TypeError(f"{name}: a contract test takes the `record` fixture, which carries its evidence")
        record.stamp, record.stamp_detail = None, None
        try:
            result = test(self, *args, **kwargs)
        except BaseException as exc:
            record.stamp, record.stamp_detail = _ending(record, exc)
            raise
        record.stamp = COMPLETED
        return result

    CONTRACT_TESTS[name] = contract_body
    return contract_body


def _ending(record: Any, exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, pytest.skip.Exception):
        reason = str(getattr(exc, "msg", exc))
        if getattr(record, "contract_skip", None) is not None:
            return SKIPPED, record.contract_skip
        return STOPPED, f"skipped from inside the test by code that is not the contract's: {reason}"
    text = str(exc).strip().splitlines()
    return RAISED, f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def contract_skip(record: Any, reason: str) -> None:
    """Skip a check this machine cannot make, as the contract (not the user) decided: the test
    is untested and named so; alongside checks that ran and held, the promise still passes."""
    record.contract_skip = reason
    record.stamp, record.stamp_detail = SKIPPED, reason
    pytest.skip(reason)


def is_contract_function(name: str, function: Any) -> bool:
    """Whether a collected test's function is the library's own test of that name (not an override)."""
    return name in CONTRACT_TESTS and CONTRACT_TESTS[name] is function
