"""The exit codes of every command, in one enum (stdlib only: ``run`` imports it where only
torch, numpy, hypothesis and pytest are installed)."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1  # a regression (gate), a cell that is not clean (summary, matrix)
    USAGE = 2  # bad input, a broken matrix, a missing extra, nothing to compare: one line names the culprit
    # `run` answers as pytest does (its own codes for the same two cases):
    PYTEST_INTERRUPTED = 2  # the run did not go through
    PYTEST_USAGE = 4  # bad input
