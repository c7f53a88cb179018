"""The machine: can the children's torch use its GPU? The torch's facts (a probe run with the
children's python and environment), the machine's (without torch), and the one line that refuses
a check that could not be a pass."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpu_checking.outcomes import Refused
from gpu_checking.steps import child_env
from gpu_checking.stop_signals import SIGNALS

PROBE_TIMEOUT_S = 300  # importing torch from a slow disk


@dataclass(frozen=True)
class GpuFacts:
    """What decides whether the GPU can be used, from the torch the children import and the machine."""

    torch: str  # torch.__version__, e.g. 2.11.0+cu130
    torch_cuda: str | None = None  # torch.version.cuda: the CUDA it was built for; None: without CUDA
    cuda_available: bool = False  # torch.cuda.is_available()
    torch_said: str = ""  # what torch warned while it looked for a GPU
    nvidia: str | None = None  # what shows the machine has an NVIDIA GPU; None: nothing does
    driver: str | None = None  # the driver's version
    driver_cuda: str | None = None  # the newest CUDA the driver supports

    @property
    def release(self) -> str:
        """Without the local part: 2.11.0+cu130 -> 2.11.0."""
        return self.torch.split("+")[0]


def gpu_unusable(device: str, facts: GpuFacts) -> str | None:
    """One line when this machine has an NVIDIA GPU that the torch cannot use, so the check would
    be a CPU-only pass; None when it can, when there is none, or when only the CPU is asked for."""
    if device == "cpu" or facts.cuda_available or not facts.nvidia:
        return None
    built = f"built for CUDA {facts.torch_cuda}" if facts.torch_cuda else "built without CUDA"
    driver = f"driver {facts.driver or 'version unknown'}" + (f", CUDA {facts.driver_cuda}" if facts.driver_cuda else "")
    if not facts.torch_cuda:
        why = "this torch has no CUDA"
    elif facts.driver_cuda and _version(facts.torch_cuda) > _version(facts.driver_cuda):
        why = f"its CUDA {facts.torch_cuda} is newer than the driver's {facts.driver_cuda}"
    else:
        why = "torch.cuda.is_available() is False"
    said = f"; torch says: {facts.torch_said}" if facts.torch_said else ""
    line = (f"gpu_check: untested: this machine has an NVIDIA GPU ({facts.nvidia}; {driver}) that torch "
            f"{facts.torch} ({built}) cannot use: {why}{said}; install a torch built for this driver, or ask for "
            "--device cpu alone")
    return " ".join(line.split())[:800]  # one line, whatever torch said


def no_gpu(device: str, proofs_for: str, facts: GpuFacts, cpu_half: bool = False) -> str | None:
    """One line when the check is asked about CUDA (the suite on ``all`` or ``cuda``, the proofs for
    cuda: the defaults) on a machine with no NVIDIA GPU at all: the suite's cuda half and every cuda
    proof would be skipped after minutes, and the answer could not be a pass. None when there is a GPU
    (usable or not: gpu_unusable judges that), when only the CPU is asked about, or with ``cpu_half``
    (--cpu-half: run anyway, knowing the cuda half goes untested)."""
    asks_cuda = device in ("all", "cuda") or proofs_for == "cuda"
    if cpu_half or not asks_cuda or facts.cuda_available or facts.nvidia:
        return None
    asked = [part for part, wanted in ((f"the suite on --device {device}", device in ("all", "cuda")),
                                       (f"the proofs for {proofs_for}", proofs_for == "cuda")) if wanted]
    return (f"gpu_check: untested: no NVIDIA GPU on this machine (torch {facts.torch} sees no CUDA device; no "
            f"/proc/driver/nvidia/version, nvidia-smi or /dev/nvidia0), so {' and '.join(asked)} would check nothing "
            "of a GPU: nothing was run; run it on the GPU machine, or here check the CPU alone with --device cpu "
            "--proofs-for cpu, or add --cpu-half to run this check anyway (its cuda half untested, never a pass)")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def run_briefly(command: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[int, str, str] | None:
    """A short command's exit code and output; None when it cannot start or runs past ``timeout``."""
    with SIGNALS.deferred():
        try:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, errors="replace", env=env)
        except OSError:
            return None
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as exc:
        proc.kill()
        proc.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            return None
        raise
    return proc.returncode, out, err


