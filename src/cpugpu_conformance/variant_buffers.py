"""The first of the deliberately broken CpuGpuBuffer classes (variants.py holds the table that says
where each breaks, and re-exports every class here): construction, zeroing, storage sharing, the
NumPy view, dtype and device choices, streams and the accelerator-only copy faults. The pre-fix class
from the original vLLM bug comes first."""

from __future__ import annotations

import contextlib

import torch

from cpugpu_conformance.reference import CpuGpuBuffer


class PreFixCpuGpuBuffer:
    """The class before the fix: allocates in the caller's mode, so inference mode makes inference tensors."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        self.cpu = torch.zeros(*size, dtype=dtype, device="cpu", pin_memory=pin_memory)
        self.gpu = torch.zeros_like(self.cpu, device=device)
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError("Bfloat16 torch tensors cannot be directly cast to a numpy array, so call CpuGpuBuffer with with_numpy=False")
            self.np = self.cpu.numpy()

    def copy_to_gpu(self, n=None):
        if n is None:
            return self.gpu.copy_(self.cpu, non_blocking=True)
        return self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)

    def copy_to_cpu(self, n=None):
        if n is None:
            return self.cpu.copy_(self.gpu, non_blocking=True)
        return self.cpu[:n].copy_(self.gpu[:n], non_blocking=True)


def _view_host(buf, dtype, with_numpy):
    """The reference's NumPy step, for the classes below that allocate the host tensor their own way."""
    if with_numpy:
        if dtype == torch.bfloat16:
            raise ValueError("bfloat16 has no NumPy dtype: pass with_numpy=False")
        buf.np = buf.cpu.numpy()


class HalfFixedCpuGpuBuffer(CpuGpuBuffer):
    """Fixes the device tensor only: the host tensor is still made in the caller's mode."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=False)
        self.cpu = torch.zeros(*size, dtype=dtype, device="cpu", pin_memory=pin_memory)
        _view_host(self, dtype, with_numpy)


class FlatGpuBuffer(CpuGpuBuffer):
    """Allocates the device tensor flat (numel,) instead of the requested shape."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        with torch.inference_mode(False):
            self.gpu = torch.zeros(self.cpu.numel(), dtype=dtype, device=device)


class OnesLikeGpuBuffer(CpuGpuBuffer):
    """Allocates the device tensor with ones_like where zeros_like was meant."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        with torch.inference_mode(False):
            self.gpu = torch.ones_like(self.cpu, device=device)


class SharedStorageBuffer(CpuGpuBuffer):
    """On a CPU device, reuses the host tensor as the 'device' tensor to save memory."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        if torch.device(device).type == "cpu":
            self.gpu = self.cpu


class CopiedNumpyBuffer(CpuGpuBuffer):
    """Gives a NumPy *copy* of the host tensor instead of a view."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        if with_numpy:
            self.np = self.cpu.numpy().copy()


class Bfloat16AsInt16Buffer(CpuGpuBuffer):
    """Works around NumPy's missing bfloat16 by viewing the bits as int16, instead of raising."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        bf16 = with_numpy and dtype == torch.bfloat16
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy and not bf16)
        if bf16:
            self.np = self.cpu.view(torch.int16).numpy()


class NumpyAttrAlwaysBuffer(CpuGpuBuffer):
    """Sets np = None when with_numpy=False, where the contract says there is no np attribute."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        if not with_numpy:
            self.np = None


class BytesViewBuffer(CpuGpuBuffer):
    """For dtypes NumPy lacks (float8, ...), silently hands out a uint8 view of the bytes."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=False)
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError("bfloat16 has no NumPy dtype: pass with_numpy=False")
            try:
                self.np = self.cpu.numpy()
            except TypeError:
                self.np = self.cpu.view(torch.uint8).numpy()


class ZeroMeansAllBuffer(CpuGpuBuffer):
    """Tests `if not n` where `if n is None` was meant, so copy_to_gpu(0) copies everything."""

    def copy_to_gpu(self, n=None):
        if not n:
            return self.gpu.copy_(self.cpu, non_blocking=True)
        return self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)

    def copy_to_cpu(self, n=None):
        if not n:
            return self.cpu.copy_(self.gpu, non_blocking=True)
        return self.cpu[:n].copy_(self.gpu[:n], non_blocking=True)


