"""The library's tests among what pytest collected: which are the buffer contract's and which
MutableStateTests', which of them run here (and, for the run's last lines, why the others do
not), and the checks a collected class must pass before any test runs (it names the class under
test; it shadows none of the library's names).

Beside plugin.py, above the rooms: the one place besides the plugin that knows the areas'
classes (buffer/base.py, engine/mutable_state.py), and only by module name, so that a run
without a library class imports neither (nor torch) to find that out.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from cpugpu_conformance.promises import APPLIES_TO, not_applicable

from .shared import marks, surface
from .shared.marks import DEVICES_MARK
from .verdict.plan import DevicePlan, flags, marked_devices, wanted
from .verdict.start import RECORDER
from .verdict.stash import PROMISE_FILTER, TESTED_CLASSES, WARNINGS
from .verdict.state_judge import KIND as STATE_KIND

BUFFER_TESTS_MODULE = "cpugpu_conformance.testing.buffer.base"
STATE_TESTS_MODULE = "cpugpu_conformance.testing.engine.mutable_state"


def is_buffer_class(cls: type | None) -> bool:
    """A subclass of the library's BufferTests: its module is imported wherever one is defined, so
    a run without one imports nothing (torch) to say so."""
    base = sys.modules.get(BUFFER_TESTS_MODULE)
    return isinstance(cls, type) and base is not None and issubclass(cls, base.BufferTests)


def is_state_class(cls: type | None) -> bool:
    """A MutableStateTests class: its module is imported wherever one is defined."""
    module = sys.modules.get(STATE_TESTS_MODULE)
    return isinstance(cls, type) and module is not None and issubclass(cls, module.MutableStateTests)


def kind_of(item: pytest.Item) -> tuple[bool, str | None]:
    """Whether a test is one of the library's, and which kind (None: a buffer contract test)."""
    cls = getattr(item, "cls", None)
    if is_buffer_class(cls):
        return True, None
    if is_state_class(cls):
        return True, STATE_KIND
    return False, None


def _marked(item: pytest.Item) -> list[str]:
    return [str(name) for mark in item.iter_markers(DEVICES_MARK) for name in mark.args]


def runs_here(item: pytest.Item, chosen: frozenset[str] | None, plan: DevicePlan) -> bool:
    """Whether the test runs: see plan.wanted (its devices marker, its promises, --cpugpu-promise)."""
    marked = _marked(item)
    try:
        allowed = marked_devices(marked) if marked else None
    except ValueError as exc:
        raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
    return wanted(marks.promises_of(item), marks.device_of(item), chosen, allowed, plan.accelerators)


def why_not_here(item: pytest.Item, config: pytest.Config, plan: DevicePlan) -> str:
    """Why a library test does not run here, in words a newcomer reads in the summary."""
    device = marks.device_of(item)
    marked = _marked(item)
    if marked and device not in marked:
        return f"runs only on {', '.join(marked)} (its {DEVICES_MARK} marker)"
    chosen = config.stash.get(PROMISE_FILTER, None)
    promises = marks.promises_of(item)
    if chosen is not None and not promises & chosen:
        return f"not asked for ({flags(config)['promise']} {','.join(sorted(chosen, key=int))})"
    whys = sorted({why for p in promises for why in [not_applicable(p, str(device), plan.accelerators)] if why})
    elsewhere = sorted({d for p in promises for d in APPLIES_TO.get(p, ()) if d not in plan.tested})
    missing = "; ".join(f"{d} is not tested here ({plan.entry(d).get('reason', 'not requested')})" for d in elsewhere)
    return "; ".join(whys) + (f": {missing}" if missing else "")


def say_collisions(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Once per class: the names it defines that the library uses (surface.py). Every test of it is
    untested (judge.py); the warning says why, and how to mend it, in the run's last lines."""
    from .shared.surface import collisions

    classes = {getattr(item, "cls", None) for item in items if kind_of(item)[0]}
    for cls in sorted((c for c in classes if c is not None), key=lambda c: f"{c.__module__}.{c.__qualname__}"):
        for line in collisions(cls):
            config.stash[WARNINGS].append(f"every test of {cls.__module__}.{cls.__qualname__} is untested: {line}")


def check_classes(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test class names the class under test; a result file is about one class."""
    base = sys.modules[BUFFER_TESTS_MODULE].BufferTests  # imported: the items are of its subclasses
    tested: dict[str, str] = {}
    for item in items:
        cls: Any = getattr(item, "cls", None)
        if cls.buffer_cls is None and cls.make_buffer is base.make_buffer:
            raise pytest.UsageError(f"{cls.__module__}.{cls.__qualname__}: set buffer_cls to the class under test "
                                    "(or override make_buffer)")
        item.stash[surface.TESTED_AS] = spec = surface.tested_spec(cls)
        tested.setdefault(spec, f"{cls.__module__}.{cls.__qualname__}")
    if len(tested) > 1 and config.getoption("cpugpu_cell_result"):
        names = ", ".join(f"{where} tests {spec}" for spec, where in sorted(tested.items()))
        raise pytest.UsageError(f"{flags(config)['cell_result']}: a result file is about one class under test, "
                                f"and this run has {len(tested)} ({names}): select one with -k")
    config.stash[TESTED_CLASSES] = sorted(tested)
    recorder = config.pluginmanager.get_plugin(RECORDER)
    if recorder is not None and not recorder.impl:
        recorder.impl = ", ".join(sorted(tested))
