"""Promises 10 and 11: an accelerator's copies, and pin_memory=True without an accelerator (recorded).

Each runs only where its promise applies (promises.not_applicable: promise 10 on an accelerator,
CUDA or sim, promise 11 on the CPU of a machine with no accelerator): elsewhere it is deselected, so the
result says "not applicable", never "skipped". How to synchronize a device (sync(): the
caller's current stream), queue a long job there, capture work without running it, or refuse a
hidden synchronize come from the registry, devices.py, written over torch's device-generic
API where torch has it; a check the machine cannot make is skipped with the reason.

PYTEST_DONT_REWRITE (why: cpugpu_conformance.testing's docstring).
"""

from __future__ import annotations

import gc
import os

import pytest
import torch
from hypothesis import strategies as st

from cpugpu_conformance import devices
from cpugpu_conformance import promises as P

from ..shared import strategies as s
from ..shared.checks import COPY_METHODS
from ..shared.helpers import fill_bytes, raw, sync
from ..shared.reproducer import Name, per_device
from ..shared.stamps import contract_skip
from .base import BufferTests, contract_test, property_test


@per_device("stall")
def stall(buf):
    """Queue a long job on the current stream of buf's device (devices.py)."""
    devices.get(buf.gpu.device.type).stall(buf)


@per_device("idle")
def idle(buf):
    """Whether every job queued on the current stream of buf's device is done (devices.py)."""
    return devices.get(buf.gpu.device.type).idle(buf)


@per_device("capture")
def capture_copy(buf, copying):
    """Run copying() while the caller's stream on buf's device is recorded, not run; what the device said of
    work left on a stream the caller's never waits for, or None (devices.py)."""
    return devices.get(buf.gpu.device.type).capture(buf, copying)


@per_device("forbid_sync")
def forbid_sync(device):
    """From now a synchronize hidden in a call raises; returns what allow_sync puts back (devices.py)."""
    return devices.get(device.type).forbid_sync(device)


@per_device("allow_sync")
def allow_sync(device, previous):
    devices.get(device.type).allow_sync(device, previous)


def pinned_when_asked(buf, pin_memory):
    if pin_memory:
        assert buf.cpu.is_pinned(), "pin_memory=True, yet buf.cpu is not in pinned memory"


def copy_lands_in_order(buf, method, n, device):
    """Work queued on the caller's current stream before a copy lands before it, and the copy has
    landed once that stream is synchronized. The work (a copy of `queued` into buf.gpu) waits
    behind a long job, so a copy made on a stream the caller's does not wait for lands first,
    and is caught every time. A copy on a stream that waits for the caller's but that the caller's
    never waits for lands after the work, and almost always before the host reads: timing cannot
    catch it, copy_joins_the_caller_stream does."""
    fill_bytes(buf.cpu, seed=1)
    queued = torch.empty_like(buf.gpu)
    fill_bytes(queued, seed=2)
    sync(buf.gpu.device)
    host_before = raw(buf.cpu)
    stall(buf)
    buf.gpu.copy_(queued)  # on the caller's stream, behind the long job; element-wise, so any layout
    getattr(buf, method)(n)
    sync(buf.gpu.device)
    if method == "copy_to_gpu":
        expected, got = raw(queued), raw(buf.gpu)
        expected[:n] = host_before[:n]
    else:
        expected, got = host_before, raw(buf.cpu)
        expected[:n] = raw(queued)[:n]
    assert (got == expected).all(), (
        f"{method}(n) did not land in order on the caller's current stream: after the work queued there "
        "before it, and by the time that stream was synchronized"
    )


def copy_returns_before_queued_work(buf, method, n, device, sync_refusal, tries=3):
    """From pinned memory the copy returns without waiting for the work queued before it. The evidence:
    with a long job queued on the caller's stream, the copy returns while the job still runs. A copy
    that waits, by any means (a stream, event or device synchronize, a copy into pageable memory),
    finds the job done every time; one that does not finds it running unless the host was held up
    longer than the job takes, so it fails only when all `tries` find the job done (garbage collection,
    the host's longest pause, is off meanwhile). The copy is made once first: nothing a first call
    does (CUDA loads a kernel when first used, and loading may wait for the device) happens behind the
    job. With `sync_refusal` (this torch can refuse a synchronize), a refused one fails at once, naming
    the call."""
    getattr(buf, method)(n)
    sync(buf.gpu.device)
    for _ in range(tries):
        previous = forbid_sync(device) if sync_refusal else None
        collecting = gc.isenabled()
        gc.disable()
        try:
            stall(buf)  # a long job queued on the caller's stream, ahead of the copy
            try:
                getattr(buf, method)(n)
            except RuntimeError as exc:
                if not sync_refusal or sync_refusal not in str(exc):
                    raise
                raise AssertionError(f"buf.{method}({n!r}) synchronized with the device ({exc}): from pinned "
                                     "memory it must not wait for the work queued before it") from None
            still_running = not idle(buf)
        finally:
            if collecting:
                gc.enable()
            if sync_refusal:
                allow_sync(device, previous)
        sync(buf.gpu.device)
        if still_running:
            return
    raise AssertionError(f"buf.{method}({n!r}) returned only once the work queued before it on the caller's "
                         f"stream was done ({tries} times out of {tries}): from pinned memory it must not wait for it")


