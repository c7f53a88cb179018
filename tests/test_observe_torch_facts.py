"""Tests of cpugpu_conformance.observe's probes against the known facts of torch 2.13 and numpy 2
the contract rests on, and that a recorded value is what the probe's doc says it is."""

from __future__ import annotations

import json
import time
import types

import pytest
import torch
from observe_helpers import (
    in_fresh_thread,
    mode_state,
    observed_fixture,  # noqa: F401 - the fixture `observed`
)

from cpugpu_conformance import observe
from cpugpu_conformance.observe import PROBES, clean_message, observe_all


def value(observed: dict, name: str):
    entry = observed[name]
    assert "value" in entry, f"{name} raised: {entry.get('error')}"
    return entry["value"]


def error(observed: dict, name: str) -> dict:
    entry = observed[name]
    assert "error" in entry, f"{name} did not raise: {entry.get('value')!r}"
    return entry["error"]


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
    qint8 = table["qint8"]
    assert qint8.pop("warnings")[0]["message"].startswith("torch.quantize_per_tensor, ")
    assert qint8 == {"zeros": "raises NotImplementedError", "copy_": None, "numpy": None}
    assert table["complex32"]["warnings"] == [
        {"category": "UserWarning", "message": "ComplexHalf support is experimental and many operators don't support it yet."}
    ]


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


def test_reused_inference_mode_object_states(observed: dict) -> None:
    assert value(observed, "mode.reused_inference_mode_object_states") == {
        "outer": True,
        "inner": False,  # making the second guard dropped the first one, which switched the mode off
        "between": True,
        "exit_raised": None,
        "after": {"grad_enabled": False, "inference_mode_enabled": True},
    }


def test_bare_decorator_runs_and_makes_inference_tensors(observed: dict) -> None:
    assert value(observed, "mode.bare_decorator.is_inference") is True


@pytest.mark.parametrize("label", sorted(observe.NON_BOOL_MODES))
def test_non_bool_inference_mode_argument_is_taken_for_a_function(observed: dict, label: str) -> None:
    assert error(observed, f"mode.non_bool_argument.{label}") == {
        "type": "TypeError",
        "message": "'function' object does not support the context manager protocol",
    }


def test_inference_tensor_resize_and_autograd(observed: dict) -> None:
    refused = error(observed, "inference_tensor.resize_outside")
    assert refused["type"] == "RuntimeError" and "Inplace update to inference tensor" in refused["message"]
    for name in ("autograd.inference_tensor_saved.mul", "autograd.inference_tensor_saved.function"):
        saved = error(observed, name)
        assert saved["type"] == "RuntimeError"
        assert saved["message"].startswith("Inference tensors cannot be saved for backward."), name
    assert value(observed, "autograd.inference_tensor_unsaved.add") == [1.0, 1.0]


@pytest.mark.parametrize(
    "name, kind",
    [
        ("zeros.no_size", "TypeError"),
        ("zeros.negative_size", "RuntimeError"),
        ("zeros.float_size", "TypeError"),
        ("zeros.bool_size", "TypeError"),
        ("zeros.overflowing_size", "RuntimeError"),
        ("zeros.size_beyond_int64", "TypeError"),
    ],
)
def test_bad_sizes_are_refused(observed: dict, name: str, kind: str) -> None:
    assert error(observed, name)["type"] == kind


def test_overflowing_size_raises_before_allocating() -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="overflow"):
        PROBES["zeros.overflowing_size"].fn(torch)
    assert time.monotonic() - started < 5


def test_devices_and_defaults(observed: dict) -> None:
    assert value(observed, "zeros_like.meta.device") == "meta"
    if not torch.cuda.is_available():
        assert "error" in observed["zeros_like.cuda.device"]
    assert value(observed, "default_device.get_default_device") == "cpu"
    assert value(observed, "default_device.meta_context.zeros") == "meta"
    assert value(observed, "default_device.meta_context.zeros_device_cpu") == "cpu"
    assert value(observed, "default_device.meta_context.zeros_like_cpu") == "cpu"
    assert value(observed, "default_device.meta_context.get_default_device") == "meta"
    assert value(observed, "default_dtype.float16.zeros") == "torch.float16"
    assert value(observed, "default_dtype.float16.zeros_dtype_float32") == "torch.float32"
    assert value(observed, "default_dtype.float16.zeros_like_float32") == "torch.float32"


