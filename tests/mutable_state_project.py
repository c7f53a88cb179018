"""A project's own pytest run with the plugin, for the tests of MutableStateTests: the project's
conftest (which records what each test reported), a test class per state, the run and what it
reported, and a reproducer the run wrote, run on its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

CONFTEST = '''
import json
import os

import pytest
import torch

pytest_plugins = ["cpugpu_conformance.testing.plugin"]  # the plugin parametrizes the state classes

REPORTS = []


@pytest.fixture(autouse=True)
def caller_state_put_back(request):
    before = (torch.is_grad_enabled(), torch.get_default_dtype())
    yield
    after = (torch.is_grad_enabled(), torch.get_default_dtype())
    if after != before:
        REPORTS.append({"leak": request.node.nodeid, "before": str(before), "after": str(after)})


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        message = str(report.longrepr) if report.longrepr else ""
        REPORTS.append({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                        "message": message, "properties": dict(report.user_properties)})


def pytest_sessionfinish(session):
    with open(os.environ["REPORTS_OUT"], "w") as out:
        json.dump(REPORTS, out)
'''


SIMPLE_CLASS = '''

class Test{name}(MutableStateTests):
    def make_state(self, device):
        return {name}(device)

    def warm_up(self, state):
        state.warm_up()
'''


@dataclass
class ProjectRun:
    returncode: int
    output: str
    reports: list[dict[str, Any]]
    project: Path

    def outcomes(self, cls: str) -> dict[str, str]:
        """context -> outcome of the class's tests on the CPU."""
        return {r["properties"]["mutable_state"]["context"]: r["outcome"] for r in self.reports
                if f"::{cls}::" in r.get("nodeid", "") and "[cpu-" in r["nodeid"]}

    def report(self, cls: str, context: str, device: str = "cpu") -> dict[str, Any]:
        return next(r for r in self.reports if r.get("nodeid", "").endswith(f"{cls}::test_mutable_state[{device}-{context}]"))

    def record(self, cls: str, context: str, device: str = "cpu") -> dict[str, Any]:
        return self.report(cls, context, device)["properties"]["mutable_state"]


def env_with_tests() -> dict[str, str]:
    path = os.pathsep.join([str(REPO / "src"), str(REPO / "tests")])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    return {**env, "PYTHONPATH": path}


def run_project(root: Path, files: dict[str, str], *args: str) -> ProjectRun:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    out = root / "reports.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=root,
                          capture_output=True, text=True, timeout=300, env={**env_with_tests(), "REPORTS_OUT": str(out)})
    reports = json.loads(out.read_text()) if out.exists() else []
    return ProjectRun(proc.returncode, proc.stdout + proc.stderr, reports, root)


def run_reproducer(project: ProjectRun, script: str, name: str) -> subprocess.CompletedProcess[str]:
    path = project.project / name
    path.write_text(script)
    return subprocess.run([sys.executable, str(path)], cwd=project.project, capture_output=True, text=True,
                          timeout=120, env=env_with_tests())
