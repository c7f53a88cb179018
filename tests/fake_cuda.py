"""A stand-in for ``torch.cuda`` that logs what a function of the registry asks of it.

The registry's CUDA functions (sync, the side-stream context, the refused synchronize, the
stall) are what the suite runs on a GPU, and what reproducers hold. Run against this on a
machine with no GPU (`patch_torch` puts it in torch.cuda's place: each function imports torch
in its body), they show, in order, which streams they synchronize or make wait and which
modes they set: the logic is tested on the CPU, the GPU only confirms what CUDA does with it.
"""

from __future__ import annotations

import contextlib
from typing import Any

SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}
# What the registry's functions read of torch.cuda: patch_torch replaces each with the fake's.
PATCHED = ("device_count", "current_device", "current_stream", "Stream", "stream", "device", "synchronize",
           "_sleep", "get_sync_debug_mode", "set_sync_debug_mode")


def _index(device: Any) -> int:
    """A device index from an int or a torch.device("cuda", i), as torch.cuda takes either."""
    return device.index if hasattr(device, "index") else int(device)


class FakeStream:
    def __init__(self, cuda: FakeCuda, name: str) -> None:
        self.cuda, self.name = cuda, name

    def synchronize(self) -> None:
        self.cuda.log.append(("synchronize", self.name))

    def wait_stream(self, other: FakeStream) -> None:
        self.cuda.log.append(("wait_stream", self.name, other.name))

    def query(self) -> bool:
        return self.cuda.idle

    def __repr__(self) -> str:
        return f"<stream {self.name}>"


class FakeCuda:
    def __init__(self, count: int = 1) -> None:
        self.count = count
        self.log: list[tuple[Any, ...]] = []
        self.index = 0  # the current device
        self.current = {i: FakeStream(self, f"default{i}") for i in range(count)}
        self.made = 0
        self.mode = 0
        self.idle = False  # what query() answers: True once every queued job is done

    # devices and streams
    def device_count(self) -> int:
        return self.count

    def current_device(self) -> int:
        return self.index

    def current_stream(self, device: Any = None) -> FakeStream:
        return self.current[self.index if device is None else _index(device)]

    def Stream(self, device: Any = None) -> FakeStream:  # noqa: N802 (torch's name)
        self.made += 1
        return FakeStream(self, f"side{self.made}")

    @contextlib.contextmanager
    def stream(self, stream: FakeStream):
        before = self.current[self.index]
        self.current[self.index] = stream
        self.log.append(("enter stream", stream.name))
        try:
            yield
        finally:
            self.current[self.index] = before
            self.log.append(("leave stream", stream.name))

    @contextlib.contextmanager
    def device(self, index: Any):
        before, self.index = self.index, _index(index)
        self.log.append(("enter device", self.index))
        try:
            yield
        finally:
            self.index = before

    def synchronize(self, device: Any = None) -> None:
        self.log.append(("whole device synchronize",))

    def _sleep(self, cycles: int) -> None:
        self.log.append(("sleep", self.index, cycles))

    # sync debug mode
    def get_sync_debug_mode(self) -> int:
        return self.mode

    def set_sync_debug_mode(self, mode: Any) -> None:
        self.mode = SYNC_DEBUG_MODES.get(mode, mode)
        self.log.append(("sync debug mode", self.mode))


def patch_torch(monkeypatch: Any, cuda: FakeCuda) -> FakeCuda:
    """Put `cuda` in torch.cuda's place for one test (pytest's monkeypatch undoes it)."""
    import torch

    for name in PATCHED:
        monkeypatch.setattr(torch.cuda, name, getattr(cuda, name))
    return cuda

