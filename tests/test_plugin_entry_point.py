"""The plugin as a pytest11 entry point (issue 22, item 5): pytest knows its options before it parses
the command line, in every process; it stays inert in a run that asks nothing of it; and a run
refused before any test leaves the result file saying `error`, never an earlier pass.

These run this environment's pytest, where the package is installed (as `nox -s tests` installs
it), so its entry point is what loads the plugin.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
from suite_runner import outside_env
from third_party import contract_module, make_project

BIN = Path(sys.executable).parent
PLUGIN = "cpugpu_conformance.testing.plugin"


def pytest_in(where: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "python"), "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=where,
                          env=outside_env(), capture_output=True, text=True, timeout=timeout)


def test_the_plugin_is_an_entry_point_named_as_its_module():
    [entry] = [e for e in importlib.metadata.entry_points(group="pytest11") if e.value == PLUGIN]
    # Named as its module: `pytest_plugins = [PLUGIN]` and `-p PLUGIN` find it registered already.
    assert entry.name == PLUGIN


@pytest.mark.fresh_processes  # what a fresh process imports
def test_a_run_that_asks_nothing_of_it_imports_neither_torch_nor_hypothesis(tmp_path):
    (tmp_path / "test_theirs.py").write_text(
        "import sys\n\n\ndef test_theirs():\n"
        "    assert 'torch' not in sys.modules and 'hypothesis' not in sys.modules, sorted(sys.modules)\n")
    ran = pytest_in(tmp_path, "-q")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "cpugpu" not in ran.stdout + ran.stderr  # and says nothing


def test_a_failing_run_that_asks_nothing_of_it_keeps_pytests_exit_status(tmp_path):
    (tmp_path / "test_theirs.py").write_text("def test_theirs():\n    assert False\n")
    assert pytest_in(tmp_path, "-q").returncode == 1
    (tmp_path / "test_theirs.py").write_text("")
    assert pytest_in(tmp_path, "-q").returncode == 5


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("ours"), {"test_ours.py": contract_module("TestOurs", "CpuGpuBuffer")})


def old_pass(path: Path) -> None:
    path.write_text(json.dumps({"schema": "cpugpu-conformance/cell-result", "schema_version": 2,
                                "cell": "old", "status": "completed"}))


def status_of(path: Path) -> str:
    return json.loads(path.read_text())["status"]


@pytest.mark.parametrize("args", [["--bogus"], ["-o", "xfail_strict=maybe", "--strict-config", "--nope"]],
                         ids=["unknown-option", "unknown-option-after-ini"])
def test_a_command_line_pytest_refuses_leaves_error_never_an_earlier_pass(project, tmp_path, args):
    result = tmp_path / "r.json"
    old_pass(result)
    ran = pytest_in(project, "--cpugpu-cell-result", str(result), *args)
    assert ran.returncode == 4, ran.stdout + ran.stderr
    assert status_of(result) == "error"


def test_a_conftest_that_fails_to_import_leaves_error_never_an_earlier_pass(tmp_path):
    (tmp_path / "conftest.py").write_text("raise NameError('a typo in our conftest')\n")
    (tmp_path / "test_theirs.py").write_text("def test_theirs():\n    pass\n")
    result = tmp_path / "r.json"
    old_pass(result)
    ran = pytest_in(tmp_path, "--cpugpu-cell-result", str(result))
    assert ran.returncode == 4, ran.stdout + ran.stderr
    assert status_of(result) == "error"


def test_an_unknown_hypothesis_profile_is_one_line_and_an_error_result(project, tmp_path):
    result = tmp_path / "r.json"
    old_pass(result)
    ran = pytest_in(project, "--cpugpu-cell-result", str(result), "--hypothesis-profile", "nonexistent")
    assert ran.returncode == 4, ran.stdout + ran.stderr
    assert "INTERNALERROR" not in ran.stdout + ran.stderr and "Traceback" not in ran.stderr
    [line] = [line for line in ran.stderr.splitlines() if line.strip()]
    assert "nonexistent" in line and "hypothesis profile" in line
    assert status_of(result) == "error"


@pytest.mark.fresh_processes  # warnings are errors there: a forked pytest warns it cannot rewrite the hypothesis it was forked with
def test_the_plugins_own_profiles_are_there_when_a_run_names_one(project, tmp_path):
    ran = pytest_in(project, "-q", "--hypothesis-profile", "cpugpu-ci", "--cpugpu-promise", "2",
                    "--cpugpu-cell-result", str(tmp_path / "r.json"))
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr
    assert json.loads((tmp_path / "r.json").read_text())["hypothesis_profile"] == "cpugpu-ci"


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_space_form_of_the_result_path_outside_the_project(project, tmp_path, workers):
    """An existing file outside the project, in the space form: pytest once took it for the root folder
    (never loading the project's conftest), and xdist's workers for a usage error, ten restarts long."""
    result = tmp_path / "elsewhere" / "r.json"
    result.parent.mkdir()
    old_pass(result)
    ran = pytest_in(project, "-q", "--cpugpu-promise", "2", *workers, "--cpugpu-cell-result", str(result))
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert f"rootdir: {project}" in ran.stdout or "rootdir" not in ran.stdout
    data = json.loads(result.read_text())
    assert data["status"] == "completed" and data["promises"]["2"]["devices"]["cpu"]["verdict"] == "passed"


def test_the_librarys_checks_are_not_rewritten_by_pytest(tmp_path):
    """Loaded as a plugin, the package would have its asserts rewritten: the checks' own messages would
    grow pytest's explanations, and the reproducers built from them would import `@py_builtins`."""
    (tmp_path / "test_theirs.py").write_text(
        "from cpugpu_conformance.testing.buffer import mutability, side_effects\n"
        "from cpugpu_conformance.testing.shared import checks\n\n\n"
        "def test_not_rewritten():\n"
        "    for f in (checks.zeroed, checks.shape_dtype_device, mutability.not_inference, side_effects.unchanged):\n"
        "        assert not [n for n in f.__code__.co_names if n.startswith('@')], f.__name__\n")
    ran = pytest_in(tmp_path, "-q")
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr
