"""How each outcome and each answer shows in the matrix: a symbol and a word for every kind
(never colour alone), and which notes a cell repeats rather than shows again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..results import CELL_STATUSES, Outcome

if TYPE_CHECKING:
    from .view import Column


@dataclass(frozen=True)
class MarkStyle:
    symbol: str
    word: str
    meaning: str

    @property
    def label(self) -> str:
        """Symbol and word together, always: where no emoji font exists the word still reads."""
        return f"{self.symbol} {self.word}"


# One mark per Outcome kind. Every mark has its own symbol *and* word, so none is told
# apart by colour alone; a cell that did not complete shows its status in every row.
MARKS: dict[str, MarkStyle] = {
    "passed": MarkStyle("✅", "pass", "at least one check of the promise ran, and every check held"),
    "failed": MarkStyle("❌", "FAIL", "a check of the promise failed; the reproducer is in the failures section"),
    "recorded": MarkStyle("📝", "recorded", "implementation-defined: what happened is recorded, not judged"),
    "untested": MarkStyle(
        "❓", "untested",
        "asked for, but no check ran (device missing, checks skipped, or no verdict in the file): the reason is "
        "given; never a pass",
    ),
    "not_applicable": MarkStyle("➖", "n/a", "the contract does not make this promise on this device"),
    "not_requested": MarkStyle("⏭", "not requested", "the run was told to leave this promise out (--promise)"),
    "interrupted": MarkStyle(
        "⏹", "interrupted", "the run was stopped before it wrote its verdicts (killed, cancelled, or still running)"
    ),
    "crashed": MarkStyle("💥", "crashed", "the test process died (abort, segfault, out of memory); no verdicts"),
    "timed_out": MarkStyle("⏱", "timed out", "the cell ran past its time limit; no verdicts"),
    "not_installed": MarkStyle("📦", "not installed", "the torch release could not be installed; no verdicts"),
    "wrong_torch": MarkStyle(
        "🚫", "wrong torch", "the cell got a torch other than the one it asked for, so nothing was tested"
    ),
    "error": MarkStyle("⚠️", "error", "the cell failed before testing (usage or setup error); no verdicts"),
}

# A cell's answer, shown once per column above the promises: only "clean" is a clean cell.
ANSWERS: dict[str, MarkStyle] = {
    "passed": MarkStyle("✅", "clean", "the cell completed and every promise it was asked about passed or was recorded"),
    "failed": MarkStyle("❌", "FAILED", "at least one check failed"),
    "untested": MarkStyle("❓", "UNTESTED", "no check failed, but something the cell was asked to test was not tested"),
    **{status: MARKS[status] for status in CELL_STATUSES if status != "completed"},
}

# Fail at import, not in a published report, if the results model grows a status without a mark.
_unmarked = set(CELL_STATUSES) - {"completed"} - set(MARKS)
assert not _unmarked, f"cell statuses without a mark: {sorted(_unmarked)}"

# Marks whose note the matrix shows in the cell itself (others only on hover).
NOTED_KINDS = ("recorded", "untested")


def repeated_notes(marks: Mapping[int, Outcome], cols: list[Column]) -> dict[int, str]:
    """Column index -> the column that first showed the same note on the same device,
    for each shown note (NOTED_KINDS) that only repeats the last one shown on that device.

    A note shown once per change keeps a 16-column row one line high; the repeat names
    where the text is, and the full note stays in the cell's tooltip. A column with no
    shown note (a crashed cell) does not interrupt a run of repeats.
    """
    last_shown: dict[str, tuple[tuple[str, str], str]] = {}  # device -> ((kind, note), first column)
    repeats: dict[int, str] = {}
    for col in cols:
        out = marks[col.index]
        if out.kind not in NOTED_KINDS or not out.note:
            continue
        key = (out.kind, out.note)
        previous = last_shown.get(col.device)
        if previous is not None and previous[0] == key:
            repeats[col.index] = previous[1]
        else:
            last_shown[col.device] = (key, col.label)
    return repeats
