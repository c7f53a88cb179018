"""Promises 1, 2 and 4: shape, dtype and device; zero-filled; two separate storages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance import strategies as s
from conformance.scenarios import build


@pytest.mark.promise("1")
@given(data=st.data())
def test_shape_dtype_and_device(Buffer, record, device, data):
    sc = build(Buffer, record, "1", device, data, s.any_dtype(device), contexts=True)
    sc.run(
        """
        for name in ("cpu", "gpu"):
            t = getattr(buf, name)
            assert tuple(t.shape) == size, f"buf.{name}.shape is {tuple(t.shape)}, expected {size}"
            assert t.dtype == dtype, f"buf.{name}.dtype is {t.dtype}, expected {dtype}"
        assert buf.cpu.device.type == "cpu", f"buf.cpu is on {buf.cpu.device}, expected the host"
        assert buf.gpu.device.type == device, f"buf.gpu is on {buf.gpu.device}, expected {device}"
        """
    )


@pytest.mark.promise("2")
@given(data=st.data())
def test_starts_zeroed(Buffer, record, device, data):
    sc = build(Buffer, record, "2", device, data, s.any_dtype(device), contexts=True)
    sc.run(
        """
        sync()
        for name in ("cpu", "gpu"):
            nonzero = int((raw(getattr(buf, name)) != 0).any(axis=-1).sum())
            assert nonzero == 0, f"buf.{name} has {nonzero} non-zero elements at construction"
        """
    )


@pytest.mark.promise("4")
@given(data=st.data())
def test_two_storages(Buffer, record, device, data):
    sc = build(Buffer, record, "4", device, data, s.byte_dtype(device), nonempty=True)
    sc.run(
        """
        assert buf.cpu.untyped_storage().data_ptr() != buf.gpu.untyped_storage().data_ptr(), (
            "buf.cpu and buf.gpu share one storage"
        )
        fill_bytes(buf.cpu, seed=1)
        sync()
        assert not raw(buf.gpu).any(), "a write to buf.cpu showed up in buf.gpu without a copy"
        fill_bytes(buf.gpu, seed=2)
        sync()
        expected = raw(buf.cpu)
        fill_bytes(buf.cpu, seed=1)
        assert (raw(buf.cpu) == expected).all(), "a write to buf.gpu changed buf.cpu without a copy"
        """
    )
