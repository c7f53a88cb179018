"""The pytest plugin of the proofs step (``-p gpu_check`` loads tools/gpu_check.py, which names
these hooks): only the tests marked for the device named in $GPU_CHECK_PROOFS_FOR, the longest
first, and a skipped one makes the run not a pass."""

from __future__ import annotations

import os

from gpu_checking.outcomes import EXIT_NOTHING, EXIT_PARTLY

PROOF_MODULES = ("tests/test_variants.py", "tests/test_alternatives.py", "tests/test_cuda_on_gpu.py")
PROOFS_FOR_ENV = "GPU_CHECK_PROOFS_FOR"


def _marked_for(item, device: str) -> bool:
    return any(device in (str(name) for name in mark.args) for mark in item.iter_markers("devices"))


# How long a proof takes, roughly, from what it runs (the proofs log's slowest list says more).
# xdist's load scheduling hands proofs out round robin when there are fewer than two per worker
# (16 workers, about 30 proofs on the GPU machine): worker i gets the i-th and the (i+n)-th, so
# with the longest first each long proof is paired with a short one. (Work stealing does worse
# there: it hands out neighbours, the two longest to one worker, and cannot steal from a queue of two.)
PROOF_COST = {
    "test_suite_judges_alternative_as_its_table_says": 3,  # the whole suite on the device
    "test_suite_accepts_variant_where_its_bug_cannot_happen": 3,
    "test_suite_accepts_the_reference": 3,
    "test_suite_rejects_variant": 2,  # one promise, shrinking, two reproducers each importing torch
}


def proof_cost(item) -> int:
    """The rank of a proof's expected time: a whole suite that must find a failure (and shrink it) first."""
    cost = PROOF_COST.get(getattr(item, "originalname", item.name), 1)
    return cost + 1 if cost == 3 and "-fails-" in item.name else cost


class ProofTally:
    """In the process that reports (xdist's controller, or the only one): a proof skipped (its
    device is missing here) is not a pass, so the run is not one either: 5 when none ran, 6 when
    some did."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.passed = self.skipped = 0

    def pytest_runtest_logreport(self, report) -> None:
        if report.skipped:
            self.skipped += 1
        elif report.passed and report.when == "call":
            self.passed += 1

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        if session.exitstatus == 0 and self.skipped:
            session.exitstatus = EXIT_PARTLY if self.passed else EXIT_NOTHING

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.skipped:
            terminalreporter.write_line(
                f"gpu_check: {self.skipped} proof(s) for {self.device} skipped, {self.passed} held: not a pass", red=True)


def pytest_configure(config) -> None:
    device = os.environ.get(PROOFS_FOR_ENV)
    if device and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ProofTally(device), "gpu-check-proof-tally")


def pytest_collection_modifyitems(config, items) -> None:
    device = os.environ.get(PROOFS_FOR_ENV)
    if not device:
        return
    keep = [item for item in items if _marked_for(item, device)]
    drop = [item for item in items if not _marked_for(item, device)]
    if drop:
        config.hook.pytest_deselected(items=drop)
    # Stable: every xdist worker collects the same order, as xdist requires.
    items[:] = sorted(keep, key=proof_cost, reverse=True)
