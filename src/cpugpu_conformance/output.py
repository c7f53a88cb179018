"""Output that a closed reader cannot break: ``| head -1`` or a hung-up terminal ends the
printing, never the command, and the exit code stays the one the command decided."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import IO


def write_out(text: str, out: IO[str] | None = None) -> None:
    """Write ``text`` to ``out`` (stdout) and flush it. A closed output (the terminal went away,
    ``| head -1``) ends the printing, never the run: the stream's descriptor is pointed at
    /dev/null, so later writes, and the interpreter's last flush, go nowhere without an error."""
    out = sys.stdout if out is None else out
    try:
        out.write(text)
        out.flush()
    except (OSError, ValueError):  # EPIPE, EIO (a hung-up terminal), a closed file
        _silence(out)


def say(line: str, out: IO[str] | None = None) -> None:
    """One line of output (see write_out)."""
    write_out(line + "\n", out)


def _silence(out: IO[str]) -> None:
    try:
        fd = out.fileno()
    except (OSError, ValueError, AttributeError):
        return  # not a file descriptor (a test's StringIO): nothing to redirect
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
    with contextlib.suppress(OSError, ValueError):
        out.flush()  # what was buffered goes to /dev/null now
