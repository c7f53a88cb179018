"""Promises 1, 2 and 4: shape, dtype and device; zero-filled; two separate storages."""

from __future__ import annotations

from cpugpu_conformance import promises as P

from ..shared import budget, checks, dtypes
from ..shared import strategies as s
from ..shared.reproducer import Name, Record, Scenario
from .base import (
    BufferTests,
    construct_blamed,
    construct_in,
    constructor_promise,
    contract_test,
    property_test,
)
from .independence import UNWRITTEN_SIZE, a_buffer_nothing_wrote, written_then_dropped

# Every creation context is its own test (the plugin parametrizes `context`), so each run
# checks the explicit arguments against every ambient default; a tenth of the examples each.
PER_CONTEXT = budget.share(10, floor=10)
# The sizes every dtype is swept at, nonempty (torch cannot make an empty tensor of the bits dtypes):
# two dimensions, neither of one element (a transposed or flattened buffer shows), and six, the most
# the drawn sizes have, one of them of one element (a class written for fewer, or one that squeezes,
# shows).
SWEEP_SIZES = ((2, 3), (2, 3, 2, 1, 2, 2))


class ShapeAndDtypeTests(BufferTests):
    """Promise 1: the shape and dtype asked for, on the host and the device, in every context."""

    @property_test(P.SHAPE_AND_DTYPE, examples=PER_CONTEXT)
    def test_shape_dtype_and_device(self, record, device, context, data):
        """Drawn shapes and flags, the floating dtypes a default stands in for half the time. Each
        context draws examples of its own (the plugin keys hypothesis by the test's parameters)."""
        sc = self.build(record, device, data, s.defaults_sensitive_dtype(device), context=context)
        sc.call(checks.shape_dtype_device)

    @contract_test(P.SHAPE_AND_DTYPE)
    def test_every_dtype_in_every_context(self, record, device, context):
        """Every dtype the installed torch can make on the device, in every creation context, at two
        dimensions and at six (SWEEP_SIZES), every run, the simplest first: a class that widens uint16
        to int32, or passes dtype=None for "the default anyway" (wrong for float32 in one context
        only), or folds dimensions past the third, is caught whatever the examples drawn, and its
        reproducer names the most ordinary dtype it breaks."""
        for size in SWEEP_SIZES:
            for info in dtypes.simplest_first(dtypes.all_dtypes(device)):
                sc = self.scenario(record, device, size=size, dtype=info.dtype, pin_memory=False,
                                   with_numpy=info.numpy is not None)
                construct_blamed(record, constructor_promise(P.SHAPE_AND_DTYPE, context),
                                 lambda sc=sc: construct_in(sc, context))
                sc.call(checks.shape_dtype_device)


def zeroed_at_construction(tests: BufferTests, record: Record, sc: Scenario) -> None:
    """checks.zeroed on the scenario's buffer. One that is not zeroed, where a buffer of a size nothing
    writes is, was handed memory an earlier buffer of this run had written (a pool that does not zero
    what it hands out again): that is promise 13's, and a scenario that writes and drops such a buffer
    first shows it on its own. Otherwise, or where that scenario cannot show it, promise 2 it is."""
    try:
        sc.call(checks.zeroed)
    except AssertionError as not_zeroed:
        values = {k: sc[k] for k in ("size", "dtype", "pin_memory", "with_numpy")}
        fresh = tests.scenario(record, sc.device, size=UNWRITTEN_SIZE, dtype=values["dtype"],
                               pin_memory=values["pin_memory"], with_numpy=False)
        try:
            fresh.call(a_buffer_nothing_wrote)
        except Exception:
            record.ran(sc)
            raise not_zeroed from None
        again = tests.scenario(record, sc.device, **values)
        record.blame(P.INDEPENDENT)
        again.call(written_then_dropped)
        again.call(Name("make"), into="buf")  # type: ignore[arg-type]  # a Name stands for the bound function
        again.call(checks.zeroed)  # raises, with a reproducer that writes and drops a buffer first
        record.blame(None)
        record.ran(sc)
        raise


class ZeroedTests(BufferTests):
    """Promise 2: zero-filled at construction (memory handed out again unzeroed is promise 13's)."""

    @property_test(P.ZEROED)
    def test_starts_zeroed(self, record, device, data):
        sc = self.build(record, device, data, s.any_dtype(device), contexts=True)
        zeroed_at_construction(self, record, sc)


class StorageTests(BufferTests):
    """Promise 4: two storages, neither a view of the other."""

    @property_test(P.TWO_STORAGES)
    def test_two_storages(self, record, device, data):
        sc = self.build(record, device, data, s.byte_dtype(device), nonempty=True)
        sc.call(checks.two_storages)
