"""CpuGpuBuffer implementations written unlike the reference, and where the suite must accept each.

Each is correct on the devices of its ``passes_on``; ``fails_on`` names the devices where the
contract rightly rejects it, and the one promise it breaks there (tests/test_alternatives.py
checks both, and that every device of the registry is named).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from cpugpu_conformance.devices import NAMES as DEVICES
from cpugpu_conformance.reference import CpuGpuBuffer


class _SlicedCopies:
    """Copies written as one slice, ``[:n]`` (``[:None]`` is the whole tensor): the same two
    methods for every class below that copies this way, written once."""

    __slots__ = ()  # SlotsAndKeywords keeps its instances without a __dict__

    def copy_to_gpu(self, n=None):
        return self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)

    def copy_to_cpu(self, n=None):
        return self.cpu[:n].copy_(self.gpu[:n], non_blocking=True)


class EmptyThenZero(_SlicedCopies):
    """torch.empty followed by zero_(), under inference_mode(False)."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        with torch.inference_mode(False):
            self.cpu = torch.empty(size, dtype=dtype, device="cpu", pin_memory=pin_memory)
            self.gpu = torch.empty(size, dtype=dtype, device=device)
            if self.cpu.numel():  # zero_ of an empty bits tensor is not implemented; nothing to zero anyway
                self.cpu.zero_()
                self.gpu.zero_()
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError("NumPy has no bfloat16: construct with with_numpy=False")
            self.np = self.cpu.numpy()


class BlockingCopies:
    """Blocking copies, and slice(None, n) spelled out: right on the CPU; on CUDA a blocking copy is
    cudaMemcpyAsync plus a stream synchronize, so it waits for the work queued before it (promise 10)."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        with torch.inference_mode(mode=False):
            self.cpu = torch.zeros(*size, dtype=dtype, device="cpu", pin_memory=pin_memory)
            self.gpu = torch.zeros(*size, dtype=dtype, device=device)
        if with_numpy and dtype is torch.bfloat16:
            raise ValueError("with_numpy=True is impossible for bfloat16; pass with_numpy=False")
        if with_numpy:
            self.np = self.cpu.numpy()

    def _copy(self, dst, src, n):
        rows = slice(None, n)
        return dst[rows].copy_(src[rows], non_blocking=False)

    def copy_to_gpu(self, n=None):
        return self._copy(self.gpu, self.cpu, n)

    def copy_to_cpu(self, n=None):
        return self._copy(self.cpu, self.gpu, n)


@torch.inference_mode(False)
def _allocate(size, dtype, device, pin_memory):
    host = torch.zeros(size, dtype=dtype, device="cpu", pin_memory=pin_memory)
    return host, torch.zeros_like(host, device=device)


class DecoratedHelper:
    """Allocation in a helper decorated with @torch.inference_mode(False)."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        self.cpu, self.gpu = _allocate(size, dtype, device, pin_memory)
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError("bfloat16 cannot be viewed by NumPy; use with_numpy=False")
            self.np = self.cpu.numpy()

    # The reference's copies as they are: only the allocation is written another way here.
    copy_to_gpu = CpuGpuBuffer.copy_to_gpu
    copy_to_cpu = CpuGpuBuffer.copy_to_cpu


class DropsPinHintOffCuda(DecoratedHelper):
    """Drops pin_memory when there is no CUDA device (promise 11), and has extra methods."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        pin_memory = pin_memory and torch.cuda.is_available()
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)

    def __len__(self):
        return self.cpu.shape[0]

    def nbytes(self):
        return self.cpu.numel() * self.cpu.element_size()

    def clear(self):
        self.cpu.zero_()
        self.gpu.zero_()


class SlotsAndKeywords(_SlicedCopies):
    """__slots__, keyword-only flags with defaults, and a NumPy view made with np.asarray."""

    __slots__ = ("cpu", "gpu", "np")

    def __init__(self, *size, dtype=torch.float32, device="cpu", pin_memory=False, with_numpy=True):
        import numpy

        with torch.inference_mode(False):
            self.cpu = torch.zeros(size, dtype=dtype, device="cpu", pin_memory=pin_memory)
            self.gpu = torch.zeros(size, dtype=dtype, device=device)
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError("bfloat16: set with_numpy=False")
            self.np = numpy.asarray(self.cpu)


class ReadsDeviceType(DecoratedHelper):
    """A real port's way: `device` is a torch.device, and the pinning hint goes off CUDA by device.type."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        pin_memory = pin_memory and device.type == "cuda"
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)


