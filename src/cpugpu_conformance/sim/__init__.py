"""sim: the project's simulated accelerator, a small C++ PrivateUse1 backend built on first use.

Two devices (``sim:0``, ``sim:1``) whose memory host code cannot touch except through a copy,
pinned host memory that ``is_pinned()`` reports, and streams that each run their work in order on
a worker thread, so that a non-blocking copy from pinned memory really returns before it lands.
It lets every machine run the device half of the contract through torch's device-generic API
(``torch.Stream``, ``torch.Event``, ``torch.accelerator``); what it proves, and what it does not,
is in docs/gpu.md.

Loading is explicit (``load()``, or the suite's ``--device sim``), never a side effect of importing
this package: once loaded, sim is torch's accelerator for the whole process (``pin_memory=True``
pins for it), and torch hosts one PrivateUse1 backend per process.

    from cpugpu_conformance import sim
    sim.load()
    x = torch.zeros(4, device="sim:1")
"""

from __future__ import annotations

import threading
from typing import Any

NAME = "sim"
DEVICE_COUNT = 2
# The oldest torch release that hosts sim and the device checks written over torch's device-generic
# API (measured: docs/gpu.md). 2.6 and 2.7 have the PrivateUse1 hooks with a pinned allocator, but
# 2.6's torch.Stream is no context manager (`with stream:`), and neither has
# torch.accelerator.device_index, which the registry's device checks and sim.sleep use. A cell of an
# older release is not applicable on sim, with why (too_old), never untested.
MIN_TORCH = (2, 8)
# A job of this many cycles (sim's clock is 1 GHz: about 34 ms) is what the suite's stall queues,
# as torch.cuda._sleep(1 << 25) is on CUDA.
STALL_CYCLES = 1 << 25

_lock = threading.Lock()
_loaded = False


class SimUnavailable(RuntimeError):
    """sim cannot be loaded in this process; the message is one line saying why."""


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def loaded() -> bool:
    """Whether this process has loaded sim (never imports torch to find out)."""
    return _loaded


def too_old(release: str) -> str | None:
    """Why torch `release` (a version, as torch.__version__ or a result file says it) cannot host sim at
    all; None: it can, or `release` is no version number. Imports nothing."""
    if not release[:1].isdigit() or _version(release) >= MIN_TORCH:
        return None
    return (f"sim: torch {release} is older than {'.'.join(map(str, MIN_TORCH))}, whose PrivateUse1 API "
            "and torch.accelerator the simulated device needs")


def torch_too_old() -> str | None:
    """Why the installed torch release cannot host sim at all (None: it can). Imports torch."""
    import torch

    return too_old(str(torch.__version__))


def refusal() -> str | None:
    """Why load() would refuse before building anything (None: it would go ahead). Imports torch."""
    import torch

    if _loaded:
        return None
    old = torch_too_old()
    if old:
        return old
    name = torch._C._get_privateuse1_backend_name()
    if name != "privateuseone":
        return (f"sim: another PrivateUse1 backend ({name!r}) is already registered in this process, and torch hosts "
                "one at a time")
    return None


_tools: list[str | None] = []


def missing() -> str | None:
    """Why sim cannot be tested in this process (torch too old, another backend, no compiler); None when
    it can: loaded already, or loadable. Builds nothing. Imports torch."""
    why = refusal()
    if why or _loaded:
        return why
    if not _tools:  # asking for ninja runs a process: once is enough
        from . import build

        _tools.append(build.missing_tools())
    return _tools[0]


def load(verbose: bool = False) -> Any:
    """Build sim if its cache has no build for this torch, load it, and return ``torch.sim``. Idempotent;
    raises SimUnavailable (one line) where it cannot be loaded."""
    global _loaded
    with _lock:
        import torch

        if _loaded:
            return torch.sim
        why = refusal()
        if why:
            raise SimUnavailable(why)
        from . import build, device_module

        try:
            build.build(verbose=verbose)  # loads the library: its kernels and device guard register themselves
        except build.BuildError as exc:
            raise SimUnavailable(str(exc)) from None
        torch.utils.rename_privateuse1_backend(NAME)
        torch._register_device_module(NAME, device_module)
        _loaded = True
        return torch.sim


def sleep(cycles: int = STALL_CYCLES, device: Any = None) -> None:
    """Queue a job of `cycles` cycles (1 GHz) on the current stream of `device` (default: the current device)."""
    import torch

    if device is None:
        torch.ops.sim.sleep(int(cycles))
        return
    with torch.accelerator.device_index(torch.device(device).index):
        torch.ops.sim.sleep(int(cycles))


def unjoined_work(device: Any, copying: Any) -> list[str]:
    """Run copying() and return, one line each, the streams that got work during it that the current
    stream of `device` never waited for (by an event, wait_stream) and the host never synchronized:
    what CUDA's graph capture refuses as a fork left unjoined, seen deterministically."""
    import torch

    device = torch.device(device)
    index = device.index if device.index is not None else torch.accelerator.current_device_index()
    torch.ops.sim.join_check_begin(index, torch.accelerator.current_stream(index).stream_id)
    try:
        copying()
    finally:
        unjoined = list(torch.ops.sim.join_check_end())
    return unjoined


__all__ = ["DEVICE_COUNT", "MIN_TORCH", "NAME", "STALL_CYCLES", "SimUnavailable", "load", "loaded", "refusal", "sleep",
           "too_old", "unjoined_work"]

