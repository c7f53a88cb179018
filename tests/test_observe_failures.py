"""Tests of cpugpu_conformance.observe's failure handling: a probe that raises, returns what is not
JSON, leaks mode state or warns is recorded and repaired; messages and warnings are cleaned."""

from __future__ import annotations

import sys
import warnings

import pytest
import torch
from observe_helpers import mode_state

from cpugpu_conformance import observe
from cpugpu_conformance.observe import PROBES, Probe, clean_message, clean_warning, observe_all

# ----------------------------------------------------------------- failure handling


def _fake_registry(monkeypatch: pytest.MonkeyPatch, **fns) -> None:
    monkeypatch.setattr(observe, "PROBES", {name: Probe(name, f"fake {name}", fn) for name, fn in fns.items()})


def test_a_raising_probe_is_recorded_and_later_probes_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(torch_module):
        raise RuntimeError("broken at 0xdeadbeef in /tmp/x/y.py\nsecond line")

    _fake_registry(monkeypatch, boom=boom, fine=lambda torch_module: [1, 2])
    assert observe_all() == {
        "boom": {"doc": "fake boom", "error": {"type": "RuntimeError", "message": "broken at 0x? in <path>"}},
        "fine": {"doc": "fake fine", "value": [1, 2]},
    }


def test_a_probe_returning_non_json_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_registry(
        monkeypatch, odd=lambda torch_module: {"t": torch_module.zeros(1)}, nan=lambda torch_module: float("nan")
    )
    result = observe_all()
    assert result["odd"]["error"]["type"] == "TypeError"
    assert result["nan"]["error"]["type"] == "ValueError"


def test_a_probe_leaking_grad_mode_is_flagged_and_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_registry(monkeypatch, leak=lambda torch_module: torch_module.set_grad_enabled(False) and None)
    grad_before = torch.is_grad_enabled()
    result = observe_all()
    assert result["leak"]["error"]["type"] == "LeakedModeState"
    assert torch.is_grad_enabled() == grad_before


def test_a_probe_leaking_inference_mode_is_flagged_and_repaired(monkeypatch: pytest.MonkeyPatch) -> None:
    def leak(torch_module):
        mode = torch_module.inference_mode()
        with mode:  # noqa: SIM117 - the reuse that leaves the mode on
            with mode:
                pass

    _fake_registry(monkeypatch, leak=leak, after=lambda torch_module: torch_module.zeros(1).is_inference())
    result = observe_all()
    assert result["leak"]["error"]["type"] == "LeakedModeState"
    assert result["after"] == {"doc": "fake after", "value": False}
    assert mode_state() == (False, True)
    torch.zeros(1).add_(1)  # a normal tensor again
    with torch.inference_mode():
        assert torch.is_inference_mode_enabled()
    assert mode_state() == (False, True)


def test_a_probe_leaking_the_default_dtype_is_flagged_and_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_registry(
        monkeypatch,
        leak=lambda torch_module: torch_module.set_default_dtype(torch_module.float64),
        after=lambda torch_module: str(torch_module.zeros(1).dtype),
    )
    result = observe_all()
    assert result["leak"]["error"]["type"] == "LeakedModeState"
    assert "float64" in result["leak"]["error"]["message"]
    assert result["after"]["value"] == "torch.float32"
    assert torch.get_default_dtype() == torch.float32


def test_warnings_are_recorded_cleaned_deduplicated_and_identical_each_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def noisy(torch_module):
        for _ in range(3):
            warnings.warn("object at 0xdeadbeef in /tmp/x/y.py\nsecond line", UserWarning, stacklevel=1)
        warnings.warn("old", DeprecationWarning, stacklevel=1)
        return 1

    def noisy_and_raising(torch_module):
        warnings.warn("about to fail", RuntimeWarning, stacklevel=1)
        raise ValueError("failed")

    _fake_registry(monkeypatch, noisy=noisy, raising=noisy_and_raising, quiet=lambda torch_module: 2)
    expected = {
        "noisy": {
            "doc": "fake noisy",
            "value": 1,
            "warnings": [
                {"category": "UserWarning", "message": "object at 0x? in <path>"},
                {"category": "DeprecationWarning", "message": "old"},
            ],
        },
        "raising": {
            "doc": "fake raising",
            "error": {"type": "ValueError", "message": "failed"},
            "warnings": [{"category": "RuntimeWarning", "message": "about to fail"}],
        },
        "quiet": {"doc": "fake quiet", "value": 2},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as under -W error: still recorded, never raised
        assert observe_all() == expected
        assert observe_all() == expected


def test_without_torch_every_probe_records_the_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ModuleNotFoundError
    result = observe_all()
    assert list(result) == list(PROBES)
    assert {entry["error"]["type"] for entry in result.values()} == {"ModuleNotFoundError"}


def test_duplicate_probe_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observe, "PROBES", {})
    observe.probe("same", "first")(lambda torch_module: 1)
    with pytest.raises(ValueError, match="duplicate probe name 'same'"):
        observe.probe("same", "second")(lambda torch_module: 2)


@pytest.mark.parametrize(
    "raw, cleaned",
    [
        ("first\nsecond", "first"),
        ("  padded  ", "padded"),
        ("", ""),
        ("at 0x7f3a2b and 0XABC", "at 0x? and 0x?"),
        ("(Triggered internally at /__w/pytorch/aten/src/Empty.cpp:54.)", "(Triggered internally at <path>:54.)"),
        ("file '/home/u/site-packages/torch/x.py'", "file '<path>'"),
        (r"at C:\Users\u\torch\x.py", "at <path>"),
        (
            "driver from http://www.nvidia.com/Download/index.aspx",
            "driver from http://www.nvidia.com/Download/index.aspx",
        ),
        ("a/b and 1/2", "a/b and 1/2"),
    ],
)
def test_clean_message(raw: str, cleaned: str) -> None:
    assert clean_message(raw) == cleaned


@pytest.mark.parametrize(
    "raw, cleaned",
    [
        (
            "The argument 'device' is deprecated. (Triggered internally at /__w/pytorch/aten/src/Memory.cpp:31.)",
            "The argument 'device' is deprecated.",
        ),
        ("Deprecated. (Triggered internally at ../aten/src/ATen/native/Memory.cpp:31.)\nmore", "Deprecated."),
        ("no trailer at 0x12ab", "no trailer at 0x?"),
    ],
)
def test_clean_warning(raw: str, cleaned: str) -> None:
    assert clean_warning(raw) == cleaned


def test_clean_message_is_capped() -> None:
    cleaned = clean_message("x" * 1000)
    assert len(cleaned) == observe.MESSAGE_LIMIT and cleaned.endswith("...")
