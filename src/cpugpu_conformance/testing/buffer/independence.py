"""Promise 13: independent buffers.

Buffers made one after another, of the same and of different sizes and dtypes, never
share storage: a write to one is invisible in every other, and a new buffer is zeroed
even when an earlier one of the same size was written, or was dropped (a pooling or
caching allocator must hand out distinct, zeroed memory). `make()` builds a buffer of the
`size` and `dtype` bound at the time, so the reproducer reads as the sequence that failed.

PYTEST_DONT_REWRITE (why: cpugpu_conformance.testing's docstring).
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from cpugpu_conformance import promises as P

from ..shared import strategies as s
from ..shared.checks import separate_storages, zeroed
from ..shared.helpers import expected_bytes, fill_bytes, raw, sync
from ..shared.reproducer import Name
from .base import BufferTests, blame_by_line, property_test

# A size no check draws (each drawn dimension is at most 4) nor writes: a buffer of it that is not
# zeroed was never zeroed (promise 2), whatever memory a pool handed it.
UNWRITTEN_SIZE = (3, 7)


def a_buffer_nothing_wrote(make, device):
    """Before any buffer is written: one of a size nothing writes is zeroed (promise 2) and has two
    storages (promise 4). What the later buffers show is then theirs, promise 13's: memory handed out
    again unzeroed, or shared."""
    buf = make()
    separate_storages(buf)
    zeroed(buf, device)


def written_then_dropped(make, device):
    """A written buffer, dropped: the memory a pool would hand out again. Made here, not left to
    earlier examples, so the reproducer fails on its own."""
    scratch = make()
    fill_bytes(scratch.cpu, seed=101)
    fill_bytes(scratch.gpu, seed=102)
    sync(device)
    del scratch


def add_buffer(buffers, i, make, device):
    """Buffer i, zeroed at construction, then written with patterns of its own (seeds 2i+1, 2i+2):
    any sharing shows as another buffer's bytes."""
    buf = make()
    sync(device)
    assert not raw(buf.cpu).any() and not raw(buf.gpu).any(), (
        f"buffer {i} is not zeroed at construction: it got memory an earlier buffer had written"
    )
    fill_bytes(buf.cpu, seed=2 * i + 1)
    fill_bytes(buf.gpu, seed=2 * i + 2)
    sync(device)
    buffers[i] = buf


def drop(buffers, i):
    """The caller is done with buffer i: its memory may be handed out again."""
    del buffers[i]


def each_holds_its_own(buffers):
    for i, buf in buffers.items():
        for side, seed in (("cpu", 2 * i + 1), ("gpu", 2 * i + 2)):
            t = getattr(buf, side)
            assert (raw(t) == raw(expected_bytes(t, seed))).all(), (
                f"buffer {i}.{side} no longer holds what was written to it: another buffer shares its storage"
            )


@st.composite
def buffer_specs(draw, device: str):
    """2 to 4 buffers; later ones often repeat an earlier (size, dtype), which is what a pool reuses."""
    first = (draw(s.nonempty_sizes, label="size"), draw(s.byte_dtype(device), label="dtype"))
    specs = [first]
    for _ in range(draw(st.integers(1, 3), label="more buffers")):
        again = draw(st.booleans(), label="same size and dtype as an earlier one")
        specs.append(draw(st.sampled_from(specs)) if again else
                     (draw(s.nonempty_sizes, label="size"), draw(s.byte_dtype(device), label="dtype")))
    return specs


class IndependenceTests(BufferTests):
    """Promise 13: buffers made one after another share nothing, and each starts zeroed."""

    @pytest.mark.cpugpu_costly
    @property_test(P.INDEPENDENT)
    def test_buffers_are_independent(self, record, device, data):
        specs = data.draw(buffer_specs(device), label="buffers")
        sc = self.scenario(record, device, pin_memory=data.draw(s.pin_memory_for(device), label="pin_memory"),
                           with_numpy=False, buffers={})
        live: list[int] = []
        for i, (size, info) in enumerate(specs):
            if i == 0:
                sc.bind(size=UNWRITTEN_SIZE, dtype=info.dtype)
                try:
                    sc.call(a_buffer_nothing_wrote)
                except Exception as exc:
                    blame_by_line(record, exc, a_buffer_nothing_wrote, (
                        ("make()", P.SHAPE_AND_DTYPE), ("separate_storages(", P.TWO_STORAGES), ("zeroed(", P.ZEROED)))
                    raise
            sc.bind(size=size, dtype=info.dtype)
            if i == 0:
                sc.call(written_then_dropped)
            if live and data.draw(st.booleans(), label=f"drop a buffer before buffer {i}"):
                gone = data.draw(st.sampled_from(live), label="dropped")
                live.remove(gone)
                sc.call(drop, Name("buffers"), gone)
            sc.call(add_buffer, Name("buffers"), i, Name("make"), Name("device"))
            live.append(i)
        sc.call(each_holds_its_own)

