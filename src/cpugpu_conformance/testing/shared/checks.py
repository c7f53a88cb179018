"""The checks more than one area runs, as plain functions of a built `buf`.

Shared by the tests of ordinary sizes and of engine scale (engine_scale.py), so a promise is
checked the same way at every size. Every check is vectorized (whole-tensor byte comparisons
through NumPy), so a buffer of millions of elements costs milliseconds. Each is written into
reproducers as it is (reproducer.py): it uses torch, numpy and helpers.py only.

PYTEST_DONT_REWRITE (why: cpugpu_conformance.testing's docstring).
"""

from __future__ import annotations

import numpy as np
import torch

from .helpers import byte_view, expected_bytes, fill_bytes, np_fill, raw, sync


def shape_dtype_device(buf, size, dtype, device):
    """Promise 1: both tensors have the shape and dtype asked for, one on the host, one on `device`."""
    for name in ("cpu", "gpu"):
        t = getattr(buf, name)
        assert tuple(t.shape) == size, f"buf.{name}.shape is {tuple(t.shape)}, expected {size}"
        assert t.dtype == dtype, f"buf.{name}.dtype is {t.dtype}, expected {dtype}"
    assert buf.cpu.device.type == "cpu", f"buf.cpu is on {buf.cpu.device}, expected the host"
    assert buf.gpu.device.type == device.type, f"buf.gpu is on {buf.gpu.device}, expected {device}"
    assert device.index is None or buf.gpu.device.index == device.index, \
        f"buf.gpu is on {buf.gpu.device}, expected {device}"


def zeroed(buf, device):
    """Promise 2: every byte of both tensors is zero at construction."""
    sync(device)
    for name in ("cpu", "gpu"):
        nonzero = int((raw(getattr(buf, name)) != 0).any(axis=-1).sum())
        assert nonzero == 0, f"buf.{name} has {nonzero} non-zero elements at construction"


def separate_storages(buf):
    """Promise 4, by the address ranges: on the CPU two storages over one memory, and across devices
    too, since CUDA gives host and device memory one virtual address space (unified addressing): a
    device tensor over mapped pinned host memory has the host tensor's addresses. Any check that
    compares buf.cpu with buf.gpu runs this first, so a device tensor that shares the host's memory
    is blamed on promise 4, not on the copies or the writes that then go wrong."""
    spans = {}
    for name in ("cpu", "gpu"):
        storage = getattr(buf, name).untyped_storage()
        spans[name] = (storage.data_ptr(), storage.data_ptr() + storage.nbytes())
    (cpu_start, cpu_end), (gpu_start, gpu_end) = spans["cpu"], spans["gpu"]
    assert cpu_end <= gpu_start or gpu_end <= cpu_start, (
        f"buf.cpu and buf.gpu share memory: bytes {max(cpu_start, gpu_start):#x} to {min(cpu_end, gpu_end):#x}"
    )


def two_storages(buf, device):
    """Promise 4: two storages. The address ranges first, then the writes, the promise itself, on
    every device. Each side is compared with what it held before the write to the other: what the
    buffer starts with is promise 2's business, not this one's."""
    separate_storages(buf)
    sync(device)
    gpu_before = raw(buf.gpu)
    fill_bytes(buf.cpu, seed=1)
    sync(device)
    assert (raw(buf.gpu) == gpu_before).all(), "a write to buf.cpu showed up in buf.gpu without a copy"
    fill_bytes(buf.gpu, seed=2)
    sync(device)
    expected = raw(buf.cpu)
    fill_bytes(buf.cpu, seed=1)
    assert (raw(buf.cpu) == expected).all(), "a write to buf.gpu changed buf.cpu without a copy"


def numpy_view(buf, size, dtype, device):
    """Promise 5: buf.np is a writable NumPy array over buf.cpu's memory, both ways."""
    expected = torch.zeros(1, dtype=dtype).numpy().dtype
    assert isinstance(buf.np, np.ndarray), f"buf.np is a {type(buf.np).__name__}, not a NumPy array"
    assert buf.np.shape == size, f"buf.np.shape is {buf.np.shape}, expected {size}"
    assert buf.np.dtype == expected, f"buf.np.dtype is {buf.np.dtype}, expected {expected} for {dtype}"
    assert buf.np.flags.writeable, "buf.np is read-only"

    def np_bytes():
        return np.ascontiguousarray(buf.np).reshape(-1).view(np.uint8).reshape(*size, buf.np.itemsize)

    np_fill(buf.np, seed=1)  # NumPy -> torch
    assert (raw(buf.cpu) == np_bytes()).all(), "a write through buf.np is not seen by buf.cpu"
    buf.copy_to_gpu()
    sync(device)
    assert (raw(buf.gpu) == np_bytes()).all(), "copy_to_gpu did not carry a write made through buf.np"
    fill_bytes(buf.cpu, seed=2)  # torch -> NumPy
    assert (np_bytes() == raw(buf.cpu)).all(), "a write to buf.cpu is not seen through buf.np"
    # An engine fills buf.np and copies every step; a write through NumPy moves no torch version
    # counter, so a copy that skips "unchanged" data must still see it. Promise 5's own words (a write
    # through np is carried by the copy), so the line does not name the copy: promise 8 is not blamed.
    buf.copy_to_gpu()
    np_fill(buf.np, seed=3)
    buf.copy_to_gpu()
    sync(device)
    assert (raw(buf.gpu) == np_bytes()).all(), "the next copy to the device missed a write made through buf.np"


