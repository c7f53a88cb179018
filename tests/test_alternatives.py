"""The suite accepts correct implementations written differently from the reference, on every
device where they are correct, and rejects them, on the promise they break, where they are not
(the table in alt_impls.py)."""

from __future__ import annotations

import pytest
from alt_impls import ALTERNATIVES
from suite_runner import TESTS, run_suite

from cpugpu_conformance import devices
from cpugpu_conformance.promises import PROMISES, RECORDED_ONLY, not_applicable


def _on_each_device():
    """(alternative, device) for every device of the registry; a missing one is skipped with why."""
    return [
        pytest.param(alt, device, id=f"{alt.name}-{device}-{'fails-' + alt.fails_on[device] if device in alt.fails_on else 'passes'}",
                     marks=pytest.mark.devices(device))
        for alt in ALTERNATIVES
        for device in devices.NAMES
    ]


def test_the_table_names_every_device_and_known_promises():
    for alt in ALTERNATIVES:
        assert set(alt.passes_on) | set(alt.fails_on) == set(devices.NAMES), alt.name
        assert not set(alt.passes_on) & set(alt.fails_on), alt.name
        assert set(alt.fails_on.values()) <= set(PROMISES), alt.name
    blocking = next(a for a in ALTERNATIVES if a.name == "BlockingCopies")
    assert blocking.passes_on == ("cpu",) and dict(blocking.fails_on) == {"cuda": "10", "sim": "10"}


def expected_recorded_verdict(promise: str, device: str, accelerators: tuple[str, ...]) -> str:
    """What a correct class gets for an implementation-defined promise on a machine (promise 11)."""
    return "not_applicable" if not_applicable(promise, device, accelerators) else "recorded"


@pytest.mark.parametrize(("alt", "device"), _on_each_device())
def test_suite_judges_alternative_as_its_table_says(alt, device, tmp_path):
    run = run_suite(tmp_path, "--impl", f"{TESTS / 'alt_impls.py'}:{alt.name}", "--device", device)
    broken = alt.fails_on.get(device)
    if broken is None:
        assert run.returncode == 0, f"{alt.name} ({alt.cls.__doc__}) was rejected on {device}:\n{run.stdout[-6000:]}"
        assert run.result["counts"]["failed"] == 0
        accelerators = devices.accelerators_in(run.result["environment"])
        for promise in RECORDED_ONLY:
            assert run.verdict(promise, device) == expected_recorded_verdict(promise, device, accelerators)
        return
    assert run.returncode == 1, f"{alt.name} must fail promise {broken} on {device}; suite exit {run.returncode}\n{run.stdout[-4000:]}"
    failed = {p for p in PROMISES if run.verdict(p, device) == "failed"}
    assert failed == {broken}, f"{alt.name} on {device}: expected only promise {broken} to fail, got {sorted(failed)}"
