"""Promise 13: independent buffers.

Buffers made one after another, of the same and of different sizes and dtypes, never
share storage: a write to one is invisible in every other, and a new buffer is zeroed
even when an earlier one of the same size was written, or was dropped (a pooling or
caching allocator must hand out distinct, zeroed memory). Each step is straight-line
code, so the reproducer reads as the sequence that failed.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cpugpu_conformance.promises import PROMISES

from . import strategies as s
from .repro import Scenario
from .snippets import BYTE_HELPERS


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


def _make(i: int) -> str:
    return (f"buf{i} = Buffer(*size{i}, dtype=dtype{i}, device=device, pin_memory=pin_memory, with_numpy=False)\n"
            f"sync()\n"
            f"assert not raw(buf{i}.cpu).any() and not raw(buf{i}.gpu).any(), "
            f"'buf{i} is not zeroed at construction: it got memory an earlier buffer had written'\n")


@pytest.mark.promise("13")
@pytest.mark.costly
@given(data=st.data())
def test_buffers_are_independent(Buffer, record, device, data):
    specs = data.draw(buffer_specs(device), label="buffers")
    sc = Scenario(Buffer, record, "13", PROMISES["13"], device, pin_memory=data.draw(s.pin_memory_for(device), label="pin_memory"))
    sc.run(BYTE_HELPERS)
    live: list[int] = []
    for i, (size, info) in enumerate(specs):
        sc.bind(**{f"size{i}": size, f"dtype{i}": info.dtype})
        if i == 0:
            # A written buffer of the same size, dropped: the memory a pool would hand out again.
            # Here, not left to earlier examples, so the reproducer fails on its own.
            sc.run("scratch = Buffer(*size0, dtype=dtype0, device=device, pin_memory=pin_memory, with_numpy=False)\n"
                   "fill_bytes(scratch.cpu, seed=101)\nfill_bytes(scratch.gpu, seed=102)\nsync()\ndel scratch")
        if live and data.draw(st.booleans(), label=f"drop a buffer before buffer {i}"):
            gone = data.draw(st.sampled_from(live), label="dropped")
            live.remove(gone)
            sc.run(f"del buf{gone}  # the caller is done with it: its memory may be handed out again")
        sc.run(_make(i))
        # Each side of each buffer gets its own pattern: any sharing shows as another's bytes.
        sc.run(f"fill_bytes(buf{i}.cpu, seed={2 * i + 1})\nfill_bytes(buf{i}.gpu, seed={2 * i + 2})\nsync()")
        live.append(i)
    checks = []
    for i in live:
        checks.append(
            f"assert (raw(buf{i}.cpu) == raw(expected_bytes(buf{i}.cpu, {2 * i + 1}))).all(), "
            f"'buf{i}.cpu no longer holds what was written to it: another buffer shares its storage'\n"
            f"assert (raw(buf{i}.gpu) == raw(expected_bytes(buf{i}.gpu, {2 * i + 2}))).all(), "
            f"'buf{i}.gpu no longer holds what was written to it: another buffer shares its storage'\n"
        )
    sc.run(EXPECTED_BYTES + "\n\n" + "".join(checks))


EXPECTED_BYTES = '''
def expected_bytes(t, seed):
    """A fresh host tensor like `t`, filled with the pattern `seed` writes."""
    model = torch.empty(t.shape, dtype=t.dtype)
    fill_bytes(model, seed)
    return model
'''.strip("\n")
