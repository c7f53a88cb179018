"""tools/gpu_check.py, the first run on a GPU machine without network, on the CPU: its files,
its exit code, no jsonschema, pyyaml or nox needed, and the proofs it selects."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys

import pytest
from suite_runner import REPO, SLEEPING_IMPL, suite_env

from cpugpu_conformance import devices

SCRIPT = REPO / "tools" / "gpu_check.py"
_spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
gpu_check = importlib.util.module_from_spec(_spec)
sys.modules["gpu_check"] = gpu_check  # dataclasses look their module up by name
_spec.loader.exec_module(gpu_check)

# Modules the GPU image does not have: importing one fails as if it were not installed.
MISSING_ON_THE_GPU_IMAGE = ("jsonschema", "yaml", "nox")

# A proof for the cpu that holds: the start of each proofs file below but the failing one.
HELD_PROOF = """
import pytest


@pytest.mark.devices("cpu")
def test_held():
    pass
"""

# Proofs of a device are the tests marked for it: the passing one runs, the others must not.
PROOFS = HELD_PROOF + """

@pytest.mark.devices("cuda")
def test_marked_for_cuda_only():
    raise AssertionError("a proof for another device ran")


def test_not_marked():
    raise AssertionError("an unmarked test ran")
"""

FAILING_PROOF = """
import pytest


@pytest.mark.devices("cpu")
def test_a_proof_that_does_not_hold():
    raise AssertionError("the suite misjudged a variant")
"""


def _gpu_image(tmp_path):
    """An environment where jsonschema, pyyaml and nox cannot be imported, like the GPU machine's."""
    blocked = tmp_path / "blocked"
    blocked.mkdir(exist_ok=True)
    for name in MISSING_ON_THE_GPU_IMAGE:
        (blocked / f"{name}.py").write_text(f"raise ImportError('{name} is not on the GPU image')\n")
    env = suite_env()
    env["PYTHONPATH"] = str(blocked)  # and nothing else: the script finds src/ itself
    return env


def run_check(tmp_path, *args, proofs: str = PROOFS):
    module = tmp_path / "test_proofs.py"
    module.write_text(proofs)
    out = tmp_path / "out"
    cmd = [sys.executable, str(SCRIPT), str(out), "--device", "cpu", "--proofs-for", "cpu", "--jobs", "1",
           "--proofs", str(module), *args]
    proc = subprocess.run(cmd, cwd=tmp_path, env=_gpu_image(tmp_path), capture_output=True, text=True, timeout=600)
    return proc, out


def _result(out):
    [path] = out.glob("installed-torch-*-cpu.json")
    return path, json.loads(path.read_text())


