"""The device checks on sim, the simulated accelerator: what tests/fake_cuda.py only modelled, shown for real.

The registry's device-generic functions (sync, stall and idle over torch.accelerator, the side-stream
context) and promise 10's checks built on them (copy_returns_before_queued_work,
copy_joins_the_caller_stream) run here against sim's streams: the stall is a job that really runs on
a stream's worker while the host goes on, a synchronize really waits for it, a copy into pageable
memory really waits for the stream. Each behaviour is read from what the streams are doing
(``query()``), never from a log of calls, and each check is also shown rejecting a broken
counterpart, not only passing the reference. The jobs are long enough (SHORT, LONG, LONGER) that a
host held up for a while reads the same.

Loading sim makes it torch's accelerator for the whole process, so nothing here loads it in the test
process. Run as a script (``python tests/test_sim_device_checks.py``), this module loads sim, runs
every case (``case_*``) in one process, each as the suite runs the function under test and as a sim
reproducer defines it (its source, in a namespace of its own), and prints one JSON object, run ->
"ok" or the traceback; the tests (``test_<case>[<run>]``, made below from the cases) run it once and
read it. What only CUDA shows (its own sync and side stream over torch.cuda, graph capture, the sync
debug mode, torch 2.0) stays in tests/test_cuda_checks.py, against fake_cuda.py.
"""

from __future__ import annotations

import functools
import gc
import itertools
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import sim_probe
import torch
from reproducer_parts import definitions, script_for
from suite_runner import REPO

from cpugpu_conformance.reference import CpuGpuBuffer
from cpugpu_conformance.testing.buffer.device_promises import (
    copy_joins_the_caller_stream,
    copy_returns_before_queued_work,
)
from cpugpu_conformance.testing.shared import contexts, helpers
from cpugpu_conformance.testing.shared.checks import COPY_METHODS
from cpugpu_conformance.variants import (
    EventWaitingBuffer,
    ForkedStreamBuffer,
    PrivateStreamBuffer,
    SynchronizingCopiesBuffer,
)

pytestmark = pytest.mark.devices("sim")

# Jobs on sim's 1 GHz clock. A sync under test waits for SHORT ones and must leave LONG ones running
# (234 ms to spare); where it, or a broken sync it must catch, waits for a LONG one, a LONGER one must
# still run. The stall of the non-blocking check is the registry's own (2**25 cycles, 34 ms).
SHORT, LONG, LONGER = 1 << 25, 1 << 28, 1 << 29


def sim1() -> torch.device:
    """The device the suite passes on sim: not the current one (sim:0). A function: torch knows "sim" once it is
    loaded."""
    return torch.device("sim", 1)


# --- how a case is run: the function as the suite runs it, or as a sim reproducer defines it


def _as_the_suite_runs_it(func: Callable[..., Any]) -> Callable[..., Any]:
    return func


@functools.cache
def _as_a_reproducer_defines_it(func: Callable[..., Any]) -> Callable[..., Any]:
    return definitions(script_for("sim", func))[func.__name__]


AS_RUN = {"suite": _as_the_suite_runs_it, "reproducer": _as_a_reproducer_defines_it}

CASES: dict[str, Callable[[], None]] = {}  # "name[run]" -> the case, its arguments bound
RUNS: dict[str, list[str]] = {}  # name -> its runs ([] for a case run once, unparametrized)
DOCS: dict[str, str | None] = {}


