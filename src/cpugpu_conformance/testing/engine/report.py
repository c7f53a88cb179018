"""What a MutableStateTests test found, and how the terminal says it: each bad path once, each
refusal once, one reproducer per class and cause.

A class that fails in every creation context fails a dozen tests, each with the same tensors and
the same torch message. pytest prints every failure; so a failure names in full only what this
process's terminal has not been shown yet for its class (pytest prints failures in the order they
ran, and every test of a class runs in one process, or one xdist worker), and points to where
the rest was named. The result file keeps every test's findings and reproducers whole
(mutable_state.py's record).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cpugpu_conformance import promises as P
from cpugpu_conformance.promises import PLACEMENT  # an ambient context leaking into the state: a cause beside 3 and 12

from .checks import described

PLACEMENT_TITLE = "built in any context, every tensor has the device, dtype and shape it has when built plainly"

# One tensor whose placement differs from the plain build's: (path, here, plain), each placement
# (device, dtype, shape) or None where that build has no tensor at the path.
Misplaced = tuple[str, Any, Any]


@dataclass
class Checked:
    """One object walked and checked: how many tensors, which are bad and why, which were excluded,
    and where each tensor is (its placement, to compare builds in two contexts)."""

    root: str
    checked: int = 0
    bad: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    excluded: dict[str, str] = field(default_factory=dict)  # path -> reason
    error: str | None = None  # why the check could not be made (nothing to check, a stale exclusion, a limit)
    placements: dict[str, tuple[str, str, tuple[int, ...]]] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return not self.bad and self.error is None

    def lines(self) -> list[str]:
        """The failure's lines: the bad paths, each refusal once after the paths it refuses, then
        what could not be checked."""
        lines: list[str] = []
        for why, paths in grouped(self.bad).items():  # one path: on the line of its refusal
            lines += ([f"  {paths[0]}: {why}"] if len(paths) == 1
                      else [f"  {p}" for p in paths] + [f"    refused: {why}"])
        if self.error:
            lines.append(f"  {self.error}")
        return lines

    def excluded_lines(self) -> list[str]:
        return [f"  excluded: {path} ({reason})" for path, reason in self.excluded.items()]


def grouped(bad: list[tuple[str, str]]) -> dict[str, list[str]]:
    """why -> the paths refused that way, in walk order."""
    out: dict[str, list[str]] = {}
    for path, why in bad:
        out.setdefault(why, []).append(path)
    return out


def misplaced(plain: Checked, here: Checked) -> list[Misplaced]:
    """Each path whose tensor is not where the plain build has it (device, dtype, shape), or that
    only one of the two builds has a tensor at."""
    found = [(path, where, plain.placements.get(path)) for path, where in here.placements.items()
             if plain.placements.get(path) != where]
    return found + [(path, None, where) for path, where in plain.placements.items() if path not in here.placements]


@dataclass
class PhaseOutcome:
    """One build of the state in one context (both calls in it, or only the warm-up) and what it broke."""

    phase: str
    context: str
    checked: Checked | None = None
    changed: list[str] = field(default_factory=list)  # promise 12: what building it changed of the caller's state
    raised: str | None = None  # make_state or warm_up raised: "RuntimeError: ..."
    raised_in: str = "make_state"
    leak: str | None = None  # what the context sets that made the call raise, only here (placement, not promise 3)
    misplaced: list[Misplaced] = field(default_factory=list)
    placement_error: str | None = None  # why placement could not be compared (the plain build failed)
    script: str | None = None

    @property
    def ok(self) -> bool:
        return (self.raised is None and not self.changed and (self.checked is None or self.checked.ok)
                and not self.misplaced and self.placement_error is None)

    def broken(self) -> list[str]:
        """The promises it broke, then PLACEMENT where an ambient context leaked into the state."""
        found = []
        if (self.raised and not self.leak) or (self.checked is not None and not self.checked.ok):
            found.append(P.MUTABLE)
        if self.changed:
            found.append(P.NO_SIDE_EFFECTS)
        if self.leak or self.misplaced:
            found.append(PLACEMENT)
        return found

    def cause(self) -> str:
        """What kind of failure this is, in words: a reproducer is printed once per class and cause."""
        parts = []
        if self.raised:
            kind = self.raised.split(":", 1)[0]
            parts.append(f"{PLACEMENT}: {self.raised_in} raised {kind} under an ambient default" if self.leak
                         else f"promise {P.MUTABLE}: {self.raised_in} raised {kind}")
        if self.checked is not None and self.checked.bad:
            parts.append(f"promise {P.MUTABLE}: tensors that refuse an in-place update")
        if self.checked is not None and self.checked.error:
            parts.append(f"promise {P.MUTABLE}: not checked")
        if self.misplaced:
            parts.append(f"{PLACEMENT}: tensors not where the plain build has them")
        if self.placement_error:
            parts.append(f"{PLACEMENT}: not compared")
        if self.changed:
            parts.append(f"promise {P.NO_SIDE_EFFECTS}: the caller's state changed")
        return "; ".join(parts)

    def first_finding(self) -> str:
        """One line: the first thing it found, for the result file's `why` and the summary."""
        if self.raised and self.leak:
            return f"{PLACEMENT}: {self.phase}: {self.raised_in} raised {_line(self.raised)}, only here: {self.leak}"
        if self.raised:
            return f"promise {P.MUTABLE}: {self.phase}: {self.raised_in} raised {_line(self.raised)}"
        if self.checked is not None and self.checked.bad:
            path, why = self.checked.bad[0]
            return f"{path}: {why}"
        if self.checked is not None and self.checked.error:
            return self.checked.error
        if self.misplaced:
            path, here, plain = self.misplaced[0]
            return f"{PLACEMENT}: {self.phase}: {path}: {described(here)} here; built plainly, {described(plain)}"
        if self.placement_error:
            return self.placement_error
        return f"promise {P.NO_SIDE_EFFECTS}: " + "; ".join(self.changed)


