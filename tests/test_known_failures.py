"""Known failures the team owns (issue 24, item 2): the file, the rule, the suite, the plugin,
`run`, `cell`, `matrix` and the gate.

A listed promise that fails is ``known_failure`` with its reason (never passed) and fails no run;
a listed promise that passes fails the run (exit 1, strict as xfail_strict) and the result file
says why; bad input is one line naming the file and the key, and never a pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import result_factory as rf
from suite_runner import REPO, run_suite, suite_env

from cpugpu_conformance import results
from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.results import known_failures as kf

ONES = "cpugpu_conformance.variants:OnesLikeGpuBuffer"  # breaks promise 2 (zeroed), on every device
REASON = "our buffer starts as ones (issue 12)"


def write(tmp_path: Path, text: str, name: str = "known-failures.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def listing(tmp_path: Path, *entries: str) -> kf.KnownFailures:
    return kf.load(write(tmp_path, "\n".join(f"[[known_failure]]\n{e}" for e in entries)))


# ---------------------------------------------------------------------------- the file


def test_a_file_reads_as_its_entries_in_order(tmp_path):
    listed = listing(tmp_path, 'promise = 5\ndevice = "cuda"\ntorch = "<2.3"\nreason = "no uint16"',
                     'promise = "13"\nreason = "pooled"')
    first, second = listed.entries
    assert (first.promise, first.device, first.torch, first.reason, first.entry) == ("5", "cuda", "<2.3", "no uint16", 1)
    assert (second.promise, second.device, second.torch, second.entry) == ("13", None, None, 2)
    assert first.file == str(tmp_path / "known-failures.toml")


def test_an_empty_file_lists_nothing(tmp_path):
    assert kf.load(write(tmp_path, "# nothing known\n")).entries == ()


BAD_FILES = {
    "bad TOML": ("[[known_failure]\npromise = 5\n", "not valid TOML"),
    "a top-level key": ("promise = 5\n", "unknown key 'promise'"),
    "a table, not entries": ('[known_failure]\npromise = 5\nreason = "x"\n', "write each entry as a [[known_failure]] table"),
    "an unknown key": ('[[known_failure]]\npromise = 5\nreason = "x"\ndevices = "cpu"\n', "1: unknown key 'devices'"),
    "no promise": ('[[known_failure]]\nreason = "x"\n', "1: no promise"),
    "promise 14": ('[[known_failure]]\npromise = 14\nreason = "x"\n', "promise = 14: not a promise of the contract (1-13)"),
    "promise 0": ('[[known_failure]]\npromise = 0\nreason = "x"\n', "promise = 0: not a promise"),
    "promise true": ('[[known_failure]]\npromise = true\nreason = "x"\n', "promise = True: not a promise"),
    "promise 5.0": ('[[known_failure]]\npromise = 5.0\nreason = "x"\n', "promise = 5.0: not a promise"),
    "an unknown device": ('[[known_failure]]\npromise = 5\ndevice = "tpu"\nreason = "x"\n', "device = 'tpu': not a device"),
    "a bad specifier": ('[[known_failure]]\npromise = 5\ntorch = "lt 2.3"\nreason = "x"\n', "torch = 'lt 2.3': not a version"),
    "an empty specifier": ('[[known_failure]]\npromise = 5\ntorch = ""\nreason = "x"\n', "torch = '': not a version"),
    "a number for torch": ('[[known_failure]]\npromise = 5\ntorch = 2.3\nreason = "x"\n', "torch = 2.3: not a version"),
    "no reason": ("[[known_failure]]\npromise = 5\n", "1: no reason: say why it fails"),
    "an empty reason": ('[[known_failure]]\npromise = 5\nreason = "  "\n', "reason = '  ': say why"),
    "a duplicate": ('[[known_failure]]\npromise = 5\nreason = "x"\n[[known_failure]]\npromise = 5\nreason = "y"\n',
                    "2: the same promise, device and torch as entry 1"),
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_bad_input_is_one_line_naming_the_file_and_the_key(tmp_path, case):
    text, expected = BAD_FILES[case]
    path = write(tmp_path, text)
    with pytest.raises(kf.KnownFailuresError) as caught:
        kf.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    assert expected in message and "\n" not in message, message


@pytest.mark.parametrize("make, expected", [
    (lambda p: p / "missing.toml", "no such file of known failures"),
    (lambda p: p, "not a regular file (a directory)"),
    (lambda p: (os.mkfifo(p / "fifo"), p / "fifo")[1], "not a regular file (a FIFO)"),
    (lambda p: ((p / "big.toml").write_bytes(b"#" * (kf.MAX_BYTES + 1)), p / "big.toml")[1], "over the"),
    (lambda p: ((p / "bin.toml").write_bytes(b"\xff\xfe"), p / "bin.toml")[1], "not UTF-8"),
])
def test_a_file_that_cannot_be_read_is_one_line(tmp_path, make, expected):
    path = make(tmp_path)
    with pytest.raises(kf.KnownFailuresError) as caught:
        kf.load(path)
    assert expected in str(caught.value) and str(path) in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("version, specifier, expected", [
    ("2.2.2+cpu", "<2.3", True),
    ("2.3.0", "<2.3", False),
    ("2.3.0+cu121", ">=2.1,<2.4", True),
    ("2.2.1", "==2.2.*", True),
    ("2.16.0.dev20261201+cpu", ">=2.16.0.dev0", True),  # a nightly is matched, pre-releases included
    ("2.16.0.dev20261201+cpu", "<2.16", False),  # and, as PEP 440 orders it, is no release before 2.16
    ("2.16.0rc1", ">=2.15", True),
    ("not a version", "<2.3", False),
])
def test_the_torch_specifier_is_pep_440(version, specifier, expected):
    assert kf.torch_satisfies(version, specifier) is expected


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


# ---------------------------------------------------------------------------- the suite, as a user runs it


def test_the_suite_reports_a_listed_failure_as_known_and_exits_0(tmp_path):
    known = write(tmp_path, f'[[known_failure]]\npromise = 2\nreason = "{REASON}"\n')
    run = run_suite(tmp_path, "--impl", ONES, "--promise", "2", "--known-failures", str(known))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    entry = run.result["promises"]["2"]["devices"]["cpu"]
    assert entry["verdict"] == "known_failure" and entry["reason"] == REASON
    assert entry["known_failure"] == {"reason": REASON, "file": str(known), "entry": 1}
    assert entry["failures"] and all(f["reproducer"] for f in entry["failures"])
    assert run.cell.outcome("2", "cpu").kind == "known_failure" and run.cell.answer().clean
    assert run.result["pytest_exitstatus"] == 0
    assert f"failed as {known} lists (known failures)" in run.stdout


def test_the_suite_fails_a_listed_promise_that_passes_and_the_file_says_why(tmp_path):
    known = write(tmp_path, '[[known_failure]]\npromise = 2\nreason = "we thought so"\n')
    run = run_suite(tmp_path, "--promise", "2", "--known-failures", str(known))
    assert run.returncode == 1, run.stdout[-3000:]
    entry = run.result["promises"]["2"]["devices"]["cpu"]
    assert entry["verdict"] == "passed" and entry["known_failure"]["reason"] == "we thought so"
    answer = run.cell.answer()
    assert answer.kind == "failed" and any("remove the entry" in line for line in answer.lines)
    assert "listed as a known failure" in run.stdout and "remove the entry" in run.stdout


def test_an_entry_for_another_torch_leaves_the_failure_a_failure(tmp_path):
    known = write(tmp_path, '[[known_failure]]\npromise = 2\ntorch = "<2.0"\nreason = "old torch"\n')
    run = run_suite(tmp_path, "--impl", ONES, "--promise", "2", "--known-failures", str(known))
    assert run.returncode == 1
    assert run.verdict("2") == "failed" and "known_failure" not in run.result["promises"]["2"]["devices"]["cpu"]


def test_a_bad_file_is_exit_4_one_line_and_an_error_result(tmp_path):
    (tmp_path / "cell.json").write_text(json.dumps(rf.completed("2.13.0")))  # an older pass must not stand
    bad = write(tmp_path, '[[known_failure]]\npromise = 2\ndevice = "gpu"\nreason = "x"\n')
    run = run_suite(tmp_path, "--promise", "2", "--known-failures", str(bad))
    assert run.returncode == 4
    expected = f"--known-failures {bad}: [[known_failure]] 1: device = 'gpu': not a device of the contract"
    assert expected in run.stderr and "Traceback" not in run.stderr
    assert run.result["status"] == "error" and expected in run.result["detail"]


def test_run_takes_the_option_with_a_path_relative_to_the_caller(tmp_path):
    write(tmp_path, f'[[known_failure]]\npromise = 2\nreason = "{REASON}"\n', "kf.toml")
    proc = subprocess.run([sys.executable, "-m", "cpugpu_conformance", "run", "--impl", ONES, "--promise", "2",
                           "--known-failures", "kf.toml", "--cell-result", "out.json", "--hypothesis-profile", "ci"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["promises"]["2"]["devices"]["cpu"]["verdict"] == "known_failure"


def _env() -> dict[str, str]:
    return dict(suite_env(), PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))


# ---------------------------------------------------------------------------- a team's own pytest (the plugin)

TEAM_TESTS = """\
from cpugpu_conformance.testing import ZeroedTests
from cpugpu_conformance.variants import OnesLikeGpuBuffer


