"""report: hostile result folders. A result file is input from another machine.

Each bad entry becomes a skipped file with a one-line reason, in all three outputs and as
one warning line on stderr; never a traceback, never a hang; the good cells still render.
The report runs in a subprocess with a timeout, so a hang (a FIFO opened for reading)
fails the test instead of freezing the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import result_factory as rf
from malformed_results import MALFORMED

from cpugpu_conformance import results
from cpugpu_conformance.promises import PROMISES

OUTPUTS = ("compat.json", "COMPAT.md", "index.html")
ESC, BEL, CSI_RED, OSC_LINK = "\x1b", "\x07", "\x1b[31m", "\x1b]8;;http://x\x07"


def run_report(results_dir: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cpugpu_conformance", "report", str(results_dir), "--out", str(out)],
        capture_output=True, encoding="utf-8", errors="replace", timeout=60, check=False,
    )


def outputs(out: Path) -> dict[str, str]:
    """The three files, decoded strictly: a report that is not UTF-8 fails here."""
    return {name: (out / name).read_text(encoding="utf-8") for name in OUTPUTS}


def warning_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("cpugpu-conformance report: warning:")]


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    """A folder with one good cell, to which each test adds something hostile."""
    d = tmp_path / "results"
    d.mkdir()
    rf.write(d, "torch-2.13.0.json", rf.completed("2.13.0"))
    return d


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _deep_observation(d: Path) -> None:
    # Deep enough to pass the JSON parser, deep enough to break a recursive walk of the tree.
    text = json.dumps(rf.completed("2.14.1", cell="deep-inside"))
    text = text.replace('"observations": {', '"observations": {"deep": ' + _nested(500) + ", ", 1)
    (d / "deep-inside.json").write_text(text, encoding="utf-8")


def _v1(d: Path) -> None:
    old = {"schema": results.SCHEMA_ID, "schema_version": 1, "cell": "torch-2.12.0", "status": "completed",
           "promises": {"1": {"title": "Shape and dtype", "devices": {"cpu": {"verdict": "passed"}}}}}
    (d / "v1.json").write_text(json.dumps(old), encoding="utf-8")


def _nan(d: Path) -> None:
    text = json.dumps(rf.completed("2.14.1", cell="nan"))
    assert '"duration_s": 12.5' in text
    (d / "nan.json").write_text(text.replace('"duration_s": 12.5', '"duration_s": NaN'), encoding="utf-8")


def _made_up_promise(d: Path) -> None:
    """Hand-edited: a promise 99 the contract does not make, claimed passed."""
    forged = rf.completed("2.14.1", cell="forged")
    forged["promises"]["99"] = {"title": "Made up", "devices": {"cpu": {"verdict": "passed", "passed": 5}}}
    (d / "forged.json").write_text(json.dumps(forged), encoding="utf-8")


def _sparse_huge(d: Path) -> None:
    with open(d / "huge.json", "wb") as fh:
        fh.truncate(200 * 1024 * 1024)  # sparse: 200 MB in size, nothing written


# name -> (file name, how to make it, what the reason says)
HOSTILE: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "deeply nested": ("nested.json", lambda d: (d / "nested.json").write_text(_nested(90_000)), "nested too deeply"),
    "nested inside observations": ("deep-inside.json", _deep_observation, "nested too deeply"),
    "not UTF-8": ("latin1.json", lambda d: (d / "latin1.json").write_bytes(b'{"cell": "caf\xe9"}'), "not UTF-8"),
    "symlink loop": ("loop.json", lambda d: os.symlink("loop.json", d / "loop.json"), "symbolic link loop"),
    "dangling symlink": ("gone.json", lambda d: os.symlink("nowhere/x.json", d / "gone.json"), "no such result file"),
    "FIFO": ("pipe.json", lambda d: os.mkfifo(d / "pipe.json"), "a FIFO"),
    "directory": ("x.json", lambda d: (d / "x.json").mkdir(), "a directory"),
    "over the size cap": ("huge.json", _sparse_huge, "over the"),
    "schema v1": ("v1.json", _v1, "schema version 1"),
    "NaN": ("nan.json", _nan, "NaN"),
    "empty": ("empty.json", lambda d: (d / "empty.json").write_bytes(b""), "not JSON"),
    "made-up promise": ("forged.json", _made_up_promise, f"is not a promise of the contract (1-{len(PROMISES)})"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_entry_is_skipped_with_one_line_and_the_rest_renders(results_dir: Path, tmp_path: Path, case: str):
    name, make, reason = HOSTILE[case]
    make(results_dir)
    out = tmp_path / "out"
    proc = run_report(results_dir, out)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert warning_lines(proc) == [line for line in proc.stderr.splitlines() if line]
    [warning] = warning_lines(proc)
    assert f"skipped {name}: " in warning and reason in warning
    files = outputs(out)
    data = json.loads(files["compat.json"])
    [skipped] = data["skipped_files"]
    assert skipped["file"] == name and reason in skipped["reason"] and "\n" not in skipped["reason"]
    assert [c["cell"] for c in data["cells"]] == ["torch-2.13.0"]
    for text in (files["COMPAT.md"], files["index.html"]):
        assert name in text and reason in text
        assert "torch-2.13.0" in text


def test_every_hostile_entry_at_once(results_dir: Path, tmp_path: Path):
    for _name, make, _reason in HOSTILE.values():
        make(results_dir)
    rf.write(results_dir, "torch-2.14.1.json", rf.completed("2.14.1"))
    out = tmp_path / "out"
    proc = run_report(results_dir, out)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert len(warning_lines(proc)) == len(HOSTILE)
    data = json.loads(outputs(out)["compat.json"])
    assert sorted(s["file"] for s in data["skipped_files"]) == sorted(name for name, _, _ in HOSTILE.values())
    assert [c["cell"] for c in data["cells"]] == ["torch-2.13.0", "torch-2.14.1"]


def test_a_made_up_promise_adds_no_row_to_the_other_cells(results_dir: Path, tmp_path: Path):
    _made_up_promise(results_dir)
    out = tmp_path / "out"
    proc = run_report(results_dir, out)
    assert proc.returncode == 0, proc.stderr
    files = outputs(out)
    data = json.loads(files["compat.json"])
    assert set(data["promises"]) == set(PROMISES)
    assert [set(c["marks"]) for c in data["cells"]] == [set(PROMISES)]
    assert "99." not in files["COMPAT.md"] and "Made up" not in files["COMPAT.md"] + files["index.html"]


def test_only_json_files_directly_in_the_folder_are_read(results_dir: Path, tmp_path: Path):
    (results_dir / "sub").mkdir()
    rf.write(results_dir / "sub", "torch-2.14.1.json", rf.completed("2.14.1"))
    rf.write(results_dir, ".torch-2.14.1.json.x.tmp.json", rf.completed("2.14.1"))  # an atomic write's temporary
    (results_dir / "notes.txt").write_text("not a result", encoding="utf-8")
    proc = run_report(results_dir, tmp_path / "out")
    assert proc.returncode == 0 and proc.stderr == ""
    data = json.loads(outputs(tmp_path / "out")["compat.json"])
    assert data["generated_from"] == ["torch-2.13.0.json"] and data["skipped_files"] == []


# --- text from outside never reaches the outputs raw -------------------------------------


def assert_no_escapes(text: str) -> None:
    for raw in (ESC, BEL, "\\u001b", "\\u0007", "]8;;", "\x9b"):
        assert raw not in text, repr(raw)


def test_file_names_with_escapes_and_newlines_are_cleaned(results_dir: Path, tmp_path: Path):
    bad = f"evil{CSI_RED}red{ESC}]0;window title{BEL}link\nsecond line.json"  # no '/': a name, not a path
    (results_dir / bad).write_text("[", encoding="utf-8")
    good = f"ok{CSI_RED}.json"
    rf.write(results_dir, good, rf.completed("2.14.1"))
    proc = run_report(results_dir, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert_no_escapes(proc.stderr)
    [warning] = warning_lines(proc)
    assert "skipped evilredlink second line.json: not JSON" in warning
    files = outputs(tmp_path / "out")
    for text in files.values():
        assert_no_escapes(text)
    data = json.loads(files["compat.json"])
    assert data["skipped_files"][0]["file"] == "evilredlink second line.json"
    assert "ok.json" in data["generated_from"]


def test_a_file_name_that_is_not_utf8_is_shown_not_fatal(results_dir: Path, tmp_path: Path):
    with open(os.path.join(os.fsencode(results_dir), b"caf\xe9.json"), "wb") as fh:
        fh.write(json.dumps(rf.completed("2.14.1")).encode())
    proc = run_report(results_dir, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(outputs(tmp_path / "out")["compat.json"])
    assert "caf\ufffd.json" in data["generated_from"]


def test_a_lone_surrogate_in_a_result_does_not_break_the_report(results_dir: Path, tmp_path: Path):
    crashed = rf.incomplete("2.15.0", "crashed", "x")
    text = json.dumps(crashed).replace('"detail": "x"', '"detail": "killed \\ud800 here"')
    (results_dir / "surrogate.json").write_text(text, encoding="utf-8")
    proc = run_report(results_dir, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    files = outputs(tmp_path / "out")  # strict UTF-8
    assert "torch-2.15.0" in files["index.html"]
    assert json.loads(files["compat.json"])["cells"][0]["cell"] == "torch-2.13.0"


def _hostile_text(megabytes: int) -> str:
    line = f"{CSI_RED}E   {OSC_LINK}AssertionError{ESC}]8;;{BEL}: tensor differs at index 7\x1b[0m\r\n"
    return line * (megabytes * 1024 * 1024 // len(line))


def test_escape_sequences_and_megabytes_of_output_never_reach_the_report(results_dir: Path, tmp_path: Path):
    crashed = rf.incomplete("2.15.0", "crashed", "x")
    crashed["detail"] = f"killed by SIGABRT{CSI_RED}; last lines of the log:\n" + _hostile_text(2)
    failing = rf.completed("2.14.1", failed={("3", "cpu"): [rf.failure("test_mutable", "x", "import torch\n")]})
    failing["promises"]["3"]["devices"]["cpu"]["failures"][0]["message"] = _hostile_text(2)
    # Written raw (json escapes ESC as \u001b, which loads back as ESC): rf.write would clean it first.
    for name, result in (("crashed.json", crashed), ("failing.json", failing)):
        (results_dir / name).write_text(json.dumps(result), encoding="utf-8")
        assert 2_000_000 < (results_dir / name).stat().st_size <= results.MAX_FILE_BYTES
    out = tmp_path / "out"
    proc = run_report(results_dir, out)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    files = outputs(out)
    for name, text in files.items():
        assert_no_escapes(text)
        assert len(text.encode()) < 400_000, name
        assert "characters cut" in text, name
    # the tail of the log is kept: it is what explains a crash
    data = json.loads(files["compat.json"])
    detail = next(c["detail"] for c in data["cells"] if c["cell"] == "torch-2.15.0")
    assert detail.startswith("[... ") and detail.endswith("tensor differs at index 7\n")


# --- files that are not cell results (issue 22): one line each, never a traceback -------------------


def test_every_malformed_file_is_skipped_in_one_line_naming_it_and_the_key(results_dir: Path, tmp_path: Path):
    """Each case of malformed_results, as a file of its own in one folder (one report run for them all)."""
    names = {f"bad-{i}.json": case for i, case in enumerate(MALFORMED)}
    for name, case in names.items():
        (results_dir / name).write_text(MALFORMED[case][0], encoding="utf-8")
    out = tmp_path / "out"
    proc = run_report(results_dir, out)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line]
    assert len(lines) == len(names), lines
    for name, case in names.items():
        [warning] = [line for line in lines if line.startswith(f"cpugpu-conformance report: warning: skipped {name}: ")]
        key = MALFORMED[case][1]
        assert warning.startswith(f"cpugpu-conformance report: warning: skipped {name}: not a "), (case, warning)
        assert key is None or key in warning, (case, warning)
    data = json.loads(outputs(out)["compat.json"])
    assert [c["cell"] for c in data["cells"]] == ["torch-2.13.0"]
    assert sorted(s["file"] for s in data["skipped_files"]) == sorted(names)


@pytest.mark.parametrize("case", ["a string", "an array", "promises an array", "an unknown top-level key"])
def test_a_folder_of_only_malformed_files_is_exit_2_naming_each_and_writes_nothing(tmp_path: Path, case: str):
    """Issue 22: `"x"` gave a traceback and wrote nothing; now each file is named and the report refused."""
    text, key = MALFORMED[case]
    folder = tmp_path / "results"
    folder.mkdir()
    for name in ("a.json", "b.json"):
        (folder / name).write_text(text, encoding="utf-8")
    proc = run_report(folder, tmp_path / "out")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert [line.split(": ")[2].removeprefix("skipped ") for line in lines[:2]] == ["a.json", "b.json"]
    assert all(key is None or key in line for line in lines[:2]), lines
    assert lines[2:] == [f"cpugpu-conformance report: error: no valid result files in {folder} (2 skipped as invalid)"]
    assert not (tmp_path / "out").exists()


def test_compat_json_carries_only_what_the_schema_defines(results_dir: Path, tmp_path: Path):
    """Every key of a cell in compat.json is one the cell-result schema defines (the report adds its own few),
    at every level the schema names the keys: nothing a hand-made file adds is published."""
    failing = rf.completed("2.14.1", failed={("3", "cpu"): [rf.failure("test_mutable", "refused", "import torch\n")]})
    failing["unattributed_failures"] = [rf.failure("test_x", "boom", None)]
    rf.write(results_dir, "torch-2.14.1.json", failing)
    padded = json.loads(json.dumps(failing))
    padded["promises"]["3"]["devices"]["cpu"]["failures"][0]["padding"] = "P" * 1000
    padded["promises"]["3"]["devices"]["cpu"]["padding"] = "P" * 1000
    (results_dir / "padded-inside.json").write_text(json.dumps(padded), encoding="utf-8")
    (results_dir / "padded-top.json").write_text(json.dumps(dict(failing, padding="P" * 1000)), encoding="utf-8")
    out = tmp_path / "out"
    proc = run_report(results_dir, out)
    assert proc.returncode == 0
    assert sorted(json.loads(outputs(out)["compat.json"])["generated_from"]) == ["torch-2.13.0.json", "torch-2.14.1.json"]
    assert "PPPP" not in "".join(outputs(out).values()), "what the schema does not define was published"
    assert len(warning_lines(proc)) == 2 and all("padding" in line for line in warning_lines(proc))
    cell_schema = results.schema()
    added = {"source", "release", "devices_shown", "duplicate", "answer", "marks"}
    for cell in json.loads(outputs(out)["compat.json"])["cells"]:
        assert set(cell) - added <= set(cell_schema["properties"]), set(cell) - added - set(cell_schema["properties"])
        verdict_keys = set(cell_schema["$defs"]["promise_on_device"]["properties"])
        failure_keys = set(cell_schema["$defs"]["failure"]["properties"])
        for promise in cell.get("promises", {}).values():
            assert set(promise) <= {"title", "devices"}
            for verdict in promise["devices"].values():
                assert set(verdict) <= verdict_keys
                assert all(set(f) <= failure_keys for f in verdict.get("failures", []))
        assert all(set(f) <= failure_keys for f in cell.get("unattributed_failures", []))
