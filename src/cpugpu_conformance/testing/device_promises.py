"""Promises 10 and 11: CUDA specifics, and pin_memory=True without an accelerator (recorded).

Each runs only where its promise applies (promises.not_applicable: promise 10 on CUDA,
promise 11 on the CPU of a machine with no accelerator): elsewhere it is deselected, so the
result says "not applicable", never "skipped". How to synchronize a device (sync(): the
caller's current stream), queue a long job there, or refuse a hidden synchronize come from
the registry, devices.py; a check the machine cannot make is skipped with the reason.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import strategies as st

from cpugpu_conformance import devices
from cpugpu_conformance import promises as P

from . import strategies as s
from .base import BufferTests, contract_test, property_test
from .checks import COPY_METHODS
from .helpers import fill_bytes, raw, sync
from .reproducer import Name, per_device
from .stamps import contract_skip


@per_device("stall")
def stall(buf):
    """Queue a long job on the current stream of buf's device (devices.py)."""
    devices.get(buf.gpu.device.type).stall(buf)


@per_device("idle")
def idle(buf):
    """Whether every job queued on the current stream of buf's device is done (devices.py)."""
    return devices.get(buf.gpu.device.type).idle(buf)


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
    and is caught every time."""
    fill_bytes(buf.cpu, seed=1)
    queued = torch.empty_like(buf.gpu)
    fill_bytes(queued, seed=2)
    sync(device)
    host_before = raw(buf.cpu)
    stall(buf)
    buf.gpu.copy_(queued)  # on the caller's stream, behind the long job; element-wise, so any layout
    getattr(buf, method)(n)
    sync(device)
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


def copy_refusing_sync(buf, method, n, device, sync_refusal):
    """The copy runs with synchronizing forbidden: a hidden wait for queued work raises, deterministically."""
    sync(device)
    previous = forbid_sync(device)
    try:
        getattr(buf, method)(n)
    except RuntimeError as exc:
        if sync_refusal not in str(exc):
            raise
        raise AssertionError(f"buf.{method}({n!r}) synchronized with the device ({exc}): from pinned memory "
                             "it must not wait for the work queued before it") from None
    finally:
        allow_sync(device, previous)
    sync(device)


def copy_outlasting_a_stall(buf, method, n, device):
    """The fallback, by timing: with a long job queued ahead, the copy returns while the job still runs."""
    sync(device)
    stall(buf)  # a long job queued on the stream, ahead of the copy
    getattr(buf, method)(n)
    still_busy = not idle(buf)
    sync(device)
    assert still_busy, (
        f"buf.{method}(n) waited for the device's queued work: from pinned memory it must not block the host"
    )


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
    """Promise 10 (on CUDA: copies in order on the caller's stream, not blocking from pinned memory)
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
        """The copies are non-blocking: from pinned memory a copy returns without waiting for queued work."""
        dev = devices.get(device)
        sc = self.build(record, device, data, s.byte_dtype(device), contexts=True, nonempty=True, pin_memory=True)
        sc.bind(method=method, n=data.draw(s.slice_end(sc["size"][0]), label="n"))
        if non_blocking_check.method == "forbid_sync":
            sc.call(copy_refusing_sync, Name("buf"), Name("method"), Name("n"), Name("device"), dev.sync_refusal)
        else:
            sc.call(copy_outlasting_a_stall)

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