def test_a_passing_run_writes_the_result_the_logs_and_the_summary(tmp_path):
    proc, out = run_check(tmp_path, "--", "--promise", "1,4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path, result = _result(out)
    assert sorted(p.name for p in out.iterdir()) == sorted([path.name, "proofs.log", "suite.log", "summary.txt"])
    assert result["status"] == "completed" and result["promises"]["4"]["devices"]["cpu"]["verdict"] == "passed"
    suite_log, proofs_log, summary = (out / name for name in ("suite.log", "proofs.log", "summary.txt"))
    assert "cell result written to" in suite_log.read_text()
    assert "1 passed, 2 deselected" in proofs_log.read_text(), proofs_log.read_text()
    text = summary.read_text()
    assert "suite: exit 0" in text and "proofs for cpu: exit 0" in text and "gpu_check: exit 0" in text
    assert f"result file {path.name}: passed" in text
    assert "gpu_check: exit 0" in proc.stdout
    # What a device machine brings back: at most 8 files, names of letters, digits and ._-
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", p.name) for p in out.iterdir())


def test_a_failing_suite_fails_loudly_with_its_own_code(tmp_path):
    proc, out = run_check(tmp_path, "--", "--promise", "3", "--impl", "cpugpu_conformance.variants:PreFixCpuGpuBuffer")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _, result = _result(out)
    assert result["promises"]["3"]["devices"]["cpu"]["verdict"] == "failed"
    assert "result file" in proc.stderr and "FAILED" in proc.stderr and "gpu_check: exit 1 (not a pass" in proc.stderr
    assert "promise 3" in (out / "summary.txt").read_text()


def test_a_promise_with_a_test_deselected_is_no_pass(tmp_path):
    """Issue 21 through this door: `-- -k` leaves the promise untested, and the check's exit is not 0."""
    proc, out = run_check(tmp_path, "--", "--promise", "5", "-k", "not numpy_view_by_default")
    assert proc.returncode == 6, proc.stdout + proc.stderr
    _, result = _result(out)
    entry = result["promises"]["5"]["devices"]["cpu"]
    assert entry["verdict"] == "skipped" and "deselected" in entry["untested_tests"][0]["why"], entry
    assert "on cpu: untested" in (out / "summary.txt").read_text()


def test_an_earlier_pass_in_the_folder_does_not_stand(tmp_path):
    proc, out = run_check(tmp_path, "--", "--promise", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Again into the same folder, with an option pytest refuses before the suite starts: it writes nothing.
    proc, _ = run_check(tmp_path, "--", "--promise", "1", "--no-such-option")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert not list(out.glob("installed-torch-*.json")) and "no result file" in proc.stderr, proc.stderr


def test_a_zero_from_the_suite_that_its_result_file_does_not_back_is_not_a_pass(tmp_path):
    # A device this machine lacks, asked for by name, is untested in the result file, whatever the
    # suite's exit code (0 before the suite learnt exit 6): the check's exit is never 0 then.
    missing = [name for name, why in devices.unavailable().items() if why]
    if not missing:
        pytest.skip("every device of the registry is here: none can be asked for and be missing")
    # --cpu-half: on a machine with no NVIDIA GPU the check runs anyway (else it refuses up front)
    proc, out = run_check(tmp_path, "--device", "all", "--cpu-half", "--", "--promise", "1")
    assert proc.returncode in (3, 6), proc.stdout + proc.stderr
    assert f"on {missing[0]}: untested" in (out / "summary.txt").read_text()


def test_a_failing_proof_fails_the_check(tmp_path):
    proc, out = run_check(tmp_path, "--", "--promise", "1", proofs=FAILING_PROOF)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "suite: exit 0" in proc.stderr and "proofs for cpu: exit 1" in proc.stderr
    assert "the suite misjudged a variant" in (out / "proofs.log").read_text()


SKIPPED_PROOFS = HELD_PROOF + """

@pytest.mark.devices("cpu")
def test_skipped_where_the_device_is_missing():
    pytest.skip("needs cpu: not here")
"""


# -k words no folder name holds: pytest matches -k against parent folders too (tmp_path says "skipped").
@pytest.mark.parametrize(("keep", "code"), [("test_held or test_skipped_where_the_device", 6),
                                            ("test_skipped_where_the_device", 5)], ids=["held-or-skipped", "skipped"])
def test_a_skipped_proof_is_not_a_pass(tmp_path, keep, code):
    # A machine without the device skips its proofs (tests/conftest.py): that must never read as held.
    proc, out = run_check(tmp_path, "--proofs-k", keep, "--", "--promise", "1", proofs=SKIPPED_PROOFS)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert f"proofs for cpu: exit {code}" in proc.stderr and "skipped" in proc.stderr
    assert "proof(s) for cpu skipped" in (out / "proofs.log").read_text()


def test_no_proof_for_the_device_is_not_a_pass(tmp_path):
    proc, _ = run_check(tmp_path, "--proofs-k", "no_test_has_this_name", "--", "--promise", "1")
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert "proofs for cpu: exit 5" in proc.stderr


def test_a_suite_past_its_time_is_stopped_and_is_not_a_pass(tmp_path):
    impl = tmp_path / "sleeping_impl.py"
    impl.write_text(SLEEPING_IMPL.format(marker=str(tmp_path / "testing.marker")))
    proc, out = run_check(tmp_path, "--suite-timeout", "5", "--", "--promise", "3", "--impl", f"{impl}:Sleeper")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "suite: timed out, stopped after" in proc.stderr and "not a pass" in proc.stderr
    assert "timed out" in (out / "suite.log").read_text()


# A child that says it is ready (an event to wait on, not a sleep), then waits to be stopped.
WAITS_FOR_A_STOP = """
import signal, sys, time
{handling}
print("ready", flush=True)
time.sleep(300)
"""


def _ready_child(handling: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WAITS_FOR_A_STOP.format(handling=handling)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline() == "ready\n"
    return proc


def test_stop_sends_ctrl_c_first_so_the_suite_can_write_its_result():
    proc = _ready_child("signal.signal(signal.SIGINT, lambda *_: sys.exit(130))")
    gpu_check.stop(proc)
    assert proc.returncode == 130  # it ended on Ctrl-C, it was not killed


def test_stop_kills_what_ignores_ctrl_c(monkeypatch):
    monkeypatch.setattr("gpu_checking.child_processes.STOP_GRACE_S", 0.1)
    proc = _ready_child("signal.signal(signal.SIGINT, signal.SIG_IGN)")
    gpu_check.stop(proc)
    assert proc.returncode == -9


def test_an_output_folder_that_cannot_be_made_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(blocker / "out")], capture_output=True, text=True,
                          env=_gpu_image(tmp_path), timeout=60)
    assert proc.returncode == 4 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert str(blocker / "out") in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("suite", "says_passed", "proofs", "code"),
    [
        (0, True, 0, 0),
        (0, True, 1, 1),  # a proof failed
        (0, True, 5, 5),  # no proof selected: not a pass
        (1, False, 0, 1),  # the suite's code wins: it is the result file's
        (6, False, 1, 6),
        (0, False, 0, 3),  # a 0 the result file does not back
    ],
)
def test_exit_code(suite, says_passed, proofs, code):
    assert gpu_check.exit_code(suite, says_passed, proofs) == code


