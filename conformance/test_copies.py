"""Promises 8 and 9: partial copies with slice semantics, in place, for life."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance import strategies as s
from conformance.scenarios import build

COPY_CHECK = """
fill_bytes(buf.{src}, seed=1)
fill_bytes(buf.{dst}, seed=2)
sync()
before_src, before_dst = raw(buf.{src}), raw(buf.{dst})
out = buf.{method}(n)
sync()
expected = before_dst.copy()
expected[:n] = before_src[:n]
assert (raw(buf.{dst}) == expected).all(), "{method}(n) did not write exactly buf.{src}[:n] into buf.{dst}[:n]"
assert (raw(buf.{src}) == before_src).all(), "{method}(n) changed its source, buf.{src}"
written = buf.{dst}[:n]
assert isinstance(out, torch.Tensor), f"{method}(n) returned {{type(out).__name__}}, not the written slice"
assert tuple(out.shape) == tuple(written.shape), f"{method}(n) returned shape {{tuple(out.shape)}}, expected {{tuple(written.shape)}}"
assert out.device == written.device and out.dtype == dtype, f"{method}(n) returned a tensor on {{out.device}} of {{out.dtype}}"
if written.numel():
    assert out.data_ptr() == written.data_ptr(), "{method}(n) returned a tensor that is not buf.{dst}[:n]"
"""

DIRECTIONS = {
    "copy_to_gpu": COPY_CHECK.format(method="copy_to_gpu", src="cpu", dst="gpu"),
    "copy_to_cpu": COPY_CHECK.format(method="copy_to_cpu", src="gpu", dst="cpu"),
}


@pytest.mark.promise("8")
@pytest.mark.parametrize("method", sorted(DIRECTIONS))
@given(data=st.data())
def test_partial_copy(Buffer, record, device, method, data):
    sc = build(Buffer, record, "8", device, data, s.byte_dtype(device))
    sc.bind(n=data.draw(s.slice_end(sc["size"][0]), label="n"))
    sc.run(DIRECTIONS[method])


@pytest.mark.promise("9")
@given(data=st.data())
def test_copies_keep_the_storages(Buffer, record, device, data):
    sc = build(Buffer, record, "9", device, data, s.byte_dtype(device))
    sc.run(
        """
        captured = {name: getattr(buf, name) for name in ("cpu", "gpu", "np") if name != "np" or with_numpy}
        storages = {name: t.untyped_storage().data_ptr() for name, t in captured.items() if name != "np"}
        """
    )
    length = sc["size"][0]
    for method, n in data.draw(
        st.lists(st.tuples(st.sampled_from(["copy_to_gpu", "copy_to_cpu"]), s.slice_end(length)), min_size=1, max_size=5),
        label="copies",
    ):
        sc.run(f"buf.{method}({n!r})")
    sc.run(
        """
        sync()
        for name, t in captured.items():
            now = getattr(buf, name)
            if name == "np":
                assert np.shares_memory(now, t) or t.size == 0, "buf.np no longer views the memory it had at construction"
            else:
                assert now.untyped_storage().data_ptr() == storages[name], (
                    f"buf.{name} was rebound to a new storage: a caller that captured it (a CUDA graph, say) is left behind"
                )
        fill_bytes(captured["cpu"], seed=5)  # writes through what a caller captured reach the buffer
        assert (raw(buf.cpu) == raw(captured["cpu"])).all(), "buf.cpu no longer shows writes to the tensor captured at construction"
        """
    )
