"""Tests of cpugpu_conformance.observe: the probes of torch behaviour the contract rests on."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from cpugpu_conformance import observe
from cpugpu_conformance.observe import PROBES, Probe, clean_message, observe_all


@pytest.fixture(scope="module")
def observed() -> dict:
    return observe_all()


def value(observed: dict, name: str):
    entry = observed[name]
    assert "value" in entry, f"{name} raised: {entry.get('error')}"
    return entry["value"]


def error(observed: dict, name: str) -> dict:
    entry = observed[name]
    assert "error" in entry, f"{name} did not raise: {entry.get('value')!r}"
    return entry["error"]


def mode_state() -> tuple[bool, bool]:
    return torch.is_inference_mode_enabled(), torch.is_grad_enabled()


# ----------------------------------------------------------------- shape of the output


def test_at_least_fifteen_probes_each_documented() -> None:
    assert len(PROBES) >= 15
    for name, entry in PROBES.items():
        assert entry.name == name
        assert entry.doc.strip(), name


def test_every_probe_reported_in_registry_order_with_value_or_error(observed: dict) -> None:
    assert list(observed) == list(PROBES)
    for name, entry in observed.items():
        assert entry["doc"] == PROBES[name].doc
        assert set(entry) in ({"doc", "value"}, {"doc", "error"}), name
        if "error" in entry:
            assert set(entry["error"]) == {"type", "message"}
            assert "\n" not in entry["error"]["message"]
            assert len(entry["error"]["message"]) <= observe.MESSAGE_LIMIT


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


# ----------------------------------------------------------------- known facts (torch 2.13, numpy 2)


def test_inference_mode_tensor_is_an_inference_tensor_refusing_updates_outside(observed: dict) -> None:
    assert value(observed, "context.inference_mode.is_inference") is True
    refused = error(observed, "context.inference_mode.add_outside")
    assert refused["type"] == "RuntimeError"
    assert "Inplace update to inference tensor outside InferenceMode" in refused["message"]
    assert value(observed, "context.inference_mode.add_inside") == [1.0, 1.0]


@pytest.mark.parametrize("context", ["decorated_inference_mode", "no_grad_in_inference_mode"])
def test_other_inference_contexts_make_inference_tensors(observed: dict, context: str) -> None:
    assert value(observed, f"context.{context}.is_inference") is True
    assert error(observed, f"context.{context}.add_outside")["type"] == "RuntimeError"


@pytest.mark.parametrize(
    "context",
    [
        "plain",
        "inference_mode_false_in_inference_mode",
        "no_grad",
        "inference_mode_false_in_no_grad",
        "thread_from_inference_mode",
    ],
)
def test_other_contexts_make_normal_tensors(observed: dict, context: str) -> None:
    assert value(observed, f"context.{context}.is_inference") is False
    assert value(observed, f"context.{context}.add_outside") == [1.0, 1.0]
    assert value(observed, f"context.{context}.add_inside") == [1.0, 1.0]


def test_inference_mode_false_re_enables_grad_inside_no_grad(observed: dict) -> None:
    assert value(observed, "mode.inference_mode_false_in_no_grad.grad_enabled") is True
    assert value(observed, "context.inference_mode_false_in_inference_mode.mode_state") == {
        "grad_enabled": True,
        "inference_mode_enabled": False,
    }
    assert value(observed, "mode.nested_states") == {
        "inference_mode": True,
        "no_grad": True,
        "inference_mode_false": False,
        "inference_mode_again": True,
        "after": False,
    }


def test_reused_inference_mode_object_leak_is_observed_but_confined(observed: dict) -> None:
    assert value(observed, "mode.reused_inference_mode_object")["inference_mode_enabled"] is True
    assert torch.is_inference_mode_enabled() is False


def test_refusal_comes_after_the_write(observed: dict) -> None:
    assert value(observed, "inference_tensor.add_outside_data") == {
        "before": [0.0, 0.0],
        "after": [1.0, 1.0],
        "raised": "RuntimeError",
    }


def test_version_counter(observed: dict) -> None:
    assert error(observed, "inference_tensor.version")["type"] == "RuntimeError"
    assert value(observed, "version.normal_after_add_") == [0, 1]


def test_numpy_view_of_inference_tensor_shares_memory_and_bypasses_the_check(observed: dict) -> None:
    assert value(observed, "numpy.inference_tensor.dtype") == "float32"
    assert value(observed, "numpy.inference_tensor.shares_memory") == {
        "same_address": True,
        "tensor_write_seen_by_array": True,
    }
    assert value(observed, "numpy.inference_tensor.write_outside") == [7.0, 0.0]


def test_bfloat16_numpy_raises_type_error(observed: dict) -> None:
    assert error(observed, "numpy.bfloat16") == {"type": "TypeError", "message": "Got unsupported ScalarType BFloat16"}


def test_dtype_table(observed: dict) -> None:
    table = value(observed, "dtypes")
    assert list(table) == sorted(table)
    assert "float" not in table and "half" not in table  # aliases folded into canonical names
    assert table["float32"] == {"zeros": "ok", "copy_": "ok", "numpy": "float32"}
    assert table["uint16"]["numpy"] == "uint16"
    assert table["bfloat16"] == {"zeros": "ok", "copy_": "ok", "numpy": "raises TypeError"}
    assert table["float8_e4m3fn"]["numpy"] == "raises TypeError"
    assert table["int4"]["copy_"] == "raises NotImplementedError"
    assert table["qint8"] == {"zeros": "raises NotImplementedError", "copy_": None, "numpy": None}


def test_pin_memory_without_accelerator(observed: dict) -> None:
    cuda = value(observed, "accelerator.cuda_available")
    assert cuda == torch.cuda.is_available()
    if cuda:
        assert value(observed, "pin_memory.nonempty.is_pinned") is True
    else:
        assert error(observed, "pin_memory.nonempty.is_pinned")["type"] == "RuntimeError"
    assert value(observed, "pin_memory.unpinned.is_pinned") is False


def test_copies_and_slices(observed: dict) -> None:
    assert value(observed, "zeros_like.cpu.shares_memory") is False
    assert value(observed, "copy_.non_blocking_cpu.returns_self") is True
    assert value(observed, "copy_.into_slice") == {"destination": [1.0, 1.0, 0.0, 0.0], "returned_shares_storage": True}
    assert value(observed, "slice.first_dim_lengths") == {"-5": 0, "-1": 2, "0": 0, "2": 2, "3": 3, "5": 3}
    assert error(observed, "slice.zero_dim")["type"] == "IndexError"


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


def test_clean_message_is_capped() -> None:
    cleaned = clean_message("x" * 1000)
    assert len(cleaned) == observe.MESSAGE_LIMIT and cleaned.endswith("...")