def _line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def headline(tests_name: str, device: str, context: str, broken: list[str]) -> str:
    if not broken:  # only what could not be checked (a walk past its bound, placement not compared)
        return f"{tests_name}, device {device}, context {context}: not all of it could be checked, which is no pass"
    named = [f"{p} ({P.PROMISES[p]})" for p in broken if p != PLACEMENT]
    words = (("promise " + " and ".join(named)) if named else "")
    if PLACEMENT in broken:
        words += (" and " if words else "") + f"{PLACEMENT} (the context leaks into the object: {PLACEMENT_TITLE})"
    return f"{tests_name}, device {device}, context {context}: {words} broken"


class Shown:
    """What this process's terminal has been shown, per class: each finding (a bad path and its
    refusal, a misplaced tensor) and each refusal's text by the context that first named it, and
    each cause whose reproducer it printed."""

    def __init__(self) -> None:
        self.findings: dict[tuple[str, str], dict[tuple[str, ...], str]] = {}  # (class, device) -> finding -> context
        self.texts: dict[str, dict[str, str]] = {}  # class -> a refusal's text -> context
        self.reproducers: dict[tuple[str, str], str] = {}  # (class, cause) -> context

        self.run: object = None  # the pytest run (its config) this memory is of

    def start(self, run: object) -> None:
        """Forget what an earlier run in this process showed (pytest run in-process, twice)."""
        if run is not self.run:
            self.findings.clear()
            self.texts.clear()
            self.reproducers.clear()
            self.run = run


SHOWN = Shown()


# Where a phase's name goes in its lines, until two phases found the same and one line says both.
_PHASE = "\x00phase\x00"
_WARM_UP_ONLY = "built in the plain context, warmed up in"  # mutable_state.Phase.describe's words


def _where(contexts: set[str], here: str) -> str:
    if contexts == {here}:
        return "above"
    return "in context " + ", ".join(sorted(contexts))


