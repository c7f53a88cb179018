"""A machine is not a torch release: observations are compared only between cells observed on
the same kind of machine (no accelerator, or which GPU, as the result's environment says).

The accelerator, pin_memory and CUDA probes answer differently on a GPU machine whatever the
torch, so reading a GPU cell against a CPU-only one would show the machine as a change of
torch: in the gate (--strict would fail), in bisect's changes, and in the report's history.
Verdicts are still compared across kinds.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import result_factory as rf

from cpugpu_conformance import promises, results
from cpugpu_conformance.cli.dispatch import main
from cpugpu_conformance.results import CellResult
from cpugpu_conformance.runner import bisection as bisect

# What the probes say on a GPU machine, where the CPU-only machine's pin_memory probe raised.
GPU_PROBES = {"pin_memory.no_accelerator": {"value": True}, "accelerator.cuda_available": {"value": True}}
CPU_PROBES = {"accelerator.cuda_available": {"value": False}}


def observed(torch: str, *, gpu: str | None, probes: dict[str, Any] | None = None, **kwargs) -> dict[str, Any]:
    """A completed cell of ``torch`` on a machine with GPU ``gpu`` (None: no accelerator)."""
    obs = copy.deepcopy(rf.BASE_OBSERVATIONS)
    obs.update(GPU_PROBES if gpu else CPU_PROBES)
    obs.update(probes or {})
    result = rf.completed(torch, observations=obs, **kwargs)
    result["environment"].update(cuda_available=gpu is not None, gpu_name=gpu)
    return rf.validate(result)


def cell(result: dict[str, Any]) -> CellResult:
    return CellResult(result)


# --- the kind of a machine ---------------------------------------------------------------


@pytest.mark.parametrize(("environment", "kind"), [
    ({"cuda_available": False, "gpu_name": None}, "no accelerator"),
    ({"cuda_available": True, "gpu_name": "NVIDIA H200"}, "CUDA (NVIDIA H200)"),
    ({"cuda_available": True, "gpu_name": "NVIDIA\nH200\x1b[31m"}, "CUDA (NVIDIA H200)"),
    ({"cuda_available": True}, "CUDA (GPU not named)"),
    ({}, "an unknown machine"),
    ({"cuda_available": "yes"}, "an unknown machine"),
])
def test_the_kind_of_machine_is_read_from_the_environment(environment, kind):
    assert results.machine_kind(environment) == kind


# --- results.diff: the one comparison, for gate and bisect --------------------------------


def test_observations_of_two_kinds_of_machine_are_not_compared():
    cpu, gpu = cell(observed("2.13.0", gpu=None)), cell(observed("2.13.0", gpu="NVIDIA H200"))
    cmp = results.diff(cpu, gpu, devices=["cpu"])
    assert cmp.comparable and cmp.observation_changes == [] and cmp.change_lines() == []
    assert cmp.observations_not_compared == (
        "observed torch behaviour not compared: the cells ran on different kinds of machine "
        "(baseline: no accelerator; candidate: CUDA (NVIDIA H200)), and a machine is not a torch release")


def test_two_gpus_are_two_kinds_of_machine():
    a100, h200 = cell(observed("2.13.0", gpu="NVIDIA A100")), cell(observed("2.14.1", gpu="NVIDIA H200"))
    cmp = results.diff(a100, h200, devices=["cpu"])
    assert cmp.observation_changes == [] and "CUDA (NVIDIA A100)" in cmp.observations_not_compared


def test_observations_on_the_same_kind_of_machine_are_compared():
    changed = {"inference_tensor.is_inference": {"value": False}}
    for gpu in (None, "NVIDIA H200"):
        cmp = results.diff(cell(observed("2.13.0", gpu=gpu)), cell(observed("2.14.1", gpu=gpu, probes=changed)))
        assert cmp.observations_not_compared is None
        assert cmp.observation_changes == [("inference_tensor.is_inference", "true", "false")]


def test_verdicts_are_still_compared_across_kinds():
    fails = {("3", "cpu"): [rf.failure("test_mutable", "AssertionError: refused", None)]}
    cmp = results.diff(cell(observed("2.13.0", gpu=None)), cell(observed("2.14.1", gpu="NVIDIA H200", failed=fails)),
                       devices=["cpu"])
    assert [c.promise for c in cmp.regressions] == ["3"]
    assert cmp.change_lines() == [cmp.regressions[0].line()]


def test_bisect_counts_no_change_across_kinds_of_machine():
    same_torch = (cell(observed("2.13.0", gpu=None)), cell(observed("2.13.0", gpu="NVIDIA H200")))
    assert bisect.changes(*same_torch) == []
    changed = {"inference_tensor.is_inference": {"value": False}}
    on_one_kind = (cell(observed("2.13.0", gpu=None)), cell(observed("2.14.1", gpu=None, probes=changed)))
    assert bisect.changes(*on_one_kind) == ["observation inference_tensor.is_inference: true -> false"]


# --- gate ------------------------------------------------------------------------------------


def gate(tmp_path: Path, baseline: dict, candidate: dict, *extra: str) -> int:
    b, c = rf.write(tmp_path, "baseline.json", baseline), rf.write(tmp_path, "candidate.json", candidate)
    return main(["gate", "--baseline", str(b), "--candidate", str(c), "--device", "cpu", *extra])


@pytest.mark.parametrize("strict", [False, True])
def test_the_gate_says_in_one_line_that_it_did_not_compare_observations_across_kinds(tmp_path, capsys, strict):
    cpu, gpu = observed("2.13.0", gpu=None), observed("2.13.0", gpu="NVIDIA H200")
    assert gate(tmp_path, cpu, gpu, *(["--strict"] if strict else [])) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "observed torch behaviour" in line]
    assert lines == ["WARNING: observed torch behaviour not compared: the cells ran on different kinds of machine "
                     "(baseline: no accelerator; candidate: CUDA (NVIDIA H200)), and a machine is not a torch release"]
    assert "CHANGED" not in out and out.rstrip().splitlines()[-1].startswith("PASS: all ")


def test_the_gate_still_fails_strict_on_a_change_on_the_same_kind_of_machine(tmp_path, capsys):
    changed = {"pin_memory.no_accelerator": {"value": False}}
    baseline, candidate = observed("2.13.0", gpu="NVIDIA H200"), observed("2.14.1", gpu="NVIDIA H200", probes=changed)
    assert gate(tmp_path, baseline, candidate, "--strict") == 1
    out = capsys.readouterr().out
    assert "CHANGED: observed torch behaviour pin_memory.no_accelerator: true -> false" in out
    assert "not compared" not in out


def test_the_gate_still_finds_a_regression_across_kinds(tmp_path, capsys):
    fails = {("2", "cpu"): [rf.failure("test_zeroed", "not zero", "import torch\n")]}
    assert gate(tmp_path, observed("2.13.0", gpu=None), observed("2.13.0", gpu="NVIDIA H200", failed=fails)) == 1
    assert "REGRESSION 1: promise 2 (Zeroed) on cpu: passed -> failed" in capsys.readouterr().out


# --- report: one observation history per kind of machine --------------------------------------


def report(tmp_path: Path, cells: dict[str, dict[str, Any]]) -> dict[str, str]:
    results_dir = tmp_path / "results"
    results_dir.mkdir()
    for name, result in cells.items():
        rf.write(results_dir, name, result)
    assert main(["report", str(results_dir), "--out", str(tmp_path / "out")]) == 0
    return {name: (tmp_path / "out" / name).read_text(encoding="utf-8") for name in ("compat.json", "COMPAT.md", "index.html")}


def interleaved() -> dict[str, dict[str, Any]]:
    """CPU-only and GPU cells interleaved in version order; torch changes is_inference at 2.14.1 on both."""
    changed = {"inference_tensor.is_inference": {"value": False}}
    return {
        "cpu-2.13.0.json": observed("2.13.0", gpu=None, cell="cpu-2.13.0"),
        "gpu-2.13.0.json": observed("2.13.0", gpu="NVIDIA H200", cell="gpu-2.13.0"),
        "cpu-2.14.1.json": observed("2.14.1", gpu=None, cell="cpu-2.14.1", probes=changed),
        "gpu-2.14.1.json": observed("2.14.1", gpu="NVIDIA H200", cell="gpu-2.14.1", probes=changed),
    }


def ref(name: str) -> dict[str, str]:
    return {"release": name.split("-", 1)[1], "cell": name, "source": f"{name}.json"}


def test_compat_json_keeps_one_observation_history_per_kind_of_machine(tmp_path):
    changes = json.loads(report(tmp_path, interleaved())["compat.json"])["changes"]["observations"]
    # the torch change, once per kind; never the machine (pin_memory, accelerator) between kinds
    assert changes == [
        {"at": ref("cpu-2.14.1"), "since": ref("cpu-2.13.0"), "machine": "no accelerator",
         "probe": "inference_tensor.is_inference", "before": "true", "after": "false"},
        {"at": ref("gpu-2.14.1"), "since": ref("gpu-2.13.0"), "machine": "CUDA (NVIDIA H200)",
         "probe": "inference_tensor.is_inference", "before": "true", "after": "false"},
    ]


def test_the_pages_show_one_history_per_kind_of_machine(tmp_path):
    files = report(tmp_path, interleaved())
    md = files["COMPAT.md"]
    assert "The cells ran on 2 kinds of machine, and a machine is not a torch release" in md
    cpu, gpu = md.index("#### Machine: no accelerator"), md.index("#### Machine: CUDA (NVIDIA H200)")
    assert cpu < gpu
    for section in (md[cpu:gpu], md[gpu:md.index("## Failures")]):
        rows = [line for line in section.splitlines() if line.startswith("| 2.")]
        assert len(rows) == 1 and "| inference_tensor.is_inference | true | false |" in rows[0]
    assert "pin_memory" not in md[cpu:md.index("<details>")] and "accelerator.cuda_available" not in md[cpu:md.index("<details>")]
    html = files["index.html"]
    assert 'id="observation-changes-table"' in html and 'id="observation-changes-table-2"' in html
    assert '<h4 id="observation-changes-machine-2">Machine: CUDA (NVIDIA H200)</h4>' in html


def test_the_probe_table_highlights_a_change_only_against_the_same_kind_of_machine(tmp_path):
    html = report(tmp_path, interleaved())["index.html"]
    table = html[html.index('<table id="observations-table"'):]
    table = table[:table.index("</table>")]
    accelerator = table[table.index("accelerator.<wbr>cuda_available"):]
    accelerator = accelerator[:accelerator.index("</tr>")]
    # differs between neighbouring columns (a GPU machine beside a CPU-only one), never a change
    assert "changed" not in accelerator and accelerator.count("<td>") == 4
    inference = table[table.index("inference_tensor.<wbr>is_inference"):]
    inference = inference[:inference.index("</tr>")]
    assert inference.count('class="changed"') == 2
    assert 'title="differs from 2.13.0"' in inference


def test_a_single_kind_of_machine_reads_as_before(tmp_path):
    files = report(tmp_path, {name: r for name, r in interleaved().items() if name.startswith("cpu-")})
    assert "kinds of machine" not in files["COMPAT.md"] and "#### Machine" not in files["COMPAT.md"]
    assert "Each release against the previous one that recorded observations. A table-valued" in files["COMPAT.md"]


# --- promise 11 is not applicable beside an accelerator: a machine change, never a torch change ---------


def beside_an_accelerator(torch: str, **kwargs) -> dict[str, Any]:
    """A GPU machine's cell as the suite writes it: promise 11 n/a on the CPU, with why."""
    result = observed(torch, gpu="NVIDIA H200", **kwargs)
    result["promises"]["11"]["devices"]["cpu"] = {"verdict": "not_applicable", "passed": 0, "failed": 0, "skipped": 0,
                                                  "reason": "not applicable: this machine has an accelerator (cuda)"}
    return rf.validate(result)


@pytest.mark.parametrize("strict", [False, True])
def test_promise_11_not_applicable_on_a_gpu_machine_is_no_gap_against_a_cpu_machine(tmp_path, capsys, strict):
    assert gate(tmp_path, observed("2.13.0", gpu=None), beside_an_accelerator("2.13.0"),
                *(["--strict"] if strict else [])) == 0
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if "promise 11" in line]
    assert "not compared" in line and promises.not_applicable("11", "cpu", ("cuda",)) in line
    assert line.endswith("(baseline: no accelerator; candidate: CUDA (NVIDIA H200))")
    assert "CHANGED" not in out and "nothing to compare" not in out.lower()


def test_promise_11_on_a_gpu_machine_is_no_verdict_change_in_the_report(tmp_path):
    pages = report(tmp_path, {"cpu-2.13.0.json": observed("2.13.0", gpu=None, cell="cpu-2.13.0"),
                              "gpu-2.13.0.json": beside_an_accelerator("2.13.0", cell="gpu-2.13.0")})
    changes = json.loads(pages["compat.json"])["changes"]["verdicts"]
    assert not [c for c in changes if "11" in c.get("promises", [])], changes
