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
from malformed_results import MALFORMED

from cpugpu_conformance import results
from cpugpu_conformance.promises import PROMISES, RECORDED_ONLY, applies
from cpugpu_conformance.results import CellResult, ResultFileError, clean_text

pytestmark = pytest.mark.quick  # the core: nox -s quick


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


def test_a_pass_that_names_a_test_left_out_is_untested():
    """Issue 21: whatever the writer's verdict, an entry that names a test of the promise that did not
    run to its end is no pass."""
    left_out = [{"test": "t.py::T::test_x[cpu]", "why": "deselected (-k, -m, --deselect or a conftest hook)"}]
    out = cell(set_entry("5", verdict="passed", passed=6, failed=0, skipped=1, untested_tests=left_out)).outcome("5", "cpu")
    assert out.kind == "untested" and "deselected" in (out.note or "")


def test_a_waived_promise_is_no_pass_and_says_why():
    entry = {"verdict": "waived", "passed": 1, "failed": 0, "skipped": 1, "reason": "never in a thread",
             "waived_tests": [{"test": "t.py::T::test_x", "reason": "never in a thread"}]}
    result = cell(set_entry("12", **entry))
    assert (result.outcome("12", "cpu").kind, result.outcome("12", "cpu").note) == ("waived", "never in a thread")
    answer = result.answer()
    assert answer.kind == "untested" and not answer.clean and answer.counts["waived"] == 1
    assert any("waived: never in a thread" in line for line in answer.lines)


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
    assert f"over the {results.MAX_FILE_BYTES:,}-byte limit" in load_error(huge)


def test_not_utf8(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"cell": "caf\xe9"}')
    assert load_error(path).endswith("not UTF-8 (byte 0xe9 at offset 13)")


def test_deep_nesting(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 90_000 + "]" * 90_000)  # fewer values than MAX_VALUES: the depth is what is refused
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
    data = dict(rf.incomplete("2.13.0", "crashed", "?"), detail="\x1b[1mboom\x1b[0m\n" + "y" * 3_000_000 + "\nlast line")
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    detail = CellResult.load(path).detail
    assert detail.startswith("[... 2,980,") and detail.endswith("last line") and "\x1b" not in detail
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
    lock = results.lock_path(path)
    assert lock.read_text().startswith("pid "), "the killed run left its lock file behind"
    with results.exclusive(path):  # stale: removed, and made anew
        assert lock.read_text().startswith(f"pid {os.getpid()}, since ")
    assert not lock.exists()


def test_a_stale_lock_left_by_any_process_is_removed_and_made_anew(tmp_path):
    """A regular lock file of one name and a line of text that nobody holds: what a killed run leaves."""
    path = tmp_path / "cell.json"
    lock = results.lock_path(path)
    lock.write_text("held")
    before = os.stat(lock).st_ino
    with results.exclusive(path):
        assert lock.read_text().startswith(f"pid {os.getpid()}, since ")
        assert os.stat(lock).st_ino != before or lock.read_text() != "held"
    assert list(tmp_path.iterdir()) == []


def _precious(tmp_path: Path) -> Path:
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    return precious


def _planted(tmp_path: Path, kind: str) -> tuple[Path, Path | None]:
    """Something planted at the lock path of tmp_path/cell.json, and the file it could harm."""
    lock = results.lock_path(tmp_path / "cell.json")
    if kind == "hard link":
        precious = _precious(tmp_path)
        os.link(precious, lock)
        return lock, precious
    if kind == "symbolic link":
        precious = _precious(tmp_path)
        lock.symlink_to(precious)
        return lock, precious
    if kind == "dangling symbolic link":  # O_CREAT through it would make a file outside the folder
        outside = tmp_path / "elsewhere" / "made-through-the-link"
        outside.parent.mkdir()
        lock.symlink_to(outside)
        return lock, outside
    if kind == "FIFO":
        os.mkfifo(lock)
        return lock, None
    if kind == "directory":
        lock.mkdir()
        return lock, None
    if kind == "large regular file":  # a file someone moved there: more than a lock line
        lock.write_text("keep me\n" * 1000)
        return lock, lock
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["hard link", "symbolic link", "dangling symbolic link", "FIFO", "directory",
                                  "large regular file"])
