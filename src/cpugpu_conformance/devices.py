"""The devices the contract knows, in one registry.

For each device: whether this machine can test it (or why not), how to wait for its
queued work, whether pinning host memory applies to it, the per-thread state a buffer
must leave alone on it, and the creation contexts only it has. As in PyTorch's
device-generic tests (common_device_type.py), the suite takes the device as an argument
and asks this registry; it never tests for a device's name.

torch is imported only when a device is probed: results and the tools read the names
without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


def _always_here() -> str | None:
    return None


@dataclass(frozen=True)
class Device:
    name: str  # torch's device type: the --device value and the key in every result file
    # What a reproducer on this device needs, for its header ("" when any machine will do).
    needs: str = ""
    # pin_memory=True asks for page-locked host memory for copies to this device (promise 10);
    # where it does not apply, only pin_memory=False is drawn (promise 11 records the rest).
    pinning: bool = False
    # A statement that waits until queued work (non-blocking copies) has landed; "" when none is queued.
    sync: str = ""
    # A statement queueing a long job on the current stream, and an expression that is True once
    # every queued job is done: a copy that returns while the job still runs did not block (promise 10).
    stall: str = ""
    idle: str = ""
    # (label, expression): per-thread state of this device a buffer must leave as it found it (promise 12).
    caller_state: tuple[tuple[str, str], ...] = ()
    # (name, template binding `buf` from the constructor call `{make}`): creation contexts only this device has.
    contexts: tuple[tuple[str, str], ...] = ()
    # Why this machine cannot test the device; None when it can.
    missing: Callable[[], str | None] = _always_here

    def missing_reason(self) -> str | None:
        return self.missing()

    @property
    def available(self) -> bool:
        return self.missing() is None


def _cuda_missing() -> str | None:
    import torch

    if torch.cuda.is_available():
        return None
    build = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, {build})"


CPU = Device("cpu")

CUDA = Device(
    "cuda",
    needs="a CUDA device",
    pinning=True,
    sync="torch.cuda.synchronize()",
    stall="torch.cuda._sleep(1 << 30)",  # about half a second of GPU time
    idle="torch.cuda.current_stream().query()",
    caller_state=(
        ("current CUDA device", "torch.cuda.current_device()"),
        ("current CUDA stream", "torch.cuda.current_stream()"),
    ),
    contexts=(
        # A default CUDA device, the last device made current, a side stream.
        ("default_device_cuda", 'with torch.device("cuda"):\n    buf = {make}\n'),
        ("cuda_device_last", "with torch.cuda.device(torch.cuda.device_count() - 1):\n    buf = {make}\n"),
        ("cuda_side_stream", "with torch.cuda.stream(torch.cuda.Stream()):\n    buf = {make}\n"),
    ),
    missing=_cuda_missing,
)

# In the order every report lists them.
REGISTRY: dict[str, Device] = {d.name: d for d in (CPU, CUDA)}
NAMES: tuple[str, ...] = tuple(REGISTRY)


class UnknownDevice(ValueError):
    """A device name the contract does not know; the message is one line naming it."""


def get(name: str) -> Device:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownDevice(f"unknown device {name!r}; expected one of {', '.join(NAMES)}") from None


def unavailable() -> dict[str, str]:
    """Each device this machine cannot test, with the reason."""
    return {d.name: reason for d in REGISTRY.values() if (reason := d.missing_reason()) is not None}


def accelerator_present() -> bool:
    """A device that pinned memory serves is usable here (promise 11 records what pinning did)."""
    return any(d.pinning and d.available for d in REGISTRY.values())


def per_device(source: Callable[[Device], str], indent: str = "    ") -> str:
    """``if device.type == "<name>":`` blocks, one per device that has source: standalone
    reproducer text, generated from the registry so the suite itself never names a device."""
    blocks = []
    for d in REGISTRY.values():
        body = source(d).strip("\n")
        if body:
            lines = "".join(f"{indent}    {line}\n" for line in body.splitlines())
            blocks.append(f'{indent}if device.type == "{d.name}":\n{lines}')
    return "".join(blocks) or f"{indent}pass\n"


def environment() -> dict[str, Any]:
    """The device fields of a result's environment (schema keys: torch_cuda, cuda_available, gpu_name)."""
    import torch

    cuda = CUDA.available
    return {
        "torch_cuda": torch.version.cuda,
        "cuda_available": cuda,
        "gpu_name": torch.cuda.get_device_name(0) if cuda else None,
    }
