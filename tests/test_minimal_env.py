"""The suite runs, and writes its result file, where only torch, numpy, hypothesis and pytest
are installed (a GPU box with no network): nothing of the [tools] extra is needed."""

from __future__ import annotations

import subprocess

import pytest
from suite_runner import TORCH_FOR_ENVS, build_wheel, make_env, outside_env, run_installed

from cpugpu_conformance import results

TOOLS_ONLY = ("yaml", "jsonschema")  # of the [tools] extra, what torch and pytest do not bring themselves


@pytest.fixture(scope="module")
def minimal(tmp_path_factory):
    """bin/ of an environment with torch, numpy, hypothesis, pytest and the wheel, installed --no-deps."""
    wheel = build_wheel(tmp_path_factory.mktemp("dist"))
    return make_env(tmp_path_factory.mktemp("env") / "venv", TORCH_FOR_ENVS, "numpy", "hypothesis", "pytest",
                    no_deps=[str(wheel)])


def test_the_environment_is_minimal(minimal):
    code = f"import importlib.util as u; print([m for m in {TOOLS_ONLY!r} if u.find_spec(m)])"
    proc = subprocess.run([str(minimal / "python"), "-c", code], capture_output=True, text=True, env=outside_env(), timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_run_and_its_result_file_need_nothing_more(minimal, tmp_path):
    proc = run_installed(minimal, tmp_path, "run", "--promise", "1,3", "--cell-result", "r.json")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    cell = results.CellResult.load(tmp_path / "r.json")  # the full package (jsonschema) validates what the minimal one wrote
    answer = cell.answer()
    # Promises not asked for are not_requested: they neither count nor make the answer untested.
    assert answer.clean, answer.lines
    assert answer.counts["passed"] == 2 and answer.counts["untested"] == 0, answer.counts
    assert cell.outcome("1", "cpu").kind == "passed" and cell.outcome("3", "cpu").kind == "passed"
    assert cell.outcome("2", "cpu").kind == "not_requested"
    assert cell["requested"]["promises"] == ["1", "3"]


def test_help_lists_every_command_and_the_extra_the_tools_need(minimal, tmp_path):
    proc = run_installed(minimal, tmp_path, "--help")
    assert proc.returncode == 0, proc.stderr
    text = "".join(proc.stdout.split())  # argparse wraps lines, at hyphens too
    assert "runruntheconformancesuite" in text
    assert 'gateunavailable:needsjsonschema(addthetoolsextratoyourinstall:pipinstall"cpugpu-conformance[tools]@file://' in text
