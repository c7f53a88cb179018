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
    collided    not run: the test's class defines a name the library uses (surface.py)
    short       run under settings below the contract's floor (fewer examples, no generate
                phase: budget.py), so whatever it shows is no test: untested

The wrapped functions are registered by name (``CONTRACT_TESTS``); a collected test counts
as the contract's only when its function *is* the registered one, so an override, whatever
its body, is told apart from the test it replaces.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from . import surface

# The library's test functions, by name (names are unique across the library's classes).
CONTRACT_TESTS: dict[str, Callable[..., Any]] = {}

COMPLETED, RAISED, SKIPPED, STOPPED = "completed", "raised", "skipped", "stopped"
# Not run, or run to its end under settings that show nothing: untested, never passed.
COLLIDED, SHORT = "collided", "short"


def stamped(test: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a library test so that its Record (the ``record`` fixture) says how its body ended.

    The evidence accumulates over every call of the body on one record (a plugin that calls a
    test twice): a body that raised once stays raised, whatever a later call did. What hypothesis
    ran (the settings, the examples each phase executed, why it stopped) is noted beside it, so
    the judge can tell a test from a profile that ran next to nothing (judge.py)."""
    name = test.__name__
    if name in CONTRACT_TESTS:
        raise ValueError(f"two contract tests are named {name}: the evidence is matched by name")

    @functools.wraps(test)
    def contract_body(self: Any, *args: Any, **kwargs: Any) -> Any:
        record = kwargs.get("record")
        if record is None:
            raise TypeError(f"{name}: a contract test takes the `record` fixture, which carries its evidence")
        record.attempts = getattr(record, "attempts", 0) + 1
        ran = examples_of(record)
        if record.stamp != RAISED:
            record.stamp, record.stamp_detail = None, None
        collided = [*surface.collisions(type(self)), *surface.shadowed_on_instance(self)]  # type: ignore[arg-type]
        if record.tested_as is not None and surface.tested_spec(self) != record.tested_as:
            collided.append(f"the class under test is {surface.tested_spec(self)} here, but the run was collected "
                            f"against {record.tested_as}, what its result names: set buffer_cls and make_buffer in "
                            "the class body")
        if collided:  # the class changed what the library calls: nothing this body shows is the contract's
            record.stamp, record.stamp_detail = COLLIDED, "; ".join(collided)
            pytest.skip(f"not run: {record.stamp_detail}")
        planned = getattr(test, "_cpugpu_examples", None)  # a state machine's share, run by the body itself
        ran_under = getattr(test, "_hypothesis_internal_use_settings", None) or (planned and planned.settings())
        if ran_under is not None:
            ran.settings_from(ran_under, planned.floor() if planned else getattr(test, "_cpugpu_floor", 1),
                              planned.step_floor() if planned else None)
            short = ran.below_floor(before_the_run=True)
            if short:
                record.stamp, record.stamp_detail = SHORT, short
                pytest.skip(f"not run: {short}")
        try:
            with _statistics_into(record):
                result = test(self, *args, **kwargs)
        except BaseException as exc:
            if record.stamp != RAISED:
                record.stamp, record.stamp_detail = _ending(record, exc)
            raise
        if record.stamp != RAISED:
            record.stamp = COMPLETED
            short = ran.below_floor()
            if short:
                record.stamp, record.stamp_detail = SHORT, short
        return result

    CONTRACT_TESTS[name] = contract_body
    return contract_body


@contextlib.contextmanager
def _statistics_into(record: Any) -> Iterator[None]:
    """Hypothesis's run statistics of the body (how many examples each phase ran, why it stopped),
    onto the record; a statistics collector already set (--hypothesis-show-statistics) still gets them."""
    try:
        from hypothesis.statistics import collector
    except ImportError:  # pragma: no cover - hypothesis is a dependency; a run without it ran no examples
        yield
        return
    previous = collector.value

    def note(stats: Any) -> None:
        examples_of(record).statistics(stats)
        if previous is not None:
            previous(stats)

    with collector.with_value(note):  # type: ignore[arg-type]
        yield


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


# Hypothesis's "stopped-because" when every distinct example was run: fewer than the floor is then
# all there is to run, and no shortfall.
_EXHAUSTED = "nothing left to do"


@dataclass
class ExamplesRan:
    """What hypothesis ran a test's body with: its settings, its floor (budget.py), and, from the
    run's statistics, how many examples the explicit, reuse and generate phases executed."""

    max_examples: int | None = None
    phases: list[str] = field(default_factory=list)
    derandomize: bool | None = None
    floor: int = 1
    examples: int = 0
    generated: bool = False  # whether the generate phase ran at all
    stopped: list[str] = field(default_factory=list)  # why each hypothesis run stopped
    runs: int = 0  # hypothesis runs (one per body call; a state machine is one too)
    steps: int | None = None  # a state machine's: the profile's stateful_step_count
    step_floor: int | None = None

    def settings_from(self, ran_under: Any, floor: int, step_floor: int | None = None) -> None:
        self.max_examples = int(ran_under.max_examples)
        self.phases = [phase.name for phase in ran_under.phases]
        self.derandomize = bool(ran_under.derandomize)
        self.floor = floor
        if step_floor is not None:
            self.steps, self.step_floor = int(ran_under.stateful_step_count), step_floor

    def statistics(self, stats: dict[str, Any]) -> None:
        self.runs += 1
        for phase in ("explicit", "reuse", "generate"):
            cases = (stats.get(f"{phase}-phase") or {}).get("test-cases") or []
            self.examples += sum(1 for case in cases if case.get("status") in ("valid", "interesting"))
            self.generated = self.generated or (phase == "generate" and f"{phase}-phase" in stats)
        if stats.get("stopped-because"):
            self.stopped.append(str(stats["stopped-because"]))

    def below_floor(self, before_the_run: bool = False) -> str | None:
        """Why what ran is no test (None: it is one)."""
        if self.max_examples is not None and self.max_examples < self.floor:
            return (f"hypothesis was told to run at most {self.max_examples} example(s), below this test's floor of "
                    f"{self.floor} (a profile with max_examples of at least {self.floor * 3} is a test: budget.py)")
        if self.steps is not None and self.step_floor is not None and self.steps < self.step_floor:
            return (f"hypothesis was told to run at most {self.steps} step(s) a state machine example, below this "
                    f"test's floor of {self.step_floor} (a profile with stateful_step_count of at least "
                    f"{self.step_floor * 3} is a test: budget.py)")
        if self.max_examples is not None and "generate" not in self.phases:
            return f"hypothesis was told to run without its generate phase (phases: {', '.join(self.phases) or 'none'})"
        if before_the_run or not self.runs:
            return None
        if not self.generated:
            return "hypothesis ran no generate phase"
        exhausted = all(why == _EXHAUSTED for why in self.stopped)
        if self.examples < self.floor * self.runs and not exhausted:
            return (f"hypothesis ran {self.examples} example(s), below this test's floor of {self.floor} "
                    f"(it stopped because: {'; '.join(sorted(set(self.stopped)))})")
        return None

    def as_data(self) -> dict[str, Any]:
        out: dict[str, Any] = {"examples": self.examples, "floor": self.floor}
        if self.max_examples is not None:
            out.update(max_examples=self.max_examples, phases=self.phases, derandomize=self.derandomize)
        if self.steps is not None:
            out.update(stateful_step_count=self.steps, step_floor=self.step_floor)
        return out


def examples_of(record: Any) -> ExamplesRan:
    """The record's ExamplesRan, made on first use (a test that runs no hypothesis has none)."""
    ran = getattr(record, "examples_ran", None)
    if ran is None:
        ran = record.examples_ran = ExamplesRan()
    return ran
