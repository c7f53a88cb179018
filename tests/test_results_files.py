"""results: reading result files defensively (what is not a regular file, too large, not UTF-8,
nested too deeply, malformed, or not the contract's), cleaning text from other machines, and
writing a result that every reader can read.
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
from edited_results import cell
from malformed_results import MALFORMED

from cpugpu_conformance import results
from cpugpu_conformance.promises import PROMISES
from cpugpu_conformance.results import CellResult, ResultFileError, clean_text

pytestmark = pytest.mark.quick  # the core: nox -s quick


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


@pytest.mark.parametrize("number", ["1e400", "-1e400"])
def test_a_number_too_large_for_a_float_is_not_read_as_infinity(tmp_path, number):
    """1e400 is valid JSON that Python reads as inf: the file loaded, and writing it again raised a traceback."""
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(dict(rf.completed("2.13.0"), duration_s=12.5)).replace("12.5", number))
    assert f"not strict JSON: {number} is out of a float's range" in load_error(path)


@pytest.mark.parametrize("verdicts", [("failed", "passed"), ("passed", "failed")])
def test_keys_that_clean_to_the_same_text_are_refused_not_merged(tmp_path, verdicts):
    """Two class names that differ only by a control character: keeping the last let a passed class
    stand in for the failed one."""
    data = rf.completed("2.13.0")
    judged = {v: {"verdict": v, "tests": [{"test": f"t.py::T::test_mutable_state[cpu-{v}]", "verdict": v,
                                           "device": "cpu"}]} for v in verdicts}
    data["mutable_state"] = {"test_engine.Engine": judged[verdicts[0]], "test_engine.Engine\u0007": judged[verdicts[1]]}
    path = tmp_path / "twins.json"
    path.write_text(json.dumps(data))
    message = load_error(path)
    assert "two keys read as 'test_engine.Engine' once their control characters are gone" in message, message


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
