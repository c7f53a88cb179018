"""MutableStateTests in the result file (issues 21 and 25): a section of its own, judged by the same
rule as the buffer's promises. A state class passes only when its test ran to its end and held in
every creation context of every device; what a run's configuration does to a test (-k, --co, an
override, a hook that rewrites reports) never makes a pass, and the exit code says what the file says."""

from __future__ import annotations

import json
from pathlib import Path

import forkserver
import pytest
from suite_runner import outside_env
from third_party import REWRITE_FAILURES, SEED_STATES

from cpugpu_conformance import results

CONFTEST = 'pytest_plugins = ["cpugpu_conformance.testing.plugin"]\n'

STATES = SEED_STATES + '''

class OffDevice(Fixed):
    """Fixed for promise 3, but its warm-up makes a tensor without a device: a default device leaks in."""

    def warm_up(self):
        super().warm_up()
        with torch.inference_mode(False):
            self.positions = torch.zeros(4, dtype=torch.int64)


class TestState(MutableStateTests):
    def make_state(self, device):
        return {cls}(device)

    def warm_up(self, state):
        state.warm_up()
{body}'''

def run(tmp_path: Path, *args: str, cls: str = "Fixed", body: str = "", conftest: str = ""):
    (tmp_path / "conftest.py").write_text(CONFTEST + conftest)
    (tmp_path / "test_state.py").write_text(STATES.format(cls=cls, body=body))
    result = tmp_path / "cell.json"
    proc = forkserver.run_python(["-m", "pytest", "-p", "no:cacheprovider", "-q", "--cpugpu-cell-result", str(result),
                                  *args], cwd=tmp_path, env=outside_env(), timeout=300)
    data = json.loads(result.read_text()) if result.exists() else None
    return proc, data


def section(data: dict) -> dict:
    return data["mutable_state"]["test_state.TestState"]


def test_a_fixed_object_passes_and_the_buffer_promises_are_not_requested(tmp_path):
    proc, data = run(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert section(data)["verdict"] == "passed"
    assert all(t["verdict"] == "passed" for t in section(data)["tests"])
    assert data["promises"]["3"]["devices"]["cpu"]["verdict"] == "not_requested"


def test_the_seeds_bug_fails_with_its_path_and_exit_1(tmp_path):
    proc, data = run(tmp_path, cls="Lazy")
    assert proc.returncode == 1, proc.stdout[-3000:]
    failed = [t for t in section(data)["tests"] if t["verdict"] == "failed"]
    assert failed and all(t["bad_paths"][0]["path"] == "state.workspace" and t["reproducer"] for t in failed)


def test_a_hook_that_rewrites_failures_cannot_make_a_pass(tmp_path):
    proc, data = run(tmp_path, cls="Lazy", conftest=REWRITE_FAILURES)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert section(data)["verdict"] == "failed"


@pytest.mark.parametrize("args, code", [(["-k", "not thread"], 6), (["--co"], 5)], ids=["k", "collect-only"])
def test_a_context_left_out_is_untested_never_passed(tmp_path, args, code):
    proc, data = run(tmp_path, *args)
    assert proc.returncode == code, proc.stdout[-3000:]
    assert section(data)["verdict"] == "untested"


def test_an_override_with_an_empty_body_is_untested(tmp_path):
    body = "\n    def test_mutable_state(self, device, context):\n        pass\n"
    proc, data = run(tmp_path, cls="Lazy", body=body)
    assert proc.returncode == 5, proc.stdout[-3000:]  # the override ran; nothing of the contract did
    assert section(data)["verdict"] == "untested"
    assert all("override" in t["why"] for t in section(data)["tests"])


def test_a_context_the_team_never_builds_in_is_waived(tmp_path):
    body = '\n    skip_contexts = {"thread": "our runner is never built in a thread"}\n'
    proc, data = run(tmp_path, body=body)
    assert proc.returncode == 6, proc.stdout[-3000:]
    assert section(data)["verdict"] == "waived"
    [waived] = [t for t in section(data)["tests"] if t["verdict"] == "waived"]
    assert waived["why"] == "our runner is never built in a thread"


def test_an_ambient_default_leaking_in_is_placement_in_the_file_and_fails_the_run(tmp_path):
    proc, data = run(tmp_path, cls="OffDevice")
    assert proc.returncode == 1, proc.stdout[-3000:]
    results.CellResult.load(tmp_path / "cell.json")  # the file validates against its schema
    judged = section(data)
    assert judged["verdict"] == "failed" and judged["broken"] == ["placement"], judged
    failed = {t["context"]: t for t in judged["tests"] if t["verdict"] == "failed"}
    assert set(failed) == {"default_device_meta", "set_default_device_meta"}
    test = failed["default_device_meta"]
    assert test["broken"] == ["placement"] and "bad_paths" not in test
    assert test["why"].startswith("placement: built and warmed up in context default_device_meta: state.positions: "
                                  "on meta, int64, shape (4,) here; built plainly, on cpu, int64, shape (4,)"), test
    assert [x["phase"] for x in test["reproducers"]] == [
        "built and warmed up in context default_device_meta",
        "built in the plain context, warmed up in context default_device_meta"]
    assert "mutable state of test_state.TestState: failed: " in proc.stdout and "placement: " in proc.stdout
