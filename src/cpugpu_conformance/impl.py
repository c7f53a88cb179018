"""Load the class under test from an ``--impl`` spec: ``module.path:Attr`` or ``path/to/file.py:Attr``."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_SPEC = "cpugpu_conformance.reference:CpuGpuBuffer"


# The torch functions and methods the contract and the suite's checks rest on. Importing
# the class under test must leave them alone: a module that replaces one (a "fix" that
# patches torch.inference_mode, say) is tested against its own replacement, not torch.
TORCH_NAMES = (
    "torch.inference_mode",
    "torch.no_grad",
    "torch.enable_grad",
    "torch.set_grad_enabled",
    "torch.is_grad_enabled",
    "torch.is_inference_mode_enabled",
    # What the two modes are made of: their methods, and the C++ guard and switch those call.
    "torch.inference_mode.__init__",
    "torch.inference_mode.__enter__",
    "torch.inference_mode.__exit__",
    "torch.no_grad.__enter__",
    "torch.no_grad.__exit__",
    "torch._C._InferenceMode",
    "torch._C._set_grad_enabled",
    "torch.zeros",
    "torch.zeros_like",
    "torch.empty",
    "torch.empty_like",
    "torch.from_numpy",
    "torch.device",
    "torch.set_default_device",
    "torch.get_default_device",
    "torch.set_default_dtype",
    "torch.get_default_dtype",
    "torch.Tensor",
    "torch.Tensor.numpy",
    "torch.Tensor.copy_",
    "torch.Tensor.fill_",
    "torch.Tensor.zero_",
    "torch.Tensor.is_inference",
    "torch.Tensor.pin_memory",
    "torch.Tensor.is_pinned",
    "torch.Tensor.untyped_storage",
    "torch.Tensor.data_ptr",
    "torch.Tensor.view",
    "torch.Tensor.cpu",
    "torch.Tensor.to",
    "torch.Tensor.__getitem__",
    "torch.Tensor.__setitem__",
    "torch.cuda.is_available",
    "torch.cuda.synchronize",
    # What the checks call on CUDA: the wait after a copy (the current stream's), the stall that
    # shows a copy did not block, the caller's device and stream (promise 12), the creation
    # contexts, and the sync debug mode that turns a hidden synchronize into an error (promise 10).
    "torch.cuda.current_stream",
    "torch.cuda.default_stream",
    "torch.cuda.current_device",
    "torch.cuda.device_count",
    "torch.cuda.get_device_name",
    "torch.cuda.device",
    "torch.cuda.stream",
    "torch.cuda.Stream",
    "torch.cuda.Stream.synchronize",
    "torch.cuda.Stream.query",
    "torch.cuda.Stream.wait_stream",
    "torch.cuda.Stream.wait_event",
    "torch.cuda.Stream.record_event",
    "torch.cuda.Event",
    "torch.cuda.Event.record",
    "torch.cuda.Event.synchronize",
    "torch.cuda.Event.query",
    "torch.cuda.set_sync_debug_mode",
    "torch.cuda.get_sync_debug_mode",
    "torch.cuda._sleep",
)

_ABSENT = object()  # a name this torch release does not have (get_default_device before 2.3)


class ImplError(Exception):
    """The spec cannot be turned into a usable class; the message is one line naming the culprit."""


@dataclass(frozen=True)
class Impl:
    spec: str
    cls: Any
    # How a standalone reproducer script gets the same class, as Python source.
    import_code: str
    # TORCH_NAMES that importing the class replaced (or added, or removed).
    replaced_torch: tuple[str, ...] = ()


def torch_identities() -> dict[str, Any]:
    """The object behind each of TORCH_NAMES, as stored (no descriptor binding, so a
    method reads the same object every time)."""
    import torch

    found: dict[str, Any] = {}
    for name in TORCH_NAMES:
        obj: Any = torch
        for part in name.split(".")[1:]:
            obj = inspect.getattr_static(obj, part, _ABSENT)
            if obj is _ABSENT:
                break
        found[name] = obj
    return found


def not_torchs_own() -> list[str]:
    """Each of TORCH_NAMES that is not torch's own now, with what stands in its place: for a run
    that saw no "before" (a team's own pytest, whose conftest or test module may have patched torch
    before the plugin could look). torch's own is named as its attribute and made by torch: a
    function or class defined in a file of the torch package, a builtin of a torch module, or a
    method of torch's TensorBase. Standing in for one with code written to pass this (a function
    compiled with torch's file name) is forgery, beyond any check (docs/library.md)."""
    import torch

    home = Path(torch.__file__).resolve().parent
    out = []
    for name, obj in torch_identities().items():
        if obj is not _ABSENT and not _made_by_torch(obj, name.rsplit(".", 1)[1], home):
            out.append(f"{name} (now {_what(obj)})")
    return out


