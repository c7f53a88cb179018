"""The state machine's reproducers are as race-free as its runs, and its storage checks see a
buffer that frees its tensor and takes a new one at the same address (issue 15, items 2 and 8)."""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap

import pytest
import torch
from suite_runner import run_script, run_suite

from cpugpu_conformance import devices
from cpugpu_conformance.testing.buffer.base import blamed_afresh
from cpugpu_conformance.testing.shared import checks
from cpugpu_conformance.testing.shared.reproducer import Name, Record, Scenario

# Correct, except that its second copy_to_gpu copies nothing: a failure the state machine
# finds only after two copies, so its reproducer shows what happens between copies.
SECOND_COPY_LOST = '''
from cpugpu_conformance.reference import CpuGpuBuffer


class SecondCopyLostBuffer(CpuGpuBuffer):
    copies = 0

    def copy_to_gpu(self, n=None):
        self.copies += 1
        if self.copies == 2:
            return self.gpu[:n]
        return super().copy_to_gpu(n)
'''

COPY_LINE = re.compile(r"^copy\(buf, 'copy_to_(gpu|cpu)', .*\)$")  # the machine's copy step


def _statements(script: str) -> list[str]:
    """The script's lines that are code, without blank lines and comments."""
    return [line for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _state_machine_failure(tmp_path, impl: str, promise: str) -> str:
    run = run_suite(tmp_path, "--impl", impl, "--promise", promise, "--device", "cpu", "-k", "test_buffer_state_machine and integral")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-2000:]
    assert run.verdict(promise) == "failed"
    failure = run.failures(promise)[0]
    assert "test_buffer_state_machine" in failure["test"], failure["test"]
    return failure["reproducer"]


def _holds_against_the_reference(tmp_path, script: str, impl_line: str) -> None:
    fixed = script.replace(impl_line, "from cpugpu_conformance.reference import CpuGpuBuffer as Buffer")
    assert fixed != script
    held = run_script(tmp_path, fixed, "reference.py")
    assert held.returncode == 0 and "ok: the promise held" in held.stdout, held.stdout + held.stderr


def test_state_machine_reproducer_waits_after_every_copy(tmp_path):
    impl = tmp_path / "second_copy_lost.py"
    impl.write_text(SECOND_COPY_LOST)
    script = _state_machine_failure(tmp_path, f"{impl}:SecondCopyLostBuffer", "8")
    lines = _statements(script)
    copies = [i for i, line in enumerate(lines) if COPY_LINE.match(line)]
    assert len(copies) >= 2, script  # the second copy is the bug: both are in the script
    for i in copies:
        assert lines[i + 1] == "sync(device)", f"no sync(device) right after {lines[i]!r}:\n{script}"
    # The wait is the registry's function for the device, under the helper's name, not the suite's own.
    own = devices.get("cpu").sync
    waits = textwrap.dedent(inspect.getsource(own)).replace(f"def {own.__name__}(", "def sync(", 1)
    assert waits in script, f"{waits!r} not in:\n{script}"
    alone = run_script(tmp_path, script)
    assert alone.returncode != 0 and "ok: the promise held" not in alone.stdout, alone.stdout + alone.stderr
    assert "buf.gpu holds" in alone.stderr
    _holds_against_the_reference(tmp_path, script, "Buffer = _module.SecondCopyLostBuffer")


def test_state_machine_catches_a_buffer_that_frees_and_reallocates_its_tensor(tmp_path):
    # The allocator hands the freed block back (CUDA's does; the variant does so on the CPU
    # too): only a machine that holds the captured tensors sees a new address. Its reproducer
    # must fail on its own: with addresses kept as integers it printed "ok".
    script = _state_machine_failure(tmp_path, "cpugpu_conformance.variants:ReallocatingBuffer", "9")
    alone = run_script(tmp_path, script)
    assert alone.returncode != 0 and "ok: the promise held" not in alone.stdout, script + alone.stdout
    assert "buf.gpu was rebound to a new storage" in alone.stderr, alone.stderr
    _holds_against_the_reference(tmp_path, script, "from cpugpu_conformance.variants import ReallocatingBuffer as Buffer")


def test_the_reallocating_variant_reuses_the_freed_address_on_the_cpu():
    # What makes the variant a test of the check: without a holder, the new tensor has the old address.
    from cpugpu_conformance.variants import ReallocatingBuffer

    buf = ReallocatingBuffer(4, 3, dtype=torch.float32, device=torch.device("cpu"), pin_memory=False, with_numpy=False)
    before = buf.gpu.untyped_storage().data_ptr()
    buf.cpu.fill_(7)
    buf.copy_to_gpu()
    assert buf.gpu.untyped_storage().data_ptr() == before
    assert (buf.gpu == 7).all() and not buf.gpu.is_inference()
    held = buf.gpu
    buf.copy_to_gpu(1)
    assert buf.gpu.untyped_storage().data_ptr() != held.untyped_storage().data_ptr()


