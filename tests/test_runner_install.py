"""runner/install.py: environments, the installer and its progress, and the check that the
environment holds the torch the cell asked for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from cell_helpers import ROOT, fake_python, is_gone, leftovers, on_disk, spec, wait_for, writes_result

from cpugpu_conformance.runner import cell
from cpugpu_conformance.runner import install as installer
from cpugpu_conformance.runner.install import Install, torch_mismatch
from cpugpu_conformance.runner.matrix import Release

# --------------------------------------------------------------------------- the torch it asked for


def test_wrong_torch_version_stops_the_cell_before_testing(tmp_path: Path) -> None:
    s = spec(tmp_path)
    result = cell.run_cell(s, fake_python(tmp_path, writes_result("passed"), torch_version="2.14.1+cu130"))
    assert result["status"] == "wrong_torch"
    assert result["detail"].startswith("asked for torch 2.15.0, the environment has torch 2.14.1+cu130 (")
    assert "suite args" not in s.log_path.read_text(), "the suite never ran"
    assert not result.answer().clean


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
    probe = installer.probe_torch(fake_python(tmp_path, "", torch_version="2.9.1+cu128", cuda="12.8"))
    assert (probe["torch"], probe["torch_cuda"], probe["torch_git_version"]) == ("2.9.1+cu128", "12.8", "abc123")
    assert probe["torch_location"] == str((tmp_path / "site" / "torch").resolve())



# --------------------------------------------------------------------------- installing


def test_release_that_does_not_exist_is_not_installed_with_the_installers_error(tmp_path: Path) -> None:
    python = installer.create_env(tmp_path / "env", f"{sys.version_info.major}.{sys.version_info.minor}")
    s = spec(tmp_path, release=Release("99.0.0"), name="torch-99.0.0-cpu")
    result = cell.install_and_run(s, python, env_dir=tmp_path / "env")
    assert result == on_disk(s)
    assert result["status"] == "not_installed"
    assert "torch==99.0.0" in result["detail"]
    assert result["requested"]["requirements"] == ["torch==99.0.0", "numpy"]
    assert "torch==99.0.0" in s.log_path.read_text()


def test_install_command_takes_torch_from_the_index_and_the_project_from_a_file() -> None:
    cmd = installer.install_command(Path("/env/bin/python"), Release("2.1.2", numpy="<2", extra_packages=("setuptools",)),
                               index_url="https://download.pytorch.org/whl/cpu", requirements_file=Path("/tmp/p.txt"))
    tail = ["torch==2.1.2", "numpy<2", "setuptools", "-r", "/tmp/p.txt", "--extra-index-url", "https://download.pytorch.org/whl/cpu"]
    assert cmd[-len(tail):] == tail


def test_install_error_keeps_the_end_of_the_installers_output() -> None:
    out = "\n".join(f"line {i}" for i in range(100))
    detail = Install(False, ["uv", "pip", "install", "torch==99"], out, 0.1).error()
    assert detail.startswith("uv pip install torch==99 failed:\n")
    assert detail.endswith("line 99") and "line 59" not in detail


# --------------------------------------------------------------------------- the installer's output, as it comes

# A fake uv: says what it downloads (on stderr, as uv does), then waits for the test's go-ahead
# (a file) before it finishes, so the test can look at the output while it is still running.
SLOW_INSTALLER = """\
    import os, sys, time
    gate, pidfile, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(pidfile + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(pidfile + ".tmp", pidfile)
    print("Resolved 30 packages in 395ms", file=sys.stderr, flush=True)
    print("Downloading torch (846.9MiB)", file=sys.stderr, flush=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)
    print(" Downloaded torch", file=sys.stderr, flush=True)
    print("Installed 30 packages in 359ms", flush=True)
    sys.exit(code)
"""

# The cell runner's installer step in a process of its own, its stdout a pipe as in CI.
INSTALL_RUNNER = """\
    import sys
    from pathlib import Path
    from cpugpu_conformance.runner import install as installer
    done = installer.run_installer({cmd!r}, log_path=Path({log!r}), heartbeat_s={heartbeat!r})
    print("runner:", "ok" if done.ok else "failed", "kept:", done.output.replace(chr(10), " | "), flush=True)
"""


class Installing:
    """A runner process whose fake installer is held mid-download until ``release()``."""

    def __init__(self, tmp_path: Path, heartbeat_s: float = 600, code: int = 0) -> None:
        installer = tmp_path / "installer.py"
        installer.write_text(textwrap.dedent(SLOW_INSTALLER))
        self.gate, self.pid_file, self.log = tmp_path / "go", tmp_path / "installer.pid", tmp_path / "cell.log"
        cmd = [sys.executable, str(installer), str(self.gate), str(self.pid_file), str(code)]
        script = tmp_path / "runner.py"
        script.write_text(textwrap.dedent(INSTALL_RUNNER.format(cmd=cmd, log=str(self.log), heartbeat=heartbeat_s)))
        self.proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(line.rstrip("\n") for line in self.proc.stdout),
                                       daemon=True)
        self.reader.start()

    def said(self, text: str) -> list[str]:
        return [line for line in list(self.lines) if text in line]

    def installer_pid(self) -> int:
        return int(wait_for(lambda: self.pid_file.exists() and self.pid_file.read_text(), "the installer to start"))

    def release(self) -> list[str]:
        self.gate.write_text("go")
        self.proc.wait(timeout=60)
        self.reader.join(timeout=10)
        return list(self.lines)

    def cleanup(self) -> None:
        self.gate.write_text("go")
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def installing(tmp_path: Path):
    runs: list[Installing] = []

    def start(**kw) -> Installing:
        runs.append(Installing(tmp_path, **kw))
        return runs[-1]

    yield start
    for run in runs:
        run.cleanup()


def test_the_installers_lines_reach_the_output_and_the_log_while_it_runs(installing) -> None:
    run = installing()
    wait_for(lambda: run.said("Downloading torch (846.9MiB)"), "the first download line, before the installer ends")
    pid = run.installer_pid()
    assert not is_gone(pid), "the installer is still running: it waits for the test"
    assert run.said("cell: ") and run.said("installer.py"), "the command line comes first"
    assert "Resolved 30 packages in 395ms\nDownloading torch (846.9MiB)\n" in run.log.read_text(), "the log has it too, already"
    assert not run.said("Installed 30 packages")
    lines = run.release()
    assert run.proc.returncode == 0
    assert lines[-3:-1] == [" Downloaded torch", "Installed 30 packages in 359ms"]
    assert lines[-1].startswith("runner: ok kept: Resolved 30 packages in 395ms | Downloading torch (846.9MiB) |")
    assert run.log.read_text().endswith(" Downloaded torch\nInstalled 30 packages in 359ms\n")


def test_a_quiet_installer_gets_a_heartbeat_that_names_the_download_and_the_log(installing) -> None:
    run = installing(heartbeat_s=0.1)
    # (an earlier beat may come before the installer has said anything: it names no download)
    [beat, *_] = wait_for(lambda: run.said("; downloading torch (846.9MiB); "), "a heartbeat naming the download")
    assert beat.startswith("cell: still installing (") and beat.endswith(f" s; downloading torch (846.9MiB); log: {run.log})")
    lines = run.release()
    assert "still installing" not in run.log.read_text(), "heartbeats are not the installer's output"
    assert "still installing" not in lines[-1], "nor part of the tail kept for not_installed"


def test_a_heartbeat_names_only_the_downloads_not_yet_done() -> None:
    progress = installer._InstallProgress()
    for line in ["Downloading torch (846.9MiB)", "Downloading nvidia-cudnn-cu13 (674.0MiB)", " Downloaded torch"]:
        progress.add(line)
    assert progress.heartbeat(None).endswith(" s; downloading nvidia-cudnn-cu13 (674.0MiB))")
    progress.add(" Downloaded nvidia-cudnn-cu13")
    assert progress.heartbeat(Path("r/x.log")).endswith(" s; log: r/x.log)")


def test_a_failed_install_keeps_the_tail_for_not_installed(installing) -> None:
    run = installing(code=1)
    wait_for(lambda: run.said("Downloading torch"), "the installer to start")
    lines = run.release()
    assert lines[-1].startswith("runner: failed kept: Resolved 30 packages")


def test_an_installer_that_cannot_start_is_a_failed_install_not_a_crash(tmp_path: Path) -> None:
    done = installer.run_installer([str(tmp_path / "no-uv-here"), "pip", "install", "torch==2.15.0"], log_path=tmp_path / "log")
    assert not done.ok
    assert done.error().startswith(f"{tmp_path / 'no-uv-here'} pip install torch==2.15.0 failed:\ncannot start the installer: ")
    assert "cannot start the installer" in (tmp_path / "log").read_text()


# The cell runner installing (held) in a process of its own, for the signal.
INSTALL_AND_RUN = """\
    import sys
    from pathlib import Path
    from cpugpu_conformance.runner import CellSpec, cell, processes
    from cpugpu_conformance.runner import install as installer
    from cpugpu_conformance.runner.matrix import Release
    installer.install_command = lambda *args, **kw: {cmd!r}
    spec = CellSpec(name="torch-2.15.0-cpu", release=Release("2.15.0"), device="cpu", hypothesis_profile="ci",
                    time_limit_s=600, results_dir=Path({results!r}), project_dir=Path({root!r}))
    try:
        cell.install_and_run(spec, Path(sys.executable))
    except processes.CellInterrupted as exc:
        print("runner stopped by", exc.signum, flush=True)
        sys.exit(3)
"""


def test_a_signal_while_installing_stops_the_installer_and_records_interrupted(tmp_path: Path) -> None:
    installer = tmp_path / "installer.py"
    installer.write_text(textwrap.dedent(SLOW_INSTALLER))
    pid_file = tmp_path / "installer.pid"
    cmd = [sys.executable, str(installer), str(tmp_path / "never"), str(pid_file), "0"]
    script = tmp_path / "runner.py"
    s = spec(tmp_path)
    script.write_text(textwrap.dedent(INSTALL_AND_RUN.format(cmd=cmd, results=str(s.results_dir), root=str(ROOT))))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pid = None
    try:
        pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), "the installer to start"))
        wait_for(lambda: "Downloading torch" in s.log_path.read_text(), "the installer's first lines in the log")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 3 and f"runner stopped by {int(signal.SIGTERM)}" in out, out
        wait_for(lambda: is_gone(pid), "the installer to be stopped with the cell", timeout=15)
        result = on_disk(s)
        assert result.status == "interrupted"
        assert result["detail"].startswith("interrupted by SIGTERM") and "Downloading torch (846.9MiB)" in result["detail"]
        assert leftovers(s) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        if pid is not None and not is_gone(pid):
            os.kill(pid, signal.SIGKILL)


