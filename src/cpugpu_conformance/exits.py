"""Exit codes, in one place: the commands' (ExitCode) and the suite's (SuiteExit).

Stdlib only, at the bottom of the package: `run`, the runner and the library all read them,
on a machine where only torch, numpy, hypothesis and pytest are installed.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """The tooling's commands (matrix, summary, gate, report, cells, bisect, ...)."""

    OK = 0
    FAILED = 1  # a regression (gate), a cell that is not clean (summary, matrix)
    USAGE = 2  # bad input, a broken matrix, a missing extra, nothing to compare: one line names the culprit


class SuiteExit(enum.IntEnum):
    """The suite's (`pytest conformance`, `cpugpu-conformance run`, a library run with a result
    file): pytest's own codes, and 6, which pytest does not have."""

    OK = 0  # every promise asked for passed (or was recorded)
    FAILED = 1  # a promise failed
    INTERRUPTED = 2  # the run did not go through
    INTERNAL_ERROR = 3
    USAGE_ERROR = 4  # bad input: refused before testing
    NOTHING_TESTED = 5  # no check of any promise ran
    PARTLY_TESTED = 6  # some promises asked for went untested, and none failed


# The suite's runs that went through: their result file holds the answer (a cuda cell on a
# machine without a GPU: untested). Anything else means the suite did not finish its job.
FINISHED = (SuiteExit.OK, SuiteExit.FAILED, SuiteExit.NOTHING_TESTED, SuiteExit.PARTLY_TESTED)
# How a cell's log and result name a suite exit other than a verdict.
MEANINGS = {
    SuiteExit.INTERRUPTED: "interrupted",
    SuiteExit.INTERNAL_ERROR: "internal error",
    SuiteExit.USAGE_ERROR: "usage error",
    SuiteExit.NOTHING_TESTED: "nothing tested",
    SuiteExit.PARTLY_TESTED: "some promises untested",
}
