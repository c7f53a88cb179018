"""What a step and the run come to: the exit codes, what each code of a step means, a Step, and
Refused (the check cannot start)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EXIT_INTERRUPTED = 2
EXIT_INTERNAL = 3
EXIT_USAGE = 4
EXIT_NOTHING = 5
EXIT_PARTLY = 6

# What each exit code of a step means, for the summary (pytest's codes, and the suite's 6).
SUITE_MEANS = {0: "every promise asked for held", 1: "a promise failed", 2: "interrupted or out of time",
               3: "internal error", 4: "bad input, refused to start", 5: "nothing was tested",
               6: "some promises went untested"}
PROOFS_MEANS = {0: "every proof held", 1: "a proof did not hold", 2: "interrupted or out of time",
                3: "internal error", 4: "bad input",
                5: "no proof ran (none is marked for the device, or all were skipped: it is missing)",
                6: "some proofs were skipped (the device is missing)"}


@dataclass(frozen=True)
class Step:
    name: str
    command: list[str]
    log: Path
    code: int
    seconds: float
    timed_out: bool = False
    means: str = ""
    stopped_by: str = ""  # the signal that stopped gpu_check while this step ran

    def line(self) -> str:
        if self.stopped_by:
            how = f"stopped by {self.stopped_by} after {self.seconds:.0f} s"
        elif self.timed_out:
            how = f"timed out, stopped after {self.seconds:.0f} s"
        else:
            how = f"exit {self.code} in {self.seconds:.1f} s"
        return f"{self.name}: {how}" + (f", {self.means}" if self.means else "") + f" ({self.log.name})"


class Refused(Exception):
    """The check cannot start; the message is one line naming the culprit."""