def test_is_pinned_device_argument_warns_deprecation_every_run(observed: dict) -> None:
    deprecated = {
        "category": "DeprecationWarning",
        "message": "The argument 'device' of Tensor.is_pinned() is deprecated. Please do not pass this argument.",
    }
    for name in ("pin_memory.is_pinned_device_cuda", "pin_memory.is_pinned_device_cpu"):
        assert observed[name]["warnings"] == [deprecated], name
    # torch warns only once per process unless warn_always is on: a later run still records it.
    again = observe_all()
    assert again["pin_memory.is_pinned_device_cuda"]["warnings"] == [deprecated]


def test_accelerator_api(observed: dict) -> None:
    available = value(observed, "accelerator.available")
    current = value(observed, "accelerator.current_accelerator")
    count = value(observed, "accelerator.device_count")
    assert value(observed, "accelerator._C._get_accelerator") == str(torch._C._get_accelerator())
    if not available:
        assert count == 0
    else:
        assert count >= 1 and current is not None


def test_a_missing_api_is_recorded_as_absent() -> None:
    bare = types.SimpleNamespace(_C=types.SimpleNamespace())
    assert PROBES["default_device.get_default_device"].fn(bare) == "absent: torch has no get_default_device"
    assert PROBES["accelerator.device_count"].fn(bare) == "absent: torch has no accelerator.device_count"
    assert PROBES["accelerator._C._get_accelerator"].fn(bare) == "absent: torch has no _C._get_accelerator"


# ----------------------------------------------------------------- the value is what the doc says


def recorded_as(fn) -> dict:
    """What observe would record for fn(), computed here independently of observe's runner."""
    try:
        return {"value": json.loads(json.dumps(fn()))}
    except Exception as exc:  # noqa: BLE001 - the raise is the outcome
        return {"error": {"type": type(exc).__name__, "message": clean_message(str(exc))}}


def zeros_dtype_under_float16_default() -> str:
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float16)
    try:
        return str(torch.zeros(2).dtype)
    finally:
        torch.set_default_dtype(before)


def zeros_like_cpu_tensor_in_meta_context() -> str:
    cpu_tensor = torch.zeros(2)
    with torch.device("meta"):
        return str(torch.zeros_like(cpu_tensor).device)


def inference_mode_one_state() -> dict:
    def run():
        try:
            with torch.inference_mode(1):
                return {"grad_enabled": torch.is_grad_enabled(), "inference_mode_enabled": torch.is_inference_mode_enabled()}
        except Exception as exc:  # noqa: BLE001 - carried out of the thread
            return exc

    outcome = in_fresh_thread(run)
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


@pytest.mark.parametrize(
    "name, call_in_doc, do_what_the_doc_says",
    [
        ("default_dtype.float16.zeros", "str(torch.zeros(2).dtype)", zeros_dtype_under_float16_default),
        (
            "default_device.meta_context.zeros_like_cpu",
            "with torch.device('meta'): str(torch.zeros_like(cpu_tensor).device)",
            zeros_like_cpu_tensor_in_meta_context,
        ),
        ("mode.non_bool_argument.int_1", "with torch.inference_mode(1):", inference_mode_one_state),
    ],
)
def test_recorded_value_is_what_the_doc_says(observed: dict, name, call_in_doc, do_what_the_doc_says) -> None:
    assert call_in_doc in PROBES[name].doc
    entry = {key: item for key, item in observed[name].items() if key not in ("doc", "warnings")}
    assert entry == recorded_as(do_what_the_doc_says)
    assert torch.get_default_dtype() == torch.float32 and mode_state() == (False, True)
