"""The report: result files -> what people read.

    marks     how each outcome and answer shows: MARKS, ANSWERS (a symbol and a word each, no emoji)
    view      cell results -> the compatibility matrix's model (ReportedCell, columns, the answer on
              each device, observations); imports marks, never the reverse
    changes   what changed at each release: verdict_changes, recorded_changes, observation_changes_by_release
    badge     the device summaries -> badge.json (a shields.io endpoint)
    render    the model -> compat.json (schemas/compat.schema.json), COMPAT.md, index.html (templates/),
              badge.json
    publish   writing the outputs all or nothing
    summary   the summary table of a results folder (summary, matrix, nox)
    gate      baseline vs candidate: the gate's report of results.diff

Reads results/<cell>.json (through cpugpu_conformance.results); writes compat/.
"""

from __future__ import annotations

__all__ = ["badge", "changes", "gate", "marks", "publish", "render", "summary", "view"]
