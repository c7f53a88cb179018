"""The CUDA column's logic, on the CPU: sync() waits for the caller's current stream on the buffer's
device, never the whole device (promise 10); the in-order check's arithmetic; every CUDA function of
the registry is Python in a reproducer; the side-stream creation context waits for its stream on
leaving; and with one device, making the last device current is the plain context, and a pass says
which check could not run.

The registry's CUDA functions (what reads torch.cuda: cuda_sync, the side-stream context) run against
a logging stand-in for torch.cuda (fake_cuda.py), both as the suite runs them (the library's functions,
which import torch in their bodies) and as a reproducer defines them (its source, in a namespace of its
own). sim's sync and side-stream context run for real in tests/test_sim_sync_checks.py; the copy checks
on CUDA are tests/test_cuda_copy_checks.py, promise 11 beside an accelerator
tests/test_promise_11_beside_an_accelerator.py, and what only CUDA can show tests/test_cuda_on_gpu.py.
"""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest
import torch
from cuda_check_helpers import (
    CUDA,
    as_run_fixture,  # noqa: F401 - the fixture `as_run`
    evidence,
    fake_cuda_fixture,  # noqa: F401 - the fixture `fake_cuda`
    judgement,
    recorder_with,
)
from reproducer_parts import script_for
from suite_runner import run_script

from cpugpu_conformance import devices
from cpugpu_conformance.reference import CpuGpuBuffer
from cpugpu_conformance.testing.buffer.device_promises import (
    allow_sync,
    capture_copy,
    copy_joins_the_caller_stream,
    copy_lands_in_order,
    copy_returns_before_queued_work,
    forbid_sync,
    idle,
    stall,
)
from cpugpu_conformance.testing.shared import caller, contexts, helpers
from cpugpu_conformance.testing.shared.checks import COPY_METHODS
from cpugpu_conformance.testing.shared.reproducer import Name
from cpugpu_conformance.testing.verdict import plan
from cpugpu_conformance.variants import ZeroMeansAllBuffer

# --- sync(): the caller's current stream, on the buffer's device, never the whole device (promise 10)
# cuda_sync, over torch.cuda and its contexts; sim's, over torch.accelerator, is shown for real in
# test_sim_sync_checks.py.


def test_sync_of_the_buffer_s_device_waits_for_its_current_stream_only(fake_cuda, as_run):
    cuda = fake_cuda(count=3)
    as_run(helpers.sync)(torch.device("cuda", 1))
    assert cuda.log == [("synchronize", "default1")]  # no other device asked about, none synchronized


def test_sync_of_the_device_type_waits_for_each_device_in_use_and_touches_no_other(fake_cuda, as_run):
    """Synchronizing a device with no CUDA context would make one: on each GPU of a node, in every process."""
    cuda = fake_cuda(count=3, contexts={0, 2})
    as_run(helpers.sync)(CUDA)
    assert cuda.log == [("has context?", 0), ("has context?", 1), ("has context?", 2),
                        ("synchronize", "default0"), ("synchronize", "default2")]


def test_sync_inside_a_stream_context_waits_for_that_stream_only(fake_cuda, as_run):
    cuda = fake_cuda(count=1)
    private = cuda.Stream()
    with cuda.stream(private):
        as_run(helpers.sync)(CUDA)
    assert ("synchronize", private.name) in cuda.log and ("synchronize", "default0") not in cuda.log
    assert not [entry for entry in cuda.log if entry[0] == "whole device synchronize"]


def test_a_reproducer_that_syncs_still_runs_on_its_own(tmp_path):
    """sync is the registry's function written into the script, which runs with torch alone."""
    from cpugpu_conformance.testing.shared import checks
    from cpugpu_conformance.testing.shared.reproducer import Record, Scenario, import_line

    record = Record(import_line(CpuGpuBuffer))
    sc = Scenario(record, "2", "cpu", factory=CpuGpuBuffer, size=(4, 3), dtype=torch.float32, pin_memory=False,
                  with_numpy=False)
    sc.call(Name("make"), into="buf")
    sc.call(checks.zeroed)
    script = record.reproducer()
    assert "def sync(device):" in script and "cpugpu_conformance.devices" not in script
    ran = run_script(tmp_path, script)
    assert ran.returncode == 0 and "ok: the promise held" in ran.stdout, script + ran.stdout + ran.stderr


# --- copies land in order on the caller's stream: the check's arithmetic, on the CPU (no stall there)


@pytest.fixture
def cpu_with_a_no_op_stall(monkeypatch):
    """The CPU, with a stall that queues nothing: there is no stream to stall on the CPU."""
    monkeypatch.setitem(devices.REGISTRY, "cpu", dataclasses.replace(devices.CPU, stall=lambda buf: None))


def _ordered(Buffer, method: str, n, dtype=torch.float32, size=(4, 3)) -> None:
    buf = Buffer(*size, dtype=dtype, device=torch.device("cpu"), pin_memory=False, with_numpy=False)
    copy_lands_in_order(buf, method, n, torch.device("cpu"))


