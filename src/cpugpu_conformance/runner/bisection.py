"""Find the first torch release where the suite's answer changes.

``nox -s bisect -- GOOD BAD`` lists the final torch releases from GOOD to BAD on the
package index, runs the suite in a fresh environment for as few of them as a binary
search needs, and names the first release whose *answer* (every promise's verdict
per device, the recorded text of promise 11, and every observed torch behaviour)
differs from GOOD's (``results.diff``).

The search assumes one change point: every release up to some X answers like GOOD and
every release from X on answers differently. When behaviour changes and changes back
inside the range, the search still ends at *a* release where the answer differs from
its predecessor's, but not necessarily the first one; the printed steps show what was
seen.

A release that cannot be tested (no wheel for this Python, crashed, timed out) is
skipped like ``git bisect skip``: the search tries its nearest untested neighbour, and
if only untestable releases separate a same-as-GOOD release from a changed one, the
answer is that range, with the untestable releases named.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from packaging.version import InvalidVersion, Version

from cpugpu_conformance import results
from cpugpu_conformance.runner.releases import (
    ReleaseListingError as BisectError,  # the listing's errors are bisect's too
)
from cpugpu_conformance.runner.releases import available_releases, parse_project_page, releases_in_folders  # noqa: F401  (re-exported)

# --------------------------------------------------------------------------- releases


def _as_version(text: str, what: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise BisectError(f"{what} {text!r} is not a version number") from None


def releases_between(good: str, bad: str, available: list[str], where: str = "on the index") -> list[str]:
    """The available releases from ``good`` to ``bad``, both included, oldest first."""
    good_v, bad_v = _as_version(good, "good release"), _as_version(bad, "bad release")
    by_version = {Version(r): r for r in available}
    for label, wanted, text in (("good", good_v, good), ("bad", bad_v, bad)):
        if wanted not in by_version:
            raise BisectError(f"{label} release {text} is not a final torch release {where}")
    if not good_v < bad_v:
        raise BisectError(f"good release {good} must be older than bad release {bad}")
    return [by_version[v] for v in sorted(by_version) if good_v <= v <= bad_v]


def installable_releases(index_url: str | None, find_links: Sequence[str] = (), offline: bool = False) -> list[str]:
    """The final releases the cells could install, oldest first: those in the find_links
    folders and, unless offline, on the index. Offline, the index is never asked."""
    found = releases_in_folders(find_links)
    if offline:
        if not find_links:
            raise BisectError("offline: true and no find_links: no folder of wheels to list torch releases from")
        return found
    return sorted(set(found) | set(available_releases(index_url)), key=results.release_key)


def _where_listed(find_links: Sequence[str], offline: bool) -> str:
    """Where the releases were looked for, for a release that is not there."""
    folders = " or ".join(f"in {folder}" for folder in find_links)
    if offline:
        return folders
    return "on the index" + (f" or {folders}" if folders else "")


# --------------------------------------------------------------------------- comparing


def changes(good: results.CellResult, other: results.CellResult) -> list[str]:
    """How ``other`` answers differently from ``good``, one line each; empty when they agree.

    The answer is every promise's outcome per device (with what a recorded-only promise
    recorded) and every observed torch behaviour, compared by ``results.diff``: counts,
    timings and environment differ without the answer changing.
    """
    return results.diff(good, other).change_lines()


# --------------------------------------------------------------------------- the search


@dataclass
class BisectStep:
    """One probe: which release, and how it compared with the good release."""

    release: str
    status: str  # the cell's status; only "completed" can be compared
    same_as_good: bool | None  # None when the release could not be tested
    detail: str | None = None


@dataclass
class Bisection:
    """The answer: the change lies between ``previous`` and ``first_changed``."""

    first_changed: str | None  # None: the last release answers like the first
    previous: str | None
    diff: list[str]
    steps: list[BisectStep]
    untestable: list[str] = field(default_factory=list)  # releases between previous and first_changed


class Untestable(Exception):
    """Raised by a probe for a release whose cell produced no comparable result."""

    def __init__(self, status: str, detail: str | None = None) -> None:
        super().__init__(status)
        self.status, self.detail = status, detail


def _probe_order(lo: int, hi: int) -> list[int]:
    """Indices strictly between lo and hi, the midpoint first, then outwards."""
    mid = (lo + hi) // 2
    inner = range(lo + 1, hi)
    return sorted(inner, key=lambda i: (abs(i - mid), i))


def bisect_first_change(
    releases: list[str],
    probe: Callable[[str], results.CellResult],
    on_step: Callable[[BisectStep], None] | None = None,
) -> Bisection:
    """Binary-search ``releases`` (oldest first) for the first that answers differently from ``releases[0]``.

    ``probe(release)`` returns that release's cell result (it is expensive: a new
    environment and a suite run), so each release is probed at most once. A result that
    is not "completed" makes the release untestable; the first and last release must be
    testable (BisectError otherwise).
    """
    if len(releases) < 2:
        raise BisectError("need at least two releases to bisect")
    answers: dict[str, results.CellResult | None] = {}
    steps: list[BisectStep] = []

    def answer_of(index: int) -> results.CellResult | None:
        release = releases[index]
        if release in answers:
            return answers[release]
        try:
            result = probe(release)
            if not result.completed:
                raise Untestable(result.status, result.detail)
        except Untestable as exc:
            answers[release] = None
            step = BisectStep(release, exc.status, None, exc.detail)
        else:
            answers[release] = result
            # releases[0] is always probed first, so its answer is there to compare with
            good = answers[releases[0]]
            step = BisectStep(release, "completed", good is None or not changes(good, result))
        steps.append(step)
        if on_step:
            on_step(step)
        return answers[release]

    good = answer_of(0)
    if good is None:
        raise BisectError(f"good release {releases[0]} could not be tested ({steps[-1].status}): {steps[-1].detail}")
    bad = answer_of(len(releases) - 1)
    if bad is None:
        raise BisectError(f"bad release {releases[-1]} could not be tested ({steps[-1].status}): {steps[-1].detail}")
    if not changes(good, bad):
        return Bisection(None, None, [], steps)

    lo, hi = 0, len(releases) - 1  # releases[lo] answers like good, releases[hi] does not
    while hi - lo > 1:
        for index in _probe_order(lo, hi):
            found = answer_of(index)
            if found is None:
                continue
            if changes(good, found):
                hi = index
            else:
                lo = index
            break
        else:
            break  # only untestable releases left between lo and hi
    untestable = releases[lo + 1 : hi]
    before, after = answers[releases[lo]], answers[releases[hi]]
    assert before is not None and after is not None
    return Bisection(releases[hi], releases[lo], changes(before, after), steps, untestable)


# --------------------------------------------------------------------------- the runner



def _print_step(number: int, step: BisectStep, source: str | None) -> None:
    if step.same_as_good is None:
        verdict = f"untestable ({step.status}{': ' + results.last_line(step.detail, None) if step.detail else ''})"
    elif step.same_as_good:
        verdict = "same as good"
    else:
        verdict = "changed"
    where = f"  [{source}]" if source else ""
    print(f"step {number}: torch {step.release}: {verdict}{where}", flush=True)


def run(
    good: str,
    bad: str,
    run_release: Callable[[str], Path],
    index_url: str | None = None,
    releases: list[str] | None = None,
    find_links: Sequence[str] = (),
    offline: bool = False,
) -> int:
    """Bisect from ``good`` to ``bad``; print the steps and the verdict.

    ``run_release(version)`` runs a cell for that torch release and returns its result
    file, which is kept. The releases are those in the ``find_links`` folders and, unless
    ``offline``, on the index; ``releases`` replaces that listing.
    Exit status: 0 a change point was found, 1 good and bad agree, 2 bad input or a
    release at either end that could not be tested.
    """
    try:
        if releases is not None:
            span = releases_between(good, bad, releases, "among those given")
        else:
            available = installable_releases(index_url, find_links, offline)
            span = releases_between(good, bad, available, _where_listed(find_links, offline))
    except BisectError as exc:
        print(f"bisect: {exc}", file=sys.stderr)
        return 2
    print(f"bisect: {len(span)} final torch releases from {good} to {bad}: {', '.join(span)}", flush=True)

    paths: dict[str, str] = {}

    def probe(version: str) -> results.CellResult:
        path = Path(run_release(version))
        paths[version] = str(path)
        try:
            return results.CellResult.load(path)
        except results.ResultFileError as exc:
            raise Untestable("no result", str(exc)) from None

    def on_step(step: BisectStep) -> None:
        _print_step(len(paths), step, paths.get(step.release))

    try:
        found = bisect_first_change(span, probe, on_step)
    except BisectError as exc:
        print(f"bisect: {exc}", file=sys.stderr)
        return 2
    tested = sum(1 for s in found.steps if s.same_as_good is not None)
    if found.first_changed is None:
        print(f"bisect: no change: torch {bad} answers like torch {good} ({tested} releases run)")
        return 1
    if found.untestable:
        print(
            f"bisect: first change after torch {found.previous}, at or before torch {found.first_changed} "
            f"(untestable in between: {', '.join(found.untestable)}), {tested} releases run:"
        )
    else:
        print(f"bisect: first change at torch {found.first_changed} (previous: {found.previous}), {tested} releases run:")
    for line in found.diff:
        print(f"  {line}")
    return 0
