"""The registry's device-generic functions on sim, the simulated accelerator: what tests/fake_cuda.py
only modelled, shown for real.

sync() waits for the caller's current stream, on the buffer's device, never the whole device
(promise 10), and the side-stream creation context makes the caller's stream wait for its stream on
leaving. Each behaviour is read from what sim's streams are doing (``query()``), never from a log of
calls: the stall is a job that really runs on a stream's worker while the host goes on, a
synchronize really waits for it. Each check is also shown rejecting a broken counterpart, not only
passing the reference. The jobs are long enough (SHORT, LONG, LONGER) that a host held up for a
while reads the same.

Run as a script (``python tests/test_sim_sync_checks.py``), this module loads sim and runs every case
(``case_*``) in one process, each as the suite runs the function under test and as a sim reproducer
defines it; the tests (``test_<case>[<run>]``) run it once and read it (tests/sim_cases.py). What only
CUDA shows (its own sync and side stream over torch.cuda, graph capture, the sync debug mode, torch
2.0) stays in tests/test_cuda_sync_and_contexts.py and tests/test_cuda_copy_checks.py, against fake_cuda.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from sim_cases import LONG, LONGER, SHORT, Cases, busy, current, job, sim1

from cpugpu_conformance.testing.shared import contexts, helpers

pytestmark = pytest.mark.devices("sim")

CASES = Cases()  # this module's cases, run in a child process that loads sim (tests/sim_cases.py)
case = CASES.case


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


globals().update(CASES.tests(__file__))  # on_sim, and test_NAME per case_NAME


if __name__ == "__main__":
    CASES.main()