class RebindingBuffer(CpuGpuBuffer):
    """Copies into a fresh device tensor and rebinds gpu: right contents, but a captured gpu is left behind.
    The fresh tensor is made as the fix makes them (inference_mode(False)): only promise 9 breaks."""

    def copy_to_gpu(self, n=None):
        with torch.inference_mode(False):
            fresh = self.gpu.clone()
        fresh[:n].copy_(self.cpu[:n])
        self.gpu = fresh
        return fresh[:n]


class DefaultDeviceBuffer(CpuGpuBuffer):
    """Leaves the host tensor's device to torch's default, so inside `with torch.device(...)`
    (where a model's init runs) `cpu` lands on that device instead of the host."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        with torch.inference_mode(False):
            self.cpu = torch.zeros(*size, dtype=dtype, pin_memory=pin_memory)
            self.gpu = torch.zeros_like(self.cpu, device=device)
        _view_host(self, dtype, with_numpy)


class Float32IsDefaultBuffer(CpuGpuBuffer):
    """Passes dtype=None for float32 ("float32 is the default anyway"), so under
    torch.set_default_dtype(torch.float16) a float32 buffer comes out float16."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=False)
        if dtype == torch.float32:
            with torch.inference_mode(False):
                self.cpu = torch.zeros(*size, device="cpu", pin_memory=pin_memory)
                self.gpu = torch.zeros_like(self.cpu, device=device)
        _view_host(self, dtype, with_numpy)