def partial_copy(buf, method, n, dtype, device):
    """Promise 8: buf.<method>(n) writes exactly the source's [:n] into the destination's [:n],
    leaves the source as it was, and returns the written slice of the destination."""
    src, dst = ("cpu", "gpu") if method == "copy_to_gpu" else ("gpu", "cpu")
    fill_bytes(getattr(buf, src), seed=1)
    fill_bytes(getattr(buf, dst), seed=2)
    sync(device)
    before_src, before_dst = raw(getattr(buf, src)), raw(getattr(buf, dst))
    out = getattr(buf, method)(n)
    sync(device)
    expected = before_dst.copy()
    expected[:n] = before_src[:n]
    assert (raw(getattr(buf, dst)) == expected).all(), (
        f"{method}(n) did not write exactly buf.{src}[:n] into buf.{dst}[:n]"
    )
    assert (raw(getattr(buf, src)) == before_src).all(), f"{method}(n) changed its source, buf.{src}"
    written = getattr(buf, dst)[:n]
    assert isinstance(out, torch.Tensor), f"{method}(n) returned {type(out).__name__}, not the written slice"
    assert tuple(out.shape) == tuple(written.shape), (
        f"{method}(n) returned shape {tuple(out.shape)}, expected {tuple(written.shape)}"
    )
    assert out.device == written.device and out.dtype == dtype, (
        f"{method}(n) returned a tensor on {out.device} of {out.dtype}"
    )
    if written.numel():
        assert out.data_ptr() == written.data_ptr(), f"{method}(n) returned a tensor that is not buf.{dst}[:n]"
    # A CUDA graph's replay, or any write through another tensor over the same memory, moves no
    # version counter of buf's tensors: a copy that skips a source it thinks unchanged misses it.
    source = getattr(buf, src)
    byte_view(source).copy_(byte_view(expected_bytes(source, seed=3).to(source.device)))
    sync(device)
    again = raw(source)
    getattr(buf, method)(n)
    sync(device)
    assert (raw(getattr(buf, dst))[:n] == again[:n]).all(), (
        f"the next {method}(n) missed a write to buf.{src} that moved no version counter (a CUDA graph's replay)"
    )


# The copy methods of promise 8, one check per direction.
COPY_METHODS = ("copy_to_cpu", "copy_to_gpu")


def capture(buf, with_numpy):
    """Promise 9: what a caller captures at construction, before any copy. The tensors are kept,
    not only their addresses: while they live their memory cannot be handed out again, so a
    buffer that frees a tensor and allocates a new one (which CUDA's caching allocator would
    place at the freed address) shows as a new address."""
    captured = {name: getattr(buf, name) for name in ("cpu", "gpu", "np") if name != "np" or with_numpy}
    storages = {name: t.untyped_storage().data_ptr() for name, t in captured.items() if name != "np"}
    return captured, storages


def copies(buf, calls):
    """Call the copies in order: (method, n) pairs."""
    for method, n in calls:
        getattr(buf, method)(n)


def still_captured(buf, captured, storages, device):
    """Promise 9: what was captured at construction is still the buffer's after the copies."""
    sync(device)
    for name, t in captured.items():
        now = getattr(buf, name)
        if name == "np":
            assert np.shares_memory(now, t) or t.size == 0, "buf.np no longer views the memory it had at construction"
        else:
            assert now.untyped_storage().data_ptr() == storages[name], (
                f"buf.{name} was rebound to a new storage: a caller that captured it (a CUDA graph, say) is left behind"
            )
    fill_bytes(captured["cpu"], seed=5)  # writes through what a caller captured reach the buffer
    assert (raw(buf.cpu) == raw(captured["cpu"])).all(), (
        "buf.cpu no longer shows writes to the tensor captured at construction"
    )
