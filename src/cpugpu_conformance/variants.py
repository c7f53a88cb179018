"""Deliberately broken CpuGpuBuffer implementations, each breaking one promise of CONTRACT.md.

They exist to prove the suite has teeth: ``tests/test_variants.py`` runs the whole suite
against every one and asserts that it fails on the promise the variant breaks, on every
device where it breaks it (``Variant.fails_on``), and passes where its bug cannot happen
(``Variant.passes_on``). The pre-fix class from the original vLLM bug comes first.

Put one under test by hand with, e.g.::

    pytest conformance --impl cpugpu_conformance.variants:PreFixCpuGpuBuffer
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cpugpu_conformance.devices import NAMES as DEVICES
from cpugpu_conformance.reference import CpuGpuBuffer
from cpugpu_conformance.variant_buffers import (  # noqa: F401  (every class: variants is their documented home)
    Bfloat16AsInt16Buffer,
    BytesViewBuffer,
    ChunkedCopyBuffer,
    CopiedNumpyBuffer,
    DefaultDeviceBuffer,
    EventWaitingBuffer,
    FlatGpuBuffer,
    Float32IsDefaultBuffer,
    ForkedStreamBuffer,
    GradLeakingBuffer,
    HalfFixedCpuGpuBuffer,
    NumpyAttrAlwaysBuffer,
    OnesLikeGpuBuffer,
    PageableHostBuffer,
    PooledBuffer,
    PreFixCpuGpuBuffer,
    PrivateStreamBuffer,
    RebindingBuffer,
    SharedStorageBuffer,
    SkipsUnchangedCopyBuffer,
    SynchronizingCopiesBuffer,
    VersionCachedCopyBuffer,
    ZeroMeansAllBuffer,
    _WaitsAfterEachCopy,
)


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
        (SkipsUnchangedCopyBuffer, "5"),
        (VersionCachedCopyBuffer, "8"),
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
