"""report publishes all or nothing: the other files in --out are kept and the outputs are published
0644; a partly unwritable --out, a failure while swapping the outputs in, or a bug in rendering leaves
the previous report as it was.
"""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pytest
from report_sample_dirs import results_dir_fixture  # noqa: F401 - the fixture `results_dir`

from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.report import render as report


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every entry of a folder, hidden ones included: nothing may be left behind or lost."""
    return {p.name: (p.read_bytes() if p.is_file() else b"<dir>") for p in folder.iterdir()}


@pytest.fixture
def previous(results_dir: Path, tmp_path: Path) -> Path:
    """An --out folder holding a previous report and a file the user keeps there."""
    out = tmp_path / "out"
    assert main(["report", str(results_dir), "--out", str(out)]) == 0
    for name in report.OUTPUTS:
        (out / name).write_text(f"previous {name}\n", encoding="utf-8")
    (out / "README.txt").write_text("mine\n", encoding="utf-8")
    return out


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line]


def test_a_report_keeps_other_files_in_out_and_publishes_0644(results_dir: Path, previous: Path, capsys):
    old_umask = os.umask(0o077)
    try:
        assert main(["report", str(results_dir), "--out", str(previous)]) == 0
    finally:
        os.umask(old_umask)
    assert sorted(p.name for p in previous.iterdir()) == ["COMPAT.md", "README.txt", "badge.json", "compat.json",
                                                          "index.html"]
    assert (previous / "README.txt").read_text(encoding="utf-8") == "mine\n"
    for name in report.OUTPUTS:
        assert not (previous / name).read_text(encoding="utf-8").startswith("previous")
        assert stat.S_IMODE((previous / name).stat().st_mode) == 0o644


@pytest.mark.parametrize("blocker", ["read-only index.html", "directory named COMPAT.md"])
def test_a_partly_unwritable_out_keeps_the_previous_report(results_dir: Path, previous: Path, capsys, blocker):
    if blocker == "read-only index.html":
        (previous / "index.html").chmod(0o444)
    else:
        (previous / "COMPAT.md").unlink()
        (previous / "COMPAT.md").mkdir()
    before = snapshot(previous)
    capsys.readouterr()
    assert main(["report", str(results_dir), "--out", str(previous)]) == 2
    [line] = error_lines(capsys)
    assert line.startswith("cpugpu-conformance report: error: cannot write the report to ")
    assert ("index.html" if "index" in blocker else "COMPAT.md") in line and "previous report is left as it was" in line
    assert snapshot(previous) == before


def test_a_failure_while_swapping_in_rolls_back_to_the_previous_report(results_dir: Path, previous: Path, capsys,
                                                                      monkeypatch):
    before = snapshot(previous)
    real_replace = os.replace
    calls = []

    def replace_then_fail(src, dst):
        calls.append(Path(dst).name)
        if len(calls) == 2:  # the second output: the first is already swapped in
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(report.os, "replace", replace_then_fail)
    capsys.readouterr()
    assert main(["report", str(results_dir), "--out", str(previous)]) == 2
    monkeypatch.undo()
    [line] = error_lines(capsys)
    assert "No space left on device" in line
    assert snapshot(previous) == before  # the first output restored, no staged or backup file left


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_report_stopped_by_a_signal_while_swapping_in_leaves_the_previous_report(
        results_dir: Path, previous: Path, capsys, monkeypatch, signum):
    """A CI cancel (SIGTERM) mid-publish killed the report outright: its staged and backup files
    stayed in --out, hidden, and the outputs were a mix of old and new."""
    before, handler = snapshot(previous), signal.getsignal(signum)
    real_replace = os.replace
    calls = []

    def replace_then_signal(src, dst):
        calls.append(Path(dst).name)
        if len(calls) == 2:  # the first output is already swapped in
            signal.raise_signal(signum)
        return real_replace(src, dst)

    monkeypatch.setattr(report.os, "replace", replace_then_signal)
    capsys.readouterr()
    assert main(["report", str(results_dir), "--out", str(previous)]) == 128 + signum
    monkeypatch.undo()
    assert error_lines(capsys) == [f"cpugpu-conformance report: interrupted by {signal.Signals(signum).name}; "
                                   "the previous report is left as it was"]
    assert snapshot(previous) == before
    assert signal.getsignal(signum) == handler, "the report puts the previous handler back"


def test_nothing_is_written_when_rendering_fails(results_dir: Path, previous: Path, monkeypatch):
    before = snapshot(previous)

    def broken(got):
        raise RuntimeError("a bug in rendering")

    monkeypatch.setattr(report, "build_view", broken)
    with pytest.raises(RuntimeError):
        main(["report", str(results_dir), "--out", str(previous)])
    assert snapshot(previous) == before
