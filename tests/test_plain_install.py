"""cell, matrix and gate from a plain install of the wheel, in a project of the user's own (issue 31,
item 2), as a newcomer would: `uv build`, the wheel into a fresh environment in a temporary folder
outside the checkout, then the commands in their project folder. No checkout is on any path; the
cells' environments go to the cache folder (or a folder the user names), never into the project
or the checkout; the suite is the one the wheel ships. Slow (each cell makes its own environment,
torch from uv's cache): not marked quick.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from suite_runner import (
    PRE_FIX_IMPL,
    REPO,
    TORCH_FOR_ENVS,
    build_wheel,
    find_uv,
    hostile_cwd,
    make_env,
    outside_env,
)

from cpugpu_conformance import results, variants

RELEASE = TORCH_FOR_ENVS.split("==")[1]
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """bin/ of a fresh environment outside the checkout: torch, numpy and the wheel with its tools extra."""
    wheel = build_wheel(tmp_path_factory.mktemp("dist"))
    return make_env(tmp_path_factory.mktemp("env") / "venv", TORCH_FOR_ENVS, "numpy", f"{wheel}[tools]")


@pytest.fixture(scope="module")
def uv_cache() -> str:
    """uv's own cache, named: the tests move XDG_CACHE_HOME, which uv reads too."""
    return subprocess.run([find_uv(), "cache", "dir"], capture_output=True, text=True, check=True).stdout.strip()


