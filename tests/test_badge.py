"""report writes compat/badge.json: the matrix as a shields.io endpoint badge, published with the page."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import result_factory as rf
from emoji_data import emoji_in
from report_sample import cuda_missing

from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.report import badge as shields
from cpugpu_conformance.report import render

NO_CUDA = "no CUDA device on this machine"
FAILS = {("3", "cpu"): [rf.failure("test_mutable_after_inference", "AssertionError: refused", "import torch\n")]}


def badge_of(tmp_path: Path, cells: dict[str, dict[str, Any]]) -> dict[str, Any]:
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    for name, result in cells.items():
        rf.write(results, name, result)
    out = tmp_path / "compat"
    assert main(["report", str(results), "--out", str(out)]) == 0
    return json.loads((out / "badge.json").read_text(encoding="utf-8"))


def cpu_cells(*releases: str, **kwargs: Any) -> dict[str, dict[str, Any]]:
    return {f"torch-{r}-cpu.json": rf.completed(r, cell=f"torch-{r}-cpu", **kwargs) for r in releases}


SIXTEEN = ("2.0.1", "2.1.2", "2.2.2", "2.3.1", "2.4.1", "2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0",
           "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0")


def test_the_published_run_reads_cpu_16_of_16_and_cuda_never_run(tmp_path: Path):
    """The shape of the committed matrix: 16 CPU cells, all clean, no GPU cell."""
    assert badge_of(tmp_path, cpu_cells(*SIXTEEN)) == {
        "schemaVersion": 1,
        "label": "torch 2.0-2.15",
        "message": "cpu 16/16 conform | cuda: never run",
        # every release conforms where it ran, but cuda never ran: nothing untested is a pass
        "color": "yellow",
    }


def test_every_device_run_and_conforming_is_green(tmp_path: Path):
    got = badge_of(tmp_path, {f"{r}.json": rf.completed(r, cuda=True) for r in ("2.14.1", "2.15.0")})
    assert got["message"] == "cpu 2/2 conform | cuda 2/2 conform" and got["color"] == "brightgreen"
    assert got["label"] == "torch 2.14-2.15"


def test_a_failure_anywhere_is_red_and_counted_on_its_device_only(tmp_path: Path):
    cells = {f"{r}.json": rf.completed(r, cuda=True) for r in ("2.13.0", "2.15.0")}
    cells["2.14.1.json"] = rf.completed("2.14.1", cuda=True, failed=FAILS)
    got = badge_of(tmp_path, cells)
    assert got["message"] == "cpu 2/3 conform | cuda 3/3 conform" and got["color"] == "red"


def test_a_cell_that_did_not_complete_or_left_something_untested_is_not_counted_and_not_green(tmp_path: Path):
    cells = cpu_cells("2.13.0", "2.14.1")
    cells["torch-2.15.0-cpu.json"] = rf.incomplete("2.15.0", "crashed", "killed by SIGABRT", cell="torch-2.15.0-cpu")
    cells["torch-2.12.1-cpu.json"] = rf.completed("2.12.1", cell="torch-2.12.1-cpu", drop_promises=("4",))
    got = badge_of(tmp_path, cells)
    assert got["message"] == "cpu 2/4 conform | cuda: never run" and got["color"] == "yellow"


def test_a_device_asked_for_but_never_there_is_never_tested(tmp_path: Path):
    cells = {f"{r}.json": cuda_missing(rf.completed(r)) for r in ("2.14.1", "2.15.0")}
    got = badge_of(tmp_path, cells)
    assert got["message"] == "cpu 2/2 conform | cuda: never tested" and got["color"] == "yellow"


def test_one_series_is_one_number_and_a_cell_without_a_torch_does_not_widen_the_range(tmp_path: Path):
    from cpugpu_conformance import results

    cells = cpu_cells("2.15.0", "2.15.1")
    cells["fallback.json"] = rf.validate(results.CellResult.new("ci-fallback", "error", detail="nox failed"))
    assert badge_of(tmp_path, cells)["label"] == "torch 2.15"


@pytest.mark.parametrize(("release", "series"), [("2.15.0", "2.15"), ("2.16.0rc1", "2.16"), ("2.13.0+cu128", "2.13"),
                                                  ("latest", "latest"), ("10.2", "10.2")])
def test_series(release: str, series: str):
    assert shields.series(release) == series


def test_the_badge_is_the_endpoint_format_and_plain_text(tmp_path: Path):
    """shields.io reads schemaVersion, label, message, color; a message in plain words, no emoji."""
    cells = cpu_cells("2.14.1")
    cells["torch-2.15.0-cpu.json"] = rf.completed("2.15.0", cell="torch-2.15.0-cpu", failed=FAILS)
    got = badge_of(tmp_path, cells)
    assert set(got) == {"schemaVersion", "label", "message", "color"} and got["schemaVersion"] == 1
    assert all(isinstance(got[k], str) and got[k] for k in ("label", "message", "color"))
    assert got["color"] in ("brightgreen", "yellow", "red")
    assert emoji_in(got["label"] + got["message"]) == []


def test_the_badge_is_published_with_the_page_all_or_nothing(tmp_path: Path, monkeypatch, capsys):
    """badge.json is one of the report's outputs: written whole, 0644, and put back with the others when publishing fails."""
    results = tmp_path / "results"
    results.mkdir()
    for name, result in cpu_cells("2.14.1", "2.15.0").items():
        rf.write(results, name, result)
    out = tmp_path / "compat"
    assert main(["report", str(results), "--out", str(out)]) == 0
    assert "badge.json" in capsys.readouterr().out
    assert oct((out / "badge.json").stat().st_mode & 0o777) == "0o644"
    before = {name: (out / name).read_bytes() for name in render.OUTPUTS}

    rf.write(results, "torch-2.13.0-cpu.json", rf.completed("2.13.0", cell="torch-2.13.0-cpu", failed=FAILS))
    real_replace = os.replace

    def fail_on_the_badge(src, dst):
        if Path(dst).name == "badge.json":
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", fail_on_the_badge)
    assert main(["report", str(results), "--out", str(out)]) == 2
    monkeypatch.undo()
    assert {name: (out / name).read_bytes() for name in render.OUTPUTS} == before
    assert sorted(p.name for p in out.iterdir()) == sorted(render.OUTPUTS)  # no staged or backup file left


