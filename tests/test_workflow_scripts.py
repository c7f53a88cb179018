"""The CI workflow's inline scripts, run for real: the cells job's listing, the cell job's fallback
for a cell that left no readable result, and a cancelled cell job reaching nox.

Needs the `test` extra (nox); no network.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from cell_helpers import fake_python, is_gone, wait_for
from test_runner_processes import HELD_SUITE, held_suite_pids
from workflow_file import BIN, ROOT, step_named, tool

from cpugpu_conformance import results
from cpugpu_conformance.runner import matrix as matrices

# ----------------------------------------------------------------------------- inline scripts, run


def run_step_script(job: str, fragment: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run a `shell: bash` step as the runner does (bash -eo pipefail SCRIPT) in ``cwd``, the venv's
    tools (its python and cpugpu-conformance among them) first on PATH."""
    step = step_named(job, fragment)
    assert step["shell"] == "bash"
    script = Path(env["RUNNER_TEMP"]) / "step.sh"
    script.write_text(step["run"], encoding="utf-8")
    full_env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **env}
    full_env.pop("CONFORMANCE_MATRIX", None)
    full_env.update(env)
    shell = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]
    return subprocess.run([*shell, str(script)], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120, check=False)


def run_listing(tmp_path: Path, matrix_file: Path | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """The cells job's listing step, at the repository root (matrix.yaml) as on CI."""
    tool("cpugpu-conformance")
    output = tmp_path / "github_output"
    env = {"GITHUB_OUTPUT": str(output), "RUNNER_TEMP": str(tmp_path)}
    if matrix_file:
        env["CONFORMANCE_MATRIX"] = str(matrix_file)
    return run_step_script("cells", "job matrix", ROOT, env), output


def listed_matrix(tmp_path: Path, matrix_file: Path | None = None) -> list[dict]:
    run, output = run_listing(tmp_path, matrix_file)
    assert run.returncode == 0, run.stdout + run.stderr
    key, _, value = output.read_text().strip().partition("=")
    assert key == "matrix"
    return json.loads(value)["include"]


def test_listing_gives_one_job_per_matrix_cell_with_its_runner(tmp_path):
    include = listed_matrix(tmp_path)
    m = matrices.load(ROOT / "matrix.yaml")
    assert [e["cell"] for e in include] == [c.name for c in m.cells]
    assert [e["session"] for e in include] == [c.session for c in m.cells]
    for entry, cell in zip(include, m.cells):
        assert entry["runner"] == cell.device.runner
        assert entry["python"] == m.python
        assert entry["timeout_minutes"] >= cell.time_limit_s / 60
    # what the cell job passes to `nox -s` selects exactly that one session
    one = subprocess.run(
        [tool("nox"), "-l", "--json", "-s", include[-1]["session"]], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert [e["session"] for e in json.loads(one.stdout)] == [include[-1]["session"]], one.stderr


def test_listing_sends_cuda_cells_to_the_gpu_runner_from_matrix_yaml(tmp_path):
    custom = tmp_path / "matrix.yaml"
    custom.write_text(
        """
python: "3.11"
devices:
  cpu: {runner: ubuntu-latest}
  cuda: {runner: [self-hosted, linux, gpu]}
time_limit_s: 1500
baseline: "2.14.1"
candidates: ["2.15.0"]
torch:
  - {version: "2.14.1"}
  - {version: "2.15.0", time_limit_s: 3000}
"""
    )
    include = listed_matrix(tmp_path, custom)
    assert {e["cell"]: e["runner"] for e in include} == {
        "torch-2.14.1-cpu": "ubuntu-latest",
        "torch-2.14.1-cuda": ["self-hosted", "linux", "gpu"],
        "torch-2.15.0-cpu": "ubuntu-latest",
        "torch-2.15.0-cuda": ["self-hosted", "linux", "gpu"],
    }
    assert {e["cell"]: e["timeout_minutes"] for e in include}["torch-2.15.0-cuda"] == 50 + 30
    assert {e["session"] for e in include} == {
        "conformance(torch='2.14.1', device='cpu')",
        "conformance(torch='2.14.1', device='cuda')",
        "conformance(torch='2.15.0', device='cpu')",
        "conformance(torch='2.15.0', device='cuda')",
    }


def test_listing_fails_on_a_broken_matrix(tmp_path):
    custom = tmp_path / "matrix.yaml"
    custom.write_text('python: "3.11"\nbaseline: "2.14.1"\ncandidates: ["2.15.0"]\ntorch: [{version: "2.x"}]\n')
    run, output = run_listing(tmp_path, custom)
    assert run.returncode != 0
    assert "torch[0].version" in run.stderr
    assert not output.exists()


CELL_ENV = {"CELL": "torch-2.15.0-cpu", "SESSION": "conformance(torch='2.15.0', device='cpu')"}


def fallback(tmp_path: Path, nox_output: str | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """The cell job's fallback step, after a `Run the cell` step that wrote ``nox_output``."""
    if nox_output is not None:
        (tmp_path / "nox.log").write_text(nox_output)
    run = run_step_script("cell", "left no result", tmp_path, {**CELL_ENV, "RUNNER_TEMP": str(tmp_path)})
    assert run.returncode == 0, run.stdout + run.stderr
    return run, tmp_path / "results" / "torch-2.15.0-cpu.json"


def test_a_cell_that_left_no_result_is_recorded_as_error_with_the_nox_tail(tmp_path):
    run, path = fallback(tmp_path, "nox > Running session conformance\nnox > Python interpreter 3.11 not found\n")
    assert run.stdout.strip() == "results/torch-2.15.0-cpu.json: recorded as error"
    result = results.CellResult.load(path)
    assert result["status"] == "error" and result["cell"] == "torch-2.15.0-cpu"
    assert "ended without a result file" in result["detail"]
    assert result["detail"].endswith("Python interpreter 3.11 not found")


def test_a_cell_killed_before_its_answer_stays_interrupted_with_the_nox_tail(tmp_path):
    """A cancel or the job's time limit killed nox: its result path still holds the run's placeholder."""
    results.placeholder("torch-2.15.0-cpu", requested={"torch": "2.15.0", "device": "cpu"}).write(
        tmp_path / "results" / "torch-2.15.0-cpu.json")
    run, path = fallback(tmp_path, "nox > Running session conformance(torch='2.15.0', device='cpu')\nkilled\n")
    assert run.stdout.strip() == "results/torch-2.15.0-cpu.json: recorded as interrupted"
    result = results.CellResult.load(path)
    assert result["status"] == "interrupted" and not result.answer().clean
    assert "did not finish" in result["detail"] and result["detail"].endswith("killed")


def test_a_cell_with_an_unreadable_result_is_recorded_as_error(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "torch-2.15.0-cpu.json").write_text('{"status": "completed"')
    run, path = fallback(tmp_path)
    assert run.stdout.strip() == "results/torch-2.15.0-cpu.json: recorded as error"
    result = results.CellResult.load(path)
    assert result["status"] == "error"
    assert "left a result file that cannot be read (results/torch-2.15.0-cpu.json: not JSON" in result["detail"]


def test_a_cell_with_a_result_keeps_it(tmp_path):
    kept = results.CellResult.new("torch-2.15.0-cpu", "crashed", detail="SIGABRT").write(tmp_path / "results" / "torch-2.15.0-cpu.json")
    before = kept.read_bytes()
    run, _ = fallback(tmp_path, "nox > ...\n")
    assert run.stdout.strip() == "results/torch-2.15.0-cpu.json: the cell's answer stands"
    assert kept.read_bytes() == before


def _ended(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        pytest.fail(f"the step ended before its suite started (exit {proc.returncode}):\n{proc.communicate()[0]}")


def test_cancelling_the_cell_job_reaches_nox_and_the_cell_is_uploaded_as_interrupted(tmp_path):
    """The runner signals only the step's entry process (SIGINT; SIGTERM 7.5 s later): it must be nox.

    The `installed` session stands in for a cell (nothing to install); its suite is held mid-run.
    """
    tool("nox")
    pids_file = tmp_path / "suite.pids"
    python = fake_python(tmp_path / "held", HELD_SUITE.format(pids=str(pids_file)))
    for name in ("noxfile.py", "matrix.yaml"):  # the step runs `nox` at the repository root
        (tmp_path / name).symlink_to(ROOT / name)
    script = tmp_path / "run-the-cell.sh"
    script.write_text(step_named("cell", "Run the cell")["run"], encoding="utf-8")
    out = tmp_path / "results"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "SESSION": "installed", "CELL": "cell",
           "RUNNER_TEMP": str(tmp_path), "NOX_SCRIPT_MODE": "none", "CONFORMANCE_RESULTS": str(out),
           "CONFORMANCE_PYTHON": str(python)}
    env.pop("CONFORMANCE_MATRIX", None)
    step = subprocess.Popen(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pids: list[int] = []
    try:
        pids = wait_for(lambda: held_suite_pids(pids_file) or _ended(step), "the suite to start", timeout=120)
        step.send_signal(signal.SIGINT)  # to the entry process, as the runner does
        output, _ = step.communicate(timeout=60)
        assert step.returncode == 130, output
        for pid in pids:
            wait_for(lambda pid=pid: is_gone(pid), f"process {pid} of the test group to end", timeout=15)
        path = out / "installed-torch-2.15.0-default.json"
        result = results.CellResult.load(path)
        assert result.status == "interrupted" and result["detail"].startswith("interrupted by SIGINT")
        assert "Session installed interrupted" in (tmp_path / "nox.log").read_text()
        assert not [p.name for p in out.glob(".*")]
    finally:
        if step.poll() is None:
            step.kill()
            step.communicate(timeout=30)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
