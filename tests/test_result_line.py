"""A cell's log names the file the cell leaves, never its staging name (issue 31, item 5): the
runner tells the suite the final path, and the recorder's last line uses it."""

from __future__ import annotations

import textwrap
from pathlib import Path

from cell_helpers import fake_python, spec, writes_result
from suite_runner import run_suite

from cpugpu_conformance.runner import cell


def test_the_runner_tells_the_suite_the_final_path(tmp_path: Path) -> None:
    s = spec(tmp_path)
    says = f"import os\nprint('shown as', os.environ[{cell.SHOWN_AS!r}])\n" + textwrap.dedent(writes_result("passed"))
    cell.run_cell(s, fake_python(tmp_path, says))
    log = s.log_path.read_text()
    assert f"shown as {s.result_path}" in log, log[-2000:]
    assert ".json.part" not in log.split("shown as", 1)[1].splitlines()[0]


def test_the_last_line_names_the_path_it_is_given(tmp_path: Path, monkeypatch) -> None:
    final = tmp_path / "results" / "torch-2.13.0-cpu.json"
    monkeypatch.setenv(cell.SHOWN_AS, str(final))
    run = run_suite(tmp_path, "--promise", "11", "--device", "cpu")
    assert run.returncode == 0, run.stdout[-2000:]
    assert f"cell result written to {final}" in run.stdout, run.stdout[-2000:]
