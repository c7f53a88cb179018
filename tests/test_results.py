"""results.py: the one result type, the rule that decides a verdict, and reading files defensively.

Each case of the rule has its own test: a pass needs a check that ran and held, and
nothing untested (skipped, missing, empty, interrupted, crashed) is ever a pass.
"""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import result_factory as rf

from cpugpu_conformance import results
from cpugpu_conformance.promises import PROMISES, RECORDED_ONLY, applies
from cpugpu_conformance.results import CellResult, ResultFileError, clean_text


def cell(edit=None, **kwargs) -> CellResult:
    data = rf.completed("2.13.0", **kwargs)
    if edit:
        edit(data)
    return CellResult(data)


def set_entry(promise: str, device: str = "cpu", **entry):
    return lambda data: data["promises"][promise]["devices"].__setitem__(device, entry)


# ----------------------------------------------------------------------------- a promise on a device


def test_a_check_that_ran_and_held_is_a_pass():
    assert cell().outcome("1", "cpu").kind == "passed"


def test_a_pass_with_no_check_that_ran_is_untested():
    out = cell(set_entry("1", verdict="passed", passed=0, failed=0, skipped=3)).outcome("1", "cpu")
    assert (out.kind, out.note) == ("untested", "recorded as passed, but no check of it ran")
    out = cell(set_entry("1", verdict="passed")).outcome("1", "cpu")  # no counts at all
    assert out.kind == "untested"


def test_a_skipped_promise_is_untested_with_its_reason():
    out = cell(set_entry("5", verdict="skipped", reason="numpy missing", skipped=2)).outcome("5", "cpu")
    assert (out.kind, out.note) == ("untested", "numpy missing")


def test_a_missing_promise_is_untested():
    out = cell(drop_promises=("8",)).outcome("8", "cpu")
    assert (out.kind, out.note) == ("untested", "the result has no verdict for promise 8 on cpu")


def test_any_failure_is_a_failure_whatever_the_verdict_string_says():
    failure = rf.failure("test_x", "AssertionError: boom", "print(1)")
    out = cell(set_entry("2", verdict="passed", passed=5, failed=1, failures=[failure])).outcome("2", "cpu")
    assert out.kind == "failed" and out.note == "test_x: AssertionError: boom" and out.failures == (failure,)


def test_recorded_needs_a_check_that_ran_too():
    assert cell().outcome("11", "cpu").kind == "recorded"
    assert cell(set_entry("11", verdict="recorded", observed="x")).outcome("11", "cpu").kind == "untested"


def test_a_promise_of_another_device_is_not_applicable_and_cannot_be_claimed_otherwise():
    assert cell().outcome("10", "cpu").kind == "not_applicable"
    assert cell(cuda=True).outcome("11", "cuda").kind == "not_applicable"
    # a result that calls an applicable promise 'not applicable' has not tested it
    assert cell(set_entry("3", verdict="not_applicable")).outcome("3", "cpu").kind == "untested"


def test_a_device_asked_for_but_missing_is_untested_on_every_promise():
    def no_cuda(data):
        data["devices"]["cuda"] = {"status": "skipped", "reason": "no CUDA device"}

    c = cell(no_cuda)
    assert c.asked_devices() == ["cpu", "cuda"] and c.tested_devices() == ["cpu"]
    assert {c.outcome(p, "cuda").kind for p in map(str, range(1, 11))} == {"untested"}


def test_on_a_missing_device_only_the_promises_asked_for_are_untested():
    """--promise 1 --device all without CUDA: promise 1 is untested on cuda, the others were not asked for."""
    def no_cuda_promise_1(data):
        data["devices"]["cuda"] = {"status": "skipped", "reason": "no CUDA device"}
        data["requested"]["promises"] = ["1"]

    c = cell(no_cuda_promise_1)
    assert c.outcome("1", "cuda").kind == "untested"
    assert {c.outcome(p, "cuda").kind for p in map(str, range(2, 10))} == {"not_requested"}
    assert [line for line in c.answer().lines if "cuda" in line and "promise 2" in line] == []


def test_a_device_nobody_asked_for_is_not_requested():
    assert cell().outcome("1", "cuda").kind == "not_requested"
    assert cell().asked_devices() == ["cpu"]


def test_promises_left_out_with_dash_dash_promise_are_not_requested():
    def subset(data):
        data["requested"]["promises"] = ["1"]

    c = cell(subset)
    assert c.outcome("1", "cpu").kind == "passed"
    assert (c.outcome("2", "cpu").kind, c.outcome("2", "cpu").note) == ("not_requested", "not selected (--promise)")


@pytest.mark.parametrize("status", ["interrupted", "crashed", "timed_out", "not_installed", "wrong_torch", "error"])
def test_a_cell_that_did_not_complete_has_no_verdict_even_with_verdicts_inside(status):
    data = rf.completed("2.13.0")
    data.update(status=status, detail="killed by SIGSEGV; last lines of the log:\n...")
    c = CellResult(data)
    out = c.outcome("1", "cpu")
    assert out.kind == status and out.note == "killed by SIGSEGV; last lines of the log" and not out.is_verdict
    assert c.answer().kind == status and not c.answer().clean


