"""Promises 5, 6 and 7: a true NumPy view, the bfloat16 path, no silent wrong views."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from . import budget, checks, dtypes, scenarios
from . import strategies as s
from .scenarios import build
from .snippets import CONSTRUCT


@pytest.mark.promise("5")
@given(data=st.data())
def test_numpy_view_shares_memory(Buffer, record, device, data):
    sc = build(Buffer, record, "5", device, data, s.numpy_dtype(device), with_numpy=True)
    sc.run(checks.NP_FILL)
    sc.run(checks.NUMPY_VIEW)


@pytest.mark.promise("5")
@budget.share(10, floor=10)
@given(data=st.data())
def test_numpy_view_by_default(Buffer, record, device, data):
    """Callers rely on `.np` without passing the flag: with_numpy defaults to True."""
    sc = build(Buffer, record, "5", device, data, s.numpy_dtype(device), with_numpy=True, construct=False)
    scenarios.construct_blamed(record, "1", lambda: sc.run(
        "buf = Buffer(*size, dtype=dtype, device=device, pin_memory=pin_memory)  # with_numpy left to its default"))
    sc.run(checks.NP_FILL)
    sc.run(checks.NUMPY_VIEW)


@pytest.mark.promise("6")
@given(data=st.data())
def test_bfloat16_with_numpy_raises_value_error(Buffer, record, device, data):
    if not hasattr(torch, "bfloat16"):
        pytest.skip("this torch has no bfloat16")
    sc = build(Buffer, record, "6", device, data, st.just(dtypes.by_name("bfloat16", device)), with_numpy=True, construct=False)
    sc.run(
        f"""
        try:
            buf = {CONSTRUCT}
        except ValueError as exc:
            assert "with_numpy" in str(exc), f"the ValueError does not tell the caller to pass with_numpy=False: {{exc}}"
        else:
            raise AssertionError("with_numpy=True with bfloat16 returned a buffer instead of raising ValueError")
        """
    )


@pytest.mark.promise("6")
@given(data=st.data())
def test_without_numpy_every_dtype_works(Buffer, record, device, data):
    sc = build(Buffer, record, "6", device, data, s.any_dtype(device), with_numpy=False)
    sc.run(
        """
        assert buf.cpu.dtype == dtype and buf.gpu.dtype == dtype
        assert not hasattr(buf, "np"), f"with_numpy=False, yet the buffer has an np attribute: {buf.np!r}"
        """
    )


@pytest.mark.promise("7")
@given(data=st.data())
def test_no_silent_wrong_views(Buffer, record, device, data):
    sc = build(
        Buffer, record, "7", device, data, s.non_numpy_dtype(device, include_bfloat16=False), with_numpy=True, construct=False
    )
    sc.run(
        f"""
        try:
            buf = {CONSTRUCT}
        except Exception:
            pass  # refusing is the promise; which exception is torch's business
        else:
            raise AssertionError(
                f"with_numpy=True with {{dtype}}, which NumPy cannot represent, returned a buffer "
                f"whose np is {{type(getattr(buf, 'np', None)).__name__}} "
                f"of dtype {{getattr(getattr(buf, 'np', None), 'dtype', None)}} instead of raising"
            )
        """
    )
