"""Any rank (issue 29, item 2): promise 1 says any number of dimensions, and engines keep
five-dimensional KV caches. The suite draws sizes of one to six dimensions, zero-length ones in any
position, for the shape and dtype tests, the copies and the state machine, and sweeps every dtype at
six dimensions too; a class right up to three dimensions and wrong from four is caught."""

from __future__ import annotations

import pytest
import torch
from hypothesis import find
from suite_runner import run_script, run_suite

from cpugpu_conformance.testing.buffer import construction
from cpugpu_conformance.testing.shared import checks
from cpugpu_conformance.testing.shared import strategies as s
from cpugpu_conformance.variants import FoldsPastThreeDimsBuffer

CPU = torch.device("cpu")


def test_the_drawn_sizes_reach_six_dimensions_with_a_zero_length_one_anywhere():
    assert s.MAX_RANK >= 6
    for position in range(s.MAX_RANK):
        found = find(s.sizes, lambda size, p=position: len(size) == s.MAX_RANK and size[p] == 0)
        assert len(found) == s.MAX_RANK and found[position] == 0, found
    assert len(find(s.nonempty_sizes, lambda size: len(size) == s.MAX_RANK)) == s.MAX_RANK
    assert max(len(size) for size in construction.SWEEP_SIZES) >= 6


@pytest.mark.parametrize("size", [(5,), (2, 3), (2, 0, 3), (4, 1, 2)])
def test_the_folding_variant_is_right_up_to_three_dimensions(size):
    buf = FoldsPastThreeDimsBuffer(*size, dtype=torch.float32, device=CPU, pin_memory=False)
    checks.shape_dtype_device(buf, size, torch.float32, CPU)
    checks.partial_copy(buf, "copy_to_gpu", None, torch.float32, CPU)


@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 8, 16, 4, 2), (1, 0, 2, 1, 3, 2)])
def test_the_folding_variant_is_wrong_from_four_dimensions(size):
    buf = FoldsPastThreeDimsBuffer(*size, dtype=torch.float32, device=CPU, pin_memory=False)
    with pytest.raises(AssertionError, match="buf.gpu.shape"):
        checks.shape_dtype_device(buf, size, torch.float32, CPU)


def test_the_shape_copy_and_state_machine_tests_each_catch_it_on_promise_1(tmp_path):
    """Each of them draws rank four and more, and a device tensor of the wrong shape is promise 1's
    in each (the copies and the model check the shapes before they compare anything)."""
    run = run_suite(tmp_path, "--impl", "cpugpu_conformance.variants:FoldsPastThreeDimsBuffer", "--device", "cpu",
                    "-k", "test_shape_dtype_and_device and plain or test_every_dtype_in_every_context and plain "
                          "or test_partial_copy or test_buffer_state_machine")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-2000:]
    failed = {f["test"].split("::")[-1].split("[")[0]: f for f in run.failures("1")}
    assert set(failed) == {"test_shape_dtype_and_device", "test_every_dtype_in_every_context", "test_partial_copy",
                           "test_buffer_state_machine"}, sorted(failed)
    for promise in ("8", "9"):
        assert run.verdict(promise) != "failed", (promise, run.failures(promise))
    script = failed["test_partial_copy"]["reproducer"]
    size = next(line for line in script.splitlines() if line.startswith("size = "))
    assert len(eval(size.split(" = ", 1)[1])) >= 4, size  # noqa: S307 - a tuple literal the suite wrote
    alone = run_script(tmp_path, script)
    assert alone.returncode != 0 and "buf.gpu.shape" in alone.stderr, alone.stdout + alone.stderr
