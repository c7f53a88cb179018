"""What only CUDA can show, on a GPU: each test here is marked ``@pytest.mark.devices("cuda")``,
skipped with the reason where CUDA is missing, and one of the proofs tools/gpu_check.py runs on a GPU
machine: CUDA_LAUNCH_BLOCKING=1 leaves the non-blocking check untested, the check otherwise runs with
a stall and refused synchronizes, CUDA refuses a fork left unjoined, a pinned copy leaves the stall
running where a pageable one waits, and promise 12 says the last-device context is untested with one
GPU. Also the project's devices marker, which skips them.
"""

from __future__ import annotations

import pytest
import torch
from cuda_check_helpers import CUDA_ENV
from device_marker import missing_device
from suite_runner import run_suite

from cpugpu_conformance import devices
from cpugpu_conformance.reference import CpuGpuBuffer
from cpugpu_conformance.testing.shared.checks import COPY_METHODS
from cpugpu_conformance.variants import ForkedStreamBuffer, PageableHostBuffer

# --- the project's devices marker


def test_a_test_that_needs_a_missing_device_is_skipped_with_why():
    assert missing_device(["cpu"]) is None and missing_device([]) is None
    cuda = devices.CUDA.missing_reason()
    assert missing_device(["cpu", "cuda"]) == (f"needs cuda: {cuda}" if cuda else None)
    with pytest.raises(devices.UnknownDevice):
        missing_device(["tpu"])


# --- on a GPU: what only CUDA shows


@pytest.mark.devices("cuda")
def test_with_launches_made_synchronous_the_non_blocking_check_is_untested(tmp_path, monkeypatch):
    monkeypatch.setenv(CUDA_ENV, "1")
    run = run_suite(tmp_path, "--device", "cuda", "--promise", "10")
    assert run.returncode == 0, run.stdout[-4000:]
    entry = run.result["promises"]["10"]["devices"]["cuda"]
    assert entry["verdict"] == "passed" and entry["skipped"] == 2  # the copies in order held; both directions untested
    assert "untested: CUDA_LAUNCH_BLOCKING=1 makes every cuda launch" in entry["reason"]


@pytest.mark.devices("cuda")
def test_the_non_blocking_check_runs_with_a_stall_and_refused_synchronizes_on_this_torch(tmp_path, monkeypatch):
    monkeypatch.delenv(CUDA_ENV, raising=False)
    assert devices.non_blocking_check(devices.CUDA, {}, devices.CUDA.forbids_sync()) == devices.NonBlockingCheck(
        "stall", refuse_sync=True)
    run = run_suite(tmp_path, "--device", "cuda", "--promise", "10")
    assert run.returncode == 0, run.stdout[-4000:]
    entry = run.result["promises"]["10"]["devices"]["cuda"]
    assert entry["verdict"] == "passed" and entry["skipped"] == 0 and "reason" not in entry


@pytest.mark.devices("cuda")
def test_cuda_refuses_a_fork_left_unjoined_and_every_stream_stays_usable():
    """What the capture check rests on: CUDA's message, and a failed capture that leaves nothing capturing."""
    made = dict(dtype=torch.uint8, device=torch.device("cuda"), pin_memory=True, with_numpy=False)
    forked = ForkedStreamBuffer(1 << 16, **made)
    refused = devices.cuda_capture(forked, lambda: forked.copy_to_gpu())
    assert refused is not None and "not joined" in refused
    assert not torch.cuda.is_current_stream_capturing()
    forked.cpu.fill_(7)
    forked.copy_to_gpu()  # eager again, on the stream that was forked
    forked._stream.synchronize()
    assert (forked.gpu == 7).all()
    reference = CpuGpuBuffer(1 << 16, **made)
    for method in COPY_METHODS:
        assert devices.cuda_capture(reference, getattr(reference, method)) is None


@pytest.mark.devices("cuda")
def test_a_pinned_copy_leaves_the_stall_running_and_a_pageable_one_does_not():
    """What the non-blocking check rests on, on this GPU: the stall outlasts queuing a pinned copy (in one of
    three tries, as the check asks), and a copy into pageable memory waits for it (every time)."""
    made = dict(dtype=torch.uint8, device=torch.device("cuda"), pin_memory=True, with_numpy=False)
    for buf, waits in ((CpuGpuBuffer(1 << 20, **made), False), (PageableHostBuffer(1 << 20, **made), True)):
        buf.copy_to_cpu()
        seen = []
        for _ in range(3):
            devices.cuda_sync(buf.gpu.device)
            devices.accelerator_stall(buf)
            buf.copy_to_cpu()
            seen.append(devices.accelerator_idle(buf))
        devices.cuda_sync(buf.gpu.device)
        assert all(seen) if waits else not all(seen), (type(buf).__name__, seen)


@pytest.mark.devices("cuda")
def test_promise_12_says_the_last_device_context_is_untested_with_one_device(tmp_path):
    run = run_suite(tmp_path, "--device", "cuda", "--promise", "12")
    assert run.returncode == 0, run.stdout[-4000:]
    entry = run.result["promises"]["12"]["devices"]["cuda"]
    assert entry["verdict"] == "passed"
    if torch.cuda.device_count() == 1:
        assert entry["skipped"] == 1 and "context cuda_device_last: with 1 CUDA device" in entry["reason"]
    else:
        assert entry["skipped"] == 0