class TestOurs(ZeroedTests):
    buffer_cls = OnesLikeGpuBuffer
"""


def team_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "team"
    (project / "tests").mkdir(parents=True, exist_ok=True)
    (project / "tests" / "conftest.py").write_text('pytest_plugins = ["cpugpu_conformance.testing.plugin"]\n')
    (project / "tests" / "test_ours.py").write_text(TEAM_TESTS)
    return subprocess.run([sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider",
                           "--hypothesis-profile", "cpugpu-ci", "--cpugpu-promise", "2", *args],
                          cwd=project, env=_env(), capture_output=True, text=True, timeout=600)


def test_in_a_projects_own_run_a_listed_failure_fails_nothing_and_an_unlisted_one_does(tmp_path):
    assert team_run(tmp_path).returncode == 1  # pytest's own status: a failing test
    known = write(tmp_path, f'[[known_failure]]\npromise = 2\ndevice = "cpu"\nreason = "{REASON}"\n')
    proc = team_run(tmp_path, "--cpugpu-known-failures", str(known))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "known failures" in proc.stdout


def test_in_a_projects_own_run_a_bad_file_is_exit_4_naming_the_option(tmp_path):
    proc = team_run(tmp_path, "--cpugpu-known-failures", str(tmp_path / "nope.toml"))
    assert proc.returncode == 4
    assert f"--cpugpu-known-failures {tmp_path / 'nope.toml'}: no such file of known failures" in proc.stderr


# ---------------------------------------------------------------------------- cell and matrix: checked before anything runs


@pytest.mark.parametrize("command", [["cell", "2.13.0"], ["matrix", "torch-2.13.0-cpu"]])
def test_cell_and_matrix_refuse_a_bad_file_before_installing_anything(tmp_path, capsys, command):
    bad = write(tmp_path, "[[known_failure]]\npromise = 99\nreason = 'x'\n")
    code = main([*command, "--matrix", str(REPO / "matrix.yaml"), "--results", str(tmp_path / "results"),
                 "--known-failures", str(bad)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"cpugpu-conformance {command[0]}: error: --known-failures {bad}: [[known_failure]] 1: "
                   "promise = 99: not a promise of the contract (1-13)"]
    assert not (tmp_path / "results").exists()


def test_cell_hands_the_file_to_the_run_with_an_absolute_path(tmp_path, monkeypatch):
    from cpugpu_conformance.cli.cell import what_to_run

    write(tmp_path, '[[known_failure]]\npromise = 2\nreason = "x"\n', "kf.toml")
    monkeypatch.chdir(tmp_path)
    assert what_to_run(None, Path("kf.toml"), ["-k", "zeroed"]) == (
        None, ["-k", "zeroed", f"--known-failures={tmp_path / 'kf.toml'}"])
    assert what_to_run("tests/test_ours.py::TestOurs", Path("kf.toml"), []) == (
        "tests/test_ours.py::TestOurs", [f"--cpugpu-known-failures={tmp_path / 'kf.toml'}"])
    with pytest.raises(Exception, match="given twice"):
        what_to_run(None, Path("kf.toml"), ["--known-failures=other.toml"])


def test_matrix_hands_the_file_to_every_cell(tmp_path):
    from cpugpu_conformance.cli.matrix import cell_job
    from cpugpu_conformance.runner import matrix as matrices

    matrix = matrices.load(REPO / "matrix.yaml")
    known = write(tmp_path, '[[known_failure]]\npromise = 2\nreason = "x"\n')
    job = cell_job(matrix, matrix.cells[0], envdir=tmp_path, results_dir=tmp_path, pytest_args=["-x"],
                   known_failures=known)
    at = job.command.index("--known-failures")
    assert job.command[at + 1] == str(known) and job.command.index("--") > at and job.command[-1] == "-x"


# ---------------------------------------------------------------------------- where only the suite's needs are installed

BLOCKED = """\
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "yaml", "jsonschema", "jinja2"):
            raise ImportError(f"{name} is not installed here")
