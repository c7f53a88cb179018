"""How each outcome and each answer shows: a symbol and a word for every kind, never colour
alone and never an emoji.

The symbols are plain text that DejaVu Sans (the default font of a Debian or Ubuntu server)
and every common Linux font draws: no code point here is an emoji or an extended
pictograph, so no mark turns into an empty box where no emoji font is installed. The word
beside each symbol is what counts; the symbol only helps the eye down a column.

This module is the bottom of the report: it imports nothing from view, changes or render.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..results import CELL_STATUSES, NOT_ASKED_KINDS, VERDICT_KINDS


@dataclass(frozen=True)
class MarkStyle:
    symbol: str
    word: str
    meaning: str

    @property
    def label(self) -> str:
        """Symbol and word together, always: the word reads on any screen and in any font."""
        return f"{self.symbol} {self.word}"


# One mark per Outcome kind. Every mark has its own symbol *and* word, so none is told
# apart by colour alone; a cell that did not complete shows its status in every row.
# "waived" and "known_failure" are the team's own entries (results.rule, known-failures file).
MARKS: dict[str, MarkStyle] = {
    "passed": MarkStyle("\u2713", "pass", "every test of the promise that applies here ran to its end, and held"),  # ✓
    "failed": MarkStyle(
        "\u2717", "FAIL", "a check of the promise failed; the reproducer is in the failures section"  # ✗
    ),
    "known_failure": MarkStyle(
        "\u2297", "known failure",  # ⊗
        "tested, and failed as the team's known-failures file lists it (with its reason): not a pass, not a regression",
    ),
    "recorded": MarkStyle("\u00b6", "recorded", "implementation-defined: what happened is recorded, not judged"),  # ¶
    "untested": MarkStyle(
        "?", "untested",
        "asked for, but no check ran (device missing, checks skipped, or no verdict in the file): the reason is "
        "given; never a pass",
    ),
    "waived": MarkStyle(
        "\u2298", "waived",  # ⊘
        "the team opted out of this promise, with the reason given: not tested, never a pass",
    ),
    "not_applicable": MarkStyle("\u2013", "n/a", "the contract does not make this promise on this device"),  # –
    "not_requested": MarkStyle(
        "\u25cb", "not requested", "the run was told to leave this promise out (--promise)"  # ○
    ),
    "interrupted": MarkStyle(
        "\u2016", "interrupted",  # ‖
        "the run was stopped before it wrote its verdicts (killed, cancelled, or still running)",
    ),
    "crashed": MarkStyle(
        "\u21af", "crashed", "the test process died (abort, segfault, out of memory); no verdicts"  # ↯
    ),
    "timed_out": MarkStyle("\u25d4", "timed out", "the cell ran past its time limit; no verdicts"),  # ◔
    "not_installed": MarkStyle(
        "\u2205", "not installed", "the torch release could not be installed; no verdicts"  # ∅
    ),
    "wrong_torch": MarkStyle(
        "\u2260", "wrong torch", "the cell got a torch other than the one it asked for, so nothing was tested"  # ≠
    ),
    "error": MarkStyle("!", "error", "the cell failed before testing (usage or setup error); no verdicts"),
}

# A cell's answer (or a release's on one device), shown once per row beside the promises:
# only "passed" (clean) is a clean cell.
ANSWERS: dict[str, MarkStyle] = {
    "passed": MarkStyle(
        "\u2713", "clean", "the cell completed and every promise it was asked about passed or was recorded"
    ),
    "failed": MarkStyle("\u2717", "FAILED", "at least one check failed"),
    "known_failure": MarkStyle(
        "\u2297", "KNOWN FAILURES",
        "no check failed except those the team's known-failures file lists: not clean, not a regression",
    ),
    "untested": MarkStyle(
        "?", "UNTESTED", "no check failed, but something the cell was asked to test was not tested"
    ),
    "waived": MarkStyle(
        "\u2298", "WAIVED", "no check failed, but the team opted out of a promise it was asked about: not clean"
    ),
    "not_applicable": MarkStyle(
        "\u2013", "NOT APPLICABLE",  # –
        "the cell's torch cannot host the device it asked for (sim before torch 2.8): nothing to test, neither a "
        "pass nor a failure",
    ),
    **{status: MARKS[status] for status in CELL_STATUSES if status != "completed"},
}

# The answers a device's summary can give (view.device_answer), worst first.
# not_applicable last: a release that cannot host the device says nothing against the others.
ANSWER_ORDER = ("failed", "untested", "known_failure", "waived", "passed", "not_applicable")

# Fail at import, not in a published report, if the results model grows a kind without a mark.
_unmarked = (set(CELL_STATUSES) - {"completed"} | set(VERDICT_KINDS) | set(NOT_ASKED_KINDS)) - set(MARKS)
assert not _unmarked, f"outcome kinds without a mark: {sorted(_unmarked)}"

# Marks whose note the matrix shows in the cell itself (others only on hover).
NOTED_KINDS = ("recorded", "untested", "waived", "known_failure")
