"""The run's exit status, saying what its answer says (results.Answer, the one rule): the
shipped suite's on every run, a project's own run's with a result file or a known-failures file.
"""

from __future__ import annotations

import pytest

from cpugpu_conformance import results
from cpugpu_conformance.exits import SuiteExit


def exit_status(pytest_status: int, answer: results.Answer, checks_ran: bool = False) -> int:
    """The run's exit status, saying what its result says.

    pytest's status stands unless it is 0: a failure (1), an interruption (2), an internal
    (3) or usage (4) error and "no tests collected" (5) are already no pass. A 0 becomes the
    answer's: 0 every promise asked for passed or was recorded; 1 one failed; 5 nothing was
    tested (no check of any promise ran: --collect-only, --setup-only, -k or --deselect of
    every test); 6 some checks ran and held, but some promise went untested or was waived (a
    device asked for is missing, -k or --deselect of some tests, an opt-out). ``checks_ran``:
    a contract test ran its body to the end, even if no promise it checks passed as a whole.
    pytest's 1 becomes 0 when every failure is one the team's known-failures file lists (the
    answer is then clean); a listed promise that passed makes the answer, and so the exit, 1.
    """
    if known_failures_only(pytest_status, answer):
        return int(pytest.ExitCode.OK)
    if pytest_status != pytest.ExitCode.OK or answer.clean:
        return int(pytest_status)
    if answer.kind == "failed":
        return int(pytest.ExitCode.TESTS_FAILED)
    tested = checks_ran or answer.counts.get("passed", 0) + answer.counts.get("recorded", 0)
    return int(SuiteExit.PARTLY_TESTED if tested else SuiteExit.NOTHING_TESTED)


def known_failures_only(pytest_status: int, answer: results.Answer) -> bool:
    """pytest failed the run on tests whose every failure the team lists as known (the answer is
    clean only when each failure is a listed one, and nothing failed outside a promise)."""
    return pytest_status == pytest.ExitCode.TESTS_FAILED and answer.clean and bool(answer.counts.get("known_failure"))


# The exits of a run whose tests all passed that is still no pass.
UNTESTED = (SuiteExit.NOTHING_TESTED, SuiteExit.PARTLY_TESTED)


def with_known_failures(pytest_status: int, answer: results.Answer) -> int:
    """pytest's exit status in a run that leaves it pytest's, with a known-failures file: 0 when
    every failure is a listed one, 1 when a listed promise passed (strict, as xfail_strict)."""
    if known_failures_only(pytest_status, answer):
        return int(pytest.ExitCode.OK)
    if pytest_status == pytest.ExitCode.OK and answer.counts.get("listed_but_passed"):
        return int(pytest.ExitCode.TESTS_FAILED)
    return int(pytest_status)
