"""The sim backend (src/cpugpu_conformance/sim): built, loaded, and doing what a CUDA device does.

Loading sim makes it torch's accelerator for the whole process, so nothing here loads it in the
test process: tests/sim_probe.py runs every behaviour check in one process of its own, and the
tests that expect a process to fault or refuse run their own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import sim_probe
from suite_runner import REPO, TESTS

from cpugpu_conformance import sim
from cpugpu_conformance.sim import build as sim_build

pytestmark = pytest.mark.devices("sim")


def run_python(source: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", source], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def probe() -> dict[str, str]:
    """Every check of sim_probe.py, run once in a process of its own: name -> "ok" or the traceback."""
    proc = subprocess.run([sys.executable, str(TESTS / "sim_probe.py")], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("check", sorted(sim_probe.CHECKS))
def test_sim_behaves_as_an_accelerator(probe, check):
    assert probe[check] == "ok", probe[check]


TOUCH = """
import ctypes, torch
from cpugpu_conformance import sim
from cpugpu_conformance.sim import build as sim_build
sim.load()
x = torch.zeros(1024, device="sim:1")
x.copy_(torch.ones(1024))  # a copy opens the memory, and closes it again
torch.accelerator.synchronize(1)
print("touching", flush=True)
{touch}
print("the host touched device memory")
"""


@pytest.mark.parametrize("touch", ["ctypes.string_at(x.data_ptr() + 8, 4)", "ctypes.memset(x.data_ptr(), 7, 4)"],
                         ids=["read", "write"])
def test_a_host_access_to_device_memory_faults(touch):
    proc = run_python(TOUCH.format(touch=touch))
    assert proc.returncode == -signal.SIGSEGV, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "touching" in proc.stdout and "the host touched" not in proc.stdout


def test_importing_the_package_loads_nothing():
    proc = run_python("import torch, cpugpu_conformance, cpugpu_conformance.sim, cpugpu_conformance.devices\n"
                      "from cpugpu_conformance.testing import plugin\n"
                      "assert torch._C._get_privateuse1_backend_name() == 'privateuseone'\n"
                      "assert not cpugpu_conformance.sim.loaded() and not hasattr(torch, 'sim')\n"
                      "assert not torch.zeros(2).is_pinned()\n"
                      "print('inert')")
    assert proc.returncode == 0 and proc.stdout.strip() == "inert", proc.stderr[-2000:]


def test_loading_twice_is_loading_once():
    proc = run_python("import torch\nfrom cpugpu_conformance import sim\n"
                      "assert sim.load() is sim.load() is torch.sim and sim.loaded()\nprint(torch.sim.device_count())")
    assert proc.returncode == 0 and proc.stdout.strip() == "2", proc.stderr[-2000:]


def test_another_privateuse1_backend_is_refused_in_one_line():
    proc = run_python("import torch\nfrom cpugpu_conformance import sim\n"
                      "torch.utils.rename_privateuse1_backend('npu')\n"
                      "try:\n    sim.load()\nexcept sim.SimUnavailable as exc:\n    print(exc)\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["sim: another PrivateUse1 backend ('npu') is already registered in this "
                                        "process, and torch hosts one at a time"]


def test_a_machine_without_a_compiler_is_told_in_one_line(tmp_path):
    """Nothing is built, nothing is registered: one line, before anything runs."""
    proc = run_python("import torch\nfrom cpugpu_conformance import sim\n"
                      "try:\n    sim.load()\nexcept sim.SimUnavailable as exc:\n    print(exc)\n"
                      "print(torch._C._get_privateuse1_backend_name())",
                      env={"CXX": "no-such-compiler", sim_build.CACHE_ENV: str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == [
        "sim: no C++ compiler ('no-such-compiler' is not on PATH; set CXX or install g++): the simulated device is "
        "built here", "privateuseone"]
    assert list(tmp_path.iterdir()) == []


def test_a_torch_too_old_is_told_in_one_line(monkeypatch):
    import torch

    monkeypatch.setattr(torch, "__version__", "2.5.1")
    assert sim.refusal() == ("sim: torch 2.5.1 is older than 2.8, whose PrivateUse1 API and torch.accelerator the "
                             "simulated device needs")


def test_the_build_is_cached_per_torch_version_abi_and_python(monkeypatch, tmp_path):
    import torch

    monkeypatch.setenv(sim_build.CACHE_ENV, str(tmp_path))
    key = sim_build.build_key()
    assert sim_build.build_dir() == tmp_path / key
    assert key.startswith(f"torch-{torch.__version__}-cxx11abi") and key.endswith(f"-cp{sys.version_info[0]}{sys.version_info[1]}")
    monkeypatch.delenv(sim_build.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert sim_build.build_dir() == tmp_path / "xdg" / "cpugpu-conformance" / "sim" / key
    assert REPO not in sim_build.build_dir().parents