def _made_by_torch(obj: Any, attr: str, home: Path) -> bool:
    if getattr(obj, "__name__", None) != attr:
        return False
    if isinstance(obj, functools._lru_cache_wrapper):
        # torch before 2.4 caches some of its own functions (torch.cuda.device_count): the cache is
        # torch's own when the function it wraps is.
        return _made_by_torch(obj.__wrapped__, attr, home)
    owner = getattr(obj, "__objclass__", None)  # a method of a C type (Tensor.copy_)
    if owner is not None:
        # TensorBase; _TensorBase before torch 2.3
        return owner.__name__ in ("TensorBase", "_TensorBase") and str(getattr(owner, "__module__", "")).startswith("torch")
    if inspect.isbuiltin(obj):
        return str(getattr(obj, "__module__", "") or "").split(".")[0] == "torch"
    try:
        source = Path(inspect.getfile(obj)).resolve()
    except (TypeError, OSError):
        return False
    return home in source.parents


def _what(obj: Any) -> str:
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if module and name:
        return f"{module}.{name}"
    return f"a {type(obj).__qualname__}"


def watch_torch() -> Callable[[], list[str]]:
    """What TORCH_NAMES name now, as a check to run again and again: it returns each name that
    names something else since (with what stands in its place). A dict lookup a name, so the
    plugin can run it after every library test: a fixture that patches torch and undoes the
    patch at its teardown (pytest's monkeypatch) is gone by the end of the run."""
    import torch

    watched = []
    for name in TORCH_NAMES:
        *path, attr = name.split(".")[1:]
        owner: Any = torch
        for part in path:
            owner = inspect.getattr_static(owner, part, _ABSENT)
        if owner is not _ABSENT:  # a class this release lacks (torch.cuda.Stream on a CPU build)
            watched.append((name, owner, attr, _stored(owner, attr)))

    def changed() -> list[str]:
        return [f"{name} (now {'absent' if now is _ABSENT else _what(now)})" for name, owner, attr, was in watched
                if (now := _stored(owner, attr)) is not was]

    return changed


def _stored(owner: Any, attr: str) -> Any:
    """inspect.getattr_static for a module or a class, without its generality (it runs often)."""
    for holder in owner.__mro__ if isinstance(owner, type) else (owner,):
        found = vars(holder).get(attr, _ABSENT)
        if found is not _ABSENT:
            return found
    return _ABSENT


def replaced_names(before: dict[str, Any], after: dict[str, Any]) -> tuple[str, ...]:
    return tuple(name for name in TORCH_NAMES if before.get(name, _ABSENT) is not after.get(name, _ABSENT))


def _split(spec: str) -> tuple[str, str]:
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ImplError(f"--impl {spec!r}: expected 'module.path:Attr' or 'path/to/file.py:Attr'")
    return target, attr


def _resolve(obj: Any, dotted: str, spec: str, where: str) -> Any:
    for part in dotted.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImplError(f"--impl {spec!r}: {where} has no attribute {dotted!r}") from None
    return obj


