"""Tests of cpugpu_conformance.observe: the probes of torch behaviour the contract rests on."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import types
import warnings

import pytest
import torch

from cpugpu_conformance import observe
from cpugpu_conformance.observe import PROBES, Probe, clean_message, clean_warning, observe_all


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


def global_state() -> dict:
    return {
        "inference_mode": torch.is_inference_mode_enabled(),
        "grad": torch.is_grad_enabled(),
        "default_dtype": torch.get_default_dtype(),
        "default_device": torch.empty(0).device,
        "warn_always": torch.is_warn_always_enabled(),
    }


def in_fresh_thread(fn):
    box = {}
    worker = threading.Thread(target=lambda: box.setdefault("value", fn()))
    worker.start()
    worker.join()
    return box["value"]


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
