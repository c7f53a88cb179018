"""Promise 10's copy checks on sim, the simulated accelerator: copy_returns_before_queued_work (a copy
returns while the job queued before it still runs) and copy_joins_the_caller_stream (a fork of the
caller's stream must be joined back), built on the registry's device-generic functions.

The stall is a job that really runs on a stream's worker while the host goes on; a copy into pageable
memory really waits for the stream. Each behaviour is read from what sim's streams are doing
(``query()``), never from a log of calls, and each check is also shown rejecting a broken
counterpart, not only passing the reference.

Run as a script (``python tests/test_sim_copy_checks.py``), this module loads sim and runs every case
(``case_*``) in one process, each as the suite runs the check and as a sim reproducer defines it; the
tests (``test_<case>[<run>]``) run it once and read it (tests/sim_cases.py). What only CUDA shows
(graph capture, the sync debug mode, torch 2.0) stays in tests/test_cuda_copy_checks.py, against
fake_cuda.py.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from sim_cases import LONGER, Cases, busy, current, grid, job, sim1

from cpugpu_conformance.reference import CpuGpuBuffer
from cpugpu_conformance.testing.buffer.device_promises import (
    copy_joins_the_caller_stream,
    copy_returns_before_queued_work,
)
from cpugpu_conformance.testing.shared.checks import COPY_METHODS
from cpugpu_conformance.variants import (
    EventWaitingBuffer,
    ForkedStreamBuffer,
    PrivateStreamBuffer,
    SynchronizingCopiesBuffer,
)

pytestmark = pytest.mark.devices("sim")

CASES = Cases()  # this module's cases, run in a child process that loads sim (tests/sim_cases.py)
case = CASES.case


def pinned_buffer(Buffer: type) -> Any:
    return Buffer(4, 3, dtype=torch.float32, device=sim1(), pin_memory=True, with_numpy=False)


# --- the non-blocking check: a copy that returns while the job queued before it still runs (item 7)


@dataclass(frozen=True)
class Seen:
    """What a copy_to_gpu call found as it began."""

    caller_busy: bool  # the caller's current stream on the buffer's device (sim:1) had work running
    sim0_busy: bool  # sim:0's current stream had
    device: int  # the current device
    collecting: bool  # garbage collection was on


class Probe(CpuGpuBuffer):
    """The reference on sim:1 (pinned), whose copy_to_gpu notes what it found as it began (`seen`), then
    raises `raises` (from call `raises_from` on), or copies and waits for the queued work the way it is told
    (`waits`; None: it does not), up to call `waits_until`."""

    def __init__(self, waits: str | None = None, waits_until: int | None = None, raises: str | None = None,
                 raises_from: int = 1) -> None:
        super().__init__(4, 3, dtype=torch.float32, device=sim1(), pin_memory=True, with_numpy=False)
        self.waits, self.waits_until, self.raises, self.raises_from = waits, waits_until, raises, raises_from
        self.seen: list[Seen] = []
        torch.accelerator.synchronize(1)  # the zero-fill is queued: landed, so that what a call finds queued is the check's

    def copy_to_gpu(self, n=None):
        self.seen.append(Seen(busy(current(1)), busy(current(0)), torch.accelerator.current_device_index(),
                              gc.isenabled()))
        if self.raises and len(self.seen) >= self.raises_from:
            raise RuntimeError(self.raises)
        out = super().copy_to_gpu(n)
        if self.waits and (self.waits_until is None or len(self.seen) <= self.waits_until):
            self._wait()
        return out

    def _wait(self):
        device = self.gpu.device
        if self.waits == "stream":  # what a blocking copy does
            torch.accelerator.current_stream(device).synchronize()
        elif self.waits == "device":
            torch.accelerator.synchronize(device)
        elif self.waits == "event":
            done = torch.Event(device=device)
            done.record(torch.accelerator.current_stream(device))
            done.synchronize()
        elif self.waits == "pageable":  # a copy into pageable memory: the stream's work first, then the copy
            torch.empty(self.gpu.shape, dtype=self.gpu.dtype).copy_(self.gpu, non_blocking=True)
        else:
            raise ValueError(self.waits)

    @property
    def checked(self) -> list[Seen]:
        """The calls the check made after its first (the warm-up, made before any stall)."""
        return self.seen[1:]


def non_blocking(as_run, buf, method="copy_to_gpu", n=None) -> None:
    as_run(copy_returns_before_queued_work)(buf, method, n, sim1(), None)  # sim refuses no synchronize: no second signal


@case()
def case_a_copy_that_does_not_wait_passes_and_the_caller_s_state_is_put_back(as_run):
    """At the first try unless the host was held up longer than the stall; the copy is warmed up first."""
    buf = Probe()
    non_blocking(as_run, buf)
    assert gc.isenabled() and torch.accelerator.current_device_index() == 0
    assert not buf.seen[0].caller_busy and buf.seen[0].collecting, "the warm-up was not made before the stall"
    assert 1 <= len(buf.checked) <= 3 and buf.checked[-1].caller_busy, buf.seen  # it passed on finding the job running
    assert not any(seen.collecting for seen in buf.checked), "garbage collection was on during a checked copy"
    assert {seen.device for seen in buf.seen} == {0}, "the current device was changed around the copy"


@case(*grid(waits=["device", "event", "pageable", "stream"]))
def case_a_copy_that_waits_for_the_queued_work_fails_whatever_way_it_waits(as_run, waits):
    buf = Probe(waits=waits)
    with pytest.raises(AssertionError, match=r"copy_to_gpu\(None\) returned only once the work queued before it on the "
                                             r"caller's stream was done \(3 times out of 3\)"):
        non_blocking(as_run, buf)
    assert len(buf.checked) == 3, buf.seen
    assert gc.isenabled() and torch.accelerator.current_device_index() == 0


@case()
def case_a_copy_that_waits_only_on_its_first_call_passes(as_run):
    """The first call may wait (CUDA loads a kernel when first used): it is made before any stall."""
    buf = Probe(waits="pageable", waits_until=1)
    non_blocking(as_run, buf)
    assert not buf.seen[0].caller_busy, "the warm-up was not made before the stall"
    assert 1 <= len(buf.checked) <= 3, buf.seen


@case()
def case_a_copy_found_done_on_two_tries_and_running_on_the_third_passes(as_run):
    """A held-up host finds the job done whatever the copy did: only three tries out of three fail it."""
    buf = Probe(waits="device", waits_until=3)  # the warm-up and the first two tries wait
    non_blocking(as_run, buf)
    assert len(buf.checked) == 3, buf.seen


@case()
def case_another_error_of_the_copy_is_its_own_and_the_caller_s_state_is_put_back(as_run):
    buf = Probe(raises="out of memory", raises_from=2)  # the checked copy raises, with garbage collection off
    with pytest.raises(RuntimeError, match="^out of memory$"):
        non_blocking(as_run, buf)
    assert len(buf.seen) == 2 and not buf.seen[1].collecting
    assert gc.isenabled() and torch.accelerator.current_device_index() == 0


@case()
def case_the_stall_is_queued_on_the_buffer_s_own_device(as_run):
    """sim:1's current stream, with sim:0 current: never sim:0's, and the current device is left as it was."""
    buf = Probe()
    non_blocking(as_run, buf)
    assert buf.checked[-1].caller_busy, buf.seen
    assert not any(seen.sim0_busy for seen in buf.seen), "the stall was queued on sim:0, the current device"
    assert {seen.device for seen in buf.seen} == {0}


@case()
def case_the_non_blocking_check_waits_for_the_buffer_s_device_alone(as_run):
    job(current(0), LONGER)
    non_blocking(as_run, Probe())
    assert busy(current(0)), "the check on sim:1 waited for sim:0"


@case(*grid(Buffer=[SynchronizingCopiesBuffer, EventWaitingBuffer], method=list(COPY_METHODS)))
def case_the_variants_that_wait_after_each_copy_fail_the_non_blocking_check(as_run, Buffer, method):
    with pytest.raises(AssertionError, match=rf"{method}\(1\) returned only once the work queued before it"):
        non_blocking(as_run, pinned_buffer(Buffer), method, 1)
    assert gc.isenabled()


@case(*grid(Buffer=[CpuGpuBuffer, PrivateStreamBuffer, ForkedStreamBuffer], method=list(COPY_METHODS)))
def case_copies_that_do_not_wait_pass_the_non_blocking_check(as_run, Buffer, method):
    non_blocking(as_run, pinned_buffer(Buffer), method, 1)


# --- a fork of the caller's stream must be joined back: sim's join bookkeeping (what a CUDA graph capture
# refuses; the capture itself is CUDA's, in test_cuda_copy_checks.py)


class JoinedForkBuffer(PrivateStreamBuffer):
    """Correct: copies on a stream of its own that waits for the caller's, and that the caller's waits for."""

    def _copy(self, copy, n):
        caller = torch.accelerator.current_stream(self.gpu.device)
        self._stream.wait_stream(caller)
        with self._stream:
            out = copy(n)
        caller.wait_stream(self._stream)
        return out

    def copy_to_gpu(self, n=None):
        return self._copy(super().copy_to_gpu, n)

    def copy_to_cpu(self, n=None):
        return self._copy(super().copy_to_cpu, n)


def joins(as_run, buf, method="copy_to_gpu", n=2) -> None:
    as_run(copy_joins_the_caller_stream)(buf, method, n)


UNJOINED = (r"left work on a stream forked from the caller's current stream that the caller's never waits for "
            r"\(sim:1 stream \d+ got \d+ job\(s\) that stream 0 of sim:1 \(the caller's\) never waits for\)")


@case(*grid(method=list(COPY_METHODS)))
def case_a_fork_not_joined_back_fails_the_join_check_every_time(as_run, method):
    buf = pinned_buffer(ForkedStreamBuffer)
    for _ in range(3):
        with pytest.raises(AssertionError, match=rf"buf.{method}\(2\) {UNJOINED}"):
            joins(as_run, buf, method)
    assert gc.isenabled()
    joins(as_run, pinned_buffer(CpuGpuBuffer), method)  # the check is over: the next one starts afresh


@case(*grid(Buffer=[CpuGpuBuffer, JoinedForkBuffer]))
def case_a_copy_whose_work_the_caller_s_stream_waits_for_passes_the_join_check(as_run, Buffer):
    """The reference, and a fork joined back."""
    for method in COPY_METHODS:
        joins(as_run, pinned_buffer(Buffer), method)


@case(*grid(method=list(COPY_METHODS)))
def case_a_private_stream_the_caller_s_never_waits_for_fails_the_join_check_on_sim(as_run, method):
    """sim names every stream that got work the caller's never waits for, a fork or not. A CUDA capture does not
    see such a stream, which never waited for the capturing one (test_cuda_copy_checks.py): there the in-order check
    catches it, by its stall."""
    with pytest.raises(AssertionError, match=rf"buf.{method}\(2\) {UNJOINED}"):
        joins(as_run, pinned_buffer(PrivateStreamBuffer), method)


@case()
def case_garbage_collection_is_off_during_the_join_check(as_run):
    buf = Probe()
    joins(as_run, buf)
    assert [seen.collecting for seen in buf.seen] == [False] and gc.isenabled()


@case()
def case_a_copy_that_raises_under_the_join_check_raises_and_the_check_is_over(as_run):
    with pytest.raises(RuntimeError, match="^not capturable$"):
        joins(as_run, Probe(raises="not capturable"))
    assert gc.isenabled()
    joins(as_run, pinned_buffer(CpuGpuBuffer))
    with pytest.raises(AssertionError, match=UNJOINED):
        joins(as_run, pinned_buffer(ForkedStreamBuffer))


globals().update(CASES.tests(__file__))  # on_sim, and test_NAME per case_NAME


if __name__ == "__main__":
    CASES.main()
