"""gate: files and paths that are not what they seem: an unreadable, malformed or hand-made result
file is one line, exit 2, never the regression code; names from a file stay on their line; a job
summary at a FIFO or through a link is refused, and Markdown in a message is shown as text.
"""

from __future__ import annotations

import html
import json
import os
import stat
from pathlib import Path

import pytest
import result_factory as rf
from gate_runner import REPRODUCER, errors, gate
from malformed_results import MALFORMED
from markdown_text import outside_code

from cpugpu_conformance.promises import PROMISES

pytestmark = pytest.mark.quick  # the core: nox -s quick


# --- a file that is not a cell result: one line, exit 2, never the regression code ---------------


@pytest.mark.parametrize("side", ["baseline", "candidate"])
@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_file_is_one_line_naming_it_and_exit_2(tmp_path, capsys, case, side):
    text, key = MALFORMED[case]
    bad = tmp_path / f"bad-{side}.json"
    bad.write_text(text, encoding="utf-8")
    good = rf.completed("2.14.1")
    assert gate(tmp_path, *((good, bad) if side == "candidate" else (bad, good))) == 2
    [line] = errors(capsys)
    assert line.startswith(f"{bad}: not a ") and (key is None or key in line), line


@pytest.mark.parametrize("problem", ["missing", "not-json", "not-a-result"])
@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_an_unreadable_file_is_exit_2_naming_it(tmp_path, capsys, problem, side):
    bad = tmp_path / f"bad-{side}.json"
    if problem == "not-json":
        bad.write_text("{", encoding="utf-8")
    elif problem == "not-a-result":
        bad.write_text(json.dumps({"cell": "x"}), encoding="utf-8")
    good = rf.completed("2.14.1")
    args = (good, bad) if side == "candidate" else (bad, good)
    assert gate(tmp_path, *args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and err[0].startswith("cpugpu-conformance gate: error: ")


def test_a_made_up_promise_is_one_line_exit_2(tmp_path, capsys):
    forged = rf.completed("2.14.1")
    forged["promises"]["99"] = {"title": "Made up", "devices": {"cpu": {"verdict": "passed", "passed": 5}}}
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(forged), encoding="utf-8")
    assert gate(tmp_path, rf.completed("2.13.0"), path) == 2
    assert errors(capsys) == [f"{path}: not a valid cell result at promises: '99' is not a promise of the contract "
                              f"(1-{len(PROMISES)})"]


# --- --job-summary at a FIFO or through a symbolic link (issue 28, item 6) --------------------------