# ----------------------------------------------------------------------------- a cell's answer


def test_a_cell_where_everything_asked_passed_or_was_recorded_is_clean():
    answer = cell().answer()
    assert answer.clean and answer.kind == "passed" and answer.lines == ()
    judged = sum(1 for p in PROMISES if p not in RECORDED_ONLY and applies(p, "cpu"))
    assert dict(answer.counts) == {"passed": judged, "failed": 0, "recorded": 1, "untested": 0, "waived": 0,
                                   "known_failure": 0, "listed_but_passed": 0}
    assert cell().describe() == f"passed ({judged} passed, 0 failed, 0 untested, 1 recorded)"


def test_one_untested_promise_makes_the_cell_untested_not_clean():
    answer = cell(set_entry("7", verdict="skipped", reason="no such dtype", skipped=1)).answer()
    assert answer.kind == "untested" and not answer.clean
    assert answer.lines == ("promise 7 (No silent wrong views) on cpu: untested: no such dtype",)


def test_a_failure_makes_the_cell_failed_and_says_which():
    answer = cell(failed={("4", "cpu"): [rf.failure("t", "shared", None)]}).answer()
    assert answer.kind == "failed" and answer.lines == ("promise 4 (Two storages) on cpu: failed: t: shared",)


def test_unattributed_failures_and_errors_fail_the_cell():
    def unattributed(data):
        data["unattributed_failures"] = [{"test": "conformance/test_x.py::t", "message": "worker crashed"}]

    assert cell(unattributed).answer().kind == "failed"

    def errored(data):
        data["counts"]["errors"] = 2

    assert cell(errored).answer().lines == ("2 test(s) errored outside any promise's check",)


def test_a_completed_cell_that_tested_nothing_is_untested():
    def nothing(data):
        data["devices"] = {"cpu": {"status": "not_requested"}, "cuda": {"status": "not_requested"}}
        data["requested"]["device"] = None

    answer = cell(nothing).answer()
    assert answer.kind == "untested" and "no device was asked for" in answer.lines


def test_every_asked_pair_deselected_is_untested_not_a_pass():
    def subset(data):
        data["requested"]["promises"] = []

    assert cell(subset).answer().kind == "untested"


# ----------------------------------------------------------------------------- reading files


def load_error(path: Path) -> str:
    with pytest.raises(ResultFileError) as info:
        CellResult.load(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def test_load_reads_what_write_wrote(tmp_path):
    written = cell().write(tmp_path / "c.json")
    assert CellResult.load(written) == cell()
    assert stat.S_IMODE(os.stat(written).st_mode) == 0o644, "published files are readable by others"
    assert not list(tmp_path.glob(".*")), "no temporary file left"


def test_missing_and_directory(tmp_path):
    assert load_error(tmp_path / "nope.json").endswith("no such result file")
    (tmp_path / "dir.json").mkdir()
    assert load_error(tmp_path / "dir.json").endswith("not a regular file (a directory)")


def test_a_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    code = f"from cpugpu_conformance.results import CellResult\nCellResult.load({str(fifo)!r})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "not a regular file (a FIFO)" in proc.stderr


def test_a_symlink_loop(tmp_path):
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    assert load_error(tmp_path / "a.json").endswith("cannot read: a symbolic link loop")


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path):
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(200 * 1024 * 1024)  # sparse: costs no disk
    assert "over the 16,777,216-byte limit" in load_error(huge)


def test_not_utf8(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"cell": "caf\xe9"}')
    assert load_error(path).endswith("not UTF-8 (byte 0xe9 at offset 13)")


def test_deep_nesting(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert load_error(path).endswith("nested too deeply")


def test_deep_nesting_inside_a_valid_looking_result(tmp_path):
    data = rf.completed("2.13.0")
    deep: list = []
    for _ in range(500):
        deep = [deep]
    data["observations"]["deep"] = {"value": deep}
    path = tmp_path / "deep-inside.json"
    path.write_text(json.dumps(data))
    assert load_error(path).endswith("nested too deeply (over 32 levels)")


def test_lone_surrogates_are_replaced_so_the_result_can_be_written(tmp_path):
    path = tmp_path / "surrogate.json"
    path.write_text(json.dumps(rf.incomplete("2.13.0", "crashed", "?")).replace('"?"', '"bad \\ud800 text"'))
    loaded = CellResult.load(path)
    assert loaded.detail == "bad \ufffd text"
    loaded.write(tmp_path / "again.json")


def test_nan_and_infinity_are_not_json(tmp_path):
    data = rf.completed("2.13.0")
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(dict(data, duration_s=math.nan)))
    assert "not strict JSON: NaN is not a JSON number" in load_error(path)
    with pytest.raises(ValueError):
        CellResult(dict(data, duration_s=math.inf)).write(tmp_path / "inf.json")
    assert not (tmp_path / "inf.json").exists()