def test_a_failure_outside_any_promise_counts_against_every_device_of_its_cell(tmp_path: Path):
    broken = rf.completed("2.15.0", cuda=True, failed=FAILS)
    broken["promises"]["3"]["devices"]["cpu"] = {"verdict": "passed", "passed": 3, "failed": 0, "skipped": 0}
    broken["unattributed_failures"] = [{"test": "test_module_setup", "message": "RuntimeError: fixture broke"}]
    got = badge_of(tmp_path, {"2.14.1.json": rf.completed("2.14.1", cuda=True), "2.15.0.json": broken})
    assert got["message"] == "cpu 1/2 conform | cuda 1/2 conform" and got["color"] == "red"
    data = json.loads((tmp_path / "compat" / "compat.json").read_text(encoding="utf-8"))
    for device in data["summary"]["devices"]:
        assert [(r["release"], r["answer"]) for r in device["not_conforming"]] == [("2.15.0", "failed")]


def test_two_cells_of_one_release_on_one_device_both_must_conform(tmp_path: Path):
    cells = {"cpu.json": rf.completed("2.15.0", cell="torch-2.15.0-cpu"),
             "gpu.json": rf.completed("2.15.0", cell="local-h200", cuda=True, failed=FAILS)}
    got = badge_of(tmp_path, cells)
    # 2.15.0 passed on cpu in one cell and failed on cpu in the other: it does not conform on cpu
    assert got["message"] == "cpu 0/1 conform | cuda 1/1 conform" and got["color"] == "red"


