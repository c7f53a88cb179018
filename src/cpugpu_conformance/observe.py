"""Probes of the torch behaviour the CpuGpuBuffer contract rests on, in the running torch.

Each probe does one small thing with torch and returns plain JSON data; ``observe_all()``
runs them all and records, per probe, ``{"doc": ..., "value": ...}`` or, when the probed
operation raised, ``{"doc": ..., "error": {"type": ..., "message": ...}}``. The report
diffs these between torch releases, so the output must be identical run after run for
the same torch: messages are cut to their first line and stripped of addresses and paths.
A probe that made torch warn also has ``"warnings": [{"category", "message"}, ...]``
(distinct warnings, in the order first emitted; messages cleaned the same way). An API the
running torch lacks is recorded as the value ``"absent: torch has no <name>"``.

Probes leave no state behind: grad mode, inference mode, default dtype and default device
are checked after each one (and repaired, with the probe flagged, where one leaked).

Only the standard library, torch and numpy are used, and torch is imported lazily, so this
module loads in any cell environment (torch 2.0 and newer, numpy 1 or 2).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import warnings
from collections.abc import Iterator
from typing import Any, Callable, NamedTuple

MESSAGE_LIMIT = 300


class Probe(NamedTuple):
    name: str
    doc: str
    fn: Callable[[Any], Any]  # called with the torch module


# Ordered: observe_all() runs (and reports) probes in registration order.
PROBES: dict[str, Probe] = {}


def probe(name: str, doc: str) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Register ``fn(torch) -> json-able value`` under ``name``."""

    def register(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        if name in PROBES:
            raise ValueError(f"duplicate probe name {name!r}")
        PROBES[name] = Probe(name, doc, fn)
        return fn

    return register


# --------------------------------------------------------------------------- messages

_ADDRESS = re.compile(r"0[xX][0-9a-fA-F]+")
# An absolute path not part of a URL: preceded by start, space, quote or bracket.
_POSIX_PATH = re.compile(r"(?<![\w:/.])/(?:[\w.+\-]+/)+[\w.+\-]*")
_WINDOWS_PATH = re.compile(r"\b[A-Za-z]:\\(?:[\w.+\-]+\\)+[\w.+\-]*")


def clean_message(text: str) -> str:
    """First line, without run-specific addresses and paths, at most MESSAGE_LIMIT chars."""
    lines = str(text).strip().splitlines()
    first = lines[0].strip() if lines else ""
    first = _ADDRESS.sub("0x?", first)
    first = _WINDOWS_PATH.sub("<path>", first)
    first = _POSIX_PATH.sub("<path>", first)
    if len(first) > MESSAGE_LIMIT:
        first = first[: MESSAGE_LIMIT - 3] + "..."
    return first


def describe_exception(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": clean_message(str(exc))}


def _outcome(fn: Callable[[], Any]) -> str:
    """'ok', or 'raises <ExceptionType>': a compact cell for per-dtype tables."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - any failure is the observation
        return f"raises {type(exc).__name__}"
    return "ok"


_TRIGGERED_AT = re.compile(r"\s*\(Triggered internally at [^)]*\)\s*$")


def clean_warning(text: str) -> str:
    """clean_message, less torch's "(Triggered internally at <source file>:<line>.)" trailer,
    whose build path and line number change between releases with no change of behaviour."""
    lines = str(text).strip().splitlines()
    return clean_message(_TRIGGERED_AT.sub("", lines[0]) if lines else "")


def describe_warnings(caught: list[warnings.WarningMessage]) -> list[dict[str, str]]:
    """Distinct (category, cleaned first line) of the caught warnings, in first-emitted order."""
    seen = dict.fromkeys((w.category.__name__, clean_warning(str(w.message))) for w in caught)
    return [{"category": category, "message": message} for category, message in seen]


@contextlib.contextmanager
def _recording_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Catch every warning raised in the block, repeats included (whatever the filters say)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def absent(name: str) -> str:
    """The value of a probe whose API the running torch does not have."""
    return f"absent: torch has no {name}"


def _api(torch: Any, dotted: str) -> Any:
    """torch.<dotted> (e.g. "accelerator.device_count"), or None where some part is missing."""
    found = torch
    for part in dotted.split("."):
        found = getattr(found, part, None)
        if found is None:
            return None
    return found


def _call_api(torch: Any, dotted: str, convert: Callable[[Any], Any]) -> Any:
    """convert(torch.<dotted>()), or absent("<dotted>") where the running torch lacks it."""
    function = _api(torch, dotted)
    if function is None:
        return absent(dotted)
    return convert(function())


def _device_text(device: Any) -> str | None:
    return None if device is None else str(device)


# --------------------------------------------------------------------------- contexts
# Each runner calls fn() with the tensor-creation context named by its key. Every
# context object is made fresh: reusing one inference_mode() object for nested blocks
# leaves inference mode switched on for the rest of the thread.


def _plain(torch: Any, fn: Callable[[], Any]) -> Any:
    return fn()


def _inference_mode(torch: Any, fn: Callable[[], Any]) -> Any:
    with torch.inference_mode():
        return fn()


def _inference_mode_false_in_inference_mode(torch: Any, fn: Callable[[], Any]) -> Any:
    with torch.inference_mode(), torch.inference_mode(False):
        return fn()


def _no_grad(torch: Any, fn: Callable[[], Any]) -> Any:
    with torch.no_grad():
        return fn()


def _no_grad_in_inference_mode(torch: Any, fn: Callable[[], Any]) -> Any:
    with torch.inference_mode(), torch.no_grad():
        return fn()


def _inference_mode_false_in_no_grad(torch: Any, fn: Callable[[], Any]) -> Any:
    with torch.no_grad(), torch.inference_mode(False):
        return fn()


def _decorated_inference_mode(torch: Any, fn: Callable[[], Any]) -> Any:
    @torch.inference_mode()
    def decorated() -> Any:
        return fn()

    return decorated()


def _thread_from_inference_mode(torch: Any, fn: Callable[[], Any]) -> Any:
    return _in_thread(fn, enter=torch.inference_mode)


def _in_thread(fn: Callable[[], Any], enter: Callable[[], Any] = contextlib.nullcontext) -> Any:
    """Run fn in a fresh thread (started inside ``enter()``); re-raise what it raised.

    Mode state is thread-local, so a thread also confines a probe that may leak it.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            box["error"] = exc

    with enter():
        worker = threading.Thread(target=target, name="cpugpu-observe", daemon=True)
        worker.start()
        worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


CONTEXTS: dict[str, Callable[[Any, Callable[[], Any]], Any]] = {
    "plain": _plain,
    "inference_mode": _inference_mode,
    "inference_mode_false_in_inference_mode": _inference_mode_false_in_inference_mode,
    "no_grad": _no_grad,
    "no_grad_in_inference_mode": _no_grad_in_inference_mode,
    "inference_mode_false_in_no_grad": _inference_mode_false_in_no_grad,
    "decorated_inference_mode": _decorated_inference_mode,
    "thread_from_inference_mode": _thread_from_inference_mode,
}


def _mode_state(torch: Any) -> dict[str, bool]:
    return {
        "grad_enabled": bool(torch.is_grad_enabled()),
        "inference_mode_enabled": bool(torch.is_inference_mode_enabled()),
    }


def _make_in(torch: Any, context: str) -> Any:
    return CONTEXTS[context](torch, lambda: torch.zeros(2))


def _register_context_probes(context: str) -> None:
    where = context.replace("_", " ")

    @probe(f"context.{context}.mode_state", f"grad / inference mode enabled inside: {where}")
    def mode_state(torch: Any) -> Any:
        return CONTEXTS[context](torch, lambda: _mode_state(torch))

    @probe(f"context.{context}.is_inference", f"is_inference() of torch.zeros(2) made in: {where}")
    def is_inference(torch: Any) -> Any:
        return bool(_make_in(torch, context).is_inference())

    @probe(
        f"context.{context}.add_outside",
        f"add_(1) outside inference mode on a tensor made in: {where}; value is the result",
    )
    def add_outside(torch: Any) -> Any:
        return _make_in(torch, context).add_(1).tolist()

    @probe(
        f"context.{context}.add_inside",
        f"add_(1) inside a fresh inference_mode() on a tensor made in: {where}; value is the result",
    )
    def add_inside(torch: Any) -> Any:
        tensor = _make_in(torch, context)
        with torch.inference_mode():
            tensor.add_(1)
        return tensor.tolist()


for _context in CONTEXTS:
    _register_context_probes(_context)


# --------------------------------------------------------------------------- mode nesting


@probe(
    "mode.inference_mode_false_in_no_grad.grad_enabled",
    "is_grad_enabled() under no_grad() > inference_mode(False) (the contract says it re-enables grad)",
)
def _grad_in_nested_false(torch: Any) -> Any:
    with torch.no_grad(), torch.inference_mode(False):
        return bool(torch.is_grad_enabled())


@probe(
    "mode.nested_states",
    "is_inference_mode_enabled() at each level of inference_mode > no_grad > "
    "inference_mode(False) > inference_mode, and after leaving them all",
)
def _nested_states(torch: Any) -> Any:
    seen = {}
    with torch.inference_mode():
        seen["inference_mode"] = bool(torch.is_inference_mode_enabled())
        with torch.no_grad():
            seen["no_grad"] = bool(torch.is_inference_mode_enabled())
            with torch.inference_mode(False):
                seen["inference_mode_false"] = bool(torch.is_inference_mode_enabled())
                with torch.inference_mode():
                    seen["inference_mode_again"] = bool(torch.is_inference_mode_enabled())
    seen["after"] = bool(torch.is_inference_mode_enabled())
    return seen


@probe(
    "mode.reused_inference_mode_object",
    "one inference_mode() object entered twice (nested), in a throwaway thread: "
    "mode state after both blocks exit (the contract warns it stays on)",
)
def _reused_object(torch: Any) -> Any:
    def nest_twice() -> Any:
        mode = torch.inference_mode()
        with mode:  # noqa: SIM117 - nesting the same object twice is the point
            with mode:
                pass
        return _mode_state(torch)

    # The leak is thread-local; a thread of its own keeps it out of the caller's thread.
    return _in_thread(nest_twice)


def _error_text(exc: BaseException) -> str:
    error = describe_exception(exc)
    return f"{error['type']}: {error['message']}"


# Not "mode.reused_inference_mode_object.states": a name under another probe's name would
# read in the report as an entry of that probe's (dict) value.
@probe(
    "mode.reused_inference_mode_object_states",
    "mode = torch.inference_mode(); with mode: (with mode: ...), in a throwaway thread: "
    "is_inference_mode_enabled() in the outer block, the inner block and between them, what leaving "
    "the outer block raised ('Type: message', null if nothing), and the mode state after both",
)
def _reused_object_states(torch: Any) -> Any:
    def nest_twice() -> Any:
        mode = torch.inference_mode()
        seen: dict[str, Any] = {}
        try:
            with mode:  # noqa: SIM117 - nesting the same object twice is the point
                seen["outer"] = bool(torch.is_inference_mode_enabled())
                with mode:
                    seen["inner"] = bool(torch.is_inference_mode_enabled())
                seen["between"] = bool(torch.is_inference_mode_enabled())
            seen["exit_raised"] = None
        except Exception as exc:  # noqa: BLE001 - the raise is the observation
            seen["exit_raised"] = _error_text(exc)
        seen["after"] = _mode_state(torch)
        return seen

    return _in_thread(nest_twice)


@probe(
    "mode.bare_decorator.is_inference",
    "@torch.inference_mode (no parentheses) on def make(): return torch.zeros(2); "
    "make().is_inference(), in a throwaway thread",
)
def _bare_decorator(torch: Any) -> Any:
    def run() -> Any:
        @torch.inference_mode
        def make() -> Any:
            return torch.zeros(2)

        return bool(make().is_inference())

    return _in_thread(run)


# Arguments that are not a bool: torch 2.0 hands them to the C++ guard (which takes an int
# or None and refuses a str); later releases take any non-bool as the function to decorate.
NON_BOOL_MODES: dict[str, Any] = {"int_1": 1, "int_0": 0, "str_yes": "yes", "none": None}


def _register_non_bool_mode_probe(label: str, argument: Any) -> None:
    @probe(
        f"mode.non_bool_argument.{label}",
        f"with torch.inference_mode({argument!r}): grad / inference mode enabled inside, in a throwaway thread",
    )
    def non_bool(torch: Any) -> Any:
        def run() -> Any:
            with torch.inference_mode(argument):
                return _mode_state(torch)

        return _in_thread(run)


for _label, _argument in NON_BOOL_MODES.items():
    _register_non_bool_mode_probe(_label, _argument)


# --------------------------------------------------------------------------- inference tensors


@probe(
    "inference_tensor.add_outside_data",
    "add_(1) outside the mode on an inference tensor: data before, data after, what was raised "
    "(the contract says the refusal comes after the write)",
)
def _refusal_after_write(torch: Any) -> Any:
    tensor = _make_in(torch, "inference_mode")
    before = tensor.tolist()
    try:
        tensor.add_(1)
        raised = None
    except Exception as exc:  # noqa: BLE001 - the raise is the observation
        raised = type(exc).__name__
    return {"before": before, "after": tensor.tolist(), "raised": raised}


@probe(
    "inference_tensor.resize_outside",
    "tensor.resize_(4) outside the mode, tensor = torch.zeros(2) made in inference_mode(); value is list(tensor.shape)",
)
def _resize_outside(torch: Any) -> Any:
    tensor = _make_in(torch, "inference_mode")
    tensor.resize_(4)
    return list(tensor.shape)


@probe("inference_tensor.version", "_version of a tensor made in inference_mode()")
def _inference_version(torch: Any) -> Any:
    return int(_make_in(torch, "inference_mode")._version)


@probe(
    "inference_tensor.clone_outside.is_inference", "is_inference() of .clone() of an inference tensor, outside the mode"
)
def _clone_outside(torch: Any) -> Any:
    return bool(_make_in(torch, "inference_mode").clone().is_inference())


@probe(
    "inference_tensor.zeros_like_outside.is_inference",
    "is_inference() of torch.zeros_like(inference tensor), outside the mode",
)
def _zeros_like_outside(torch: Any) -> Any:
    return bool(torch.zeros_like(_make_in(torch, "inference_mode")).is_inference())


@probe(
    "view_made_in_inference_mode.add_outside",
    "a slice of a normal tensor taken inside inference_mode(), updated with add_(1) outside it "
    "(what copy_to_gpu returns when called in the mode); value is the base tensor",
)
def _view_from_inference(torch: Any) -> Any:
    base = torch.zeros(3)
    with torch.inference_mode():
        view = base[:1]
    view.add_(1)
    return base.tolist()


@probe(
    "view_made_in_inference_mode.is_inference",
    "is_inference() of a slice of a normal tensor taken inside inference_mode()",
)
def _view_from_inference_is_inference(torch: Any) -> Any:
    base = torch.zeros(3)
    with torch.inference_mode():
        return bool(base[:1].is_inference())


# --------------------------------------------------------------------------- autograd


def _grad_through_inference_tensor(torch: Any, forward: Callable[[Any, Any], Any]) -> Any:
    """forward(x, weight).sum().backward() outside the mode, x = torch.ones(2, requires_grad=True),
    weight = torch.ones(2) made in inference_mode(); x.grad as a list. What the probes below vary is
    forward: whether it saves the inference tensor for backward."""
    with torch.inference_mode():
        weight = torch.ones(2)
    x = torch.ones(2, requires_grad=True)
    forward(x, weight).sum().backward()
    return x.grad.tolist()


@probe(
    "autograd.inference_tensor_saved.mul",
    "(x * weight).sum().backward() outside the mode, x = torch.ones(2, requires_grad=True), "
    "weight = torch.ones(2) made in inference_mode() (mul saves weight for backward); value is x.grad",
)
def _saved_by_mul(torch: Any) -> Any:
    return _grad_through_inference_tensor(torch, lambda x, weight: x * weight)


@probe(
    "autograd.inference_tensor_saved.function",
    "Scale.apply(x, weight).sum().backward() outside the mode, Scale a torch.autograd.Function whose "
    "forward calls ctx.save_for_backward(weight), weight made in inference_mode(); value is x.grad",
)
def _saved_by_function(torch: Any) -> Any:
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, weight: Any) -> Any:
            ctx.save_for_backward(weight)
            return x * weight

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            (weight,) = ctx.saved_tensors
            return grad * weight, None

    return _grad_through_inference_tensor(torch, Scale.apply)


@probe(
    "autograd.inference_tensor_unsaved.add",
    "(x + weight).sum().backward() outside the mode, weight made in inference_mode() "
    "(add saves neither input); value is x.grad",
)
def _unsaved_by_add(torch: Any) -> Any:
    return _grad_through_inference_tensor(torch, lambda x, weight: x + weight)


# --------------------------------------------------------------------------- version counter


@probe("version.normal_after_add_", "_version of a normal tensor before and after add_(1)")
def _normal_version(torch: Any) -> Any:
    tensor = torch.zeros(2)
    before = int(tensor._version)
    tensor.add_(1)
    return [before, int(tensor._version)]


@probe("version.normal_after_numpy_write", "_version of a normal tensor before and after a write through .numpy()")
def _numpy_write_version(torch: Any) -> Any:
    tensor = torch.zeros(2)
    before = int(tensor._version)
    tensor.numpy()[0] = 1
    return [before, int(tensor._version)]


# --------------------------------------------------------------------------- numpy views


def _shares_memory(tensor: Any, array: Any) -> bool:
    return int(array.__array_interface__["data"][0]) == int(tensor.data_ptr())


@probe("numpy.normal.shares_memory", ".numpy() of a normal tensor: same address, writes seen both ways")
def _numpy_normal(torch: Any) -> Any:
    tensor = torch.zeros(3)
    array = tensor.numpy()
    array[0] = 5
    tensor[1] = 7
    return {
        "same_address": _shares_memory(tensor, array),
        "array_write_seen_by_tensor": tensor.tolist()[0] == 5.0,
        "tensor_write_seen_by_array": float(array[1]) == 7.0,
        "writeable": bool(array.flags.writeable),
    }


@probe("numpy.inference_tensor.dtype", "numpy dtype of .numpy() of a float32 tensor made in inference_mode()")
def _numpy_inference_works(torch: Any) -> Any:
    return _make_in(torch, "inference_mode").numpy().dtype.name


@probe(
    "numpy.inference_tensor.shares_memory",
    ".numpy() of an inference tensor: same address, and an update inside a fresh inference_mode() is seen",
)
def _numpy_inference_shares(torch: Any) -> Any:
    tensor = _make_in(torch, "inference_mode")
    array = tensor.numpy()
    with torch.inference_mode():
        tensor.fill_(3)
    return {"same_address": _shares_memory(tensor, array), "tensor_write_seen_by_array": float(array[0]) == 3.0}


@probe(
    "numpy.inference_tensor.write_outside",
    "a write through .numpy() of an inference tensor, outside the mode; value is the tensor after "
    "(the contract says it bypasses the inference check)",
)
def _numpy_inference_write(torch: Any) -> Any:
    tensor = _make_in(torch, "inference_mode")
    tensor.numpy()[0] = 7
    return tensor.tolist()


@probe("numpy.bfloat16", ".numpy() of a bfloat16 tensor")
def _numpy_bfloat16(torch: Any) -> Any:
    return torch.zeros(2, dtype=torch.bfloat16).numpy().dtype.name


@probe("numpy.zero_size.shape", "shape of .numpy() of torch.zeros(0, 3)")
def _numpy_zero_size(torch: Any) -> Any:
    return list(torch.zeros(0, 3).numpy().shape)


@probe("numpy.zero_dim.shape", "shape of .numpy() of torch.zeros(()) (a buffer with no size arguments)")
def _numpy_zero_dim(torch: Any) -> Any:
    return list(torch.zeros(()).numpy().shape)


def installed_dtypes(torch: Any) -> dict[str, Any]:
    """Every torch.dtype the running torch exports, by canonical name (aliases folded), sorted."""
    found = {
        str(value).replace("torch.", "", 1): value for value in vars(torch).values() if isinstance(value, torch.dtype)
    }
    return dict(sorted(found.items()))


def _dtype_row(torch: Any, dtype: Any) -> dict[str, Any]:
    """The row of one dtype; its warnings in the row, so that the report still diffs the
    table entry by entry (it does so only for a probe with nothing but a value)."""
    with _recording_warnings() as caught:
        row = _dtype_outcomes(torch, dtype)
    if caught:
        row["warnings"] = describe_warnings(caught)
    return row


def _dtype_outcomes(torch: Any, dtype: Any) -> dict[str, Any]:
    made: dict[str, Any] = {}
    zeros = _outcome(lambda: made.setdefault("tensor", torch.zeros(2, dtype=dtype)))
    if "tensor" not in made:
        return {"zeros": zeros, "copy_": None, "numpy": None}
    tensor = made["tensor"]
    copied = _outcome(lambda: torch.zeros(2, dtype=dtype).copy_(tensor))
    try:
        numpy_dtype = tensor.numpy().dtype.name
    except Exception as exc:  # noqa: BLE001 - the raise is the observation
        numpy_dtype = f"raises {type(exc).__name__}"
    return {"zeros": zeros, "copy_": copied, "numpy": numpy_dtype}


@probe(
    "dtypes",
    "per dtype of the installed torch: torch.zeros(2, dtype) ok?, copy_ between two of them ok?, "
    "and the numpy dtype of .numpy() (or 'raises <type>'); null where zeros failed; "
    "'warnings' in the row of a dtype that made torch warn",
)
def _dtypes(torch: Any) -> Any:
    return {name: _dtype_row(torch, dtype) for name, dtype in installed_dtypes(torch).items()}


# --------------------------------------------------------------------------- constructors


@probe("zeros.no_size", "list(torch.zeros().shape)")
def _zeros_no_size(torch: Any) -> Any:
    return list(torch.zeros().shape)


@probe("zeros.negative_size", "list(torch.zeros(-1).shape)")
def _zeros_negative(torch: Any) -> Any:
    return list(torch.zeros(-1).shape)


@probe("zeros.float_size", "list(torch.zeros(2.0).shape)")
def _zeros_float(torch: Any) -> Any:
    return list(torch.zeros(2.0).shape)


@probe("zeros.bool_size", "list(torch.zeros(True).shape)")
def _zeros_bool(torch: Any) -> Any:
    return list(torch.zeros(True).shape)


@probe(
    "zeros.overflowing_size",
    "list(torch.zeros(2**62).shape) (2**64 bytes of float32: the byte count overflows int64, "
    "so it raises before allocating)",
)
def _zeros_overflowing(torch: Any) -> Any:
    # Every release from 2.0.1 on checks the byte count before allocating; a size that
    # fits int64 bytes but not memory (2**40, say) would try to allocate it: never do that.
    return list(torch.zeros(2**62).shape)


@probe("zeros.size_beyond_int64", "list(torch.zeros(2**63).shape) (the size itself does not fit int64)")
def _zeros_beyond_int64(torch: Any) -> Any:
    return list(torch.zeros(2**63).shape)


@probe("zeros_like.meta.device", "str(torch.zeros_like(torch.zeros(2), device='meta').device)")
def _zeros_like_meta(torch: Any) -> Any:
    return str(torch.zeros_like(torch.zeros(2), device="meta").device)


@probe(
    "zeros_like.cuda.device",
    "str(torch.zeros_like(torch.zeros(2), device='cuda').device) (raises where CUDA is not usable)",
)
def _zeros_like_cuda(torch: Any) -> Any:
    return str(torch.zeros_like(torch.zeros(2), device="cuda").device)


# --------------------------------------------------------------------------- ambient defaults


@probe("default_device.get_default_device", "str(torch.get_default_device())")
def _get_default_device(torch: Any) -> Any:
    return _call_api(torch, "get_default_device", str)


@probe("default_device.meta_context.zeros", "with torch.device('meta'): str(torch.zeros(2).device)")
def _meta_context_zeros(torch: Any) -> Any:
    with torch.device("meta"):
        return str(torch.zeros(2).device)


@probe(
    "default_device.meta_context.zeros_device_cpu",
    "with torch.device('meta'): str(torch.zeros(2, device='cpu').device)",
)
def _meta_context_zeros_cpu(torch: Any) -> Any:
    with torch.device("meta"):
        return str(torch.zeros(2, device="cpu").device)


@probe(
    "default_device.meta_context.zeros_like_cpu",
    "with torch.device('meta'): str(torch.zeros_like(cpu_tensor).device), cpu_tensor = torch.zeros(2) made before",
)
def _meta_context_zeros_like(torch: Any) -> Any:
    cpu_tensor = torch.zeros(2)
    with torch.device("meta"):
        return str(torch.zeros_like(cpu_tensor).device)


@probe(
    "default_device.meta_context.get_default_device",
    "with torch.device('meta'): str(torch.get_default_device())",
)
def _meta_context_get_default_device(torch: Any) -> Any:
    with torch.device("meta"):
        return _call_api(torch, "get_default_device", str)


@contextlib.contextmanager
def _default_dtype(torch: Any, dtype: Any) -> Iterator[None]:
    """torch.set_default_dtype(dtype) for the block; the previous default is put back after."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


@probe(
    "default_dtype.float16.zeros",
    "torch.set_default_dtype(torch.float16); str(torch.zeros(2).dtype) (the default is put back after)",
)
def _float16_default_zeros(torch: Any) -> Any:
    with _default_dtype(torch, torch.float16):
        return str(torch.zeros(2).dtype)


@probe(
    "default_dtype.float16.zeros_dtype_float32",
    "torch.set_default_dtype(torch.float16); str(torch.zeros(2, dtype=torch.float32).dtype)",
)
def _float16_default_zeros_float32(torch: Any) -> Any:
    with _default_dtype(torch, torch.float16):
        return str(torch.zeros(2, dtype=torch.float32).dtype)


@probe(
    "default_dtype.float16.zeros_like_float32",
    "torch.set_default_dtype(torch.float16); str(torch.zeros_like(float32_tensor).dtype), "
    "float32_tensor = torch.zeros(2, dtype=torch.float32) made before",
)
def _float16_default_zeros_like(torch: Any) -> Any:
    float32_tensor = torch.zeros(2, dtype=torch.float32)
    with _default_dtype(torch, torch.float16):
        return str(torch.zeros_like(float32_tensor).dtype)


# --------------------------------------------------------------------------- pinned memory


@probe("accelerator.cuda_available", "torch.cuda.is_available() (pin_memory probes depend on it)")
def _cuda_available(torch: Any) -> Any:
    return bool(torch.cuda.is_available())


@probe("accelerator.available", "torch.accelerator.is_available() (null before torch had torch.accelerator)")
def _accelerator_available(torch: Any) -> Any:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None or not hasattr(accelerator, "is_available"):
        return None
    return bool(accelerator.is_available())


@probe("pin_memory.nonempty.is_pinned", "torch.zeros(4, pin_memory=True).is_pinned()")
def _pin_nonempty(torch: Any) -> Any:
    return bool(torch.zeros(4, pin_memory=True).is_pinned())


@probe("pin_memory.zero_size.is_pinned", "torch.zeros(0, pin_memory=True).is_pinned()")
def _pin_zero_size(torch: Any) -> Any:
    return bool(torch.zeros(0, pin_memory=True).is_pinned())


@probe("pin_memory.unpinned.is_pinned", "torch.zeros(4).is_pinned() (pin_memory=False)")
def _pin_false(torch: Any) -> Any:
    return bool(torch.zeros(4).is_pinned())


@probe("pin_memory.method.is_pinned", "torch.zeros(4).pin_memory().is_pinned()")
def _pin_method(torch: Any) -> Any:
    return bool(torch.zeros(4).pin_memory().is_pinned())


@probe("pin_memory.method_zero_size.is_pinned", "torch.zeros(0).pin_memory().is_pinned()")
def _pin_method_zero_size(torch: Any) -> Any:
    return bool(torch.zeros(0).pin_memory().is_pinned())


@probe("pin_memory.is_pinned_device_cuda", "torch.zeros(4).is_pinned(device='cuda') (the argument is deprecated)")
def _is_pinned_cuda(torch: Any) -> Any:
    return bool(torch.zeros(4).is_pinned(device="cuda"))


@probe("pin_memory.is_pinned_device_cpu", "torch.zeros(4).is_pinned(device='cpu') (the argument is deprecated)")
def _is_pinned_cpu(torch: Any) -> Any:
    return bool(torch.zeros(4).is_pinned(device="cpu"))


# --------------------------------------------------------------------------- accelerator API


@probe(
    "accelerator.current_accelerator",
    "str(torch.accelerator.current_accelerator()) (null when it returns None)",
)
def _current_accelerator(torch: Any) -> Any:
    return _call_api(torch, "accelerator.current_accelerator", _device_text)


@probe("accelerator.device_count", "torch.accelerator.device_count()")
def _accelerator_device_count(torch: Any) -> Any:
    return _call_api(torch, "accelerator.device_count", int)


@probe("accelerator._C._get_accelerator", "str(torch._C._get_accelerator()) (null when it returns None)")
def _c_get_accelerator(torch: Any) -> Any:
    return _call_api(torch, "_C._get_accelerator", _device_text)


# --------------------------------------------------------------------------- copies and slices


@probe("zeros_like.cpu.shares_memory", "torch.zeros_like(cpu_tensor, device='cpu'): same address or a shared write?")
def _zeros_like_shares(torch: Any) -> Any:
    source = torch.zeros(4)
    twin = torch.zeros_like(source, device="cpu")
    twin.fill_(1)
    return twin.data_ptr() == source.data_ptr() or bool(source.any())


@probe(
    "copy_.non_blocking_cpu.returns_self", "cpu.copy_(src, non_blocking=True) on the CPU returns the destination object"
)
def _copy_returns_self(torch: Any) -> Any:
    destination = torch.zeros(3)
    return destination.copy_(torch.ones(3), non_blocking=True) is destination


@probe(
    "copy_.into_slice",
    "dst[:2].copy_(ones[:2], non_blocking=True) on the CPU: dst after, and whether the returned "
    "tensor shares dst's storage",
)
def _copy_into_slice(torch: Any) -> Any:
    destination = torch.zeros(4)
    written = destination[:2].copy_(torch.ones(4)[:2], non_blocking=True)
    return {
        "destination": destination.tolist(),
        "returned_shares_storage": written.data_ptr() == destination.data_ptr(),
    }


@probe("slice.first_dim_lengths", "len(torch.zeros(3)[:n]) for n in -5, -1, 0, 2, 3, 5 (Python slice semantics)")
def _slice_lengths(torch: Any) -> Any:
    tensor = torch.zeros(3)
    return {str(n): int(tensor[:n].shape[0]) for n in (-5, -1, 0, 2, 3, 5)}


@probe("slice.zero_dim", "torch.zeros(())[:1] (slicing a 0-dim tensor, as copy_to_gpu(n) would)")
def _slice_zero_dim(torch: Any) -> Any:
    return list(torch.zeros(())[:1].shape)


# --------------------------------------------------------------------------- running


def _jsonable(value: Any) -> Any:
    """The value as strict JSON would give it back (tuples become lists); raises if it is not JSON."""
    return json.loads(json.dumps(value, allow_nan=False))


def _default_device(torch: Any) -> str:
    """Where a factory call without device= puts its tensor (on some releases get_default_device()
    does not see a ``with torch.device(...)`` block, so ask a factory)."""
    try:
        return str(torch.empty(0).device)
    except Exception as exc:  # noqa: BLE001 - a broken default device is still a state
        return f"raises {type(exc).__name__}"


def _global_state(torch: Any) -> dict[str, Any]:
    """What a probe must leave as it found it."""
    return {
        **_mode_state(torch),
        "default_dtype": str(torch.get_default_dtype()),
        "default_device": _default_device(torch),
    }


# Guards that switched a leaked inference mode back off. Never released: releasing one
# would put back the leaked state it replaced.
_REPAIR_GUARDS: list[Any] = []


def _repair_state(torch: Any, expected: dict[str, Any]) -> None:
    """Put back what a probe leaked, where torch allows it (a leaked default device it does not)."""
    if bool(torch.is_inference_mode_enabled()) != expected["inference_mode_enabled"]:
        # Making the RAII guard applies it, on every release from 2.0.1 on.
        _REPAIR_GUARDS.append(torch._C._InferenceMode(expected["inference_mode_enabled"]))
    torch.set_grad_enabled(expected["grad_enabled"])
    if str(torch.get_default_dtype()) != expected["default_dtype"]:
        torch.set_default_dtype(getattr(torch, expected["default_dtype"].replace("torch.", "", 1)))


def _run_one(torch: Any, entry: Probe, expected_state: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {"doc": entry.doc}
    with _recording_warnings() as caught:
        try:
            result["value"] = _jsonable(entry.fn(torch))
        except Exception as exc:  # noqa: BLE001 - a raising probe is an observation, never a crash
            result.pop("value", None)
            result["error"] = describe_exception(exc)
    if caught:
        result["warnings"] = describe_warnings(caught)
    left = _global_state(torch)
    if left != expected_state:
        # A probe that leaked state would skew every later probe: say so loudly.
        _repair_state(torch, expected_state)
        result.pop("value", None)
        result["error"] = {"type": "LeakedModeState", "message": f"probe left {left}"}
    return result


@contextlib.contextmanager
def _warn_always(torch: Any) -> Iterator[None]:
    """torch.set_warn_always(True) for the block: torch's warn-once warnings are then raised
    every time, so a probe records the same warnings in every run of a process."""
    if not hasattr(torch, "set_warn_always") or not hasattr(torch, "is_warn_always_enabled"):
        yield
        return
    before = bool(torch.is_warn_always_enabled())
    torch.set_warn_always(True)
    try:
        yield
    finally:
        torch.set_warn_always(before)


@contextlib.contextmanager
def _neutral_state(torch: Any) -> Iterator[None]:
    """Grad on, inference mode off, float32 and the CPU by default: probes see the same start
    whatever the caller's state, and the caller gets its state back after."""
    with contextlib.ExitStack() as stack:
        if torch.is_inference_mode_enabled():
            stack.enter_context(torch.inference_mode(False))
        if not torch.is_grad_enabled():
            stack.enter_context(torch.enable_grad())
        if torch.get_default_dtype() != torch.float32:
            stack.enter_context(_default_dtype(torch, torch.float32))
        if _default_device(torch) != "cpu":
            stack.enter_context(torch.device("cpu"))
        yield


def observe_all() -> dict[str, dict[str, Any]]:
    """Run every probe in PROBES, in order. Never raises; leaves grad mode, inference mode,
    default dtype and default device as found."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - no torch is itself the observation
        error = describe_exception(exc)
        return {name: {"doc": entry.doc, "error": dict(error)} for name, entry in PROBES.items()}

    observations: dict[str, dict[str, Any]] = {}
    # Warnings outside the probes are silenced (-W error would turn them into raises);
    # each probe records its own (_run_one).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with _neutral_state(torch), _warn_always(torch):
            start = _global_state(torch)
            for name, entry in list(PROBES.items()):
                observations[name] = _run_one(torch, entry, start)
    return observations


if __name__ == "__main__":
    print(json.dumps(observe_all(), indent=2))
