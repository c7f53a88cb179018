"""One buffer driven through random sequences of writes, copies and inference-mode changes.

After every step the buffer is compared with a plain NumPy model, and the storages a
caller captured at construction must still be the buffer's (promises 3, 5, 8 and 9).
"""

from __future__ import annotations

import sys

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

from . import dtypes
from . import strategies as s
from .repro import Record, Scenario
from .snippets import BYTE_HELPERS, CONSTRUCT

# Dtypes whose values the model can hold exactly: small integers, written and compared.
# Two shards, each with half the examples, so pytest-xdist can run them side by side.
MODEL_DTYPES = {
    "floating": ("float32", "float64", "float16", "bfloat16", "complex64"),
    "integral": ("int64", "int32", "int8", "uint8", "bool"),
}

HOST = '''
def host(t):
    """Contents as a NumPy array on the host (bfloat16 widened to float32, exactly)."""
    t = t.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()
'''

# The invariant, in the order a failure is best explained: each part names the promise it checks.
CHECKS = (
    (
        "3",
        """
        for name in ("cpu", "gpu"):
            assert not getattr(buf, name).is_inference(), f"buf.{name} is an inference tensor"
        """,
    ),
    (
        "9",
        """
        for name in ("cpu", "gpu"):
            now, then = getattr(buf, name).untyped_storage(), captured[name].untyped_storage()
            assert now.data_ptr() == then.data_ptr(), f"buf.{name} was rebound to a new storage"
        if with_numpy:
            # An empty array shares memory with nothing: only a non-empty one can show a rebinding.
            assert buf.np is captured_np or np.shares_memory(buf.np, captured_np) or buf.np.size == 0, "buf.np was rebound"
        """,
    ),
    (
        "8",
        """
        for name, expected in (("cpu", expected_cpu), ("gpu", expected_gpu)):
            got = host(getattr(buf, name))
            assert (got == expected).all(), f"buf.{name} holds {got.tolist()}, expected {expected.tolist()}"
        """,
    ),
    (
        "5",
        """
        if with_numpy:
            assert np.shares_memory(buf.np, host(buf.cpu)) or buf.np.size == 0, "buf.np no longer views buf.cpu"
            assert (buf.np == expected_cpu).all(), f"buf.np holds {buf.np.tolist()}, expected {expected_cpu.tolist()}"
        """,
    ),
)


def _model_dtypes(device: str, shard: str) -> tuple[dtypes.DtypeInfo, ...]:
    names = MODEL_DTYPES[shard]
    return tuple(i for i in dtypes.all_dtypes(device) if i.name in names and i.copyable and i.fillable)