def newcomer(bin_dir: Path, cwd: Path, cache: Path, uv_cache: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`cpugpu-conformance ARGS` in ``cwd``, with the cache folder at ``cache`` and torch from uv's cache
    (no network), uv on the path as the README's install puts it."""
    env = dict(outside_env(), XDG_CACHE_HOME=str(cache), UV_CACHE_DIR=uv_cache, UV_OFFLINE="1",
               PATH=os.pathsep.join([str(bin_dir), str(Path(find_uv()).parent), os.environ.get("PATH", "")]))
    return subprocess.run([str(bin_dir / "cpugpu-conformance"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout[-4000:] + proc.stderr[-3000:]


def write_pre_fix(project: Path) -> None:
    (project / "buffers.py").write_text(PRE_FIX_IMPL.format(source=inspect.getsource(variants.PreFixCpuGpuBuffer)))


def test_cell_and_gate_work_in_a_project_of_ones_own(installed, uv_cache, tmp_path):
    project = hostile_cwd(tmp_path / "project")  # a pytest.ini and a conftest.py that would break any run reading them
    write_pre_fix(project)
    cache = tmp_path / "cache"

    base = newcomer(installed, project, cache, uv_cache, "cell", RELEASE, "--device", "cpu", "--results", "base")
    assert base.returncode == 0, output(base)
    env_dir = cache / "cpugpu-conformance" / "envs" / f"python{PYTHON}" / f"torch-{RELEASE}-cpu"
    assert f"cell torch-{RELEASE}-cpu: environment {env_dir}" in base.stdout, base.stdout[:2000]
    assert f"no matrix.yaml here (nor --matrix): torch {RELEASE} on cpu" in base.stdout, base.stdout[:2000]
    assert (env_dir / "bin" / "python").exists()
    baseline = results.CellResult.load(project / "base" / f"torch-{RELEASE}-cpu.json")
    assert baseline.status == "completed" and baseline.answer().clean, baseline.answer().lines
    assert baseline["environment"]["torch"].startswith(RELEASE)
    log = (project / "base" / f"torch-{RELEASE}-cpu.log").read_text()
    assert "configfile: suite.ini" in log and "cpugpu_conformance/suite" in log, log[:3000]
    assert f"{REPO}/conformance" not in log and f"{REPO}/src" not in log and "-e " not in log, log[:3000]

    cand = newcomer(installed, project, cache, uv_cache, "cell", RELEASE, "--device", "cpu", "--results", "cand",
                    "--impl", "buffers.py:PreFixCpuGpuBuffer")
    assert cand.returncode == 1, output(cand)
    candidate = results.CellResult.load(project / "cand" / f"torch-{RELEASE}-cpu.json")
    assert candidate.outcome("3", "cpu").kind == "failed"

    unlike = newcomer(installed, project, cache, uv_cache, "gate", "--baseline", f"base/torch-{RELEASE}-cpu.json",
                      "--candidate", f"cand/torch-{RELEASE}-cpu.json")
    assert unlike.returncode == 2 and "the cells tested different implementations" in unlike.stderr, output(unlike)
    # The candidate as if the reference had regressed under the candidate torch: its verdicts and
    # failures as the run wrote them, under the baseline's class name.
    data = json.loads((project / "cand" / f"torch-{RELEASE}-cpu.json").read_text())
    data["impl"] = baseline["impl"]
    (project / "cand" / f"torch-{RELEASE}-cpu.json").write_text(json.dumps(data))
    gate = newcomer(installed, project, cache, uv_cache, "gate", "--baseline", f"base/torch-{RELEASE}-cpu.json",
                    "--candidate", f"cand/torch-{RELEASE}-cpu.json", "--job-summary", "summary.md")
    assert gate.returncode == 1, output(gate)
    assert "REGRESSION 1: promise 3 (Mutable wherever they were made) on cpu: passed -> failed" in gate.stdout
    assert "Inplace update to inference tensor outside InferenceMode" in gate.stdout
    assert (project / "summary.md").read_text().startswith("### cpugpu-conformance gate: FAIL")

    # The project holds what the user made and the results they asked for: no environment, no .nox, no .hypothesis.
    assert sorted(p.name for p in project.iterdir()) == ["base", "buffers.py", "cand", "conftest.py", "pytest.ini",
                                                         "summary.md"]


def test_a_module_of_the_project_and_its_own_tests_run_in_a_cell(installed, uv_cache, tmp_path):
    """`--impl buffers:Cls` imports from the folder the cell runs in; `--impl tests/` runs the team's own
    tests of the library with their pytest there, the plugin from the installed package."""
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    write_pre_fix(project)
    (project / "tests" / "test_ours.py").write_text(
        "from cpugpu_conformance.testing import BufferContractTests\nfrom cpugpu_conformance.reference import CpuGpuBuffer\n\n\n"
        "class TestOurs(BufferContractTests):\n    buffer_cls = CpuGpuBuffer\n")
    cache = tmp_path / "cache"

    module = newcomer(installed, project, cache, uv_cache, "cell", RELEASE, "--results", "mod",
                      "--impl", "buffers:PreFixCpuGpuBuffer", "--", "--promise", "3")
    assert module.returncode == 1, output(module)
    assert results.CellResult.load(project / "mod" / f"torch-{RELEASE}-cpu.json").outcome("3", "cpu").kind == "failed"

    ours = newcomer(installed, project, cache, uv_cache, "cell", RELEASE, "--results", "ours", "--impl", "tests",
                    "--", "--cpugpu-promise", "2")
    assert ours.returncode == 0, output(ours)
    cell = json.loads((project / "ours" / f"torch-{RELEASE}-cpu.json").read_text())
    assert cell["requested"]["tests"] == "tests" and cell["promises"]["2"]["devices"]["cpu"]["verdict"] == "passed"


def test_matrix_runs_the_projects_matrix_with_environments_where_it_is_told(installed, uv_cache, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    cache = tmp_path / "cache"
    refused = newcomer(installed, project, cache, uv_cache, "matrix")
    assert refused.returncode == 2, output(refused)
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith(f"cpugpu-conformance matrix: error: no matrix.yaml in {project}") and "bump-target" in line

    # The user's own matrix (two releases, as every matrix has), one cell of it run, the environments in a folder they name.
    (project / "matrix.yaml").write_text(f'python: "{PYTHON}"\nbaseline: "2.0.1"\ncandidates: ["{RELEASE}"]\n'
                                         f'torch: [{{version: "2.0.1", numpy: "<2"}}, {{version: "{RELEASE}"}}]\n')
    proc = newcomer(installed, project, cache, uv_cache, "matrix", "--jobs", "1", "--envdir", "envs", f"torch-{RELEASE}",
                    "--", "--promise", "2")
    assert proc.returncode == 0, output(proc)
    assert f"environments in {project / 'envs'}" in proc.stdout
    assert (project / "envs" / f"torch-{RELEASE}-cpu" / "bin" / "python").exists() and not cache.exists()
    cell = results.CellResult.load(project / "results" / f"torch-{RELEASE}-cpu.json")
    assert cell.status == "completed" and cell.answer().clean and cell.outcome("2", "cpu").kind == "passed"
    assert sorted(p.name for p in project.iterdir()) == ["envs", "matrix.yaml", "results"]
