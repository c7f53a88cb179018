"""Engine scale: promises 1, 2, 4, 5, 8 and 9 at a million elements and more.

Engines allocate buffers of thousands to millions of elements, and a class that behaves
differently above some size is only seen at that size. Each engine size is a pytest
parameter, so every run includes it; hypothesis draws the rest (dtype, flags, context,
`n`) in a few examples. The checks are the ones of ordinary sizes (checks.py), all
vectorized, so an example costs milliseconds.
"""

from __future__ import annotations

import pytest

from cpugpu_conformance import promises as P

from ..shared import budget, checks
from ..shared import strategies as s
from .base import BufferTests, property_test
from .construction import zeroed_at_construction
from .copies import comparable
from .numpy_view import numpy_view_blamed

# A few examples per size: what varies at this scale is the size, which is a parameter. No shrinking:
# the size pins a failure, and each shrink step would rebuild megabytes to simplify a few draws.
ENGINE = budget.share(100, floor=2, shrink=False)
SIZES = pytest.mark.parametrize("size", s.ENGINE_SIZES, ids=lambda size: "x".join(map(str, size)))


class EngineScaleTests(BufferTests):
    """Promises 1, 2, 4, 5, 8 and 9 at the sizes engines allocate (above 2**20 elements)."""

    @SIZES
    @property_test(P.SHAPE_AND_DTYPE, P.ZEROED, examples=ENGINE)
    def test_engine_scale_shape_and_zeroed(self, record, device, size, data):
        record.blame(P.SHAPE_AND_DTYPE)
        sc = self.build(record, device, data, s.defaults_sensitive_dtype(device, engine=True), contexts=True,
                        size=size)
        sc.call(checks.shape_dtype_device)
        record.blame(P.ZEROED)
        zeroed_at_construction(self, record, sc)

    @SIZES
    @property_test(P.TWO_STORAGES, examples=ENGINE)
    def test_engine_scale_two_storages(self, record, device, size, data):
        sc = self.build(record, device, data, s.byte_dtype(device, engine=True), size=size)
        sc.call(checks.two_storages)

    @SIZES
    @property_test(P.NUMPY_VIEW, examples=ENGINE)
    def test_engine_scale_numpy_view(self, record, device, size, data):
        sc = self.build(record, device, data, s.numpy_dtype(device, engine=True), with_numpy=True, size=size)
        numpy_view_blamed(record, sc)

    @pytest.mark.parametrize("method", checks.COPY_METHODS)
    @SIZES
    @property_test(P.PARTIAL_COPIES, examples=ENGINE)
    def test_engine_scale_partial_copy(self, record, device, method, size, data):
        sc = self.build(record, device, data, s.byte_dtype(device, engine=True), size=size)
        comparable(record, sc)
        sc.bind(method=method, n=None)  # the whole buffer, every time: the case engines use most
        sc.call(checks.partial_copy)
        sc.bind(n=data.draw(s.slice_end(size[0]), label="n"))
        sc.call(checks.partial_copy)

    @SIZES
    @property_test(P.FOR_LIFE, examples=ENGINE)
    def test_engine_scale_copies_keep_the_storages(self, record, device, size, data):
        sc = self.build(record, device, data, s.byte_dtype(device, engine=True), size=size)
        sc.call(checks.capture, into=("captured", "storages"))
        sc.bind(calls=[("copy_to_gpu", None), ("copy_to_cpu", None)])
        record.blame(P.PARTIAL_COPIES)  # a copy that raises breaks promise 8, not 9
        sc.call(checks.copies)
        record.blame(None)
        sc.call(checks.still_captured)
