"""Signals for the child processes tests start.

A shell's background job (``cmd &``, CI runners, ``nohup``) starts with SIGINT ignored, and
an ignored signal stays ignored across fork and exec: a child that a test interrupts with
SIGINT would never see it. Start such children with ``preexec_fn=default_sigint``.
"""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """In the child, before exec: SIGINT back to its default action (Python turns it into KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
