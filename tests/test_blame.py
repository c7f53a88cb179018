"""Blame the promise that broke (issue 21, item 5): a broken class fails the promise it breaks and
no other. Each class below was caught before, but also blamed on promises it keeps; here the
shipped suite runs every promise it could be blamed on, and only the one it breaks may fail."""

from __future__ import annotations

import pytest
from suite_runner import run_suite

from cpugpu_conformance.promises import PROMISES

HELD_OUT = '''
import torch

from cpugpu_conformance.reference import CpuGpuBuffer


class RefusesNPastTheEnd(CpuGpuBuffer):
    """Promise 8: slice semantics allow an n past the first dimension; this one refuses it."""

    def copy_to_gpu(self, n=None):
        if n is not None and n > self.cpu.shape[0]:
            raise ValueError(f"n={n} is past the end of the buffer")
        return super().copy_to_gpu(n)

    def copy_to_cpu(self, n=None):
        if n is not None and n > self.cpu.shape[0]:
            raise ValueError(f"n={n} is past the end of the buffer")
        return super().copy_to_cpu(n)


class FlatNumpyView(CpuGpuBuffer):
    """Promise 5: np views the host memory, but flattened."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
        if with_numpy:
            self.np = self.cpu.numpy().reshape(-1)


class WidensUint16(CpuGpuBuffer):
    """Promise 1: uint16 buffers come out as int32 (a port written before torch had uint16)."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        if getattr(torch, "uint16", None) is not None and dtype == torch.uint16:
            dtype = torch.int32
        super().__init__(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
'''


@pytest.mark.parametrize(("cls", "breaks", "kept"), [
    ("RefusesNPastTheEnd", "8", ("9", "12")),
    ("FlatNumpyView", "5", ("3",)),
    ("WidensUint16", "1", ("2", "4", "6", "12")),
])
def test_a_broken_class_is_blamed_on_the_promise_it_breaks_only(tmp_path, cls, breaks, kept):
    impl = tmp_path / "held_out.py"
    impl.write_text(HELD_OUT)
    asked = ",".join(sorted({breaks, *kept}, key=int))
    run = run_suite(tmp_path, "--impl", f"{impl}:{cls}", "--promise", asked, "--device", "cpu")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-2000:]
    assert run.verdict(breaks) == "failed", f"{cls} breaks promise {breaks} ({PROMISES[breaks]}): {run.stdout[-3000:]}"
    wrongly = {p: run.cell.outcome(p, "cpu").describe() for p in kept if run.cell.outcome(p, "cpu").kind == "failed"}
    assert not wrongly, f"{cls} keeps these promises, yet was blamed on them: {wrongly}"
