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
from hypothesis import given
from hypothesis import strategies as st

from cpugpu_conformance import devices

from . import strategies as s
from .repro import Scenario
from .scenarios import build
from .snippets import BYTE_HELPERS, CONSTRUCT

# Work queued on the caller's current stream before a copy lands before it, and the copy has
# landed once that stream is synchronized. The work waits behind a long job ({stall}), so a
# copy made on a stream the caller's does not wait for lands first, and is caught every time.
ORDERED_COPIES = {
    "copy_to_gpu": """
fill_bytes(buf.cpu, seed=1)
sent = raw(buf.cpu)
queued = torch.empty_like(buf.gpu)
fill_bytes(queued, seed=2)
sync()
{stall}
buf.gpu.copy_(queued)  # on the caller's stream, behind the long job; element-wise, so any layout
buf.copy_to_gpu(n)
sync()
expected = raw(queued)
expected[:n] = sent[:n]
assert (raw(buf.gpu) == expected).all(), (
    "copy_to_gpu(n) did not land in order on the caller's current stream: after the work queued there "
    "before it, and by the time that stream was synchronized"
)
""",
    "copy_to_cpu": """
before = raw(buf.cpu)
queued = torch.empty_like(buf.gpu)
fill_bytes(queued, seed=3)
sync()
{stall}
buf.gpu.copy_(queued)  # on the caller's stream, behind the long job; element-wise, so any layout
buf.copy_to_cpu(n)
sync()
expected = before.copy()
expected[:n] = raw(queued)[:n]
assert (raw(buf.cpu) == expected).all(), (
    "copy_to_cpu(n) did not land in order on the caller's current stream: after the work queued there "
    "before it, and by the time that stream was synchronized"
)
""",
}


@pytest.mark.promise("10")
@given(data=st.data())
def test_cuda_copies_land_in_order_on_the_caller_stream(Buffer, record, device, data):
    dev = devices.get(device)
    assert dev.stall, f"the registry says promise 10 applies to {device}, but not how to queue work there"
    sc = build(Buffer, record, "10", device, data, s.byte_dtype(device), contexts=True, nonempty=True)
    sc.bind(n=data.draw(s.slice_end(sc["size"][0]), label="n"))
    sc.run(
        """
        if pin_memory:
            assert buf.cpu.is_pinned(), "pin_memory=True, yet buf.cpu is not in pinned memory"
        """
    )
    for method in data.draw(st.permutations(sorted(ORDERED_COPIES)), label="methods"):
        sc.run(ORDERED_COPIES[method].format(stall=dev.stall))


@pytest.fixture
def non_blocking_check(device: str) -> devices.NonBlockingCheck:
    """How this torch lets the suite see a copy block (devices.non_blocking_check); where it cannot,
    the test is skipped with the reason: untested, never passed."""
    dev = devices.get(device)
    how = devices.non_blocking_check(dev, os.environ, dev.forbids_sync())
    if how.method is None:
        pytest.skip(how.reason)
    return how


def _refusing_sync(dev: devices.Device, method: str) -> str:
    """The copy runs with synchronizing forbidden: a hidden wait for queued work raises, deterministically."""
    return (
        "sync()\n"
        f"{dev.forbid_sync}\n"
        "try:\n"
        f"    buf.{method}(n)\n"
        "except RuntimeError as exc:\n"
        f"    if {dev.sync_refusal!r} not in str(exc):\n"
        "        raise\n"
        f'    raise AssertionError(f"buf.{method}({{n!r}}) synchronized with the device ({{exc}}): from pinned memory "\n'
        '                         "it must not wait for the work queued before it") from None\n'
        "finally:\n"
        + "".join(f"    {line}\n" for line in dev.allow_sync.splitlines())
        + "sync()\n"
    )


def _outlasting_a_stall(dev: devices.Device, method: str) -> str:
    """The fallback, by timing: with a long job queued ahead, the copy returns while the job still runs."""
    return (
        "sync()\n"
        f"{dev.stall}  # a long job queued on the stream, ahead of the copy\n"
        f"buf.{method}(n)\n"
        f"still_busy = not ({dev.idle})\n"
        "sync()\n"
        f'assert still_busy, "buf.{method}(n) waited for the device\'s queued work: from pinned memory it must not block the host"\n'
    )


@pytest.mark.promise("10")
@pytest.mark.parametrize("method", ["copy_to_gpu", "copy_to_cpu"])
@given(data=st.data())
def test_copies_with_pinned_memory_do_not_block_the_host(Buffer, record, device, method, non_blocking_check, data):
    """The copies are non-blocking: from pinned memory a copy returns without waiting for queued work."""
    dev = devices.get(device)
    sc = build(Buffer, record, "10", device, data, s.byte_dtype(device), contexts=True, nonempty=True, pin_memory=True)
    sc.bind(n=data.draw(s.slice_end(sc["size"][0]), label="n"))
    if non_blocking_check.method == "forbid_sync":
        sc.run(_refusing_sync(dev, method))
    else:
        sc.run(_outlasting_a_stall(dev, method))


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
    # Deselected where an accelerator is present (promises.not_applicable): there is none here.
    record.observe(f"size {size}: accepted (no accelerator), cpu.is_pinned()={sc['pinned']}")
