"""The suite has teeth: it rejects every broken variant, on the promise that variant breaks, on
every device where it breaks it, with a reproducer that fails on its own; it accepts a variant
where its bug cannot happen (variants.Variant.passes_on); and it accepts the reference."""

from __future__ import annotations

import pytest
from suite_runner import run_script, run_suite

from cpugpu_conformance import devices
from cpugpu_conformance.promises import PROMISES, RECORDED_ONLY, applies, not_applicable
from cpugpu_conformance.variants import NOT_BLOCKING, VARIANTS, PreFixCpuGpuBuffer

# Promises no broken class can break on a device, and why.
UNBREAKABLE = {("4", "cuda"): "a host tensor and a CUDA tensor cannot share one storage",
               ("4", "sim"): "a host tensor and a sim tensor cannot share one storage"}


def test_the_pre_fix_class_comes_first():
    assert VARIANTS[0].cls is PreFixCpuGpuBuffer and VARIANTS[0].promise == "3"
    assert len(VARIANTS) >= 10
    for device in devices.NAMES:
        judged = {p for p in PROMISES if p not in RECORDED_ONLY and applies(p, device) and (p, device) not in UNBREAKABLE}
        broken = {v.promise for v in VARIANTS if device in v.fails_on}
        assert broken >= judged, f"promises judged on {device} with no variant that breaks them there: {sorted(judged - broken)}"


def test_every_variant_says_where_it_fails_and_where_it_passes():
    for v in VARIANTS:
        assert set(v.fails_on) | set(v.passes_on) == set(devices.NAMES), v.name
        assert v.fails_on and not set(v.fails_on) & set(v.passes_on), v.name
        assert all(applies(v.promise, d) for d in v.fails_on), f"{v.name} fails promise {v.promise} where it does not apply"
    where = {v.name: (v.fails_on, v.passes_on) for v in VARIANTS}
    assert where["SharedStorageBuffer"] == (("cpu",), ("cuda", "sim"))
    assert where["PrivateStreamBuffer"] == (("cuda", "sim"), ("cpu",))
    # Promise 10's ways to break on an accelerator only: each passes on the CPU, where its bug cannot happen.
    for name in ("ForkedStreamBuffer", "SynchronizingCopiesBuffer", "EventWaitingBuffer", "PageableHostBuffer"):
        assert where[name] == (("cuda", "sim"), ("cpu",)), name
        assert next(v for v in VARIANTS if v.name == name).caught_by[0] == NOT_BLOCKING, name
    # What only two devices show: sim's last device is what the suite passes there.
    assert where["FirstDeviceBuffer"] == where["DeviceSwitchingBuffer"] == (("sim",), ("cpu", "cuda"))


def test_a_test_named_to_catch_a_variant_is_a_test_of_its_promise():
    """caught_by starts with the name of a test of the variant's promise: the device tests, promise 10."""
    from cpugpu_conformance import promises
    from cpugpu_conformance.testing.buffer.device_promises import DeviceTests

    named = [v for v in VARIANTS if v.caught_by]
    assert len(named) == 4
    for v in named:
        assert v.caught_by[0] in vars(DeviceTests) and v.promise == promises.CUDA_SPECIFICS, v.name


def _on_each_device(passing: bool):
    """(variant, device) for each device where it must fail (passing=False) or pass; a missing device is skipped with why."""
    return [
        pytest.param(v, device, id=f"{v.name}-{device}-{'passes' if passing else 'breaks-' + v.promise}",
                     marks=pytest.mark.devices(device))
        for v in VARIANTS
        for device in (v.passes_on if passing else v.fails_on)
    ]


@pytest.mark.parametrize(("variant", "device"), _on_each_device(passing=False))
def test_suite_rejects_variant(variant, device, tmp_path):
    # Only the promise the variant breaks: the whole suite per variant would take most of `nox -s tests`.
    run = run_suite(tmp_path, "--impl", variant.spec, "--promise", variant.promise, "--device", device)
    assert run.returncode == 1, f"suite exit {run.returncode} for {variant.name}\n{run.stdout[-3000:]}{run.stderr[-2000:]}"
    assert run.verdict(variant.promise, device) == "failed", (
        f"{variant.name} breaks promise {variant.promise} ({PROMISES[variant.promise]}) on {device}, "
        f"but the suite says {run.verdict(variant.promise, device)}"
    )
    failures = run.failures(variant.promise, device)
    # The test that catches it every time, where others may fail too (by chance, or for another reason).
    caught = [f for f in failures if all(word in f["test"] for word in variant.caught_by)]
    assert caught, f"{variant.name}: no failing test is named with {variant.caught_by}: {[f['test'] for f in failures]}"
    failure = caught[0]
    assert failure["reproducer"], f"no reproducer for {failure['test']}"
    assert "Reproducer" in run.stdout, "the terminal report does not show the reproducer"

    # The reproducer is standalone: it fails on its own against the variant...
    alone = run_script(tmp_path, failure["reproducer"])
    assert alone.returncode != 0 and "ok: the promise held" not in alone.stdout, alone.stdout + alone.stderr
    # ...and holds against the reference, so it pins this bug, not a quirk of the scenario.
    fixed = failure["reproducer"].replace(
        f"from cpugpu_conformance.variants import {variant.name} as Buffer",
        "from cpugpu_conformance.reference import CpuGpuBuffer as Buffer",
    )
    assert fixed != failure["reproducer"]
    held = run_script(tmp_path, fixed, "reference.py")
    assert held.returncode == 0 and "ok: the promise held" in held.stdout, held.stdout + held.stderr


@pytest.mark.parametrize(("variant", "device"), _on_each_device(passing=True))
def test_suite_accepts_variant_where_its_bug_cannot_happen(variant, device, tmp_path):
    run = run_suite(tmp_path, "--impl", variant.spec, "--device", device)
    assert run.returncode == 0, f"{variant.name} must pass on {device}; suite exit {run.returncode}\n{run.stdout[-4000:]}"
    assert run.result["counts"]["failed"] == 0 and run.cell.answer().clean, run.cell.answer().lines


def test_suite_accepts_the_reference(tmp_path):
    run = run_suite(tmp_path)
    assert run.returncode == 0, run.stdout[-5000:]
    assert run.result["status"] == "completed" and run.result["counts"]["failed"] == 0
    accelerators = devices.accelerators_in(run.result["environment"])
    for device in run.cell.tested_devices():
        for promise in PROMISES:
            verdict, entry = run.verdict(promise, device), run.result["promises"][promise]["devices"][device]
            why = not_applicable(promise, device, accelerators)
            if why:  # nothing to check there (the CUDA promise on the CPU; promise 11 beside an accelerator)
                assert verdict == "not_applicable" and entry["reason"] == why, f"promise {promise} on {device}: {entry}"
            elif promise in RECORDED_ONLY:
                assert verdict == "recorded" and entry["observed"]
            else:
                assert verdict == "passed", f"promise {promise} on {device}: {verdict}"
    assert "cpu" in run.cell.tested_devices()
    assert "cuda" in run.result["promises"]["10"]["devices"]["cpu"]["reason"]
    assert run.cell.answer().clean, run.cell.answer().lines