@pytest.mark.parametrize("method", COPY_METHODS)
@pytest.mark.parametrize("n", [None, 0, 2, -1, 9, -9])
def test_the_in_order_check_holds_for_the_reference(cpu_with_a_no_op_stall, method, n):
    _ordered(CpuGpuBuffer, method, n)
    _ordered(CpuGpuBuffer, method, n, dtype=torch.bool, size=(3,))


@pytest.mark.parametrize("method", COPY_METHODS)
def test_the_in_order_check_sees_a_copy_that_carried_the_wrong_rows(cpu_with_a_no_op_stall, method):
    with pytest.raises(AssertionError, match=rf"{method}\(n\) did not land in order on the caller's current stream"):
        _ordered(ZeroMeansAllBuffer, method, 0)


def test_every_cuda_function_of_the_registry_is_python_in_a_reproducer():
    """Each under the name of the helper that stands for it (its body as it is, no import of torch in it)."""
    functions = [copy_lands_in_order, copy_returns_before_queued_work, copy_joins_the_caller_stream,
                 caller.caller_state, *(c.enter for c in contexts.contexts_for("cuda") if c.enter is not None)]
    script = script_for("cuda", *functions)
    compile(script, "<reproducer>", "exec")
    helper_of = {"sync": helpers.sync, "stall": stall, "idle": idle, "capture": capture_copy, "forbid_sync": forbid_sync,
                 "allow_sync": allow_sync, "caller_state": caller.device_state}
    own = [(getattr(devices.CUDA, attribute), helper.__name__) for attribute, helper in helper_of.items()]
    for func, name in own + [(f, f.__name__) for f in devices.CUDA.contexts]:
        source = inspect.getsource(func).replace(f"def {func.__name__}(", f"def {name}(", 1)
        assert re.sub(r"\n\s+import torch\n", "\n", source) in script, func.__name__
    assert "import torch\n" not in script.split("import torch\n", 1)[1], "torch imported inside a function"
    assert "\nimport gc\n" in script  # the checks that turn garbage collection off say so at the top


# --- the side-stream creation context waits for its stream on leaving (item 5)
# CUDA's, over torch.cuda; sim's (accelerator_side_stream) is shown for real in test_sim_sync_checks.py.


def _context(name: str) -> contexts.Context:
    return next(c for c in contexts.contexts_for("cuda") if c.name == name)


def test_leaving_the_side_stream_context_makes_the_caller_stream_wait_for_it(fake_cuda, as_run):
    cuda = fake_cuda()

    def make():
        cuda.log.append(("make on", cuda.current_stream().name))
        return "made"

    assert as_run(_context("cuda_side_stream").enter)(make) == "made"
    side = "side1"
    assert cuda.log == [("enter stream", side), ("make on", side), ("leave stream", side), ("wait_stream", "default0", side)]


# --- the last device made current, with one device: the context is the plain one (item 6)


def test_making_the_last_device_current_changes_nothing_with_one_device():
    assert "needs two CUDA devices" in devices.last_device_is_current(1)
    assert devices.last_device_is_current(0).startswith("with 0 CUDA devices, ")
    assert devices.last_device_is_current(2) is None and devices.last_device_is_current(8) is None


@pytest.mark.parametrize(("count", "inert"), [(1, True), (2, False)])
def test_the_context_says_it_is_the_plain_one_from_the_device_count(monkeypatch, count, inert):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    why = _context("cuda_device_last").same_as_plain()
    assert (why is not None) is inert
    if inert:
        assert why.startswith("context cuda_device_last: with 1 CUDA device, ") and "cannot fire" in why
    assert all(c.same_as_plain() is None for c in contexts.contexts_for("cuda") if c.name != "cuda_device_last")


def test_a_passed_promise_with_a_check_that_could_not_run_says_so(tmp_path):
    """The check the contract skipped is untested: the pass rests on the checks that ran, and the result says which did not."""
    recorder = recorder_with(plan.plan_devices("all", {}), tmp_path)
    why = "context cuda_device_last: with 1 CUDA device, ... cannot fire (it needs two CUDA devices)"
    ran = evidence("t[context=plain,device=cuda]", "cuda", "12", "completed", "passed")
    skipped = evidence("t[context=cuda_device_last,device=cuda]", "cuda", "12", "skipped", "skipped", detail=why)
    on_cpu = evidence("t[context=plain,device=cpu]", "cpu", "12", "completed", "passed")
    judged = judgement(ran, skipped, on_cpu, required={"12": {"cuda": [ran.facts["key"], skipped.facts["key"]],
                                                               "cpu": [on_cpu.facts["key"]]}})
    entry = recorder._entry(judged, "12", "cuda")
    assert entry["verdict"] == "passed" and entry["skipped"] == 1 and entry["reason"].endswith("skipped: " + why)
    assert entry["skipped_tests"] == [{"test": skipped.nodeid, "why": why}]
    assert "reason" not in recorder._entry(judged, "12", "cpu")
