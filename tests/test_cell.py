"""cell.py: every way a cell can end is recorded, and a cell never passes on the wrong torch.

The fault tests use a fake interpreter: it answers the torch probe (``python -c``) like
Python, with a fake torch package of the version a test chooses, and does whatever the
test asks instead of running pytest.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cpugpu_conformance import cell, results
from cpugpu_conformance.cell import CellSpec, Install, torch_mismatch
from cpugpu_conformance.matrix import Release

ROOT = Path(__file__).resolve().parents[1]


def fake_torch(where: Path, version: str = "2.15.0+cu130", cuda: str | None = "13.0") -> Path:
    pkg = where / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('a fake torch, only version.py is real')\n")
    (pkg / "version.py").write_text(textwrap.dedent(f"""\
        from typing import Optional
        __version__ = {version!r}
        cuda: Optional[str] = {cuda!r}
        git_version = 'abc123'
    """))
    return where


def fake_python(tmp_path: Path, behaviour: str, *, torch_version: str = "2.15.0+cu130", cuda: str | None = "13.0") -> Path:
    """An interpreter whose torch is fake and whose `-m pytest ...` runs ``behaviour`` (argv kept)."""
    site = fake_torch(tmp_path / "site", torch_version, cuda)
    script = tmp_path / "behaviour.py"
    script.write_text(textwrap.dedent(behaviour))
    exe = tmp_path / "python"
    exe.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        export PYTHONPATH={site}
        if [ "$1" = "-c" ]; then exec {sys.executable} "$@"; fi
        shift 2  # -m pytest
        exec {sys.executable} {script} "$@"
    """))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def spec(tmp_path: Path, *, release: Release | None = None, limit: float = 60, device: str | None = "cpu",
         name: str = "torch-2.15.0-cpu") -> CellSpec:
    return CellSpec(name=name, release=release or Release("2.15.0"), device=device, hypothesis_profile="ci", time_limit_s=limit,
                    results_dir=tmp_path / "results", project_dir=ROOT)


# Writes a completed result where the suite would (argv: conformance --cell-result PATH --cell-name NAME ...).
WRITE_RESULT = """\
    import sys
    sys.path.insert(0, {src!r})
    from cpugpu_conformance import results
    args = sys.argv[1:]
    path, name = args[args.index("--cell-result") + 1], args[args.index("--cell-name") + 1]
    verdict = {verdict!r}
    results.write_atomic(path, results.new_result(
        name, "completed", environment={{"torch": {torch!r}}}, duration_s=1.5,
        devices={{"cpu": {{"status": "tested"}}, "cuda": {{"status": "skipped", "reason": "no CUDA device"}}}},
        promises={{"1": {{"title": "Shape and dtype", "devices": {{"cpu": {{"verdict": verdict}},
                                                               "cuda": {{"verdict": "skipped"}}}}}}}},
        counts={{"passed": int(verdict == "passed"), "failed": int(verdict == "failed"), "skipped": 1}}))
    print("suite args:", " ".join(args))
    sys.exit(0 if verdict == "passed" else 1)
"""


def writes_result(verdict: str = "passed", torch: str = "2.15.0+cu130") -> str:
    return WRITE_RESULT.format(src=str(ROOT / "src"), verdict=verdict, torch=torch)


def on_disk(s: CellSpec) -> dict:
    return results.load(s.result_path)


# --------------------------------------------------------------------------- outcomes of the test process


def test_finished_run_keeps_the_suites_result_and_the_command_it_was_given(tmp_path: Path) -> None:
    s = spec(tmp_path)
    s.pytest_args = ("--impl", "pkg.mod:Cls")
    result = cell.run_cell(s, fake_python(tmp_path, writes_result("passed")))
    assert result == on_disk(s)
    assert result["status"] == "completed" and cell.is_ok(result)
    assert result["requested"]["torch"] == "2.15.0" and result["requested"]["device"] == "cpu"
    log = s.log_path.read_text()
    assert "suite args: conformance --cell-result" in log
    assert "--cell-name torch-2.15.0-cpu --hypothesis-profile ci -p no:cacheprovider --device cpu --impl pkg.mod:Cls" in log
    assert not list(s.results_dir.glob(".*")), "the staging file is gone"


