"""The benchmarks' bad input: a one-line error naming the file, before anything is measured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("content", "culprit"), [(None, "no such file"), ("torch: [\n", "not valid YAML")],
                         ids=["missing", "corrupt"])
def test_bench_matrix_refuses_a_bad_matrix_in_one_line(tmp_path: Path, content: str | None, culprit: str) -> None:
    path = tmp_path / "matrix.yaml"
    if content is not None:
        path.write_text(content)
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_matrix.py"), "--skip-warm", "--warm-matrix"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CONFORMANCE_MATRIX": str(path)})
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(str(path)) and culprit in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and not proc.stdout
