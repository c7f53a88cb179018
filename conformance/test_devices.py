"""Promises 10 and 11: CUDA specifics, and pin_memory=True without an accelerator (recorded).

Each runs only on the devices its promise applies to (promises.APPLIES_TO): elsewhere it
is deselected, so the result says "not applicable", never "skipped". How to synchronize
a device (sync()) and whether one is an accelerator come from the registry, devices.py.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from cpugpu_conformance import devices

from . import strategies as s
from .repro import Scenario
from .scenarios import build
from .snippets import BYTE_HELPERS, CONSTRUCT


@pytest.mark.promise("10")
@given(data=st.data())
def test_cuda_pinned_memory_and_non_blocking_copies(Buffer, record, device, data):
    sc = build(Buffer, record, "10", device, data, s.byte_dtype(device), contexts=True, nonempty=True)
    sc.run(
        """
        if pin_memory:
            assert buf.cpu.is_pinned(), "pin_memory=True, yet buf.cpu is not in pinned memory"
        fill_bytes(buf.cpu, seed=1)
        sent = raw(buf.cpu)
        buf.copy_to_gpu()
        sync()
        assert (raw(buf.gpu) == sent).all(), "after copy_to_gpu and a synchronize, buf.gpu lacks the data"
        fill_bytes(buf.gpu, seed=2)
        sync()
        expected = raw(buf.gpu)
        buf.copy_to_cpu()
        sync()
        assert (raw(buf.cpu) == expected).all(), "after copy_to_cpu and a synchronize, buf.cpu lacks the data"
        """
    )


@pytest.mark.promise("10")
@pytest.mark.parametrize("method", ["copy_to_gpu", "copy_to_cpu"])
def test_copies_with_pinned_memory_do_not_block_the_host(Buffer, record, device, method):
    """The copies are non-blocking: with a long job queued ahead, a copy returns before the job ends."""
    dev = devices.get(device)
    assert dev.stall and dev.idle, f"the registry says promise 10 applies to {device}, but not how to queue work there"
    sc = Scenario(Buffer, record, "10", "Devices", device, size=(1 << 16,), dtype=torch.float32, pin_memory=True,
                  with_numpy=False)
    sc.run(BYTE_HELPERS)
    sc.run(f"buf = {CONSTRUCT}")
    sc.run(
        f"""
        sync()
        {dev.stall}  # a long job queued on the stream, ahead of the copy
        buf.{method}()
        still_busy = not ({dev.idle})
        sync()
        assert still_busy, "buf.{method}() waited for the device's queued work: from pinned memory it must not block the host"
        """
    )


def _headline(exc: BaseException) -> str:
    """Type and first sentence: torch's messages go on with advice and URLs that change more often."""
    text = str(exc).strip().splitlines()
    sentence = text[0].split(". ")[0][:120] if text else ""
    return f"{type(exc).__name__}: {sentence}" if sentence else type(exc).__name__


@pytest.mark.promise("11")
@pytest.mark.parametrize("size", [(4,), (0,)], ids=["nonempty", "zero-size"])
def test_pin_memory_on_cpu_is_recorded(Buffer, record, device, size):
    """Either outcome is allowed; a buffer that is made must still be a valid buffer."""
    sc = Scenario(Buffer, record, "11", "pin_memory=True with no accelerator", device, size=size, dtype=torch.float32, pin_memory=True, with_numpy=True)
    sc.run(BYTE_HELPERS)
    try:
        sc.run(f"buf = {CONSTRUCT}")
    except Exception as exc:  # torch refusing the hint is allowed (promise 11)
        record.observe(f"size {size}: raises {_headline(exc)}")
        return
    sc.run(
        """
        assert tuple(buf.cpu.shape) == size and tuple(buf.gpu.shape) == size
        assert not raw(buf.cpu).any() and not raw(buf.gpu).any(), "the buffer is not zeroed"
        pinned = buf.cpu.is_pinned()
        """
    )
    accel = "accelerator present" if devices.accelerator_present() else "no accelerator"
    record.observe(f"size {size}: accepted ({accel}), cpu.is_pinned()={sc['pinned']}")
