"""The project's own tests: one that needs a device this machine lacks is skipped with the reason.

``@pytest.mark.devices("cuda")`` names the devices a test needs, as the suite's tests do
(devices.py names); here a missing one is a skip that says why, so a CPU machine runs the
rest and a GPU machine runs everything.
"""

from __future__ import annotations

import os
import sys

import forked_exec
import forkserver
import pytest
from device_marker import missing_device

from cpugpu_conformance.testing.shared import marks


def share_the_cores_between_workers() -> None:
    """Under pytest-xdist, torch's intra-op threads in each worker (and in the suite runs it starts,
    which inherit the environment) are the worker's share of the cores, as OMP_NUM_THREADS sets them:
    two workers on two cores, each running a suite whose torch spins two threads, lose a sixth of
    their time to each other. Not where the caller set a count; the tests about thread counts set
    their own (test_threads.py)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2 or "OMP_NUM_THREADS" in os.environ:
        return
    count = max(1, (os.cpu_count() or 1) // workers)
    os.environ["OMP_NUM_THREADS"] = str(count)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(count)


share_the_cores_between_workers()
forkserver.route_subprocesses()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "devices(*names): the devices a test needs; skipped, with the reason, where one is missing")
    config.addinivalue_line("markers", "quick: the core, checked in minutes (nox -s quick)")
    config.addinivalue_line("markers", "fresh_processes: every `python` the test starts is a fresh interpreter "
                            "(about signals and process trees: forked_exec.py)")
    # The tests import the library's classes (their marks) without enabling its plugin.
    marks.register_markers(config)


def pytest_runtest_setup(item: pytest.Item) -> None:
    why = missing_device([str(name) for mark in item.iter_markers("devices") for name in mark.args])
    if why:
        pytest.skip(why)


@pytest.fixture(autouse=True)
def _fresh_processes_where_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked fresh_processes starts no forked stand-in for `python` (forked_exec.py), nor do
    the commands it starts (they inherit an environment without the switch)."""
    if request.node.get_closest_marker("fresh_processes"):
        monkeypatch.delenv(forked_exec.ENABLED, raising=False)
