"""The package's commands that the composite action's steps call, run directly: `cell --impl` with a
team's own tests, `cpugpu-conformance bump-target`, which reads the bump from every kind of pin file
and from a real git history, and the job summary the gate appends for GitHub.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from action_helpers import REPO, git, team_repo, torch_release
from markdown_text import outside_code

from cpugpu_conformance.runner import bump
from cpugpu_conformance.runner import matrix as matrices

# ---------------------------------------------------------------------------- cell --impl with a team's own tests

TEAM_TESTS = """\
from cpugpu_conformance.testing import ZeroedTests
from cpugpu_conformance.variants import OnesLikeGpuBuffer


class TestOurs(ZeroedTests):
    buffer_cls = OnesLikeGpuBuffer
"""


def test_cell_runs_a_teams_own_tests_with_the_plugin_and_its_known_failures(tmp_path):
    project = tmp_path / "team"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "conftest.py").write_text('pytest_plugins = ["cpugpu_conformance.testing.plugin"]\n')
    (project / "tests" / "test_ours.py").write_text(TEAM_TESTS)
    (project / "kf.toml").write_text('[[known_failure]]\npromise = 2\nreason = "ones"\n')
    release = torch_release()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-m", "cpugpu_conformance", "cell", release, "--matrix", str(REPO / "matrix.yaml"),
                           "--python", sys.executable, "--results", str(tmp_path / "results"), "--impl", "tests",
                           "--known-failures", "kf.toml", "--", "--cpugpu-promise", "2"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    result = json.loads((tmp_path / "results" / f"torch-{release}-cpu.json").read_text())
    assert result["hypothesis_profile"] == "cpugpu-ci" and result["requested"]["tests"] == "tests"
    entry = result["promises"]["2"]["devices"]["cpu"]
    assert entry["verdict"] == "known_failure" and entry["failures"][0]["test"].startswith("tests/test_ours.py::TestOurs")


@pytest.mark.parametrize("value, spec", [
    ("pkg.mod:Cls", True), ("path/to/file.py:Cls", True), ("pkg:Outer.Inner", True),
    ("tests", False), ("tests/test_ours.py", False), ("tests/test_ours.py::TestOurs", False), ("C:\\x", False),
])
def test_impl_tells_a_class_from_a_test_path(value, spec):
    from cpugpu_conformance.cli.cell import is_impl_spec

    assert is_impl_spec(value) is spec


# ---------------------------------------------------------------------------- bump-target


@pytest.mark.parametrize("name, text, pins", [
    ("requirements.txt", "numpy\ntorch==2.14.1\n", {"2.14.1"}),
    ("requirements/dev-requirements.in", "Torch === 2.14.1+cpu ; python_version >= '3.9'  # pinned\n", {"2.14.1"}),
    ("requirements.txt", "torch==2.14.1 \\\n    --hash=sha256:abc\n", {"2.14.1"}),
    ("requirements.txt", "torch[opt]==2.14.1\n", {"2.14.1"}),
    ("requirements.txt", "torch @ https://download.pytorch.org/whl/cpu/torch-2.14.1%2Bcpu-cp311-linux_x86_64.whl\n",
     {"2.14.1"}),
    ("requirements.txt", "torch>=2.14\n# torch==2.0.0\ntorchvision==0.20.0\n", set()),
    ("constraints.txt", "torch==2.14.1\n", {"2.14.1"}),
    ("pyproject.toml", '[project]\ndependencies = ["torch==2.14.1", "numpy"]\n', {"2.14.1"}),
    ("pyproject.toml", '[project.optional-dependencies]\ngpu = ["torch==2.14.1"]\n', {"2.14.1"}),
    ("pyproject.toml", '[tool.poetry.dependencies]\ntorch = "2.14.1"\n', {"2.14.1"}),
    ("pyproject.toml", '[tool.poetry.dependencies]\ntorch = {version = "^2.14"}\n', set()),
    ("uv.lock", '[[package]]\nname = "torch"\nversion = "2.14.1+cpu"\n[[package]]\nname = "numpy"\nversion = "2.1.0"\n',
     {"2.14.1"}),
    ("poetry.lock", '[[package]]\nname = "torch"\nversion = "2.14.1"\n', {"2.14.1"}),
    ("Pipfile.lock", json.dumps({"default": {"torch": {"version": "==2.14.1"}}}), {"2.14.1"}),
    ("pyproject.toml", "not = [toml", set()),
])
def test_torch_pins_are_read_from_every_kind_of_file(name, text, pins):
    assert bump.is_pin_file(name)
    assert bump.torch_pins(name, text) == pins


def bump_target(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-m", "cpugpu_conformance", "bump-target", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)


def test_bump_target_reads_a_lock_file_bump_beside_a_range(tmp_path):
    repo, base = team_repo(tmp_path / "team", "2.14.1", "2.14.1")
    (repo / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["torch>=2.14"]\n')
    (repo / "uv.lock").write_text('[[package]]\nname = "torch"\nversion = "2.14.1"\n')
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "lock")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "uv.lock").write_text('[[package]]\nname = "torch"\nversion = "2.15.0"\n')  # uncommitted: the working tree
    proc = bump_target(repo, "--base-ref", base, "--matrix-out", str(tmp_path / "m.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["baseline=2.14.1", "candidate=2.15.0", "baseline_cell=torch-2.14.1-cpu",
                                        "candidate_cell=torch-2.15.0-cpu", f"matrix={tmp_path / 'm.yaml'}"]
    matrix = matrices.load(tmp_path / "m.yaml")
    assert [c.name for c in matrix.cells] == ["torch-2.14.1-cpu", "torch-2.15.0-cpu"]
    assert (matrix.baseline, matrix.candidates) == ("2.14.1", ("2.15.0",))


def test_given_releases_need_no_git_and_are_paired_as_bisect_pairs_them(tmp_path):
    proc = bump_target(tmp_path, "--baseline", "2.1.2", "--candidate", "2.3.1", "--device", "cuda", "--python", "3.10",
                       "--packages", "transformers==4.44\n# a comment\n", "--index-url", "https://download.pytorch.org/whl/cu121",
                       "--matrix-out", str(tmp_path / "out" / "m.yaml"))
    assert proc.returncode == 0, proc.stderr
    matrix = matrices.load(tmp_path / "out" / "m.yaml")
    old, new = matrix.releases
    assert (old.numpy, old.extra_packages) == ("<2", ("setuptools", "transformers==4.44"))
    assert (new.numpy, new.extra_packages) == (None, ("transformers==4.44",))
    assert matrix.python == "3.10" and [d.name for d in matrix.devices] == ["cuda"]
    assert matrix.index_url == "https://download.pytorch.org/whl/cu121"


@pytest.mark.parametrize("case", ["two bumps", "no bump", "no such ref", "no ref", "same release", "not a release",
                                  "bad package"])
def test_bump_target_refuses_in_one_line_exit_2(tmp_path, case):
    repo, base = team_repo(tmp_path / "team", "2.14.1", "2.15.0")
    args, expected = {
        "two bumps": (["--base-ref", base], "do not name one bump (requirements.txt: 2.14.1 -> 2.15.0; "
                                             "tools/requirements.txt: (none) -> 2.16.0)"),
        "no bump": (["--base-ref", "HEAD"], "no exact torch pin changed since HEAD (no requirements"),
        "no such ref": (["--base-ref", "0" * 40], "no such commit in . (on CI, check out with fetch-depth: 0)"),
        "no ref": (["--baseline", "2.14.1"], "no candidate release given, and no --base-ref"),
        "same release": (["--baseline", "2.15.0", "--candidate", "2.15.0"], "both torch 2.15.0: there is no bump"),
        "not a release": (["--baseline", "2.15.0", "--candidate", "two"], "--candidate 'two': not a torch release"),
        "bad package": (["--baseline", "2.14.1", "--candidate", "2.15.0", "--packages", "numpy<2",
                         "--matrix-out", "m.yaml"], "--packages 'numpy<2': torch and numpy are the cell's own"),
    }[case]
    if case == "two bumps":
        (repo / "tools").mkdir()
        (repo / "tools" / "requirements.txt").write_text("torch==2.16.0\n")
        git(repo, "add", ".")
        git(repo, "commit", "-qm", "tools")
    proc = bump_target(repo, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cpugpu-conformance bump-target: error: "), lines
    assert expected in lines[0], lines[0]


# ---------------------------------------------------------------------------- the gate's job summary


def gate_with_summary(tmp_path: Path, baseline: dict, candidate: dict, *extra: str) -> tuple[int, str]:
    import result_factory as rf

    from cpugpu_conformance.cli.dispatch import main

    paths = [str(rf.write(tmp_path, name, data)) for name, data in (("b.json", baseline), ("c.json", candidate))]
    summary = tmp_path / "summary.md"
    summary.write_text("earlier steps' summary\n")
    code = main(["gate", "--baseline", paths[0], "--candidate", paths[1], "--job-summary", str(summary), *extra])
    text = summary.read_text()
    assert text.startswith("earlier steps' summary\n"), "the summary is appended to, never replaced"
    return code, text[len("earlier steps' summary\n"):]


def test_the_job_summary_escapes_what_a_result_holds_and_folds_each_reproducer(tmp_path, capsys):
    import result_factory as rf

    reproducer = "import torch\n# a fence inside: ````\nprint('<script>')\n"
    failing = {("2", "cpu"): [rf.failure("t::a|<b>", "AssertionError: <img src=x> | broke", reproducer)]}
    code, summary = gate_with_summary(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0", failed=failing))
    assert code == 1
    assert summary.startswith("### cpugpu-conformance gate: FAIL\n\n**FAIL: 1 regression(s) out of ")
    outside = outside_code(summary)  # inside a fence GitHub shows text as it is
    assert "<img" not in outside and "<script>" not in outside and "&lt;img src=x&gt;" in outside
    row = next(line for line in summary.splitlines() if line.startswith("| 2 Zeroed"))
    assert row.count("|") == 5, row  # a pipe in a message never adds a column
    assert "<details><summary>Reproducer: promise 2 on cpu: <code>t::a&#124;&lt;b&gt;</code></summary>" in summary
    fence = "`````"  # longer than the longest run of backticks in the reproducer
    assert f"{fence}python\n{reproducer.rstrip()}\n{fence}" in summary and "</details>" in summary


def test_the_job_summary_of_a_gate_that_cannot_compare_says_so(tmp_path, capsys):
    import result_factory as rf

    code, summary = gate_with_summary(tmp_path, rf.completed("2.14.1"),
                                      rf.incomplete("2.15.0", "not_installed", "no such torch"))
    assert code == 2
    assert summary.startswith("### cpugpu-conformance gate: NO ANSWER\n\n**Nothing to compare, refusing to pass** (exit 2)")
    assert "did not complete: not installed: no such torch" in summary


def test_a_job_summary_that_cannot_be_written_never_turns_a_failure_into_a_pass(tmp_path, capsys):
    import result_factory as rf

    from cpugpu_conformance.cli.dispatch import main

    paths = [str(rf.write(tmp_path, n, d)) for n, d in (("b.json", rf.completed("2.14.1")),
                                                        ("c.json", rf.completed("2.15.0")))]
    (tmp_path / "dir").mkdir()
    assert main(["gate", "--baseline", paths[0], "--candidate", paths[1], "--job-summary", str(tmp_path / "dir")]) == 2
    assert f"--job-summary {tmp_path / 'dir'}: cannot write" in capsys.readouterr().err