def test_failed_promise_is_a_completed_cell_that_is_not_ok(tmp_path: Path) -> None:
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, writes_result("failed")))
    assert result["status"] == "completed"
    assert not cell.is_ok(result)
    assert cell.describe(result).startswith("FAILED (0 passed, 1 failed, 1 skipped")


def test_abort_is_recorded_as_crashed_with_the_log_tail(tmp_path: Path) -> None:
    s = spec(tmp_path)
    result = cell.run_cell(s, fake_python(tmp_path, "import os\nprint('collecting the buffer tests')\nos.abort()\n"))
    assert result == on_disk(s)
    assert result["status"] == "crashed"
    assert result["detail"].startswith("killed by SIGABRT; last lines of the log:")
    assert "collecting the buffer tests" in result["detail"]
    assert result["environment"]["torch"] == "2.15.0+cu130"  # what the cell had, for the report
    assert "promises" not in result


def test_killed_like_out_of_memory_is_crashed(tmp_path: Path) -> None:
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"))
    assert result["status"] == "crashed" and result["detail"].startswith("killed by SIGKILL")


def test_stale_pass_does_not_survive_a_crash(tmp_path: Path) -> None:
    s = spec(tmp_path)
    cell.run_cell(s, fake_python(tmp_path / "a", writes_result("passed")))
    assert on_disk(s)["status"] == "completed"
    cell.run_cell(s, fake_python(tmp_path / "b", "import os\nos.abort()\n"))
    assert on_disk(s)["status"] == "crashed"


def test_past_the_time_limit_is_timed_out_and_the_process_group_is_gone(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    behaviour = f"""\
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("still testing", flush=True)
        time.sleep(60)
    """
    s = spec(tmp_path, limit=1)
    started = time.monotonic()
    result = cell.run_cell(s, fake_python(tmp_path, behaviour))
    assert time.monotonic() - started < 30
    assert result["status"] == "timed_out"
    assert result["detail"].startswith("killed after the cell's time limit of 1 s; last lines of the log:")
    assert "still testing" in result["detail"]
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the child is killed; it is reaped by init shortly after
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        state = Path(f"/proc/{child}/stat").read_text().split()[2] if Path(f"/proc/{child}/stat").exists() else "X"
        if state in ("Z", "X"):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the test process's child {child} outlived the time limit")


@pytest.mark.parametrize(
    ("behaviour", "headline"),
    [
        ("import sys\nprint('ERROR: usage: bad --impl')\nsys.exit(4)\n", "pytest exited 4 (usage error)"),
        ("import sys\nsys.exit(5)\n", "pytest exited 5 (no tests collected)"),
        ("print('all fine, honest')\n", "pytest exited 0 without a usable result file"),
    ],
    ids=["usage-error", "nothing-collected", "no-result-file"],
)
def test_a_run_that_did_not_finish_its_job_is_an_error(tmp_path: Path, behaviour: str, headline: str) -> None:
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, behaviour))
    assert result["status"] == "error"
    assert result["detail"].startswith(headline)


def test_an_invalid_result_file_is_an_error_not_a_pass(tmp_path: Path) -> None:
    behaviour = """\
        import sys
        args = sys.argv[1:]
        open(args[args.index("--cell-result") + 1], "w").write('{"status": "completed"}')
    """
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, behaviour))
    assert result["status"] == "error"
    assert "not a valid cell result" in result["detail"]


# --------------------------------------------------------------------------- the torch it asked for


def test_wrong_torch_version_stops_the_cell_before_testing(tmp_path: Path) -> None:
    s = spec(tmp_path)
    result = cell.run_cell(s, fake_python(tmp_path, writes_result("passed"), torch_version="2.14.1+cu130"))
    assert result["status"] == "wrong_torch"
    assert result["detail"].startswith("asked for torch 2.15.0, the environment has torch 2.14.1+cu130 (")
    assert "suite args" not in s.log_path.read_text(), "the suite never ran"
    assert not cell.is_ok(result)


