"""What the tests of the CI workflow share: the workflow file, read as GitHub reads it, its jobs
and steps by name, and the test extra's tools (check-jsonschema, zizmor, nox) found beside this Python."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "conformance.yml"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = shutil.which(name, path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if not found:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


def load_workflow(text: str | None = None) -> dict:
    data = yaml.safe_load(text if text is not None else WORKFLOW.read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


WF = load_workflow()
JOBS = WF["jobs"]


def steps(job: str) -> list[dict]:
    return JOBS[job]["steps"]


def step_named(job: str, fragment: str) -> dict:
    matches = [s for s in steps(job) if fragment in s.get("name", "")]
    assert len(matches) == 1, f"{job}: expected one step named like {fragment!r}"
    return matches[0]


def runs(job: str) -> str:
    return "\n".join(s.get("run", "") for s in steps(job))


def uses(job: str, action: str) -> list[dict]:
    return [s for s in steps(job) if s.get("uses", "").startswith(action + "@")]
