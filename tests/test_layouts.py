"""The suite's byte helpers accept every layout a correct class may hand out (issue 16).

A class may hand out zero-size tensors with any strides (NumPy gives empty arrays zero
strides), slices and transposes, tensors at a storage offset, views into a larger slab, and
tensors wrapped around NumPy arrays. Each helper runs as the suite runs it (the library's
function) and as a reproducer runs it (its source, defined in a namespace that holds only
what the script gives it: torch and numpy).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reproducer_parts import definitions, script_for

from cpugpu_conformance.testing.shared import helpers
from cpugpu_conformance.testing.shared.dtypes import byte_dtypes
from cpugpu_conformance.testing.shared.helpers import fill_bytes, np_fill, raw

DTYPES = byte_dtypes("cpu")
NUMPY_DTYPES = tuple(info for info in DTYPES if info.numpy is not None)
DEVICES = [pytest.param("cpu"), pytest.param("cuda", marks=pytest.mark.devices("cuda"))]
HELPERS = ("raw", "fill_bytes", "np_fill")


def every_helper(t, a):
    """What a reproducer needs the helpers for: its script then defines each (reproducer_parts)."""
    raw(t)
    fill_bytes(t, 0)
    np_fill(a, 0)


def as_run(device: str) -> list[dict]:
    """The helpers as the suite runs them, and as the reproducer for `device` defines them."""
    standalone = definitions(script_for(device, every_helper))
    assert all(standalone[name].__globals__ is standalone for name in HELPERS)
    return [{name: getattr(helpers, name) for name in HELPERS}, {name: standalone[name] for name in HELPERS}]


SUITE_AND_REPRODUCER = {device: as_run(device) for device in ("cpu", "cuda")}


def test_every_dtype_the_property_draws_from_includes_bool_and_float16():
    assert {"bool", "float16"} <= {info.name for info in NUMPY_DTYPES}


@st.composite
def zero_size(draw, slab):
    """A zero-size tensor with arbitrary strides (and offset), made by as_strided or empty_strided."""
    shape = draw(st.lists(st.integers(0, 4), min_size=1, max_size=4).filter(lambda s: 0 in s))
    strides = draw(st.lists(st.integers(0, 50), min_size=len(shape), max_size=len(shape)))
    if draw(st.booleans()):
        return slab.as_strided(shape, strides, draw(st.integers(0, 1000)))
    return torch.empty_strided(shape, strides, dtype=slab.dtype, device=slab.device)


@st.composite
def strided_view(draw, slab):
    """A view into the slab: from an offset, a block sliced with steps on each axis, then permuted."""
    block = draw(st.lists(st.integers(0, 5), min_size=0, max_size=3))
    offset = draw(st.integers(0, slab.numel() - math.prod(block)))
    t = slab[offset : offset + math.prod(block)].view(block)
    for axis, length in enumerate(block):
        start = draw(st.integers(0, length))
        step = draw(st.integers(1, 3))
        t = t.narrow(axis, start, length - start)[(slice(None),) * axis + (slice(None, None, step),)]
    return t.permute(draw(st.permutations(range(len(block)))))


@st.composite
def layouts(draw, device):
    """(slab, tensor, slab bytes): the tensor views the slab's memory; the bytes read the slab directly."""
    from_numpy = device == "cpu" and draw(st.booleans(), label="from NumPy")
    info = draw(st.sampled_from(NUMPY_DTYPES if from_numpy else DTYPES), label="dtype")
    count = draw(st.integers(125, 240), label="slab elements")  # room for any block drawn
    background = np.frombuffer(draw(st.binary(min_size=count, max_size=count)), dtype=np.uint8)
    element = torch.empty(0, dtype=info.dtype).element_size()
    slab_bytes = np.repeat(background % 2 if info.name == "bool" else background, element)
    if from_numpy:
        array = slab_bytes.view(info.numpy)  # NumPy owns the memory, as a class using np.zeros would
        slab = torch.from_numpy(array)
    else:
        slab = torch.from_numpy(slab_bytes.copy()).view(info.dtype).to(device)
    kind = draw(st.sampled_from(["zero-size", "strided view", "NumPy view"] if from_numpy else ["zero-size", "strided view"]))
    if kind == "zero-size":
        t = draw(zero_size(slab), label="zero-size tensor")
    elif kind == "strided view":
        t = draw(strided_view(slab), label="view")
    else:  # the view made by NumPy, then wrapped: NumPy's own strides (zero ones for an empty array)
        t = torch.from_numpy(draw(numpy_view(array), label="NumPy view"))
    return slab, t


