"""Promise 12: no side effects on the caller.

Constructing a buffer and calling its copies leave the caller's grad mode, inference
mode, default device and default dtype (and a device's own state: its current device and
stream) as they were, in every creation context. The state is checked inside the context,
right after each call (a class that switches grad on with `torch.set_grad_enabled(True)` is
caught inside `no_grad()`), and again once the context is left. Every context runs in every
run: it is a pytest parameter. The state only one device has (its current stream, say) comes
from the registry, devices.py. A context that is the plain one on this machine (the last
CUDA device made current, with one device) cannot show what it is there for: its test is
skipped with the reason, untested, never passed.

PYTEST_DONT_REWRITE (why: cpugpu_conformance.testing's docstring).
"""

from __future__ import annotations

import pytest

from cpugpu_conformance import promises as P

from ..shared import budget
from ..shared import strategies as s
from ..shared.caller import caller_state
from ..shared.helpers import sync
from ..shared.reproducer import Name
from ..shared.stamps import contract_skip
from .base import BufferTests, blame_by_line, construct_in, constructor_promise, property_test


def unchanged(before, after_what, device):
    now = caller_state(device)
    changed = [f"{key} from {before[key]} to {now[key]}" for key in before if now[key] != before[key]]
    assert not changed, f"{after_what} changed the caller's " + ", ".join(changed)


def built_and_used(make, n, device):
    """Build the buffer and use it, checking the caller's state after every call."""
    before = caller_state(device)
    buf = make()
    unchanged(before, "constructing the buffer", device)
    buf.copy_to_gpu(n)
    unchanged(before, f"copy_to_gpu({n!r})", device)
    buf.copy_to_cpu(n)
    unchanged(before, f"copy_to_cpu({n!r})", device)
    sync(device)
    return buf


# Twelve-odd contexts, each its own test: a tenth of the examples each covers them all many times over.
PER_CONTEXT = budget.share(10, floor=10)


class SideEffectTests(BufferTests):
    """Promise 12: constructing and copying leave the caller's modes, defaults and device state alone."""

    @pytest.fixture
    def changing_context(self, record, context):
        """The test's creation context, unless on this machine it is the plain one (a single device made
        current): then what it is there to catch cannot happen, and the contract skips the test, with why."""
        why = context.same_as_plain()
        if why:
            contract_skip(record, why)
        return context

    @property_test(P.NO_SIDE_EFFECTS, examples=PER_CONTEXT)
    def test_no_side_effects_on_the_caller(self, record, device, changing_context, data):
        """`context`: every creation context of the device, one test each (the plugin parametrizes it)."""
        sc = self.build(record, device, data, s.byte_dtype(device), construct=False)
        sc.bind(n=data.draw(s.slice_end(sc["size"][0]), label="n"))
        sc.call(caller_state, into="outer")
        try:
            construct_in(sc, changing_context, built_and_used, Name("make"), Name("n"), Name("device"))
        except Exception as exc:
            # A constructor that raises breaks the promise of its arguments or its context, and a
            # copy that raises breaks promise 8: promise 12 is about what they leave behind.
            blame_by_line(record, exc, built_and_used, (
                ("make()", constructor_promise(P.NO_SIDE_EFFECTS, changing_context)),
                (".copy_to_", P.PARTIAL_COPIES), ("sync(", P.PARTIAL_COPIES)))
            raise
        sc.call(unchanged, Name("outer"), "the construction context and the buffer together", Name("device"))
