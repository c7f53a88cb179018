"""Turn test reports into the cell result file: one verdict per promise and device.

`annotate` runs where the test ran (an xdist worker, or the only process) and puts what
the controller needs on the report; `CellRecorder` runs in the controller only.
"""

from __future__ import annotations

import datetime as _dt
import platform
import sys
import time
from collections import defaultdict
from typing import Any

import pytest

from conformance import repro
from cpugpu_conformance import results
from cpugpu_conformance.promises import DEVICES, PROMISES, RECORDED_ONLY

# What pytest_configure works out once, for the hooks and fixtures.
IMPL = pytest.StashKey[Any]()
DEVICES_KEY = pytest.StashKey[tuple]()
PROMISE_FILTER = pytest.StashKey[Any]()
WRITTEN = pytest.StashKey[str]()

REPRO_SECTION = "Reproducer (standalone: torch, numpy and the impl)"


def promises_of(item: pytest.Item) -> set[str]:
    return {str(n) for mark in item.iter_markers("promise") for n in mark.args}


def device_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("device") if callspec else None


def annotate(item: pytest.Item, report: pytest.TestReport) -> None:
    report.user_properties.append(("promises", sorted(promises_of(item))))
    report.user_properties.append(("device", device_of(item)))
    if report.when != "call":
        return
    observed = repro.take_observed()
    if observed is not None:
        report.user_properties.append(("observed", observed))
    if report.failed:
        blamed = repro.take_blame()
        if blamed is not None:
            report.user_properties.append(("blame", blamed))
        script = repro.take()
        if script:
            report.user_properties.append(("reproducer", script))
            report.sections.append((REPRO_SECTION, script))


def _props(report: pytest.TestReport) -> dict[str, Any]:
    return dict(report.user_properties)


def _message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.strip()
    return str(report.longrepr).strip().splitlines()[-1] if report.longrepr else "failed"


def environment() -> dict[str, Any]:
    import hypothesis
    import numpy
    import torch

    cuda = torch.cuda.is_available()
    return {
        "torch": torch.__version__,
        "torch_git_version": getattr(torch.version, "git_version", None),
        "torch_cuda": torch.version.cuda,
        "cuda_available": cuda,
        "gpu_name": torch.cuda.get_device_name(0) if cuda else None,
        "numpy": numpy.__version__,
        "hypothesis": hypothesis.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
    }


def _observations() -> dict[str, Any]:
    try:
        from cpugpu_conformance import observe
    except ImportError:
        return {}
    return observe.observe_all()


class CellRecorder:
    """Collects every test outcome and writes the result file at the end of the session."""

    def __init__(self, config: pytest.Config, impl: str, profile: str, devices: list[str], not_tested: dict[str, str]):
        self.config = config
        self.impl = impl
        self.profile = profile
        self.devices = devices
        self.not_tested = not_tested
        self.started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.t0 = time.monotonic()
        # (promise, device) -> counts and failures
        self.cells: dict[tuple[str, str], dict[str, Any]] = defaultdict(
            lambda: {"passed": 0, "failed": 0, "skipped": 0, "failures": [], "reasons": [], "observed": []}
        )
        self.counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
        self.unattributed: list[dict[str, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = _props(report)
        if report.when == "call" or (report.when == "setup" and not report.passed) or (report.when == "teardown" and report.failed):
            outcome = report.outcome
        else:
            return
        key = {"passed": "passed", "failed": "failed" if report.when == "call" else "errors", "skipped": "skipped"}[outcome]
        self.counts[key] += 1
        promises = props.get("promises") or []
        if report.failed and props.get("blame"):
            promises = [props["blame"]]  # a test of several promises names the one it caught broken
        device = props.get("device")
        if not promises or device is None:
            if report.failed:
                self.unattributed.append({"test": report.nodeid, "message": _message(report)})
            return
        for promise in promises:
            cell = self.cells[(promise, device)]
            if outcome == "skipped":
                cell["skipped"] += 1
                reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
                cell["reasons"].append(reason.removeprefix("Skipped: "))
            elif outcome == "failed":
                cell["failed"] += 1
                cell["failures"].append({"test": report.nodeid, "message": _message(report), "reproducer": props.get("reproducer")})
            else:
                cell["passed"] += 1
                if "observed" in props:
                    cell["observed"].append(props["observed"])

    def _verdict(self, promise: str, device: str, selected: set[str] | None) -> dict[str, Any]:
        if device in self.not_tested:
            return {"verdict": "skipped", "reason": self.not_tested[device]}
        if selected is not None and promise not in selected:
            return {"verdict": "skipped", "reason": "not selected (--promise)"}
        cell = self.cells.get((promise, device))
        if cell is None:
            return {"verdict": "skipped", "reason": "no test of this promise ran"}
        out: dict[str, Any] = {k: cell[k] for k in ("passed", "failed", "skipped")}
        if cell["failed"]:
            out.update(verdict="failed", failures=cell["failures"])
        elif cell["passed"]:
            out["verdict"] = "recorded" if promise in RECORDED_ONLY else "passed"
            if cell["observed"]:
                out["observed"] = "; ".join(sorted(set(cell["observed"])))
        else:
            out.update(verdict="skipped", reason="; ".join(sorted(set(cell["reasons"]))) or "skipped")
        return out

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        import torch

        selected = self.config.stash[PROMISE_FILTER]
        path = self.config.getoption("cell_result")
        name = self.config.getoption("cell_name") or f"torch-{torch.__version__.split('+')[0]}"
        result = results.new_result(
            name,
            "completed",
            started=self.started,
            duration_s=round(time.monotonic() - self.t0, 3),
            impl=self.impl,
            hypothesis_profile=self.profile,
            pytest_exitstatus=int(exitstatus),
            argv=sys.argv[1:],
            environment=environment(),
            devices={d: ({"status": "skipped", "reason": self.not_tested[d]} if d in self.not_tested else {"status": "tested"}) for d in DEVICES},
            promises={
                p: {"title": title, "devices": {d: self._verdict(p, d, selected) for d in DEVICES}}
                for p, title in PROMISES.items()
            },
            counts=self.counts,
            unattributed_failures=self.unattributed,
            observations=_observations(),
        )
        written = results.write_atomic(path, result)
        session.config.stash[WRITTEN] = str(written)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        written = self.config.stash.get(WRITTEN, None)
        if written:
            terminalreporter.write_line(f"cell result written to {written}")

