"""The shipped suite on sim, the simulated accelerator: the device half of the contract on every machine.

Each run is a process of its own (loading sim makes it torch's accelerator there). The variants
that break a promise on an accelerator only are rejected on sim in tests/test_variants.py, through
their Variant.fails_on.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from suite_runner import REPO, run_suite

from cpugpu_conformance import devices, promises
from cpugpu_conformance.sim import build as sim_build

pytestmark = pytest.mark.devices("sim")


def test_the_reference_passes_every_promise_on_sim_with_promise_10_tested(tmp_path):
    run = run_suite(tmp_path, "--device", "sim")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert run.result["devices"]["sim"] == {"status": "tested"}
    for promise in promises.PROMISES:
        entry = run.result["promises"][promise]["devices"]["sim"]
        if promise == promises.PIN_WITHOUT_ACCELERATOR:
            assert entry["verdict"] == "not_applicable" and entry["reason"] == "promise 11 is about cpu", entry
        else:
            assert entry["verdict"] == "passed" and entry["skipped"] == 0 and entry["passed"] > 0, (promise, entry)
    ten = run.result["promises"]["10"]["devices"]["sim"]
    assert ten["passed"] == 3, ten  # in order, and not blocking from pinned memory in both directions
    assert run.cell.answer().clean, run.cell.answer().lines


def test_sim_that_cannot_be_built_is_an_error_in_one_line_never_passed(tmp_path, monkeypatch):
    """A machine without a C++ compiler: the sim cell is `error`, exit 4, the line says what is missing."""
    monkeypatch.setenv("CXX", "no-such-compiler")
    monkeypatch.setenv(sim_build.CACHE_ENV, str(tmp_path / "cache"))
    run = run_suite(tmp_path, "--device", "sim", "--promise", "2")
    assert run.returncode == 4, run.stdout[-3000:]
    assert run.cell.status == "error" and "sim: no C++ compiler ('no-such-compiler'" in run.cell.detail, run.cell.detail
    assert [line for line in run.stderr.splitlines() if line.startswith("ERROR:")] == [
        line for line in run.stderr.splitlines() if "no C++ compiler" in line], run.stderr[-2000:]


SCRIPT_IMPORTS = """
from cpugpu_conformance import devices, sim
from cpugpu_conformance.testing.shared import checks, helpers
from cpugpu_conformance.testing.buffer.device_promises import (
    copy_joins_the_caller_stream,
    copy_returns_before_queued_work,
)
from cpugpu_conformance.testing.shared.reproducer import Record, Scenario

sim.load()
sc = Scenario(Record(), "10", "sim", size=(2,))
for func in (checks.zeroed, helpers.sync, copy_returns_before_queued_work, copy_joins_the_caller_stream):
    sc.steps.append(type(sc.steps[0])(f"# {func.__name__}\\n", (func,)))
script = sc.script()
print(repr(script))
"""


def test_a_sim_reproducer_loads_sim_first_and_needs_nothing_else_of_this_package():
    proc = subprocess.run([sys.executable, "-c", SCRIPT_IMPORTS], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    script = eval(proc.stdout.strip().splitlines()[-1])  # noqa: S307 (our own repr)
    assert "device = torch.device('sim:1')" in script
    assert devices.SIM.setup in script and script.index(devices.SIM.setup) < script.index("device = ")
    package_lines = [line for line in script.splitlines() if "import" in line and "cpugpu_conformance" in line]
    assert package_lines == ["from cpugpu_conformance.reference import CpuGpuBuffer as Buffer",
                             "from cpugpu_conformance import sim"], package_lines
    assert "def capture_copy(" in script and "torch.ops.sim.join_check_begin(" in script  # sim's own join check, its source
