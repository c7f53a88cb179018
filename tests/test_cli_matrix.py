"""The matrix's subcommands, without nox: cells, cell, bisect, summary, record-unfinished.

Bad input is one line naming the culprit and exit 2. Cells that cannot be installed come
from an offline matrix (uv fails at once, no network); one real cell installs the torch
these tests run with (its wheels are in uv's cache).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import result_factory as rf
from cell_helpers import unreleased_matrix

from cpugpu_conformance import results
from cpugpu_conformance.cli import ExitCode
from cpugpu_conformance.cli import bisection as cli_bisect
from cpugpu_conformance.cli import dispatch as cli
from cpugpu_conformance.runner import bisection as bisect
from cpugpu_conformance.runner import install as installing
from cpugpu_conformance.runner import matrix as matrices

ROOT = Path(__file__).resolve().parents[1]
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture(autouse=True)
def _no_env_defaults(monkeypatch):
    monkeypatch.delenv("CONFORMANCE_MATRIX", raising=False)
    monkeypatch.delenv("CONFORMANCE_RESULTS", raising=False)


def write_matrix(tmp_path: Path, torch: str = '[{version: "98.0.0"}, {version: "99.0.0", time_limit_s: 3000}]',
                 extra: str = "") -> Path:
    """A matrix whose releases do not exist; offline, from an empty wheel folder: nothing is downloaded."""
    (tmp_path / "wheels").mkdir(exist_ok=True)
    return unreleased_matrix(tmp_path, f"find_links: wheels\noffline: true\ntorch: {torch}\n" + extra)


def one_error(capsys, command: str) -> str:
    """The single line a command printed for bad input (and nothing on stdout)."""
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"cpugpu-conformance {command}: error: ")
    return lines[0].split(": error: ", 1)[1]


# --------------------------------------------------------------------------- cells


def test_cells_json_is_the_ci_job_matrix_on_one_line(tmp_path, capsys):
    m = write_matrix(tmp_path, extra="devices: {cpu: {runner: ubuntu-latest}, cuda: {runner: [self-hosted, gpu]}}\n")
    assert cli.main(["cells", "--json", "--matrix", str(m)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1, "one line, for $GITHUB_OUTPUT"
    include = json.loads(out)["include"]
    assert include[0] == {"session": "conformance(torch='98.0.0', device='cpu')", "cell": "torch-98.0.0-cpu",
                          "runner": "ubuntu-latest", "python": PYTHON, "timeout_minutes": 10 + 30}
    assert include[3] == {"session": "conformance(torch='99.0.0', device='cuda')", "cell": "torch-99.0.0-cuda",
                          "runner": ["self-hosted", "gpu"], "python": PYTHON, "timeout_minutes": 50 + 30}
    assert [e["session"] for e in include] == [c.session for c in matrices.load(m).cells]


def test_cells_selects_by_cell_name_or_tag_in_matrix_order(tmp_path, capsys):
    m = write_matrix(tmp_path, extra="devices: {cpu: {runner: ubuntu-latest}, cuda: {runner: gpu}}\n")
    assert cli.main(["cells", "torch-99.0.0-cpu", "device-cuda", "--matrix", str(m)]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names == ["torch-98.0.0-cuda", "torch-99.0.0-cpu", "torch-99.0.0-cuda"]
    assert cli.main(["cells", "--json", "torch-98.0.0", "--matrix", str(m)]) == 0
    assert [e["cell"] for e in json.loads(capsys.readouterr().out)["include"]] == ["torch-98.0.0-cpu", "torch-98.0.0-cuda"]


def test_cells_unknown_tag_and_broken_matrix_are_one_line_exit_2(tmp_path, capsys):
    m = write_matrix(tmp_path)
    assert cli.main(["cells", "torch-2.15.0", "--matrix", str(m)]) == 2
    assert one_error(capsys, "cells") == f"{m}: no cell or tag 'torch-2.15.0' (a cell like torch-2.15.0-cpu, or a tag like torch-2.15.0 or device-cpu)"
    broken = write_matrix(tmp_path, torch='[{version: "2.x"}]')
    assert cli.main(["cells", "--matrix", str(broken)]) == 2
    assert "torch[0].version: '2.x' is not a version like 2.13.0" in one_error(capsys, "cells")


def test_the_console_script_lists_the_cells(tmp_path):
    """The one subprocess of this group: `python -m cpugpu_conformance cells` is wired up."""
    proc = subprocess.run([sys.executable, "-m", "cpugpu_conformance", "cells", "--matrix", str(write_matrix(tmp_path))],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[0] for line in proc.stdout.splitlines()] == ["torch-98.0.0-cpu", "torch-99.0.0-cpu"]


# --------------------------------------------------------------------------- cell


@pytest.mark.parametrize(
    ("ours", "pytest_args", "message"),
    [
        (["9.9.9"], [], "{m}: torch 9.9.9 is not in the matrix (releases: 98.0.0, 99.0.0)"),
        (["98.0.0", "--device", "cuda"], [], "{m}: no device 'cuda' (devices: cpu)"),
        (["98.0.0"], ["--cell-result=x.json"], "--cell-result among the pytest arguments: the cell writes results/<cell>.json"),
        (["98.0.0"], ["--hypothesis-profile", "default"],
         "--hypothesis-profile among the pytest arguments: set hypothesis_profile in matrix.yaml"),
        (["98.0.0"], ["-k", "buffer", "@args.txt"],
         "@args.txt among the pytest arguments: pytest would read arguments from that file; give them on the command line"),
        (["98.0.0"], ["--cell-nam=torch-2.15.0-cpu"],
         "--cell-nam (an abbreviation of --cell-name) among the pytest arguments: the cell is named torch-<release>-<device>"),
        (["98.0.0"], ["-o", "addopts=--hypothesis-profile default"],
         "addopts=--hypothesis-profile default among the pytest arguments: -o addopts=... hands pytest options; "
         "give them on the command line"),
        (["98.0.0"], ["-vc", "other.ini"],
         "-vc among the pytest arguments: the cell runs with the checkout's pytest configuration "
         "(another one's addopts are options too)"),
    ],
    ids=["release", "device", "cell-result", "profile", "argument-file", "abbreviation", "override-addopts", "config-file"],
)
def test_cell_bad_input_is_one_line_exit_2_and_nothing_is_made(tmp_path, capsys, ours, pytest_args, message):
    m, out = write_matrix(tmp_path), tmp_path / "results"
    argv = ["cell", *ours, "--matrix", str(m), "--results", str(out), "--env", str(tmp_path / "env"), "--", *pytest_args]
    assert cli.main(argv) == 2
    assert one_error(capsys, "cell") == message.format(m=m)
    assert not out.exists() and not (tmp_path / "env").exists()


def test_cell_owned_options_in_pytest_addopts_are_refused_too(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTEST_ADDOPTS", "-q --cell-name torch-2.15.0-cpu")
    m, out = write_matrix(tmp_path), tmp_path / "results"
    assert cli.main(["cell", "98.0.0", "--matrix", str(m), "--results", str(out), "--env", str(tmp_path / "env")]) == 2
    assert one_error(capsys, "cell") == ("PYTEST_ADDOPTS: --cell-name among the pytest arguments: "
                                         "the cell is named torch-<release>-<device>")
    assert not out.exists()


def test_cell_unknown_option_before_the_double_dash_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["cell", "98.0.0", "--promise", "1", "--matrix", str(write_matrix(tmp_path))]) == 2
    assert "unrecognized arguments: --promise 1" in capsys.readouterr().err


def test_cell_that_cannot_be_installed_is_exit_1_with_its_answer(tmp_path, capsys):
    m, out = write_matrix(tmp_path), tmp_path / "results"
    assert cli.main(["cell", "99.0.0", "--matrix", str(m), "--results", str(out), "--env", str(tmp_path / "env")]) == 1
    result = results.CellResult.load(out / "torch-99.0.0-cpu.json")
    assert result.status == "not_installed" and "torch==99.0.0" in result["detail"]
    assert result["requested"]["time_limit_s"] == 3000, "the entry's own time limit"
    assert (tmp_path / "env" / "bin" / "python").exists(), "the environment was made where --env says"
    assert "cell torch-99.0.0-cpu: not installed: " in capsys.readouterr().out


def test_cell_on_a_busy_result_path_is_one_line_exit_2(tmp_path, capsys):
    m, out = write_matrix(tmp_path), tmp_path / "results"
    with results.exclusive(out / "torch-98.0.0-cpu.json"):
        assert cli.main(["cell", "98.0.0", "--matrix", str(m), "--results", str(out), "--env", str(tmp_path / "env")]) == 2
    assert "another run is writing this result file" in one_error(capsys, "cell")


def _results_it_cannot_write(tmp_path: Path, how: str) -> tuple[Path, str]:
    """A results folder the cell cannot write (as root too, except read-only), and the culprit its error names."""
    if how == "a-file":
        (tmp_path / "results").write_text("not a folder")
        return tmp_path / "results", f"cannot hold result files: {tmp_path / 'results'} is not a folder (--results)"
    if how == "under-a-file":
        (tmp_path / "taken").write_text("not a folder")
        return tmp_path / "taken" / "results", f"cannot hold result files: {tmp_path / 'taken'} is not a folder (--results)"
    out = tmp_path / "results"
    out.mkdir()
    if how == "lock-is-a-folder":
        lock = results.lock_path(out / "torch-98.0.0-cpu.json")
        lock.mkdir()
        return out, f"{out}: cannot write the cell's result and log there ({lock}: the lock file is not a regular file (a directory); remove it)"
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder")
    out.chmod(0o555)
    return out, f"{out}: cannot write the cell's result and log there ({results.lock_path(out / 'torch-98.0.0-cpu.json')}: "


@pytest.mark.parametrize("how", ["a-file", "under-a-file", "lock-is-a-folder", "read-only"])
def test_cell_on_results_it_cannot_write_is_one_line_exit_2_and_nothing_is_made(tmp_path, capsys, how):
    out, message = _results_it_cannot_write(tmp_path, how)
    try:
        code = cli.main(["cell", "98.0.0", "--matrix", str(write_matrix(tmp_path)), "--results", str(out),
                         "--env", str(tmp_path / "env")])
        assert code == 2
        assert message in one_error(capsys, "cell")
        assert not (tmp_path / "env").exists()
    finally:
        if out.is_dir():
            out.chmod(0o755)


def test_cell_installs_its_torch_and_passes_arguments_to_pytest(tmp_path):
    """A real cell of the torch these tests run with, in a new environment, as a user runs it."""
    release = installing.base_version(installing.probe_torch(sys.executable)["torch"])
    m = tmp_path / "matrix.yaml"
    m.write_text(f'python: "{PYTHON}"\nbaseline: "{release}"\ncandidates: ["99.0.0"]\n'
                 f'torch: [{{version: "{release}"}}, {{version: "99.0.0"}}]\n')
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "cpugpu_conformance", "cell", release, "--matrix", str(m), "--results",
                           str(out), "--env", str(tmp_path / "env"), "--", "--promise", "1"],
                          capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = results.CellResult.load(out / f"torch-{release}-cpu.json")
    assert result.answer().clean and result.outcome("1", "cpu").kind == "passed"
    assert result.outcome("2", "cpu").kind == "not_requested", "--promise 1 reached pytest"
    assert result["environment"]["torch"].split("+")[0] == release
    assert f"cell torch-{release}-cpu: passed" in proc.stdout
    assert not [p.name for p in out.glob(".*")], "no lock or staging file is left"


# --------------------------------------------------------------------------- bisect


def test_bisect_runs_each_release_as_a_cell_with_the_pytest_arguments(tmp_path, monkeypatch, capsys):
    m, out = write_matrix(tmp_path), tmp_path / "results"
    for version in ("97.0.0", "98.0.0", "98.5.0", "99.0.0"):  # the matrix is offline: its releases are its folder's
        (tmp_path / "wheels" / f"torch-{version}-py3-none-any.whl").touch()
    monkeypatch.setattr(bisect, "available_releases", lambda index_url=None: pytest.fail("offline, yet the index was asked"))
    calls = []

    def fake_cell(c, *, env_dir, python_version, results_dir, project_dir, pytest_args=(), name=None, package=None):
        calls.append((c.torch, env_dir.name, tuple(pytest_args)))
        failed = {("1", "cpu"): [rf.failure("t", "shape differs", None)]} if c.torch >= "98.5.0" else None
        return results.CellResult(rf.completed(c.torch, cell=c.name, failed=failed)).write(results_dir / f"{c.name}.json")

    monkeypatch.setattr(cli_bisect, "run_matrix_cell", fake_cell)
    code = cli.main(["bisect", "97.0.0", "99.0.0", "--matrix", str(m), "--results", str(out),
                     "--envdir", str(tmp_path / "envs"), "--promise", "1", "--", "-k", "shape"])
    assert code == 0, capsys.readouterr()
    assert "first change at torch 98.5.0 (previous: 98.0.0)" in capsys.readouterr().out
    assert calls[0] == ("97.0.0", "bisect-torch-97.0.0", ("--promise", "1", "-k", "shape"))
    assert [c[0] for c in calls] == ["97.0.0", "99.0.0", "98.0.0", "98.5.0"], "good, bad, then the binary search"
    assert (out / "bisect" / "torch-97.0.0-cpu.json").is_file(), "each step keeps its result under results/bisect"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["2.x", "99.0.0"], "GOOD '2.x' is not a torch release like 2.13.0"),
        (["98.0.0", "99.0.0", "--device", "cuda"], "{m}: no device 'cuda' (devices: cpu)"),
        (["98.0.0", "99.0.0", "--cell-name", "x"], "--cell-name among the pytest arguments: the cell is named torch-<release>-<device>"),
    ],
    ids=["version", "device", "owned-option"],
)
def test_bisect_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, message):
    m = write_matrix(tmp_path)
    assert cli.main(["bisect", *argv, "--matrix", str(m), "--results", str(tmp_path / "results")]) == 2
    assert one_error(capsys, "bisect") == message.format(m=m)
    assert not (tmp_path / "results").exists()


def test_bisect_needs_two_releases(capsys):
    assert cli.main(["bisect", "2.13.0"]) == 2
    assert "the following arguments are required: BAD" in capsys.readouterr().err


# --------------------------------------------------------------------------- summary and record-unfinished


def test_summary_exit_codes(tmp_path, capsys):
    out = tmp_path / "results"
    results.CellResult(rf.completed("2.13.0", cell="torch-2.13.0-cpu")).write(out / "torch-2.13.0-cpu.json")
    assert cli.main(["summary", str(out)]) == 0
    assert "1 cells, 1 clean, 0 not" in capsys.readouterr().out
    assert cli.main(["summary", str(out), "--cells", "torch-2.13.0-cpu,torch-2.14.1-cpu"]) == 1
    assert "torch-2.14.1-cpu: " in capsys.readouterr().out
    assert cli.main(["summary", str(tmp_path / "empty")]) == 2
    assert one_error(capsys, "summary") == f"{tmp_path / 'empty'}: no result files"


def test_summary_reads_conformance_results_by_default(tmp_path, monkeypatch, capsys):
    out = tmp_path / "elsewhere"
    results.CellResult(rf.completed("2.13.0", cell="torch-2.13.0-cpu")).write(out / "torch-2.13.0-cpu.json")
    monkeypatch.setenv("CONFORMANCE_RESULTS", str(out))
    assert cli.main(["summary"]) == 0
    assert "torch-2.13.0-cpu" in capsys.readouterr().out


def test_record_unfinished(tmp_path, capsys):
    path = tmp_path / "results" / "torch-2.15.0-cpu.json"
    assert cli.main(["record-unfinished", str(path), "--cell", "torch-2.15.0-cpu", "--session", "s"]) == 0
    assert capsys.readouterr().out.strip() == f"{path}: recorded as error"
    assert results.CellResult.load(path).status == "error"
    assert cli.main(["record-unfinished", str(path), "--cell", "torch-2.15.0-cpu", "--session", "s"]) == 0
    assert capsys.readouterr().out.strip() == f"{path}: the cell's answer stands"
    assert cli.main(["record-unfinished", str(path), "--cell", "torch-2.15.0-cpu"]) == 2
    assert "--session" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["a file as its folder", "a folder at the path", "a cell name with a slash"])
def test_record_unfinished_that_cannot_record_is_one_line_exit_2(tmp_path, capsys, where):
    """It printed a traceback (NotADirectoryError, NotRegularFile) or wrote a name outside the folder."""
    (tmp_path / "file").write_text("")
    (tmp_path / "folder.json").mkdir()
    path, cell = {"a file as its folder": (tmp_path / "file" / "c.json", "c"),
                  "a folder at the path": (tmp_path / "folder.json", "folder"),
                  "a cell name with a slash": (tmp_path / "c.json", "../c")}[where]
    assert cli.main(["record-unfinished", str(path), "--cell", cell, "--session", "s"]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.splitlines()
    assert line.startswith("cpugpu-conformance record-unfinished: error: ") and "Traceback" not in captured.err
    assert (str(path) if where != "a cell name with a slash" else "'../c'") in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder.json"]


@pytest.mark.parametrize("command", ["cells", "cell", "matrix", "bisect", "summary", "record-unfinished"])
def test_help_of_each_matrix_command(command, capsys):
    assert cli.main([command, "--help"]) == 0
    assert f"usage: cpugpu-conformance {command}" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["cells", "cell", "matrix", "bisect", "summary", "record-unfinished"])
def test_a_matrix_command_without_the_tools_extra_is_one_line(command, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "yaml", None)
    assert cli.main([command, "--help"]) == ExitCode.USAGE
    assert capsys.readouterr().err == f"cpugpu-conformance {command} needs yaml: {cli.tools_extra()}\n"
