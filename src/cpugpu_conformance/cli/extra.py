"""How to add the ``[tools]`` extra (report, gate, bisect and the matrix's commands need it) to the
install the user has. The package is not on PyPI (``pip install 'cpugpu-conformance[tools]'``
fails), so the extra comes from the same source the package came from: a checkout (editable or
not), a wheel file, a git URL. pip and uv record that source in the installed package's
``direct_url.json`` (PEP 610), which is read here. Standard library only: the message is printed
where the extra's packages are missing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from importlib import metadata
from typing import Any
from urllib.parse import unquote, urlparse

DIST = "cpugpu-conformance"
EXTRA = f"{DIST}[tools]"
# Where nothing records the source (the package on sys.path from a source tree, or installed from an index).
UNKNOWN = ('pip install -e ".[tools]" in a checkout, or pip install "cpugpu-conformance[tools] @ <the wheel file or '
           'git URL you installed from>"')


def _quoted(text: str) -> str:
    """``text`` for a shell, in the README's double quotes where that is safe."""
    return f'"{text}"' if not re.search(r'["$`\\!]', text) else shlex.quote(text)


def _path_of(url: str) -> str | None:
    parsed = urlparse(url)
    return unquote(parsed.path) if parsed.scheme == "file" else None


def hint_for(direct_url: dict[str, Any] | None, cwd: str | None = None) -> str:
    """The command that adds the extra to an install whose PEP 610 record is ``direct_url`` (None:
    no record); ``cwd`` (default: the current folder) makes a checkout there read as ``.``."""
    if not isinstance(direct_url, dict) or not isinstance(direct_url.get("url"), str):
        return UNKNOWN
    url = direct_url["url"]
    here = os.path.realpath(cwd if cwd is not None else os.getcwd())
    vcs = direct_url.get("vcs_info")
    if isinstance(vcs, dict):  # pip install "git+https://..."
        revision = vcs.get("requested_revision")
        ref = f"{vcs.get('vcs', 'git')}+{url}" + (f"@{revision}" if revision else "")
        return f"pip install {_quoted(f'{EXTRA} @ {ref}')}"
    path = _path_of(url)
    folder = direct_url.get("dir_info")
    if isinstance(folder, dict) and path is not None:  # a checkout: editable or not
        where = "." if os.path.realpath(path) == here else path
        editable = "-e " if folder.get("editable") else ""
        return f"pip install {editable}{_quoted(f'{where}[tools]')}"
    # a wheel or an sdist (a file or a URL): the extra with the same file
    return f"pip install {_quoted(f'{EXTRA} @ {url}')}"


def direct_url() -> dict[str, Any] | None:
    """This install's PEP 610 record, or None (no record, or no installed package at all)."""
    try:
        text = metadata.distribution(DIST).read_text("direct_url.json")
    except (metadata.PackageNotFoundError, OSError):
        return None
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def install_hint() -> str:
    """How to add the tools extra to this install, as one command (or, unknown, the ways there are)."""
    return hint_for(direct_url())
