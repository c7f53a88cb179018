"""report as a changelog: what changed at each release, folded steady probes, marks that
read without an emoji font, and the same bytes from the same results."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import result_factory as rf
from report_reading import md_matrix, parse
from report_sample import cuda_missing

from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.promises import PROMISES, applies
from cpugpu_conformance.report import marks
from cpugpu_conformance.report import view as compat

OUTPUTS = ("compat.json", "COMPAT.md", "index.html")
NO_CUDA = "no CUDA device on this machine"
PIN_OLD = "RuntimeError: Cannot access accelerator device when none is available."
PIN_NEW = "accepted: cpu.is_pinned()=False"
DTYPES_DOC = "per dtype: torch.zeros(2, dtype) ok?"

# The promises that apply on CUDA, as the changelog lists them.
ON_CUDA = ", ".join(p for p in PROMISES if applies(p, "cuda"))


def observations(*, is_inference: bool, float8: bool) -> dict[str, Any]:
    """The factory's probes plus a table-valued one, as observe.py records 'dtypes'."""
    obs = copy.deepcopy(rf.BASE_OBSERVATIONS)
    obs["inference_tensor.is_inference"]["value"] = is_inference
    table = {"bfloat16": "raises TypeError", "float32": "ok"}
    if float8:
        table["float8_e4m3fn"] = "ok"
    obs["dtypes"] = {"doc": DTYPES_DOC, "value": table}
    return obs


def history() -> dict[str, dict[str, Any]]:
    """Five releases in which, one at a time: a probe and a table entry change (2.12.1), a cell
    crashes (2.13.0), a promise fails (2.14.0), then passes again while the GPU goes missing and
    promise 11 records something new (2.14.1)."""
    before, after = observations(is_inference=True, float8=False), observations(is_inference=False, float8=True)
    fails = {("3", "cpu"): [rf.failure("test_mutable_after_inference", "AssertionError: refused", "import torch\n")]}
    return {
        "torch-2.11.0.json": rf.completed("2.11.0", cuda=True, observations=before),
        "torch-2.12.1.json": rf.completed("2.12.1", cuda=True, observations=after),
        "torch-2.13.0.json": rf.incomplete("2.13.0", "crashed", "pytest killed by SIGABRT\nFatal Python error"),
        "torch-2.14.0.json": rf.completed("2.14.0", cuda=True, observations=after, failed=fails),
        "torch-2.14.1.json": cuda_missing(rf.completed("2.14.1", observations=after, observed_11=PIN_NEW)),
    }


