"""The mutation run's report: ``killed K of N``, each mutant not killed with its diff or last
line, the kills and the equivalents used, and the exit code they make."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..results.text import last_line
from .score import EQUIVALENT, INCOMPETENT, KILLED, NOT_RUN, SURVIVED, TIMEOUT, Equivalent, Mutant

NO_OUTPUT = "(no output)"  # what a run that printed nothing shows as its last line


def tidy_diff(diff: str, copy: Path, display: str) -> str:
    """cosmic-ray's stored diff names the mutated copy; the reader knows the original."""
    lines = [line for line in diff.splitlines() if line != "--- mutation diff ---"]
    return "\n".join(lines).replace(f"/{copy}", f"/{display.lstrip('/')}").replace(str(copy), display)


def killer(output: str) -> str:
    """The first failing test in a killed run's output, else its last line."""
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" - ")[0][:200]
    return last_line(output, 300, NO_OUTPUT)


def duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def _mutant_line(m: Mutant) -> str:
    return f"line {m.line} {m.operator}: {m.before!r} -> {m.after!r}"


def _section(title: str, items: list[str]) -> list[str]:
    return ["", title] + [f"  {item}" for item in items] if items else []


def _equivalent_lines(mutants: Sequence[Mutant]) -> list[str]:
    """One line per entry (with its mutant count and lines), then its reason."""
    by_entry: dict[Equivalent, list[Mutant]] = {}
    for m in mutants:
        by_entry.setdefault(m.equivalent, []).append(m)
    lines = []
    for entry, matched in by_entry.items():
        where = ", ".join(str(n) for n in sorted({m.line for m in matched}))
        lines += [f"{entry.describe()}  ({len(matched)} mutant{'s' * (len(matched) > 1)}, line {where})", f"  why: {entry.reason}"]
    return lines


def summarize(mutants: Sequence[Mutant], stale: Sequence[Equivalent]) -> tuple[int, list[str]]:
    """Exit code and report lines."""
    judged = [m for m in mutants if m.equivalent is None]
    count = {o: sum(m.outcome == o for m in judged) for o in (KILLED, SURVIVED, TIMEOUT, INCOMPETENT, NOT_RUN)}
    listed = [m for m in mutants if m.equivalent is not None]
    contradicted = [m for m in listed if m.outcome != EQUIVALENT]
    lines = [
        f"killed {count[KILLED]} of {len(judged)}",
        f"equivalent {len(listed) - len(contradicted)} (reviewed)",
        f"survived {count[SURVIVED]}, timeout {count[TIMEOUT]}, incompetent {count[INCOMPETENT]}, not run {count[NOT_RUN]}",
    ]
    for m in judged:
        if m.outcome == SURVIVED:
            lines += ["", f"SURVIVED {_mutant_line(m)}", m.diff or "(no diff stored)"]
        elif m.outcome != KILLED:
            lines += ["", f"{m.outcome.upper()} {_mutant_line(m)}", last_line(m.output, 300, NO_OUTPUT)]
    lines += [f"EQUIVALENT-LISTED MUTANT {m.outcome}: {_mutant_line(m)}" for m in contradicted]
    lines += [f"STALE equivalent entry (matches no mutant): {e.describe()}" for e in stale]
    lines += _section("killed:", [f"{_mutant_line(m)}  by {killer(m.output)}" for m in judged if m.outcome == KILLED])
    lines += _section("equivalent (reviewed):", _equivalent_lines([m for m in listed if m.outcome == EQUIVALENT]))
    verdict_ok = bool(judged) and count[KILLED] == len(judged) and not contradicted and not stale
    if not judged:
        lines.insert(0, "no mutant left to test: every mutant is listed as equivalent")
    return (0 if verdict_ok else 1), lines
