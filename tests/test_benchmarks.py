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


def test_bench_result_cap_measures_files_at_the_caps_and_each_shape_reads_as_it_says(tmp_path: Path) -> None:
    """The shapes bench_result_cap.py measures: each as large as the caps let a file be, the valid ones
    read, the others refused in one line; so its figures are about what they claim."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_result_cap as bench
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from cpugpu_conformance import results

    refused = {"unknown key": "JSON values, over the", "unknown string": "unknown key 'padding' at the top level"}
    for shape, make in bench.SHAPES.items():
        path = tmp_path / f"{shape}.json"
        path.write_bytes(bench._dumps(make("2.13.0")))
        size, values = path.stat().st_size, results.count_values(path.read_bytes())
        assert size <= results.MAX_FILE_BYTES and values <= (results.MAX_VALUES if shape not in refused else 10**9)
        if shape in ("long texts", "wide texts", "unknown key", "unknown string"):
            assert size > 0.95 * results.MAX_FILE_BYTES, (shape, size)
        if shape == "many values":
            assert values > 0.95 * results.MAX_VALUES, values
        if shape in refused:
            with pytest.raises(results.ResultFileError, match=refused[shape]):
                results.CellResult.load(path)
        else:
            results.CellResult.load(path)
