"""The suite has teeth: it rejects every broken variant, on the promise that variant breaks,
with a reproducer that fails on its own; and it accepts the reference."""

from __future__ import annotations

import pytest
from suite_runner import run_script, run_suite

from cpugpu_conformance.promises import PROMISES, RECORDED_ONLY, applies
from cpugpu_conformance.variants import VARIANTS, PreFixCpuGpuBuffer


def test_the_pre_fix_class_comes_first():
    assert VARIANTS[0].cls is PreFixCpuGpuBuffer and VARIANTS[0].promise == "3"
    assert len(VARIANTS) >= 10
    judged = {p for p in PROMISES if p not in RECORDED_ONLY and applies(p, "cpu")}
    assert {v.promise for v in VARIANTS} >= judged, "every promise judged on the CPU has a variant that breaks it"


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v.name}-breaks-{v.promise}")
def test_suite_rejects_variant(variant, tmp_path):
    # Only the promise the variant breaks: the whole suite per variant would take most of `nox -s tests`.
    run = run_suite(tmp_path, "--impl", variant.spec, "--promise", variant.promise)
    assert run.returncode == 1, f"suite exit {run.returncode} for {variant.name}\n{run.stdout[-3000:]}{run.stderr[-2000:]}"
    assert run.verdict(variant.promise) == "failed", (
        f"{variant.name} breaks promise {variant.promise} ({PROMISES[variant.promise]}), "
        f"but the suite says {run.verdict(variant.promise)}"
    )
    failure = run.failures(variant.promise)[0]
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


def test_suite_accepts_the_reference(tmp_path):
    run = run_suite(tmp_path)
    assert run.returncode == 0, run.stdout[-5000:]
    assert run.result["status"] == "completed" and run.result["counts"]["failed"] == 0
    for promise in PROMISES:
        verdict = run.verdict(promise)
        if promise in RECORDED_ONLY:
            assert verdict == "recorded" and run.result["promises"][promise]["devices"]["cpu"]["observed"]
        elif not applies(promise, "cpu"):  # the CUDA promise has nothing to check on the CPU: not a skip, not a pass
            assert verdict == "not_applicable" and "cuda" in run.result["promises"][promise]["devices"]["cpu"]["reason"]
        else:
            assert verdict == "passed", f"promise {promise}: {verdict}"
    assert run.cell.answer().clean, run.cell.answer().lines
