"""The result files a compat.json was made from, read back out of it.

compat.json carries each cell's result whole (less what changes from run to run, which the
report leaves out anyway), plus the keys the report adds. Taking those away and putting
the result schema's header back gives result files that ``report`` turns into the same
compat/ again: so the committed compat/ can be regenerated after a change to the report,
without the 16 cells' original result files.

    python tests/compat_sample.py compat/compat.json /tmp/results
    cpugpu-conformance report /tmp/results --out compat
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from cpugpu_conformance import results

# What report/render.py's _compat_entry adds to each cell's own result.
REPORT_KEYS = frozenset({"source", "release", "devices_shown", "duplicate", "answer", "marks"})


def results_from_compat(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """File name -> the cell result it held, each validated as a cell result."""
    files: dict[str, dict[str, Any]] = {}
    for cell in data["cells"]:
        result = {k: v for k, v in cell.items() if k not in REPORT_KEYS}
        result.update(schema=results.SCHEMA_ID, schema_version=results.SCHEMA_VERSION)
        files[cell["source"]] = results.CellResult(result, cell["source"]).to_json()
    return files


def write_results(compat_json: Path, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, result in results_from_compat(json.loads(compat_json.read_text(encoding="utf-8"))).items():
        path = out / name
        path.write_text(json.dumps(result, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tests/compat_sample.py COMPAT_JSON OUT_DIR")
    paths = write_results(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"wrote {len(paths)} result files to {sys.argv[2]}")
