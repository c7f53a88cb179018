"""Helpers the checks share: bytes of any dtype and layout, and waiting for a device.

Plain functions, run by the suite and written into reproducers as they are (reproducer.py),
so each imports nothing the reproducer lacks: torch, numpy and one another. They work for
every dtype, float8 and sub-byte ones included, by treating elements as bytes, and for every
layout a correct class may hand out (tests/test_layouts.py draws them).
"""

from __future__ import annotations

import numpy as np
import torch

from cpugpu_conformance import devices

from .reproducer import per_device


def byte_view(t):
    """A uint8 tensor over t's own memory, one row of element_size() bytes per element.

    Built from t's storage, offset and strides, so it holds for every layout a class may hand
    out (slices, transposes, views into a larger slab, NumPy's arrays); t.view(torch.uint8)
    refuses all but a contiguous last dimension. Reading only: it bypasses t's own checks.
    """
    size = t.element_size()
    view = torch.empty(0, dtype=torch.uint8, device=t.device)
    strides = tuple(stride * size for stride in t.stride()) + (1,)
    return view.set_(t.untyped_storage(), t.storage_offset() * size, (*t.shape, size), strides)


def raw(t):
    """The bytes of a tensor of any dtype and layout, as a host uint8 array (one row per element)."""
    if t.numel() == 0:  # nothing to read, whatever its strides (NumPy gives empty arrays zero strides)
        return torch.zeros((*t.shape, t.element_size()), dtype=torch.uint8).numpy()
    return byte_view(t).contiguous().cpu().numpy().copy()


def fill_bytes(t, seed):
    """Overwrite every byte of `t` in place with a pattern that depends on `seed`; t's layout is any.

    The pattern repeats every 251 bytes, so a buffer of millions of bytes costs one tiled copy.
    It is written element-wise, by t.copy_, so t's own checks (an inference tensor) still apply.
    The pattern is made in NumPy: each torch op costs tens of microseconds to dispatch, and most
    examples fill a few bytes, many times a test.
    """
    if t.numel() == 0:
        return
    count = t.numel() * t.element_size()
    period = ((np.arange(251) * 7 + seed * 31 + 1) % 251 + 1).astype(np.uint8)
    if t.dtype == torch.bool:
        period = period % 2  # any other byte is not a valid bool
    pattern = torch.from_numpy(np.tile(period, count // 251 + 1)[:count])
    t.copy_(pattern.view(t.dtype).reshape(t.shape).to(t.device))


def np_fill(a, seed):
    """Overwrite every byte of the array in place, through NumPy (a pattern repeating every 251 bytes).

    Assigned element-wise, so any layout takes it: a.reshape(-1) of a strided array is a copy.
    """
    period = ((np.arange(251, dtype=np.int64) * 13 + seed * 17 + 3) % 251 + 1).astype(np.uint8)
    pattern = np.resize(period % 2 if a.dtype == np.bool_ else period, a.size * a.itemsize)
    a[...] = pattern.view(a.dtype).reshape(a.shape)


def expected_bytes(t, seed):
    """A fresh host tensor like `t`, filled with the pattern `seed` writes."""
    model = torch.empty(t.shape, dtype=t.dtype)
    fill_bytes(model, seed)
    return model


def host(t):
    """Contents as a NumPy array on the host (bfloat16 widened to float32, exactly)."""
    t = t.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


@per_device("sync")
def sync(device):
    """Non-blocking copies have landed only once the caller's current stream is synchronized: on the
    buffer's device (pass buf.gpu.device, which has its index), or on each device of the type already
    in use (a device type, no index); never on a device the run has not touched (devices.py)."""
    devices.get(device.type).sync(device)
