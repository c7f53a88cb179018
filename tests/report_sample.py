"""The results the report tests render, as their matrix shows them: the text a cell's failure,
recorded observation and crash carry, the releases of its cells and the rows they make, and a cell asked
for every device on a machine without CUDA (`cuda_missing`). The folder itself, and its report, are
report_sample_dirs.py's fixtures.
"""

from __future__ import annotations

REPRODUCER = 'import torch\nprint("<script>alert(1)</script> | pipe")\n'
OBSERVED_11 = "RuntimeError: accelerator | none\nsecond line <b>"
# the shape cell.py writes: what happened, then the log's tail
CRASH_DETAIL = "pytest killed by SIGABRT; last lines of the log:\ncollected 40 items\nFatal Python error: Aborted"
NO_CUDA = "no CUDA device on this machine"


def cuda_missing(result: dict) -> dict:
    """A cell asked for every device on a machine without CUDA, as the suite records it."""
    result["requested"]["device"] = "all"
    result["devices"]["cuda"] = {"status": "skipped", "reason": NO_CUDA}
    for promise in result["promises"].values():
        promise["devices"]["cuda"] = {"verdict": "skipped", "reason": NO_CUDA}
    return result


RELEASES = ["2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0"]
# A row per device each cell was asked to test: 2.13.0 asked for cuda and had none.
# The matrix's rows: newest release first, each cell's devices in contract order.
ROWS = [(r, d) for r in reversed(RELEASES) for d in (("cpu", "cuda") if r in ("2.13.0", "2.14.1") else ("cpu",))]
