"""bisect: run(), reporting the first change and keeping each step's result file, its exit codes,
and the offline listing from folders of wheels, with fake cells (no network, no torch)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
import result_factory as rf
from bisect_cells import RELEASES, FakeCells

from cpugpu_conformance import results
from cpugpu_conformance.runner import bisection as bisect
from cpugpu_conformance.runner import install as installing
from cpugpu_conformance.runner import releases as index

# ----------------------------------------------------------------------------- run()


class FakeRunner:
    """run_release(): writes each release's result file like a cell would, and returns its path."""

    def __init__(self, folder: Path, cells: FakeCells):
        self.folder, self.cells = folder, cells

    def __call__(self, release: str) -> Path:
        return results.write_atomic(self.folder / f"bisect-torch-{release}.json", self.cells(release))


def test_run_reports_the_first_change_and_keeps_each_step_file(tmp_path, capsys):
    runner = FakeRunner(tmp_path, FakeCells(change_at=5))
    assert bisect.run("2.5.1", "2.12.0", runner, releases=RELEASES) == 0
    out = capsys.readouterr().out
    assert "first change at torch 2.9.1 (previous: 2.8.0)" in out
    assert "observation pin_memory_without_accelerator: raises RuntimeError: Cannot access" in out
    for release in runner.cells.calls:
        assert f"torch {release}: " in out
        assert (tmp_path / f"bisect-torch-{release}.json").is_file()
    assert f"step {len(runner.cells.calls)}: " in out


def test_run_no_change_is_exit_1(tmp_path, capsys):
    assert bisect.run("2.5.1", "2.12.0", FakeRunner(tmp_path, FakeCells(None)), releases=RELEASES) == 1
    assert "no change: torch 2.12.0 answers like torch 2.5.1" in capsys.readouterr().out


def test_run_bad_input_is_exit_2_before_running_anything(tmp_path, capsys):
    runner = FakeRunner(tmp_path, FakeCells(3))
    assert bisect.run("2.9.1", "2.5.1", runner, releases=RELEASES) == 2
    assert bisect.run("2.5.1", "9.9.9", runner, releases=RELEASES) == 2
    err = capsys.readouterr().err
    assert "good release 2.9.1 must be older than bad release 2.5.1" in err
    assert "bad release 9.9.9 is not a final torch release" in err
    assert runner.cells.calls == []


def test_run_untestable_good_release_is_exit_2(tmp_path, capsys):
    runner = FakeRunner(tmp_path, FakeCells(3, untestable={"2.5.1"}))
    assert bisect.run("2.5.1", "2.12.0", runner, releases=RELEASES) == 2
    assert "good release 2.5.1 could not be tested (not_installed): no matching distribution" in capsys.readouterr().err


def test_run_treats_a_missing_result_file_as_untestable(tmp_path, capsys):
    cells = FakeCells(2)

    def runner(release):
        if release == "2.8.0":  # the midpoint: its cell left no file behind
            return tmp_path / "never-written.json"
        return FakeRunner(tmp_path, cells)(release)

    assert bisect.run("2.5.1", "2.12.0", runner, releases=RELEASES) == 0
    out = capsys.readouterr().out
    assert "torch 2.8.0: untestable (no result: " in out
    assert "first change at torch 2.7.0 (previous: 2.6.0)" in out


def test_run_lists_releases_from_the_index_when_not_given(tmp_path, monkeypatch, capsys):
    seen = []

    def listing(index_url=None):
        seen.append(index_url)
        return ["2.13.0", "2.14.1"]

    monkeypatch.setattr(bisect, "available_releases", listing)
    runner = FakeRunner(tmp_path, FakeCells(1, ["2.13.0", "2.14.1"]))
    assert bisect.run("2.13.0", "2.14.1", runner, index_url="https://idx.example") == 0
    assert seen == ["https://idx.example"]
    assert "first change at torch 2.14.1 (previous: 2.13.0)" in capsys.readouterr().out


# --------------------------------------------------------------------------- offline


