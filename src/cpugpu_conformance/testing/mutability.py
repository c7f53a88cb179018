"""Promise 3: the tensors are mutable wherever the buffer was made, inside and outside inference mode.

The refusal of an in-place update to an inference tensor comes *after* the write, so
these tests check that no exception is raised and that `is_inference()` is False; they
never infer mutability from contents.

PYTEST_DONT_REWRITE (pytest loads the package as a plugin): the asserts say what broke themselves,
and the functions go into reproducers as they are written.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from cpugpu_conformance import promises as P

from . import strategies as s
from .base import BufferTests, blame_by_line, contract_test, property_test
from .helpers import raw, sync
from .reproducer import Name


def not_inference(buf):
    for name in ("cpu", "gpu"):
        assert not getattr(buf, name).is_inference(), (
            f"buf.{name} is an inference tensor: in-place updates outside inference mode will raise"
        )


def plain_tensors(size, dtype):
    """Plain tensors made here: what the writes to the buffer must produce."""
    return torch.zeros(size, dtype=dtype), torch.zeros(size, dtype=dtype)


# Torch in-place ops and index assignment, applied to the buffer and to a plain tensor alike.
TORCH_OPS = ("copy_", "fill_", "index_assign", "zero_")


def write(t, op, k):
    """One in-place write to a tensor (or, for "np_assign", an array)."""
    if op == "fill_":
        t.fill_(1)
    elif op == "zero_":
        t.zero_()
    elif op == "copy_":
        t.copy_(torch.ones_like(t))
    else:  # "index_assign" on a tensor, "np_assign" on buf.np
        t[:k] = 1


def mutate(buf, model_cpu, model_gpu, target, op, k, inside_inference_mode):
    """The same write to buf.<target> and to its plain model (buf.np's model is model_cpu)."""
    model = model_gpu if target == "gpu" else model_cpu
    if inside_inference_mode:
        with torch.inference_mode():
            write(getattr(buf, target), op, k)
            write(model, op, k)
    else:
        write(getattr(buf, target), op, k)
        write(model, op, k)


def holds_what_was_written(buf, model_cpu, model_gpu, device):
    sync(device)
    assert (raw(buf.cpu) == raw(model_cpu)).all(), "buf.cpu does not hold what was written to it"
    assert (raw(buf.gpu) == raw(model_gpu)).all(), "buf.gpu does not hold what was written to it"


# How torch refuses an in-place update of an inference tensor outside inference mode: the seed's bug.
INFERENCE_REFUSAL = "Inplace update to inference tensor outside InferenceMode"


def original_bug(make, device):
    """vLLM's elastic EP scaling: buffers rebuilt inside inference_mode(), then updated in place outside it."""
    with torch.inference_mode():
        buf = make()

    # Outside inference mode again, the engine updates the buffer in place:
    buf.cpu[0] = 1.0  # torch write on the host tensor
    buf.np[1] = 2.0  # NumPy write through the view
    buf.copy_to_gpu()
    buf.gpu[2] += 3.0  # torch write on the device tensor
    buf.copy_to_cpu()
    sync(device)
    assert buf.np.tolist() == [[1.0] * 3, [2.0] * 3, [3.0] * 3, [0.0] * 3], buf.np.tolist()
    assert not buf.cpu.is_inference() and not buf.gpu.is_inference()


@st.composite
def mutations(draw, with_numpy: bool):
    targets = ["cpu", "gpu"] + (["np"] if with_numpy else [])
    target = draw(st.sampled_from(targets))
    op = "np_assign" if target == "np" else draw(st.sampled_from(TORCH_OPS))
    return target, op, draw(st.integers(0, 3)), draw(st.booleans())


class MutabilityTests(BufferTests):
    """Promise 3: mutable wherever made, inside and outside inference mode."""

    @property_test(P.MUTABLE)
    def test_mutable_wherever_made(self, record, device, data):
        sc = self.build(record, device, data, s.fillable_dtype(device), contexts=True)
        sc.call(not_inference)
        sc.call(plain_tensors, into=("model_cpu", "model_gpu"))
        drawn = data.draw(st.lists(mutations(sc["with_numpy"]), min_size=1, max_size=4), label="mutations")
        for target, op, k, inside in drawn:
            sc.call(mutate, Name("buf"), Name("model_cpu"), Name("model_gpu"), target=target, op=op, k=k,
                    inside_inference_mode=inside)
        if any(target == "np" for target, *_ in drawn):
            record.blame(P.NUMPY_VIEW)  # a NumPy write that did not land: np is no view of cpu
        sc.call(holds_what_was_written)
        record.blame(None)
        sc.call(not_inference)

    @contract_test(P.MUTABLE)
    def test_original_bug_buffer_made_in_inference_mode(self, record, device):
        """vLLM's elastic EP scaling: buffers rebuilt inside inference_mode(), then updated in place outside it."""
        sc = self.scenario(record, device, size=(4, 3), dtype=torch.float32, pin_memory=False, with_numpy=True)
        try:
            sc.call(original_bug)
        except Exception as exc:
            if INFERENCE_REFUSAL not in str(exc):  # the bug itself is promise 3's; any other step is its own
                blame_by_line(record, exc, original_bug, (("buf.np", P.NUMPY_VIEW), ("copy_to_", P.PARTIAL_COPIES),
                                                          ("sync(", P.PARTIAL_COPIES)))
            raise