class NumpyProperty(DecoratedHelper):
    """`np` is a property: a fresh ndarray over the same memory at each access (none without NumPy)."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=False)
        if with_numpy and dtype == torch.bfloat16:
            raise ValueError("bfloat16 cannot be viewed by NumPy; use with_numpy=False")
        if with_numpy:
            self.cpu.numpy()  # refuse, now, a dtype NumPy cannot view (promise 7)
        self._with_numpy = with_numpy

    @property
    def np(self):
        if not self._with_numpy:
            raise AttributeError("np: this buffer was made with with_numpy=False")
        return self.cpu.numpy()


def _numpy_dtype(dtype):
    """The NumPy dtype of a torch dtype, or None where NumPy has none (bfloat16, float8, ...)."""
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except (TypeError, RuntimeError):
        return None


class NumpyAllocated(_SlicedCopies):
    """The host tensor allocated by NumPy and wrapped with torch.from_numpy; `np` is that original
    array (NumPy gives an empty array zero strides), the device tensor torch.zeros_like of it. Torch
    allocates where NumPy cannot: a dtype NumPy lacks, or pinned memory."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        import numpy

        if with_numpy and dtype == torch.bfloat16:
            raise ValueError("NumPy has no bfloat16: construct with with_numpy=False")
        np_dtype = _numpy_dtype(dtype)
        with torch.inference_mode(False):
            if np_dtype is None or pin_memory:
                self.cpu = torch.zeros(size, dtype=dtype, device="cpu", pin_memory=pin_memory)
                array = self.cpu.numpy() if with_numpy else None
            else:
                array = numpy.zeros(size, dtype=np_dtype)
                self.cpu = torch.from_numpy(array)
            self.gpu = torch.zeros_like(self.cpu, device=device)
        if with_numpy:
            self.np = array


class _AllocatesOnFirstUse:
    """Checks what the contract checks at construction (bfloat16, the dtypes NumPy lacks), allocates
    on first use, and does it as the fix does: under inference_mode(False), whatever mode the caller
    is in then. The pinning hint goes off the CPU device, where pinning does not apply."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        device = torch.device(device)
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError("bfloat16 has no NumPy dtype: construct with with_numpy=False")
            torch.empty(0, dtype=dtype, device="cpu").numpy()  # refuse a dtype NumPy cannot view (promise 7)
        self._size, self._dtype, self._where = tuple(size), dtype, device
        self._pin = pin_memory and device.type != "cpu"
        self._with_numpy = with_numpy
        self._host = self._device_tensor = self._view = None

    @torch.inference_mode(False)
    def _host_tensor(self):
        if self._host is None:
            self._host = torch.zeros(self._size, dtype=self._dtype, device="cpu", pin_memory=self._pin)
            self._view = self._host.numpy() if self._with_numpy else None
        return self._host

    def _device(self):
        if self._device_tensor is None:
            with torch.inference_mode(False):
                self._device_tensor = torch.zeros(self._size, dtype=self._dtype, device=self._where)
        return self._device_tensor

    def _host_view(self):
        """What np reads, for the subclasses where np is a property: the host tensor's view, the
        host tensor allocated first; no attribute at all without NumPy."""
        if not self._with_numpy:
            raise AttributeError("np: made with with_numpy=False")
        self._host_tensor()
        return self._view


class LazyOnFirstAccess(_SlicedCopies, _AllocatesOnFirstUse):
    """cpu, gpu and np are properties; the first access of any (a copy is one) allocates both tensors."""

    def _both(self):
        self._host_tensor()
        self._device()

    @property
    def cpu(self):
        self._both()
        return self._host

    @property
    def gpu(self):
        self._both()
        return self._device_tensor

    @property
    def np(self):
        view = self._host_view()
        self._device()
        return view


class LazyDeviceOnFirstCopy(_AllocatesOnFirstUse):
    """The host tensor at construction; the device tensor on the first copy, or the first read of gpu."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        self.cpu = self._host_tensor()
        if with_numpy:
            self.np = self._view

    @property
    def gpu(self):
        return self._device()

    def copy_to_gpu(self, n=None):
        rows = slice(None, n)
        return self._device()[rows].copy_(self.cpu[rows], non_blocking=True)

    def copy_to_cpu(self, n=None):
        rows = slice(None, n)
        return self.cpu[rows].copy_(self._device()[rows], non_blocking=True)


class LazyHostThroughNumpy(_SlicedCopies, _AllocatesOnFirstUse):
    """The device tensor at construction; the host tensor, and its view, on the first use of cpu or np."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        self.gpu = self._device()

    @property
    def cpu(self):
        return self._host_tensor()

    np = property(_AllocatesOnFirstUse._host_view)


@dataclass(frozen=True)
class Alternative:
    cls: type
    fails_on: Mapping[str, str] = field(default_factory=dict)  # device -> the one promise it breaks there

    @property
    def name(self) -> str:
        return self.cls.__name__

    @property
    def passes_on(self) -> tuple[str, ...]:
        return tuple(d for d in DEVICES if d not in self.fails_on)


ALTERNATIVES = (
    Alternative(EmptyThenZero),
    Alternative(BlockingCopies, fails_on={"cuda": "10", "sim": "10"}),
    Alternative(DecoratedHelper),
    # Right where CUDA is the only accelerator; on sim, an accelerator too, pin_memory=True yields a
    # pageable host tensor: promise 10 (a port that drops the hint off CUDA breaks it on any other).
    Alternative(DropsPinHintOffCuda, fails_on={"sim": "10"}),
    Alternative(SlotsAndKeywords),
    Alternative(ReadsDeviceType, fails_on={"sim": "10"}),
    Alternative(NumpyProperty),
    Alternative(NumpyAllocated),
    Alternative(LazyOnFirstAccess),
    Alternative(LazyDeviceOnFirstCopy),
    Alternative(LazyHostThroughNumpy),
)
