"""Projects for the verdict's hostile tests: a team's own project (third_party.py) whose class
breaks a promise, run by its own pytest with a result file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from third_party import broken_class_project, run_project

BIN = Path(sys.executable).parent

# A class that breaks promise 3 on its first construction inside inference mode in a process only:
# any order-dependent or first-use bug looks like this, and a rerun of the failed test passes.
FIRST_USE = '''
import torch

from cpugpu_conformance.reference import CpuGpuBuffer
from cpugpu_conformance.variants import PreFixCpuGpuBuffer

_FIRST = [True]


class FirstTimeBroken(CpuGpuBuffer):
    """The fixed class, but its first construction inside inference mode is the pre-fix one's."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        if _FIRST[0] and torch.is_inference_mode_enabled():
            _FIRST[0] = False
            PreFixCpuGpuBuffer.__init__(self, *size, dtype=dtype, device=device, pin_memory=pin_memory,
                                        with_numpy=with_numpy)
            return
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)


class ZeroMeansAll(CpuGpuBuffer):
    """Promise 8: copy_to_gpu(0) copies everything (a falsy n read as None)."""

    def copy_to_gpu(self, n=None):
        return super().copy_to_gpu(n or None)
'''


def project(tmp_path: Path, buffer: str = "FirstTimeBroken", body: str = "", conftest_extra: str = "",
            bases: str = "BufferContractTests") -> Path:
    return broken_class_project(tmp_path / "ours", "firstuse", FIRST_USE, buffer, body=body, bases=bases,
                                conftest_extra=conftest_extra)


def run(where: Path, *args: str, env: dict[str, str] | None = None):
    if env is None:
        return run_project(BIN, where, *args, result="cell.json")
    junit = where / "junit.xml"
    proc = subprocess.run([str(BIN / "pytest"), f"--junitxml={junit}", "--cpugpu-cell-result", "cell.json", *args],
                          cwd=where, env=env, capture_output=True, text=True, timeout=600)
    from third_party import ProjectRun, _cases

    return ProjectRun(where, proc.returncode, proc.stdout, proc.stderr, _cases(junit) if junit.exists() else [],
                      where / "cell.json")


def failure_of(ran, promise: str = "3") -> dict:
    outcome = ran.cell.outcome(promise, "cpu")
    assert outcome.kind == "failed", (outcome, ran.tail())
    return outcome.failures[0]
