"""Promises 8 and 9: partial copies with slice semantics, in place, for life."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from cpugpu_conformance import promises as P

from . import checks
from . import strategies as s
from .base import BufferTests, property_test


class CopyTests(BufferTests):
    """Promise 8: copy_to_gpu(n) and copy_to_cpu(n) copy [:n] with slice semantics and return it."""

    @pytest.mark.parametrize("method", checks.COPY_METHODS)
    @property_test(P.PARTIAL_COPIES)
    def test_partial_copy(self, record, device, method, data):
        sc = self.build(record, device, data, s.byte_dtype(device))
        sc.bind(method=method, n=data.draw(s.slice_end(sc["size"][0]), label="n"))
        sc.call(checks.partial_copy)


class StoragesForLifeTests(BufferTests):
    """Promise 9: the copies never rebind the tensors (or the view) a caller captured."""

    @property_test(P.FOR_LIFE)
    def test_copies_keep_the_storages(self, record, device, data):
        sc = self.build(record, device, data, s.byte_dtype(device))
        sc.call(checks.capture, into=("captured", "storages"))
        length = sc["size"][0]
        calls = data.draw(st.lists(st.tuples(st.sampled_from(checks.COPY_METHODS), s.slice_end(length)),
                                   min_size=1, max_size=5), label="copies")
        sc.bind(calls=calls)
        record.blame(P.PARTIAL_COPIES)  # a copy that raises (an n it refuses) breaks promise 8, not 9
        sc.call(checks.copies)
        record.blame(None)
        sc.call(checks.still_captured)
