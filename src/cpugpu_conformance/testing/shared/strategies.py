"""Hypothesis strategies for the suite: sizes, dtypes of the installed torch, contexts, slice ends.

Tests ask for their strategies inside each example (the dtypes of the device under test, a slice
end for the length drawn), and hypothesis validates every new strategy object the first time it is
drawn from: each factory is cached, so a strategy is built and validated once per process, not once
per example (about a tenth of a ci run's test time). Strategies are immutable; the draws are the same.
"""

from __future__ import annotations

from functools import cache

from hypothesis import strategies as st

from cpugpu_conformance import devices

from . import contexts as ctx
from . import dtypes

__all__ = [
    "ENGINE_SIZES", "MAX_RANK", "any_dtype", "byte_dtype", "contexts_for", "defaults_sensitive_dtype",
    "fillable_dtype", "non_numpy_dtype", "nonempty_sizes", "numpy_dtype", "pin_memory_for", "sizes",
    "sizes_for", "slice_end", "with_numpy_for",
]

# Any number of dimensions (promise 1), 1 to MAX_RANK: engines keep five-dimensional KV caches, and a
# class written for at most three shows only beyond them. Zero-length dimensions are part of the
# contract, in any position; each dimension is short, so even six of them stay a few thousand elements.
MAX_RANK = 6
sizes = st.lists(st.integers(0, 4), min_size=1, max_size=MAX_RANK).map(tuple)
# At least one element, for checks that need something to write.
nonempty_sizes = st.lists(st.integers(1, 4), min_size=1, max_size=MAX_RANK).map(tuple)

# Engine scale (promise 1: "a million elements and more"): 1-D, 2-D square, and few long
# rows, each above 2**20 elements. Tests run each one explicitly (pytest parameters), so
# every run includes them whatever hypothesis draws.
ENGINE_SIZES: tuple[tuple[int, ...], ...] = (((1 << 20) + 3,), (1024, 1024), (3, 349_527))


@cache
def contexts_for(device: str) -> st.SearchStrategy[ctx.Context]:
    return st.sampled_from(ctx.contexts_for(device))


def _names(infos: tuple[dtypes.DtypeInfo, ...], engine: bool = False) -> st.SearchStrategy[dtypes.DtypeInfo]:
    """Draw from `infos`, the simplest first (a failing example shrinks to float32, not bcomplex32);
    at engine scale only the dtypes torch can allocate that large."""
    infos = tuple(i for i in infos if i.zeros_large) if engine else infos
    if not infos:
        return st.nothing()
    return st.sampled_from(dtypes.simplest_first(infos))


@cache
def any_dtype(device: str, *, engine: bool = False) -> st.SearchStrategy[dtypes.DtypeInfo]:
    return _names(dtypes.all_dtypes(device), engine)


@cache
def numpy_dtype(device: str, *, engine: bool = False) -> st.SearchStrategy[dtypes.DtypeInfo]:
    return _names(dtypes.numpy_dtypes(device), engine)


@cache
def non_numpy_dtype(device: str, *, include_bfloat16: bool) -> st.SearchStrategy[dtypes.DtypeInfo]:
    infos = tuple(
        i for i in dtypes.non_numpy_dtypes(device) if include_bfloat16 or i.name != "bfloat16"
    )
    return _names(infos)


@cache
def defaults_sensitive_dtype(device: str, *, engine: bool = False) -> st.SearchStrategy[dtypes.DtypeInfo]:
    """Any dtype, with the floating ones a default dtype stands in for drawn half the time.

    float32, torch's default dtype, first: hypothesis tries its simplest example first, so every
    creation context sees float32 (a class that leaves it to the default, promise 1) whatever
    the budget and whatever the derandomized seed."""
    order = ("float32", "float16", "float64")
    floats = tuple(sorted((i for i in dtypes.all_dtypes(device) if i.name in order), key=lambda i: order.index(i.name)))
    return st.one_of(_names(floats, engine), any_dtype(device, engine=engine))


@cache
def byte_dtype(device: str, *, engine: bool = False) -> st.SearchStrategy[dtypes.DtypeInfo]:
    return _names(dtypes.byte_dtypes(device), engine)


@cache
def fillable_dtype(device: str, *, engine: bool = False) -> st.SearchStrategy[dtypes.DtypeInfo]:
    return _names(dtypes.fillable_dtypes(device), engine)


@cache
def with_numpy_for(info: dtypes.DtypeInfo) -> st.SearchStrategy[bool]:
    """with_numpy=True is only a valid request for dtypes NumPy can represent. One draw whatever the
    dtype: hypothesis prefers the example with fewer draws, and a dtype without NumPy must not win
    the reproducer over float32 for that (shrinking keeps the simplest dtype that fails)."""
    return st.booleans().map(lambda wanted: wanted and info.numpy is not None)


@cache
def pin_memory_for(device: str) -> st.SearchStrategy[bool]:
    """pin_memory=True where pinning does not apply is implementation-defined (promise 11): drawn only where it does."""
    return st.booleans() if devices.get(device).pinning else st.just(False)


@cache
def slice_end(length: int) -> st.SearchStrategy[int | None]:
    """`n` for copy_to_gpu/copy_to_cpu: None, 0..len, beyond len, and negative (slice semantics).

    The edges where implementations go wrong are drawn by design, not by chance: 0 is a branch of its
    own (`if not n` reads copy_to_gpu(0) as "everything"), the length, one past it, -1 and minus the
    length another. With None and the range alone, a team's profile of twenty examples (the floor)
    drew 0 on a non-empty buffer in only half its runs (random seeds)."""
    edges = tuple(dict.fromkeys(n for n in (length, length + 1, -1, -length) if n != 0))
    return st.one_of(st.none(), st.just(0), st.sampled_from(edges), st.integers(-length - 2, length + 3))


@cache
def sizes_for(info: dtypes.DtypeInfo, *, nonempty: bool = False) -> st.SearchStrategy[tuple[int, ...]]:
    """Sizes torch itself can allocate for the dtype: bits and sub-byte kinds fail on zero size."""
    return nonempty_sizes if nonempty or not info.zeros_empty else sizes
