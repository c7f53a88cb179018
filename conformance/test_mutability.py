"""Promise 3: the tensors are mutable wherever the buffer was made, inside and outside inference mode.

The refusal of an in-place update to an inference tensor comes *after* the write, so
these tests check that no exception is raised and that `is_inference()` is False; they
never infer mutability from contents.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from . import strategies as s
from .repro import Scenario
from .scenarios import build
from .snippets import BYTE_HELPERS

NOT_INFERENCE = """
for name in ("cpu", "gpu"):
    assert not getattr(buf, name).is_inference(), (
        f"buf.{name} is an inference tensor: in-place updates outside inference mode will raise"
    )
"""

# Torch in-place ops and index assignment; each is applied to the buffer and to a
# plain tensor made here, and the two must end with the same bytes.
TORCH_OPS = {
    "fill_": "{t}.fill_(1)",
    "zero_": "{t}.zero_()",
    "index_assign": "{t}[:{k}] = 1",
    "copy_": "{t}.copy_(torch.ones_like({t}))",
}


@st.composite
def mutations(draw, with_numpy: bool):
    targets = ["cpu", "gpu"] + (["np"] if with_numpy else [])
    target = draw(st.sampled_from(targets))
    op = "np_assign" if target == "np" else draw(st.sampled_from(sorted(TORCH_OPS)))
    return target, op, draw(st.integers(0, 3)), draw(st.booleans())


def _mutation_code(target: str, op: str, k: int, inside: bool) -> str:
    if op == "np_assign":
        lines = [f"buf.np[:{k}] = 1", f"model_cpu[:{k}] = 1"]
    else:
        model = "model_cpu" if target == "cpu" else "model_gpu"
        lines = [TORCH_OPS[op].format(t=f"buf.{target}", k=k), TORCH_OPS[op].format(t=model, k=k)]
    if inside:
        return "with torch.inference_mode():\n" + "".join(f"    {line}\n" for line in lines)
    return "".join(f"{line}\n" for line in lines)


@pytest.mark.promise("3")
@given(data=st.data())
def test_mutable_wherever_made(Buffer, record, device, data):
    sc = build(Buffer, record, "3", device, data, s.fillable_dtype(device), contexts=True)
    sc.run(NOT_INFERENCE)
    sc.run(
        """
        model_cpu = torch.zeros(size, dtype=dtype)  # plain tensors: what the writes must produce
        model_gpu = torch.zeros(size, dtype=dtype)
        """
    )
    drawn = data.draw(st.lists(mutations(sc["with_numpy"]), min_size=1, max_size=4), label="mutations")
    for target, op, k, inside in drawn:
        sc.run(_mutation_code(target, op, k, inside))
    if any(target == "np" for target, *_ in drawn):
        record.blame("5")  # a NumPy write that did not land: np is no view of cpu
    sc.run(
        """
        sync()
        assert (raw(buf.cpu) == raw(model_cpu)).all(), "buf.cpu does not hold what was written to it"
        assert (raw(buf.gpu) == raw(model_gpu)).all(), "buf.gpu does not hold what was written to it"
        """
    )
    record.blame(None)
    sc.run(NOT_INFERENCE)


@pytest.mark.promise("3")
def test_original_bug_buffer_made_in_inference_mode(Buffer, record, device):
    """vLLM's elastic EP scaling: buffers rebuilt inside inference_mode(), then updated in place outside it."""
    sc = Scenario(Buffer, record, "3", "Mutable wherever they were made", device, size=(4, 3), dtype=torch.float32, pin_memory=False, with_numpy=True)
    sc.run(BYTE_HELPERS)
    sc.run(
        """
        with torch.inference_mode():
            buf = Buffer(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)

        # Outside inference mode again, the engine updates the buffer in place:
        buf.cpu[0] = 1.0  # torch write on the host tensor
        buf.np[1] = 2.0  # NumPy write through the view
        buf.copy_to_gpu()
        buf.gpu[2] += 3.0  # torch write on the device tensor
        buf.copy_to_cpu()
        sync()
        assert buf.np.tolist() == [[1.0] * 3, [2.0] * 3, [3.0] * 3, [0.0] * 3], buf.np.tolist()
        assert not buf.cpu.is_inference() and not buf.gpu.is_inference()
        """
    )
