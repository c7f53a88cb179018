"""The processes below a process, by their parent links in /proc: what a group kill cannot reach (a
process that started a session of its own) is found here. Standard library only: tools/gpu_check.py
uses it on a GPU machine that has nothing of the package's tooling installed.

A process is its pid and its start time (clock ticks since boot), so a pid the system hands out
again is never taken for the process that had it. Linux only; elsewhere nothing is found.
"""

from __future__ import annotations

import collections
import os

Proc = tuple[int, int]  # pid, start time


def stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: state, ppid, ..., start time at index 19."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].decode().split()
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> set[Proc]:
    """Every process below ``pid`` by parent links, now (empty without /proc)."""
    children: dict[int, list[Proc]] = collections.defaultdict(list)
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        fields = stat_fields(int(entry)) if entry.isdigit() else None
        if fields and len(fields) > 19:
            children[int(fields[1])].append((int(entry), int(fields[19])))
    found: set[Proc] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child[0])
    return found


def alive(proc: Proc) -> bool:
    """Whether the process is still that one (the same start time), and not a zombie."""
    fields = stat_fields(proc[0])
    return bool(fields) and len(fields) > 19 and int(fields[19]) == proc[1] and fields[0] not in ("Z", "X")
