"""The file at ``run --cell-result``, for a run that could not write its own answer there: marked
before pytest starts, replaced when the run is refused or ends early, and read at the end.

Importing this module needs nothing of the [tools] extra (as cli/run.py).
"""

from __future__ import annotations

import os
import sys
from typing import Protocol


class Prepared(Protocol):
    """What these read of run.py's Prepared: the command line's values and the result path."""

    values: dict[str, str]

    @property
    def cell_result(self) -> str | None: ...


# What the file at --cell-result says from the moment `run` takes it until the suite writes its
# answer: a run in which the plugin never loads (PYTEST_ADDOPTS="-p no:...",
# PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 and a plugin that needed it) leaves this, never an earlier pass.
NOT_STARTED = ("the run did not start: `cpugpu-conformance run` marked this path before pytest started, "
               "and the suite never wrote its answer here")


def identity(path: str | None) -> tuple[int, ...] | None:
    """What tells whether a file was replaced: every write is a rename of a new file."""
    try:
        info = os.stat(path) if path else None
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size) if info else None


def _cell_name(prepared: Prepared) -> str:
    if prepared.values.get("--cell-name"):
        return prepared.values["--cell-name"]
    from importlib import metadata

    try:
        return f"torch-{metadata.version('torch').split('+')[0]}"
    except metadata.PackageNotFoundError:
        return "torch-unknown"


def record_refusal(prepared: Prepared, status: str, detail: str, exitstatus: int) -> str | None:
    """Replace the file at --cell-result with this run's ``status`` for a run that did not get to
    write its own answer (never leave an earlier run's verdict there); returns why it could
    not, or None. A path another run holds is left alone."""
    from .. import results

    path = prepared.cell_result
    if not path:
        return None
    try:
        with results.exclusive(path):
            results.CellResult.new(_cell_name(prepared), status, detail=detail, pytest_exitstatus=exitstatus,
                               impl=prepared.values.get("--impl"), argv=sys.argv[1:]).write(path)
    except results.ResultPathBusy:
        return None  # another run is writing it: its answer, not an older one, will be there
    except (OSError, ValueError, results.ResultFileError) as exc:
        return f"{path} could not be replaced: {getattr(exc, 'strerror', None) or exc}"
    return None


def mark_not_started(prepared: Prepared) -> str | None:
    """Before pytest starts: the file at --cell-result says ``error`` (NOT_STARTED), so only the
    suite's own answer can replace an earlier run's. Returns why the path cannot be taken (one
    line: another run holds it, it holds something that is not a result file, it cannot be
    written), or None."""
    from .. import results

    path = prepared.cell_result
    if not path:
        return None
    try:
        with results.exclusive(path):
            results.CellResult.new(_cell_name(prepared), "error", detail=NOT_STARTED, impl=prepared.values.get("--impl"),
                                   argv=sys.argv[1:]).write(path)
    except results.ResultPathBusy as exc:
        return f"--cell-result {exc}"
    except OSError as exc:  # not a regular file, not one of our result files, no permission
        why = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)
        return f"--cell-result {why}" if why.startswith(str(path)) else f"--cell-result {path}: {why}"
    except (ValueError, results.ResultFileError) as exc:
        return f"--cell-result {path}: {exc}"
    return None


def says_interrupted(path: str) -> bool:
    """Whether the file at ``path`` still holds a run's placeholder: nothing judged that run."""
    from .. import results

    try:
        return results.CellResult.load(path).status == "interrupted"
    except (OSError, results.ResultFileError):
        return False  # unreadable: the suite's own exit status stands, and gate and report refuse the file
