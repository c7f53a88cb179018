"""The run's answer: its exit code, and summary.txt (each step's command and line, the result
file's answer, the exit code), written whole at the end."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from gpu_checking.out_folder import SUMMARY, write_whole
from gpu_checking.outcomes import EXIT_INTERNAL, Step
from gpu_checking.stop_signals import SIGNALS


def exit_code(suite: int, says_passed: bool, proofs: int) -> int:
    """The suite's code first (it is the result file's); a 0 the result file does not back is an
    internal error; then the proofs' code."""
    if suite != 0:
        return suite
    if not says_passed:
        return EXIT_INTERNAL
    return proofs


class Summary:
    """The lines of summary.txt, gathered as the run goes, written whole at its end."""

    def __init__(self, out: Path) -> None:
        self.path = out / SUMMARY
        self.commands: list[str] = []
        self.lines: list[str] = []

    def add(self, step: Step) -> None:
        self.commands.append(shlex.join(step.command))
        self.lines.append(step.line())

    def end(self, code: int, why: str) -> int:
        SIGNALS.ignore_from_now()
        self.lines.append(f"gpu_check: exit {code}" + (f" ({why})" if code else ""))
        write_whole(self.path, "".join(f"{line}\n" for line in [*self.commands, *self.lines]))
        print("\n".join(self.lines), file=sys.stdout if code == 0 else sys.stderr, flush=True)
        return code
