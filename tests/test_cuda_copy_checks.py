"""Promise 10's copy checks on CUDA, against a logging stand-in for torch.cuda (fake_cuda.py), each
run as the suite runs it and as a reproducer defines it: how to see a copy block, or why none can be
seen (CUDA_LAUNCH_BLOCKING=1, no way to queue a long job); the sync debug mode, which refuses a stream's
synchronize during the checked copy and nothing else; and the CUDA graph capture that refuses a fork
of the caller's stream never joined back. The device-generic parts (the stall and idle, the ways a copy
waits, the join bookkeeping) run for real on sim, in tests/test_sim_copy_checks.py.
"""

from __future__ import annotations

import dataclasses
import gc
import types

import pytest
import torch
from cuda_check_helpers import (
    CUDA,
    CUDA_ENV,
    as_run_fixture,  # noqa: F401 - the fixture `as_run`
    fake_cuda_fixture,  # noqa: F401 - the fixture `fake_cuda`
)
from fake_cuda import REFUSED_SYNC, UNJOINED, FakeCuda

from cpugpu_conformance import devices
from cpugpu_conformance.reference import CpuGpuBuffer
from cpugpu_conformance.testing.buffer.device_promises import (
    copy_joins_the_caller_stream,
    copy_returns_before_queued_work,
)
from cpugpu_conformance.testing.shared.checks import COPY_METHODS
from cpugpu_conformance.variants import ForkedStreamBuffer, PageableHostBuffer, PrivateStreamBuffer

# --- the non-blocking check: which method, or why none (item 7)


@pytest.mark.parametrize(("environ", "forbids", "method", "refuse_sync"), [
    ({}, True, "stall", True),
    ({CUDA_ENV: "0"}, True, "stall", True),
    ({CUDA_ENV: ""}, True, "stall", True),
    ({}, False, "stall", False),  # torch < 1.10: the stall alone
    ({CUDA_ENV: "1"}, True, None, False),
    ({CUDA_ENV: "1"}, False, None, False),
])
def test_how_to_see_a_copy_block(environ, forbids, method, refuse_sync):
    how = devices.non_blocking_check(devices.CUDA, environ, forbids)
    assert (how.method, how.refuse_sync) == (method, refuse_sync)
    if method is None:
        assert how.reason.startswith("CUDA_LAUNCH_BLOCKING=1 makes every cuda launch and copy wait") and "cannot be seen" in how.reason
    else:
        assert how.reason is None


def test_a_device_with_no_way_to_see_a_copy_block_is_untested_with_why():
    bare = devices.Device("fake", pinning=True)
    how = devices.non_blocking_check(bare, {}, True)
    assert how.method is None and "cannot be seen" in how.reason
    assert devices.non_blocking_check(devices.CPU, {CUDA_ENV: "1"}, True).method is None  # nothing of CUDA's applies


def test_refusing_synchronizes_alone_is_no_check():
    """torch refuses a stream's synchronize, not the device's, an event's or a copy into pageable memory."""
    refuses_only = dataclasses.replace(devices.CUDA, stall=None)
    how = devices.non_blocking_check(refuses_only, {}, True)
    assert how.method is None and "no way to queue a long job on cuda" in how.reason


def test_this_torch_can_refuse_a_hidden_synchronize():
    assert devices.CUDA.forbids_sync() == hasattr(torch.cuda, "set_sync_debug_mode")
    assert not devices.CPU.forbids_sync()


class _Buf:
    """A buffer on cuda:0 whose copy_to_gpu, from its `from_call`-th call on, raises `raises` or waits for the
    queued work the way it is told (None: it does not); it notes the sync debug mode each call ran under."""

    def __init__(self, cuda: FakeCuda, waits: str | None = None, raises: str | None = None, from_call: int = 1) -> None:
        self.cuda, self.waits, self.raises, self.from_call, self.calls = cuda, waits, raises, from_call, 0
        self.gpu = types.SimpleNamespace(device=torch.device("cuda", 0))
        self.cpu = types.SimpleNamespace(is_pinned=lambda: True)
        self.modes_seen: list[int] = []

    def copy_to_gpu(self, n=None):
        self.calls += 1
        self.modes_seen.append(self.cuda.mode)
        self.cuda.log.append(("copy", self.calls))
        if self.calls < self.from_call:
            return
        if self.raises:
            raise RuntimeError(self.raises)
        self._wait()

    def _wait(self):
        stream = self.cuda.current_stream(self.gpu.device)
        if self.waits == "stream":  # what a blocking copy does: torch's memcpy_and_sync
            stream.synchronize()
        elif self.waits == "device":
            self.cuda.synchronize()
        elif self.waits == "event":
            done = self.cuda.Event()
            done.record()
            done.synchronize()
        elif self.waits == "pageable":
            self.cuda.driver_waits(stream)


