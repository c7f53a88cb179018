"""A stand-in for ``torch.cuda`` that logs what a function of the registry asks of it, and models
what CUDA would do with it.

It holds only what sim, the simulated accelerator, cannot show: sim runs the device-generic checks for
real (tests/test_sim_sync_checks.py, tests/test_sim_copy_checks.py). What stays is CUDA's own: the
registry's CUDA hooks, which read torch.cuda and torch._C (cuda_sync, which synchronizes only GPUs that
have a context; the side-stream context over torch.cuda; graph capture, torch 2.0's global mode
included), and torch's sync debug mode, which refuses a stream's synchronize during the non-blocking
check. `patch_torch` puts the fake in torch.cuda's place (each function imports torch in its body), and
the log shows, in order, which streams they synchronize or make wait and which modes they set: the logic
is tested on the CPU, the GPU only confirms what CUDA does with it.

The model, as far as the checks read it:

- A stream holds the jobs queued on it (``_sleep``) until something waits for them: its own
  ``synchronize()``, an event recorded behind them and synchronized, ``torch.cuda.synchronize()``
  (every stream of the device), or a copy into pageable memory (``driver_waits``, what CUDA
  does for one). A job never finishes on its own: the host is always faster than a stall,
  so ``query()`` answers False until something waited.
- The sync debug mode ("error") refuses a stream's ``synchronize()``, as torch's
  stream_synchronize does, and nothing else: not ``torch.cuda.synchronize()``, not an event's
  (torch checks neither), not a copy into pageable memory.
- Capture (``CUDAGraph``): capture_begin on a non-default stream makes it the capture's origin;
  a stream made to wait for a stream of the capture joins it as a fork, and the origin waiting
  for a fork joins it back. capture_end refuses a capture with a fork not joined back, with
  CUDA's message for cudaErrorStreamCaptureUnjoined, and ends the capture either way.
  Synchronizing a capturing stream is refused. Nothing queued during capture runs.
"""

from __future__ import annotations

import contextlib
from typing import Any

SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}
# What the registry's functions read of torch.cuda: patch_torch replaces each with the fake's (synchronize too,
# which cuda_sync must never call: the tests see it in the log).
PATCHED = ("device_count", "current_stream", "Stream", "stream", "device", "synchronize", "_sleep",
           "get_sync_debug_mode", "set_sync_debug_mode", "CUDAGraph")
# What the device-generic code these tests run reads of torch.accelerator (torch 2.6 on): the stall and idle
# on cuda (accelerator_stall, accelerator_idle) and ForkedStreamBuffer's wait for the caller's stream.
PATCHED_ACCELERATOR = {"current_stream": "current_stream", "device_index": "device"}
# torch's own messages (c10/cuda/CUDAFunctions.cpp; cudaGetErrorString of the capture errors).
REFUSED_SYNC = "called a synchronizing CUDA operation"
UNJOINED = "CUDA error: capture sequence contains a fork that was not joined to the primary stream"
CAPTURING = "CUDA error: operation not permitted when stream is capturing"


class FakeStream:
    def __init__(self, cuda: FakeCuda, name: str, device: int = 0) -> None:
        self.cuda, self.name, self.device = cuda, name, device
        self.jobs: list[Any] = []  # queued and not waited for, oldest first

    def synchronize(self) -> None:
        if self.cuda.mode == SYNC_DEBUG_MODES["error"]:
            raise RuntimeError(REFUSED_SYNC)  # torch checks before it waits: the jobs are still queued
        if self.cuda.capturing(self):
            raise RuntimeError(CAPTURING)
        self.cuda.log.append(("synchronize", self.name))
        self.jobs.clear()

    def wait_stream(self, other: FakeStream) -> None:
        self.cuda.log.append(("wait_stream", self.name, other.name))
        self.cuda.ordered(waiter=self, on=other)

    def query(self) -> bool:
        return not self.jobs

    def __enter__(self) -> FakeStream:  # `with stream:` (torch.Stream): current on its device until left
        self._made_current = self.cuda.stream(self)
        self._made_current.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._made_current.__exit__(*exc)

    def __repr__(self) -> str:
        return f"<stream {self.name}>"


class FakeEvent:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda
        self.stream: FakeStream | None = None
        self.behind: list[Any] = []  # the jobs queued before it, on its stream

    def record(self, stream: FakeStream | None = None) -> None:
        self.stream = stream or self.cuda.current_stream()
        self.behind = list(self.stream.jobs)
        self.cuda.log.append(("record event", self.stream.name))

    def synchronize(self) -> None:
        assert self.stream is not None, "an event synchronized before it was recorded"
        self.cuda.log.append(("event synchronize", self.stream.name))
        self.stream.jobs = [job for job in self.stream.jobs if job not in self.behind]