def test_another_schema_version_says_to_run_again(tmp_path):
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(dict(rf.completed("2.13.0"), schema_version=1)))
    assert load_error(path).endswith("cell result schema version 1, this tool reads version 2: run the cell again")


def test_not_a_cell_result(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"cell": "x"}))
    assert "not a valid cell result at (top level)" in load_error(path)


def made_up_promise(data):
    """A hand-edited result claiming a promise 99 that the contract does not make, passed."""
    data["promises"]["99"] = {"title": "Made up", "devices": {"cpu": {"verdict": "passed", "passed": 5}}}


@pytest.mark.parametrize("number", ["99", "0", "01", " 1", "1\n", "3.0"])
def test_a_promise_the_contract_does_not_make_is_refused_naming_it(tmp_path, number):
    data = rf.completed("2.13.0")
    data["promises"][number] = {"title": "Made up", "devices": {"cpu": {"verdict": "passed", "passed": 5}}}
    path = tmp_path / "made-up.json"
    path.write_text(json.dumps(data))
    error = load_error(path)
    assert error == (f"{path}: not a valid cell result at promises: {results.one_line(repr(number))} is not a promise "
                     f"of the contract (1-{len(PROMISES)})")
    assert "\n" not in error
    with pytest.raises(ResultFileError):  # every reader goes through the model: none can take it
        cell(made_up_promise)


def test_a_requested_promise_the_contract_does_not_make_is_refused():
    def ask_for_99(data):
        data["requested"]["promises"] = ["3", "99"]
    with pytest.raises(ResultFileError, match=r"at requested/promises: '99' is not a promise of the contract"):
        cell(ask_for_99)


def test_every_promise_of_the_contract_is_accepted():
    assert set(cell().promise_numbers()) == set(PROMISES)


def test_the_schema_ships_as_a_json_file_in_the_package():
    shipped = Path(results.__file__).parents[1] / "schemas" / "cell-result.schema.json"
    assert json.loads(shipped.read_text()) == results.schema()
    assert results.schema()["properties"]["status"]["enum"] == list(results.CELL_STATUSES)
    assert results.schema()["properties"]["schema_version"]["const"] == results.SCHEMA_VERSION


# ----------------------------------------------------------------------------- text from other machines


def test_escape_sequences_and_controls_are_stripped():
    raw = "\x1b[31mred\x1b[0m \x1b]8;;http://evil\x07link\x1b]8;;\x07 \x1b]0;title\x1b\\ bell\x07 nul\x00 tab\tcr\r\nend"
    assert clean_text(raw) == "red link  bell nul tab\tcr\nend"


def test_one_line_folds_newlines_tabs_and_escapes():
    assert results.one_line("torch-2.13.0\nFAKE  passed\t\x1b[31mx") == "torch-2.13.0 FAKE  passed x"


def test_long_text_is_cut_with_a_note():
    assert clean_text("x" * 30 + "END", 10, keep="tail") == "[... 23 characters cut ...]\n" + "x" * 7 + "END"
    assert clean_text("START" + "x" * 30, 10) == "STARTxxxxx\n[... 25 characters cut ...]"


def test_loaded_results_are_clean_and_bounded(tmp_path):
    data = dict(rf.incomplete("2.13.0", "crashed", "?"), detail="\x1b[1mboom\x1b[0m\n" + "y" * 10_000_000 + "\nlast line")
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    detail = CellResult.load(path).detail
    assert detail.startswith("[... 9,980,") and detail.endswith("last line") and "\x1b" not in detail
    assert len(detail) < results.DETAIL_LIMIT + 100


# ----------------------------------------------------------------------------- one run per result path


def test_a_second_run_on_the_same_path_is_refused(tmp_path):
    path = tmp_path / "cell.json"
    with results.exclusive(path):
        with pytest.raises(results.ResultPathBusy, match="another run is writing this result file"):
            with results.exclusive(path):
                pass
        code = f"from cpugpu_conformance import results\nwith results.exclusive({str(path)!r}): pass"
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert "ResultPathBusy" in proc.stderr and f"pid {os.getpid()}" in proc.stderr
    with results.exclusive(path):  # released, and the lock file is gone after
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_killed_holder_releases_the_lock(tmp_path):
    path = tmp_path / "cell.json"
    code = f"import os\nfrom cpugpu_conformance import results\nwith results.exclusive({str(path)!r}): os._exit(9)"
    subprocess.run([sys.executable, "-c", code], timeout=60)
    with results.exclusive(path):
        pass


def test_the_placeholder_is_never_a_pass(tmp_path):
    placeholder = results.placeholder("torch-2.13.0-cpu", requested={"device": "cpu"})
    assert placeholder.status == "interrupted" and not placeholder.answer().clean
    assert "did not finish: it was killed, or is still running" in placeholder.detail