def copy_joins_the_caller_stream(buf, method, n):
    """Whatever the copy queues on another stream, the caller's current stream waits for: a stream forked
    from the caller's (made to wait for it) and never joined back leaves the copy unfinished when the
    caller's stream is synchronized. Seen by capturing the copy (on CUDA into a graph, which refuses an
    unjoined fork every time; on sim by its bookkeeping of which stream waited for which), where timing
    almost never sees it (copy_lands_in_order). Only a copy of
    pinned memory can be captured: a pageable buffer is promise 10's failure already (pinned_when_asked).
    Garbage collection is off during the capture: a pinned buffer freed then would record its release
    into the graph."""
    if not buf.cpu.is_pinned():
        return
    sync(buf.gpu.device)
    collecting = gc.isenabled()
    gc.disable()
    try:
        refused = capture_copy(buf, lambda: getattr(buf, method)(n))
    finally:
        if collecting:
            gc.enable()
    assert refused is None, (
        f"buf.{method}({n!r}) left work on a stream forked from the caller's current stream that the caller's "
        f"never waits for ({refused}): the copy may not have landed when the caller's stream is synchronized"
    )
    sync(buf.gpu.device)


def made_with_pin_memory(buf, size):
    """Promise 11, when the buffer is made: it is still a valid buffer. Returns whether it is pinned."""
    assert tuple(buf.cpu.shape) == size and tuple(buf.gpu.shape) == size
    assert not raw(buf.cpu).any() and not raw(buf.gpu).any(), "the buffer is not zeroed"
    return buf.cpu.is_pinned()


def _headline(exc: BaseException) -> str:
    """Type and first sentence: torch's messages go on with advice and URLs that change more often."""
    text = str(exc).strip().splitlines()
    sentence = text[0].split(". ")[0][:120] if text else ""
    return f"{type(exc).__name__}: {sentence}" if sentence else type(exc).__name__


class DeviceTests(BufferTests):
    """Promise 10 (on an accelerator: copies in order on the caller's stream, not blocking from pinned memory)
    and promise 11 (pin_memory=True with no accelerator: either outcome, recorded)."""

    @pytest.fixture
    def non_blocking_check(self, record, device: str) -> devices.NonBlockingCheck:
        """How this torch lets the suite see a copy block (devices.non_blocking_check); where it cannot,
        the contract skips the test with the reason: untested, never passed."""
        dev = devices.get(device)
        how = devices.non_blocking_check(dev, os.environ, dev.forbids_sync())
        if how.method is None:
            contract_skip(record, how.reason or "this machine cannot see whether a copy blocks")
        return how

    @property_test(P.CUDA_SPECIFICS)
    def test_cuda_copies_land_in_order_on_the_caller_stream(self, record, device, data):
        dev = devices.get(device)
        assert dev.stall, f"the registry says promise 10 applies to {device}, but not how to queue work there"
        sc = self.build(record, device, data, s.byte_dtype(device), contexts=True, nonempty=True)
        sc.bind(n=data.draw(s.slice_end(sc["size"][0]), label="n"))
        sc.call(pinned_when_asked)
        for method in data.draw(st.permutations(COPY_METHODS), label="methods"):
            sc.call(copy_lands_in_order, Name("buf"), method, Name("n"), Name("device"))

    @pytest.mark.parametrize("method", ["copy_to_gpu", "copy_to_cpu"])
    @property_test(P.CUDA_SPECIFICS)
    def test_copies_with_pinned_memory_do_not_block_the_host(self, record, device, method, non_blocking_check, data):
        """From pinned memory a copy returns without waiting for queued work, and whatever it queues on
        another stream, the caller's stream waits for (a capture shows a fork left unjoined)."""
        dev = devices.get(device)
        assert dev.capture, f"the registry says promise 10 applies to {device}, but not how to capture work there"
        sc = self.build(record, device, data, s.byte_dtype(device), contexts=True, nonempty=True, pin_memory=True)
        sc.bind(method=method, n=data.draw(s.slice_end(sc["size"][0]), label="n"))
        refusal = dev.sync_refusal if non_blocking_check.refuse_sync else None
        sc.call(copy_returns_before_queued_work, Name("buf"), Name("method"), Name("n"), Name("device"), refusal)
        sc.call(copy_joins_the_caller_stream, Name("buf"), Name("method"), Name("n"))

    @pytest.mark.parametrize("size", [(4,), (0,)], ids=["nonempty", "zero-size"])
    @contract_test(P.PIN_WITHOUT_ACCELERATOR)
    def test_pin_memory_on_cpu_is_recorded(self, record, device, size):
        """Either outcome is allowed; a buffer that is made must still be a valid buffer."""
        sc = self.scenario(record, device, title="pin_memory=True with no accelerator", size=size,
                           dtype=torch.float32, pin_memory=True, with_numpy=True)
        try:
            sc.call(Name("make"), into="buf")
        except Exception as exc:  # torch refusing the hint is allowed (promise 11)
            record.observe(f"size {size}: raises {_headline(exc)}")
            return
        pinned = sc.call(made_with_pin_memory)
        # Deselected where an accelerator is present (promises.not_applicable): there is none here.
        record.observe(f"size {size}: accepted (no accelerator), cpu.is_pinned()={pinned}")