class FakeGraph:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        origin = self.cuda.current_stream()
        if origin.name.startswith("default"):
            raise RuntimeError("CUDA graphs must be captured on a non-default stream.")
        self.cuda.capture = {"origin": origin, "forks": set(), "joined": set()}
        self.cuda.log.append(("capture_begin", origin.name, capture_error_mode))

    def capture_end(self) -> None:
        capture, self.cuda.capture = self.cuda.capture, None  # ended, whatever CUDA says of it
        assert capture is not None, "capture_end with no capture under way"
        self.cuda.log.append(("capture_end", capture["origin"].name))
        if capture["forks"] - capture["joined"]:
            raise RuntimeError(UNJOINED)


class FakeCuda:
    def __init__(self, count: int = 1, contexts: set[int] | None = None) -> None:
        self.count = count
        self.contexts = set(range(count)) if contexts is None else contexts  # devices with a CUDA context
        self.log: list[tuple[Any, ...]] = []
        self.index = 0  # the current device
        self.current = {i: FakeStream(self, f"default{i}", i) for i in range(count)}
        self.streams = list(self.current.values())
        self.made = 0
        self.mode = 0
        self.capture: dict[str, Any] | None = None

    # devices and streams
    def device_count(self) -> int:
        return self.count

    def has_primary_context(self, index: int) -> bool:
        self.log.append(("has context?", index))
        return index in self.contexts

    def _index(self, device: Any) -> int:
        """A device index from an int or a torch.device; one with no index is the current device, as in torch."""
        index = device.index if hasattr(device, "index") else device
        return self.index if index is None else int(index)

    def current_stream(self, device: Any = None) -> FakeStream:
        return self.current[self.index if device is None else self._index(device)]

    def Stream(self, device: Any = None, priority: int = 0) -> FakeStream:  # noqa: N802 (torch's name)
        self.made += 1
        stream = FakeStream(self, f"side{self.made}", self.index if device is None else self._index(device))
        self.streams.append(stream)
        return stream

    def Event(self, enable_timing: bool = False, blocking: bool = False, device: Any = None) -> FakeEvent:  # noqa: N802
        return FakeEvent(self)

    def CUDAGraph(self) -> FakeGraph:  # noqa: N802 (torch's name)
        return FakeGraph(self)

    @contextlib.contextmanager
    def stream(self, stream: FakeStream):
        before = self.current[stream.device]
        self.current[stream.device] = stream
        self.log.append(("enter stream", stream.name))
        try:
            yield
        finally:
            self.current[stream.device] = before
            self.log.append(("leave stream", stream.name))

    @contextlib.contextmanager
    def device(self, index: Any):
        before, self.index = self.index, self._index(index)
        self.log.append(("enter device", self.index))
        try:
            yield
        finally:
            self.index = before

    def synchronize(self, device: Any = None) -> None:
        """cudaDeviceSynchronize: every stream of the device; torch does not refuse it."""
        index = self.index if device is None else self._index(device)
        self.log.append(("whole device synchronize", index))
        for stream in self.streams:
            if stream.device == index:
                stream.jobs.clear()

    def _sleep(self, cycles: int) -> None:
        self.log.append(("sleep", self.index, cycles))
        self.current[self.index].jobs.append(("sleep", cycles, len(self.log)))

    # what CUDA does on its own
    def driver_waits(self, stream: FakeStream | None = None) -> None:
        """A copy between the device and pageable memory: CUDA waits for the stream's jobs itself, with no
        call torch could refuse."""
        stream = stream or self.current_stream()
        self.log.append(("pageable copy waits", stream.name))
        stream.jobs.clear()

    # capture
    def capturing(self, stream: FakeStream) -> bool:
        return self.capture is not None and (stream is self.capture["origin"] or stream in self.capture["forks"])

    def ordered(self, waiter: FakeStream, on: FakeStream) -> None:
        """`waiter` waits for `on`: a fork of the capture when `on` is in it, a join when the origin waits."""
        if self.capture is None or not self.capturing(on):
            return
        if waiter is self.capture["origin"]:
            self.capture["joined"].add(on)
        else:
            self.capture["forks"].add(waiter)
            self.capture["joined"].discard(waiter)

    # sync debug mode
    def get_sync_debug_mode(self) -> int:
        return self.mode

    def set_sync_debug_mode(self, mode: Any) -> None:
        self.mode = SYNC_DEBUG_MODES.get(mode, mode)
        self.log.append(("sync debug mode", self.mode))


def patch_torch(monkeypatch: Any, cuda: FakeCuda) -> FakeCuda:
    """Put `cuda` in torch.cuda's place (and torch.accelerator's) for one test (pytest's monkeypatch undoes it), and its answer to
    whether a device has a CUDA context in torch._C's (absent from a CPU-only build)."""
    import torch

    for name in PATCHED:
        monkeypatch.setattr(torch.cuda, name, getattr(cuda, name))
    for name, fake in PATCHED_ACCELERATOR.items():
        if hasattr(torch, "accelerator"):
            monkeypatch.setattr(torch.accelerator, name, getattr(cuda, fake))
    monkeypatch.setattr(torch._C, "_cuda_hasPrimaryContext", cuda.has_primary_context, raising=False)
    return cuda
