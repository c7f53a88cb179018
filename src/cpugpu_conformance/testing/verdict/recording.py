"""Turn test reports into the cell result file: one verdict per promise and device.

`annotate` runs where the test ran (an xdist worker, or the only process) and puts what
the controller needs on the report; `CellRecorder` runs in the controller only, in every
run: its answer (results.CellResult.answer, the one rule) decides the exit status, with or
without a result file (exit_status.py), and its last lines (last_lines.py) say it. With
--cell-result it holds the result path for the whole run, with an ``interrupted`` placeholder
in it until the run's own answer replaces it, so a run that dies never leaves an older pass
behind.

PYTEST_DONT_REWRITE (why: cpugpu_conformance.testing's docstring).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import signal
import sys
import threading
import time
from typing import Any

import pytest

from cpugpu_conformance import results
from cpugpu_conformance.promises import DEVICES, PROMISES, not_applicable
from cpugpu_conformance.results import known_failures

from ..shared.marks import STATE_REPORT_KEY
from . import last_lines
from .environment import environment, observations, profile_in_force, torch_version
from .exit_status import exit_status, with_known_failures
from .judge import Inventory, Judgement, TestEvidence, untested_lines
from .plan import DevicePlan, flags, in_contract_order
from .reports import CRASH_PHASE, FACTS, Crash, message, skip_reason, worker_exit, worker_id
from .stash import PLAN, REFUSED, RUN_FACTS, SHOWN_AS, TORCH_REPLACED, WARNINGS
from .state_judge import section as state_section


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
        self.observations = observations()

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
            "hypothesis_profile": self.profile or profile_in_force(),
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
        return known_failures.mark(entry, self.known_failures, promise, device, torch_version())

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
            session.exitstatus = with_known_failures(session.exitstatus, self.answer)
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
            last_lines.say_known_failures(self, terminalreporter)
            last_lines.say_failed(self, terminalreporter)
            last_lines.say_untested(self, terminalreporter)
            if self.written:
                note = "" if self.status == "completed" else f" (status: {self.status})"
                # A matrix cell's runner moves the file into place after the run: name where it will be.
                shown = os.environ.get(SHOWN_AS) or self.written
                terminalreporter.write_line(f"cell result written to {shown}{note}", red=self.status != "completed")



def _stopped_by_maxfail(session: pytest.Session) -> bool:
    maxfail = session.config.option.maxfail
    return bool(maxfail) and session.testsfailed >= maxfail
