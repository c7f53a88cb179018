"""The intra-op thread counts the suite runs with (torch.set_num_threads).

Engines run with torch's default: as many intra-op threads as the machine has cores. A class whose
copy depends on that count (a copy split by hand across threads, say) is right with one thread and
wrong with several, so the suite never pins the count: every test runs with the count the process
has (the shipped suite and a team's own pytest alike), and the copies run each check with one
thread and with several (``copy_counts``). The result file says which (``environment``).
"""

from __future__ import annotations

from typing import Any


def several() -> int:
    """More than one intra-op thread: the process's own count, or two where it has one."""
    import torch

    return max(2, torch.get_num_threads())


def copy_counts() -> tuple[int, ...]:
    """The intra-op thread counts each copy check runs with: one, and several."""
    return (1, several())


def environment() -> dict[str, Any]:
    """For the result file: the count the tests ran with, and the counts the copy checks ran with."""
    import torch

    return {"intra_op_threads": {"tests": torch.get_num_threads(), "copies": list(copy_counts())}}
