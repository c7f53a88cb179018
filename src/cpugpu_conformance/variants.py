"""Deliberately broken CpuGpuBuffer implementations, each breaking one promise of CONTRACT.md.

They exist to prove the suite has teeth: ``tests/test_variants.py`` runs the whole suite
against every one and asserts that it fails on the promise the variant breaks, on every
device where it breaks it (``Variant.fails_on``), and passes where its bug cannot happen
(``Variant.passes_on``). The pre-fix class from the original vLLM bug comes first.

Put one under test by hand with, e.g.::

    pytest conformance --impl cpugpu_conformance.variants:PreFixCpuGpuBuffer
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from cpugpu_conformance.devices import NAMES as DEVICES
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


class HalfFixedCpuGpuBuffer(CpuGpuBuffer):
    """Fixes the device tensor only: the host tensor is still made in the caller's mode."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=False)
        self.cpu = torch.zeros(*size, dtype=dtype, device="cpu", pin_memory=pin_memory)
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError("bfloat16 has no NumPy dtype: pass with_numpy=False")
            self.np = self.cpu.numpy()


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
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError("bfloat16 has no NumPy dtype: pass with_numpy=False")
            self.np = self.cpu.numpy()


class Float32IsDefaultBuffer(CpuGpuBuffer):
    """Passes dtype=None for float32 ("float32 is the default anyway"), so under
    torch.set_default_dtype(torch.float16) a float32 buffer comes out float16."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=False)
        if dtype == torch.float32:
            with torch.inference_mode(False):
                self.cpu = torch.zeros(*size, device="cpu", pin_memory=pin_memory)
                self.gpu = torch.zeros_like(self.cpu, device=device)
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError("bfloat16 has no NumPy dtype: pass with_numpy=False")
            self.np = self.cpu.numpy()


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
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError("bfloat16 has no NumPy dtype: pass with_numpy=False")
            self.np = self.cpu.numpy()


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


@dataclass(frozen=True)
class Variant:
    """A broken class, and where it breaks: on every device of ``fails_on`` the suite must fail it
    on ``promise``; on every device of ``passes_on`` (where its bug cannot happen) it must pass.
    Between them they name every device of the registry (tests/test_variants.py checks it)."""

    name: str
    cls: type
    promise: str  # the CONTRACT.md promise it breaks
    fails_on: tuple[str, ...] = DEVICES
    passes_on: tuple[str, ...] = ()
    # Words of the test name (node id) that must fail, where other tests of the promise may fail as well,
    # or only by chance: the test that catches it every time, whose reproducer fails on its own. (): any.
    caught_by: tuple[str, ...] = ()

    @property
    def spec(self) -> str:
        return f"{__name__}:{self.name}"

    @property
    def description(self) -> str:
        return (self.cls.__doc__ or "").strip()


# Freed host blocks by size, handed out again first: what CUDA's caching allocator does with
# device memory, for the CPU device (glibc's malloc reuses a freed block only sometimes).
_FREED_BLOCKS: dict[int, list] = {}


def _zeros_reusing_freed(shape, dtype, device):
    """torch.zeros(shape, dtype=dtype, device=device), but the memory of a freed tensor of the
    same size comes back at the same address, on every device."""
    nbytes = torch.Size(shape).numel() * torch.empty(0, dtype=dtype).element_size()
    if device.type != "cpu" or nbytes == 0:  # CUDA's caching allocator reuses already; nothing has no address
        return torch.zeros(shape, dtype=dtype, device=device)
    import weakref

    import numpy as np

    free = _FREED_BLOCKS.setdefault(nbytes, [])
    block = free.pop() if free else np.empty(nbytes, dtype=np.uint8)
    handle = block[:]  # the tensor's storage keeps this view alive, and only it
    weakref.finalize(handle, free.append, block)  # the storage released: the block is free again
    t = torch.from_numpy(handle).view(dtype).view(shape)
    return t.zero_()


class ReallocatingBuffer(CpuGpuBuffer):
    """Frees its device tensor and allocates a new one at every copy_to_gpu, contents carried
    over. The allocator hands the freed block straight back, so the new tensor has the old
    address: only a check that keeps the captured tensor alive (as a caller that captured it
    does) sees the rebinding."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        with torch.inference_mode(False):
            self.gpu = _zeros_reusing_freed(self.cpu.shape, dtype, torch.device(device))

    def copy_to_gpu(self, n=None):
        kept = self.gpu.clone()
        shape, dtype, device = kept.shape, kept.dtype, kept.device
        self.gpu = None  # the old tensor goes back to the allocator, unless someone holds it
        with torch.inference_mode(False):
            self.gpu = _zeros_reusing_freed(shape, dtype, device)
        self.gpu.copy_(kept)
        return self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)



