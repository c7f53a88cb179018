"""What the tests of the gate share: the gate run on two results (dicts written to files first),
its error lines when it refuses, and the counts and reproducer the tests expect."""

from __future__ import annotations

from pathlib import Path

import result_factory as rf

from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.promises import PROMISES, RECORDED_ONLY, applies

# Pairs a clean CPU cell has verdicts for, judged (not recorded); and promises that apply on CUDA.
JUDGED_ON_CPU = sum(1 for p in PROMISES if p not in RECORDED_ONLY and applies(p, "cpu"))
APPLY_ON_CUDA = sum(1 for p in PROMISES if applies(p, "cuda"))

REPRODUCER = "import torch\nb = torch.zeros(4)\nb.add_(1)  # raises on 2.15.0\n"


def gate(tmp_path: Path, baseline, candidate, *extra: str) -> int:
    """Run the gate on two results (dicts are written to files; paths are used as they are)."""
    paths = []
    for name, result in (("baseline.json", baseline), ("candidate.json", candidate)):
        if isinstance(result, dict):
            result = rf.write(tmp_path, name, result)
        paths.append(str(result))
    return main(["gate", "--baseline", paths[0], "--candidate", paths[1], *extra])


def errors(capsys) -> list[str]:
    captured = capsys.readouterr()
    assert captured.out == "", "a refused comparison prints no verdict"
    lines = captured.err.strip().splitlines()
    assert all(line.startswith("cpugpu-conformance gate: error: ") for line in lines), lines
    return [line.removeprefix("cpugpu-conformance gate: error: ") for line in lines]
