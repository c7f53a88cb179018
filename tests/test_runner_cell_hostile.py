"""The cell runner where its results folder is hostile or fails under it: whatever stands at the log
path (a symlink, a FIFO, a hard link, a folder), and a disk that fills during the run.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest
from cell_helpers import fake_python, on_disk, spec, writes_result

from cpugpu_conformance import results
from cpugpu_conformance.runner import cell, processes


@pytest.mark.parametrize("standing", ["a symlink to a file", "a FIFO", "a second name of a file"])
def test_whatever_stands_at_the_log_path_is_replaced_never_written_through(tmp_path: Path, standing: str) -> None:
    """results/<cell>.log as a symlink: the fresh log emptied the file it pointed to; as a FIFO: the
    cell waited forever for a reader, before running anything."""
    s = spec(tmp_path)
    s.results_dir.mkdir()
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    if standing == "a symlink to a file":
        s.log_path.symlink_to(precious)
    elif standing == "a FIFO":
        os.mkfifo(s.log_path)
    else:
        os.link(precious, s.log_path)
    python = fake_python(tmp_path, writes_result("passed"))
    done: list[results.CellResult] = []
    runner = threading.Thread(target=lambda: done.append(cell.run_cell(s, python)), daemon=True)
    runner.start()
    runner.join(120)
    assert done, "the cell hung on its log"
    assert done[0].status == "completed" and done[0].answer().clean
    assert precious.read_text() == "keep me\n"
    assert s.log_path.is_file() and not s.log_path.is_symlink() and "suite args: conformance" in s.log_path.read_text()


def test_a_folder_at_the_log_path_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    s = spec(tmp_path)
    s.log_path.mkdir(parents=True)
    with pytest.raises(cell.ResultPathUnusable) as info:
        cell.run_cell(s, fake_python(tmp_path, writes_result("passed")))
    assert str(s.log_path) in str(info.value) and "\n" not in str(info.value)


class _FullDisk:
    """A log file on a disk that fills after its first line (the command): every later write fails."""

    def __init__(self, path, mode, buffering=-1):
        self._file = open(path, mode, buffering=buffering)  # noqa: SIM115 (closed by __exit__)
        self._writes = 0

    def write(self, data: bytes) -> int:
        self._writes += 1
        if self._writes > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self._file.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()


CHATTY = "for i in range(20000):\n    print('x' * 100)\n"  # 2 MB: a pipe nobody drains blocks the suite


def test_a_log_that_cannot_be_written_stops_but_the_suite_runs_to_its_answer(tmp_path: Path, monkeypatch, capsys) -> None:
    """A full disk under the log: the thread that copied the suite's output died (a traceback), and
    the suite blocked on a pipe nobody read until its time limit."""
    monkeypatch.setattr(processes, "open", _FullDisk, raising=False)
    s = spec(tmp_path, limit=120)
    started = time.monotonic()
    result = cell.run_cell(s, fake_python(tmp_path, CHATTY + writes_result("passed")))
    assert time.monotonic() - started < 60, "the suite was left blocked on its output"
    assert result.status == "completed" and result.answer().clean
    out = capsys.readouterr()
    assert f"[the log {s.log_path} stops here: No space left on device]" in out.out
    assert "Traceback" not in out.err


def test_a_result_that_cannot_be_written_is_one_line_never_a_pass(tmp_path: Path, monkeypatch) -> None:
    """The disk full by the time the answer is written: the runner's own error could not be written
    either, and the cell ended in a chain of tracebacks; the placeholder stays, never a pass."""
    s = spec(tmp_path)
    real_write = results.CellResult.write

    def full_after_the_placeholder(self, path):
        if self.status != "interrupted":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, path)

    monkeypatch.setattr(results.CellResult, "write", full_after_the_placeholder)
    with pytest.raises(cell.ResultPathUnusable) as info:
        cell.run_cell(s, fake_python(tmp_path, writes_result("passed")))
    assert "No space left on device" in str(info.value) and "\n" not in str(info.value)
    monkeypatch.undo()
    assert on_disk(s).status == "interrupted"