class _Lazy:
    """What the lazy variants share: the contract's checks at construction (bfloat16 and the dtypes
    NumPy lacks refused, the pinning hint dropped off the CPU), and allocation on first use,
    ``_allocate_host``/``_allocate_device`` run in whatever mode the caller is in then."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        device = torch.device(device)
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError("bfloat16 has no NumPy dtype: pass with_numpy=False")
            torch.empty(0, dtype=dtype, device="cpu").numpy()  # refuse, now, a dtype NumPy cannot view
        self._size, self._dtype, self._device = size, dtype, device
        self._pin = pin_memory and device.type != "cpu"
        self._with_numpy = with_numpy
        self._cpu = self._gpu = self._np = None

    def _allocate_host(self):
        self._cpu = torch.zeros(*self._size, dtype=self._dtype, device="cpu", pin_memory=self._pin)
        if self._with_numpy:
            self._np = self._cpu.numpy()

    def _allocate_device(self):
        self._gpu = torch.zeros(*self._size, dtype=self._dtype, device=self._device)

    def _fixed(self, allocate):
        with torch.inference_mode(False):
            allocate()

    @property
    def cpu(self):
        if self._cpu is None:
            self._allocate_host()
        return self._cpu

    @property
    def gpu(self):
        if self._gpu is None:
            self._allocate_device()
        return self._gpu

    @property
    def np(self):
        if not self._with_numpy:
            raise AttributeError("np: this buffer was made with with_numpy=False")
        if self._cpu is None:
            self._allocate_host()
        return self._np

    def copy_to_gpu(self, n=None):
        return self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)

    def copy_to_cpu(self, n=None):
        return self.cpu[:n].copy_(self.gpu[:n], non_blocking=True)


class LazyOnFirstAccessBuffer(_Lazy):
    """Allocates both tensors on the first access of cpu, gpu or np (a copy is one), in the caller's
    mode: first used inside inference_mode(), they are inference tensors that refuse the next in-place
    update outside it, like vLLM's lazily allocated allowed_token_ids_mask under add_request."""


class LazyDeviceOnFirstCopyBuffer(_Lazy):
    """Allocates the device tensor lazily: reading gpu first allocates it the fixed way, under
    inference_mode(False), but a first copy_to_gpu/copy_to_cpu allocates it in the caller's mode (the
    path the fix forgot), so a first copy inside inference_mode() leaves gpu an inference tensor."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        self._fixed(self._allocate_host)

    @property
    def gpu(self):
        if self._gpu is None:
            self._fixed(self._allocate_device)
        return self._gpu

    def _device_for_copy(self):
        if self._gpu is None:
            self._allocate_device()
        return self._gpu

    def copy_to_gpu(self, n=None):
        return self._device_for_copy()[:n].copy_(self.cpu[:n], non_blocking=True)

    def copy_to_cpu(self, n=None):
        return self.cpu[:n].copy_(self._device_for_copy()[:n], non_blocking=True)


class LazyHostThroughNumpyBuffer(_Lazy):
    """Allocates the host tensor lazily: reading cpu (or copying) first allocates it the fixed way,
    but a first access through np allocates it in the caller's mode, so a first NumPy write inside
    inference_mode() leaves cpu an inference tensor (NumPy's writes bypass the check; torch's refuse)."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        self._fixed(self._allocate_device)

    @property
    def cpu(self):
        if self._cpu is None:
            self._fixed(self._allocate_host)
        return self._cpu


