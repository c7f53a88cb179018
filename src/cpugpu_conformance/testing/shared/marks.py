"""The names a library test and the verdict agree on: the markers a test carries, where its
Record is kept, and the report properties its evidence travels under. Both rooms read them
here, so neither imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the reproducer imports torch, which xdist's controller never needs
    from .reproducer import Record

# The markers the plugin registers (namespaced: a project's own `promise` marker is its own).
PROMISE_MARK = "cpugpu_promise"
DEVICES_MARK = "cpugpu_devices"
COSTLY_MARK = "cpugpu_costly"

MARKERS = {
    PROMISE_MARK: "(*numbers): the CONTRACT.md promises a test checks",
    DEVICES_MARK: "(*names): the only devices a test runs on (devices.py names)",
    COSTLY_MARK: ": a test that takes many times the others (run first, for xdist's balance)",
}

# The test's own Record (reproducer, blame, observation), put on its item by the fixture.
RECORD: pytest.StashKey[Record] = pytest.StashKey()


def register_markers(config: pytest.Config) -> None:
    """The library's markers, for --strict-markers: the plugin's run, or a project that imports the
    library's classes without running them (this project's own tests)."""
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}{text}")


def promises_of(item: pytest.Item) -> set[str]:
    """The promises a test checks: its marker, or, for a project's override of a library test
    (an opt-out: ``@pytest.mark.skip(...) def test_x(self): ...``), the marker of the test it
    overrides, so that its skip is recorded against the promise, with its reason."""
    marked = {str(n) for mark in item.iter_markers(PROMISE_MARK) for n in mark.args}
    if marked:
        return marked
    name = getattr(item, "originalname", item.name)
    for base in getattr(getattr(item, "cls", None), "__mro__", ())[1:]:
        overridden = vars(base).get(name)
        if overridden is not None:
            marks = [mark for mark in getattr(overridden, "pytestmark", []) if mark.name == PROMISE_MARK]
            return {str(n) for mark in marks for n in mark.args}
    return set()


def device_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("device") if callspec else None


# The report property a MutableStateTests test puts its record under (user_properties).
STATE_REPORT_KEY = "mutable_state"
