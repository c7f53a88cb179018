"""Tests of what cpugpu_conformance.observe.observe_all gives back and leaves behind: every probe
documented and reported, strict JSON, the same in every call and process, and the caller's grad
mode, inference mode, default dtype and device left as found."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from observe_helpers import (
    in_fresh_thread,
    mode_state,
    observed_fixture,  # noqa: F401 - the fixture `observed`
)

from cpugpu_conformance import observe
from cpugpu_conformance.observe import PROBES, observe_all


def global_state() -> dict:
    return {
        "inference_mode": torch.is_inference_mode_enabled(),
        "grad": torch.is_grad_enabled(),
        "default_dtype": torch.get_default_dtype(),
        "default_device": torch.empty(0).device,
        "warn_always": torch.is_warn_always_enabled(),
    }


# ----------------------------------------------------------------- shape of the output


def test_at_least_fifteen_probes_each_documented() -> None:
    assert len(PROBES) >= 15
    for name, entry in PROBES.items():
        assert entry.name == name
        assert entry.doc.strip(), name


def test_no_probe_name_lies_under_another() -> None:
    # The report names a changed entry of a dict-valued probe "<probe>.<key>".
    names = list(PROBES)
    assert [(a, b) for a in names for b in names if b.startswith(a + ".")] == []


def test_every_probe_reported_in_registry_order_with_value_or_error(observed: dict) -> None:
    assert list(observed) == list(PROBES)
    for name, entry in observed.items():
        assert entry["doc"] == PROBES[name].doc
        assert set(entry) - {"warnings"} in ({"doc", "value"}, {"doc", "error"}), name
        if "error" in entry:
            assert set(entry["error"]) == {"type", "message"}
            assert "\n" not in entry["error"]["message"]
            assert len(entry["error"]["message"]) <= observe.MESSAGE_LIMIT
        if "warnings" in entry:
            assert_warnings_well_formed(entry["warnings"], name)


def assert_warnings_well_formed(recorded: list, where: str) -> None:
    assert recorded, f"{where}: an empty warnings list is left out, not recorded"
    assert len({json.dumps(w, sort_keys=True) for w in recorded}) == len(recorded), f"{where}: repeats"
    for warning in recorded:
        assert set(warning) == {"category", "message"}, where
        assert "\n" not in warning["message"] and "0x" not in warning["message"].replace("0x?", ""), where
        assert "Triggered internally" not in warning["message"], where


def test_no_probe_leaked_state(observed: dict) -> None:
    leaked = {name: entry["error"] for name, entry in observed.items() if "LeakedModeState" in str(entry.get("error"))}
    assert leaked == {}


def test_dtype_table_warnings_stay_in_their_rows(observed: dict) -> None:
    # The report diffs a table entry by entry only when the probe has nothing but a value.
    assert set(observed["dtypes"]) == {"doc", "value"}
    for dtype, row in observed["dtypes"]["value"].items():
        if "warnings" in row:
            assert_warnings_well_formed(row["warnings"], f"dtypes.{dtype}")


def test_output_is_strict_json(observed: dict) -> None:
    assert json.loads(json.dumps(observed, allow_nan=False)) == observed


def test_two_calls_give_identical_output(observed: dict) -> None:
    assert observe_all() == observed


def test_a_fresh_process_gives_identical_output(observed: dict) -> None:
    # Warn-once and lazy initialisation in torch make the first call in a process the
    # likeliest to differ; the report compares files written by separate processes.
    code = "import json; from cpugpu_conformance.observe import observe_all; print(json.dumps(observe_all()))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(run.stdout) == observed


# ----------------------------------------------------------------- global state


@pytest.mark.parametrize(
    "enter",
    [torch.enable_grad, torch.no_grad, torch.inference_mode],
    ids=["plain", "no_grad", "inference_mode"],
)
def test_caller_mode_left_as_found_and_does_not_change_the_observations(enter, observed: dict) -> None:
    with enter():
        before = mode_state()
        inside = observe_all()
        assert mode_state() == before
    assert inside == observed


def test_mode_state_after_observe_all_is_plain() -> None:
    grad_before = torch.is_grad_enabled()
    observe_all()
    assert torch.is_inference_mode_enabled() is False
    assert torch.is_grad_enabled() == grad_before


def test_plain_state_is_left_as_found() -> None:
    before = global_state()
    observe_all()
    assert global_state() == before


def test_ambient_default_dtype_and_device_context_left_as_found_and_do_not_change_observations(
    observed: dict,
) -> None:
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.device("meta"), torch.no_grad():
            ambient = global_state()
            assert ambient["default_device"] == torch.device("meta")
            inside = observe_all()
            assert global_state() == ambient
    finally:
        torch.set_default_dtype(before)
    assert inside == observed


def test_set_default_device_left_as_found_and_does_not_change_observations(observed: dict) -> None:
    torch.set_default_device("meta")
    try:
        ambient = global_state()
        inside = observe_all()
        assert global_state() == ambient
        assert torch.get_default_device() == torch.device("meta")
    finally:
        torch.set_default_device(None)
    assert torch.empty(0).device == torch.device("cpu")
    assert inside == observed


def test_warn_always_is_restored_both_ways() -> None:
    for setting in (True, False):
        torch.set_warn_always(setting)
        try:
            observe_all()
            assert torch.is_warn_always_enabled() is setting
        finally:
            torch.set_warn_always(False)


def test_reused_object_probes_confine_the_leak_to_their_thread() -> None:
    for name in ("mode.reused_inference_mode_object", "mode.reused_inference_mode_object_states"):
        PROBES[name].fn(torch)  # called directly, without observe_all's checks and repairs
        assert mode_state() == (False, True), name
        assert in_fresh_thread(mode_state) == (False, True), name
        assert torch.zeros(1).is_inference() is False, name
