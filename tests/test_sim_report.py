"""A sim column in the matrix: in result files, compat.json, the page and the badge, labelled simulated;
and in matrix.yaml, the composite action and CI. Nothing here loads sim: the cells are built as the
suite writes them on sim (tests/test_sim_suite.py runs the suite itself)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import result_factory as rf
import yaml
from suite_runner import REPO

from cpugpu_conformance import devices, results
from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.runner import matrix as matrices


def sim_cell(torch: str) -> dict[str, Any]:
    """A completed cell of `torch` on sim, as `--device sim` writes it: every promise passed there, 11 not
    applicable, cpu and cuda not requested, sim loaded in the run's process."""
    data = copy.deepcopy(rf.completed(torch, cell=f"torch-{torch}-sim"))
    not_asked = {"status": "not_requested", "reason": "not requested (--device sim)"}
    data["devices"] = {"cpu": dict(not_asked), "cuda": dict(not_asked), "sim": {"status": "tested"}}
    for number, promise in data["promises"].items():
        entry = {"verdict": "passed", "passed": 3, "failed": 0, "skipped": 0}
        if number == "11":
            entry = {"verdict": "not_applicable", "reason": "promise 11 is about cpu", "passed": 0, "failed": 0,
                     "skipped": 0}
        promise["devices"] = {"cpu": {"verdict": "not_requested", "reason": "not requested (--device sim)"},
                              "cuda": {"verdict": "not_requested", "reason": "not requested (--device sim)"},
                              "sim": entry}
    data["requested"]["device"] = "sim"
    data["environment"]["sim_loaded"] = True
    return rf.validate(data)


def report(tmp_path: Path, cells: dict[str, dict[str, Any]]) -> Path:
    folder, out = tmp_path / "results", tmp_path / "out"
    folder.mkdir()
    for name, data in cells.items():
        rf.write(folder, f"{name}.json", data)
    assert main(["report", str(folder), "--out", str(out)]) == 0
    return out


def test_a_sim_cell_is_clean_and_judged_on_sim_with_promise_11_not_applicable():
    cell = results.CellResult(sim_cell("2.13.0"), "torch-2.13.0-sim.json")
    assert cell.tested_devices() == ["sim"] and cell.answer().clean, cell.answer().lines
    assert cell.outcome("10", "sim").kind == "passed"
    assert cell.outcome("11", "sim").kind == "not_applicable"
    assert devices.accelerators_in(cell.environment) == ("sim",)
    assert results.machine_kind(cell.environment) == "sim (simulated accelerator)"  # observations: its own history


def test_the_page_the_matrix_and_the_badge_label_the_sim_column_simulated(tmp_path):
    out = report(tmp_path, {"torch-2.13.0-cpu": rf.completed("2.13.0"), "torch-2.13.0-sim": sim_cell("2.13.0")})
    assert "2.13.0 sim (simulated)" in (out / "COMPAT.md").read_text()
    page = (out / "index.html").read_text()
    assert '<span class="rel">2.13.0</span> <span class="dev">sim (simulated)</span>' in page
    assert '<th scope="row">sim (simulated)</th>' in page  # the answer on each device
    summary = {d["device"]: d for d in json.loads((out / "compat.json").read_text())["summary"]["devices"]}
    assert summary["sim"]["simulated"] is True and summary["sim"]["conforming"] == ["2.13.0"]
    assert "simulated" not in summary["cpu"]
    badge = json.loads((out / "badge.json").read_text())
    assert badge["message"] == "cpu 1/1 conform | cuda: never run | sim (simulated) 1/1 conform", badge


def test_a_matrix_with_no_sim_says_nothing_of_it(tmp_path):
    """sim is tested only when asked for by name: a matrix that never asked has no sim column to be missing."""
    out = report(tmp_path, {"torch-2.13.0-cpu": rf.completed("2.13.0")})
    assert "sim" not in json.loads((out / "badge.json").read_text())["message"]
    assert [d["device"] for d in json.loads((out / "compat.json").read_text())["summary"]["devices"]] == ["cpu", "cuda"]


def test_matrix_yaml_can_list_sim_and_ci_runs_its_2_13_and_2_14_cells(tmp_path):
    text = (REPO / "matrix.yaml").read_text().replace("devices:\n  cpu: {runner: ubuntu-latest}\n",
                                                      "devices:\n  cpu: {runner: ubuntu-latest}\n  sim: {runner: ubuntu-latest}\n")
    (tmp_path / "matrix.yaml").write_text(text)
    assert [d.name for d in matrices.load(tmp_path / "matrix.yaml").devices] == ["cpu", "sim"]
    ci = matrices.load(REPO / ".ci" / "matrix-sim.yaml")
    assert [c.name for c in ci.cells] == ["torch-2.13.0-sim", "torch-2.14.1-sim"]
    assert all("setuptools" in r.extra_packages for r in ci.releases)  # sim is built with torch's cpp_extension
    run = (REPO / ".ci" / "run").read_text()
    assert "CONFORMANCE_MATRIX=.ci/matrix-sim.yaml nox -t torch-2.13.0 torch-2.14.1" in run


