"""Promises 8 and 9: partial copies with slice semantics, in place, for life."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from . import checks
from . import strategies as s
from .scenarios import build


@pytest.mark.promise("8")
@pytest.mark.parametrize("method", sorted(checks.COPIES))
@given(data=st.data())
def test_partial_copy(Buffer, record, device, method, data):
    sc = build(Buffer, record, "8", device, data, s.byte_dtype(device))
    sc.bind(n=data.draw(s.slice_end(sc["size"][0]), label="n"))
    sc.run(checks.COPIES[method])


@pytest.mark.promise("9")
@given(data=st.data())
def test_copies_keep_the_storages(Buffer, record, device, data):
    sc = build(Buffer, record, "9", device, data, s.byte_dtype(device))
    sc.run(checks.CAPTURE)
    length = sc["size"][0]
    for method, n in data.draw(
        st.lists(st.tuples(st.sampled_from(["copy_to_gpu", "copy_to_cpu"]), s.slice_end(length)), min_size=1, max_size=5),
        label="copies",
    ):
        sc.run(f"buf.{method}({n!r})")
    sc.run(checks.STILL_CAPTURED)
