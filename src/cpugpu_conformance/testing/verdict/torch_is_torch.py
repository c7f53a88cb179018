"""torch is torch's own wherever the library's tests run (docs/library.md, "torch is torch").

Checked before the tests (the class's module and every conftest imported by then), after each
library test's call (a fixture that patches torch and undoes it at its teardown, pytest's
monkeypatch among them, has left no trace by the end of the run), and at the end. A replacement
makes the run an error that names each function and what stands in its place.

PYTEST_DONT_REWRITE (why: cpugpu_conformance.testing's docstring).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .start import RECORDER, record_usage_error
from .stash import REFUSED, TORCH_REPLACED, WORKER_FACTS

# What TORCH_NAMES named once the check before the tests passed (impl.watch_torch).
_WATCH = pytest.StashKey[Callable[[], list[str]]]()


def _line(when: str, replaced: list[str]) -> str:
    return (f"torch is not torch's own {when}: {'; '.join(replaced)}: the contract rests on these, and a run "
            "against a replacement shows nothing (find what patches them: the class under test's module, a "
            "conftest, a plugin)")


def replaced_line(when: str) -> str | None:
    """The one line that says torch's functions are not torch's own (impl.not_torchs_own), or None."""
    from cpugpu_conformance.impl import not_torchs_own

    replaced = not_torchs_own()
    return _line(when, replaced) if replaced else None


def note(config: pytest.Config, why: str) -> None:
    """The run is an error (recording.py reads the stash); a worker hands the line to the controller."""
    config.stash[TORCH_REPLACED] = why
    if hasattr(config, "workeroutput"):
        config.workeroutput.setdefault(WORKER_FACTS, {"plan": None, "warnings": [], "refused": None})
        config.workeroutput[WORKER_FACTS]["torch_replaced"] = why


def check_before_the_tests(config: pytest.Config) -> None:
    """The run is an error, naming each function, when the tests would run against a patched torch
    (the class's module was imported by now: the library's classes are collected). Then watch."""
    why = replaced_line("before the tests")
    if why is None:
        from cpugpu_conformance.impl import watch_torch

        config.stash[_WATCH] = watch_torch()
        return
    config.stash[TORCH_REPLACED] = why
    if hasattr(config, "workeroutput"):  # an xdist worker runs nothing and hands the refusal on (one line)
        config.stash[REFUSED] = why
        config.workeroutput.setdefault(WORKER_FACTS, {"plan": None, "warnings": [], "refused": None})
        config.workeroutput[WORKER_FACTS]["refused"] = why
        return
    exc = pytest.UsageError(why)
    record_usage_error(config.pluginmanager.get_plugin(RECORDER), exc)
    raise exc


def check_after_the_call(item: pytest.Item) -> None:
    """After a library test's call, before its fixtures are torn down: what it ran against."""
    watch = item.config.stash.get(_WATCH, None)
    if watch is None or TORCH_REPLACED in item.config.stash:
        return
    replaced = watch()
    if replaced:
        note(item.config, _line(f"while {item.nodeid} ran", replaced))
