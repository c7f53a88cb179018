"""First use is a creation context (issue 29, item 1). A class that allocates lazily, on the first
access of cpu, gpu or np or at its first copy, makes its tensors in the mode of that moment: first used
inside inference_mode(), they are inference tensors, and the next in-place update outside it raises.
The suite makes the first use inside each creation context (drawn in test_mutable_wherever_made, every
way in the original-bug test), rejects the lazy variants on promise 3 with reproducers that fail on
their own, and accepts lazy classes that allocate as the fix does."""

from __future__ import annotations

import pytest
import torch
from alt_impls import LazyDeviceOnFirstCopy, LazyHostThroughNumpy, LazyOnFirstAccess
from suite_runner import run_script, run_suite

from cpugpu_conformance import variants
from cpugpu_conformance.testing.buffer import mutability
from cpugpu_conformance.testing.shared import contexts

CPU = torch.device("cpu")

# Each lazy variant, and the first uses (inside inference mode) that leave it holding inference tensors.
LAZY = {
    "LazyOnFirstAccessBuffer": {"access", "copy_to_gpu", "copy_to_cpu", "np_write"},
    "LazyDeviceOnFirstCopyBuffer": {"copy_to_gpu", "copy_to_cpu"},
    "LazyHostThroughNumpyBuffer": {"np_write"},
}


def maker(cls):
    return lambda: cls(4, 3, dtype=torch.float32, device=CPU, pin_memory=False, with_numpy=True)


def test_the_first_uses_are_every_way_a_lazy_class_allocates():
    assert mutability.FIRST_USES[0] == "construct"  # the simplest, what hypothesis shrinks towards
    assert set(mutability.FIRST_USES) == {"construct", "access", "copy_to_gpu", "copy_to_cpu", "np_write"}
    assert set().union(*LAZY.values()) == set(mutability.FIRST_USES) - {"construct"}


@pytest.mark.parametrize("name", sorted(LAZY))
def test_a_lazy_variant_breaks_only_when_first_used_inside_inference_mode(name):
    """Built in inference mode and first touched outside it (all the suite did before), each lazy
    variant holds; first used inside, in the way it allocates wrongly, it refuses the next update."""
    cls = getattr(variants, name)
    for first_use in mutability.FIRST_USES:
        try:
            mutability.original_bug(maker(cls), CPU, first_use)
        except RuntimeError as exc:
            assert first_use in LAZY[name], f"{name} failed with first use {first_use!r}: {exc}"
            assert mutability.INFERENCE_REFUSAL in str(exc), exc
        else:
            assert first_use not in LAZY[name], f"{name} held with first use {first_use!r} inside inference mode"


@pytest.mark.parametrize("cls", [LazyOnFirstAccess, LazyDeviceOnFirstCopy, LazyHostThroughNumpy],
                         ids=lambda c: c.__name__)
def test_a_lazy_class_that_allocates_as_the_fix_does_holds_in_every_context_and_first_use(cls):
    for context in contexts.CONTEXTS + contexts.AMBIENT:
        for first_use in mutability.FIRST_USES:
            if context.enter is None:
                buf = mutability.made_and_first_used(maker(cls), first_use)
            else:
                buf = context.enter(mutability.made_and_first_used, maker(cls), first_use)
            mutability.not_inference(buf)
            buf.cpu[0] = 1.0
            buf.np[1] = 2.0
            buf.copy_to_gpu()
            buf.gpu[2] += 3.0
            buf.copy_to_cpu()
            assert buf.cpu[:3].tolist() == [[1.0] * 3, [2.0] * 3, [3.0] * 3], (context.name, first_use)
    mutability.original_bug(maker(cls), CPU, "np_write")


@pytest.mark.parametrize("name", sorted(LAZY))
def test_the_drawn_first_use_catches_each_lazy_variant_in_a_context_of_its_own(name, tmp_path):
    """test_mutable_wherever_made alone (its first use is one more drawn axis, no test of its own):
    failed on promise 3, with a reproducer that makes the first use the variant breaks on inside a
    creation context, fails on its own, and holds against the reference."""
    run = run_suite(tmp_path, "--impl", f"cpugpu_conformance.variants:{name}", "--promise", "3", "--device", "cpu",
                    "-k", "test_mutable_wherever_made")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-2000:]
    [failure] = [f for f in run.failures("3") if "test_mutable_wherever_made" in f["test"]]
    script = failure["reproducer"]
    assert "promise 3 (Mutable wherever they were made)" in script.splitlines()[0], script[:300]
    drawn = [line.split(" = ", 1)[1].strip("'") for line in script.splitlines() if line.startswith("first_use = ")]
    assert drawn and drawn[0] in LAZY[name], (name, drawn)
    assert "made_and_first_used(make, first_use)" in script, script
    alone = run_script(tmp_path, script)
    assert alone.returncode != 0 and "ok: the promise held" not in alone.stdout, alone.stdout + alone.stderr
    fixed = script.replace(f"from cpugpu_conformance.variants import {name} as Buffer",
                           "from cpugpu_conformance.reference import CpuGpuBuffer as Buffer")
    assert fixed != script
    held = run_script(tmp_path, fixed, "reference.py")
    assert held.returncode == 0 and "ok: the promise held" in held.stdout, held.stdout + held.stderr
