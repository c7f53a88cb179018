"""``cpugpu-conformance gate --baseline FILE --candidate FILE [--known-failures FILE]``: exit 0 when
every promise check that passed in the baseline passes in the candidate and the candidate's own
answer is clean, 1 on any regression (each with its reproducer) or a candidate whose own answer is
FAILED, 2 when there is nothing to compare (an unreadable or malformed file, a cell that did not
complete, a missing verdict, an UNTESTED candidate) (cpugpu_conformance.report.gate).

With ``--known-failures`` the team's file is applied afresh to both results (the torch each ran
decides the entries with a torch specifier): a promise the candidate fails as the file lists is
a KNOWN FAILURE, never a regression, even where the baseline passed it (the team listed it for
that torch: the gate names it, with its reason and reproducer, and it is no pass either). A
listed promise the candidate passes is no regression either, but its own run fails on it
(strict, as xfail_strict): the gate names it (KNOWN FAILURE NOW PASSES) and exits 1 until the
entry is removed or bounded (torch = "<release"). Without the option, the results stand as
their runs recorded them.

``--job-summary FILE`` appends the same answer in Markdown (report/gate_markdown.py), for
every exit code, bad input included."""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from pathlib import Path

from ..exits import ExitCode
from ..promises import DEVICES
from ..report.gate import fails, format_comparison, own_answer, same_result, unanswered
from ..report.gate_markdown import comparison_markdown, refusal_markdown
from ..results import Answer, CellResult, Comparison, ResultFileError, diff, known_failures
from ..results.compare import different_impl
from ..results.settings import different_settings

HELP = ("compare a candidate torch's cell result with the baseline's; exit 1 on any regression or a candidate "
        "that fails on its own, 2 when there is nothing to compare")


def exit_code(cmp: Comparison, strict: bool, answer: Answer) -> int:
    """2 nothing to compare; 1 a regression, a FAILED candidate, or (--strict) changed behaviour;
    2 a candidate with no verdict somewhere (UNTESTED); else 0. ``answer``: the candidate's own."""
    if not cmp.comparable:
        return ExitCode.USAGE
    if fails(cmp, strict, answer):
        return ExitCode.FAILED
    if unanswered(answer):
        return ExitCode.USAGE
    return ExitCode.OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", required=True, type=Path, metavar="FILE", help="result file of the torch in use")
    parser.add_argument("--candidate", required=True, type=Path, metavar="FILE", help="result file of the torch to upgrade to")
    parser.add_argument("--device", action="append", metavar="DEVICE",
                        help="device to compare (repeatable; default: every device the baseline was asked to test)")
    parser.add_argument("--strict", action="store_true", help="also fail (exit 1) when the observed torch behaviour changed")
    parser.epilog = ("exit 0: may upgrade; 1: a regression (with its reproducer), or the candidate's own answer is FAILED "
                     "(one CANDIDATE NOT CLEAN line per reason); 2: nothing to compare (a file missing, unreadable or "
                     "not a cell result, a cell that did not complete, a missing verdict, an UNTESTED candidate)")
    parser.add_argument("--known-failures", type=Path, metavar="FILE",
                        help="the team's known failures (TOML), applied to both results: a listed failure is no "
                             "regression; a listed promise the candidate passes fails the gate until it is removed")
    parser.add_argument("--job-summary", type=Path, metavar="FILE",
                        help="also append the answer in Markdown to FILE (in GitHub Actions: $GITHUB_STEP_SUMMARY), "
                             "each regression with its reproducer folded")


def _error(line: str) -> None:
    print(f"cpugpu-conformance gate: error: {line}", file=sys.stderr)


def with_known_failures(result: CellResult, listed: known_failures.KnownFailures) -> CellResult:
    """The result with the team's file applied afresh (known_failures.apply)."""
    return CellResult(known_failures.apply(result.to_json(), listed), result.source)


