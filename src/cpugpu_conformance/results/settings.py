"""Whether two result files ran their tests under the same hypothesis settings: the gate compares
only like with like. A baseline run under the ci profile (120 examples, derandomized) and a
candidate run under a team's quick profile (20, random) differ in what they could find, so a
promise that "held" on both says nothing about the upgrade."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .text import one_line

# What a test's settings are compared on (the result file's hypothesis_ran); the examples a run
# executed may differ with the torch (a dtype more to draw), the settings may not.
COMPARED = ("max_examples", "phases", "derandomize")


def _settings(ran: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(tuple(v) if isinstance(v, list) else v for v in (ran.get(k) for k in COMPARED))


def different_settings(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> str | None:
    """One line naming how the two ran differently (None: alike). Where no test recorded its settings
    on both sides (a file of an older suite, a run with no hypothesis test, two runs of disjoint
    tests), the two are compared by their profiles' names."""
    left, right = baseline.get("hypothesis_ran") or {}, candidate.get("hypothesis_ran") or {}
    if not set(left) & set(right):
        a, b = baseline.get("hypothesis_profile"), candidate.get("hypothesis_profile")
        if a and b and a != b:
            return (f"the baseline ran under the hypothesis profile {one_line(str(a))!r} and the candidate under "
                    f"{one_line(str(b))!r}: run both with one profile to compare them")
        return None
    differ = [(test, left[test], right[test]) for test in sorted(set(left) & set(right))
              if _settings(left[test]) != _settings(right[test])]
    if not differ:
        return None
    test, a, b = differ[0]
    what = ", ".join(f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in COMPARED if a.get(k) != b.get(k))
    more = f" (and {len(differ) - 1} more test(s))" if len(differ) > 1 else ""
    return (f"the baseline and the candidate ran under different hypothesis settings: {one_line(test)}: {what}{more}; "
            "run both with one profile to compare them")
