"""The threads engines run with (issue 29, item 3). The shipped suite pinned torch.set_num_threads(1),
so a class whose copy depends on the intra-op thread count passed it and failed the library in a plain
pytest. Now neither pins a count: the tests run with the process's own, every check of a copy runs with
one thread and with several, and the result file says which counts ran. The shipped suite and a team's
own pytest see such a class the same way, whatever count the process started with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import forkserver
import pytest
import torch
from suite_runner import REPO, run_script, run_suite, suite_command, suite_env
from third_party import QUICK_PROFILE, make_project, many_classes_module, run_project

from cpugpu_conformance import results
from cpugpu_conformance.testing.shared import threads
from cpugpu_conformance.variants import ThreadSplitCopyBuffer

SPEC = "cpugpu_conformance.variants:ThreadSplitCopyBuffer"


def suite_with_threads(tmp_path: Path, count: int, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    """The shipped suite in a process that starts with `count` intra-op threads (OMP_NUM_THREADS)."""
    result = tmp_path / "cell.json"
    env = dict(suite_env(), OMP_NUM_THREADS=str(count))
    proc = subprocess.run(suite_command(result, *args), cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.exists(), proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc, json.loads(result.read_text())


def test_the_variant_is_right_with_one_thread_and_wrong_with_several():
    from cpugpu_conformance.testing.shared import checks

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        buf = ThreadSplitCopyBuffer(3, 2, dtype=torch.int32, device=torch.device("cpu"), pin_memory=False)
        checks.partial_copy(buf, "copy_to_gpu", None, torch.int32, torch.device("cpu"))
        torch.set_num_threads(2)
        try:
            checks.partial_copy(buf, "copy_to_gpu", None, torch.int32, torch.device("cpu"))
        except AssertionError:
            pass
        else:
            raise AssertionError("three rows split over two threads: the last row should have been dropped")
    finally:
        torch.set_num_threads(before)


def test_the_copy_counts_are_one_and_several():
    counts = threads.copy_counts()
    assert counts[0] == 1 and len(counts) == 2 and counts[1] >= 2 and counts[1] >= torch.get_num_threads()


def test_the_reference_passes_and_the_result_file_says_which_counts_ran(tmp_path):
    proc, result = suite_with_threads(tmp_path, 1, "--impl", "cpugpu_conformance.reference:CpuGpuBuffer",
                                      "--promise", "8,9", "--device", "cpu")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert result["environment"]["intra_op_threads"] == {"tests": 1, "copies": [1, 2]}, result["environment"]
    results.CellResult(result, "cell.json")  # validated against the schema, which names the field
    bad = dict(result, environment=dict(result["environment"], intra_op_threads={"tests": 0, "copies": []}))
    with pytest.raises(results.ResultFileError, match="intra_op_threads"):
        results.CellResult(bad, "bad.json")


def test_the_shipped_suite_catches_it_in_a_process_that_starts_with_one_thread(tmp_path):
    """One intra-op thread in the environment (the count the suite used to pin): the copies still run
    with several, and the reproducer sets the count it failed with, so it fails on its own."""
    proc, result = suite_with_threads(tmp_path, 1, "--impl", SPEC, "--promise", "8", "--device", "cpu")
    assert proc.returncode == 1, proc.stdout[-3000:]
    entry = result["promises"]["8"]["devices"]["cpu"]
    assert entry["verdict"] == "failed", entry
    [failure, *_] = [f for f in entry["failures"] if "test_partial_copy" in f["test"]]
    script = failure["reproducer"]
    assert "intra_op_threads(2)" in script and script.index("intra_op_threads(1)") < script.index("intra_op_threads(2)")
    alone = run_script(tmp_path, script)
    assert alone.returncode != 0 and "ok: the promise held" not in alone.stdout, alone.stdout + alone.stderr
    fixed = script.replace("from cpugpu_conformance.variants import ThreadSplitCopyBuffer as Buffer",
                           "from cpugpu_conformance.reference import CpuGpuBuffer as Buffer")
    held = run_script(tmp_path, fixed, "reference.py")
    assert held.returncode == 0 and "ok: the promise held" in held.stdout, held.stdout + held.stderr


def test_the_shipped_suite_with_the_machines_count_catches_it_too(tmp_path):
    # torch's own count: not the share of the cores a test worker gives its runs (conftest.py)
    env = {k: v for k, v in suite_env().items() if k != "OMP_NUM_THREADS"}
    run = run_suite(tmp_path, "--impl", SPEC, "--promise", "8", "--device", "cpu", env=env)
    assert run.returncode == 1 and run.verdict("8") == "failed", run.stdout[-3000:]
    ran = run.result["environment"]["intra_op_threads"]
    count = tmp_path / "count.py"
    count.write_text("import torch\nprint(torch.get_num_threads())\n")
    machines = forkserver.run_python([str(count)], cwd=tmp_path, env=env, timeout=120).stdout
    assert ran["tests"] == int(machines), (ran, machines)
    assert ran["copies"][0] == 1 and ran["copies"][1] >= max(2, ran["tests"]), ran


def test_a_projects_own_pytest_sees_it_as_the_shipped_suite_does_even_pinned_to_one_thread(tmp_path):
    """The library in a team's own pytest, whose conftest pins torch.set_num_threads(1) as the shipped
    suite used to: the copy tests still fail it, on promise 8, and the result file says which ran."""
    project = make_project(tmp_path / "ours", {"test_copies.py": many_classes_module(
        {"TestThreadSplit": "variants.ThreadSplitCopyBuffer", "TestReference": "ourbuffers.CpuGpuBuffer"},
        bases={"TestThreadSplit": ["CopyTests"], "TestReference": ["CopyTests"]})})
    conftest = project / "conftest.py"
    conftest.write_text(conftest.read_text() + "\nimport torch\n\ntorch.set_num_threads(1)\n")
    run = run_project(Path(sys.executable).parent, project, f"--hypothesis-profile={QUICK_PROFILE}")
    assert run.returncode == 1, run.tail()
    failed = {c.name for c in run.cases if c.outcome == "failed"}
    assert {c.name for c in run.cases if c.cls == "TestThreadSplit" and c.outcome == "failed"} == {
        "test_partial_copy[cpu-copy_to_cpu]", "test_partial_copy[cpu-copy_to_gpu]"}, run.tail()
    assert not {c.name for c in run.cases if c.cls == "TestReference" and c.outcome != "passed"}, failed
    one = make_project(tmp_path / "one", {"test_copies.py": many_classes_module(
        {"TestThreadSplit": "variants.ThreadSplitCopyBuffer"}, bases={"TestThreadSplit": ["CopyTests"]})})
    conftest = one / "conftest.py"
    conftest.write_text(conftest.read_text() + "\nimport torch\n\ntorch.set_num_threads(1)\n")
    alone = run_project(Path(sys.executable).parent, one, f"--hypothesis-profile={QUICK_PROFILE}", result="cell.json")
    assert alone.returncode == 1, alone.tail()
    assert alone.cell.outcome("8", "cpu").kind == "failed", alone.cell.outcome("8", "cpu")
    assert alone.cell["environment"]["intra_op_threads"] == {"tests": 1, "copies": [1, 2]}
