"""The hypothesis settings each test carries: what the suite needs, and its share of the examples.

Everything else (how many examples, derandomize, the database, verbosity) is the profile in
force when the area modules are imported: the user's own, or one the plugin registers
(cpugpu-default, cpugpu-ci, cpugpu-thorough; the plugin never loads one). A test module that
imports the library after its conftest.py loaded a profile gets that profile, as with any
``@settings``; hypothesis's ``--hypothesis-profile`` is loaded before collection.

PYTEST_DONT_REWRITE (why: cpugpu_conformance.testing's docstring).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, settings

# What every test needs whatever the profile.
NEEDED: dict[str, Any] = dict(
    deadline=None,  # the first CUDA call in a process takes seconds
    report_multiple_bugs=False,  # one failure per test, so the last example run is the reproducer's
    # function_scoped_fixture: the `record` fixture spans every example of a test on purpose; the
    # last example run (the shrunk failure) is the one it reports.
    # differing_executors: a pytest parameter (device, context) runs the method on an instance of
    # its own; each has a database key of its own (hypothesis's pytest plugin adds the node id).
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture,
                           HealthCheck.differing_executors],
)

# The profiles the plugin registers. The default keeps a development run in seconds; `ci` is
# derandomized with no example database, so the same torch gives the same verdict. The axes
# a bug hides behind (creation context, engine-scale size, copy direction) are pytest
# parameters, so every run covers them whatever the example budget; the examples vary the
# rest (dtype, shape, flags, n), where a few dozen per test find what thousands do.
EXAMPLES = 60
_COMMON: dict[str, Any] = dict(
    NEEDED,
    stateful_step_count=30,
    # No explain phase: the reproducer says more, and explaining costs more than shrinking.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
PROFILES: dict[str, dict[str, Any]] = {
    "default": dict(_COMMON, max_examples=EXAMPLES),
    "ci": dict(_COMMON, max_examples=2 * EXAMPLES, derandomize=True, database=None, print_blob=True),
    "thorough": dict(_COMMON, max_examples=30 * EXAMPLES, stateful_step_count=50),
}


def register_profiles(prefix: str) -> None:
    """Register the suite's profiles as <prefix><name> (the plugin: cpugpu-ci; the shipped suite: ci too)."""
    for name, values in PROFILES.items():
        settings.register_profile(prefix + name, **values)


# The floor: a test that ran fewer examples than this share of the smallest contract profile's
# (cpugpu-default's), or without the generate phase, showed nothing of the axes hypothesis draws
# (dtype, shape, flags, n), and is untested whatever its profile is called (judge.py). A third of
# the default's: a team's quick profile of twenty examples is a test; max_examples=1 is not.
FLOOR_SHARE = 3
# A state machine's example is a run of steps: one step is no sequence of calls, so the steps a
# profile gives it have a floor too, the same share of the smallest contract profile's.
STEP_FLOOR = min(p["stateful_step_count"] for p in PROFILES.values()) // FLOOR_SHARE


@dataclass(frozen=True)
class Examples:
    """A test's share of the profile's examples: 1/divisor of them, at least ``least``. Used as a
    test decorator (the settings the test runs with), it also marks the test with its floor."""

    divisor: int = 1
    least: int = 1
    shrink: bool = True  # False: a failure is reported as found (phases)
    stateful: bool = False  # a state machine's share: its steps an example have a floor (STEP_FLOOR)

    def settings(self) -> settings:
        return settings(max_examples=max(self.least, profile_examples() // self.divisor), phases=phases(self.shrink),
                        **NEEDED)

    def floor(self) -> int:
        """The fewest examples this test may run and still count: its share of the floor."""
        return max(self.least, min(p["max_examples"] for p in PROFILES.values()) // FLOOR_SHARE // self.divisor)

    def step_floor(self) -> int | None:
        """The fewest steps an example this test may run and still count (None: no state machine)."""
        return STEP_FLOOR if self.stateful else None

    def __call__(self, test: Any) -> Any:
        decorated = self.settings()(test)
        decorated._cpugpu_floor = self.floor()
        return decorated


def share(divisor: int, floor: int, *, shrink: bool = True, stateful: bool = False) -> Examples:
    """1/divisor of the profile's examples, at least `floor`, with what the suite needs, as a test decorator.

    For tests whose main axis is a pytest parameter (a creation context, an engine-scale
    size): each parameter needs only a few examples. ``shrink=False``: see phases.
    ``stateful``: a state machine's share, whose steps an example have a floor too.
    """
    return Examples(divisor, floor, shrink, stateful)


def phases(shrink: bool = True) -> tuple[Phase, ...]:
    """The profile's phases without explain, whatever the profile (a team's own, or hypothesis's
    default, has it): explaining a failure re-runs its example dozens of times (36 runs of a
    million-element example, 6.2 s of 7.8 s for one failing engine-scale test), and the reproducer says more.
    ``shrink=False`` also leaves out shrink, for tests whose failure the pytest parameters already pin
    (an engine-scale size), where each shrink step rebuilds megabytes to simplify a few draws: the
    failure is reported as found, and the generate phase tries the simplest example first."""
    current = settings.default
    assert current is not None, "hypothesis always has a profile loaded"
    return tuple(p for p in current.phases if p is not Phase.explain and (shrink or p is not Phase.shrink))


def profile_examples() -> int:
    """max_examples of the profile in force."""
    current = settings.default
    assert current is not None, "hypothesis always has a profile loaded"
    return current.max_examples


def whole() -> Examples:
    """The profile's examples, with what the suite needs, as a test decorator."""
    return Examples()
