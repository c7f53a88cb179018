"""torch.sim: the device module torch finds for the sim device (torch._register_device_module).

What torch's device-generic code asks of a backend's module, and the one thing torch.accelerator
lacks: a long job queued on a stream (``_sleep``, as ``torch.cuda._sleep`` is for CUDA).
"""

from __future__ import annotations

import torch

DEVICE_COUNT = 2


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    """Nothing to initialize. torch 2.8 to 2.10 (at least) count a PrivateUse1 backend initialized only once
    its module's _lazy_init has run, and until then make torch.accelerator.synchronize() a no-op."""


def device_count() -> int:
    return DEVICE_COUNT


def current_device() -> int:
    return torch.accelerator.current_device_index()


def set_device(device) -> None:
    torch.accelerator.set_device_index(device)


def synchronize(device=None) -> None:
    """Every stream of the device (torch.accelerator.synchronize)."""
    torch.accelerator.synchronize(device)


def current_stream(device=None) -> torch.Stream:
    return torch.accelerator.current_stream(device)


def _sleep(cycles: int) -> None:
    """Queue a job of `cycles` cycles of a simulated 1 GHz clock on the current stream of the current device."""
    torch.ops.sim.sleep(int(cycles))


def manual_seed_all(seed: int) -> None:
    """sim has no random number generator: nothing to seed (torch.manual_seed calls this)."""


def manual_seed(seed: int) -> None:
    """sim has no random number generator: nothing to seed."""
