"""The missing-tools-extra message says how to add the extra to the install the user has (issue 31,
item 5): the package is not on PyPI, so ``pip install 'cpugpu-conformance[tools]'`` fails, as the
README says. The source comes from the install's PEP 610 record (direct_url.json)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cpugpu_conformance.cli import ExitCode, dispatch
from cpugpu_conformance.cli.extra import UNKNOWN, direct_url, hint_for

pytestmark = pytest.mark.quick

CHECKOUT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("record", "expected"), [
    ({"url": "file:///home/me/cpugpu-conformance", "dir_info": {"editable": True}},
     'pip install -e "/home/me/cpugpu-conformance[tools]"'),
    ({"url": "file:///home/me/cpugpu-conformance", "dir_info": {}}, 'pip install "/home/me/cpugpu-conformance[tools]"'),
    ({"url": "file:///tmp/dist/cpugpu_conformance-0.1.0-py3-none-any.whl", "archive_info": {"hashes": {}}},
     'pip install "cpugpu-conformance[tools] @ file:///tmp/dist/cpugpu_conformance-0.1.0-py3-none-any.whl"'),
    ({"url": "https://github.com/OWNER/cpugpu-conformance", "vcs_info": {"vcs": "git", "commit_id": "abc123",
                                                                       "requested_revision": "v0.1.0"}},
     'pip install "cpugpu-conformance[tools] @ git+https://github.com/OWNER/cpugpu-conformance@v0.1.0"'),
    ({"url": "https://github.com/OWNER/cpugpu-conformance", "vcs_info": {"vcs": "git", "commit_id": "abc123"}},
     'pip install "cpugpu-conformance[tools] @ git+https://github.com/OWNER/cpugpu-conformance"'),
    (None, UNKNOWN),
], ids=["editable-checkout", "checkout", "wheel", "git-at-a-tag", "git", "no-record"])
def test_the_extra_comes_from_the_source_the_package_came_from(record, expected, tmp_path):
    hint = hint_for(record, cwd=str(tmp_path))
    assert hint == expected
    assert "pip install 'cpugpu-conformance[tools]'" not in hint and "pip install cpugpu-conformance[tools]" not in hint


def test_a_checkout_in_the_current_folder_reads_as_dot(tmp_path):
    record = {"url": tmp_path.as_uri(), "dir_info": {"editable": True}}
    assert hint_for(record, cwd=str(tmp_path)) == 'pip install -e ".[tools]"'


def test_a_path_a_shell_would_expand_is_quoted_safely():
    record = {"url": "file:///home/me/my%20%24project", "dir_info": {"editable": True}}
    assert hint_for(record, cwd="/") == "pip install -e '/home/me/my $project[tools]'"


def _editable_here() -> bool:
    record = direct_url() or {}
    return bool((record.get("dir_info") or {}).get("editable")) and record.get("url") == CHECKOUT.as_uri()


@pytest.mark.skipif(not _editable_here(), reason="the package is not installed editable from this checkout")
def test_the_commands_say_it_for_this_install(monkeypatch, capsys):
    """This checkout's own environment (nox -s tests, the dev venv): an editable install of the checkout."""
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    monkeypatch.chdir(CHECKOUT)
    assert dispatch.main(["gate", "--help"]) == ExitCode.USAGE
    assert capsys.readouterr().err == ('cpugpu-conformance gate needs jsonschema: add the tools extra to your install: '
                                       'pip install -e ".[tools]"\n')