def write_all(folder: Path, cells: dict[str, dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, result in cells.items():
        rf.write(folder, name, result)
    return folder


def report(results_dir: Path, out: Path) -> dict[str, str]:
    assert main(["report", str(results_dir), "--out", str(out)]) == 0
    return {name: (out / name).read_text(encoding="utf-8") for name in OUTPUTS}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("history")
    return report(write_all(root / "results", history()), root / "compat")


def log_rows(html: str, table: str) -> list[tuple[str, ...]]:
    """A changelog table's rows, the release (a th spanning its rows) repeated on each."""
    rows = parse(html).tables[table][1:]
    flat, release = [], ""
    for row in rows:
        cells = [" ".join(text.split()) for _, _, text in row]
        if row[0][0] == "th":
            release, cells = cells[0], cells[1:]
        flat.append((release, *cells))
    return flat


def md_rows(md: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table whose header line is ``header``."""
    lines = md[md.index(header + "\n"):].split("\n\n", 1)[0].splitlines()[2:]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def ref(release: str) -> dict[str, str]:
    return {"release": release, "cell": f"torch-{release}", "source": f"torch-{release}.json"}


H200 = "CUDA (NVIDIA H200)"  # the machine of 2.11.0-2.14.0 in history(); 2.14.1 ran on one without a GPU


# --- observed behaviour: what changed at each release ------------------------------------


def test_a_probe_that_changed_at_one_release_is_one_row_at_that_release(files):
    rows = log_rows(files["index.html"], "observation-changes-table")
    assert ("2.12.1 since 2.11.0", "inference_tensor.is_inference", "true", "false") in rows
    # nothing else changed: the crashed 2.13.0 is skipped, and 2.14.0 is read against 2.12.1
    assert [r[1] for r in rows] == ["dtypes.float8_e4m3fn", "inference_tensor.is_inference"]
    md = md_rows(files["COMPAT.md"], "| Release | Probe | Before | After |")
    assert ["2.12.1 (since 2.11.0)", "inference_tensor.is_inference", "true", "false"] in md
    changes = json.loads(files["compat.json"])["changes"]["observations"]
    assert {"at": ref("2.12.1"), "since": ref("2.11.0"), "machine": H200, "probe": "inference_tensor.is_inference",
            "before": "true", "after": "false"} in changes
    assert len(changes) == 2


def test_a_table_entry_that_appeared_is_its_own_row(files):
    rows = log_rows(files["index.html"], "observation-changes-table")
    # one line for the new dtype, not two copies of the whole table
    assert ("2.12.1 since 2.11.0", "dtypes.float8_e4m3fn", "no entry", "ok") in rows
    assert not any(r[1] in ("dtypes", "dtypes.float32", "dtypes.bfloat16") for r in rows)
    page = parse(files["index.html"])
    row = next(r for r in page.tables["observation-changes-table"][1:] if "dtypes.float8_e4m3fn" in r[0][2] + r[1][2])
    probe_cell = next(cell for cell in row if "dtypes.float8_e4m3fn" in cell[2])
    assert probe_cell[1]["title"] == DTYPES_DOC  # an entry is described by its table's probe
    md = md_rows(files["COMPAT.md"], "| Release | Probe | Before | After |")
    assert ["2.12.1 (since 2.11.0)", "dtypes.float8_e4m3fn", "*no entry*", "ok"] in md
    changes = json.loads(files["compat.json"])["changes"]["observations"]
    assert {"at": ref("2.12.1"), "since": ref("2.11.0"), "machine": H200, "probe": "dtypes.float8_e4m3fn",
            "before": None, "after": "ok"} in changes


def test_the_changelog_opens_the_observed_behaviour_section(files):
    for text, section, log in ((files["index.html"], 'id="observations"', 'id="observation-changes-table"'),
                               (files["COMPAT.md"], "## Observed torch behaviour", "| Release | Probe | Before | After |")):
        start = text.index(section)
        assert start < text.index(log) < text.index("never changed", start)


def test_probes_that_never_changed_are_folded_away(files):
    html = files["index.html"]
    folded = re.search(r'<details id="unchanged-probes">(.*?)</details>', html, re.S)
    assert folded and 'id="unchanged-probes-table"' in folded.group(1)
    assert "<summary>3 probes that never changed" in folded.group(1)
    rows = {r[0][2].strip(): r[1][2].strip() for r in parse(html).tables["unchanged-probes-table"][1:]}
    assert rows == {"numpy.bfloat16": "raises TypeError: Got unsupported ScalarType BFloat16",
                    "numpy.dtypes": '["bool", "float32", "int64"]',
                    "pin_memory.no_accelerator": "raises RuntimeError: Cannot access accelerator device"}
    # the release-by-release table of the probes that did change is folded too, and closed
    full = re.search(r'<details id="changed-probes">(.*?)</details>', html, re.S)
    assert full and 'id="observations-table"' in full.group(1)
    assert "<details open" not in html

    md = files["COMPAT.md"]
    block = re.search(r"\n<details>\n<summary>(.*?)</summary>\n\n(.*?)\n\n</details>\n", md, re.S)
    assert block and block.group(1).startswith("3 probes that never changed")
    table = block.group(2).splitlines()
    assert table[0] == "| Probe | Outcome | What it probes |" and len(table) == 2 + 3
    assert "| numpy.bfloat16 | raises TypeError: Got unsupported ScalarType BFloat16 |" in block.group(2)


# --- verdicts: what changed at each release ----------------------------------------------


def label(kind: str) -> str:
    return marks.MARKS[kind].label


def test_verdict_changes_are_listed_per_release_newest_first_under_the_matrix(files):
    rows = log_rows(files["index.html"], "verdict-changes-table")
    fail = f"{label('failed')} test_mutable_after_inference: AssertionError: refused"
    assert rows == [
        ("2.14.1 since 2.14.0", "cpu", "3. Mutable wherever they were made", fail, label("passed")),
        # the GPU went missing: every promise it had is untested, one row for all of them
        ("2.14.1 since 2.14.0", "cuda", ON_CUDA, label("passed"), f"{label('untested')} {NO_CUDA}"),
        # read against the last release that ran to the end, not against the crash
        ("2.14.0 since 2.12.1", "cpu", "3. Mutable wherever they were made", label("passed"), fail),
        ("2.13.0 since 2.12.1", "cpu", "every promise", "—", f"{label('crashed')} pytest killed by SIGABRT"),
    ]
    # promise 11 recorded something else at 2.14.1: an observation, never a verdict change
    assert not any(row[2].startswith("11.") for row in rows)
    html = files["index.html"]
    promises = html.index('<h2 id="promises">')
    assert promises < html.index('<table id="matrix">') < html.index('id="verdict-changes-table"')

    md = files["COMPAT.md"]
    assert md.index("## Promises") < md.index("\n| Release, device |") < md.index("### Verdict changes by release")
    md_log = md_rows(md, "| Release | Device | Promise | Before | After |")
    assert md_log[2] == ["2.14.0 (since 2.12.1)", "cpu", "3. Mutable wherever they were made", label("passed"),
                         f"{label('failed')}: test_mutable_after_inference: AssertionError: refused"]
    assert md_log[1][2:] == [ON_CUDA, label("passed"), f"{label('untested')}: {NO_CUDA}"]
    assert len(md_log) == 4

    changes = json.loads(files["compat.json"])["changes"]["verdicts"]  # in version order
    assert changes[0] == {"at": ref("2.13.0"), "since": ref("2.12.1"), "device": "cpu", "promises": [],
                          "before": None, "after": {"mark": "crashed", "note": "pytest killed by SIGABRT"}}
    assert changes[1]["promises"] == ["3"] and changes[1]["before"] == {"mark": "passed", "note": None}
    assert changes[1]["after"]["mark"] == "failed"
    assert changes[3]["promises"] == [p for p in PROMISES if applies(p, "cuda")] and changes[3]["after"]["mark"] == "untested"
    assert len(changes) == 4 and not any("11" in c["promises"] for c in changes)


def test_what_a_recorded_promise_recorded_is_an_observation_not_a_verdict_change(files):
    title = f"11. {compat.promise_title('11')}"
    rows = log_rows(files["index.html"], "recorded-changes-table")
    assert rows == [("2.14.1 since 2.14.0", "cpu", title, f"{label('recorded')} {PIN_OLD}",
                     f"{label('recorded')} {PIN_NEW}")]
    html = files["index.html"]
    assert html.index('id="observations"') < html.index('id="recorded-changes-table"')
    md = files["COMPAT.md"]
    section = md[md.index("### What recorded promises recorded"):]
    assert md.index("## Observed torch behaviour") < md.index("### What recorded promises recorded")
    assert md_rows(section, "| Release | Device | Promise | Before | After |") == [
        ["2.14.1 (since 2.14.0)", "cpu", title, f"{label('recorded')}: {PIN_OLD}", f"{label('recorded')}: {PIN_NEW}"]]
    recorded = json.loads(files["compat.json"])["changes"]["recorded"]
    assert recorded == [{"at": ref("2.14.1"), "since": ref("2.14.0"), "device": "cpu", "promises": ["11"],
                         "before": {"mark": "recorded", "note": PIN_OLD}, "after": {"mark": "recorded", "note": PIN_NEW}}]


def test_only_a_new_record_or_message_is_no_verdict_change(tmp_path: Path):
    """Promise 11 recording something else, and a failure failing with another message: no verdict changed."""
    failing = {("3", "cpu"): [rf.failure("test_mutable", "AssertionError: first message", None)]}
    failing_again = {("3", "cpu"): [rf.failure("test_mutable", "AssertionError: another message", None)]}
    d = write_all(tmp_path / "r", {"a.json": rf.completed("2.13.0", failed=failing),
                                   "b.json": rf.completed("2.14.1", observed_11=PIN_NEW, failed=failing_again)})
    files = report(d, tmp_path / "o")
    for page in (files["index.html"], files["COMPAT.md"]):
        assert "No promise's verdict changed between consecutive releases." in page
        assert "No recorded promise recorded anything new" not in page
    changes = json.loads(files["compat.json"])["changes"]
    assert changes["verdicts"] == []
    assert [(c["promises"], c["after"]) for c in changes["recorded"]] == [(["11"], {"mark": "recorded", "note": PIN_NEW})]


def test_no_verdict_change_says_so(tmp_path: Path):
    d = write_all(tmp_path / "r", {"a.json": rf.completed("2.13.0"), "b.json": rf.completed("2.14.1")})
    files = report(d, tmp_path / "o")
    for page in (files["index.html"], files["COMPAT.md"]):
        assert "No promise's verdict changed between consecutive releases." in page
        assert "No recorded promise recorded anything new between consecutive releases." in page
    changes = json.loads(files["compat.json"])["changes"]
    assert changes["verdicts"] == changes["recorded"] == []


def test_a_repeated_note_names_where_it_was_first_shown(files):
    """Promise 11's recorded text is long: shown where it changes, reading down from the newest
    release, and 'same as ...' below it."""
    page = parse(files["index.html"])
    header, *rows = page.tables["matrix"]
    column = [text.strip() for _, _, text in header].index(f"11. {compat.promise_title('11')}")
    # a crashed cell's row is one cell across every promise
    cpu_rows = {" ".join(row[0][2].split()): (row[min(column, len(row) - 1)][1],
                                              " ".join(row[min(column, len(row) - 1)][2].split()))
                for row in rows if row[0][2].split()[-1] == "cpu"}
    assert list(cpu_rows) == ["2.14.1 cpu", "2.14.0 cpu", "2.13.0 cpu", "2.12.1 cpu", "2.11.0 cpu"]
    assert cpu_rows["2.14.1 cpu"][1] == f"{label('recorded')} {PIN_NEW}"
    assert cpu_rows["2.14.0 cpu"][1] == f"{label('recorded')} {PIN_OLD}"
    # the crash between them does not interrupt the run of repeats
    assert cpu_rows["2.13.0 cpu"][1].startswith(f"{label('crashed')} (every promise)")
    assert cpu_rows["2.12.1 cpu"][1] == cpu_rows["2.11.0 cpu"][1] == f"{label('recorded')} same as 2.14.0 cpu"
    assert cpu_rows["2.11.0 cpu"][0]["title"] == PIN_OLD  # the full text stays on hover
    md_column = md_matrix(files["COMPAT.md"])[1][f"11. {compat.promise_title('11')}"]
    assert md_column["2.14.0 cpu"] == f"{label('recorded')}: {PIN_OLD}"
    assert md_column["2.11.0 cpu"] == f"{label('recorded')} (same as 2.14.0 cpu)"


# --- marks read without an emoji font and without colour ---------------------------------


def test_every_mark_is_a_symbol_and_its_word_in_compat_json(files):
    data = json.loads(files["compat.json"])
    for legend, styles in (("marks", marks.MARKS), ("answers", marks.ANSWERS)):
        assert set(data[legend]) == set(styles)
        for kind, style in data[legend].items():
            assert style["label"] == f"{style['symbol']} {style['word']}" == styles[kind].label
            assert style["word"].strip() and style["word"] not in ("", style["symbol"])


def test_no_coloured_cell_relies_on_its_colour(files):
    """Each cell coloured for a mark or an answer says that mark's word; each highlighted
    change says 'changed'."""
    page = parse(files["index.html"])
    checked = 0
    for rows in page.tables.values():
        for row in rows:
            for _, attrs, text in row:
                classes = attrs.get("class", "").split()
                for cls in classes:
                    if cls.startswith("m-"):
                        assert marks.MARKS[cls[2:]].label in text, (cls, text)
                        checked += 1
                    elif cls.startswith("a-"):
                        assert marks.ANSWERS[cls[2:]].label in text, (cls, text)
                        checked += 1
                if "changed" in classes:
                    assert "changed:" in text
    assert checked > 100


def test_markdown_marks_carry_their_words(files):
    _, table = md_matrix(files["COMPAT.md"])
    for title, column in table.items():
        styles = marks.ANSWERS if title == "Answer" else marks.MARKS
        for text in column.values():
            assert any(text.startswith(style.label) for style in styles.values()), text


# --- the same results give the same bytes ------------------------------------------------


def rerun_of(result: dict[str, Any], n: int) -> dict[str, Any]:
    """The same cell run again: another start time, duration, command line, runner kernel and process."""
    result = copy.deepcopy(result)
    if "started" in result or result.get("status") == "completed":
        result["started"] = f"2026-12-0{n}T0{n}:1{n}:00+00:00"
        result["duration_s"] = 10.0 + n
        result["argv"] = ["conformance", "--cell-result", f"/tmp/run-{n}/results/.x.json.part"]
    env = result.get("environment")
    if env:
        env["platform"] = f"Linux-6.{n}.0-10{n}-azure-x86_64-with-glibc2.39"
    if result.get("status") == "interrupted":
        result["detail"] = f"the run that started at 2026-12-0{n}T0{n}:00:00+00:00 (pid {4000 + n}) did not finish"
    return result


def reversed_keys(value: Any) -> Any:
    """The same JSON with every object's keys in the opposite order."""
    if isinstance(value, dict):
        return {k: reversed_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reversed_keys(v) for v in value]
    return value


def write_raw(folder: Path, cells: dict[str, dict[str, Any]]) -> Path:
    """Written as given (rf.write sorts keys), so the order of keys really differs."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, result in cells.items():
        (folder / name).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return folder


@pytest.fixture
def varied_history() -> dict[str, dict[str, Any]]:
    cells = history()
    cells["torch-2.15.0.json"] = rf.incomplete("2.15.0", "interrupted", "placeholder")
    return {name: rerun_of(result, 1) for name, result in cells.items()}


def test_the_same_results_give_the_same_bytes(tmp_path: Path, varied_history):
    results_dir = write_all(tmp_path / "results", varied_history)
    first = report(results_dir, tmp_path / "first")
    second = report(results_dir, tmp_path / "elsewhere" / "second")
    assert first == second
    for name in OUTPUTS:
        assert (tmp_path / "first" / name).read_bytes() == (tmp_path / "elsewhere" / "second" / name).read_bytes()
        assert str(tmp_path) not in first[name] and "/tmp/run-" not in first[name]


def test_a_rerun_that_differs_only_in_time_process_and_runner_gives_the_same_bytes(tmp_path: Path, varied_history):
    report(write_all(tmp_path / "a", varied_history), tmp_path / "out-a")
    again = {name: reversed_keys(rerun_of(result, 2)) for name, result in varied_history.items()}
    second = report(write_raw(tmp_path / "b", again), tmp_path / "out-b")
    for name in OUTPUTS:
        assert (tmp_path / "out-a" / name).read_bytes() == (tmp_path / "out-b" / name).read_bytes(), name
    data = json.loads(second["compat.json"])
    for cell in data["cells"]:
        assert not set(compat.RUN_SPECIFIC) & set(cell), cell["cell"]
    # what a reader needs stays: the versions, the OS, architecture and C library
    env = next(c for c in data["cells"] if c["cell"] == "torch-2.14.1")["environment"]
    assert (env["torch"], env["numpy"], env["python"]) == ("2.14.1", "2.1.3", "3.11.9")
    assert env["platform"] == "Linux-x86_64-with-glibc2.39"
    interrupted = next(c for c in data["cells"] if c["cell"] == "torch-2.15.0")
    assert interrupted["detail"] == "the run that started at [time] did not finish"
    for text in second.values():
        assert "duration_s" not in text and "2026-12-0" not in text and "pid 400" not in text


@pytest.mark.parametrize(("platform", "stable"), [
    ("Linux-6.8.0-1015-azure-x86_64-with-glibc2.39", "Linux-x86_64-with-glibc2.39"),
    ("Linux-6.18.44-fc-v769-x86_64-with-glibc2.36", "Linux-x86_64-with-glibc2.36"),
    ("Linux-5.15.0-aarch64-with-glibc2.35", "Linux-aarch64-with-glibc2.35"),
    ("Linux-x86_64", "Linux-x86_64"),
    ("macOS-14.2-arm64-arm-64bit", "macOS-14.2-arm64-arm-64bit"),  # the OS version matters there
    (None, None),
])
def test_stable_platform_drops_only_the_linux_kernel_release(platform, stable):
    assert compat.stable_platform(platform) == stable
