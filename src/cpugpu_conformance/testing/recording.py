"""Turn test reports into the cell result file: one verdict per promise and device.

`annotate` runs where the test ran (an xdist worker, or the only process) and puts what
the controller needs on the report; `CellRecorder` runs in the controller only, in every
run: its answer (results.CellResult.answer, the one rule) decides the exit status, with or
without a result file (`exit_status`). With --cell-result it holds the result path for the
whole run, with an ``interrupted`` placeholder in it until the run's own answer replaces
it, so a run that dies never leaves an older pass behind.

PYTEST_DONT_REWRITE (pytest loads the package as a plugin): the asserts say what broke themselves,
and the functions go into reproducers as they are written.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import signal
import sys
import threading
import time
from typing import Any

import pytest

from cpugpu_conformance import devices, results
from cpugpu_conformance.exits import SuiteExit
from cpugpu_conformance.promises import DEVICES, PROMISES, not_applicable
from cpugpu_conformance.results import known_failures

from . import threads
from .judge import Inventory, Judgement, TestEvidence, untested_lines
from .plan import DevicePlan, flags, in_contract_order
from .reports import CRASH_PHASE, FACTS, Crash, message, skip_reason, worker_exit, worker_id
from .state_judge import REPORT_KEY as STATE_REPORT_KEY
from .state_judge import section as state_section

# What pytest_configure works out once, for the hooks and fixtures.
IMPL = pytest.StashKey[Any]()  # the shipped suite's loaded --impl (impl.Impl)
IMPL_SPEC = pytest.StashKey[str]()  # how the result file names the class under test
PLAN: pytest.StashKey[DevicePlan | None] = pytest.StashKey()  # None: xdist's controller, until a worker reports
PROMISE_FILTER = pytest.StashKey[Any]()
WARNINGS = pytest.StashKey[list[str]]()
# Set by a run that wants the suite's exit status whatever it writes (the shipped suite).
SUITE_EXIT = pytest.StashKey[bool]()
# Set by the shipped suite: loads the class under test, after the torch observations are taken
# (a class may patch torch when imported). Raises pytest.UsageError for bad input.
LOAD_CLASS = pytest.StashKey[Any]()
# The classes the collected tests are against: the result file names them.
TESTED_CLASSES = pytest.StashKey[list]()
# The one-line refusal of an xdist worker that could not load the class under test.
REFUSED = pytest.StashKey[str]()
# What the run collected of the library's tests and what the contract requires of it (judge.py's
# Inventory as data, manifest.required, manifest.area_of): worked out where tests are collected,
# carried from an xdist worker to the controller.
RUN_FACTS = pytest.StashKey[dict]()
# Set by a matrix cell's runner (runner/cell.py), which writes the suite's file to a staging path and
# moves it into place: the final path, for the line that says where the result is.
SHOWN_AS = "CPUGPU_CONFORMANCE_RESULT_SHOWN_AS"
# The line that says a test left torch patched (plugin.py checks torch again where the tests ran).
TORCH_REPLACED = pytest.StashKey[str]()




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


def environment() -> dict[str, Any]:
    import hypothesis
    import numpy
    import torch

    return {
        "torch": torch.__version__,
        "torch_git_version": getattr(torch.version, "git_version", None),
        **devices.environment(),
        "numpy": numpy.__version__,
        "hypothesis": hypothesis.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        **threads.environment(),  # the intra-op thread counts the tests and the copies ran with
    }


def _observations() -> dict[str, Any]:
    try:
        from cpugpu_conformance import observe
    except ImportError:
        return {}
    return observe.observe_all()


def _profile_in_force() -> str:
    from hypothesis import settings  # only where a result is written: an inert run imports no hypothesis

    return getattr(settings, "_current_profile", None) or "default"


def mark_refused(path: str) -> None:
    """Mark a result path `error` before pytest has accepted the command line (plugin.py): if it
    refuses it (an unknown option), the file says so, never an earlier run's pass. Best effort and
    careful: a path another run holds, or one no writer may replace, is left for the run's own
    start to refuse in one line."""
    try:
        with results.exclusive(path):
            results.CellResult.new(
                "this run", "error", pytest_exitstatus=int(pytest.ExitCode.USAGE_ERROR),
                detail="refused before any test ran: pytest did not accept the command line or its configuration "
                       "(its own one-line error says why)",
            ).write(path)
    except (results.ResultPathBusy, results.NotRegularFile, results.ResultFileError, OSError):
        pass


# The exits of a run whose tests all passed that is still no pass.
_UNTESTED = (SuiteExit.NOTHING_TESTED, SuiteExit.PARTLY_TESTED)


class CellRecorder:
    """Collects every test outcome; at the end of the session sets the exit status from the
    answer and, with a ``path``, writes the result file."""

    def __init__(self, config: pytest.Config, path: str | None, name: str, chosen: frozenset[str] | None,
                 impl: str, profile: str | None, *, sets_exit: bool = True) -> None:
        self.config = config
        # Whether the answer sets the run's exit status: in the shipped suite always, in a
        # project's own run only with a result file (its exit code then says what the file says).
        self.sets_exit = sets_exit
        self.flags = flags(config)
        self.path = path
        self.name = name
        self.chosen = chosen
        self.impl = impl
        self.profile = profile  # None: the profile in force, looked up when the file is written
        self.started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.t0 = time.monotonic()
        self.evidence: dict[str, TestEvidence] = {}  # nodeid -> what its reports said (judge.py)
        self.untested_lines: list[str] = []
        self.counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
        self.unattributed: list[dict[str, Any]] = []
        self.observations: dict[str, Any] = {}
        self.deaths: dict[str, str] = {}  # xdist worker id -> how its process ended
        self.crashes: list[Crash] = []
        self.interruption: str | None = None
        self.sigint_seen = False  # see watch_sigint
        self.written: str | None = None
        self.status: str | None = None
        self.answer: results.Answer | None = None
        self.exitstatus: int | None = None  # as exit_status decided it
        self.known_failures: known_failures.KnownFailures | None = None  # the team's file (plugin.py loads it)
        self.washed_out = False  # pytest said 0 for a run in which a contract test failed (a rerun passed)

    @property
    def plan(self) -> DevicePlan | None:
        """The device plan: this process's, or (xdist's controller without a result file) the
        first worker's, once it reported; None while nobody has."""
        return self.config.stash.get(PLAN, None)

    # --- the path, held for the whole run

    def hold(self) -> None:
        """Take the result path (a second run on it refuses) and mark it in progress."""
        assert self.path is not None, "hold() is for a run with a result path"
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(results.exclusive(self.path))
        except (results.ResultPathBusy, results.NotRegularFile) as exc:
            raise pytest.UsageError(f"{self.flags['cell_result']} {exc}") from None
        except OSError as exc:
            raise self._cannot_write(exc) from None
        self.config.add_cleanup(stack.close)
        try:
            results.placeholder(self.name, **self._run_fields()).write(self.path)
        except OSError as exc:
            raise self._cannot_write(exc) from None

    def _cannot_write(self, exc: OSError) -> pytest.UsageError:
        return pytest.UsageError(f"{self.flags['cell_result']} {self.path}: cannot write: {exc.strerror or exc}")

    def observe(self) -> None:
        """The torch behaviour the contract rests on, taken before the class under test is imported."""
        self.observations = _observations()

    def write_usage_error(self, message: str) -> None:
        if self.path is None:
            return
        self._write(results.CellResult.new(self.name, "error", detail=f"usage error (pytest exit status 4): {message}",
                                           pytest_exitstatus=int(pytest.ExitCode.USAGE_ERROR), **self._run_fields()))

    @property
    def planned(self) -> DevicePlan:
        """The device plan, once there is one (every hook that reads it runs after pytest_configure)."""
        plan = self.plan
        assert plan is not None, "no device plan yet"
        return plan

    def _requested(self) -> dict[str, Any]:
        return {"device": self.planned.option or "default", "promises": in_contract_order(self.chosen)}

    def _run_fields(self) -> dict[str, Any]:
        return {
            "requested": self._requested(),
            "impl": self.impl,
            "hypothesis_profile": self.profile or _profile_in_force(),
            "argv": sys.argv[1:],
            "environment": environment(),
        }

    # --- collecting reports

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == CRASH_PHASE:
            self._crashed_test(report)
            return
        if report.when == "call" or (report.when == "setup" and not report.passed) \
                or (report.when == "teardown" and report.failed):
            failed = "failed" if report.when == "call" else "errors"  # a setup or teardown error is no failed check
            self.counts[{"passed": "passed", "skipped": "skipped"}.get(report.outcome, failed)] += 1
        facts = dict(report.user_properties).get(FACTS)
        if not isinstance(facts, dict):  # a project's own test: only its failure matters here
            if report.failed:
                self.unattributed.append({"test": report.nodeid, "message": message(report)})
            return
        evidence = self.evidence.get(report.nodeid)
        if evidence is None:
            evidence = self.evidence[report.nodeid] = TestEvidence(facts)
        state = dict(report.user_properties).get(STATE_REPORT_KEY)
        evidence.add(report.when, report.outcome, facts, message(report) if report.failed else None,
                     skip_reason(report) if report.skipped else None, getattr(report, "wasxfail", None),
                     state if isinstance(state, dict) else None)

    def _crashed_test(self, report: pytest.TestReport) -> None:
        worker = worker_id(report)
        self.crashes.append(Crash(worker, self.deaths.pop(worker, "crashed"), report.nodeid))
        self.counts["crashed"] = self.counts.get("crashed", 0) + 1
        self.unattributed.append({"test": report.nodeid, "message": str(report.longrepr)})

    # --- xdist: a worker that died

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        if error and error != "keyboard-interrupt":
            self.deaths[node.gateway.id] = worker_exit(node)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        # Name the signal in the terminal's report too, not only in the result file.
        how = self.deaths.get(worker_id(report))
        if how and isinstance(report.longrepr, str):
            report.longrepr += f": the worker {how}"

    def watch_sigint(self) -> None:
        """Note a Ctrl-C, then let it do what it did. A KeyboardInterrupt raised where pytest cannot
        see it (in a gc callback, caught as an unraisable exception) becomes a test's *failure*, and
        the run would go on to a false verdict: a run that got SIGINT is interrupted, always.
        The previous handler is put back when pytest unconfigures."""
        previous = signal.getsignal(signal.SIGINT)
        if not callable(previous) or threading.current_thread() is not threading.main_thread():
            return  # SIGINT ignored (a background job) or left to the default: no KeyboardInterrupt to hide

        def noted(signum: int, frame: Any) -> None:
            self.sigint_seen = True
            previous(signum, frame)

        def restore() -> None:
            signal.signal(signal.SIGINT, previous)

        signal.signal(signal.SIGINT, noted)
        self.config.add_cleanup(restore)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self.interruption = f"{excinfo.typename}: {excinfo.value}".rstrip(": ")

    # --- the answer

    def _judgement(self) -> Judgement:
        """Every test's verdict against what the contract requires of this run (manifest.py)."""
        facts = self._run_facts()
        inventory = Inventory.from_data(facts.get("inventory") or {})
        return Judgement(self.evidence, inventory, facts.get("required") or {}, facts.get("area_of") or {})

    def _run_facts(self) -> dict[str, Any]:
        return self.config.stash.get(RUN_FACTS, None) or {}

    def _state_section(self) -> dict[str, Any]:
        """The verdicts of the run's MutableStateTests classes (state_judge.py); empty when it has none."""
        facts = self._run_facts()
        required = facts.get("state_required") or {}
        if not required:
            return {}
        return state_section(self.evidence, Inventory.from_data(facts.get("inventory") or {}), required)

    def _entry(self, judged: Judgement, promise: str, device: str) -> dict[str, Any]:
        """The verdict of one promise on one device, with the tests behind it."""
        dev = self.planned.entry(device)
        inapplicable = not_applicable(promise, device, self.planned.accelerators)
        chosen = self.chosen is None or promise in self.chosen
        asked = dev["status"] != "not_requested" and inapplicable is None and chosen
        failures = judged.failed_tests_of(promise, device)
        if not asked:
            self.unattributed += failures  # a failure is never dropped, even where nobody asked
            counts = {"passed": 0, "failed": len(failures), "skipped": 0}
            if dev["status"] == "not_requested":
                return {"verdict": "not_requested", "reason": dev["reason"], **counts}
            if inapplicable is not None:
                return {"verdict": "not_applicable", "reason": inapplicable, **counts}
            return {"verdict": "not_requested", "reason": f"not selected ({self.flags['promise']})", **counts}
        if not judged.classes() and self._run_facts().get("state_required"):
            return {"verdict": "not_requested", "passed": 0, "failed": 0, "skipped": 0,
                    "reason": "no buffer class under test in this run (its classes are MutableStateTests)"}
        entry = judged.entry(promise, device)
        if dev["status"] == "skipped" and entry["verdict"] != "failed":
            return {**entry, "verdict": "skipped", "reason": dev["reason"]}
        if self.known_failures is None:
            return entry
        return known_failures.mark(entry, self.known_failures, promise, device, _torch_version())

    def _crash_lines(self) -> list[str]:
        """Each worker that died: during a test (xdist named it), or between tests."""
        between = [Crash(worker, how) for worker, how in self.deaths.items()]
        return [crash.line() for crash in self.crashes + between]

    def _status(self, session: pytest.Session) -> tuple[str, str | None, list[str]]:
        """How the run ended (status, detail, warnings): only a run that went through its tests is 'completed'."""
        exitstatus = session.exitstatus
        if self.sigint_seen and exitstatus != pytest.ExitCode.INTERRUPTED:
            return "interrupted", ("the run was interrupted (SIGINT, raised where pytest did not see it): "
                                   "not every test ran, and the test it hit is no verdict"), []
        crashes = self._crash_lines()
        if crashes:
            return "crashed", "\n".join(crashes), []
        if TORCH_REPLACED in self.config.stash:
            return "error", self.config.stash[TORCH_REPLACED], []
        if REFUSED in self.config.stash and exitstatus == pytest.ExitCode.USAGE_ERROR:  # an xdist worker's refusal
            return "error", f"usage error (pytest exit status 4): {self.config.stash[REFUSED]}", []
        if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
            return "completed", None, []
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            if _stopped_by_maxfail(session):
                # -x / --maxfail (which xdist reports as an interruption): a stop the user asked
                # for, after a failure that is a verdict; the pairs it never reached read as untested.
                stopped = (f"the run stopped after {session.testsfailed} failures (-x/--maxfail): "
                           "later tests did not run")
                return "completed", None, [stopped]
            why = self.interruption or "interrupted"
            return "interrupted", f"the run was interrupted ({why}, pytest exit status 2): not every test ran", []
        try:
            name = pytest.ExitCode(exitstatus).name.lower().replace("_", " ")
        except ValueError:
            name = "unknown"
        return "error", f"pytest exit status {int(exitstatus)} ({name})", []

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.plan is None:
            # xdist's controller, and no worker finished its start-up (they all went down, and
            # the suite says so): nothing was tested, and no test crashed.
            if session.exitstatus == pytest.ExitCode.OK and self.sets_exit:
                session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
            return
        status, detail, stop_warnings = self._status(session)
        if status == "interrupted" and self.sets_exit:
            session.exitstatus = pytest.ExitCode.INTERRUPTED
        if status == "error" and TORCH_REPLACED in self.config.stash:  # in any run: never green
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        if status == "crashed" and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED) \
                and self.sets_exit:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a crash is never a clean exit
        judged = self._judgement()
        promises: dict[str, dict[str, Any]] = {
            p: {"title": title, "devices": {d: self._entry(judged, p, d) for d in DEVICES}}
            for p, title in PROMISES.items()}
        self.unattributed += judged.unattributed()
        self.untested_lines = untested_lines((p, d, promises[p]["devices"][d]) for p in PROMISES for d in DEVICES)
        verdicts = {
            "devices": {d: self.plan.entry(d) for d in DEVICES},
            "promises": promises,
            "counts": self.counts,
            "unattributed_failures": self.unattributed,
            "requested": self._requested(),
        }
        state = self._state_section()
        if state:  # a section of its own: a buffer class's result file is unchanged
            verdicts["mutable_state"] = state
        self.washed_out = any(f["attempts"]["failed"] < f["attempts"]["total"] for found in judged.failures.values()
                              for f in found if f.get("attempts"))
        ran = judged.settings_ran()
        if ran:
            verdicts["hypothesis_ran"] = ran
        run_fields = self._run_fields()
        # The rule reads the environment too (promise 11 is not applicable beside an accelerator).
        self.answer = results.CellResult.new(self.name, status, detail=detail, environment=run_fields["environment"],
                                             **verdicts).answer()
        checks_ran = judged.any_held() or any(t["verdict"] == "passed" for c in state.values() for t in c["tests"])
        self.exitstatus = exit_status(session.exitstatus, self.answer, checks_ran)
        if self.sets_exit:
            session.exitstatus = self.exitstatus
        elif self.known_failures is not None:  # a project's own run: only what the file promises changes
            session.exitstatus = _with_known_failures(session.exitstatus, self.answer)
        if session.exitstatus == pytest.ExitCode.OK and self.answer.kind == "failed":
            # A project's own run whose last attempts passed (pytest-rerunfailures, a repeat): an attempt
            # that failed is a failure of the contract, and no rerun washes it out of the exit code.
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.path is None:
            return
        self._write(results.CellResult.new(
            self.name,
            status,
            detail=detail,
            started=self.started,
            duration_s=round(time.monotonic() - self.t0, 3),
            pytest_exitstatus=int(session.exitstatus),
            warnings=self.config.stash[WARNINGS].copy() + stop_warnings,
            observations=self.observations,
            **{**run_fields, **verdicts},
        ))

    def _write(self, result: results.CellResult) -> None:
        assert self.path is not None, "a result is written only to a result path"
        self.written, self.status = str(result.write(self.path)), result.status

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Any:
        """After pytest's own summary (its FAILED lines): the run's last lines are the contract's answer."""
        try:
            return (yield)
        finally:
            self._say_known_failures(terminalreporter)
            self._say_failed(terminalreporter)
            self._say_untested(terminalreporter)
            if self.written:
                note = "" if self.status == "completed" else f" (status: {self.status})"
                # A matrix cell's runner moves the file into place after the run: name where it will be.
                shown = os.environ.get(SHOWN_AS) or self.written
                terminalreporter.write_line(f"cell result written to {shown}{note}", red=self.status != "completed")

    def _say_failed(self, terminalreporter: Any) -> None:
        """Each promise and device that failed, with its one-line reason, as the result file has them."""
        if self.answer is None or self.answer.kind != "failed":
            return
        rerun = " (an attempt that failed counts, whatever a rerun did)" if self.washed_out else ""
        terminalreporter.write_line(f"cpugpu-conformance: the contract does not hold{rerun}:", red=True)
        _write_some(terminalreporter, list(self.answer.lines), 12)

    def _say_known_failures(self, terminalreporter: Any) -> None:
        """What the team's known-failures file did: failures it lists, and listings that passed."""
        if self.answer is None or self.known_failures is None:
            return
        known, stale = self.answer.counts.get("known_failure", 0), self.answer.counts.get("listed_but_passed", 0)
        if known:
            terminalreporter.write_line(f"{known} promise-device pair(s) failed as {self.known_failures.file} lists "
                                        "(known failures): tested, not passed, and no failure of the run", yellow=True)
        if stale:
            terminalreporter.write_line(f"{stale} promise-device pair(s) listed in {self.known_failures.file} passed: "
                                        "the run fails until the entries are removed", red=True)
            listed = [line for line in self.answer.lines if "listed as a known failure" in line]
            _write_some(terminalreporter, listed, 5)

    def _say_untested(self, terminalreporter: Any) -> None:
        """Why a run whose tests all passed is no pass (exit 5 or 6): what went untested."""
        exitstatus, nothing = self.exitstatus, SuiteExit.NOTHING_TESTED
        if self.answer is None or self.answer.kind != "untested" or exitstatus not in _UNTESTED:
            return
        if self.plan is not None and self.plan.nothing_testable:
            return  # the suite's own line says no requested device is available
        lines = self.answer.lines
        untested = f"{len(lines)} of the pairs (promise, device) and classes asked for went untested"
        head = "nothing was tested" if exitstatus == nothing else untested
        if self.sets_exit:
            terminalreporter.write_line(f"{head} (exit {exitstatus}): the run is not a pass", red=True)
        else:  # a project's own run: its exit status is pytest's, the contract's answer is this line
            terminalreporter.write_line(f"cpugpu-conformance: {head}: the contract is not shown to hold "
                                        f"(with {self.flags['cell_result']} the run would exit {exitstatus})",
                                        yellow=True)
        _write_some(terminalreporter, lines, 5)
        if self.untested_lines:
            terminalreporter.write_line("the tests that kept them from passing, and why:", red=True)
            _write_some(terminalreporter, self.untested_lines, 10)


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def _with_known_failures(pytest_status: int, answer: results.Answer) -> int:
    """pytest's exit status in a run that leaves it pytest's, with a known-failures file: 0 when
    every failure is a listed one, 1 when a listed promise passed (strict, as xfail_strict)."""
    if known_failures_only(pytest_status, answer):
        return int(pytest.ExitCode.OK)
    if pytest_status == pytest.ExitCode.OK and answer.counts.get("listed_but_passed"):
        return int(pytest.ExitCode.TESTS_FAILED)
    return int(pytest_status)


def _write_some(terminalreporter: Any, lines: list[str] | tuple[str, ...], shown: int) -> None:
    for line in lines[:shown]:
        terminalreporter.write_line(f"  {line}", red=True)
    if len(lines) > shown:
        terminalreporter.write_line(f"  ... and {len(lines) - shown} more (the result file lists every one)", red=True)


def _stopped_by_maxfail(session: pytest.Session) -> bool:
    maxfail = session.config.option.maxfail
    return bool(maxfail) and session.testsfailed >= maxfail
