"""One buffer driven through random sequences of writes, copies and inference-mode changes.

After every step the buffer is compared with a plain NumPy model, and the storages a
caller captured at construction must still be the buffer's (promises 3, 5, 8 and 9).
`BufferStateMachine` runs against any class, as zarr's stateful store tests do:

    from hypothesis.stateful import run_state_machine_as_test
    run_state_machine_as_test(BufferStateMachine.for_class(OurBuffer, device="cpu"))

PYTEST_DONT_REWRITE (why: cpugpu_conformance.testing's docstring).
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from cpugpu_conformance import promises as P

from ..shared import budget, dtypes
from ..shared import strategies as s
from ..shared.checks import separate_storages, shape_dtype_device
from ..shared.helpers import host, sync
from ..shared.reproducer import Name, Record, Scenario
from .base import BufferTests, construct_blamed, construct_in, contract_test, refused_as_inference

# Dtypes whose values the model can hold exactly: small integers, written and compared.
# Two shards, each with half the examples, so pytest-xdist can run them side by side.
MODEL_DTYPES = {
    "floating": ("float32", "float64", "float16", "bfloat16", "complex64"),
    "integral": ("int64", "int32", "int8", "uint8", "bool"),
}


# --- the steps, as the reproducer shows them

def capture_tensors(buf, with_numpy):
    """The tensors themselves, not their addresses: held, as a caller that captured them holds them,
    their memory cannot be handed out again (CUDA's caching allocator would give a buffer that
    frees its tensor and allocates a new one the same block back, and a rebinding would pass)."""
    return {name: getattr(buf, name) for name in ("cpu", "gpu")}, (buf.np if with_numpy else None)


def start_from_zeros(buf):
    """The model's first state, written: what a buffer starts with is promise 2's business, not the machine's."""
    buf.cpu.zero_()
    buf.gpu.zero_()


def assign(buf, side, start, stop, value):
    """buf.<side>[start:stop] = value, through torch (cpu, gpu) or NumPy (np)."""
    getattr(buf, side)[start:stop] = value


def add_one(buf, side):
    getattr(buf, side).add_(1)


def negate(buf, side):
    getattr(buf, side).logical_not_()


def copy(buf, method, n):
    getattr(buf, method)(n)


def enter_inference_mode(modes):
    """A fresh mode object each time: reusing one for nested blocks leaks inference mode."""
    mode = torch.inference_mode()
    mode.__enter__()
    modes.append(mode)


def leave_inference_mode(modes):
    modes.pop().__exit__(None, None, None)


# --- the invariant, in the order a failure is best explained: each part names its promise

def not_inference_tensors(buf):
    for name in ("cpu", "gpu"):
        assert not getattr(buf, name).is_inference(), f"buf.{name} is an inference tensor"


def same_storages(buf, captured, captured_np, with_numpy):
    for name in ("cpu", "gpu"):
        now, then = getattr(buf, name).untyped_storage(), captured[name].untyped_storage()
        assert now.data_ptr() == then.data_ptr(), f"buf.{name} was rebound to a new storage"
    if with_numpy:
        # An empty array shares memory with nothing: only a non-empty one can show a rebinding.
        assert buf.np is captured_np or np.shares_memory(buf.np, captured_np) or buf.np.size == 0, "buf.np was rebound"


def holds_the_model(buf, expected_cpu, expected_gpu):
    for name, expected in (("cpu", expected_cpu), ("gpu", expected_gpu)):
        got = host(getattr(buf, name))
        assert (got == expected).all(), f"buf.{name} holds {got.tolist()}, expected {expected.tolist()}"


def numpy_still_views(buf, expected_cpu, with_numpy):
    if with_numpy:
        assert np.shares_memory(buf.np, host(buf.cpu)) or buf.np.size == 0, "buf.np no longer views buf.cpu"
        assert (buf.np == expected_cpu).all(), f"buf.np holds {buf.np.tolist()}, expected {expected_cpu.tolist()}"


