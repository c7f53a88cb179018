"""The CUDA column's logic, tested on the CPU where it can run, and on a GPU where it cannot.

The registry's CUDA functions run against a logging stand-in for torch.cuda (fake_cuda.py), both
as the suite runs them (the library's functions, which import torch in their bodies) and as a
reproducer defines them (its source, in a namespace of its own); the decisions (how to see a
copy block, when a check cannot run, where promise 11 applies) are plain functions; what only
CUDA can show carries ``@pytest.mark.devices("cuda")``.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types

import pytest
import result_factory as rf
import torch
from device_marker import missing_device
from fake_cuda import FakeCuda, patch_torch
from reproducer_parts import definitions, script_for
from suite_runner import run_suite

from cpugpu_conformance import devices, promises, results
from cpugpu_conformance.reference import CpuGpuBuffer
from cpugpu_conformance.testing import contexts, helpers, plan, recording, reports, side_effects
from cpugpu_conformance.testing.checks import COPY_METHODS
from cpugpu_conformance.testing.device_promises import (
    allow_sync,
    copy_lands_in_order,
    copy_outlasting_a_stall,
    copy_refusing_sync,
    forbid_sync,
    idle,
    stall,
)
from cpugpu_conformance.variants import ZeroMeansAllBuffer

CUDA = torch.device("cuda")


@pytest.fixture(params=["suite", "reproducer"])
def as_run(request):
    """`as_run(func)`: func as the suite runs it, or as the CUDA reproducer that calls it defines it."""
    if request.param == "suite":
        return lambda func: func
    return lambda func: definitions(script_for("cuda", func))[func.__name__]


@pytest.fixture
def fake_cuda(monkeypatch):
    """`fake_cuda(count)`: a FakeCuda in torch.cuda's place for this test."""
    return lambda count=1: patch_torch(monkeypatch, FakeCuda(count=count))


# --- sync(): the caller's current stream, on every device, never the whole device (promise 10)


def test_sync_waits_for_the_current_stream_of_each_device_not_the_whole_device(fake_cuda, as_run):
    cuda = fake_cuda(count=2)
    as_run(helpers.sync)(CUDA)
    assert cuda.log == [("synchronize", "default0"), ("synchronize", "default1")]


def test_sync_inside_a_stream_context_waits_for_that_stream_only(fake_cuda, as_run):
    cuda = fake_cuda(count=1)
    private = cuda.Stream()
    with cuda.stream(private):
        as_run(helpers.sync)(CUDA)
    assert ("synchronize", private.name) in cuda.log and ("synchronize", "default0") not in cuda.log
    assert ("whole device synchronize",) not in cuda.log


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
    functions = [copy_lands_in_order, copy_refusing_sync, copy_outlasting_a_stall, side_effects.caller_state,
                 *(c.enter for c in contexts.contexts_for("cuda") if c.enter is not None)]
    script = script_for("cuda", *functions)
    compile(script, "<reproducer>", "exec")
    helper_of = {"sync": helpers.sync, "stall": stall, "idle": idle, "forbid_sync": forbid_sync,
                 "allow_sync": allow_sync, "caller_state": side_effects.device_state}
    own = [(getattr(devices.CUDA, attribute), helper.__name__) for attribute, helper in helper_of.items()]
    for func, name in own + [(f, f.__name__) for f in devices.CUDA.contexts]:
        source = inspect.getsource(func).replace(f"def {func.__name__}(", f"def {name}(", 1)
        assert re.sub(r"\n\s+import torch\n", "\n", source) in script, func.__name__
    assert "import torch\n" not in script.split("import torch\n", 1)[1], "torch imported inside a function"


# --- the side-stream creation context waits for its stream on leaving (item 5)


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


def test_a_passed_promise_with_a_check_that_could_not_run_says_so(tmp_path):
    """The skipped check is untested: the pass rests on the checks that ran, and the result says which did not."""
    recorder = recorder_with(plan.plan_devices("all", {}), tmp_path)
    why = "context cuda_device_last: with 1 CUDA device, ... cannot fire (it needs two CUDA devices)"
    recorder.tallies[("12", "cuda")] = reports.Tally(passed=14, skipped=1, reasons=[why])
    recorder.tallies[("12", "cpu")] = reports.Tally(passed=12)
    entry = recorder._entry("12", "cuda")
    assert entry["verdict"] == "passed" and entry["skipped"] == 1 and entry["reason"].endswith("untested: " + why)
    assert "reason" not in recorder._entry("12", "cpu")


# --- the non-blocking check: which method, or why none (item 7)

CUDA_ENV = "CUDA_LAUNCH_BLOCKING"