def case(*params: dict[str, Any], as_run: bool = True) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register `case_NAME` once per parameter set (its id: the values' names, joined by "-"), and, where
    `as_run`, once as the suite runs the function under test and once as a reproducer defines it."""

    def register(func: Callable[..., None]) -> Callable[..., None]:
        name = func.__name__.removeprefix("case_")
        RUNS[name], DOCS[name] = [], func.__doc__
        for p in params or ({},):
            pid = "-".join(getattr(value, "__name__", str(value)) for value in p.values())
            for mode in AS_RUN if as_run else (None,):
                run = "-".join(part for part in (pid, mode) if part)
                bound = dict(p, as_run=AS_RUN[mode]) if mode else p
                CASES[f"{name}[{run}]" if run else name] = functools.partial(func, **bound)
                if run:
                    RUNS[name].append(run)
        return func

    return register


def grid(**axes: list[Any]) -> list[dict[str, Any]]:
    return [dict(zip(axes, values)) for values in itertools.product(*axes.values())]


# --- what the streams are doing


def current(index: int):
    return torch.accelerator.current_stream(index)


def busy(stream) -> bool:
    """Work queued on `stream` is still running (or waiting for another stream's)."""
    return not stream.query()


def job(stream, cycles: int) -> None:
    """Queue a job of `cycles` on `stream`, whatever the current device and stream are."""
    with torch.accelerator.device_index(stream.device.index), stream:
        torch.sim._sleep(cycles)


def pinned_buffer(Buffer: type) -> Any:
    return Buffer(4, 3, dtype=torch.float32, device=sim1(), pin_memory=True, with_numpy=False)


# --- sync(): the caller's current stream, on the buffer's device, never the whole device (promise 10)


def sync_waits_for_the_current_stream_of_the_buffer_s_device_only(sync: Callable[[Any], None]) -> None:
    side = torch.Stream(device="sim:1")
    job(current(0), LONGER)  # outlasts the side stream's: a sync of the whole of sim:1 leaves it running
    job(side, LONG)
    job(current(1), SHORT)
    sync(sim1())
    assert not busy(current(1)), "sync(sim:1) left the current stream of sim:1 running"
    assert busy(current(0)), "sync(sim:1) waited for sim:0"
    assert busy(side), "sync(sim:1) waited for another stream of sim:1 (the whole device)"


def sync_waits_for_the_current_stream_of_each_device(sync: Callable[[Any], None]) -> None:
    side = torch.Stream(device="sim:0")
    job(side, LONGER)
    job(current(0), SHORT)
    job(current(1), LONG)
    sync(torch.device("sim"))
    assert not busy(current(0)) and not busy(current(1)), "sync(sim) left the current stream of a device running"
    assert busy(side), "sync(sim) waited for another stream of sim:0 (the whole device)"


def sync_in_a_stream_context_waits_for_that_stream_only(sync: Callable[[Any], None]) -> None:
    side = torch.Stream(device="sim:0")
    job(current(0), LONG)  # the default stream, made to wait for nothing
    with side:
        job(side, SHORT)
        sync(torch.device("sim"))
        assert not busy(side), "sync(sim) in a stream context left that stream running"
    assert busy(current(0)), "sync(sim) in a stream context waited for the default stream too"


def _whole_device(device):
    for index in [device.index] if device.index is not None else range(torch.accelerator.device_count()):
        torch.accelerator.synchronize(index)


def _every_device(device):
    for index in range(torch.accelerator.device_count()):
        torch.accelerator.current_stream(index).synchronize()


def _current_device_only(device):
    torch.accelerator.current_stream().synchronize()


@case()
def case_sync_of_the_buffer_s_device_waits_for_its_current_stream_only(as_run):
    sync_waits_for_the_current_stream_of_the_buffer_s_device_only(as_run(helpers.sync))


@case()
def case_sync_of_the_device_type_waits_for_the_current_stream_of_each_device(as_run):
    sync_waits_for_the_current_stream_of_each_device(as_run(helpers.sync))


@case()
def case_sync_inside_a_stream_context_waits_for_that_stream_only(as_run):
    sync_in_a_stream_context_waits_for_that_stream_only(as_run(helpers.sync))


@case(as_run=False)
def case_a_sync_of_the_whole_device_or_of_another_stream_fails_those_checks():
    """The three checks above can fail: each rejects a sync that waits for too much, or for the wrong stream."""
    for check, broken, message in (
        (sync_waits_for_the_current_stream_of_the_buffer_s_device_only, _whole_device, "the whole device"),
        (sync_waits_for_the_current_stream_of_the_buffer_s_device_only, _every_device, "waited for sim:0"),
        (sync_waits_for_the_current_stream_of_each_device, _whole_device, "the whole device"),
        (sync_waits_for_the_current_stream_of_each_device, _current_device_only, "left the current stream"),
        (sync_in_a_stream_context_waits_for_that_stream_only, _whole_device, "the default stream too"),
    ):
        with pytest.raises(AssertionError, match=message):
            check(broken)
        torch.accelerator.synchronize(0)
        torch.accelerator.synchronize(1)


# --- the side-stream creation context makes the caller's stream wait for its stream on leaving (item 5)


def side_stream_context_joins_the_caller_stream(enter: Callable[..., Any]) -> None:
    caller = current(0)
    made_on = []

    def make():
        made_on.append(current(0))
        torch.sim._sleep(LONG)  # on the current stream: the side stream's
        return "made"

    assert enter(make) == "made"
    assert made_on[0] != caller, "make ran on the caller's stream, not on a side stream"
    assert current(0) == caller, "the caller's stream is not current again once the context is left"
    assert busy(caller), "the caller's stream does not wait for the work made on the side stream"


def _side_stream_never_joined(make, *args):
    with torch.Stream():
        return make(*args)


def _no_side_stream(make, *args):
    return make(*args)


@case()
def case_leaving_the_side_stream_context_makes_the_caller_stream_wait_for_it(as_run):
    enter = next(c.enter for c in contexts.contexts_for("sim") if c.name == "accelerator_side_stream")
    side_stream_context_joins_the_caller_stream(as_run(enter))


@case(as_run=False)
def case_a_side_stream_never_joined_or_no_side_stream_fails_that_check():
    with pytest.raises(AssertionError, match="does not wait for the work made on the side stream"):
        side_stream_context_joins_the_caller_stream(_side_stream_never_joined)
    torch.accelerator.synchronize(0)
    with pytest.raises(AssertionError, match="make ran on the caller's stream"):
        side_stream_context_joins_the_caller_stream(_no_side_stream)


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
# refuses; the capture itself is CUDA's, in test_cuda_checks.py)


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
    see such a stream, which never waited for the capturing one (test_cuda_checks.py): there the in-order check
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


# --- in the child: load sim, run every case, print the outcomes


def _put_back(defaults) -> None:
    """Between cases: every stream idle, the default streams and sim:0 current, garbage collection on."""
    for index, stream in defaults.items():
        torch.accelerator.synchronize(index)
        torch.accelerator.set_stream(stream)
    torch.accelerator.set_device_index(0)
    gc.enable()


def main() -> None:
    from cpugpu_conformance import sim

    sim.load()
    defaults = {index: current(index) for index in range(torch.accelerator.device_count())}
    print(json.dumps(sim_probe.outcomes(CASES, after=lambda: _put_back(defaults))))


# --- in the test process: run the child once, and one test per case and run


@pytest.fixture(scope="module")
def on_sim() -> dict[str, str]:
    proc = subprocess.run([sys.executable, __file__], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _test_of(name: str) -> Callable[..., None]:
    """test_NAME: the outcome of case_NAME in the child, per run (as the suite runs it, as a reproducer defines it)."""
    if RUNS[name]:
        @pytest.mark.parametrize("run", RUNS[name])
        def test(on_sim, run):
            assert on_sim[f"{name}[{run}]"] == "ok", on_sim[f"{name}[{run}]"]
    else:
        def test(on_sim):
            assert on_sim[name] == "ok", on_sim[name]
    test.__name__ = test.__qualname__ = f"test_{name}"
    test.__doc__ = DOCS[name]
    return test


for _name in RUNS:
    globals()[f"test_{_name}"] = _test_of(_name)


if __name__ == "__main__":
    main()
