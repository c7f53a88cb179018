"""Promises 5, 6 and 7: a true NumPy view, the bfloat16 path, no silent wrong views.

PYTEST_DONT_REWRITE (why: cpugpu_conformance.testing's docstring).
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from cpugpu_conformance import promises as P

from ..shared import budget, checks, dtypes
from ..shared import strategies as s
from ..shared.reproducer import Name
from ..shared.stamps import contract_skip
from .base import BufferTests, blame_by_line, construct_blamed, property_test


def bfloat16_with_numpy_raises_value_error(make):
    """Promise 6: with_numpy=True with bfloat16 raises a ValueError that tells the caller what to pass."""
    try:
        buf = make()
    except ValueError as exc:
        assert "with_numpy" in str(exc), f"the ValueError does not tell the caller to pass with_numpy=False: {exc}"
    else:
        raise AssertionError(f"with_numpy=True with bfloat16 returned {buf!r} instead of raising ValueError")


def no_np_attribute(buf):
    """Promise 6: without NumPy, the buffer has no `np`."""
    assert not hasattr(buf, "np"), f"with_numpy=False, yet the buffer has an np attribute: {buf.np!r}"


def refuses_a_wrong_view(make, dtype):
    """Promise 7: with_numpy=True with a dtype NumPy cannot represent raises (which exception is torch's business)."""
    try:
        buf = make()
    except Exception:
        return  # refusing is the promise
    view = getattr(buf, "np", None)
    raise AssertionError(
        f"with_numpy=True with {dtype}, which NumPy cannot represent, returned a buffer whose np is "
        f"{type(view).__name__} of dtype {getattr(view, 'dtype', None)} instead of raising"
    )


def numpy_view_blamed(record, sc):
    """checks.numpy_view, after the shapes and dtypes it compares (promise 1); its copy that raises, or
    does not carry what buf.cpu holds by then, breaks promise 8."""
    construct_blamed(record, P.SHAPE_AND_DTYPE, lambda: sc.call(checks.shape_dtype_device))
    try:
        sc.call(checks.numpy_view)
    except Exception as exc:
        blame_by_line(record, exc, checks.numpy_view, (("copy_to_gpu", P.PARTIAL_COPIES),))
        raise


class NumpyViewTests(BufferTests):
    """Promise 5: buf.np is a NumPy view of buf.cpu, and with_numpy defaults to True."""

    @property_test(P.NUMPY_VIEW)
    def test_numpy_view_shares_memory(self, record, device, data):
        sc = self.build(record, device, data, s.numpy_dtype(device), with_numpy=True)
        numpy_view_blamed(record, sc)

    @property_test(P.NUMPY_VIEW, examples=budget.share(10, floor=10))
    def test_numpy_view_by_default(self, record, device, data):
        """Callers rely on `.np` without passing the flag: with_numpy defaults to True."""
        sc = self.build(record, device, data, s.numpy_dtype(device), with_numpy=True, construct=False)
        del sc.ns["with_numpy"]  # make() leaves it to the constructor's default
        construct_blamed(record, P.SHAPE_AND_DTYPE, lambda: sc.call(Name("make"), into="buf"))
        numpy_view_blamed(record, sc)


class ExoticDtypeTests(BufferTests):
    """Promises 6 and 7: bfloat16 and the dtypes NumPy lacks, with and without a NumPy view."""

    @property_test(P.BFLOAT16_PATH)
    def test_bfloat16_with_numpy_raises_value_error(self, record, device, data):
        if not hasattr(torch, "bfloat16"):
            contract_skip(record, "this torch has no bfloat16")
        bf16 = st.just(dtypes.by_name("bfloat16", device))
        sc = self.build(record, device, data, bf16, with_numpy=True, construct=False)
        sc.call(bfloat16_with_numpy_raises_value_error)

    @property_test(P.BFLOAT16_PATH)
    def test_without_numpy_every_dtype_works(self, record, device, data):
        sc = self.build(record, device, data, s.any_dtype(device), with_numpy=False)
        record.blame(P.SHAPE_AND_DTYPE)  # every dtype works: a buffer of another dtype breaks promise 1
        sc.call(checks.shape_dtype_device)
        record.blame(None)
        sc.call(no_np_attribute)

    @property_test(P.NO_WRONG_VIEWS)
    def test_no_silent_wrong_views(self, record, device, data):
        exotic = s.non_numpy_dtype(device, include_bfloat16=False)
        sc = self.build(record, device, data, exotic, with_numpy=True, construct=False)
        sc.call(refuses_a_wrong_view)
