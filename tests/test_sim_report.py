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
