"""The checks of each promise, as source snippets run on a built `buf`.

Shared by the tests of ordinary sizes and of engine scale (test_engine_scale.py), so a
promise is checked the same way at every size. Every check is vectorized (whole-tensor
byte comparisons through NumPy), so a buffer of millions of elements costs milliseconds.
"""

from __future__ import annotations

SHAPE_DTYPE_DEVICE = """
for name in ("cpu", "gpu"):
    t = getattr(buf, name)
    assert tuple(t.shape) == size, f"buf.{name}.shape is {tuple(t.shape)}, expected {size}"
    assert t.dtype == dtype, f"buf.{name}.dtype is {t.dtype}, expected {dtype}"
assert buf.cpu.device.type == "cpu", f"buf.cpu is on {buf.cpu.device}, expected the host"
assert buf.gpu.device.type == device.type, f"buf.gpu is on {buf.gpu.device}, expected {device}"
"""

ZEROED = """
sync()
for name in ("cpu", "gpu"):
    nonzero = int((raw(getattr(buf, name)) != 0).any(axis=-1).sum())
    assert nonzero == 0, f"buf.{name} has {nonzero} non-zero elements at construction"
"""

# Promise 4. The address ranges first: on the CPU two storages over one memory, and across
# devices too, since CUDA gives host and device memory one virtual address space (unified
# addressing, every 64-bit CUDA platform): a device tensor over mapped pinned host memory
# has the host tensor's addresses. Comparing only the start addresses missed a storage over
# part of the other's memory. Then the writes, the promise itself, on every device.
TWO_STORAGES = """
spans = {}
for name in ("cpu", "gpu"):
    storage = getattr(buf, name).untyped_storage()
    spans[name] = (storage.data_ptr(), storage.data_ptr() + storage.nbytes())
(cpu_start, cpu_end), (gpu_start, gpu_end) = spans["cpu"], spans["gpu"]
assert cpu_end <= gpu_start or gpu_end <= cpu_start, (
    f"buf.cpu and buf.gpu share memory: bytes {max(cpu_start, gpu_start):#x} to {min(cpu_end, gpu_end):#x}"
)
fill_bytes(buf.cpu, seed=1)
sync()
assert not raw(buf.gpu).any(), "a write to buf.cpu showed up in buf.gpu without a copy"
fill_bytes(buf.gpu, seed=2)
sync()
expected = raw(buf.cpu)
fill_bytes(buf.cpu, seed=1)
assert (raw(buf.cpu) == expected).all(), "a write to buf.gpu changed buf.cpu without a copy"
"""

NP_FILL = '''
def np_fill(a, seed):
    """Overwrite every byte of the array in place, through NumPy (a pattern repeating every 251 bytes).

    Assigned element-wise, so any layout takes it: a.reshape(-1) of a strided array is a copy.
    """
    period = ((np.arange(251, dtype=np.int64) * 13 + seed * 17 + 3) % 251 + 1).astype(np.uint8)
    pattern = np.resize(period % 2 if a.dtype == np.bool_ else period, a.size * a.itemsize)
    a[...] = pattern.view(a.dtype).reshape(a.shape)
'''

NUMPY_VIEW = """
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
sync()
assert (raw(buf.gpu) == np_bytes()).all(), "copy_to_gpu did not carry a write made through buf.np"
fill_bytes(buf.cpu, seed=2)  # torch -> NumPy
assert (np_bytes() == raw(buf.cpu)).all(), "a write to buf.cpu is not seen through buf.np"
"""

_COPY = """
fill_bytes(buf.{src}, seed=1)
fill_bytes(buf.{dst}, seed=2)
sync()
before_src, before_dst = raw(buf.{src}), raw(buf.{dst})
out = buf.{method}(n)
sync()
expected = before_dst.copy()
expected[:n] = before_src[:n]
assert (raw(buf.{dst}) == expected).all(), "{method}(n) did not write exactly buf.{src}[:n] into buf.{dst}[:n]"
assert (raw(buf.{src}) == before_src).all(), "{method}(n) changed its source, buf.{src}"
written = buf.{dst}[:n]
assert isinstance(out, torch.Tensor), f"{method}(n) returned {{type(out).__name__}}, not the written slice"
assert tuple(out.shape) == tuple(written.shape), f"{method}(n) returned shape {{tuple(out.shape)}}, expected {{tuple(written.shape)}}"
assert out.device == written.device and out.dtype == dtype, f"{method}(n) returned a tensor on {{out.device}} of {{out.dtype}}"
if written.numel():
    assert out.data_ptr() == written.data_ptr(), "{method}(n) returned a tensor that is not buf.{dst}[:n]"
"""

# Promise 8, one check per direction; `n` must be bound.
COPIES = {
    "copy_to_gpu": _COPY.format(method="copy_to_gpu", src="cpu", dst="gpu"),
    "copy_to_cpu": _COPY.format(method="copy_to_cpu", src="gpu", dst="cpu"),
}

# Promise 9: what a caller captured at construction, before any copy... The tensors are kept,
# not only their addresses: while they live their memory cannot be handed out again, so a
# buffer that frees a tensor and allocates a new one (which CUDA's caching allocator would
# place at the freed address) shows as a new address.
CAPTURE = """
captured = {name: getattr(buf, name) for name in ("cpu", "gpu", "np") if name != "np" or with_numpy}
storages = {name: t.untyped_storage().data_ptr() for name, t in captured.items() if name != "np"}
"""

# ...is still the buffer's after the copies.
STILL_CAPTURED = """
sync()
for name, t in captured.items():
    now = getattr(buf, name)
    if name == "np":
        assert np.shares_memory(now, t) or t.size == 0, "buf.np no longer views the memory it had at construction"
    else:
        assert now.untyped_storage().data_ptr() == storages[name], (
            f"buf.{name} was rebound to a new storage: a caller that captured it (a CUDA graph, say) is left behind"
        )
fill_bytes(captured["cpu"], seed=5)  # writes through what a caller captured reach the buffer
assert (raw(buf.cpu) == raw(captured["cpu"])).all(), "buf.cpu no longer shows writes to the tensor captured at construction"
"""