def test_children_find_the_checkout_without_an_install(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-x")
    env = gpu_check.child_env("cuda")
    assert env["PYTHONPATH"].split(":")[:3] == [str(REPO / "src"), str(REPO / "tools"), "/elsewhere"]
    assert "PYTEST_ADDOPTS" not in env and env[gpu_check.PROOFS_FOR_ENV] == "cuda"
    assert gpu_check.PROOFS_FOR_ENV not in gpu_check.child_env()


def test_the_default_proofs_are_the_variant_alternative_and_cuda_check_tests():
    assert gpu_check.PROOF_MODULES == ("tests/test_variants.py", "tests/test_alternatives.py", "tests/test_cuda_on_gpu.py")
    assert all((REPO / m).is_file() for m in gpu_check.PROOF_MODULES)
    args = gpu_check.parse(["out"])
    assert args.device == "all" and args.proofs_for == "cuda" and args.proofs == list(gpu_check.PROOF_MODULES)


# --- the proofs: which, and in what order (issue 23, item 3)

WHOLE_SUITE = ("test_suite_judges_alternative_as_its_table_says", "test_suite_accepts_variant_where_its_bug_cannot_happen",
               "test_suite_accepts_the_reference")


def _collected_proofs(device: str) -> list[str]:
    env = gpu_check.child_env(device)
    proc = subprocess.run([sys.executable, "-m", "pytest", *gpu_check.PROOF_MODULES, "-p", "gpu_check", "-p",
                           "no:cacheprovider", "-q", "--collect-only"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


def _function(node_id: str) -> str:
    return node_id.split("::")[1].split("[")[0]


def test_the_longest_proofs_come_first():
    """Whole suites that must find a failure, then whole suites, then single-promise rejections,
    then the rest: xdist's round robin pairs each long proof with a short one."""
    ids = _collected_proofs("cuda")

    def rank(node_id: str) -> int:
        if _function(node_id) in WHOLE_SUITE:
            return 3 if "-fails-" in node_id else 2
        return 1 if _function(node_id) == "test_suite_rejects_variant" else 0

    ranks = [rank(i) for i in ids]
    assert ranks == sorted(ranks, reverse=True), ids
    assert ranks[0] == 3 and ranks.count(2) >= 5 and ranks.count(1) >= 10, ids
    assert [_function(i) for i in ids if rank(i) == 0] == _marked_for_cuda(), ids


# The CUDA checks, by area; the tests marked for cuda are all in test_cuda_on_gpu.py, a proof module.
CUDA_CHECK_MODULES = ("tests/test_cuda_sync_and_contexts.py", "tests/test_cuda_copy_checks.py",
                      "tests/test_promise_11_beside_an_accelerator.py", "tests/test_cuda_on_gpu.py")


def _cuda_check_tests() -> list[tuple[str, ast.FunctionDef]]:
    """(its module's source, the test) for each test of the CUDA checks' modules, in file order."""
    tests = []
    for module in CUDA_CHECK_MODULES:
        source = (REPO / module).read_text()
        tests += [(source, node) for node in ast.parse(source).body
                  if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
    return tests


def _marked_for_cuda() -> list[str]:
    """The tests of the CUDA checks' modules marked @pytest.mark.devices("cuda"), in file order."""
    return [node.name for source, node in _cuda_check_tests()
            if any('devices("cuda")' in ast.get_source_segment(source, d) for d in node.decorator_list)]


def test_every_cuda_check_that_runs_the_suite_on_cuda_is_a_proof_for_cuda():
    """A test of the CUDA checks' modules that runs the suite with --device cuda, or checks CUDA itself, is
    marked for cuda and in a proof module (so gpu_check runs it there); every other one runs on the CPU, in
    `nox -s tests`."""
    on_cuda = {node.name for source, node in _cuda_check_tests()
               if '"--device", "cuda"' in ast.get_source_segment(source, node)}
    selected = {_function(i) for i in _collected_proofs("cuda") if i.startswith(CUDA_CHECK_MODULES)}
    assert on_cuda and on_cuda <= selected and selected == set(_marked_for_cuda())
    assert not {_function(i) for i in _collected_proofs("cpu") if i.startswith(CUDA_CHECK_MODULES)}


def test_the_proofs_are_load_scheduled_and_say_which_were_slowest(monkeypatch):
    monkeypatch.setattr("gpu_checking.steps.has_xdist", lambda: True)
    assert gpu_check.parallel(16) == ["-n", "16", "--dist", "load"]
    assert gpu_check.parallel(1) == []
    assert "--durations=10" in gpu_check.proofs_command(list(gpu_check.PROOF_MODULES), 16, [])
