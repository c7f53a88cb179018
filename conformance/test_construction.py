"""Promises 1, 2 and 4: shape, dtype and device; zero-filled; two separate storages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from . import budget, checks
from . import strategies as s
from .scenarios import build

# Every creation context is its own test (conftest parametrizes `context`), so each run
# checks the explicit arguments against every ambient default; a tenth of the examples each.
PER_CONTEXT = budget.share(10, floor=10)


@pytest.mark.promise("1")
@PER_CONTEXT
@given(data=st.data())
def test_shape_dtype_and_device(Buffer, record, device, context, data):
    sc = build(Buffer, record, "1", device, data, s.defaults_sensitive_dtype(device), context=context)
    sc.run(checks.SHAPE_DTYPE_DEVICE)


@pytest.mark.promise("2")
@given(data=st.data())
def test_starts_zeroed(Buffer, record, device, data):
    sc = build(Buffer, record, "2", device, data, s.any_dtype(device), contexts=True)
    sc.run(checks.ZEROED)


@pytest.mark.promise("4")
@given(data=st.data())
def test_two_storages(Buffer, record, device, data):
    sc = build(Buffer, record, "4", device, data, s.byte_dtype(device), nonempty=True)
    sc.run(checks.TWO_STORAGES)