@st.composite
def numpy_view(draw, array):
    shape = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))
    if 0 in shape and draw(st.booleans()):
        return np.zeros(shape, dtype=array.dtype)  # NumPy's own empty array
    block = array[: math.prod(shape)].reshape(shape) if math.prod(shape) <= array.size else array[:0]
    if block.ndim > 1 and draw(st.booleans()):
        block = block.T
    return block[tuple(slice(draw(st.integers(0, 1)), None, draw(st.integers(1, 2))) for _ in range(block.ndim))]


def element_bytes(t: torch.Tensor) -> np.ndarray:
    """The bytes of each element, by torch's own contiguous copy: the oracle the helpers must match."""
    copy = t.cpu().clone(memory_format=torch.contiguous_format).reshape(-1)
    return copy.view(torch.uint8).numpy().reshape(*t.shape, t.element_size())


def byte_positions(t: torch.Tensor) -> np.ndarray:
    """Where, in the bytes of t's storage, each byte of each element lies (row-major element order)."""
    offsets = np.full(t.shape, t.storage_offset(), dtype=np.int64)
    for axis, (length, stride) in enumerate(zip(t.shape, t.stride())):
        offsets = offsets + (np.arange(length) * stride).reshape((-1,) + (1,) * (t.dim() - axis - 1))
    return offsets[..., None] * t.element_size() + np.arange(t.element_size())


def pattern(seed: int, count: int, is_bool: bool) -> np.ndarray:
    """The documented fill: ((i * 7 + seed * 31 + 1) % 251 + 1) for byte i of a 251-byte period."""
    period = ((np.arange(251) * 7 + seed * 31 + 1) % 251 + 1).astype(np.uint8)
    return np.resize(period % 2 if is_bool else period, count)


def storage_bytes(slab: torch.Tensor) -> np.ndarray:
    return slab.cpu().reshape(-1).view(torch.uint8).numpy().copy()


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_raw_reads_the_bytes_of_every_element(device, data):
    slab, t = data.draw(layouts(device))
    for run in SUITE_AND_REPRODUCER[device]:
        got = run["raw"](t)
        assert got.shape == (*t.shape, t.element_size())
        assert (got == element_bytes(t)).all()


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=300, deadline=None)
@given(data=st.data(), seed=st.integers(0, 300))
def test_fill_bytes_writes_every_element_and_nothing_else(device, data, seed):
    slab, t = data.draw(layouts(device))
    before = storage_bytes(slab)
    for run in SUITE_AND_REPRODUCER[device]:
        if t.numel():  # each run writes the pattern itself (zero_() refuses the bits dtypes: their bytes)
            helpers.byte_view(t).zero_()
        run["fill_bytes"](t, seed)
        written = element_bytes(t)
        assert (written.reshape(-1) == pattern(seed, written.size, t.dtype == torch.bool)).all()
        if t.untyped_storage().data_ptr() == slab.untyped_storage().data_ptr():  # not a fresh empty_strided
            outside = np.ones(before.size, dtype=bool)
            outside[byte_positions(t).reshape(-1)] = False
            assert (storage_bytes(slab)[outside] == before[outside]).all(), "fill_bytes wrote outside the view"


@settings(max_examples=300, deadline=None)
@given(data=st.data(), seed=st.integers(0, 300))
def test_np_fill_writes_every_element_of_any_numpy_layout(data, seed):
    slab, t = data.draw(layouts("cpu").filter(lambda drawn: drawn[1].dtype in {i.dtype for i in NUMPY_DTYPES}))
    a = t.numpy()
    before = storage_bytes(slab)
    for run in SUITE_AND_REPRODUCER["cpu"]:
        a[...] = 0
        run["np_fill"](a, seed)
        written = element_bytes(t).reshape(-1)
        assert (written == np_pattern(seed, written.size, a.dtype == np.bool_)).all()
        if t.untyped_storage().data_ptr() == slab.untyped_storage().data_ptr():
            outside = np.ones(before.size, dtype=bool)
            outside[byte_positions(t).reshape(-1)] = False
            assert (storage_bytes(slab)[outside] == before[outside]).all(), "np_fill wrote outside the view"


def np_pattern(seed: int, count: int, is_bool: bool) -> np.ndarray:
    """np_fill's documented pattern: ((i * 13 + seed * 17 + 3) % 251 + 1) for byte i of a 251-byte period."""
    period = ((np.arange(251) * 13 + seed * 17 + 3) % 251 + 1).astype(np.uint8)
    return np.resize(period % 2 if is_bool else period, count)
