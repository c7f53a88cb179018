"""The caller's state: what the caller's code depends on and a buffer (promise 12) or an engine
object (MutableStateTests) must leave as it found it. Both kinds of test read it here.

PYTEST_DONT_REWRITE (why: cpugpu_conformance.testing's docstring).
"""

from __future__ import annotations

import torch

from cpugpu_conformance import devices

from .reproducer import per_device


@per_device("caller_state")
def device_state(device):
    """What only this kind of device has (its current stream, say): devices.py."""
    return devices.get(device.type).caller_state(device)


def caller_state(device):
    """What the caller's code depends on, and a buffer must leave as it found it."""
    state = {
        "grad mode": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "default dtype": torch.get_default_dtype(),
        "default device": torch.empty(0).device,
    }
    state.update(device_state(device))
    return state
