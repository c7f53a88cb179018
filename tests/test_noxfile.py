"""noxfile.py, driven the way users drive it: `nox` in a subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import result_factory as rf
from cell_helpers import fake_python, is_gone, unreleased_matrix, wait_for, writes_result
from test_runner_processes import HELD_SUITE, held_suite_pids

from cpugpu_conformance import results
from cpugpu_conformance.runner.matrix import load

ROOT = Path(__file__).resolve().parents[1]


def nox_command() -> list[str]:
    if importlib.util.find_spec("nox") is not None:
        return [sys.executable, "-m", "nox"]
    found = shutil.which("nox")
    if found is None:
        pytest.skip("nox is not installed (`nox -s tests` installs it)")
    return [found]


def nox(*args: str, matrix: Path | None = None, results_dir: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NOX_SCRIPT_MODE="none")  # run with this interpreter's packages, do not make a script env
    env.pop("CONFORMANCE_MATRIX", None)
    if matrix:
        env["CONFORMANCE_MATRIX"] = str(matrix)
    if results_dir:
        env["CONFORMANCE_RESULTS"] = str(results_dir)
    return subprocess.run([*nox_command(), "-f", str(ROOT / "noxfile.py"), *args], check=False, capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=timeout)


def listing(*args: str, matrix: Path | None = None) -> list[dict]:
    proc = nox("-l", "--json", *args, matrix=matrix)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def write_matrix(tmp_path: Path, releases: str, extra: str = "") -> Path:
    return unreleased_matrix(tmp_path, "hypothesis_profile: ci\n" + extra + releases)


def test_one_conformance_session_per_release_with_its_tag() -> None:
    sessions = listing("-s", "conformance")
    cells = load(ROOT / "matrix.yaml").cells
    assert [s["session"] for s in sessions] == [c.session for c in cells]
    for s, c in zip(sessions, cells):
        assert s["name"] == "conformance"
        assert s["call_spec"] == {"torch": c.torch, "device": c.device.name}
        assert s["tags"] == [f"torch-{c.torch}", f"device-{c.device.name}"]
        assert s["python"] == "3.11"


def test_tag_selects_one_cell() -> None:
    [only] = listing("-t", "torch-2.15.0")
    assert only["session"] == "conformance(torch='2.15.0', device='cpu')"


def test_session_names_match_the_matrix_command_line(tmp_path: Path) -> None:
    """CI builds its job matrix from either listing; they must name the same sessions."""
    matrix = write_matrix(tmp_path, 'torch: [{version: "98.0.0"}, {version: "99.0.0"}]\n',
                          "devices: {cpu: {runner: ubuntu-latest}, cuda: {runner: [self-hosted, gpu]}}\n")
    from_nox = [s["session"] for s in listing("-s", "conformance", matrix=matrix)]
    proc = subprocess.run([sys.executable, "-m", "cpugpu_conformance.matrix", str(matrix), "--json"], check=False, capture_output=True, text=True)
    from_matrix = [c["session"] for c in json.loads(proc.stdout)["cells"]]
    assert from_nox == from_matrix == [
        "conformance(torch='98.0.0', device='cpu')", "conformance(torch='98.0.0', device='cuda')",
        "conformance(torch='99.0.0', device='cpu')", "conformance(torch='99.0.0', device='cuda')",
    ]


def test_pre_release_nightly_and_latest_entries_are_sessions_with_their_own_tags(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path, textwrap.dedent("""\
        torch:
          - {version: "98.0.0"}
          - {version: "99.0.0"}
          - {version: "99.1.0rc1"}
          - {version: "99.1.0.dev20261201", index_url: "https://download.pytorch.org/whl/nightly/cpu"}
          - {version: latest}
        """))
    sessions = listing("-s", "conformance", matrix=matrix)
    assert [(s["call_spec"]["torch"], s["tags"][0]) for s in sessions] == [
        ("98.0.0", "torch-98.0.0"), ("99.0.0", "torch-99.0.0"), ("99.1.0rc1", "torch-99.1.0rc1"),
        ("99.1.0.dev20261201", "torch-99.1.0.dev20261201"), ("latest", "torch-latest")]
    [only] = listing("-t", "torch-latest", matrix=matrix)
    assert only["session"] == "conformance(torch='latest', device='cpu')"


OTHER_SESSIONS = ["tests", "lint", "report", "gate", "bisect", "installed", "summary", "matrix", "mutation"]


def test_other_sessions_exist_and_only_lint_and_tests_run_by_default() -> None:
    assert [s["session"] for s in listing()] == ["tests", "lint"]
    every = {s["session"] for s in listing("-s", *OTHER_SESSIONS)}
    assert every == set(OTHER_SESSIONS)


@pytest.mark.parametrize(
    ("releases", "problem"),
    [
        ('torch: [{version: "98.0.0"}, {version: "99.0.0"}, {version: "2.x"}]\n',
         "torch[2].version: '2.x' is not a version like 2.13.0"),
        ('torch: [{version: "98.0.0"}, {version: "099.0.0"}]\n',
         "torch[1].version: '099.0.0' is not written canonically (no leading zeros): write '99.0.0'"),
        ('torch: [{version: "98.0.0", time_limit_s: .nan}, {version: "99.0.0"}]\n',
         "torch[0].time_limit_s: nan is not a finite number of seconds above 0"),
    ],
    ids=["malformed-version", "leading-zero", "nan-limit"],
)
def test_broken_matrix_stops_nox_before_anything_is_made(tmp_path: Path, releases: str, problem: str) -> None:
    matrix = write_matrix(tmp_path, releases)
    proc = nox("-s", "conformance", "--envdir", str(tmp_path / "envs"), matrix=matrix)
    assert proc.returncode == 2
    assert proc.stderr == f"{matrix}: {problem}\n"
    assert not (tmp_path / "envs").exists()


def test_every_cell_runs_and_the_run_fails_after_a_summary(tmp_path: Path) -> None:
    """Two releases that cannot be installed: both cells run, each records why, nox exits non-zero."""
    matrix = write_matrix(tmp_path, 'torch: [{version: "98.0.0"}, {version: "99.0.0"}]\n')
    out = tmp_path / "results"
    proc = nox("-s", "conformance", "--envdir", str(tmp_path / "envs"), matrix=matrix, results_dir=out)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for release in ("98.0.0", "99.0.0"):
        result = results.CellResult.load(out / f"torch-{release}-cpu.json")
        assert result["status"] == "not_installed"
        assert f"torch=={release}" in result["detail"]
        assert f"conformance(torch='{release}', device='cpu'): failed" in proc.stderr
    table = proc.stdout[proc.stdout.index("cell  "):].splitlines()
    assert [line.split()[:5] for line in table[1:3]] == [
        ["torch-98.0.0-cpu", "98.0.0", "cpu", "NOT", "INSTALLED"], ["torch-99.0.0-cpu", "99.0.0", "cpu", "NOT", "INSTALLED"]]
    assert table[3].startswith("torch-98.0.0-cpu: not installed: ") and "torch==98.0.0" in table[3]
    assert "2 cells, 0 clean, 2 not" in proc.stdout
    assert "Session summary failed" in proc.stderr
    assert not [p.name for p in out.glob(".*")], "no lock or staging file is left"


def test_a_cell_that_could_not_write_its_answer_is_no_result_in_the_summary_never_its_old_pass(tmp_path: Path) -> None:
    """The cell's lock cannot be taken (a folder stands there): its command ends before writing, and the
    summary must not read the pass an earlier run left at its path."""
    matrix = write_matrix(tmp_path, 'torch: [{version: "98.0.0"}, {version: "99.0.0"}]\n')
    out = tmp_path / "results"
    out.mkdir()
    _cell_result(out, "99.0.0", "passed")
    results.lock_path(out / "torch-99.0.0-cpu.json").mkdir()
    proc = nox("-t", "torch-99.0.0", "--envdir", str(tmp_path / "envs"), matrix=matrix, results_dir=out)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [row] = [line for line in proc.stdout.splitlines() if line.startswith("torch-99.0.0-cpu ")]
    assert "NO RESULT" in row and "passed" not in row, proc.stdout
    assert "its cell wrote no answer in this run" in proc.stdout
    assert results.CellResult.load(out / "torch-99.0.0-cpu.json").answer().clean, "the earlier file is left as it was"


def test_matrix_session_runs_the_cells_side_by_side_through_the_command(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path, 'torch: [{version: "98.0.0"}, {version: "99.0.0"}]\n')
    out = tmp_path / "results"
    proc = nox("-s", "matrix", "--", "--jobs", "2", "--envdir", str(tmp_path / "envs"), "--", "--promise", "1",
               matrix=matrix, results_dir=out)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "matrix: 2 cell(s), 2 at a time" in proc.stdout
    for release in ("98.0.0", "99.0.0"):
        assert results.CellResult.load(out / f"torch-{release}-cpu.json")["status"] == "not_installed"
        assert (tmp_path / "envs" / f"torch-{release}-cpu").is_dir()
    assert "2 cells, 0 clean, 2 not" in proc.stdout
    assert "Session matrix failed" in proc.stderr


def test_cell_owned_options_are_refused_after_the_double_dash(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path, 'torch: [{version: "98.0.0"}, {version: "99.0.0"}]\n')
    proc = nox("-t", "torch-99.0.0", "--envdir", str(tmp_path / "envs"), "--", "--device=cuda",
               matrix=matrix, results_dir=tmp_path / "results")
    assert proc.returncode == 1
    assert "cpugpu-conformance cell: error: --device among the pytest arguments: set devices in matrix.yaml\n" in proc.stderr
    assert not (tmp_path / "results" / "torch-99.0.0-cpu.json").exists()


def test_a_cell_installs_its_torch_and_passes_arguments_to_pytest(tmp_path: Path) -> None:
    """A real cell of the torch the tests run with (its wheels are in uv's cache by now)."""
    installed = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], check=False, capture_output=True, text=True)
    release = installed.stdout.strip().split("+")[0]
    matrix = write_matrix(tmp_path, f'torch: [{{version: "{release}"}}, {{version: "98.0.0"}}, {{version: "99.0.0"}}]\n')
    out = tmp_path / "results"
    proc = nox("-t", f"torch-{release}", "--envdir", str(tmp_path / "envs"), "--", "--promise", "1",
               matrix=matrix, results_dir=out, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = results.CellResult.load(out / f"torch-{release}-cpu.json")
    assert result.status == "completed" and result.answer().clean
    assert result["environment"]["torch"].split("+")[0] == release
    assert result.outcome("1", "cpu").kind == "passed"
    assert result.outcome("2", "cpu").kind == "not_requested", "--promise 1 reached pytest"
    assert result["requested"]["requirements"] == [f"torch=={release}", "numpy"]
    log = (out / f"torch-{release}-cpu.log").read_text()
    assert f"torch=={release}" in log and "--promise 1" in log


def _cell_result(out: Path, release: str, verdict: str) -> None:
    failed = {("1", "cpu"): [rf.failure("t", "shape differs", "print(1)")]} if verdict == "failed" else None
    results.CellResult(rf.completed(release, cell=f"torch-{release}-cpu", failed=failed)).write(out / f"torch-{release}-cpu.json")


def test_gate_maps_release_numbers_to_result_files_and_defaults_to_the_matrix(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path, 'torch: [{version: "97.0.0"}, {version: "98.0.0"}, {version: "99.0.0"}, {version: latest}]\n')
    out = tmp_path / "results"
    _cell_result(out, "97.0.0", "passed")
    _cell_result(out, "98.0.0", "passed")
    _cell_result(out, "99.0.0", "failed")
    envdir = str(tmp_path / "envs")
    default = nox("-s", "gate", "--envdir", envdir, matrix=matrix, results_dir=out)  # 98.0.0 -> 99.0.0
    assert default.returncode == 1
    assert "torch-98.0.0-cpu.json -> " in default.stderr and "torch-99.0.0-cpu.json (regressed)" in default.stderr
    fine = nox("-s", "gate", "--envdir", envdir, "--", "--baseline", "97.0.0", "--candidate", "98.0.0", matrix=matrix, results_dir=out)
    assert fine.returncode == 0, fine.stdout + fine.stderr
    missing = nox("-s", "gate", "--envdir", envdir, "--", "--candidate", str(out / "nope.json"), matrix=matrix, results_dir=out)
    assert missing.returncode == 1 and "nope.json (nothing to compare)" in missing.stderr
    results.CellResult(rf.completed("99.0.0", cell="torch-latest-cpu")).write(out / "torch-latest-cpu.json")  # latest was 99.0.0
    latest = nox("-s", "gate", "--envdir", envdir, "--", "--baseline", "98.0.0", "--candidate", "latest", matrix=matrix,
                 results_dir=out)
    assert latest.returncode == 0, latest.stdout + latest.stderr
    assert f"--candidate {out / 'torch-latest-cpu.json'}" in latest.stderr, "latest names the latest cell's result file"


def test_installed_session_tests_the_torch_already_there_and_installs_nothing(tmp_path: Path) -> None:
    out = tmp_path / "results"
    env = {"CONFORMANCE_PYTHON": sys.executable}
    proc = subprocess.run([*nox_command(), "-f", str(ROOT / "noxfile.py"), "-s", "installed", "--envdir", str(tmp_path / "envs"),
                           "--", "--device", "cpu", "--promise", "1"],
                          check=False, capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env=dict(os.environ, NOX_SCRIPT_MODE="none", CONFORMANCE_RESULTS=str(out), **env))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [path] = out.glob("installed-torch-*-cpu.json")
    result = results.CellResult.load(path)
    assert result.status == "completed" and result.answer().clean
    assert result["requested"]["torch"] == result["environment"]["torch"].split("+")[0]
    assert result.outcome("1", "cpu").kind == "passed"
    assert not (tmp_path / "envs").exists() or not any((tmp_path / "envs").iterdir()), "no environment was made"


def test_bisect_needs_two_releases() -> None:
    proc = nox("-s", "bisect", "--", "2.13.0")
    assert proc.returncode == 1
    assert "cpugpu-conformance bisect: error: the following arguments are required: BAD" in proc.stderr
    assert "Session bisect aborted: cpugpu-conformance bisect exited 2" in proc.stderr


# --------------------------------------------------------------------------- interrupts and busy result paths, through nox
# The `installed` session with a fake interpreter (tests/test_cell.py): nothing to install, a suite held mid-run.


def nox_installed(tmp_path: Path, python: Path, *args: str) -> tuple[list[str], dict[str, str]]:
    cmd = [*nox_command(), "-f", str(ROOT / "noxfile.py"), "-s", "installed", "--envdir", str(tmp_path / "envs"),
           "--", "--device", "cpu", *args]
    env = dict(os.environ, NOX_SCRIPT_MODE="none", CONFORMANCE_RESULTS=str(tmp_path / "results"), CONFORMANCE_PYTHON=str(python))
    env.pop("CONFORMANCE_MATRIX", None)
    return cmd, env


def test_sigterm_to_nox_stops_the_suite_and_records_the_cell_as_interrupted(tmp_path: Path) -> None:
    pids_file = tmp_path / "suite.pids"
    cmd, env = nox_installed(tmp_path, fake_python(tmp_path / "held", HELD_SUITE.format(pids=str(pids_file))))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pids: list[int] = []
    try:
        pids = wait_for(lambda: held_suite_pids(pids_file), "the suite to start", timeout=120)  # type: ignore[assignment]
        proc.send_signal(signal.SIGTERM)  # what a CI cancel sends
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 130, out  # nox stops as on Ctrl-C: no later session runs
        assert "Session installed interrupted" in out
        for pid in pids:
            wait_for(lambda pid=pid: is_gone(pid), f"process {pid} of the test group to end", timeout=15)
        out_dir = tmp_path / "results"
        result = results.CellResult.load(out_dir / "installed-torch-2.15.0-cpu.json")
        assert result.status == "interrupted"
        assert result["detail"].startswith("interrupted by SIGTERM") and "still testing" in result["detail"]
        assert not [p.name for p in out_dir.glob(".*")], "no staging file, lock or temporary file is left"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_a_second_run_on_a_busy_result_path_is_a_session_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "results" / "installed-torch-2.15.0-cpu.json"
    results.CellResult.new("installed-torch-2.15.0-cpu", "crashed", detail="the running one's").write(path)
    before = path.read_bytes()
    cmd, env = nox_installed(tmp_path, fake_python(tmp_path / "fake", writes_result("passed")))
    with results.exclusive(path):  # another run holds the path
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1
    assert f"nox > Session installed aborted: {path}: another run is writing this result file (pid {os.getpid()}, since " \
        in proc.stderr
    assert "suite args" not in proc.stdout + proc.stderr, "nothing ran"
    assert path.read_bytes() == before