def no_network(monkeypatch):
    """Any attempt to reach an index fails the test loudly."""
    def refuse(*args, **kwargs):
        pytest.fail(f"offline, yet the network was asked: {args}")

    monkeypatch.setattr(bisect, "available_releases", refuse)
    monkeypatch.setattr(index, "_http_fetch", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def fake_wheels(folder: Path, versions) -> Path:
    """A find_links folder: the listing reads only the wheels' names."""
    folder.mkdir(parents=True, exist_ok=True)
    for version in versions:
        (folder / f"torch-{version}-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    (folder / "numpy-2.4.6-py3-none-any.whl").touch()
    return folder


def test_offline_run_lists_the_releases_of_its_folders_only(tmp_path, monkeypatch, capsys):
    no_network(monkeypatch)
    folder = fake_wheels(tmp_path / "wheels", ["2.13.0", "2.14.1", "2.15.0", "2.16.0rc1"])
    runner = FakeRunner(tmp_path, FakeCells(1, ["2.13.0", "2.14.1", "2.15.0"]))
    code = bisect.run("2.13.0", "2.15.0", runner, index_url="https://idx.example", find_links=[str(folder)], offline=True)
    assert code == 0
    out = capsys.readouterr().out
    assert "bisect: 3 final torch releases from 2.13.0 to 2.15.0: 2.13.0, 2.14.1, 2.15.0" in out


def test_offline_run_names_the_folder_a_release_is_missing_from(tmp_path, monkeypatch, capsys):
    no_network(monkeypatch)
    folder = fake_wheels(tmp_path / "wheels", ["2.13.0", "2.14.1"])
    runner = FakeRunner(tmp_path, FakeCells(1))
    assert bisect.run("2.13.0", "2.15.0", runner, find_links=[str(folder)], offline=True) == 2
    assert capsys.readouterr().err == f"bisect: bad release 2.15.0 is not a final torch release in {folder}\n"
    assert runner.cells.calls == []


def test_offline_with_no_folder_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    no_network(monkeypatch)
    assert bisect.run("2.13.0", "2.15.0", FakeRunner(tmp_path, FakeCells(1)), offline=True) == 2
    assert capsys.readouterr().err == (
        "bisect: offline: true and no find_links: no folder of wheels to list torch releases from\n")


def test_online_run_lists_the_folder_and_the_index(tmp_path, monkeypatch, capsys):
    """uv takes torch from the find_links folder as well as the index, so bisect lists both."""
    monkeypatch.setattr(bisect, "available_releases", lambda index_url=None: ["2.13.0", "2.15.0"])
    folder = fake_wheels(tmp_path / "wheels", ["2.14.1"])
    runner = FakeRunner(tmp_path, FakeCells(1, ["2.13.0", "2.14.1", "2.15.0"]))
    assert bisect.run("2.13.0", "2.15.0", runner, find_links=[str(folder)]) == 0
    assert "3 final torch releases from 2.13.0 to 2.15.0: 2.13.0, 2.14.1, 2.15.0" in capsys.readouterr().out


def test_bisect_command_of_an_offline_matrix_lists_and_installs_offline(tmp_path, monkeypatch, capsys):
    """The matrix says offline: true and find_links: the command never asks PyPI, and every cell it
    runs installs with the installer offline, from that folder."""
    from cpugpu_conformance.cli import bisection as cli_bisect
    from cpugpu_conformance.cli import dispatch as cli
    from cpugpu_conformance.runner import CellSpec

    no_network(monkeypatch)
    folder = fake_wheels(tmp_path / "wheels", ["2.13.0", "2.14.1", "2.15.0"])
    m = tmp_path / "matrix.yaml"
    m.write_text('python: "3.11"\nbaseline: "2.13.0"\ncandidates: ["2.15.0"]\nfind_links: wheels\noffline: true\n'
                 'torch: [{version: "2.13.0"}, {version: "2.15.0"}]\n')
    installs = []

    def fake_cell(c, *, env_dir, python_version, results_dir, project_dir, pytest_args=(), name=None, package=None):
        spec = CellSpec.from_matrix_cell(c, results_dir=results_dir, project_dir=project_dir)
        installs.append(installing.install_command(Path("python"), spec.release, index_url=spec.index_url,
                                              requirements_file=None, find_links=spec.find_links, offline=spec.offline))
        failed = {("1", "cpu"): [rf.failure("t", "shape differs", None)]} if c.torch == "2.15.0" else None
        return results.CellResult(rf.completed(c.torch, cell=c.name, failed=failed)).write(results_dir / f"{c.name}.json")

    monkeypatch.setattr(cli_bisect, "run_matrix_cell", fake_cell)
    code = cli.main(["bisect", "2.13.0", "2.15.0", "--matrix", str(m), "--results", str(tmp_path / "results"),
                     "--envdir", str(tmp_path / "envs")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "3 final torch releases from 2.13.0 to 2.15.0: 2.13.0, 2.14.1, 2.15.0" in out
    assert len(installs) == 3
    for cmd in installs:
        assert ("--offline" in cmd or "--no-index" in cmd) and cmd[cmd.index("--find-links") + 1] == str(folder), cmd
