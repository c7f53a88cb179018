"""The report: result files -> what people read.

    view      cell results -> the compatibility matrix's model (ReportedCell, columns, observations)
    marks     how each outcome and answer shows: MARKS, ANSWERS (a symbol and a word each)
    changes   what changed at each release: verdict_changes, observation_changes_by_release
    render    the model -> compat.json (schemas/compat.schema.json), COMPAT.md, index.html (templates/)
    publish   writing the three outputs all or nothing
    summary   the summary table of a results folder (summary, matrix, nox)
    gate      baseline vs candidate: the gate's report of results.diff

Reads results/<cell>.json (through cpugpu_conformance.results); writes compat/.
"""

from __future__ import annotations

__all__ = ["changes", "gate", "marks", "publish", "render", "summary", "view"]