# What sim shows for real (tests/test_sim_copy_checks.py): a copy that does not wait passes, warmed up
# before the stall, with garbage collection off; one that waits fails, whatever way it waits; waiting on the
# first call only, or on two tries of three, passes; the stall is on the buffer's own device; the variants
# that wait after each copy fail and the copies that do not pass. What only CUDA has stays here: its sync
# debug mode, which refuses a stream's synchronize during the checked copy and nothing else.


def _non_blocking(as_run, buf) -> None:
    as_run(copy_returns_before_queued_work)(buf, "copy_to_gpu", None, CUDA, devices.CUDA.sync_refusal)


def _sleeps(cuda: FakeCuda) -> list[tuple]:
    return [entry for entry in cuda.log if entry[0] == "sleep"]


def test_synchronizes_are_refused_during_the_checked_copy_only_and_the_caller_s_mode_is_put_back(fake_cuda, as_run):
    cuda = fake_cuda()
    cuda.mode = 1  # whatever the caller had
    buf = _Buf(cuda)
    _non_blocking(as_run, buf)
    assert cuda.mode == 1
    assert buf.modes_seen == [1, 2]  # the warm-up in the caller's mode, then the copy checked (one try) in "error"


@pytest.mark.parametrize("waits", ["device", "event", "pageable", "stream"])
def test_with_synchronizes_refused_a_copy_that_waits_fails_whatever_way_it_waits(fake_cuda, as_run, waits):
    """The one way torch refuses, a stream's synchronize, fails at once, named; the others (a device or event
    synchronize, a copy into pageable memory) are not refused, and fail on the stall."""
    cuda = fake_cuda()
    refused = waits == "stream"  # the second signal names it
    expected = (rf"copy_to_gpu\(None\) synchronized with the device \({REFUSED_SYNC}\)" if refused else
                r"copy_to_gpu\(None\) returned only once the work queued before it on the caller's stream was done "
                r"\(3 times out of 3\)")
    with pytest.raises(AssertionError, match=expected):
        _non_blocking(as_run, _Buf(cuda, waits=waits))
    assert len(_sleeps(cuda)) == (1 if refused else 3)
    assert cuda.mode == 0 and gc.isenabled()


def test_with_synchronizes_refused_another_error_of_the_copy_is_its_own_and_the_mode_is_put_back(fake_cuda, as_run):
    cuda = fake_cuda()
    buf = _Buf(cuda, raises="out of memory", from_call=2)  # the checked copy raises, in "error" mode
    with pytest.raises(RuntimeError, match="^out of memory$"):
        _non_blocking(as_run, buf)
    assert buf.modes_seen == [0, 2] and cuda.mode == 0 and gc.isenabled()


class OnFakeCuda:
    """A real buffer made on the CPU, as the checks see one on cuda:0: its copies run as they are, and
    each torch.cuda call they make goes to the fake. Its host tensor is taken as pinned (`pinned`)."""

    def __init__(self, buf, pinned: bool = True) -> None:
        self.buf = buf
        self.gpu = types.SimpleNamespace(device=torch.device("cuda", 0))
        self.cpu = types.SimpleNamespace(is_pinned=lambda: pinned)

    def copy_to_gpu(self, n=None):
        return self.buf.copy_to_gpu(n)

    def copy_to_cpu(self, n=None):
        return self.buf.copy_to_cpu(n)


def _made(Buffer, cuda: FakeCuda):
    """Buffer on the CPU, with its CUDA path switched on where it has one (a stream of the fake's)."""
    buf = Buffer(4, 3, dtype=torch.float32, device=torch.device("cpu"), pin_memory=False, with_numpy=False)
    if isinstance(buf, PrivateStreamBuffer):
        buf._stream = cuda.Stream()
    return buf


def test_the_pageable_variant_never_pins_its_host_tensor():
    """On CUDA its copy_to_cpu is a copy into pageable memory, which CUDA makes wait (the fake's driver_waits)."""
    buf = PageableHostBuffer(4, dtype=torch.uint8, device=torch.device("cpu"), pin_memory=True, with_numpy=False)
    assert not buf.cpu.is_pinned()