class StorageOverlapBuffer:
    """cpu and gpu are distinct storage objects over one host allocation: gpu's storage is the
    second half of the memory cpu's storage spans. No element is shared, so writes cannot show
    it; the address ranges do (the start addresses differ)."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        numel = torch.Size(size).numel()
        whole = torch.zeros(2 * numel, dtype=dtype)
        self.cpu = torch.empty(0, dtype=dtype).set_(whole.untyped_storage(), 0, size)
        second_half = torch.zeros(0, dtype=torch.uint8).set_(whole.untyped_storage()).view(dtype)[numel:]
        self.gpu = torch.from_dlpack(second_half).view(size)
        self.with_numpy = with_numpy

    def copy_to_gpu(self, n=None):
        return self.gpu[:n].copy_(self.cpu[:n])

    def copy_to_cpu(self, n=None):
        return self.cpu[:n].copy_(self.gpu[:n])


def _two_storages(Buffer) -> None:
    record = Record()
    sc = Scenario(record, "4", "cpu", factory=Buffer, size=(3, 2), dtype=torch.float32, pin_memory=False,
                  with_numpy=False)
    sc.call(Name("make"), into="buf")
    try:
        sc.call(checks.two_storages)
    finally:  # the whole check is in the reproducer, and the call to it, whether it passed or failed
        script = record.reproducer()
        assert textwrap.dedent(inspect.getsource(checks.two_storages)).strip() in script
        assert script.rstrip().splitlines()[-2] == "two_storages(buf, device)", script


def test_two_storages_sees_one_storage_over_part_of_the_other():
    probe = StorageOverlapBuffer(3, 2, dtype=torch.float32, device=torch.device("cpu"), pin_memory=False)
    assert probe.cpu.untyped_storage().data_ptr() != probe.gpu.untyped_storage().data_ptr()
    with pytest.raises(AssertionError, match="buf.cpu and buf.gpu share memory"):
        _two_storages(StorageOverlapBuffer)


def test_two_storages_holds_for_the_reference():
    from cpugpu_conformance.reference import CpuGpuBuffer

    _two_storages(CpuGpuBuffer)


# --- each example ends with its device's queued work done (testing/buffer/base.py: settle, drain)


def _built(record, device):
    """A scenario of the example whose first step built `buf` (the reference, float32, two rows)."""
    from cpugpu_conformance.reference import CpuGpuBuffer

    sc = Scenario(record, "2", device, factory=CpuGpuBuffer, size=(2,), dtype=torch.float32, pin_memory=False)
    sc.call(Name("make"), into="buf")
    return sc


def test_work_that_fails_when_it_runs_fails_the_example_that_queued_it(monkeypatch):
    """An accelerator may fail a queued kernel when it runs, not when it is called (sim runs each on its
    stream's worker). Each example ends with its device's work done, so the failure is that example's,
    its reproducer ending with the wait, and the next example starts clean; left queued, it surfaced at
    the next example's first wait, and hypothesis called the test flaky (CI, torch 2.14.1 on sim)."""
    pending: list[str] = []

    def fails_at_the_wait(device):
        if pending:
            raise RuntimeError(pending.pop())

    # The CPU, as a device with a queue: its wait raises what a queued kernel left.
    monkeypatch.setitem(devices.REGISTRY, "cpu", dataclasses.replace(devices.CPU, sync=fails_at_the_wait))

    @blamed_afresh
    def example(record, device, queue_a_failure):
        _built(record, device)
        if queue_a_failure:
            pending.append("fill_ has no kernel for this dtype")

    record = Record()
    with pytest.raises(RuntimeError, match="fill_ has no kernel"):
        example(record=record, device="cpu", queue_a_failure=True)
    assert _statements(record.reproducer())[-3:-1] == ["buf = make()", "sync(torch.device('cpu'))"]
    example(record=record, device="cpu", queue_a_failure=False)  # the next example: nothing left over
    assert not pending

    # An example that failed on its own keeps its failure and its reproducer: the queue is drained, and
    # what it held is not reported.
    def holds_ones(buf):
        assert (buf.cpu == 1).all(), "the check failed"

    @blamed_afresh
    def failing(record, device):
        sc = _built(record, device)
        pending.append("queued")
        sc.check(holds_ones, Name("buf"))

    record = Record()
    with pytest.raises(AssertionError, match="the check failed"):
        failing(record=record, device="cpu")
    assert not pending  # drained
    assert _statements(record.reproducer())[-3:-1] == ["buf = make()", "holds_ones(buf)"]  # its reproducer as it was


def test_on_the_cpu_an_example_waits_for_nothing():
    """The CPU's work is done when the call returns: its examples add no wait, and no step."""
    @blamed_afresh
    def example(record, device):
        _built(record, device)

    record = Record()
    example(record=record, device="cpu")
    assert "sync(" not in record.reproducer()


def test_ctrl_c_during_an_examples_wait_is_never_swallowed(monkeypatch):
    """The wait after a failed example swallows what the device raises, never an interrupt: Ctrl-C
    there ends the run as interrupted, as anywhere else."""
    def interrupted(device):
        raise KeyboardInterrupt

    monkeypatch.setitem(devices.REGISTRY, "cpu", dataclasses.replace(devices.CPU, sync=interrupted))

    @blamed_afresh
    def failing(record, device):
        _built(record, device)
        raise AssertionError("the check failed")

    with pytest.raises(KeyboardInterrupt):
        failing(record=Record(), device="cpu")