# Run with the children's python and environment: the torch they import, what it says of the
# GPU, and the newest CUDA of the driver it would talk to (libcuda's own answer, which a
# forward-compatibility libcuda raises; nvidia-smi's header would not).
PROBE = r"""
import ctypes, json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
    available = bool(torch.cuda.is_available())
said = [" ".join(str(w.message).split()) for w in caught]
said = [text for text in said if any(word in text for word in ("CUDA", "NVIDIA", "driver", "GPU"))]
driver_cuda = None
try:
    version = ctypes.c_int()
    if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value:
        driver_cuda = "%d.%d" % (version.value // 1000, version.value % 1000 // 10)
except (OSError, AttributeError):
    pass
facts = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "cuda_available": available,
         "torch_said": "; ".join(said)[:300], "driver_cuda": driver_cuda}
print("gpu_check facts: " + json.dumps(facts))
"""
FACTS_PREFIX = "gpu_check facts: "


def probe_torch(python: str = sys.executable) -> dict:
    """What the children's torch is and says of the GPU; Refused when it cannot be imported."""
    ran = run_briefly([python, "-c", PROBE], PROBE_TIMEOUT_S, env=child_env())
    if ran is None:
        raise Refused(f"gpu_check: {python} could not import torch within {PROBE_TIMEOUT_S} s")
    code, out, err = ran
    lines = [line for line in out.splitlines() if line.startswith(FACTS_PREFIX)]
    if code != 0 or not lines:
        last = (err.strip().splitlines() or ["no output"])[-1]
        raise Refused(f"gpu_check: {python} cannot import torch: {last}")
    return json.loads(lines[-1][len(FACTS_PREFIX):])


DRIVER_IN_PROC = re.compile(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)?)\s")


def nvidia_on_this_machine(proc_version: Path = Path("/proc/driver/nvidia/version"),
                           device: Path = Path("/dev/nvidia0"), smi: str | None = None,
                           driver_cuda: str | None = None) -> dict:
    """Whether the machine has an NVIDIA GPU and which driver, without torch: the kernel module's
    version file, nvidia-smi (``smi``, default: PATH's), the device node. ``driver_cuda``: the
    driver's CUDA when already known (nvidia-smi's header is asked otherwise)."""
    smi = smi if smi is not None else shutil.which("nvidia-smi")
    nvidia = driver = None
    with contextlib.suppress(OSError, UnicodeDecodeError):
        found = DRIVER_IN_PROC.search(proc_version.read_text())
        nvidia, driver = str(proc_version), found.group(1) if found else None
    if smi:
        nvidia = nvidia or f"{smi} is here"
        if driver is None:
            ran = run_briefly([smi, "--query-gpu=driver_version", "--format=csv,noheader"], 30)
            driver = ran[1].split()[0] if ran and ran[0] == 0 and ran[1].split() else None
        if driver_cuda is None:
            ran = run_briefly([smi], 30)
            found = re.search(r"CUDA Version:\s*(\d+\.\d+)", ran[1]) if ran and ran[0] == 0 else None
            driver_cuda = found.group(1) if found else None
    if nvidia is None and device.exists():
        nvidia = str(device)
    return {"nvidia": nvidia, "driver": driver, "driver_cuda": driver_cuda}


def gather_facts(device: str, python: str = sys.executable, gpu_asked: bool | None = None) -> GpuFacts:
    """The torch's facts; the machine's too where they decide something (a GPU asked for, torch sees
    none). ``gpu_asked``: whether anything of the check is about cuda (default: the suite's device is
    not cpu)."""
    found = probe_torch(python)
    driver_cuda = found.pop("driver_cuda", None)
    facts = GpuFacts(**found, driver_cuda=driver_cuda)
    if not (device != "cpu" if gpu_asked is None else gpu_asked) or facts.cuda_available:
        return facts
    return GpuFacts(**found, **nvidia_on_this_machine(driver_cuda=driver_cuda))
