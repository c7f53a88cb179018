"""Promises 8 and 9: partial copies with slice semantics, in place, for life.

Each check of a copy runs with one intra-op thread and with several (threads.py): a copy that
depends on the thread count shows with one of them only, and engines run with several.
"""

from __future__ import annotations

from functools import cache

import pytest
import torch
from hypothesis import strategies as st

from cpugpu_conformance import promises as P

from ..shared import checks, threads
from ..shared import strategies as s
from .base import BufferTests, construct_blamed, property_test


def comparable(record, sc):
    """What a check comparing buf.cpu with buf.gpu takes for granted, each blamed on its own promise:
    the shapes and dtypes asked for (1), and two storages (4). A device tensor of the wrong shape, or
    over the host's memory, then fails there, not in the copies."""
    construct_blamed(record, P.SHAPE_AND_DTYPE, lambda: sc.call(checks.shape_dtype_device))
    construct_blamed(record, P.TWO_STORAGES, lambda: sc.call(checks.separate_storages))


def intra_op_threads(count):
    """What follows runs with `count` intra-op threads, as torch.set_num_threads(count) makes it."""
    torch.set_num_threads(count)


def in_each_thread_count(sc, check):
    """Run `check` through the scenario with one intra-op thread, then with several; the process's
    own count is restored afterwards, whatever happened."""
    before = torch.get_num_threads()
    try:
        for count in threads.copy_counts():
            sc.call(intra_op_threads, count)
            check()
    finally:
        torch.set_num_threads(before)


@cache
def copy_calls(length: int) -> st.SearchStrategy:
    """One to five copies, each a direction and an n; built once per length (why: shared/strategies.py)."""
    return st.lists(st.tuples(st.sampled_from(checks.COPY_METHODS), s.slice_end(length)), min_size=1, max_size=5)


class CopyTests(BufferTests):
    """Promise 8: copy_to_gpu(n) and copy_to_cpu(n) copy [:n] with slice semantics and return it."""

    @pytest.mark.parametrize("method", checks.COPY_METHODS)
    @property_test(P.PARTIAL_COPIES)
    def test_partial_copy(self, record, device, method, data):
        sc = self.build(record, device, data, s.byte_dtype(device))
        sc.bind(method=method, n=data.draw(s.slice_end(sc["size"][0]), label="n"))
        comparable(record, sc)
        in_each_thread_count(sc, lambda: sc.call(checks.partial_copy))


class StoragesForLifeTests(BufferTests):
    """Promise 9: the copies never rebind the tensors (or the view) a caller captured."""

    @property_test(P.FOR_LIFE)
    def test_copies_keep_the_storages(self, record, device, data):
        sc = self.build(record, device, data, s.byte_dtype(device))
        sc.call(checks.capture, into=("captured", "storages"))
        length = sc["size"][0]
        calls = data.draw(copy_calls(length), label="copies")
        sc.bind(calls=calls)

        def copies_then_still_captured():
            record.blame(P.PARTIAL_COPIES)  # a copy that raises (an n it refuses) breaks promise 8, not 9
            sc.call(checks.copies)
            record.blame(None)
            sc.call(checks.still_captured)

        in_each_thread_count(sc, copies_then_still_captured)