def test_torch_the_suite_imported_is_checked_too(tmp_path: Path) -> None:
    # version.py said 2.15.0 but the suite reports 2.14.1: trust the suite, refuse the verdicts.
    result = cell.run_cell(spec(tmp_path), fake_python(tmp_path, writes_result("passed", torch="2.14.1")))
    assert result["status"] == "wrong_torch"
    assert result["detail"] == "asked for torch 2.15.0, the suite imported torch 2.14.1"
    assert "promises" not in result


@pytest.mark.parametrize(
    ("probe", "release", "device", "problem"),
    [
        ({"torch": "2.15.0+cu130", "torch_cuda": "13.0", "numpy": "2.1.0"}, Release("2.15.0"), "cuda", None),
        ({"torch": "2.15.0", "torch_cuda": None}, Release("2.15.0"), "cpu", None),
        ({"torch": "2.15.0+cu130", "torch_cuda": "13.0"}, Release("2.15.0", build="cpu"), "cpu", "the cu130 build"),
        ({"torch": "2.15.0", "torch_cuda": None}, Release("2.15.0", build="cu130"), "cpu", "the default build"),
        ({"torch": "2.15.0+cpu", "torch_cuda": None}, Release("2.15.0"), "cuda", "a CPU-only build"),
        ({"torch": "2.1.2+cu121", "numpy": "2.1.0"}, Release("2.1.2", numpy="<2"), "cpu", "the environment has numpy 2.1.0"),
        ({"torch": "2.1.2+cu121", "numpy": "1.26.4"}, Release("2.1.2", numpy="<2"), "cpu", None),
        ({"torch_error": "SyntaxError: bad"}, Release("2.1.2"), "cpu", "SyntaxError: bad"),
        ({}, Release("2.1.2"), "cpu", "torch is not importable"),
        ({"probe_error": "No such file"}, Release("2.1.2"), "cpu", "cannot inspect the environment"),
        ({"torch": "2.13.0"}, Release("2.1.3"), "cpu", "the environment has torch 2.13.0"),
    ],
)
def test_torch_mismatch(probe: dict, release: Release, device: str, problem: str | None) -> None:
    found = torch_mismatch(probe, release, device)
    assert (found is None) if problem is None else (problem in (found or "")), found


def test_torch_from_outside_the_cell_environment_is_wrong(tmp_path: Path) -> None:
    probe = {"torch": "2.15.0", "torch_location": str(tmp_path / "elsewhere" / "torch")}
    assert "imported from outside it" in torch_mismatch(probe, Release("2.15.0"), "cpu", env_dir=tmp_path / "env")
    probe["torch_location"] = str((tmp_path / "env" / "lib" / "torch").resolve())
    assert torch_mismatch(probe, Release("2.15.0"), "cpu", env_dir=tmp_path / "env") is None


def test_probe_reads_the_torch_without_importing_it(tmp_path: Path) -> None:
    probe = cell.probe_torch(fake_python(tmp_path, "", torch_version="2.9.1+cu128", cuda="12.8"))
    assert (probe["torch"], probe["torch_cuda"], probe["torch_git_version"]) == ("2.9.1+cu128", "12.8", "abc123")
    assert probe["torch_location"] == str((tmp_path / "site" / "torch").resolve())


# --------------------------------------------------------------------------- installing


def test_release_that_does_not_exist_is_not_installed_with_the_installers_error(tmp_path: Path) -> None:
    python = cell.create_env(tmp_path / "env", f"{sys.version_info.major}.{sys.version_info.minor}")
    s = spec(tmp_path, release=Release("99.0.0"), name="torch-99.0.0-cpu")
    result = cell.install_and_run(s, python, env_dir=tmp_path / "env")
    assert result == on_disk(s)
    assert result["status"] == "not_installed"
    assert "torch==99.0.0" in result["detail"]
    assert result["requested"]["requirements"] == ["torch==99.0.0", "numpy"]
    assert "torch==99.0.0" in s.log_path.read_text()


