"""The CUDA column's logic, tested on the CPU where it can run, and on a GPU where it cannot.

The registry's CUDA functions (what reads torch.cuda: cuda_sync, the side-stream context, graph
capture, the sync debug mode) run against a logging stand-in for torch.cuda (fake_cuda.py), both
as the suite runs them (the library's functions, which import torch in their bodies) and as a
reproducer defines them (its source, in a namespace of its own); the decisions (how to see a
copy block, when a check cannot run, where promise 11 applies) are plain functions; what only
CUDA can show carries ``@pytest.mark.devices("cuda")``. The device-generic checks (the stall and
idle, promise 10's non-blocking and join checks, the variants that wait) run for real on sim, in
tests/test_sim_sync_checks.py and tests/test_sim_copy_checks.py.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import re
import types

import pytest
import result_factory as rf
import torch
from device_marker import missing_device
from fake_cuda import REFUSED_SYNC, UNJOINED, FakeCuda, patch_torch
from reproducer_parts import definitions, script_for
from suite_runner import run_script, run_suite

from cpugpu_conformance import devices, promises, results
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
from cpugpu_conformance.testing.verdict import judge, plan, recording
from cpugpu_conformance.variants import (
    ForkedStreamBuffer,
    PageableHostBuffer,
    PrivateStreamBuffer,
    ZeroMeansAllBuffer,
)

CUDA = torch.device("cuda")


@pytest.fixture(params=["suite", "reproducer"])
def as_run(request):
    """`as_run(func)`: func as the suite runs it, or as the CUDA reproducer that calls it defines it."""
    if request.param == "suite":
        return lambda func: func
    return lambda func: definitions(script_for("cuda", func))[func.__name__]


@pytest.fixture
def fake_cuda(monkeypatch):
    """`fake_cuda(count, contexts)`: a FakeCuda in torch.cuda's place for this test."""
    return lambda count=1, contexts=None: patch_torch(monkeypatch, FakeCuda(count=count, contexts=contexts))


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


def recorder_with(device_plan, tmp_path):
    """A recorder outside a pytest run: the plan is where a run's recorder reads it, in the config's stash."""
    stash = pytest.Stash()
    stash[recording.PLAN] = device_plan
    return recording.CellRecorder(types.SimpleNamespace(stash=stash), str(tmp_path / "cell.json"), "cell", None,
                                  "impl", "ci")


def evidence(key, device, promise, stamp, outcome, *, detail=None, observed=None):
    """What the reports of one contract test of TestX said (judge.py)."""
    facts = {"nodeid": f"t.py::TestX::{key}", "class": "t.TestX", "test": key.split("[")[0], "key": key,
             "device": device, "promises": [promise], "contract": True, "opt_out": False}
    ev = judge.TestEvidence(facts)
    when = "setup" if outcome == "skipped" else "call"
    props = {"stamp": stamp, "stamp_detail": detail, "observed": observed}
    ev.add(when, outcome, props, None, detail if outcome == "skipped" else None, None)
    return ev


def judgement(*tests, required):
    inventory = judge.Inventory({ev.nodeid: ev.facts for ev in tests})
    return judge.Judgement({ev.nodeid: ev for ev in tests}, inventory, required, {})


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


# --- the non-blocking check: which method, or why none (item 7)

CUDA_ENV = "CUDA_LAUNCH_BLOCKING"


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


# --- promise 11 is not applicable beside an accelerator (item 4)

AN_ACCELERATOR = {}  # devices.unavailable() on a machine that has every device
NO_ACCELERATOR = {"cuda": "no CUDA device: simulated"}


def test_promise_11_applies_only_on_a_machine_with_no_accelerator():
    assert promises.not_applicable("11", "cpu", ()) is None
    why = promises.not_applicable("11", "cpu", ("cuda",))
    assert why.startswith("promise 11 is about a machine with no accelerator, and this one has cuda")
    assert promises.not_applicable("11", "cuda", ()) == "promise 11 is about cpu"
    assert promises.not_applicable("3", "cpu", ("cuda",)) is None


def test_the_plan_knows_the_accelerators_the_machine_has_asked_for_or_not():
    assert plan.plan_devices("cpu", AN_ACCELERATOR).accelerators == ("cuda",)
    assert plan.plan_devices(None, AN_ACCELERATOR).accelerators == ("cuda",)
    assert plan.plan_devices("all", NO_ACCELERATOR).accelerators == ()
    facts = plan.from_facts(plan.as_facts(plan.plan_devices("cpu", AN_ACCELERATOR)))
    assert facts.accelerators == ("cuda",)


