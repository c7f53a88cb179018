"""Reading the Markdown the gate writes to a job summary, for the tests that check what renders."""

from __future__ import annotations

import re


def outside_code(markdown: str) -> str:
    """The Markdown's lines outside fenced code blocks (a fence closes only at the same run of backticks)."""
    out, fence = [], None
    for line in markdown.splitlines():
        opener = re.match(r"^(`{3,})\w*$", line)
        if fence is None and opener:
            fence = opener.group(1)
        elif fence is not None and line == fence:
            fence = None
        elif fence is None:
            out.append(line)
    return "\n".join(out)