def run(args: argparse.Namespace) -> int:
    summary = JobSummary(args.job_summary, tuple(p for p in (args.baseline, args.candidate, args.known_failures) if p))
    refused = summary.refusal()
    if refused:  # nothing is compared or written: the summary could not say it
        _error(refused)
        return ExitCode.USAGE
    try:
        listed = known_failures.load(args.known_failures) if args.known_failures is not None else None
    except known_failures.KnownFailuresError as exc:
        return summary.refuse([f"--known-failures {exc}"])
    try:
        baseline = CellResult.load(args.baseline)
        candidate = CellResult.load(args.candidate)
        if listed is not None:
            baseline, candidate = with_known_failures(baseline, listed), with_known_failures(candidate, listed)
    except ResultFileError as exc:
        return summary.refuse([str(exc)])
    forged = [line for line in (baseline.torch_mismatch(), candidate.torch_mismatch()) if line]
    if forged:
        return summary.refuse(forged)
    unlike = different_impl(baseline, candidate) or different_settings(baseline, candidate)
    if unlike:  # like with like only: what the two could find differs whatever the torch
        return summary.refuse([unlike])
    unknown = [d for d in args.device or () if d not in DEVICES]
    if unknown:
        return summary.refuse([f"--device {unknown[0]!r}: unknown device; expected one of {', '.join(DEVICES)}"])
    cmp = diff(baseline, candidate, devices=args.device)
    if not cmp.comparable:
        _error(f"nothing to compare ({len(cmp.unusable)} gap(s)), refusing to pass:")
        return summary.refuse(cmp.unusable)
    same = same_result(baseline, candidate)
    if same:
        cmp.warnings.insert(0, same)
    answer = own_answer(candidate, cmp)
    text = format_comparison(baseline, candidate, cmp, args.strict, answer)
    print(text)
    code = exit_code(cmp, args.strict, answer)
    return summary.write(comparison_markdown(baseline, candidate, cmp, text, code), code)


class JobSummary:
    """--job-summary FILE: the gate's answer appended in Markdown (GitHub's $GITHUB_STEP_SUMMARY),
    whatever the answer; a file that cannot be written is one line, and never turns a failure into
    a pass (exit 2 where the gate passed, the gate's own code otherwise)."""

    def __init__(self, path: Path | None, inputs: tuple[Path, ...] = ()) -> None:
        self.path = path
        self.inputs = inputs

    def refuse(self, lines: list[str]) -> int:
        for line in lines:
            _error(line)
        return self.write(refusal_markdown(lines, ExitCode.USAGE), ExitCode.USAGE)

    def refusal(self) -> str | None:
        """Why FILE cannot take the summary, checked before anything is compared: a FIFO (an append
        would wait forever for a reader), a device, a folder, or a symbolic link (the append would
        go to whatever it points to). A new path or a regular file is fine."""
        if self.path is None:
            return None
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"--job-summary {self.path}: cannot look at it: {exc.strerror or exc}"
        return _not_appendable(self.path, info.st_mode) or self._holds_json(self.path, info)

    def _holds_json(self, path: Path, info: os.stat_result) -> str | None:
        """Markdown appended to a JSON file (a result file named by mistake, the gate's own input)
        leaves it no JSON: refused, the file kept as it was."""
        same = next((p for p in self.inputs if _same_file(p, info)), None)
        if same is not None:
            return f"--job-summary {path}: is the gate's own input ({same}); the summary would be appended to it"
        try:
            with open(path, "rb") as fh:
                head = fh.read(4096).lstrip()
        except OSError:
            return None  # the write that follows says why
        if head.startswith((b"{", b"[")):
            return (f"--job-summary {path}: holds JSON (a result file?); the Markdown summary would leave it "
                    "unreadable: name the job summary file ($GITHUB_STEP_SUMMARY)")
        return None

    def write(self, markdown: str, code: int) -> int:
        if self.path is None:
            return code
        flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                 | getattr(os, "O_CLOEXEC", 0))
        try:  # never through a link, never blocking on a FIFO put there since the check
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            why = "cannot write: a symbolic link; the summary is never written through one" if exc.errno == errno.ELOOP \
                else f"cannot write: {exc.strerror or exc}"
            _error(f"--job-summary {self.path}: {why}")
            return code or ExitCode.USAGE
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                _error(_not_appendable(self.path, mode) or f"--job-summary {self.path}: not a regular file")
                return code or ExitCode.USAGE
            with os.fdopen(fd, "w", encoding="utf-8", closefd=False) as out:
                out.write(markdown)
        except OSError as exc:
            _error(f"--job-summary {self.path}: cannot write: {exc.strerror or exc}")
            return code or ExitCode.USAGE
        finally:
            os.close(fd)
        return code


def _same_file(path: Path, info: os.stat_result) -> bool:
    try:
        other = os.stat(path)
    except OSError:
        return False
    return (other.st_dev, other.st_ino) == (info.st_dev, info.st_ino)


def _not_appendable(path: Path, mode: int) -> str | None:
    """One line for what is at ``path`` when it is not a regular file the summary may be appended to."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        try:
            target = f" (to {os.readlink(path)})"
        except OSError:
            target = ""
        return (f"--job-summary {path}: cannot write: a symbolic link{target}; the summary is appended only to a "
                "regular file, never through a link")
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    kind = next((name for test, name in kinds if test(mode)), "not a plain file")
    return f"--job-summary {path}: cannot write: not a regular file ({kind}); the summary is appended only to a regular file"
