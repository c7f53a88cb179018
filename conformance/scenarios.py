"""Drawing one buffer scenario: dtype, size, flags and construction context."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from cpugpu_conformance.promises import PROMISES as TITLES

from . import strategies as s
from .contexts import PLAIN, Context
from .repro import Record, Scenario
from .snippets import BYTE_HELPERS, CONSTRUCT


def build(
    Buffer: Any,
    record: Record,
    promise: str,
    device: str,
    data: st.DataObject,
    dtypes: st.SearchStrategy,
    *,
    contexts: bool = False,
    nonempty: bool = False,
    with_numpy: bool | None = None,
    pin_memory: bool | None = None,
    construct: bool = True,
    size: tuple[int, ...] | None = None,
    context: Context | None = None,
) -> Scenario:
    """Draw a scenario and (unless construct=False) build `buf` in it.

    ``size`` and ``context`` fix what would be drawn (engine-scale sizes, and a context a
    test runs every time, are pytest parameters: each run includes them).
    """
    info = data.draw(dtypes, label="dtype")
    ctx = context or (data.draw(s.contexts_for(device), label="context") if contexts else PLAIN)
    sc = Scenario(
        Buffer,
        record,
        promise,
        TITLES[promise],
        device,
        size=size if size is not None else data.draw(s.sizes_for(info, nonempty=nonempty), label="size"),
        dtype=info.dtype,
        pin_memory=data.draw(s.pin_memory_for(device), label="pin_memory") if pin_memory is None else pin_memory,
        with_numpy=data.draw(s.with_numpy_for(info), label="with_numpy") if with_numpy is None else with_numpy,
    )
    sc.run(BYTE_HELPERS)
    if construct:
        construct_blamed(record, constructor_promise(promise, ctx), lambda: sc.run(ctx.code(CONSTRUCT)))
    return sc


def constructor_promise(promise: str, ctx: Context) -> str:
    """The promise a constructor that raises breaks: the arguments it was given are all allowed
    (promise 1, shape and dtype), unless the test's own promise is about the construction itself:
    every dtype without NumPy (6), under a mode or in a thread (3, in a context other than the
    plain one), pinned memory (10)."""
    if promise in ("6", "10") or (promise == "3" and ctx != PLAIN):
        return promise
    return "1"


def construct_blamed(record: Record, promise: str, construct: Any) -> None:
    """Run `construct` blaming `promise` for what it raises; the blame before it is restored after."""
    before = record.blamed
    record.blame(promise)
    construct()
    record.blame(before)