def _summary_gate(tmp_path: Path, summary: Path) -> int:
    return gate(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0"), "--job-summary", str(summary))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_a_job_summary_at_a_fifo_is_refused_in_one_line_and_never_waits(tmp_path, capsys):
    fifo = tmp_path / "summary.md"
    os.mkfifo(fifo)
    # Opening a FIFO for writing waits for a reader forever: a gate that did so would hang the job.
    code = _in_a_thread(lambda: _summary_gate(tmp_path, fifo))
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [f"cpugpu-conformance gate: error: --job-summary {fifo}: cannot write: not a "
                                         "regular file (a FIFO); the summary is appended only to a regular file"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="symbolic links")
@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_a_job_summary_through_a_symbolic_link_is_refused_and_its_target_untouched(tmp_path, capsys, dangling):
    target = tmp_path / "precious.txt"
    if not dangling:
        target.write_text("keep me\n")
    link = tmp_path / "summary.md"
    link.symlink_to(target)
    assert _in_a_thread(lambda: _summary_gate(tmp_path, link)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"cpugpu-conformance gate: error: --job-summary {link}: cannot write: a symbolic link (to {target}); the "
        "summary is appended only to a regular file, never through a link"]
    assert (target.read_text() == "keep me\n") if not dangling else not target.exists()
    assert link.is_symlink()


def test_a_job_summary_that_is_a_regular_file_or_new_is_appended_to(tmp_path, capsys):
    existing = tmp_path / "summary.md"
    existing.write_text("before\n")
    assert _summary_gate(tmp_path, existing) == 0
    assert existing.read_text().startswith("before\n### cpugpu-conformance gate: PASS")
    new = tmp_path / "new.md"
    assert _summary_gate(tmp_path, new) == 0
    assert new.read_text().startswith("### cpugpu-conformance gate: PASS")


@pytest.mark.parametrize("which", ["the candidate itself", "another result file"])
def test_a_job_summary_that_names_a_result_file_is_refused_and_the_file_kept(tmp_path, capsys, which):
    """--job-summary results/<cell>.json (a slip for $GITHUB_STEP_SUMMARY) appended Markdown to the
    result, which no reader could load after."""
    candidate = rf.write(tmp_path, "candidate.json", rf.completed("2.15.0"))
    target = candidate if which == "the candidate itself" else rf.write(tmp_path, "other.json", rf.completed("2.13.0"))
    before = target.read_bytes()
    assert gate(tmp_path, rf.completed("2.14.1"), candidate, "--job-summary", str(target)) == 2
    [line] = errors(capsys)
    assert line.startswith(f"--job-summary {target}: ") and \
        ("the gate's own input" if which == "the candidate itself" else "holds JSON") in line, line
    assert target.read_bytes() == before


def _in_a_thread(call, timeout: float = 20):
    """``call()`` in a thread: a gate that blocks (on a FIFO) fails the test instead of hanging it."""
    import threading

    done: list = []
    thread = threading.Thread(target=lambda: done.append(call()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert done, f"the gate still runs after {timeout} s (blocked opening the job summary?)"
    return done[0]


# --- Markdown in failure messages is escaped in the job summary (issue 28, item 6) ------------------

HOSTILE_MESSAGE = ("AssertionError: see [the fix](https://evil.example/phish) ![pwned](https://evil.example/x.png) "
                   "**now** _or_ `never` ~~ok~~ www.evil.example mail@evil.example")


def test_markdown_in_a_failure_message_is_shown_as_text_in_the_job_summary(tmp_path, capsys):
    failing = {("3", "cpu"): [rf.failure("test_mutable[**x**]", HOSTILE_MESSAGE, REPRODUCER)]}
    summary = tmp_path / "summary.md"
    code = gate(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0", failed=failing), "--job-summary", str(summary))
    assert code == 1
    text = outside_code(summary.read_text())
    # No link, image, emphasis, code span, strikethrough or autolink can form outside the fences:
    for syntax in ("[the fix]", "](https", "![pwned]", "**now**", "**x**", "_or_", "`never`", "~~ok~~", "://",
                   "www.evil", "mail@evil", "[**x**]"):
        assert syntax not in text, (syntax, text)
    row = next(line for line in text.splitlines() if line.startswith("| 3 "))
    assert HOSTILE_MESSAGE in html.unescape(row), "the message itself is all there, as text"
    assert html.unescape(text).count("test_mutable[**x**]") >= 2  # in the table and the reproducer's summary


# --- a hand-made candidate: another torch than it asked for, duplicate keys (issue 28, item 6) -------


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_a_cell_that_ran_another_torch_than_it_asked_for_is_refused(tmp_path, capsys, side):
    forged = rf.completed("2.15.0")
    forged["environment"]["torch"] = "2.14.1+cpu"  # the baseline's torch, in a cell asked as 2.15.0
    pair = (forged, rf.completed("2.15.0")) if side == "baseline" else (rf.completed("2.14.1"), forged)
    assert gate(tmp_path, *pair) == 2
    line, = errors(capsys)
    assert line == (f"{tmp_path / (side + '.json')}: not a valid cell result: environment.torch is '2.14.1+cpu', but "
                    "the cell asked for torch '2.15.0' (requested.torch); a cell that got another torch is 'wrong "
                    "torch', never completed")


def test_a_local_label_or_a_shorter_spelling_is_the_same_torch(tmp_path, capsys):
    candidate = rf.completed("2.15.0")
    candidate["environment"]["torch"] = "2.15+cu128"
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 0


def test_a_result_file_with_a_key_twice_is_refused(tmp_path, capsys):
    text = json.dumps(rf.completed("2.15.0"), indent=2, sort_keys=True)
    # The verdict of promise 3 twice: Python's json keeps the last one, other readers the first.
    verdict = '"verdict": "passed"'
    first = text.index(verdict)
    twice = text[:first] + '"verdict": "failed", ' + text[first:]
    candidate = tmp_path / "candidate.json"
    candidate.write_text(twice)
    assert gate(tmp_path, rf.completed("2.14.1"), candidate) == 2
    line, = errors(capsys)
    assert line == (f"{candidate}: not strict JSON: the key 'verdict' appears twice in one object (which one counts "
                    "depends on the reader): write it once")


# --- a name from a file stays on its line ------------------------------------------------------


def test_a_cell_name_with_a_newline_stays_on_its_line(tmp_path, capsys):
    forged = rf.completed("2.14.1", cell="torch-2.14.1\nPASS: all 12 promise checks")
    assert gate(tmp_path, rf.completed("2.13.0"), forged) == 0
    out = capsys.readouterr().out
    assert "candidate: torch-2.14.1 PASS: all 12 promise checks (torch 2.14.1, completed) from " in out
    assert [line for line in out.splitlines() if line.startswith("PASS")] == [out.rstrip().splitlines()[-1]]
    missing = rf.completed("2.14.1", cell="torch-2.14.1\nforged", drop_promises=("8",))
    assert gate(tmp_path, rf.completed("2.13.0"), missing) == 2
    assert "candidate torch-2.14.1 forged (" in errors(capsys)[1]
