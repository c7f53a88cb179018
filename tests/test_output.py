"""A closed reader (`| head -1`, a hung-up terminal) ends the printing, never the command:
no BrokenPipeError traceback, and the exit code is the one the command decided."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import result_factory as rf

ROOT = Path(__file__).resolve().parents[1]


def _closed_reader(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run ARGV with its stdout a pipe whose reader is already gone."""
    script = (
        "import os, subprocess, sys\n"
        "r, w = os.pipe(); os.close(r)\n"
        "proc = subprocess.run(sys.argv[1:], stdout=w, stderr=subprocess.PIPE, text=True)\n"
        "sys.stderr.write(proc.stderr); sys.exit(proc.returncode)\n"
    )
    return subprocess.run([sys.executable, "-c", script, sys.executable, "-m", *argv], capture_output=True,
                          text=True, timeout=120, check=False, cwd=ROOT)


@pytest.mark.parametrize("argv", [
    ["cpugpu_conformance.matrix", "matrix.yaml"],
    ["cpugpu_conformance.matrix", "matrix.yaml", "--json"],
    ["cpugpu_conformance", "cells", "--matrix", "matrix.yaml"],
    ["cpugpu_conformance", "cells", "--matrix", "matrix.yaml", "--json"],
], ids=["matrix", "matrix-json", "cells", "cells-json"])
def test_a_listing_to_a_closed_reader_is_no_traceback_and_exit_0(argv: list[str]) -> None:
    proc = _closed_reader(*argv)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_a_summary_to_a_closed_reader_keeps_its_answer(tmp_path: Path) -> None:
    rf.write(tmp_path, "torch-2.13.0-cpu.json", rf.completed("2.13.0", cell="torch-2.13.0-cpu"))
    rf.write(tmp_path, "torch-2.14.1-cpu.json", rf.incomplete("2.14.1", "crashed", "boom", cell="torch-2.14.1-cpu"))
    proc = _closed_reader("cpugpu_conformance", "summary", str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