def test_install_command_takes_torch_from_the_index_and_the_project_from_a_file() -> None:
    cmd = cell.install_command(Path("/env/bin/python"), Release("2.1.2", numpy="<2", extra_packages=("setuptools",)),
                               index_url="https://download.pytorch.org/whl/cpu", requirements_file=Path("/tmp/p.txt"))
    tail = ["torch==2.1.2", "numpy<2", "setuptools", "-r", "/tmp/p.txt", "--extra-index-url", "https://download.pytorch.org/whl/cpu"]
    assert cmd[-len(tail):] == tail


def test_install_error_keeps_the_end_of_the_installers_output() -> None:
    out = "\n".join(f"line {i}" for i in range(100))
    detail = Install(False, ["uv", "pip", "install", "torch==99"], out, 0.1).error()
    assert detail.startswith("uv pip install torch==99 failed:\n")
    assert detail.endswith("line 99") and "line 59" not in detail


# --------------------------------------------------------------------------- summary


def _write(dirpath: Path, name: str, status: str, **fields) -> None:
    results.write_atomic(dirpath / f"{name}.json", results.new_result(name, status, **fields))


def test_summary_table_shows_every_cell_and_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "results"
    promises = {"1": {"title": "t", "devices": {"cpu": {"verdict": "passed"}, "cuda": {"verdict": "skipped"}}},
                "11": {"title": "t", "devices": {"cpu": {"verdict": "recorded"}}}}
    _write(d, "torch-2.13.0-cpu", "completed", requested={"torch": "2.13.0", "device": "cpu"}, promises=promises, duration_s=12.5)
    _write(d, "torch-2.9.1-cpu", "crashed", requested={"torch": "2.9.1", "device": "cpu"}, detail="killed by SIGABRT")
    _write(d, "torch-99.0.0-cpu", "not_installed", requested={"torch": "99.0.0", "device": "cpu"}, detail="no torch")
    rows = cell.summarize(d, ["torch-2.13.0-cpu", "torch-2.9.1-cpu", "torch-99.0.0-cpu", "torch-2.15.0-cpu"])
    table = cell.format_summary(rows)
    lines = table.splitlines()
    assert lines[0].split() == ["cell", "torch", "device", "status", "passed", "failed", "skipped", "recorded", "duration"]
    assert lines[1].split()[:4] == ["torch-2.9.1-cpu", "2.9.1", "cpu", "CRASHED"]
    assert lines[2].split() == ["torch-2.13.0-cpu", "2.13.0", "cpu", "passed", "1", "0", "1", "1", "12.5", "s"]
    assert lines[3].split()[:5] == ["torch-2.15.0-cpu", "2.15.0", "cpu", "NO", "RESULT"], "a cell without a file is shown, not dropped"
    assert lines[4].split()[:5] == ["torch-99.0.0-cpu", "99.0.0", "cpu", "NOT", "INSTALLED"]
    assert lines[-1].startswith("4 cells, 1 clean, 3 not")
    assert cell.main(["summary", str(d)]) == 1
    assert cell.main(["summary", str(d), "--cells", "torch-2.13.0-cpu"]) == 0
    assert cell.main(["summary", str(tmp_path / "empty")]) == 2


def test_summary_of_an_unreadable_file_is_not_ok(tmp_path: Path) -> None:
    (tmp_path / "torch-2.13.0-cpu.json").write_text("{not json")
    [row] = cell.summarize(tmp_path)
    assert (row.status, row.ok) == ("unreadable", False)


def test_result_file_json_is_what_the_schema_accepts(tmp_path: Path) -> None:
    s = spec(tmp_path)
    cell.run_cell(s, fake_python(tmp_path, "import os\nos.abort()\n"))
    data = json.loads(s.result_path.read_text())
    results.validate(data)
    assert data["requested"] == {"device": "cpu", "hypothesis_profile": "ci", "time_limit_s": 60, "torch": "2.15.0",
                                 "numpy": None, "build": None, "requirements": ["torch==2.15.0", "numpy"],
                                 "index_url": None}