def test_whatever_is_planted_at_the_lock_path_is_refused_in_one_line_and_left_untouched(tmp_path, kind):
    lock, harmed = _planted(tmp_path, kind)
    before = os.lstat(lock)
    content = harmed.read_bytes() if harmed is not None and harmed.exists() else None
    with pytest.raises(results.NotRegularFile) as refused:
        with results.exclusive(tmp_path / "cell.json"):
            pytest.fail("the lock was taken")
    message = str(refused.value)
    assert message.startswith(f"{lock}: the lock file ") and message.endswith("remove it") and "\n" not in message
    after = os.lstat(lock)
    assert (after.st_ino, after.st_mode, after.st_nlink, after.st_size) == \
           (before.st_ino, before.st_mode, before.st_nlink, before.st_size), "what was refused was changed"
    if kind == "dangling symbolic link":
        assert not harmed.exists(), "a file was made through the link"
    elif harmed is not None:
        assert harmed.read_bytes() == content
    assert not (tmp_path / "cell.json").exists()


def test_a_hard_link_at_the_lock_path_of_a_suite_run_is_refused_and_its_target_kept(tmp_path):
    """Issue 22: `ln precious.txt .r.json.lock`, then the suite with --cpugpu-cell-result=r.json."""
    lock, precious = _planted(tmp_path, "hard link")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(root / "conformance"), "--impl", "cpugpu_conformance.reference:CpuGpuBuffer",
         f"--cpugpu-cell-result={tmp_path / 'cell.json'}", "--hypothesis-profile", "ci", "-p", "no:cacheprovider", "-q"],
        cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"{lock}: the lock file has 2 names (a hard link to another file?)" in proc.stdout + proc.stderr
    assert precious.read_text() == "keep me\n" and os.stat(precious).st_nlink == 2
    assert not (tmp_path / "cell.json").exists()


