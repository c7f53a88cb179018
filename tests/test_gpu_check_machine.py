"""gpu_check on a machine whose GPU torch cannot use (issue 23, item 6): one line before anything
runs, naming the torch build, its CUDA and the driver's, and exit 6 (untested), never a CPU-only
pass; with --device cpu asked for, no such check. The decision is a function of facts, faked here;
how the facts are read (the kernel module's file, nvidia-smi, the device node) is tested with fakes
of each."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
import torch
from test_gpu_check import SCRIPT, _gpu_image, gpu_check

GpuFacts = gpu_check.GpuFacts

CPU_BUILD_BESIDE_A_GPU = GpuFacts(torch="2.11.0+cpu", nvidia="/proc/driver/nvidia/version", driver="550.54.15")
TOO_NEW_FOR_THE_DRIVER = GpuFacts(
    torch="2.11.0+cu130", torch_cuda="13.0", nvidia="/proc/driver/nvidia/version", driver="550.54.15",
    driver_cuda="12.4", torch_said="CUDA initialization: The NVIDIA driver on your system is too old\n(found version 12040).")


def _one_line(line: str | None) -> str:
    assert line is not None and "\n" not in line and line.startswith("gpu_check: untested: "), line
    return line


def test_a_torch_built_without_cuda_beside_an_nvidia_gpu_is_untested():
    line = _one_line(gpu_check.gpu_unusable("all", CPU_BUILD_BESIDE_A_GPU))
    assert "torch 2.11.0+cpu (built without CUDA)" in line and "driver 550.54.15" in line
    assert "this torch has no CUDA" in line and "/proc/driver/nvidia/version" in line
    assert gpu_check.gpu_unusable("cuda", CPU_BUILD_BESIDE_A_GPU) == line


def test_a_torch_built_for_a_newer_cuda_than_the_driver_is_untested():
    line = _one_line(gpu_check.gpu_unusable("all", TOO_NEW_FOR_THE_DRIVER))
    assert "torch 2.11.0+cu130 (built for CUDA 13.0)" in line and "driver 550.54.15, CUDA 12.4" in line
    assert "its CUDA 13.0 is newer than the driver's 12.4" in line
    assert "torch says: CUDA initialization: The NVIDIA driver on your system is too old (found version 12040)." in line


def test_a_gpu_torch_does_not_see_with_no_reason_known_is_untested_and_says_what_torch_said():
    facts = GpuFacts(torch="2.11.0+cu128", torch_cuda="12.8", nvidia="/dev/nvidia0")
    line = _one_line(gpu_check.gpu_unusable("all", facts))
    assert "driver version unknown" in line and "torch.cuda.is_available() is False" in line
    assert "(/dev/nvidia0; driver version unknown)" in line


@pytest.mark.parametrize(("device", "facts"), [
    ("cpu", CPU_BUILD_BESIDE_A_GPU),  # asked for the CPU alone: nothing of the GPU's matters
    ("cpu", TOO_NEW_FOR_THE_DRIVER),
    ("all", GpuFacts(torch="2.13.0+cpu")),  # no NVIDIA GPU here: the suite says cuda is missing, exit 6 there
    ("all", GpuFacts(torch="2.11.0+cu128", torch_cuda="12.8", cuda_available=True, nvidia="/proc/driver/nvidia/version",
                     driver="570.1", driver_cuda="12.8")),
    # torch sees the GPU although nvidia-smi's header says an older CUDA: a forward-compatibility libcuda
    ("cuda", GpuFacts(torch="2.11.0+cu130", torch_cuda="13.0", cuda_available=True, nvidia="nvidia-smi is here",
                      driver_cuda="12.4")),
], ids=["cpu-asked", "cpu-asked-too-new", "no-gpu", "usable", "usable-forward-compat"])
def test_no_refusal_where_the_gpu_is_usable_absent_or_not_asked_for(device, facts):
    assert gpu_check.gpu_unusable(device, facts) is None


# --- reading the machine's facts

PROPRIETARY = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
               "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
OPEN_MODULE = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16)\n"

FAKE_SMI = """#!/bin/sh
if [ "$1" = "--query-gpu=driver_version" ]; then echo "{driver}"; exit {code}; fi
echo "| NVIDIA-SMI {driver}   Driver Version: {driver}   CUDA Version: 12.4     |"
exit {code}
"""


def _fake_smi(tmp_path, driver="550.54.15", code=0):
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(driver=driver, code=code))
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return smi


@pytest.mark.parametrize(("text", "driver"), [(PROPRIETARY, "535.104.05"), (OPEN_MODULE, "570.86.15"),
                                              ("NVRM version: something new\n", None)])
def test_the_kernel_modules_file_says_there_is_a_gpu_and_its_driver(tmp_path, text, driver):
    version = tmp_path / "version"
    version.write_text(text)
    found = gpu_check.nvidia_on_this_machine(version, tmp_path / "no-dev", smi="")
    assert found == {"nvidia": str(version), "driver": driver, "driver_cuda": None}


def test_nvidia_smi_says_the_driver_and_its_cuda(tmp_path):
    smi = _fake_smi(tmp_path)
    found = gpu_check.nvidia_on_this_machine(tmp_path / "none", tmp_path / "no-dev", smi=str(smi))
    assert found == {"nvidia": f"{smi} is here", "driver": "550.54.15", "driver_cuda": "12.4"}
    known = gpu_check.nvidia_on_this_machine(tmp_path / "none", tmp_path / "no-dev", smi=str(smi), driver_cuda="12.8")
    assert known["driver_cuda"] == "12.8"  # libcuda's own answer, when the probe had it, comes first


def test_a_failing_nvidia_smi_still_says_there_is_a_gpu(tmp_path):
    smi = _fake_smi(tmp_path, code=9)
    found = gpu_check.nvidia_on_this_machine(tmp_path / "none", tmp_path / "no-dev", smi=str(smi))
    assert found == {"nvidia": f"{smi} is here", "driver": None, "driver_cuda": None}


def test_the_device_node_alone_says_there_is_a_gpu(tmp_path):
    node = tmp_path / "nvidia0"
    node.write_text("")
    assert gpu_check.nvidia_on_this_machine(tmp_path / "none", node, smi="")["nvidia"] == str(node)
    assert gpu_check.nvidia_on_this_machine(tmp_path / "none", tmp_path / "no-dev", smi="") == {
        "nvidia": None, "driver": None, "driver_cuda": None}


def test_the_machine_is_looked_at_only_where_it_decides_something(monkeypatch):
    asked = []
    monkeypatch.setattr("gpu_checking.machine.nvidia_on_this_machine", lambda **kw: asked.append(kw) or {
        "nvidia": "x", "driver": "1", "driver_cuda": kw["driver_cuda"]})
    unusable = {"torch": "2.11.0+cpu", "torch_cuda": None, "cuda_available": False, "torch_said": "", "driver_cuda": "12.4"}
    monkeypatch.setattr("gpu_checking.machine.probe_torch", lambda python=None: dict(unusable))
    assert gpu_check.gather_facts("cpu").nvidia is None and not asked
    facts = gpu_check.gather_facts("all")
    assert asked == [{"driver_cuda": "12.4"}] and facts.nvidia == "x" and facts.driver_cuda == "12.4"
    monkeypatch.setattr("gpu_checking.machine.probe_torch", lambda python=None: {**unusable, "cuda_available": True})
    assert gpu_check.gather_facts("all").nvidia is None and len(asked) == 1


def test_the_probe_reads_the_torch_the_children_import():
    facts = gpu_check.probe_torch()
    assert facts["torch"] == torch.__version__ and facts["torch_cuda"] == torch.version.cuda
    assert facts["cuda_available"] == torch.cuda.is_available()


# --- the whole command, on this machine, with an nvidia-smi that says there is a GPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch can use this machine's GPU: nothing to refuse")
def test_beside_a_gpu_this_torch_cannot_use_the_check_is_untested_before_anything_runs(tmp_path):
    env = _gpu_image(tmp_path)
    env["PATH"] = f"{_fake_smi(tmp_path).parent}{os.pathsep}{env['PATH']}"
    out = tmp_path / "out"
    out.mkdir()
    stale = out / f"installed-torch-{torch.__version__.split('+')[0]}-all.json"
    stale.write_text(json.dumps({"schema": "cpugpu-conformance/cell-result", "status": "completed",
                                 "said": "an earlier pass"}))
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out), "--jobs", "1"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 6, proc.stdout + proc.stderr
    first, last = proc.stderr.strip().splitlines()
    assert first.startswith("gpu_check: untested: this machine has an NVIDIA GPU") and "is here; driver " in first
    assert f"torch {torch.__version__} (built without CUDA)" in first or f"(built for CUDA {torch.version.cuda})" in first
    if not os.path.exists("/proc/driver/nvidia/version"):
        assert "driver 550.54.15, CUDA 12.4" in first
    assert last.startswith("gpu_check: exit 6 (untested: no step ran")
    assert (out / "summary.txt").read_text() == f"{first}\n{last}\n"
    assert sorted(p.name for p in out.iterdir()) == ["summary.txt"]  # no suite, no proofs; the old pass is gone


# --- no NVIDIA GPU at all (issue 28, item 6): one line up front, not 95 s of skipped cuda tests

NO_GPU = GpuFacts(torch="2.13.0+cpu")


@pytest.mark.parametrize(("device", "proofs_for", "asked"), [
    ("all", "cuda", "the suite on --device all and the proofs for cuda"),  # the defaults
    ("cuda", "cpu", "the suite on --device cuda would"),
    ("cpu", "cuda", "so the proofs for cuda would"),
])
def test_no_nvidia_gpu_is_one_line_when_anything_asked_is_about_cuda(device, proofs_for, asked):
    line = gpu_check.no_gpu(device, proofs_for, NO_GPU)
    assert line is not None and "\n" not in line and line.startswith("gpu_check: untested: no NVIDIA GPU on this machine")
    assert asked in line and "torch 2.13.0+cpu sees no CUDA device" in line
    assert "--device cpu --proofs-for cpu" in line and "--cpu-half" in line


@pytest.mark.parametrize(("device", "proofs_for", "facts", "cpu_half"), [
    ("cpu", "cpu", NO_GPU, False),  # the CPU alone, asked for
    ("all", "cuda", NO_GPU, True),  # --cpu-half: run anyway
    ("all", "cuda", GpuFacts(torch="2.11.0+cu128", torch_cuda="12.8", cuda_available=True), False),
    ("all", "cuda", CPU_BUILD_BESIDE_A_GPU, False),  # a GPU torch cannot use: gpu_unusable's line, not this one
], ids=["cpu-asked", "cpu-half", "usable-gpu", "unusable-gpu"])
def test_no_such_line_where_only_the_cpu_is_asked_about_or_there_is_a_gpu(device, proofs_for, facts, cpu_half):
    assert gpu_check.no_gpu(device, proofs_for, facts, cpu_half) is None


def _no_nvidia_here() -> bool:
    return not torch.cuda.is_available() and gpu_check.nvidia_on_this_machine()["nvidia"] is None


@pytest.mark.skipif(not _no_nvidia_here(), reason="this machine has an NVIDIA GPU: nothing to refuse")
def test_on_a_machine_with_no_nvidia_gpu_the_default_check_says_so_up_front_and_runs_nothing(tmp_path):
    import time

    out = tmp_path / "out"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out), "--jobs", "1"], cwd=tmp_path, env=_gpu_image(tmp_path),
                          capture_output=True, text=True, timeout=600)
    took = time.monotonic() - started
    assert proc.returncode == 6, proc.stdout + proc.stderr
    first, last = proc.stderr.strip().splitlines()
    assert first.startswith("gpu_check: untested: no NVIDIA GPU on this machine (torch ")
    assert last == "gpu_check: exit 6 (untested: no step ran, this machine has no NVIDIA GPU)"
    assert proc.stdout == "" and sorted(p.name for p in out.iterdir()) == ["summary.txt"]  # no suite, no proofs ran
    assert took < 60, f"{took:.0f} s: the refusal comes before the suite and the proofs"


def test_a_file_of_someone_elses_at_the_result_files_name_is_refused_untouched(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    notes = out / f"installed-torch-{torch.__version__.split('+')[0]}-cpu.json"
    notes.write_text('{"my": "notes"}\n')
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out), "--device", "cpu", "--proofs-for", "cpu", "--jobs",
                           "1"], cwd=tmp_path, env=_gpu_image(tmp_path), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f'gpu_check: {notes}: holds no cell result (JSON with no "schema" key): it is left as it is, since a result '
        "is written only at a new path or over a result file; remove it or choose another path"]
    assert notes.read_text() == '{"my": "notes"}\n'