def test_the_composite_action_takes_device_sim_with_what_building_it_needs():
    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert "sim" in action["inputs"]["device"]["description"]
    target = next(step for step in action["runs"]["steps"] if step.get("id") == "target")
    assert 'if [ "$DEVICE" = sim ]' in target["run"] and "setuptools" in target["run"]


def old_sim_cell(torch: str) -> dict[str, Any]:
    """A sim cell of a torch too old to host sim, as the suite writes it: sim skipped with why, nothing tested."""
    from cpugpu_conformance import sim

    data = sim_cell(torch)
    why = sim.too_old(torch)
    assert why is not None
    data["devices"]["sim"] = {"status": "skipped", "reason": why}
    for promise in data["promises"].values():
        promise["devices"]["sim"] = {"verdict": "skipped", "reason": why, "passed": 0, "failed": 0, "skipped": 3}
    data["environment"]["sim_loaded"] = False
    return rf.validate(data)


def test_a_sim_cell_of_a_torch_too_old_for_sim_is_not_applicable_with_why():
    from cpugpu_conformance import sim

    assert sim.too_old("2.7.1") and sim.too_old("2.5.1+cpu") and sim.too_old("2.8.0") is None
    assert sim.too_old("nightly") is None  # no version number: nothing to say
    cell = results.CellResult(old_sim_cell("2.5.1"), "torch-2.5.1-sim.json")
    assert cell.outcome("10", "sim").kind == "not_applicable"
    answer = cell.answer()
    assert answer.kind == "not_applicable" and not answer.clean, answer
    assert "older than 2.8" in answer.lines[0] and answer.lines[0].startswith("sim:")
    assert cell.describe().startswith("NOT APPLICABLE (sim: torch 2.5.1 is older than 2.8")


def test_a_too_old_release_never_excuses_a_device_it_can_host():
    """The limit is the device's, not the release's: a cpu skipped on torch 2.5.1 is untested, and a sim cell
    of 2.13 whose sim was skipped is untested too (2.13 hosts sim: something else went wrong)."""
    data = rf.completed("2.5.1")
    data["devices"]["cpu"] = {"status": "skipped", "reason": "cpu was skipped"}
    assert results.CellResult(rf.validate(data), "a.json").answer().kind == "untested"
    late = old_sim_cell("2.5.1")
    late["environment"]["torch"] = "2.13.0"
    assert results.CellResult(rf.validate(late), "b.json").answer().kind == "untested"


def test_not_applicable_cells_count_neither_for_nor_against(tmp_path, capsys):
    folder = tmp_path / "results"
    folder.mkdir()
    rf.write(folder, "torch-2.5.1-sim.json", old_sim_cell("2.5.1"))
    assert main(["summary", str(folder)]) == 1  # nothing but not applicable: nothing proved
    assert "1 cells, 0 clean, 1 not applicable (neither a pass nor a failure), 0 not" in capsys.readouterr().out
    rf.write(folder, "torch-2.13.0-sim.json", sim_cell("2.13.0"))
    assert main(["summary", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "2 cells, 1 clean, 1 not applicable" in out and "NOT APPLICABLE" in out, out
    rf.write(folder, "torch-2.13.0-cpu.json", rf.completed("2.13.0", failed={("3", "cpu"): [rf.failure("t", "m", None)]}))
    assert main(["summary", str(folder)]) == 1
    # The same rule answers for matrix's exit code (cli/matrix.py): nothing at all is no pass either.
    from cpugpu_conformance.report import summary

    rows = summary.summarize(folder)
    assert not summary.passing(rows) and not summary.passing([])
    assert summary.passing([r for r in rows if r.device == "sim"])


def test_the_report_page_badge_and_compat_json_show_a_not_applicable_sim_cell(tmp_path):
    out = report(tmp_path, {"torch-2.5.1-cpu": rf.completed("2.5.1"), "torch-2.5.1-sim": old_sim_cell("2.5.1"),
                            "torch-2.13.0-sim": sim_cell("2.13.0")})
    compat = json.loads((out / "compat.json").read_text())
    sim_summary = {d["device"]: d for d in compat["summary"]["devices"]}["sim"]
    assert sim_summary["conforming"] == ["2.13.0"], sim_summary
    page = (out / "index.html").read_text()
    assert "not applicable" in page.lower() and "older than 2.8" in page
    assert "not applicable" in (out / "COMPAT.md").read_text().lower()
    badge = json.loads((out / "badge.json").read_text())
    assert "sim (simulated) 1/1 conform" in badge["message"], badge