@pytest.mark.parametrize(("environ", "forbids", "method"), [
    ({}, True, "forbid_sync"),
    ({CUDA_ENV: "0"}, True, "forbid_sync"),
    ({CUDA_ENV: ""}, True, "forbid_sync"),
    ({}, False, "stall"),
    ({CUDA_ENV: "1"}, True, None),
    ({CUDA_ENV: "1"}, False, None),
])
def test_how_to_see_a_copy_block(environ, forbids, method):
    how = devices.non_blocking_check(devices.CUDA, environ, forbids)
    assert how.method == method
    if method is None:
        assert how.reason.startswith("CUDA_LAUNCH_BLOCKING=1 makes every cuda launch and copy wait") and "cannot be seen" in how.reason
    else:
        assert how.reason is None


def test_a_device_with_no_way_to_see_a_copy_block_is_untested_with_why():
    bare = devices.Device("fake", pinning=True)
    how = devices.non_blocking_check(bare, {}, True)
    assert how.method is None and "cannot be seen" in how.reason
    assert devices.non_blocking_check(devices.CPU, {CUDA_ENV: "1"}, True).method is None  # nothing of CUDA's applies


def test_this_torch_can_refuse_a_hidden_synchronize():
    assert devices.CUDA.forbids_sync() == hasattr(torch.cuda, "set_sync_debug_mode")
    assert not devices.CPU.forbids_sync()


class _Buf:
    """A buffer whose copy_to_gpu does what it is told, and notes the sync debug mode it ran under."""

    def __init__(self, cuda: FakeCuda, raises: str | None = None, blocks: bool = False, index: int = 0) -> None:
        self.cuda, self.raises, self.blocks, self.mode_seen = cuda, raises, blocks, None
        self.gpu = types.SimpleNamespace(device=torch.device("cuda", index))

    def copy_to_gpu(self, n=None):
        self.mode_seen = self.cuda.mode
        if self.blocks:
            self.cuda.idle = True  # it waited for the queued job
        if self.raises:
            raise RuntimeError(self.raises)


def _run_refusing_sync(as_run, buf: _Buf) -> None:
    as_run(copy_refusing_sync)(buf, "copy_to_gpu", None, CUDA, devices.CUDA.sync_refusal)


def test_a_copy_that_does_not_synchronize_passes_and_the_mode_is_put_back(fake_cuda, as_run):
    cuda = fake_cuda()
    cuda.mode = 1  # whatever the caller had
    buf = _Buf(cuda)
    _run_refusing_sync(as_run, buf)
    assert buf.mode_seen == 2 and cuda.mode == 1


def test_a_hidden_synchronize_fails_the_check_and_the_mode_is_put_back(fake_cuda, as_run):
    cuda = fake_cuda()
    with pytest.raises(AssertionError, match=r"copy_to_gpu\(None\) synchronized with the device \(called a synchronizing CUDA"):
        _run_refusing_sync(as_run, _Buf(cuda, raises="called a synchronizing CUDA operation"))
    assert cuda.mode == 0


def test_another_error_of_the_copy_is_its_own_and_the_mode_is_put_back(fake_cuda, as_run):
    cuda = fake_cuda()
    with pytest.raises(RuntimeError, match="^out of memory$"):
        _run_refusing_sync(as_run, _Buf(cuda, raises="out of memory"))
    assert cuda.mode == 0


@pytest.mark.parametrize("blocks", [False, True])
def test_the_timing_fallback_fails_a_copy_that_waited_for_the_queued_job(fake_cuda, as_run, blocks):
    cuda = fake_cuda(count=2)
    buf = _Buf(cuda, blocks=blocks, index=1)
    check = as_run(copy_outlasting_a_stall)
    if blocks:
        with pytest.raises(AssertionError, match=r"waited for the device's queued work"):
            check(buf, "copy_to_gpu", None, CUDA)
    else:
        check(buf, "copy_to_gpu", None, CUDA)
    assert ("sleep", 1, 1 << 25) in cuda.log  # on the buffer's own device


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
    entry = recorder._entry("11", "cpu")
    assert entry["verdict"] == "not_applicable" and entry["reason"] == promises.not_applicable("11", "cpu", ("cuda",))
    alone = recorder_with(plan.plan_devices("cpu", NO_ACCELERATOR), tmp_path)
    alone.tallies[("11", "cpu")] = reports.Tally(passed=2, observed=["size (4,): raises RuntimeError: no"])
    assert alone._entry("11", "cpu")["verdict"] == "recorded"


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
def test_the_non_blocking_check_runs_by_refusing_synchronizes_on_this_torch(tmp_path, monkeypatch):
    monkeypatch.delenv(CUDA_ENV, raising=False)
    run = run_suite(tmp_path, "--device", "cuda", "--promise", "10")
    assert run.returncode == 0, run.stdout[-4000:]
    entry = run.result["promises"]["10"]["devices"]["cuda"]
    assert entry["verdict"] == "passed" and entry["skipped"] == 0 and "reason" not in entry


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