# --- a fork of the caller's stream must be joined back: a CUDA graph capture refuses one that is not (item 2)
# The capture is CUDA's; sim's join bookkeeping, and garbage collection off during the check, are shown in
# test_sim_copy_checks.py.


class JoinedForkBuffer(PrivateStreamBuffer):
    """Correct: copies on a stream of its own that waits for the caller's, and that the caller's waits for."""

    def _copy(self, copy, n):
        if self._stream is None:
            return copy(n)
        caller = torch.cuda.current_stream(self.gpu.device)
        self._stream.wait_stream(caller)
        with torch.cuda.stream(self._stream):
            out = copy(n)
        caller.wait_stream(self._stream)
        return out

    def copy_to_gpu(self, n=None):
        return self._copy(super().copy_to_gpu, n)

    def copy_to_cpu(self, n=None):
        return self._copy(super().copy_to_cpu, n)


def _joins(as_run, buf, method="copy_to_gpu", n=2) -> None:
    as_run(copy_joins_the_caller_stream)(buf, method, n)


@pytest.mark.parametrize("method", COPY_METHODS)
def test_a_fork_not_joined_back_fails_the_capture_every_time(fake_cuda, as_run, method):
    cuda = fake_cuda()
    with pytest.raises(AssertionError, match=rf"buf.{method}\(2\) left work on a stream forked from the caller's "
                                             rf"current stream that the caller's never waits for \({UNJOINED}\)"):
        _joins(as_run, OnFakeCuda(_made(ForkedStreamBuffer, cuda)), method)
    assert cuda.capture is None and gc.isenabled()  # the capture is over, whatever it found
    begun = next(entry for entry in cuda.log if entry[0] == "capture_begin")
    assert begun[1].startswith("side") and begun[2] == "relaxed"  # on a stream of its own, not the caller's


@pytest.mark.parametrize("Buffer", [CpuGpuBuffer, JoinedForkBuffer, PrivateStreamBuffer])
def test_a_copy_whose_work_the_caller_s_stream_waits_for_passes_the_capture(fake_cuda, as_run, Buffer):
    """The reference; a fork joined back; and a stream that never waits for the caller's (not in the capture at
    all: the in-order check catches that one, by its stall)."""
    cuda = fake_cuda()
    _joins(as_run, OnFakeCuda(_made(Buffer, cuda)))
    assert [entry[0] for entry in cuda.log if entry[0].startswith("capture")] == ["capture_begin", "capture_end"]
    assert ("synchronize", "default0") in cuda.log and gc.isenabled()


def test_a_copy_of_pageable_memory_is_not_captured(fake_cuda, as_run):
    """torch refuses to capture it; an unpinned host tensor fails promise 10 where pin_memory=True asked for one."""
    cuda = fake_cuda()
    _joins(as_run, OnFakeCuda(_made(ForkedStreamBuffer, cuda), pinned=False))
    assert not [entry for entry in cuda.log if entry[0].startswith("capture")]


def test_a_copy_that_raises_under_capture_raises_and_the_capture_is_over(fake_cuda, as_run):
    cuda = fake_cuda()
    with pytest.raises(RuntimeError, match="^not capturable$"):
        _joins(as_run, _Buf(cuda, raises="not capturable"))
    assert cuda.capture is None and gc.isenabled()
    assert [entry[0] for entry in cuda.log if entry[0].startswith("capture")] == ["capture_begin", "capture_end"]


def test_on_torch_2_0_the_capture_is_in_global_mode(fake_cuda, as_run, monkeypatch):
    """torch 2.0's capture_begin has no capture_error_mode: the capture still runs, in CUDA's default mode."""
    cuda = fake_cuda()

    class Torch20Graph(type(cuda.CUDAGraph())):
        def capture_begin(self, pool=None):
            super().capture_begin(pool)

    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: Torch20Graph(cuda))
    with pytest.raises(AssertionError, match=UNJOINED):
        _joins(as_run, OnFakeCuda(_made(ForkedStreamBuffer, cuda)))
    assert ("capture_begin", "side2", "global") in cuda.log


def test_another_refusal_of_the_capture_is_not_taken_for_a_fork(fake_cuda, as_run):
    """A copy that synchronizes the capturing stream: CUDA's error is the copy's own, not an unjoined fork."""
    cuda = fake_cuda()
    with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
        _joins(as_run, _Buf(cuda, waits="stream"))
    assert cuda.capture is None
