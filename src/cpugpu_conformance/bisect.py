"""Find the first torch release where the suite's answer changes.

``nox -s bisect -- GOOD BAD`` lists the final torch releases from GOOD to BAD on the
package index, runs the suite in a fresh environment for as few of them as a binary
search needs, and names the first release whose *signature* (every promise's verdict
per device, the recorded text of promise 11, and every observed torch behaviour)
differs from GOOD's.

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

import json
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Callable

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from cpugpu_conformance import compat, results
from cpugpu_conformance.promises import RECORDED_ONLY

PACKAGE = "torch"
DEFAULT_INDEX_URL = "https://pypi.org/simple"
# PEP 691: ask for the JSON form of the Simple API; an index that only speaks
# PEP 503 HTML (download.pytorch.org does) answers with HTML, which we also read.
_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
_TIMEOUT_S = 30

# fetch(url, accept_header) -> (content_type, body)
Fetch = Callable[[str, str], "tuple[str, bytes]"]


class BisectError(Exception):
    """Bad input or an index that cannot be read: one line, meant for the user."""


# --------------------------------------------------------------------------- releases


def _http_fetch(url: str, accept: str) -> tuple[str, bytes]:
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "cpugpu-conformance-bisect"})
    with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
        return response.headers.get("Content-Type", ""), response.read()


class _AnchorParser(HTMLParser):
    """Collects (filename, yanked) from the anchors of a PEP 503 project page."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[tuple[str, bool]] = []
        self._yanked = False
        self._text: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._yanked = any(name == "data-yanked" for name, _ in attrs)
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._text is not None:
            self.files.append(("".join(self._text).strip(), self._yanked))
            self._text = None


