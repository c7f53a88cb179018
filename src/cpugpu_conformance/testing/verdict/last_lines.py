"""The run's last lines, after pytest's own summary (its FAILED lines): the contract's answer in a
few lines a person reads, each promise that failed, what went untested and why, what the team's
known-failures file did. The result file lists every one; these show the first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from cpugpu_conformance import results
from cpugpu_conformance.exits import SuiteExit
from cpugpu_conformance.results import known_failures

from .exit_status import UNTESTED
from .plan import DevicePlan


class Answered(Protocol):
    """What the lines read of the run's recorder (recording.CellRecorder), once it has judged."""

    answer: results.Answer | None
    exitstatus: int | None
    known_failures: known_failures.KnownFailures | None
    washed_out: bool
    sets_exit: bool
    flags: Mapping[str, str]
    untested_lines: list[str]

    @property
    def plan(self) -> DevicePlan | None: ...


def say_failed(recorder: Answered, terminalreporter: Any) -> None:
    """Each promise and device that failed, with its one-line reason, as the result file has them."""
    if recorder.answer is None or recorder.answer.kind != "failed":
        return
    rerun = " (an attempt that failed counts, whatever a rerun did)" if recorder.washed_out else ""
    terminalreporter.write_line(f"cpugpu-conformance: the contract does not hold{rerun}:", red=True)
    write_some(terminalreporter, list(recorder.answer.lines), 12)


def say_known_failures(recorder: Answered, terminalreporter: Any) -> None:
    """What the team's known-failures file did: failures it lists, and listings that passed."""
    if recorder.answer is None or recorder.known_failures is None:
        return
    known, stale = recorder.answer.counts.get("known_failure", 0), recorder.answer.counts.get("listed_but_passed", 0)
    if known:
        terminalreporter.write_line(f"{known} promise-device pair(s) failed as {recorder.known_failures.file} lists "
                                    "(known failures): tested, not passed, and no failure of the run", yellow=True)
    if stale:
        terminalreporter.write_line(f"{stale} promise-device pair(s) listed in {recorder.known_failures.file} passed: "
                                    "the run fails until the entries are removed", red=True)
        listed = [line for line in recorder.answer.lines if "listed as a known failure" in line]
        write_some(terminalreporter, listed, 5)


def say_untested(recorder: Answered, terminalreporter: Any) -> None:
    """Why a run whose tests all passed is no pass (exit 5 or 6): what went untested."""
    exitstatus, nothing = recorder.exitstatus, SuiteExit.NOTHING_TESTED
    if recorder.answer is None or recorder.answer.kind != "untested" or exitstatus not in UNTESTED:
        return
    if recorder.plan is not None and recorder.plan.nothing_testable:
        return  # the suite's own line says no requested device is available
    lines = recorder.answer.lines
    untested = f"{len(lines)} of the pairs (promise, device) and classes asked for went untested"
    head = "nothing was tested" if exitstatus == nothing else untested
    if recorder.sets_exit:
        terminalreporter.write_line(f"{head} (exit {exitstatus}): the run is not a pass", red=True)
    else:  # a project's own run: its exit status is pytest's, the contract's answer is this line
        terminalreporter.write_line(f"cpugpu-conformance: {head}: the contract is not shown to hold "
                                    f"(with {recorder.flags['cell_result']} the run would exit {exitstatus})",
                                    yellow=True)
    write_some(terminalreporter, lines, 5)
    if recorder.untested_lines:
        terminalreporter.write_line("the tests that kept them from passing, and why:", red=True)
        write_some(terminalreporter, recorder.untested_lines, 10)


def write_some(terminalreporter: Any, lines: list[str] | tuple[str, ...], shown: int) -> None:
    for line in lines[:shown]:
        terminalreporter.write_line(f"  {line}", red=True)
    if len(lines) > shown:
        terminalreporter.write_line(f"  ... and {len(lines) - shown} more (the result file lists every one)", red=True)