class ChunkedCopyBuffer(CpuGpuBuffer):
    """Copies large buffers in chunks of 2**20 elements and drops the last, partial chunk:
    right for every buffer the old suite drew (125 elements at most), wrong at engine scale."""

    CHUNK = 1 << 20

    def copy_to_gpu(self, n=None):
        src, dst = self.cpu[:n], self.gpu[:n]
        if src.numel() <= self.CHUNK:
            return dst.copy_(src, non_blocking=True)
        flat_src, flat_dst = src.reshape(-1), dst.view(-1)
        for start in range(0, (src.numel() // self.CHUNK) * self.CHUNK, self.CHUNK):
            flat_dst[start:start + self.CHUNK].copy_(flat_src[start:start + self.CHUNK], non_blocking=True)
        return dst


class _SkipsWhileVersionStands(CpuGpuBuffer):
    """Skips a copy of the same n while its source's version counter has not moved since the last:
    a write that moves no counter is never carried."""

    def _unless_unchanged(self, n, source, destination, copy):
        key = (n, getattr(self, source)._version)
        if getattr(self, "_last_copy", None) == key:
            return getattr(self, destination)[:n]
        self._last_copy = key
        return copy(n)


class SkipsUnchangedCopyBuffer(_SkipsWhileVersionStands):
    """Skips copy_to_gpu(n) when buf.cpu's version counter has not moved since the last copy of the
    same n: a write through buf.np moves no counter, so an engine that fills buf.np and copies
    every step sends the device its first step's data ever after (promise 5: a write through np is
    carried by copy_to_gpu)."""

    def copy_to_gpu(self, n=None):
        return self._unless_unchanged(n, "cpu", "gpu", super().copy_to_gpu)


class VersionCachedCopyBuffer(_SkipsWhileVersionStands):
    """Skips copy_to_cpu(n) when buf.gpu's version counter has not moved since the last copy of the
    same n: a CUDA graph's replay writes the device tensor without moving it, so the host reads the
    first replay's output ever after."""

    def copy_to_cpu(self, n=None):
        return self._unless_unchanged(n, "gpu", "cpu", super().copy_to_cpu)


class GradLeakingBuffer(CpuGpuBuffer):
    """Switches grad mode off with `torch.set_grad_enabled(False)` called as a function and on
    again after, so a caller inside `torch.no_grad()` comes back with grad enabled."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        torch.set_grad_enabled(False)
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        torch.set_grad_enabled(True)


class PooledBuffer(CpuGpuBuffer):
    """Keeps a pool of tensors per (size, dtype, device) and hands the same ones out again:
    a second buffer of the same size shares the first one's storage and is not zeroed."""

    _pool: dict = {}

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        key = (tuple(size), dtype, str(device), pin_memory)
        if key not in self._pool:
            with torch.inference_mode(False):
                cpu = torch.zeros(*size, dtype=dtype, device="cpu", pin_memory=pin_memory)
                self._pool[key] = (cpu, torch.zeros_like(cpu, device=device))
        self.cpu, self.gpu = self._pool[key]
        _view_host(self, dtype, with_numpy)


class PrivateStreamBuffer(CpuGpuBuffer):
    """On an accelerator (CUDA, sim), copies on a stream of its own that the caller's current stream never waits for
    (no wait_stream): the data lands once the whole device is synchronized, but not in order with
    the caller's work, nor once the caller's stream is synchronized. On the CPU it is the reference."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        self._stream = torch.Stream(device=self.gpu.device) if self.gpu.device.type != "cpu" else None

    def _own_stream(self):
        return self._stream if self._stream is not None else contextlib.nullcontext()

    def copy_to_gpu(self, n=None):
        with self._own_stream():
            return super().copy_to_gpu(n)

    def copy_to_cpu(self, n=None):
        with self._own_stream():
            return super().copy_to_cpu(n)


class ForkedStreamBuffer(PrivateStreamBuffer):
    """On an accelerator, copies on a stream of its own that first waits for the caller's current stream
    (wait_stream), but that the caller's stream never waits for: the copy lands after the caller's
    work, yet nothing makes it land before the caller's stream is synchronized. Timing almost never
    sees it (the copy starts as the caller's work ends and lands before the host reads); a capture (a
    CUDA graph; sim's join bookkeeping) sees the fork left unjoined every time. On the CPU it is the reference."""

    def _own_stream(self):
        if self._stream is not None:
            self._stream.wait_stream(torch.accelerator.current_stream(self.gpu.device))
        return super()._own_stream()


class _WaitsAfterEachCopy(CpuGpuBuffer):
    """The reference, then, on an accelerator, self._wait() after each copy."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        self._on_cuda = self.gpu.device.type != "cpu"  # on an accelerator: CUDA, sim

    def _wait(self):
        raise NotImplementedError

    def copy_to_gpu(self, n=None):
        out = super().copy_to_gpu(n)
        if self._on_cuda:
            self._wait()
        return out

    def copy_to_cpu(self, n=None):
        out = super().copy_to_cpu(n)
        if self._on_cuda:
            self._wait()
        return out


class SynchronizingCopiesBuffer(_WaitsAfterEachCopy):
    """On an accelerator, ends each copy with torch.accelerator.synchronize(): the data is there when the
    copy returns, but the host waited for every job queued before it (on CUDA cudaDeviceSynchronize, which
    torch's sync debug mode does not refuse). On the CPU it is the reference."""

    def _wait(self):
        torch.accelerator.synchronize(self.gpu.device)


class EventWaitingBuffer(_WaitsAfterEachCopy):
    """On an accelerator, ends each copy by recording an event on the current stream and waiting for it
    (Event.synchronize(), which torch's sync debug mode does not refuse): the host waited for every
    job queued before the copy. On the CPU it is the reference."""

    def _wait(self):
        done = torch.Event(device=self.gpu.device)
        done.record(torch.accelerator.current_stream(self.gpu.device))
        done.synchronize()


class PageableHostBuffer(CpuGpuBuffer):
    """Ignores pin_memory: the host tensor is never pinned. On CUDA, pin_memory=True does not yield a
    pinned tensor, and copy_to_cpu is a copy into pageable memory, which CUDA makes wait for the work
    queued before it with no synchronize torch could refuse. Off CUDA pinning does not apply (promise
    11 records either outcome)."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=False, with_numpy=with_numpy)