def test_the_page_names_at_most_a_few_releases_that_do_not_conform_and_counts_the_rest(tmp_path: Path):
    releases = [f"2.{minor}.0" for minor in range(12)]
    got = badge_of(tmp_path, cpu_cells(*releases, failed=FAILS))
    assert got["message"] == "cpu 0/12 conform | cuda: never run"
    html = (tmp_path / "compat" / "index.html").read_text(encoding="utf-8")
    row = html[html.index('<table id="answer-table">'):html.index("</table>", html.index('<table id="answer-table">'))]
    assert f"2.{11}.0 (FAILED)" in row and "2.4.0 (FAILED)" in row and "2.3.0 (FAILED)" not in row
    assert f", and {12 - render.NOT_CONFORMING_SHOWN} more" in row
    data = json.loads((tmp_path / "compat" / "compat.json").read_text(encoding="utf-8"))
    assert len(data["summary"]["devices"][0]["not_conforming"]) == 12  # the data is whole


def test_a_release_whose_file_cannot_be_read_is_said_on_the_badge_and_the_page(tmp_path: Path, capsys):
    """The newest release's upload cut short: the report used to drop it from the badge silently,
    which then read 15/15 (green, were cuda run) for a matrix of 16."""
    results = tmp_path / "results"
    results.mkdir()
    for name, result in {f"{r}.json": rf.completed(r, cuda=True) for r in ("2.13.0", "2.14.1")}.items():
        rf.write(results, name, result)
    cut = json.dumps(rf.completed("2.15.0", cuda=True))[:500]
    (results / "torch-2.15.0-all.json").write_text(cut)
    out = tmp_path / "compat"
    assert main(["report", str(results), "--out", str(out)]) == 0
    got = json.loads((out / "badge.json").read_text(encoding="utf-8"))
    assert got["message"].startswith("cpu 2/2 conform | cuda 2/2 conform | ")  # (then any other device of the contract)
    assert got["message"].endswith(" | 1 result file unreadable")
    assert got["color"] == "yellow", "every release it read conforms, but one it could not read says nothing"
    page = (out / "index.html").read_text(encoding="utf-8")
    answer = page[page.index('<section id="answer"'):page.index("</section>", page.index('<section id="answer"'))]
    assert "1 result file could not be read</strong>" in answer and "<code>torch-2.15.0-all.json</code> (not JSON" in answer
    md = (out / "COMPAT.md").read_text(encoding="utf-8")
    head = md[:md.index("Generated by")]
    assert "**1 result file could not be read**" in head and "`torch-2.15.0-all.json` (not JSON" in head


def test_unreadable_files_are_counted_and_a_failure_stays_red(tmp_path: Path):
    cells = cpu_cells("2.14.1")
    cells["torch-2.15.0-cpu.json"] = rf.completed("2.15.0", cell="torch-2.15.0-cpu", failed=FAILS)
    results = tmp_path / "results"
    results.mkdir()
    for name in ("a.json", "b.json"):
        (results / name).write_text("[]")
    got = badge_of(tmp_path, cells)
    assert got["message"].startswith("cpu 1/2 conform | cuda: never run | ") and got["color"] == "red"
    assert got["message"].endswith(" | 2 result files unreadable")


def test_an_unreadable_file_alone_keeps_the_badge_from_green(tmp_path: Path):
    """Whatever devices the contract has: over summaries that would be green, one unreadable file is yellow."""
    results = tmp_path / "results"
    results.mkdir()
    for r in ("2.14.1", "2.15.0"):
        rf.write(results, f"{r}.json", rf.completed(r, cuda=True))
    got = render.collect(results)
    ran = [s for s in got.device_summaries if not s.never_run]
    assert shields.colour(ran) == shields.GREEN
    assert shields.colour(ran, unreadable=1) == shields.YELLOW
    assert shields.badge(ran, None, [{"file": "x.json", "reason": "not JSON"}])["message"].endswith(
        " | 1 result file unreadable")