class BufferMachine(RuleBasedStateMachine):
    Buffer: type
    record: Record
    device: str
    shard: str

    def __init__(self) -> None:
        super().__init__()
        # Set before any step can fail: teardown reads them after a constructor that raised.
        self.sc: Scenario | None = None
        self.modes = 0  # inference_mode() blocks entered and not yet left

    @initialize(data=st.data())
    def construct(self, data):
        self.record.blame("1")  # a constructor that raises (valid arguments refused: promise 1)
        info = data.draw(st.sampled_from(_model_dtypes(self.device, self.shard)), label="dtype")
        self.sc = Scenario(
            self.Buffer,
            self.record,
            "8",
            "state machine: writes, copies and inference mode",
            self.device,
            size=data.draw(s.sizes, label="size"),
            dtype=info.dtype,
            pin_memory=data.draw(s.pin_memory_for(self.device), label="pin_memory"),
            with_numpy=data.draw(s.with_numpy_for(info), label="with_numpy"),
        )
        self.sc.run(BYTE_HELPERS + HOST)
        self.sc.run(data.draw(s.contexts_for(self.device), label="context").code(CONSTRUCT))
        # The tensors themselves, not their addresses: held here, as a caller that captured them
        # holds them, their memory cannot be handed out again. With an address alone, CUDA's
        # caching allocator gives a buffer that frees its tensor and allocates a new one the
        # same block back, and the rebinding would pass.
        self.sc.run(
            """
            captured = {name: getattr(buf, name) for name in ("cpu", "gpu")}
            captured_np = buf.np if with_numpy else None
            """
        )
        model_dtype = np.float32 if info.name == "bfloat16" else np.dtype(info.numpy)
        self.model = {side: np.zeros(self.sc["size"], dtype=model_dtype) for side in ("cpu", "gpu")}
        self.is_bool = info.name == "bool"

    @property
    def length(self) -> int:
        return self.sc["size"][0]

    def _bounds(self, data):
        start = data.draw(st.integers(0, self.length), label="start")
        return start, data.draw(st.integers(start, self.length + 1), label="stop")

    @rule(data=st.data(), side=st.sampled_from(["cpu", "gpu"]), value=st.integers(0, 3))
    def torch_assign(self, data, side, value):
        self.record.blame("3")  # an in-place write that raises
        value = value % 2 if self.is_bool else value
        a, b = self._bounds(data)
        self.sc.run(f"buf.{side}[{a}:{b}] = {value}")
        self.model[side][a:b] = value

    @rule(side=st.sampled_from(["cpu", "gpu"]))
    def torch_add(self, side):
        self.record.blame("3")  # an in-place write that raises
        if self.is_bool:
            self.sc.run(f"buf.{side}.logical_not_()")
            self.model[side] = np.logical_not(self.model[side])
        else:
            self.sc.run(f"buf.{side}.add_(1)")
            self.model[side] = self.model[side] + 1

    @precondition(lambda self: self.sc["with_numpy"])
    @rule(data=st.data(), value=st.integers(0, 3))
    def numpy_assign(self, data, value):
        self.record.blame("3")  # an in-place write that raises
        value = value % 2 if self.is_bool else value
        a, b = self._bounds(data)
        self.sc.run(f"buf.np[{a}:{b}] = {value}")
        self.model["cpu"][a:b] = value

    @rule(data=st.data(), direction=st.sampled_from(["copy_to_gpu", "copy_to_cpu"]))
    def copy(self, data, direction):
        n = data.draw(s.slice_end(self.length), label="n")
        self.record.blame("8")
        src, dst = ("cpu", "gpu") if direction == "copy_to_gpu" else ("gpu", "cpu")
        self.sc.run(f"buf.{direction}({n!r})")
        self.model[dst][:n] = self.model[src][:n]

    @precondition(lambda self: self.modes < 2)
    @rule()
    def enter_inference_mode(self):
        # A fresh mode object each time: reusing one for nested blocks leaks inference mode.
        self.sc.run(f"mode{self.modes + 1} = torch.inference_mode()\nmode{self.modes + 1}.__enter__()")
        self.modes += 1  # only once entered: teardown leaves exactly the blocks that were

    @precondition(lambda self: self.modes > 0)
    @rule()
    def leave_inference_mode(self):
        self.sc.run(f"mode{self.modes}.__exit__(None, None, None)")
        self.modes -= 1

    @invariant()
    def matches_model(self):
        # The checks read the host; a copy may still be landing. The wait is a step, not part
        # of a check (only the last check stays in the reproducer), so the pasted script
        # waits after every step where the run did, and is as race-free as the run.
        self.record.blame("8")  # a copy that failed on the device surfaces at the wait
        self.sc.run("sync()")
        expected = {"expected_cpu": self.model["cpu"].copy(), "expected_gpu": self.model["gpu"].copy()}
        for promise, check in CHECKS:
            self.record.blame(promise)
            self.sc.check(check, **{k: v for k, v in expected.items() if k in check})

    def teardown(self):
        # Leave every inference_mode() block, even after a failure: it would poison later tests.
        while self.sc is not None and self.modes:
            self.sc.ns[f"mode{self.modes}"].__exit__(None, None, None)
            self.modes -= 1
        # Hypothesis calls teardown in a `finally`: with a failure in flight, that failure is the
        # report, and an error raised here would replace it.
        if sys.exc_info()[1] is None:
            assert not torch.is_inference_mode_enabled(), "inference mode is still on after the run"


@pytest.mark.promise("3", "5", "8", "9")
@pytest.mark.costly
@pytest.mark.parametrize("shard", sorted(MODEL_DTYPES))
def test_buffer_state_machine(Buffer, record, device, shard):
    attrs = {"Buffer": Buffer, "record": record, "device": device, "shard": shard}
    machine = type(f"BufferMachine_{device}_{shard}", (BufferMachine,), attrs)
    half = settings(settings.default, max_examples=max(1, settings.default.max_examples // len(MODEL_DTYPES)))
    run_state_machine_as_test(machine, settings=half)
