"""What happened to each mutant: the outcomes, the Mutant and Equivalent records, and how cosmic-ray's results read.

How cosmic-ray's outcomes are read (cosmic-ray itself calls everything but "survived" killed):
  killed       test outcome killed: the suite exited non-zero (a test failed, or it refused the impl)
  timeout      test outcome killed with output "timeout": cosmic-ray stopped the suite at the
               per-mutant timeout. Not a kill: the suite gave no verdict.
  survived     test outcome survived: the suite passed on the mutant
  incompetent  test outcome incompetent, or a worker exception/abnormal exit: not judged
  not run      no result (exec interrupted), or cosmic-ray made no mutation (no-test/skipped)
  equivalent   a mutant the reviewed equivalents list names: skipped without a run (or, with
               --check-equivalents, run and required to survive); not counted in N
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

TIMEOUT_OUTPUT = "timeout"  # what cosmic-ray.testing.run_tests stores as output on a timeout

KILLED, SURVIVED, TIMEOUT, INCOMPETENT, NOT_RUN, EQUIVALENT = (
    "killed", "survived", "timeout", "incompetent", "not run", "equivalent"
)
# Listed as equivalent, yet run under --check-equivalents and not seen to survive.
CONTRADICTED = "listed equivalent, but"


class BadInput(Exception):
    """Exit 2; the message is one line naming the culprit."""


@dataclass(frozen=True)
class Equivalent:
    """A reviewed equivalent mutant: operator glob, changed source line(s) before and after, reason.
    Matched by operator and the lines a mutant changes, never by line number (equivalents.py reads the list)."""

    operator: str
    before: str
    after: str | None  # None: every mutant of this operator on that line
    reason: str
    cpu_only: bool = False  # equivalent only when the suite tests no CUDA device

    def matches(self, mutant: Mutant) -> bool:
        return (
            fnmatch.fnmatchcase(mutant.operator, self.operator)
            and mutant.before == self.before
            and (self.after is None or mutant.after == self.after)
        )

    def describe(self) -> str:
        return f"{self.operator}: {self.before!r} -> {'(any)' if self.after is None else repr(self.after)}"


@dataclass
class Mutant:
    job_id: str
    operator: str
    line: int
    before: str  # the changed source line(s), stripped, joined by newlines
    after: str
    outcome: str = NOT_RUN
    diff: str = ""
    output: str = ""
    equivalent: Equivalent | None = field(default=None, repr=False)


def classify(result: Any) -> str:
    """Our outcome for a cosmic-ray WorkResult (None: no result yet). See the module docstring."""
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    if result is None or result.worker_outcome in (WorkerOutcome.SKIPPED, WorkerOutcome.NO_TEST):
        return NOT_RUN
    if result.worker_outcome != WorkerOutcome.NORMAL:
        return INCOMPETENT
    if result.test_outcome == TestOutcome.SURVIVED:
        return SURVIVED
    if result.test_outcome == TestOutcome.KILLED:
        # cosmic-ray reports a timed-out suite as killed; it gave no verdict, so it is not.
        return TIMEOUT if result.output == TIMEOUT_OUTPUT else KILLED
    return INCOMPETENT


def settle(mutant: Mutant, outcome: str, checked: bool) -> str:
    """A listed equivalent is skipped, or under --check-equivalents must survive; else it contradicts the list."""
    if mutant.equivalent is None:
        return outcome
    if outcome == (SURVIVED if checked else NOT_RUN):
        return EQUIVALENT
    return f"{CONTRADICTED} {outcome}"
