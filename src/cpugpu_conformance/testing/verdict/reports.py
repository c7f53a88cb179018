"""What a test's report carries to the recorder: its promises, its device, its reproducer.

`annotate` runs where the test ran (an xdist worker, or the only process) and puts on the
report what the controller's recorder (recording.py) needs, and how a report is read back (its
message, its skip reason, a crashed worker). The markers are named in shared/marks.py.
"""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest

from ..shared import surface
from ..shared.marks import RECORD, device_of, promises_of
from .keys import key_of_item

REPRO_SECTION = "Reproducer (standalone: torch, numpy and the impl)"

# xdist's report for a test whose worker died has this phase.
CRASH_PHASE = "???"


def item_facts(item: pytest.Item, kind: str | None = None) -> dict[str, Any]:
    """What the recorder needs to know of a collected test of the library's classes, as plain data:
    its class, its key (keys.py), its device and promises, whether its function is the
    contract's own (stamps.py) and, for an override, whether it opts out by a skip marker."""
    from ..shared.stamps import is_contract_function

    cls: Any = getattr(item, "cls", None)
    name = getattr(item, "originalname", None) or item.name
    function = getattr(item, "function", None)
    contract = is_contract_function(name, function)
    opt_out = not contract and any(mark.name in ("skip", "skipif") for mark in getattr(function, "pytestmark", []))
    facts = {
        "nodeid": item.nodeid,
        "class": f"{cls.__module__}.{cls.__qualname__}" if cls is not None else item.nodeid,
        "test": name,
        "key": key_of_item(item),
        "device": device_of(item),
        "promises": sorted(promises_of(item), key=int),
        "contract": contract,
        "opt_out": opt_out,
    }
    if kind is not None:  # a MutableStateTests test: judged in a section of its own (state_judge.py)
        facts["kind"] = kind
    collided = surface.collisions(cls) if isinstance(cls, type) else ()
    if collided:  # the class changed what the library calls: every test of it is untested (judge.py)
        facts["collisions"] = list(collided)
    return facts


# The key of the report property that carries a library test's facts and evidence.
FACTS = "cpugpu"


def annotate(item: pytest.Item, report: pytest.TestReport, kind: str | None = None) -> None:
    """Put the test's facts and evidence (how the contract's body ended: its stamp, its blame, its
    reproducer, what it observed) on its report, which travels to the controller. The evidence is
    read from the test's Record, not from the report's outcome, which a hook can rewrite."""
    facts = item_facts(item, kind)
    record = item.stash.get(RECORD, None)
    if record is not None:
        facts.update(stamp=record.stamp, stamp_detail=record.stamp_detail, dtypes=sorted(record.dtypes),
                     attempts=getattr(record, "attempts", 0))
        ran = getattr(record, "examples_ran", None)
        if ran is not None:
            facts["hypothesis"] = ran.as_data()
        if record.observed is not None:
            facts["observed"] = record.observed
        if report.when == "call" and (record.stamp == "raised" or report.failed):
            if record.blamed is not None:
                facts["blame"] = record.blamed
            script = record.reproducer()
            if script:
                facts["reproducer"] = script
                report.sections.append((REPRO_SECTION, script))
    report.user_properties.append((FACTS, facts))


def message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.strip()
    return str(report.longrepr).strip().splitlines()[-1] if report.longrepr else "failed"


def worker_exit(node: Any) -> str:
    """How an xdist worker process ended, from its exit status: 'killed by SIGSEGV (signal 11)'."""
    # execnet keeps the worker's Popen on the gateway's IO; there is no public way to it.
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if popen is None:
        return "ended (its exit status is unknown)"
    try:
        code = popen.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return "stopped answering (its process is still alive)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} (signal {-code})"
    return f"exited with status {code}"


@dataclass
class Crash:
    worker: str
    how: str  # "was killed by SIGSEGV (signal 11)"
    test: str | None = None

    def line(self) -> str:
        running = f"while running {self.test}" if self.test else "while no test was running"
        return f"xdist worker {self.worker} {self.how} {running}"


def worker_id(report: pytest.TestReport) -> str:
    """The xdist worker (gw0, ...) a crash report names."""
    return str(getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "?"))


def skip_reason(report: pytest.TestReport) -> str:
    """Why a test was skipped, as its marker or pytest.skip() said (an xfail is the judge's to word)."""
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")