INVARIANT = (
    (P.MUTABLE, not_inference_tensors),
    (P.FOR_LIFE, same_storages),
    # A device tensor over the host's memory makes the model's comparison fail: promise 4's, not the copies'.
    (P.TWO_STORAGES, separate_storages),
    (P.PARTIAL_COPIES, holds_the_model),
    (P.NUMPY_VIEW, numpy_still_views),
)
# What the machine checks, in the contract's order (two storages only guards the model's comparison).
PROMISES = tuple(sorted((promise for promise, _ in INVARIANT if promise != P.TWO_STORAGES), key=int))


@cache
def _model_dtypes(device: str, shard: str) -> st.SearchStrategy[dtypes.DtypeInfo]:
    """The shard's dtypes the model holds, built once per process (why: shared/strategies.py)."""
    names = MODEL_DTYPES[shard]
    return st.sampled_from(tuple(i for i in dtypes.all_dtypes(device) if i.name in names and i.copyable and i.fillable))


class BufferStateMachine(RuleBasedStateMachine):
    """Writes, copies and inference-mode changes on one buffer, checked against a NumPy model."""

    suite: BufferTests  # builds the buffer (its make_buffer) and names the class in reproducers
    record: Record
    device: str = "cpu"
    shard: str = "floating"

    @classmethod
    def for_class(cls, buffer_cls: type | None = None, *, device: str = "cpu", shard: str = "floating",
                  suite: BufferTests | None = None, record: Record | None = None) -> type[BufferStateMachine]:
        """A machine for `buffer_cls` (or for a test class's make_buffer, `suite`) on `device`."""
        if suite is None:
            suite = type("Suite", (BufferTests,), {"buffer_cls": buffer_cls})()
        record = record or Record(suite._import_line(), promise=PROMISES[0])
        attrs = {"suite": suite, "record": record, "device": device, "shard": shard}
        return type(f"BufferMachine_{device}_{shard}", (cls,), attrs)

    def __init__(self) -> None:
        super().__init__()
        # Set before any step can fail: teardown reads them after a constructor that raised.
        self.sc: Scenario | None = None

    @initialize(data=st.data())
    def construct(self, data):
        info = data.draw(_model_dtypes(self.device, self.shard), label="dtype")
        self.sc = self.suite.scenario(
            self.record, self.device, title="state machine: writes, copies and inference mode",
            size=data.draw(s.sizes, label="size"),
            dtype=info.dtype,
            pin_memory=data.draw(s.pin_memory_for(self.device), label="pin_memory"),
            with_numpy=data.draw(s.with_numpy_for(info), label="with_numpy"),
            modes=[],  # inference_mode() blocks entered and not yet left
        )
        context = data.draw(s.contexts_for(self.device), label="context")
        # A constructor that raises refuses valid arguments: promise 1.
        construct_blamed(self.record, P.SHAPE_AND_DTYPE, lambda: construct_in(self.sc, context))
        # The shapes and dtypes the model assumes, before it compares anything: promise 1.
        construct_blamed(self.record, P.SHAPE_AND_DTYPE, lambda: self.sc.call(shape_dtype_device))
        self.sc.call(capture_tensors, into=("captured", "captured_np"))
        self.record.blame(P.MUTABLE)  # an in-place write that raises
        self.sc.call(start_from_zeros, Name("buf"))
        model_dtype = np.float32 if info.name == "bfloat16" else np.dtype(info.numpy)
        self.model = {side: np.zeros(self.sc["size"], dtype=model_dtype) for side in ("cpu", "gpu")}
        self.is_bool = info.name == "bool"

    @property
    def length(self) -> int:
        assert self.sc is not None, "the rules run after construct"
        return self.sc["size"][0]

    def _bounds(self, data):
        start = data.draw(st.integers(0, self.length), label="start")
        return start, data.draw(st.integers(start, self.length + 1), label="stop")

    @rule(data=st.data(), side=st.sampled_from(["cpu", "gpu"]), value=st.integers(0, 3))
    def torch_assign(self, data, side, value):
        self.record.blame(P.MUTABLE)  # an in-place write that raises
        value = value % 2 if self.is_bool else value
        a, b = self._bounds(data)
        self.sc.call(assign, Name("buf"), side, a, b, value)
        self.model[side][a:b] = value

    @rule(side=st.sampled_from(["cpu", "gpu"]))
    def torch_add(self, side):
        self.record.blame(P.MUTABLE)  # an in-place write that raises
        if self.is_bool:
            self.sc.call(negate, Name("buf"), side)
            self.model[side] = np.logical_not(self.model[side])
        else:
            self.sc.call(add_one, Name("buf"), side)
            self.model[side] = self.model[side] + 1

    @precondition(lambda self: self.sc["with_numpy"])
    @rule(data=st.data(), value=st.integers(0, 3))
    def numpy_assign(self, data, value):
        self.record.blame(P.MUTABLE)  # an in-place write that raises
        value = value % 2 if self.is_bool else value
        a, b = self._bounds(data)
        self.sc.call(assign, Name("buf"), "np", a, b, value)
        self.model["cpu"][a:b] = value

    @rule(data=st.data(), direction=st.sampled_from(["copy_to_gpu", "copy_to_cpu"]))
    def copy(self, data, direction):
        n = data.draw(s.slice_end(self.length), label="n")
        self.record.blame(P.PARTIAL_COPIES)
        src, dst = ("cpu", "gpu") if direction == "copy_to_gpu" else ("gpu", "cpu")
        try:
            self.sc.call(copy, Name("buf"), direction, n)
        except Exception as exc:
            if refused_as_inference(exc):  # torch refused the copy: an inference tensor, promise 3's
                self.record.blame(P.MUTABLE)
            raise
        self.model[dst][:n] = self.model[src][:n]

    @precondition(lambda self: len(self.sc["modes"]) < 2)
    @rule()
    def enter_inference_mode(self):
        self.sc.call(enter_inference_mode, Name("modes"))

    @precondition(lambda self: len(self.sc["modes"]) > 0)
    @rule()
    def leave_inference_mode(self):
        self.sc.call(leave_inference_mode, Name("modes"))

    @invariant()
    def matches_model(self):
        # The checks read the host; a copy may still be landing. The wait is a step, not part
        # of a check (only the last check stays in the reproducer), so the pasted script
        # waits after every step where the run did, and is as race-free as the run.
        self.record.blame(P.PARTIAL_COPIES)  # a copy that failed on the device surfaces at the wait
        self.sc.call(sync)
        expected = {"expected_cpu": self.model["cpu"].copy(), "expected_gpu": self.model["gpu"].copy()}
        for promise, check in INVARIANT:
            self.record.blame(promise)
            params = check.__code__.co_varnames[:check.__code__.co_argcount]
            args = [expected[p] if p in expected else Name(p) for p in params]
            self.sc.check(check, *args)

    def teardown(self):
        # Leave every inference_mode() block, even after a failure: it would poison later tests.
        modes = self.sc["modes"] if self.sc is not None else []
        while modes:
            modes.pop().__exit__(None, None, None)
        # Hypothesis calls teardown in a `finally`: with a failure in flight, that failure is the
        # report, and an error raised here would replace it.
        if sys.exc_info()[1] is None:
            assert not torch.is_inference_mode_enabled(), "inference mode is still on after the run"


class StateMachineTests(BufferTests):
    """Promises 3, 5, 8 and 9, by the state machine: each shard of model dtypes is one test."""

    @pytest.mark.cpugpu_costly
    @pytest.mark.parametrize("shard", sorted(MODEL_DTYPES))
    @contract_test(*PROMISES, examples=budget.share(len(MODEL_DTYPES), floor=1, stateful=True))  # floors: stamps.py
    def test_buffer_state_machine(self, record, device, shard):
        machine = BufferStateMachine.for_class(device=device, shard=shard, suite=self, record=record)
        run_state_machine_as_test(machine, settings=self.state_machine_settings())

    @staticmethod
    def state_machine_settings() -> Any:
        """Half the profile's examples per shard, with what the suite needs (never the explain phase)."""
        half = max(1, budget.profile_examples() // len(MODEL_DTYPES))
        return settings(settings.default, max_examples=half, phases=budget.phases(), **budget.NEEDED)