def test_promise_11_tests_are_deselected_beside_an_accelerator():
    assert plan.wanted({"11"}, "cpu", None, accelerators=())
    assert not plan.wanted({"11"}, "cpu", None, accelerators=("cuda",))
    assert plan.wanted({"3"}, "cpu", None, accelerators=("cuda",))


def test_the_recorder_writes_promise_11_not_applicable_with_why_beside_an_accelerator(tmp_path):
    recorder = recorder_with(plan.plan_devices("cpu", AN_ACCELERATOR), tmp_path)
    entry = recorder._entry(judgement(required={}), "11", "cpu")
    assert entry["verdict"] == "not_applicable" and entry["reason"] == promises.not_applicable("11", "cpu", ("cuda",))
    alone = recorder_with(plan.plan_devices("cpu", NO_ACCELERATOR), tmp_path)
    held = evidence("t[device=cpu,size=4]", "cpu", "11", "completed", "passed",
                    observed="size (4,): raises RuntimeError: no")
    judged = judgement(held, required={"11": {"cpu": [held.facts["key"]]}})
    entry = alone._entry(judged, "11", "cpu")
    assert entry["verdict"] == "recorded" and entry["observed"] == "size (4,): raises RuntimeError: no"


def _cell_with_11(verdict: str, cuda_available: bool) -> results.CellResult:
    entry = {"verdict": verdict, "passed": 0, "failed": 0, "skipped": 0, "reason": "why"}
    return results.CellResult.new(
        "torch-2.13.0", "completed",
        requested={"device": "cpu", "promises": None}, environment={"cuda_available": cuda_available},
        devices={"cpu": {"status": "tested"}, "cuda": {"status": "not_requested", "reason": "not requested"}},
        promises={"11": {"title": promises.PROMISES["11"], "devices": {"cpu": entry}}},
    )


def test_the_rule_accepts_promise_11_not_applicable_only_where_the_machine_had_an_accelerator():
    beside = _cell_with_11("not_applicable", cuda_available=True).outcome("11", "cpu")
    assert beside.kind == "not_applicable" and not beside.asked
    assert beside.note.startswith("promise 11 is about a machine with no accelerator")
    claimed = _cell_with_11("not_applicable", cuda_available=False).outcome("11", "cpu")
    assert claimed.kind == "untested" and "the contract does not" in claimed.note


def _gpu_cell(torch_release: str) -> results.CellResult:
    data = rf.completed(torch_release, cuda=True)
    data["promises"]["11"]["devices"]["cpu"] = {"verdict": "not_applicable", "reason": "beside an accelerator",
                                                "passed": 0, "failed": 0, "skipped": 0}
    return results.CellResult(data)


def test_two_cells_beside_an_accelerator_compare_without_a_gap_on_promise_11():
    cmp = results.diff(_gpu_cell("2.13.0"), _gpu_cell("2.14.1"))
    assert cmp.devices == ["cpu", "cuda"] and cmp.comparable, cmp.unusable
    assert not cmp.verdict_changes and not cmp.regressions and cmp.checked > 0


FAKE_ACCELERATOR = '''
"""Loaded with -p: the registry reports every device present, as on a machine with a GPU."""
from cpugpu_conformance import devices

_environment = devices.environment
devices.unavailable = lambda: {}
devices.unavailable_to_run = lambda option: {}
devices.environment = lambda: {**_environment(), "cuda_available": True, "gpu_name": "simulated"}
'''


def test_a_run_beside_an_accelerator_records_promise_11_not_applicable(tmp_path, monkeypatch):
    """The whole suite on the CPU of a (simulated) machine with an accelerator: promise 11 is n/a, with why."""
    (tmp_path / "fake_accelerator.py").write_text(FAKE_ACCELERATOR)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    run = run_suite(tmp_path, "-p", "fake_accelerator", "--device", "cpu", "--promise", "2,11")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    entry = run.result["promises"]["11"]["devices"]["cpu"]
    assert entry["verdict"] == "not_applicable" and entry["passed"] == 0
    assert entry["reason"] == promises.not_applicable("11", "cpu", ("cuda",))
    assert run.cell.outcome("11", "cpu").kind == "not_applicable" and run.cell.answer().clean
    assert "test_pin_memory_on_cpu_is_recorded" not in run.stdout


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