def test_a_held_lock_is_never_removed_as_stale(tmp_path):
    """A lock whose holder lives is busy, whatever its file looks like; its file is left as it is."""
    path = tmp_path / "cell.json"
    code = ("import sys, time\nfrom cpugpu_conformance import results\n"
            f"with results.exclusive({str(path)!r}):\n    print('held', flush=True)\n    sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        lock = results.lock_path(path)
        before = lock.read_text()
        for _ in range(3):
            with pytest.raises(results.ResultPathBusy) as refused:
                with results.exclusive(path):
                    pytest.fail("a held lock was taken")
            assert f"(pid {holder.pid}, since " in str(refused.value)
        assert lock.read_text() == before
    finally:
        holder.communicate("", timeout=60)
    assert holder.returncode == 0 and not results.lock_path(path).exists()


def test_the_placeholder_is_never_a_pass(tmp_path):
    placeholder = results.placeholder("torch-2.13.0-cpu", requested={"device": "cpu"})
    assert placeholder.status == "interrupted" and not placeholder.answer().clean
    assert "did not finish: it was killed, or is still running" in placeholder.detail


# ----------------------------------------------------------------------------- malformed files (issue 22)


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_file_is_one_line_naming_it_and_the_key(tmp_path, case):
    text, key = MALFORMED[case]
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    message = load_error(path)
    assert message.startswith(f"{path}: not a ") and "\n" not in message and (key is None or key in message), message


@pytest.mark.parametrize("value", ["x", [], 3, None, True, ("a", "b")])
def test_a_result_made_of_what_is_not_a_mapping_is_a_result_file_error(value):
    with pytest.raises(ResultFileError, match="not a cell result: the JSON is "):
        CellResult(value, "<made>")


def test_an_unknown_top_level_key_is_refused_without_jsonschema_too(monkeypatch):
    """The top level is checked by the model itself: a minimal environment (no jsonschema) refuses it as well."""
    from cpugpu_conformance.results import schema_checks  # validate's home: where it looks _check_schema up

    monkeypatch.setattr(schema_checks, "_check_schema", lambda data, source, name="cell-result": None)
    with pytest.raises(ResultFileError, match="unknown key 'padding' at the top level"):
        CellResult(dict(rf.completed("2.13.0"), padding=[0] * 10), "<made>")
    with pytest.raises(ResultFileError, match="the JSON is a string"):
        CellResult("x", "<made>")


def test_the_verdicts_the_model_knows_are_the_schemas_waived_and_known_failure_included():
    enum = results.schema()["$defs"]["promise_on_device"]["properties"]["verdict"]["enum"]
    assert enum == list(results.VERDICTS)
    assert {"waived", "known_failure"} <= set(enum)
    for verdict in ("waived", "known_failure"):
        data = rf.completed("2.13.0")
        data["promises"]["3"]["devices"]["cpu"] = {"verdict": verdict, "passed": 0, "failed": 0, "skipped": 1,
                                                   "reason": "opted out"}
        CellResult(data)  # validates


def test_counting_values_matches_the_parser():
    def parsed(value):
        if isinstance(value, dict):
            return 1 + sum(parsed(v) for v in value.values())
        if isinstance(value, list):
            return 1 + sum(parsed(v) for v in value)
        return 1

    for value in [{}, [], "x", 3, {"a": [1, 2, "x,y[{\\\"]"]}, {"a": {"b": [[], {}, None]}}, rf.completed("2.13.0")]:
        text = json.dumps(value).encode()
        # a value per comma, bracket and brace: one more than the parser's count per non-empty container's last item
        assert parsed(value) <= results.count_values(text) <= 2 * parsed(value), value


def _loud(failures: int, text: str) -> dict:
    return rf.completed("2.13.0", failed={("1", "cpu"): [rf.failure(f"test_{i}", text, "import torch\n" + text)
                                                         for i in range(failures)]})


def test_a_result_too_large_for_a_reader_is_cut_to_fit_when_written(tmp_path):
    """Wide characters in every message: more bytes than the cap. The texts are cut, never the verdicts."""
    loud = CellResult(_loud(120, "\U0001f4a5" * 30_000 + "\nlast line"))
    assert len(json.dumps(loud.to_json(), ensure_ascii=False).encode()) > results.MAX_FILE_BYTES
    path = loud.write(tmp_path / "loud.json")
    assert path.stat().st_size <= results.MAX_FILE_BYTES
    again = CellResult.load(path)
    assert again.answer().kind == "failed" and again.answer().counts == loud.answer().counts
    failures = again.entry("1", "cpu")["failures"]
    assert len(failures) == 120 and all("characters cut" in f["message"] for f in failures)
    assert failures[0]["message"].startswith("\U0001f4a5")


def test_a_result_with_too_many_values_for_a_reader_keeps_the_first_failures(tmp_path):
    many = CellResult(_loud(30_000, "x"))
    assert results.count_values(json.dumps(many.to_json()).encode()) > results.MAX_VALUES
    path = many.write(tmp_path / "many.json")
    again = CellResult.load(path)
    failures = again.entry("1", "cpu")["failures"]
    assert len(failures) == 21 and failures[-1]["message"].startswith("29,980 more failures cut")
    assert again.entry("1", "cpu")["failed"] == 30_000 and again.answer().kind == "failed"


def test_a_result_that_fits_is_written_whole(tmp_path):
    loud = CellResult(_loud(3, "y" * 15_000))
    again = CellResult.load(loud.write(tmp_path / "c.json"))
    assert again == loud


def test_the_loudest_failing_run_writes_a_file_every_reader_reads(tmp_path):
    """Every test raising 80 kB of 4-byte characters (the most bytes a kept character takes): the
    suite's own file is cut to fit the cap, and the rest of the tooling reads it."""
    from suite_runner import TESTS, run_suite

    run = run_suite(tmp_path, "--impl", f"{TESTS / 'loud_impls.py'}:RaisesWide", "--device", "cpu")
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    path = tmp_path / "cell.json"
    assert path.stat().st_size <= results.MAX_FILE_BYTES
    loaded = CellResult.load(path)
    assert loaded.answer().kind == "failed"
    assert any("characters cut" in f["message"] for _, _, out in loaded.outcomes() for f in out.failures)


@pytest.mark.parametrize("promise, device", [("10", "cpu"), ("11", "cuda")])
@pytest.mark.parametrize("verdict", ["passed", "failed", "recorded", "known_failure"])
def test_a_verdict_where_the_contract_says_a_promise_does_not_apply_is_refused(promise, device, verdict):
    """The rule reads such a pair as not applicable whatever it says: a failure there would be hidden."""
    data = rf.completed("2.13.0", cuda=True)
    data["promises"][promise]["devices"][device] = {"verdict": verdict, "passed": 1, "failed": 0, "skipped": 0}
    with pytest.raises(ResultFileError, match=f"at promises/{promise}/devices/{device}: it records a verdict of "
                                              f"promise {promise} on {device} \\({verdict}\\), where the contract says"):
        CellResult(data)


def test_not_applicable_with_the_counts_of_a_test_that_ran_anyway_is_accepted():
    """What the suite writes when a test of several promises ran on a device one of them skips: its
    counts stay with the not-applicable entry, its failure goes to unattributed_failures and fails the cell."""
    data = rf.completed("2.13.0")
    data["promises"]["10"]["devices"]["cpu"] = {"verdict": "not_applicable", "reason": "promise 10 is about cuda",
                                                "passed": 2, "failed": 1, "skipped": 0}
    data["unattributed_failures"] = [rf.failure("test_copies[cpu]", "stale", None)]
    result = CellResult(data)
    assert result.outcome("10", "cpu").kind == "not_applicable" and result.answer().kind == "failed"