def load(spec: str) -> Impl:
    """Import the class ``spec`` names, and check that it can take the contract's arguments."""
    target, attr = _split(spec)
    before = torch_identities()
    cls, import_code = _import(spec, target, attr)
    replaced = replaced_names(before, torch_identities())
    return Impl(spec=spec, cls=cls, import_code=import_code, replaced_torch=replaced)


def _is_path(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def check(spec: str) -> None:
    """The one-line error load() gives for a spec that names no module or file, without running
    the module: for a process that only hands the tests to others (pytest-xdist's controller)."""
    target, _ = _split(spec)
    if _is_path(target):
        _existing_file(spec, target)
        return
    with _module_errors(spec, target):
        found = importlib.util.find_spec(target)  # imports the parent packages only
    if found is None:
        raise ImplError(f"--impl {spec!r}: no module named {target!r}")


def _existing_file(spec: str, target: str) -> Path:
    path = Path(target).resolve()
    if path.is_dir():
        raise ImplError(f"--impl {spec!r}: {str(path)!r} is a directory, not a Python file "
                        "(name the file in it: path/to/file.py:Attr)")
    if not path.is_file():
        raise ImplError(f"--impl {spec!r}: no such file {str(path)!r}")
    return path


def _beside_on_path(folder: Path) -> None:
    """Put the file's folder first on sys.path, as Python does for a script, so that the file
    imports the modules beside it. Only for a file spec (a module's neighbours come through
    its package), and left in place: the class may import a neighbour later, in a method."""
    entry = str(folder)
    if entry not in sys.path:
        sys.path.insert(0, entry)


@contextlib.contextmanager
def _module_errors(spec: str, target: str) -> Iterator[None]:
    """Looking up or importing the module ``target``: its failure as one line."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise ImplError(f"--impl {spec!r}: no module named {exc.name!r}") from None
    except Exception as exc:
        raise ImplError(f"--impl {spec!r}: importing {target!r} failed: {type(exc).__name__}: {exc}") from None


def _import(spec: str, target: str, attr: str) -> tuple[Any, str]:
    if _is_path(target):
        path = _existing_file(spec, target)
        name = f"_cpugpu_impl_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise ImplError(f"--impl {spec!r}: cannot load {str(path)!r} as a Python module")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # dataclasses and pickling look modules up by name
        _beside_on_path(path.parent)
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            raise ImplError(f"--impl {spec!r}: importing {str(path)!r} failed: {type(exc).__name__}: {exc}") from None
        import_code = (
            "import importlib.util\n"
            "import sys\n"
            f"sys.path.insert(0, {str(path.parent)!r})  # the modules beside the file, as for a script\n"
            f"_spec = importlib.util.spec_from_file_location('impl_under_test', {str(path)!r})\n"
            "_module = importlib.util.module_from_spec(_spec)\n"
            "_spec.loader.exec_module(_module)\n"
            f"Buffer = _module.{attr}\n"
        )
        where = str(path)
    else:
        with _module_errors(spec, target):
            module = importlib.import_module(target)
        if "." in attr:
            import_code = f"import {target}\nBuffer = {target}.{attr}\n"
        else:
            import_code = f"from {target} import {attr} as Buffer\n"
        where = f"module {target!r}"
    cls = _resolve(module, attr, spec, where)
    if not inspect.isclass(cls):  # a function would be called as the constructor, and judged as no class is
        raise ImplError(f"--impl {spec!r}: {attr!r} is a {type(cls).__name__}, not a class")
    check_signature(cls, spec)
    return cls, import_code


def check_signature(cls: Any, spec: str) -> None:
    """Refuse a constructor that cannot take the contract's arguments, before any test runs."""
    import torch

    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return  # builtins and C types have no signature to check: let the suite judge them
    try:
        signature.bind(2, 3, dtype=torch.float32, device=torch.device("cpu"), pin_memory=False, with_numpy=True)
    except TypeError as exc:
        raise ImplError(
            f"--impl {spec!r}: constructor{signature} does not take the contract's arguments "
            f"(*size, dtype=, device=, pin_memory=, with_numpy=): {exc}"
        ) from None
