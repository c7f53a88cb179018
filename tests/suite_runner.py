"""Run the conformance suite in a subprocess, as a user would, and read its result file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


@dataclass
class SuiteRun:
    returncode: int
    stdout: str
    stderr: str
    result: dict[str, Any] | None

    def verdict(self, promise: str, device: str = "cpu") -> str:
        assert self.result is not None, f"no result file; stderr: {self.stderr[-2000:]}"
        return self.result["promises"][promise]["devices"][device]["verdict"]

    def failures(self, promise: str, device: str = "cpu") -> list[dict[str, Any]]:
        assert self.result is not None
        return self.result["promises"][promise]["devices"][device].get("failures", [])


def run_suite(tmp_path: Path, *args: str, profile: str = "ci", timeout: float = 600) -> SuiteRun:
    result_path = tmp_path / "cell.json"
    cmd = [
        sys.executable, "-m", "pytest", str(REPO / "conformance"), "-p", "no:cacheprovider", "-q",
        f"--hypothesis-profile={profile}", "--cell-result", str(result_path), *args,
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    return SuiteRun(proc.returncode, proc.stdout, proc.stderr, result)


def run_script(tmp_path: Path, source: str, name: str = "reproducer.py") -> subprocess.CompletedProcess[str]:
    path = tmp_path / name
    path.write_text(source)
    return subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
