"""bisect: the release listing (a Simple API page, JSON or HTML, of the given index) and the range
between a good and a bad release (no network, no torch)."""

from __future__ import annotations

import json
import urllib.error

import pytest
from bisect_cells import RELEASES

from cpugpu_conformance.runner import bisection as bisect

# ----------------------------------------------------------------------------- releases


def simple_json(*files):
    page = {"meta": {"api-version": "1.1"}, "name": "torch", "files": [{"filename": f, **extra} for f, extra in files]}
    return "application/vnd.pypi.simple.v1+json", json.dumps(page).encode()


def test_parse_json_page_keeps_final_releases_sorted_by_version():
    content_type, body = simple_json(
        ("torch-2.10.0-cp311-cp311-manylinux_2_28_x86_64.whl", {}),
        ("torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl", {}),
        ("torch-2.9.1-cp312-cp312-win_amd64.whl", {}),  # same release twice
        ("torch-2.11.0rc1-cp311-cp311-manylinux_2_28_x86_64.whl", {}),  # pre-release
        ("torch-2.11.0.dev20260101-cp311-cp311-linux_x86_64.whl", {}),  # dev
        ("torch-2.2.0-cp311-cp311-linux_x86_64.whl", {"yanked": "broken wheel"}),  # yanked
        ("torch-1.0.1.post2-cp37-cp37m-linux_x86_64.whl", {}),  # post: still final
        ("torch-0.1.2.tar.gz", {}),  # an sdist counts
        ("README.html", {}),  # not a distribution
    )
    assert bisect.parse_project_page(content_type, body) == ["0.1.2", "1.0.1.post2", "2.9.1", "2.10.0"]


def test_parse_html_page_from_a_pytorch_style_index():
    html = b"""<!DOCTYPE html><html><body>
    <a href="/whl/cpu/torch-2.5.1%2Bcpu-cp311-cp311-linux_x86_64.whl#sha256=ab">torch-2.5.1+cpu-cp311-cp311-linux_x86_64.whl</a><br/>
    <a href="/whl/cpu/torch-2.6.0%2Bcpu-cp311-cp311-linux_x86_64.whl" data-yanked="">torch-2.6.0+cpu-cp311-cp311-linux_x86_64.whl</a>
    <a href="/whl/cpu/torch-2.4.0%2Bcpu-cp311-cp311-linux_x86_64.whl">torch-2.4.0+cpu-cp311-cp311-linux_x86_64.whl</a>
    </body></html>"""
    assert bisect.parse_project_page("text/html", html) == ["2.4.0", "2.5.1"]


def test_available_releases_asks_the_simple_api_of_the_given_index():
    asked = []

    def fetch(url, accept):
        asked.append((url, accept))
        return simple_json(("torch-2.13.0-cp311-cp311-linux_x86_64.whl", {}))

    assert bisect.available_releases(fetch=fetch) == ["2.13.0"]
    assert bisect.available_releases("https://download.example/whl/cpu/", fetch=fetch) == ["2.13.0"]
    assert [url for url, _ in asked] == ["https://pypi.org/simple/torch/", "https://download.example/whl/cpu/torch/"]
    assert "application/vnd.pypi.simple.v1+json" in asked[0][1]


@pytest.mark.parametrize(
    "error, message",
    [
        (urllib.error.URLError("Name or service not known"), "is unreachable"),
        (urllib.error.HTTPError("u", 404, "Not Found", None, None), "answered HTTP 404"),
    ],
)
def test_available_releases_unreachable_index_is_one_clear_error(error, message):
    def fetch(url, accept):
        raise error

    with pytest.raises(bisect.BisectError, match=rf"cannot list torch releases: https://idx.example/torch/ {message}"):
        bisect.available_releases("https://idx.example", fetch=fetch)


def test_available_releases_empty_or_garbled_page():
    with pytest.raises(bisect.BisectError, match="lists no final torch release"):
        bisect.available_releases(fetch=lambda url, accept: simple_json())
    with pytest.raises(bisect.BisectError, match="not a Simple API JSON project page"):
        bisect.available_releases(fetch=lambda url, accept: ("application/vnd.pypi.simple.v1+json", b"{oops"))


def test_releases_between_is_inclusive_and_matches_equal_versions():
    assert bisect.releases_between("2.7.0", "2.9.1", RELEASES) == ["2.7.0", "2.7.1", "2.8.0", "2.9.1"]
    assert bisect.releases_between("2.7", "2.8", RELEASES) == ["2.7.0", "2.7.1", "2.8.0"]
    unsorted = list(reversed(RELEASES))
    assert bisect.releases_between("2.11.0", "2.12.0", unsorted) == ["2.11.0", "2.12.0"]


@pytest.mark.parametrize(
    "good, bad, message",
    [
        ("2.7.2", "2.9.1", "good release 2.7.2 is not a final torch release on the index"),
        ("2.7.0", "3.0.0", "bad release 3.0.0 is not a final torch release on the index"),
        ("2.9.1", "2.7.0", "good release 2.9.1 must be older than bad release 2.7.0"),
        ("2.8.0", "2.8.0", "good release 2.8.0 must be older than bad release 2.8.0"),
        ("latest", "2.8.0", "good release 'latest' is not a version number"),
    ],
)
def test_releases_between_refuses_bad_input(good, bad, message):
    with pytest.raises(bisect.BisectError, match=message.replace("(", r"\(").replace(".", r"\.")):
        bisect.releases_between(good, bad, RELEASES)