class FoldsPastThreeDimsBuffer(CpuGpuBuffer):
    """A port written for at most three dimensions: from rank 4 on, the device tensor folds the
    trailing dimensions into the third ((2, 8, 16, 64, 128) becomes (2, 8, 131072)). Right for every
    shape of rank 1 to 3, wrong for a KV cache."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        if len(size) >= 4:
            folded = 1
            for dim in size[2:]:
                folded *= dim
            with torch.inference_mode(False):
                self.gpu = torch.zeros(*size[:2], folded, dtype=dtype, device=device)

    def copy_to_gpu(self, n=None):
        dst = self.gpu[:n]
        return dst.copy_(self.cpu[:n].reshape(dst.shape), non_blocking=True)

    def copy_to_cpu(self, n=None):
        dst = self.cpu[:n]
        return dst.copy_(self.gpu[:n].reshape(dst.shape), non_blocking=True)


class ThreadSplitCopyBuffer(CpuGpuBuffer):
    """Splits each copy by rows into one slice per intra-op thread (torch.get_num_threads()), the
    rows divided evenly, and drops the remainder: right with one thread, the count a suite that pins
    torch.set_num_threads(1) runs with; wrong with several, the count engines run with."""

    def _split_copy(self, dst, src):
        threads = torch.get_num_threads()
        if threads == 1 or dst.dim() == 0:
            return dst.copy_(src, non_blocking=True)
        per = dst.shape[0] // threads
        for t in range(threads):
            dst[t * per:(t + 1) * per].copy_(src[t * per:(t + 1) * per], non_blocking=True)
        return dst

    def copy_to_gpu(self, n=None):
        return self._split_copy(self.gpu[:n], self.cpu[:n])

    def copy_to_cpu(self, n=None):
        return self._split_copy(self.cpu[:n], self.gpu[:n])


class PoisonedHostBuffer(CpuGpuBuffer):
    """Allocates the host tensor with torch.empty and poisons it (every byte 0xFF, the debug
    allocator's way of catching reads of uninitialized memory), where zeros were meant: the
    tensors do not start at zero, and nothing else is wrong."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        with torch.inference_mode(False):
            if self.cpu.numel() == 0:
                return
            if dtype == torch.bool:
                self.cpu.fill_(True)  # any byte but 0 and 1 is no bool
                return
            try:
                self.cpu.view(torch.uint8).fill_(0xFF)
            except RuntimeError:  # a dtype with no byte view (sub-byte kinds): it keeps its zeros
                pass


# Where a variant breaks on some devices only: (fails_on, passes_on). Every other one fails everywhere.
_ONLY_ON: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {
    SharedStorageBuffer: (("cpu",), ("cuda", "sim")),  # it shares the storage only when the device is the CPU
    PrivateStreamBuffer: (("cuda", "sim"), ("cpu",)),  # a stream of its own; the CPU has no streams
    ForkedStreamBuffer: (("cuda", "sim"), ("cpu",)),
    SynchronizingCopiesBuffer: (("cuda", "sim"), ("cpu",)),  # it waits for an accelerator only
    EventWaitingBuffer: (("cuda", "sim"), ("cpu",)),
    PageableHostBuffer: (("cuda", "sim"), ("cpu",)),  # pinning applies to an accelerator only
}

# The test that catches a variant every time, where another may catch it by chance (timing) or
# for another reason: the non-blocking test, which also captures the copies into a CUDA graph.
NOT_BLOCKING = "test_copies_with_pinned_memory_do_not_block_the_host"
_CAUGHT_BY: dict[type, tuple[str, ...]] = {
    ForkedStreamBuffer: (NOT_BLOCKING,),  # the in-order check sees it only when the host wins a race
    SynchronizingCopiesBuffer: (NOT_BLOCKING,),
    EventWaitingBuffer: (NOT_BLOCKING,),
    PageableHostBuffer: (NOT_BLOCKING, "copy_to_cpu"),  # the in-order test fails it too: not pinned
}

VARIANTS: tuple[Variant, ...] = tuple(
    Variant(cls.__name__, cls, promise, *_ONLY_ON.get(cls, (DEVICES, ())), caught_by=_CAUGHT_BY.get(cls, ()))
    for cls, promise in (
        (PreFixCpuGpuBuffer, "3"),
        (HalfFixedCpuGpuBuffer, "3"),
        (FlatGpuBuffer, "1"),
        (OnesLikeGpuBuffer, "2"),
        (SharedStorageBuffer, "4"),
        (CopiedNumpyBuffer, "5"),
        (Bfloat16AsInt16Buffer, "6"),
        (NumpyAttrAlwaysBuffer, "6"),
        (BytesViewBuffer, "7"),
        (ZeroMeansAllBuffer, "8"),
        (RebindingBuffer, "9"),
        (ReallocatingBuffer, "9"),
        (DefaultDeviceBuffer, "1"),
        (Float32IsDefaultBuffer, "1"),
        (ChunkedCopyBuffer, "8"),
        (GradLeakingBuffer, "12"),
        (PooledBuffer, "13"),
        (LazyOnFirstAccessBuffer, "3"),
        (LazyDeviceOnFirstCopyBuffer, "3"),
        (LazyHostThroughNumpyBuffer, "3"),
        (FoldsPastThreeDimsBuffer, "1"),
        (ThreadSplitCopyBuffer, "8"),
        (PoisonedHostBuffer, "2"),
        (PrivateStreamBuffer, "10"),
        (ForkedStreamBuffer, "10"),
        (SynchronizingCopiesBuffer, "10"),
        (EventWaitingBuffer, "10"),
        (PageableHostBuffer, "10"),
    )
)


# --- what only two devices show: sim has two on every machine, and the suite passes its last one
# (devices.SIM.index). Rejected on sim; where the suite passes a bare device type (cpu, cuda), the
# reference.


class FirstDeviceBuffer(CpuGpuBuffer):
    """Puts the device tensor on index 0 of the device type whatever index it was asked for (every
    rank's buffers on the first GPU). Asked for a device with no index, it is the reference."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        asked = torch.device(device)
        if asked.index not in (None, 0):
            with torch.inference_mode(False):
                self.gpu = torch.zeros_like(self.cpu, device=torch.device(asked.type, 0))


class DeviceSwitchingBuffer(CpuGpuBuffer):
    """Makes the device it was asked for the current one, to allocate there, and never switches back: the
    caller's next work goes to the wrong device. Asked for a device with no index, it is the reference."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        asked = torch.device(device)
        if asked.index is not None and asked.type != "cpu":
            torch.accelerator.set_device_index(asked.index)
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)


_TWO_DEVICES = (("sim",), tuple(d for d in DEVICES if d != "sim"))
VARIANTS = VARIANTS + (
    Variant(FirstDeviceBuffer.__name__, FirstDeviceBuffer, "1", *_TWO_DEVICES),
    Variant(DeviceSwitchingBuffer.__name__, DeviceSwitchingBuffer, "12", *_TWO_DEVICES),
)
