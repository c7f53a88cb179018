"""Which final torch releases a package index or a folder of wheels offers.

Shared by bisect (the releases between two) and the matrix's ``version: latest`` entries
(the newest one, looked up when the cell runs). An index is read through its Simple API
project page, PEP 691 JSON or PEP 503 HTML (download.pytorch.org speaks only HTML); a
``file://`` index is a folder laid out the same way (``<root>/torch/index.html``). A
find-links folder is a plain folder of wheels, as ``uv pip install --find-links`` reads it.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from cpugpu_conformance.results import release_key

PACKAGE = "torch"
DEFAULT_INDEX_URL = "https://pypi.org/simple"
# PEP 691: ask for the JSON form of the Simple API; an index that only speaks
# PEP 503 HTML (download.pytorch.org does) answers with HTML, which we also read.
_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
_TIMEOUT_S = 30

# fetch(url, accept_header) -> (content_type, body)
Fetch = Callable[[str, str], "tuple[str, bytes]"]


class ReleaseListingError(Exception):
    """Bad input or an index that cannot be read: one line, meant for the user."""


def _http_fetch(url: str, accept: str) -> tuple[str, bytes]:
    local = _local_page(url)
    if local is not None:  # urllib cannot open a folder; a file:// index serves its index.html
        return "text/html", local.read_bytes()
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "cpugpu-conformance"})
    with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
        return response.headers.get("Content-Type", ""), response.read()


def _local_page(url: str) -> Path | None:
    """The index.html a file:// URL of a folder stands for; None for any other URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "file":
        return None
    path = Path(urllib.request.url2pathname(parts.path))
    page = path / "index.html" if path.is_dir() else path
    if not page.is_file():
        raise urllib.error.URLError(f"no such file: {page}")
    return page


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
            name, version = parse_wheel_filename(filename)[:2]
        else:
            name, version = parse_sdist_filename(filename)
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None  # not a distribution file (or a legacy name): not a release we can install
    return version if name == PACKAGE else None


def final_releases(files: Iterable[tuple[str, bool]]) -> list[str]:
    """The final releases among (filename, yanked) pairs, oldest first.

    A release counts when at least one of its files is not yanked. Pre-releases and dev
    releases are dropped; post releases are kept (they are final releases, rebuilt).
    Local version labels (``2.5.1+cpu`` on the PyTorch index) collapse to the public
    version, which is what a cell asks the installer for.
    """
    releases: dict[Version, str] = {}
    for filename, yanked in files:
        version = _version_of(filename)
        if version is None or yanked or version.is_prerelease:
            continue
        public = Version(version.public)
        releases.setdefault(public, str(public))
    return [releases[v] for v in sorted(releases)]


def parse_project_page(content_type: str, body: bytes, source: str = "index") -> list[str]:
    """Final releases of a Simple API project page (PEP 691 JSON or PEP 503 HTML), oldest first."""
    text = body.decode("utf-8", errors="replace")
    files: list[tuple[str, bool]]
    if "json" in content_type.lower():
        try:
            page = json.loads(text)
            files = [(f["filename"], bool(f.get("yanked"))) for f in page["files"]]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ReleaseListingError(f"{source}: not a Simple API JSON project page ({type(exc).__name__}: {exc})") from None
    else:
        parser = _AnchorParser()
        parser.feed(text)
        files = parser.files
    return final_releases(files)


def available_releases(index_url: str | None = None, fetch: Fetch | None = None) -> list[str]:
    """Final torch releases on the package index (the ordinary one by default), oldest first."""
    base = (index_url or DEFAULT_INDEX_URL).rstrip("/")
    url = f"{base}/{PACKAGE}/"
    try:
        content_type, body = (fetch or _http_fetch)(url, _ACCEPT)
    except urllib.error.HTTPError as exc:
        raise ReleaseListingError(f"cannot list torch releases: {url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ReleaseListingError(f"cannot list torch releases: {url} is unreachable ({reason})") from None
    found = parse_project_page(content_type, body, source=url)
    if not found:
        raise ReleaseListingError(f"cannot list torch releases: {url} lists no final torch release")
    return found


def folder_releases(folder: str | Path) -> list[str]:
    """Final torch releases among the wheels (and sdists) of a find-links folder, oldest first."""
    try:
        names = os.listdir(folder)
    except OSError as exc:
        raise ReleaseListingError(f"cannot list torch releases: find_links folder {folder}: {exc.strerror}") from None
    return final_releases((name, False) for name in names)


def releases_in_folders(find_links: Sequence[str | Path]) -> list[str]:
    """Final torch releases among the wheels of all these find-links folders, oldest first."""
    found = {release for folder in find_links for release in folder_releases(folder)}
    return sorted(found, key=release_key)


def newest_final_release(index_url: str | None, find_links: Sequence[str | Path] = (), *, offline: bool = False,
                         fetch: Fetch | None = None) -> str:
    """The newest final torch release the installer could take: from the find-links folders
    and, unless offline, the index (``index_url``, else PyPI)."""
    found = releases_in_folders(find_links)
    if not offline:  # an unreachable index is an error even when a folder has wheels: never a silent older pick
        found += available_releases(index_url, fetch)
    if not found:
        where = ", ".join(map(str, find_links)) or "nowhere (offline and no find_links)"
        raise ReleaseListingError(f"no final torch release in {where}")
    return str(max(Version(v) for v in found))
