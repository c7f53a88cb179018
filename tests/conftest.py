"""The project's own tests: one that needs a device this machine lacks is skipped with the reason.

``@pytest.mark.devices("cuda")`` names the devices a test needs, as the suite's tests do
(devices.py names); here a missing one is a skip that says why, so a CPU machine runs the
rest and a GPU machine runs everything.
"""

from __future__ import annotations

import pytest
from device_marker import missing_device

from cpugpu_conformance.testing.shared import marks


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "devices(*names): the devices a test needs; skipped, with the reason, where one is missing")
    config.addinivalue_line("markers", "quick: the core, checked in minutes (nox -s quick)")
    # The tests import the library's classes (their marks) without enabling its plugin.
    marks.register_markers(config)


def pytest_runtest_setup(item: pytest.Item) -> None:
    why = missing_device([str(name) for mark in item.iter_markers("devices") for name in mark.args])
    if why:
        pytest.skip(why)
