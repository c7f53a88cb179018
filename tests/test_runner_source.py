"""Where a cell's suite comes from and where its environment goes (runner/source.py), and a cell
whose plugin never loads (issue 28, item 6): its result path says so, never an earlier pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import result_factory as rf
from suite_runner import REPO, suite_env

from cpugpu_conformance import results
from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.runner import matrix as matrices
from cpugpu_conformance.runner import source

PACKAGE = REPO / "src" / "cpugpu_conformance"
RELEASE = "2.13.0"  # the test environment's torch


def fake_installed(where: Path, requires: list[str] | None = None) -> tuple[Path, Path]:
    """site-packages with a cpugpu_conformance that ships its suite, and its dist-info."""
    package = where / "cpugpu_conformance"
    (package / "suite" / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "suite" / "conftest.py").write_text("")
    (package / "suite" / source.SUITE_INI).write_text("[pytest]\n")
    (package / "suite" / "__pycache__" / "conftest.cpython-311.pyc").write_bytes(b"")
    info = where / "cpugpu_conformance-0.1.0.dist-info"
    info.mkdir()
    lines = "".join(f"Requires-Dist: {r}\n" for r in (requires or []))
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: cpugpu-conformance\nVersion: 0.1.0\n{lines}")
    return package, info


def test_from_this_checkout_the_cells_run_the_checkout():
    assert source.this_package() == REPO
    assert source.checkout_of(PACKAGE) == REPO


def test_an_installed_package_with_its_suite_is_what_the_cells_run(tmp_path):
    package, _ = fake_installed(tmp_path / "site-packages")
    found = source.this_package(package)
    assert isinstance(found, source.InstalledPackage) and found.folder == package and found.suite == package / "suite"


def test_a_package_without_its_suite_is_refused_in_one_line(tmp_path):
    (tmp_path / "cpugpu_conformance").mkdir()
    with pytest.raises(source.NoSuite) as caught:
        source.this_package(tmp_path / "cpugpu_conformance")
    assert len(str(caught.value).splitlines()) == 1 and "install the wheel" in str(caught.value)


def test_the_requirements_are_the_packages_own_without_its_extras(tmp_path):
    package, info = fake_installed(tmp_path, ["hypothesis>=6.100", "pytest>=7.4", 'pyyaml>=6; extra == "tools"'])
    assert source.InstalledPackage(package, info).requirements() == ["hypothesis>=6.100", "pytest>=7.4"]
    assert source.InstalledPackage(package).requirements() == list(source.FALLBACK_REQUIREMENTS)


def test_the_copy_holds_the_package_and_its_dist_info_and_goes_with_the_block(tmp_path):
    package, info = fake_installed(tmp_path / "site-packages")
    with source.InstalledPackage(package, info).copy() as top:
        assert sorted(p.name for p in top.iterdir()) == ["cpugpu_conformance", info.name]
        assert (top / "cpugpu_conformance" / "suite" / "conftest.py").is_file()
        assert not list(top.rglob("__pycache__")), "compiled files of another interpreter are not copied"
    assert not top.exists()


def test_environments_go_to_the_checkouts_nox_only_inside_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert source.default_envdir(REPO, "3.11", cwd=REPO / "docs") == REPO / ".nox"
    outside = tmp_path / "xdg" / "cpugpu-conformance" / "envs" / "python3.11"
    assert source.default_envdir(REPO, "3.11", cwd=tmp_path) == outside
    package, _ = fake_installed(tmp_path / "site")
    assert source.default_envdir(source.InstalledPackage(package), "3.11", cwd=REPO) == outside
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert source.cache_folder() == tmp_path / "home" / ".cache" / "cpugpu-conformance" / "envs"


@pytest.mark.parametrize("release, device, culprit", [
    ("two", "cpu", "torch 'two': not a torch release like 2.13.0 (or latest)"),
    ("2.13", "cpu", "torch '2.13': not a torch release"),
    ("2.13.0", "tpu", "--device 'tpu': not a device a cell tests"),
])
def test_cell_with_no_matrix_refuses_a_bad_release_or_device_in_one_line(tmp_path, monkeypatch, capsys, release, device,
                                                                          culprit):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CONFORMANCE_MATRIX", raising=False)
    assert main(["cell", release, "--device", device]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("cpugpu-conformance cell: error: ") and culprit in line, line
    assert list(tmp_path.iterdir()) == [], "nothing is made for a refused cell"


def test_with_no_matrix_a_release_is_paired_as_bisect_pairs_it():
    cell = matrices.for_release("2.1.2", "cpu", "3.11").cells[0]
    assert (cell.name, cell.release.numpy, cell.release.extra_packages) == ("torch-2.1.2-cpu", "<2", ("setuptools",))
    assert (cell.hypothesis_profile, cell.time_limit_s, cell.index_url) == ("ci", 1800.0, None)


# ---------------------------------------------------------------------------- issue 28, item 6: the plugin off


def cell_in(cwd: Path, results_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`cpugpu-conformance cell` of the test environment's torch, nothing installed (--python)."""
    env = dict(suite_env(), **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "cpugpu_conformance", "cell", RELEASE, "--matrix", str(REPO / "matrix.yaml"),
                           "--python", sys.executable, "--results", str(results_dir), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def earlier_pass(results_dir: Path) -> Path:
    path = results_dir / f"torch-{RELEASE}-cpu.json"
    results.write_atomic(path, rf.completed(RELEASE, cell=f"torch-{RELEASE}-cpu"))
    assert results.CellResult.load(path).answer().clean
    return path


@pytest.mark.parametrize("how", ["-p no:", "PYTEST_ADDOPTS"])
def test_a_cell_whose_plugin_never_loads_leaves_no_earlier_pass(tmp_path, how):
    path = earlier_pass(tmp_path / "results")
    off = ["-p", "no:cpugpu_conformance.testing.plugin"]
    proc = cell_in(tmp_path, tmp_path / "results", *(["--", "--promise", "2", *off] if how == "-p no:" else
                                                      ["--", "--promise", "2"]),
                   env={"PYTEST_ADDOPTS": " ".join(off)} if how == "PYTEST_ADDOPTS" else None)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    cell = results.CellResult.load(path)
    assert cell.status == "error" and not cell.answer().clean, cell.detail


@pytest.mark.parametrize("how", ["pytest.ini", "no autoload"])
def test_the_teams_own_tests_with_the_plugin_off_leave_no_earlier_pass(tmp_path, how):
    """Their pytest.ini blocks the plugin (the cell's own `-p` loads it all the same: this run's answer), or
    autoloading is off (hypothesis's plugin is missing: an error): never the earlier pass."""
    project = tmp_path / "team"
    (project / "tests").mkdir(parents=True)
    if how == "pytest.ini":
        (project / "pytest.ini").write_text("[pytest]\naddopts = -p no:cpugpu_conformance.testing.plugin\n")
    (project / "tests" / "test_ours.py").write_text(
        "from cpugpu_conformance.testing import BufferContractTests\nfrom cpugpu_conformance.reference import CpuGpuBuffer\n\n\n"
        "class TestOurs(BufferContractTests):\n    buffer_cls = CpuGpuBuffer\n")
    path = earlier_pass(tmp_path / "results")
    proc = cell_in(project, tmp_path / "results", "--impl", "tests", "--", "-k", "zeroed",
                   env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"} if how == "no autoload" else None)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    cell = results.CellResult.load(path)
    if how == "pytest.ini":
        assert cell.status == "completed" and cell["requested"]["tests"] == "tests", cell.detail
        assert cell.outcome("2", "cpu").kind == "passed" and cell.outcome("3", "cpu").kind == "untested"
    else:
        assert cell.status == "error" and "--hypothesis-profile" in cell.detail, cell.detail
    assert not cell.answer().clean


def test_a_checkouts_suite_run_from_a_project_of_ones_own_runs_there(tmp_path):
    """An editable install used from the user's project: the checkout's conformance/, run in their
    folder (an --impl module imports from there), reading none of its pytest configuration, leaving
    nothing in it but the results."""
    import inspect

    from suite_runner import PRE_FIX_IMPL, hostile_cwd

    from cpugpu_conformance import variants

    project = hostile_cwd(tmp_path / "project")
    (project / "buffers.py").write_text(PRE_FIX_IMPL.format(source=inspect.getsource(variants.PreFixCpuGpuBuffer)))
    proc = cell_in(project, project / "results", "--impl", "buffers:PreFixCpuGpuBuffer", "--", "--promise", "3")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    cell = results.CellResult.load(project / "results" / f"torch-{RELEASE}-cpu.json")
    assert cell.status == "completed" and cell.outcome("3", "cpu").kind == "failed", cell.detail
    assert f"rootdir: {REPO}" in proc.stdout and "configfile: pyproject.toml" in proc.stdout, proc.stdout[:2000]
    assert sorted(p.name for p in project.iterdir()) == ["buffers.py", "conftest.py", "pytest.ini", "results"]
