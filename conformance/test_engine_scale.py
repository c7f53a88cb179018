"""Engine scale: promises 1, 2, 4, 5, 8 and 9 at a million elements and more.

Engines allocate buffers of thousands to millions of elements, and a class that behaves
differently above some size is only seen at that size. Each engine size is a pytest
parameter, so every run includes it; hypothesis draws the rest (dtype, flags, context,
`n`) in a few examples. The checks are the ones of ordinary sizes (checks.py), all
vectorized, so an example costs milliseconds.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from . import budget, checks
from . import strategies as s
from .scenarios import build

# A few examples per size: what varies at this scale is the size, which is a parameter.
ENGINE = budget.share(100, floor=2)
SIZES = pytest.mark.parametrize("size", s.ENGINE_SIZES, ids=lambda size: "x".join(map(str, size)))


@pytest.mark.promise("1", "2")
@SIZES
@ENGINE
@given(data=st.data())
def test_engine_scale_shape_and_zeroed(Buffer, record, device, size, data):
    record.blame("1")
    sc = build(Buffer, record, "1", device, data, s.defaults_sensitive_dtype(device, engine=True), contexts=True, size=size)
    sc.run(checks.SHAPE_DTYPE_DEVICE)
    record.blame("2")
    sc.run(checks.ZEROED)


@pytest.mark.promise("4")
@SIZES
@ENGINE
@given(data=st.data())
def test_engine_scale_two_storages(Buffer, record, device, size, data):
    sc = build(Buffer, record, "4", device, data, s.byte_dtype(device, engine=True), size=size)
    sc.run(checks.TWO_STORAGES)


@pytest.mark.promise("5")
@SIZES
@ENGINE
@given(data=st.data())
def test_engine_scale_numpy_view(Buffer, record, device, size, data):
    sc = build(Buffer, record, "5", device, data, s.numpy_dtype(device, engine=True), with_numpy=True, size=size)
    sc.run(checks.NP_FILL)
    sc.run(checks.NUMPY_VIEW)


@pytest.mark.promise("8")
@pytest.mark.parametrize("method", sorted(checks.COPIES))
@SIZES
@ENGINE
@given(data=st.data())
def test_engine_scale_partial_copy(Buffer, record, device, method, size, data):
    sc = build(Buffer, record, "8", device, data, s.byte_dtype(device, engine=True), size=size)
    sc.bind(n=None)  # the whole buffer, every time: the case engines use most
    sc.run(checks.COPIES[method])
    sc.bind(n=data.draw(s.slice_end(size[0]), label="n"))
    sc.run(checks.COPIES[method])


@pytest.mark.promise("9")
@SIZES
@ENGINE
@given(data=st.data())
def test_engine_scale_copies_keep_the_storages(Buffer, record, device, size, data):
    sc = build(Buffer, record, "9", device, data, s.byte_dtype(device, engine=True), size=size)
    sc.run(checks.CAPTURE)
    sc.run("buf.copy_to_gpu()\nbuf.copy_to_cpu()")
    sc.run(checks.STILL_CAPTURED)
