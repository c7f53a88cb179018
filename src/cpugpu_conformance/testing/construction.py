"""Promises 1, 2 and 4: shape, dtype and device; zero-filled; two separate storages."""

from __future__ import annotations

from hypothesis import strategies as st

from cpugpu_conformance import promises as P

from . import budget, checks, dtypes
from . import strategies as s
from .base import BufferTests, property_test

# Every creation context is its own test (the plugin parametrizes `context`), so each run
# checks the explicit arguments against every ambient default; a tenth of the examples each.
PER_CONTEXT = budget.share(10, floor=10)
class ShapeAndDtypeTests(BufferTests):
    """Promise 1: the shape and dtype asked for, on the host and the device, in every context."""

    @property_test(P.SHAPE_AND_DTYPE, examples=PER_CONTEXT)
    def test_shape_dtype_and_device(self, record, device, context, data):
        # Every dtype the installed torch can make, every example, the simplest first: a class that
        # widens uint16 to int32, or passes dtype=None for "the default anyway" (wrong for float32
        # in one context only), is caught every run, not when a draw happens to reach its dtype.
        # The size, the flags and (the plugin's hypothesis key) the examples are drawn per context.
        for info in dtypes.simplest_first(dtypes.all_dtypes(device)):
            sc = self.build(record, device, data, st.just(info), context=context)
            sc.call(checks.shape_dtype_device)


class ZeroedTests(BufferTests):
    """Promise 2: zero-filled at construction."""

    @property_test(P.ZEROED)
    def test_starts_zeroed(self, record, device, data):
        sc = self.build(record, device, data, s.any_dtype(device), contexts=True)
        sc.call(checks.zeroed)


class StorageTests(BufferTests):
    """Promise 4: two storages, neither a view of the other."""

    @property_test(P.TWO_STORAGES)
    def test_two_storages(self, record, device, data):
        sc = self.build(record, device, data, s.byte_dtype(device), nonempty=True)
        sc.call(checks.two_storages)
