"""What the plugin works out once per run and keeps in pytest's stash, for its hooks, the recorder
and the shipped suite's conftest.py (which sets some of them before the plugin's own configure).
"""

from __future__ import annotations

from typing import Any

import pytest

from .plan import DevicePlan

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
# The line that says torch was patched where the tests ran (torch_is_torch.py).
TORCH_REPLACED = pytest.StashKey[str]()
# The key of what an xdist worker tells the controller in its workeroutput (plain data).
WORKER_FACTS = "cpugpu_conformance"
