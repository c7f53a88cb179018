"""Promise 3: the tensors are mutable wherever the buffer was made, inside and outside inference mode.

The refusal of an in-place update to an inference tensor comes *after* the write, so
these tests check that no exception is raised and that `is_inference()` is False; they
never infer mutability from contents.

PYTEST_DONT_REWRITE (why: cpugpu_conformance.testing's docstring).
"""

from __future__ import annotations

from functools import cache

import torch
from hypothesis import strategies as st

from cpugpu_conformance import promises as P

from ..shared import checks
from ..shared import strategies as s
from ..shared.helpers import raw, sync
from ..shared.reproducer import Name, Record
from .base import (
    INFERENCE_REFUSALS,
    BufferTests,
    blame_by_line,
    construct_blamed,
    construct_in,
    constructor_promise,
    contract_test,
    line_that_raised,
    property_test,
)


def not_inference(buf):
    for name in ("cpu", "gpu"):
        assert not getattr(buf, name).is_inference(), (
            f"buf.{name} is an inference tensor: in-place updates outside inference mode will raise"
        )


def plain_tensors(buf, device):
    """Plain host tensors holding what the buffer holds now: the writes to the buffer must produce
    what the same writes produce on them (what a buffer starts with is promise 2's, not this one's)."""
    sync(device)
    return buf.cpu.detach().to("cpu", copy=True), buf.gpu.detach().to("cpu", copy=True)


# A buffer's first use, made in the context that built it: a class that allocates lazily (on the
# first access of cpu, gpu or np, or at its first copy) allocates then, in that context's mode.
# "construct": none, the tensors are first touched outside the context. Simplest first.
FIRST_USES = ("construct", "access", "copy_to_gpu", "copy_to_cpu", "np_write")


def use_first(buf, first_use):
    """The buffer's first use (FIRST_USES), still inside the context that made it."""
    if first_use == "access":
        return buf.cpu, buf.gpu
    if first_use == "np_write":
        buf.np[:1] = 1
    elif first_use == "copy_to_gpu":
        buf.copy_to_gpu()
    elif first_use == "copy_to_cpu":
        buf.copy_to_cpu()
    return None


def made_and_first_used(make, first_use):
    """Build the buffer and use it first, both in the creation context."""
    buf = make()
    use_first(buf, first_use)
    return buf


def blame_first_use(record: Record, exc: BaseException, constructor: str) -> None:
    """A first use that raised: the constructor breaks `constructor`'s promise, a NumPy write promise 5,
    a copy promise 8, an access that cannot give the tensors promise 1 (an inference refusal is 3's:
    base.blamed_afresh)."""
    if line_that_raised(exc, use_first):
        blame_by_line(record, exc, use_first, (("buf.np", P.NUMPY_VIEW), ("copy_to_", P.PARTIAL_COPIES)),
                      default=P.SHAPE_AND_DTYPE)
    else:
        record.blame(constructor)


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
INFERENCE_REFUSAL = INFERENCE_REFUSALS[0]


def original_bug(make, device, first_use):
    """vLLM's elastic EP scaling: buffers rebuilt inside inference_mode(), then updated in place outside
    it; and vLLM's lazily allocated state, first used inside inference_mode() too (`first_use`)."""
    with torch.inference_mode():
        buf = make()
        use_first(buf, first_use)

    # Outside inference mode again, the engine updates the buffer in place:
    buf.cpu[0] = 1.0  # torch write on the host tensor
    buf.np[1:] = 2.0  # NumPy write through the view
    assert buf.cpu.tolist() == [[1.0] * 3] + [[2.0] * 3] * 3, "a write through buf.np did not reach buf.cpu"
    buf.copy_to_gpu()
    buf.gpu[2] += 1.0  # torch write on the device tensor
    buf.copy_to_cpu()
    sync(device)
    expected = [[1.0] * 3, [2.0] * 3, [3.0] * 3, [2.0] * 3]
    assert buf.cpu.tolist() == expected, f"copy_to_gpu, += and copy_to_cpu left {buf.cpu.tolist()}"
    assert not buf.cpu.is_inference() and not buf.gpu.is_inference()


@st.composite
def mutations(draw, with_numpy: bool):
    targets = ["cpu", "gpu"] + (["np"] if with_numpy else [])
    target = draw(st.sampled_from(targets))
    op = "np_assign" if target == "np" else draw(st.sampled_from(TORCH_OPS))
    return target, op, draw(st.integers(0, 3)), draw(st.booleans())


# Built once per process, not per example (why: shared/strategies.py).
@cache
def mutation_lists(with_numpy: bool) -> st.SearchStrategy:
    return st.lists(mutations(with_numpy), min_size=1, max_size=4)


@cache
def first_uses(with_numpy: bool) -> st.SearchStrategy:
    return st.sampled_from(FIRST_USES if with_numpy else FIRST_USES[:-1])


class MutabilityTests(BufferTests):
    """Promise 3: mutable wherever made, and wherever first used, inside and outside inference mode."""

    @property_test(P.MUTABLE)
    def test_mutable_wherever_made(self, record, device, data):
        """Built in a drawn context, and first used there too (FIRST_USES, drawn): then written in place."""
        context = data.draw(s.contexts_for(device), label="context")
        sc = self.build(record, device, data, s.fillable_dtype(device), context=context, construct=False)
        first_use = data.draw(first_uses(sc["with_numpy"]), label="first use")
        constructor = constructor_promise(P.MUTABLE, context)
        if first_use == "construct":
            construct_blamed(record, constructor, lambda: construct_in(sc, context))
        else:
            sc.bind(first_use=first_use)
            try:
                construct_in(sc, context, made_and_first_used, Name("make"), Name("first_use"))
            except Exception as exc:
                blame_first_use(record, exc, constructor)
                raise
        sc.call(not_inference)
        sc.call(plain_tensors, into=("model_cpu", "model_gpu"))
        drawn = data.draw(mutation_lists(sc["with_numpy"]), label="mutations")
        for target, op, k, inside in drawn:
            sc.call(mutate, Name("buf"), Name("model_cpu"), Name("model_gpu"), target=target, op=op, k=k,
                    inside_inference_mode=inside)
        record.blame(P.TWO_STORAGES)  # a write to one tensor that shows in the other: they share memory
        sc.call(checks.separate_storages)
        record.blame(None)
        if any(target == "np" for target, *_ in drawn):
            record.blame(P.NUMPY_VIEW)  # a NumPy write that did not land: np is no view of cpu
        sc.call(holds_what_was_written)
        record.blame(None)
        sc.call(not_inference)

    @contract_test(P.MUTABLE)
    def test_original_bug_buffer_made_in_inference_mode(self, record, device):
        """vLLM's elastic EP scaling: buffers rebuilt inside inference_mode(), then updated in place outside
        it; then the same with the buffer first used inside inference_mode() too, in each way (FIRST_USES)."""
        for first_use in FIRST_USES:
            sc = self.scenario(record, device, size=(4, 3), dtype=torch.float32, pin_memory=False, with_numpy=True,
                               first_use=first_use)
            try:
                sc.call(original_bug)
            except Exception as exc:
                if INFERENCE_REFUSAL not in str(exc):  # the bug itself is promise 3's; any other step is its own
                    blame_by_line(record, exc, original_bug, (
                        ("copy_to_", P.PARTIAL_COPIES), ("sync(", P.PARTIAL_COPIES), ("buf.np", P.NUMPY_VIEW)))
                    if line_that_raised(exc, use_first):  # the first use, inside inference mode
                        blame_first_use(record, exc, P.MUTABLE)
                raise