def message(tests_name: str, cls: str, device: str, context: str, outcomes: list[PhaseOutcome],
            shown: Shown = SHOWN) -> str:
    """The failure of one test as the terminal shows it: the headline, each phase in a line or a
    few, what the terminal was shown already named by where, and the reproducers of causes not
    printed yet for this class."""
    broken = sorted({p for o in outcomes if not o.ok for p in o.broken()}, key=order_of)
    lines = [headline(tests_name, device, context, broken)]
    findings = shown.findings.setdefault((cls, device), {})
    texts = shown.texts.setdefault(cls, {})
    previous: tuple[str, list[str]] | None = None  # the phase before, and its lines with the phase left out
    for outcome in outcomes:
        body = _phase_lines(outcome, findings, texts) if not outcome.ok else [f"{_PHASE}: held"]
        if previous is not None and body == previous[1]:  # the same findings, word for word: one line says both
            both = (f"{previous[0]}, and when built plainly and warmed up there"
                    if outcome.phase.startswith(_WARM_UP_ONLY) else f"{previous[0]}, and {outcome.phase}")
            lines[-len(body)] = lines[-len(body)].replace(previous[0], both, 1)
            continue
        lines += [line.replace(_PHASE, outcome.phase) for line in body]
        previous = (outcome.phase, body)
    excluded = {path: r for o in outcomes if o.checked is not None for path, r in o.checked.excluded.items()}
    lines += [f"excluded: {path} ({reason})" for path, reason in excluded.items()]
    text = "\n".join(lines)
    printed = []
    for outcome in outcomes:
        key = (cls, outcome.cause())
        if outcome.ok or not outcome.script or key in shown.reproducers:
            continue
        shown.reproducers[key] = context
        printed.append(outcome)
        text += (f"\n\nReproducer ({outcome.phase}; standalone: torch and the modules it imports):\n\n"
                 + outcome.script)
    earlier = sorted({shown.reproducers.get((cls, o.cause()), "") for o in outcomes if not o.ok} - {""})
    if not printed and earlier:
        text += (f"\nreproducer: as printed for context {', '.join(earlier)} above (the same cause); the result file "
                 "(--cpugpu-cell-result) keeps this test's own")
    return text


def order_of(promise: str) -> tuple[int, int]:
    return (1, 0) if promise == PLACEMENT else (0, int(promise))


def _phase_lines(outcome: PhaseOutcome, findings: dict[tuple[str, ...], str], texts: dict[str, str]) -> list[str]:
    lines: list[str] = []
    if outcome.raised and outcome.leak:
        lines.append(f"{_PHASE}: {outcome.raised_in} raised {_line(outcome.raised)}")
        lines.append(f"  only here: {outcome.leak}; built plainly, the same calls succeed ({PLACEMENT}, not "
                     f"promise {P.MUTABLE})")
    elif outcome.raised:
        lines.append(f"{_PHASE}: {outcome.raised_in} raised {_line(outcome.raised)}")
    checked = outcome.checked
    if checked is not None and checked.bad:
        head = (f"{_PHASE}: {len(checked.bad)} of {checked.checked} tensors would refuse an in-place update "
                f"(promise {P.MUTABLE})")
        lines += _named(head, [("refused", path, why) for path, why in checked.bad], outcome.context, findings,
                        texts, "refused the same way")
    if checked is not None and checked.error:
        lines.append(f"{_PHASE}: {checked.error}")
    if outcome.misplaced:
        head = (f"{_PHASE}: {len(outcome.misplaced)} tensors are not where the object built plainly has "
                f"them ({PLACEMENT})")
        items = [(PLACEMENT, path, f"{described(here)} here; built plainly, {described(plain)}")
                 for path, here, plain in outcome.misplaced]
        lines += _named(head, items, outcome.context, findings, texts, "placed the same way")
    if outcome.placement_error:
        lines.append(f"{_PHASE}: {outcome.placement_error}")
    lines += [f"{_PHASE}: promise {P.NO_SIDE_EFFECTS}: {change}" for change in outcome.changed]
    return lines


def _named(head: str, items: list[tuple[str, str, str]], context: str, findings: dict[tuple[str, ...], str],
           texts: dict[str, str], same: str) -> list[str]:
    """`head`, then each finding (kind, path, text) not named yet, each text once after its paths;
    the findings named already are counted on the head line, by where."""
    old = [item for item in items if item in findings]
    new = [item for item in items if item not in findings]
    if old:
        head += f": {'the' if not new else 'and the'} {len(old)} named {_where({findings[i] for i in old}, context)}, "
        head += same
    lines = [head + (":" if new else "")]
    by_text: dict[str, list[str]] = {}
    for kind, path, text in new:
        by_text.setdefault(text, []).append(path)
        findings[(kind, path, text)] = context
    verb = "refused" if same.startswith("refused") else "placed"
    for text, paths in by_text.items():
        said = f"{verb} as named {_where({texts[text]}, context)}" if text in texts else text
        texts.setdefault(text, context)
        if len(paths) == 1:  # one path: on the line of what was found
            lines.append(f"  {paths[0]}: {said}")
        else:
            lines += [f"  {path}" for path in paths] + [f"    {verb}: {said}" if said is text else f"    {said}"]
    return lines