def _version_of(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None  # not a distribution file (or a legacy name): not a release we can install


def parse_project_page(content_type: str, body: bytes, source: str = "index") -> list[str]:
    """Final releases of a Simple API project page (PEP 691 JSON or PEP 503 HTML), oldest first.

    A release counts when at least one of its files is not yanked. Pre-releases and dev
    releases are dropped; post releases are kept (they are final releases, rebuilt).
    Local version labels (``2.5.1+cpu`` on the PyTorch index) collapse to the public
    version, which is what a cell asks the installer for.
    """
    text = body.decode("utf-8", errors="replace")
    files: list[tuple[str, bool]]
    if "json" in content_type.lower():
        try:
            page = json.loads(text)
            files = [(f["filename"], bool(f.get("yanked"))) for f in page["files"]]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise BisectError(f"{source}: not a Simple API JSON project page ({type(exc).__name__}: {exc})") from None
    else:
        parser = _AnchorParser()
        parser.feed(text)
        files = parser.files
    releases: dict[Version, str] = {}
    for filename, yanked in files:
        version = _version_of(filename)
        if version is None or yanked or version.is_prerelease:
            continue
        public = Version(version.public)
        releases.setdefault(public, str(public))
    return [releases[v] for v in sorted(releases)]


def available_releases(index_url: str | None = None, fetch: Fetch | None = None) -> list[str]:
    """Final torch releases on the package index (the ordinary one by default), oldest first."""
    base = (index_url or DEFAULT_INDEX_URL).rstrip("/")
    url = f"{base}/{PACKAGE}/"
    try:
        content_type, body = (fetch or _http_fetch)(url, _ACCEPT)
    except urllib.error.HTTPError as exc:
        raise BisectError(f"cannot list torch releases: {url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BisectError(f"cannot list torch releases: {url} is unreachable ({reason})") from None
    found = parse_project_page(content_type, body, source=url)
    if not found:
        raise BisectError(f"cannot list torch releases: {url} lists no final torch release")
    return found


def _as_version(text: str, what: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise BisectError(f"{what} {text!r} is not a version number") from None


def releases_between(good: str, bad: str, available: list[str]) -> list[str]:
    """The available releases from ``good`` to ``bad``, both included, oldest first."""
    good_v, bad_v = _as_version(good, "good release"), _as_version(bad, "bad release")
    by_version = {Version(r): r for r in available}
    for label, wanted, text in (("good", good_v, good), ("bad", bad_v, bad)):
        if wanted not in by_version:
            raise BisectError(f"{label} release {text} is not a final torch release on the index")
    if not good_v < bad_v:
        raise BisectError(f"good release {good} must be older than bad release {bad}")
    return [by_version[v] for v in sorted(by_version) if good_v <= v <= bad_v]


# --------------------------------------------------------------------------- signatures


def _outcome(observation: Any) -> Any:
    """What an observation found, without the probe's description.

    observe.observe_all() records ``{"doc", "value"}`` or ``{"doc", "error": {"type",
    "message"}}``: the value itself, or the text ``raises Type: message``.
    """
    if isinstance(observation, dict):
        error = observation.get("error")
        if isinstance(error, dict):
            return f"raises {error.get('type', '?')}: {error.get('message', '')}"
        if "value" in observation:
            return observation["value"]
    return observation


def signature(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What must stay equal between releases for the contract's answer to be the same.

    ``{"promises": {"<id> on <device>": verdict}, "observations": {probe: outcome}}``; for
    a recorded-only promise (11) the verdict carries what was observed. Counts, timings
    and environment are left out: they differ without the answer changing.
    """
    promises: dict[str, str] = {}
    for pid, promise in (result.get("promises") or {}).items():
        for device, outcome in (promise.get("devices") or {}).items():
            verdict = outcome.get("verdict", "?")
            if pid in RECORDED_ONLY:
                verdict = f"{verdict}: {outcome.get('observed')}"
            promises[f"{pid} on {device}"] = verdict
    observations = {name: _outcome(value) for name, value in (result.get("observations") or {}).items()}
    return {"promises": promises, "observations": observations}


_ABSENT = compat.MISSING


def _text(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _promise_order(key: str) -> tuple[int, str]:
    pid, _, device = key.partition(" on ")
    return (int(pid) if pid.isdigit() else 10**6, device)


def diff(sig_a: dict[str, dict[str, Any]], sig_b: dict[str, dict[str, Any]]) -> list[str]:
    """Human-readable lines, one per promise/device or observed value that differs."""
    lines: list[str] = []
    a_p, b_p = sig_a.get("promises", {}), sig_b.get("promises", {})
    for key in sorted(set(a_p) | set(b_p), key=_promise_order):
        if a_p.get(key, _ABSENT) != b_p.get(key, _ABSENT):
            lines.append(f"promise {key}: {_text(a_p.get(key, _ABSENT))} -> {_text(b_p.get(key, _ABSENT))}")
    a_o, b_o = sig_a.get("observations", {}), sig_b.get("observations", {})
    for key in sorted(set(a_o) | set(b_o)):
        if a_o.get(key, _ABSENT) != b_o.get(key, _ABSENT):
            for path, before, after in compat.value_changes(key, a_o.get(key, _ABSENT), b_o.get(key, _ABSENT)):
                lines.append(f"observation {path}: {_text(before)} -> {_text(after)}")
    return lines


# --------------------------------------------------------------------------- the search


@dataclass
class Step:
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
    steps: list[Step]
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
    probe: Callable[[str], dict[str, Any]],
    on_step: Callable[[Step], None] | None = None,
) -> Bisection:
    """Binary-search ``releases`` (oldest first) for the first whose signature differs from ``releases[0]``'s.

    ``probe(release)`` returns that release's cell result (it is expensive: a new
    environment and a suite run), so each release is probed at most once. A result that
    is not "completed" makes the release untestable; the first and last release must be
    testable (BisectError otherwise).
    """
    if len(releases) < 2:
        raise BisectError("need at least two releases to bisect")
    signatures: dict[str, dict[str, dict[str, Any]] | None] = {}
    steps: list[Step] = []

    def sig_of(index: int) -> dict[str, dict[str, Any]] | None:
        release = releases[index]
        if release in signatures:
            return signatures[release]
        try:
            result = probe(release)
            if result.get("status") != "completed":
                raise Untestable(result.get("status", "?"), result.get("detail"))
        except Untestable as exc:
            signatures[release] = None
            step = Step(release, exc.status, None, exc.detail)
        else:
            signatures[release] = signature(result)
            # releases[0] is always probed first, so its signature is there to compare with
            step = Step(release, "completed", signatures[release] == signatures[releases[0]])
        steps.append(step)
        if on_step:
            on_step(step)
        return signatures[release]

    good_sig = sig_of(0)
    if good_sig is None:
        raise BisectError(f"good release {releases[0]} could not be tested ({steps[-1].status}): {steps[-1].detail}")
    bad_sig = sig_of(len(releases) - 1)
    if bad_sig is None:
        raise BisectError(f"bad release {releases[-1]} could not be tested ({steps[-1].status}): {steps[-1].detail}")
    if bad_sig == good_sig:
        return Bisection(None, None, [], steps)

    lo, hi = 0, len(releases) - 1  # releases[lo] answers like good, releases[hi] does not
    while hi - lo > 1:
        for index in _probe_order(lo, hi):
            sig = sig_of(index)
            if sig is None:
                continue
            if sig == good_sig:
                lo = index
            else:
                hi = index
            break
        else:
            break  # only untestable releases left between lo and hi
    untestable = releases[lo + 1 : hi]
    return Bisection(releases[hi], releases[lo], diff(signatures[releases[lo]], signatures[releases[hi]]), steps, untestable)


# --------------------------------------------------------------------------- the runner


def _last_line(text: str | None) -> str:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _print_step(number: int, step: Step, source: str | None) -> None:
    if step.same_as_good is None:
        verdict = f"untestable ({step.status}{': ' + _last_line(step.detail) if step.detail else ''})"
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
) -> int:
    """Bisect from ``good`` to ``bad``; print the steps and the verdict.

    ``run_release(version)`` runs a cell for that torch release and returns its result
    file, which is kept. ``releases`` replaces the index listing (offline use).
    Exit status: 0 a change point was found, 1 good and bad agree, 2 bad input or a
    release at either end that could not be tested.
    """
    try:
        available = releases if releases is not None else available_releases(index_url)
        span = releases_between(good, bad, available)
    except BisectError as exc:
        print(f"bisect: {exc}", file=sys.stderr)
        return 2
    print(f"bisect: {len(span)} final torch releases from {good} to {bad}: {', '.join(span)}", flush=True)

    paths: dict[str, str] = {}

    def probe(version: str) -> dict[str, Any]:
        path = Path(run_release(version))
        paths[version] = str(path)
        try:
            return results.load(path)
        except results.ResultFileError as exc:
            raise Untestable("no result", str(exc)) from None

    def on_step(step: Step) -> None:
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
