"""Known failures the team owns (issue 24, item 2): what a listing does to verdicts, in one entry,
in a cell's answer and in the gate. A listed promise that fails is ``known_failure`` with its
reason (never passed) and fails nothing; a listed promise that passes fails the cell and says to
remove the entry; the gate counts a known failure as no regression and refuses a bad file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import result_factory as rf
from known_failures_files import DEEP_LINE, REASON, deep_file, listing, write

from cpugpu_conformance import results
from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.results import known_failures as kf

# ---------------------------------------------------------------------------- one verdict entry

FAILED = {"verdict": "failed", "passed": 1, "failed": 2, "skipped": 0,
          "failures": [{"test": "t::a", "message": "AssertionError: ones", "reproducer": "print(1)"}]}
PASSED = {"verdict": "passed", "passed": 3, "failed": 0, "skipped": 0}


def test_a_listed_failure_becomes_a_known_failure_with_its_reason_and_failures(tmp_path):
    listed = listing(tmp_path, f'promise = 2\nreason = "{REASON}"')
    marked = kf.mark(FAILED, listed, "2", "cpu", "2.15.0")
    assert marked["verdict"] == "known_failure" and marked["reason"] == REASON
    assert marked["failures"] == FAILED["failures"] and marked["failed"] == 2
    assert marked["known_failure"] == {"reason": REASON, "file": listed.file, "entry": 1}


def test_a_listed_pass_keeps_its_verdict_with_the_listing_beside_it(tmp_path):
    listed = listing(tmp_path, 'promise = 2\nreason = "x"')
    assert kf.mark(PASSED, listed, "2", "cpu", "2.15.0") == {**PASSED, "known_failure": {
        "reason": "x", "file": listed.file, "entry": 1}}


@pytest.mark.parametrize("entry, promise, device, torch", [
    ('promise = 2\ndevice = "cuda"', "2", "cpu", "2.15.0"),  # another device
    ('promise = 2\ntorch = "<2.3"', "2", "cpu", "2.15.0"),  # another torch
    ('promise = 2\ntorch = "<2.3"', "2", "cpu", None),  # a torch nobody recorded: cannot tell, so no
    ("promise = 3", "2", "cpu", "2.15.0"),  # another promise
])
def test_an_entry_for_another_promise_device_or_torch_does_not_apply(tmp_path, entry, promise, device, torch):
    listed = listing(tmp_path, f'{entry}\nreason = "x"')
    assert kf.mark(FAILED, listed, promise, device, torch) == FAILED
    assert kf.mark(PASSED, listed, promise, device, torch) == PASSED


@pytest.mark.parametrize("entry", [
    {"verdict": "skipped", "reason": "deselected", "passed": 0, "failed": 0, "skipped": 2},
    {"verdict": "waived", "reason": "opted out", "passed": 0, "failed": 0, "skipped": 1},
    {"verdict": "not_applicable", "reason": "about cuda"},
])
def test_a_listing_says_nothing_where_nothing_ran_and_held_or_failed(tmp_path, entry):
    assert kf.mark(entry, listing(tmp_path, 'promise = 2\nreason = "x"'), "2", "cpu", "2.15.0") == entry


def test_applying_again_is_the_same_and_a_listing_the_file_dropped_is_taken_off(tmp_path):
    listed = listing(tmp_path, f'promise = 2\nreason = "{REASON}"')
    once = kf.mark(FAILED, listed, "2", "cpu", "2.15.0")
    assert kf.mark(once, listed, "2", "cpu", "2.15.0") == once
    assert kf.mark(once, None, "2", "cpu", "2.15.0") == FAILED
    assert kf.mark(kf.mark(PASSED, listed, "2", "cpu", "x"), None, "2", "cpu", "x") == PASSED


# ---------------------------------------------------------------------------- the rule


def cell_with(tmp_path: Path, entry: str, *, torch: str = "2.15.0") -> results.CellResult:
    """A completed CPU cell failing promise 2, with the file of ``entry`` applied (as the gate does)."""
    failing = rf.completed(torch, failed={("2", "cpu"): FAILED["failures"]})
    listed = listing(tmp_path, entry) if entry else None
    return results.CellResult(kf.apply(failing, listed), "cell.json")


def test_a_known_failure_is_its_own_outcome_and_the_cell_is_clean(tmp_path):
    cell = cell_with(tmp_path, f'promise = 2\nreason = "{REASON}"')
    out = cell.outcome("2", "cpu")
    assert (out.kind, out.note, out.is_verdict) == ("known_failure", REASON, True)
    assert out.failures == tuple(FAILED["failures"])  # the reproducers stay
    answer = cell.answer()
    assert answer.clean and answer.counts["known_failure"] == 1 and answer.counts["passed"] == 10
    assert cell.describe() == "passed (10 passed, 0 failed, 0 untested, 1 recorded, 1 known failure)"


def test_without_the_listing_it_is_a_failure(tmp_path):
    cell = cell_with(tmp_path, f'promise = 2\nreason = "{REASON}"\ntorch = "<2.15"')
    assert cell.outcome("2", "cpu").kind == "failed" and cell.answer().kind == "failed"


def test_a_listed_promise_that_passed_fails_the_cell_and_says_to_remove_it(tmp_path):
    cell = results.CellResult(kf.apply(rf.completed("2.15.0"), listing(tmp_path, 'promise = 4\nreason = "shared"')), "c")
    out = cell.outcome("4", "cpu")
    assert out.kind == "passed" and "remove the entry" in (out.listed or "")
    answer = cell.answer()
    assert answer.kind == "failed" and answer.counts["listed_but_passed"] == 1
    line, = answer.lines
    assert line.startswith("promise 4 (Two storages) on cpu: listed as a known failure (")
    assert "entry 1: shared) but it passed: remove the entry" in line
    assert cell.describe().startswith("FAILED") and "1 listed as known failures but passed" in cell.describe()


def with_entry(promise: str, entry: dict) -> results.CellResult:
    data = rf.completed("2.15.0")
    data["promises"][promise]["devices"]["cpu"] = entry
    return results.CellResult(data, "forged.json")


def test_a_known_failure_with_no_failure_is_no_pass():
    cell = with_entry("2", {"verdict": "known_failure", "reason": "x", "passed": 3, "failed": 0, "skipped": 0})
    assert cell.outcome("2", "cpu").kind == "untested" and not cell.answer().clean


def test_a_known_failure_with_no_reason_is_a_failure():
    cell = with_entry("2", {"verdict": "known_failure", "passed": 0, "failed": 1, "skipped": 0,
                            "failures": FAILED["failures"]})
    assert cell.outcome("2", "cpu").kind == "failed" and cell.answer().kind == "failed"


def test_a_cell_whose_every_asked_pair_is_a_known_failure_is_clean():
    data = rf.completed("2.15.0")
    for promise, block in data["promises"].items():
        entry = block["devices"]["cpu"]
        if entry["verdict"] in ("passed", "recorded"):
            block["devices"]["cpu"] = {"verdict": "known_failure", "reason": f"p{promise}", "passed": 0, "failed": 1,
                                       "skipped": 0, "failures": FAILED["failures"]}
    cell = results.CellResult(data, "all-known.json")
    answer = cell.answer()
    assert answer.clean and answer.counts["known_failure"] == 12
    # Nothing passed: the answer is never called passed (issue 28, item 6), in the log line or the summary.
    assert cell.describe() == ("KNOWN FAILURES ONLY (0 passed, 0 failed, 0 untested, 0 recorded, "
                               "12 known failures)")
    assert not cell.describe().startswith("passed")


def test_a_cell_in_which_nothing_passed_is_never_passed_in_the_summary_table(tmp_path):
    from cpugpu_conformance.report import summary

    data = rf.completed("2.15.0")
    for block in data["promises"].values():
        if block["devices"]["cpu"]["verdict"] in ("passed", "recorded"):
            block["devices"]["cpu"] = {"verdict": "known_failure", "reason": "listed", "passed": 0, "failed": 1,
                                       "skipped": 0, "failures": FAILED["failures"]}
    rf.write(tmp_path, "torch-2.15.0-cpu.json", data)
    row, = summary.summarize(tmp_path)
    assert row.clean and row.mark == "KNOWN FAILURES ONLY"
    table = summary.format_summary([row])
    assert "passed" not in table.splitlines()[1] and "KNOWN FAILURES ONLY" in table.splitlines()[1]


def test_the_schema_names_the_listing_so_a_closed_schema_keeps_it():
    entry = results.schema()["$defs"]["promise_on_device"]["properties"]
    assert "known_failure" in entry["verdict"]["enum"]
    assert set(entry["known_failure"]["properties"]) == {"reason", "file", "entry", "torch"}
    assert entry["known_failure"]["required"] == ["reason"]


# ---------------------------------------------------------------------------- the gate


def gate(tmp_path: Path, baseline: dict, candidate: dict, *extra: str) -> int:
    paths = [str(rf.write(tmp_path, name, data)) for name, data in (("b.json", baseline), ("c.json", candidate))]
    return main(["gate", "--baseline", paths[0], "--candidate", paths[1], *extra])


def test_the_gate_counts_a_known_failure_as_no_regression_and_names_it(tmp_path, capsys):
    known = write(tmp_path, f'[[known_failure]]\npromise = 2\ntorch = ">=2.15"\nreason = "{REASON}"\n')
    baseline = rf.completed("2.14.1")
    candidate = rf.completed("2.15.0", failed={("2", "cpu"): FAILED["failures"]})
    assert gate(tmp_path, baseline, candidate) == 1  # without the file: a regression
    capsys.readouterr()
    assert gate(tmp_path, baseline, candidate, "--known-failures", str(known)) == 0
    out = capsys.readouterr().out
    assert "REGRESSION" not in out
    assert f"KNOWN FAILURE: promise 2 (Zeroed) on cpu: passed -> known failure ({REASON})" in out
    assert out.rstrip().splitlines()[-1].startswith("PASS: 10 of the 11 promise checks that passed in the baseline "
                                                    "pass in the candidate; 1 fail as the known-failures file lists")


def test_the_gate_fails_on_a_listed_promise_the_candidate_passes_without_calling_it_a_regression(tmp_path, capsys):
    known = write(tmp_path, '[[known_failure]]\npromise = 2\nreason = "ones"\n')
    baseline = rf.completed("2.14.1", failed={("2", "cpu"): FAILED["failures"]})
    assert gate(tmp_path, baseline, rf.completed("2.15.0"), "--known-failures", str(known)) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" not in out and "fixed: promise 2 (Zeroed) on cpu: known failure (ones) -> passed" in out
    assert "KNOWN FAILURE NOW PASSES: promise 2 (Zeroed) on cpu: listed as a known failure" in out
    assert out.rstrip().splitlines()[-1].startswith("FAIL: 1 promise check(s) the known-failures file lists pass")


def test_the_gate_applies_its_file_afresh_over_what_a_result_recorded(tmp_path, capsys):
    recorded = kf.apply(rf.completed("2.15.0", failed={("2", "cpu"): FAILED["failures"]}),
                        listing(tmp_path, 'promise = 2\nreason = "old listing"'))
    assert gate(tmp_path, rf.completed("2.14.1"), recorded) == 0  # as the run recorded it
    empty = write(tmp_path, "", "none.toml")
    capsys.readouterr()
    assert gate(tmp_path, rf.completed("2.14.1"), recorded, "--known-failures", str(empty)) == 1
    assert "REGRESSION 1: promise 2 (Zeroed) on cpu: passed -> failed" in capsys.readouterr().out


def test_a_known_failure_in_both_cells_is_still_failing_never_a_gap(tmp_path, capsys):
    known = write(tmp_path, '[[known_failure]]\npromise = 2\nreason = "ones"\n')
    failing = {("2", "cpu"): FAILED["failures"]}
    assert gate(tmp_path, rf.completed("2.14.1", failed=failing), rf.completed("2.15.0", failed=failing),
                "--known-failures", str(known)) == 0
    assert "KNOWN FAILURE: promise 2 (Zeroed) on cpu: known failure (ones) -> known failure (ones)" in \
        capsys.readouterr().out


def test_the_gate_refuses_a_bad_file_in_one_line_exit_2(tmp_path, capsys):
    bad = write(tmp_path, '[[known_failure]]\npromise = 2\n')
    assert gate(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0"), "--known-failures", str(bad)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"cpugpu-conformance gate: error: --known-failures {bad}: [[known_failure]] 1: no reason: "
                   "say why it fails (the report shows it)"]


# ---------------------------------------------------------------------------- a file nested 50,000 deep (issue 28, item 6)


def test_the_gate_refuses_a_deep_file_in_one_line_exit_2(tmp_path, capsys):
    deep = deep_file(tmp_path)
    assert gate(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0"), "--known-failures", str(deep)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        f"cpugpu-conformance gate: error: --known-failures {deep}: {DEEP_LINE} (it holds [[known_failure]] tables "
        "of plain keys and values)"]