# --------------------------------------------------------------------------- the real suite (issue 4)
# These run `pytest conformance` with the torch of the interpreter running the tests.

ABORTING_IMPL = """\
import os


class Buffer:
    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        os.abort()
"""


def real_cell(tmp_path: Path, name: str, *pytest_args: str, limit: float = 600, profile: str = "ci") -> dict:
    installed = cell.base_version(cell.probe_torch(sys.executable)["torch"])
    s = CellSpec(name=name, release=Release(installed), device="cpu", hypothesis_profile=profile, time_limit_s=limit,
                 results_dir=tmp_path / "results", project_dir=ROOT, pytest_args=pytest_args)
    return cell.run_cell(s, sys.executable)


def test_each_fault_gets_its_own_mark_in_the_report_while_the_other_cells_stand(tmp_path: Path) -> None:
    impl = tmp_path / "aborting.py"
    impl.write_text(ABORTING_IMPL)
    real_cell(tmp_path, "reference", "--promise", "1,2")
    real_cell(tmp_path, "aborting-impl", "--impl", f"{impl}:Buffer", "--promise", "1")
    real_cell(tmp_path, "one-second-limit", limit=1)
    python = cell.create_env(tmp_path / "env", f"{sys.version_info.major}.{sys.version_info.minor}")
    cell.install_and_run(spec(tmp_path, release=Release("99.0.0"), name="torch-99.0.0-cpu"), python)

    out = tmp_path / "compat"
    proc = subprocess.run([sys.executable, "-m", "cpugpu_conformance", "report", str(tmp_path / "results"), "--out", str(out)],
                          check=False, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    cells = {c["cell"]: c for c in json.loads((out / "compat.json").read_text())["cells"]}
    assert set(cells) == {"reference", "aborting-impl", "one-second-limit", "torch-99.0.0-cpu"}
    expected = {"aborting-impl": "crashed", "one-second-limit": "timed_out", "torch-99.0.0-cpu": "not_installed"}
    for name, status in expected.items():
        assert cells[name]["status"] == status
        marks = {m["mark"] for by_device in cells[name]["marks"].values() for m in by_device.values()}
        assert marks == {status}, (name, marks)
    assert cells["reference"]["status"] == "completed"
    assert cells["reference"]["marks"]["1"]["cpu"]["mark"] == "passed"
    assert cells["reference"]["marks"]["2"]["cpu"]["mark"] == "passed"
    assert "SIGABRT" in cells["aborting-impl"]["detail"]
    markdown = (out / "COMPAT.md").read_text()
    for label in ("💥 crashed", "⏱ timed out", "📦 not installed", "✅ pass"):
        assert label in markdown


def _verdicts(result: dict) -> dict:
    return {(p, d): (v["verdict"], v.get("passed"), v.get("failed"), v.get("skipped"),
                     [(f["test"], f["message"], f.get("reproducer")) for f in v.get("failures") or []])
            for p, promise in result["promises"].items() for d, v in promise["devices"].items()}


def test_ci_profile_gives_the_same_verdicts_twice(tmp_path: Path) -> None:
    """The gate compares two runs; with the derandomized profile a run is a function of torch and the class."""
    # A broken class, so that there are failures (and their minimal examples) to compare, not only passes.
    args = ("--impl", "cpugpu_conformance.variants:HalfFixedCpuGpuBuffer")
    first = real_cell(tmp_path / "a", "twice", *args)
    second = real_cell(tmp_path / "b", "twice", *args)
    assert first["status"] == second["status"] == "completed"
    assert any(v[0] == "failed" for v in _verdicts(first).values()), "the broken class must fail something"
    assert any(v[0] == "passed" for v in _verdicts(first).values())
    assert _verdicts(first) == _verdicts(second)
    assert first["observations"] == second["observations"]