sys.meta_path.insert(0, Block())
from cpugpu_conformance.results import known_failures as kf
listed = kf.load(sys.argv[1])
entry = {"verdict": "failed", "passed": 0, "failed": 1, "skipped": 0, "failures": []}
print(kf.mark(entry, listed, "5", "cuda", "2.2.2+cu121")["verdict"], kf.mark(entry, listed, "5", "cuda", "2.3.0")["verdict"])
"""


def test_the_file_needs_no_torch_and_nothing_of_the_tools_extra(tmp_path):
    """The suite reads it on a GPU machine with only torch, numpy, hypothesis and pytest (and what pytest
    brings: packaging, and tomli below Python 3.11); xdist's controller reads it with no torch imported."""
    path = write(tmp_path, '[[known_failure]]\npromise = 5\ndevice = "cuda"\ntorch = "<2.3"\nreason = "no uint16"\n')
    proc = subprocess.run([sys.executable, "-c", BLOCKED, str(path)], env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["known_failure", "failed"]


# ---------------------------------------------------------------------------- a file nested 50,000 deep (issue 28, item 6)

DEEP = 50_000


def deep_file(tmp_path: Path) -> Path:
    path = tmp_path / "deep.toml"
    path.write_text("[[known_failure]]\npromise = 2\nreason = " + "[" * DEEP + '"x"' + "]" * DEEP + "\n")
    return path


DEEP_LINE = "not a file of known failures: nested too deeply"


def test_a_file_nested_50000_deep_is_one_line_not_a_recursion_error(tmp_path):
    path = deep_file(tmp_path)
    with pytest.raises(kf.KnownFailuresError) as refused:
        kf.load(path)
    assert str(refused.value).startswith(f"{path}: {DEEP_LINE}") and "\n" not in str(refused.value)


def test_the_gate_refuses_a_deep_file_in_one_line_exit_2(tmp_path, capsys):
    deep = deep_file(tmp_path)
    assert gate(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0"), "--known-failures", str(deep)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        f"cpugpu-conformance gate: error: --known-failures {deep}: {DEEP_LINE} (it holds [[known_failure]] tables "
        "of plain keys and values)"]


def test_in_a_projects_own_run_a_deep_file_is_exit_4_one_line_and_an_error_result(tmp_path):
    deep = deep_file(tmp_path)
    result = tmp_path / "cell.json"
    proc = team_run(tmp_path, "--cpugpu-known-failures", str(deep), "--cpugpu-cell-result", str(result))
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"--cpugpu-known-failures {deep}: {DEEP_LINE}" in proc.stderr
    assert "INTERNALERROR" not in proc.stdout + proc.stderr and "RecursionError" not in proc.stdout + proc.stderr
    written = results.CellResult.load(result)
    assert written.status == "error" and DEEP_LINE in written["detail"]


def test_run_refuses_a_deep_file_exit_4_with_an_error_result(tmp_path):
    deep = deep_file(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "cpugpu_conformance", "run", "--promise", "2",
                           "--known-failures", str(deep), "--cell-result", "out.json"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"--known-failures {deep}: {DEEP_LINE}" in proc.stderr and "Traceback" not in proc.stderr
    written = results.CellResult.load(tmp_path / "out.json")
    assert written.status == "error" and DEEP_LINE in written["detail"]
