"""Load the class under test from an ``--impl`` spec: ``module.path:Attr`` or ``path/to/file.py:Attr``."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_SPEC = "cpugpu_conformance.reference:CpuGpuBuffer"


class ImplError(Exception):
    """The spec cannot be turned into a usable class; the message is one line naming the culprit."""


@dataclass(frozen=True)
class Impl:
    spec: str
    cls: Any
    # How a standalone reproducer script gets the same class, as Python source.
    import_code: str


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
    target, attr = _split(spec)
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target).resolve()
        if not path.is_file():
            raise ImplError(f"--impl {spec!r}: no such file {str(path)!r}")
        name = f"_cpugpu_impl_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise ImplError(f"--impl {spec!r}: cannot load {str(path)!r} as a Python module")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # dataclasses and pickling look modules up by name
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            raise ImplError(f"--impl {spec!r}: importing {str(path)!r} failed: {type(exc).__name__}: {exc}") from None
        import_code = (
            "import importlib.util\n"
            f"_spec = importlib.util.spec_from_file_location('impl_under_test', {str(path)!r})\n"
            "_module = importlib.util.module_from_spec(_spec)\n"
            "_spec.loader.exec_module(_module)\n"
            f"Buffer = _module.{attr}\n"
        )
        where = str(path)
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            raise ImplError(f"--impl {spec!r}: no module named {exc.name!r}") from None
        except Exception as exc:
            raise ImplError(f"--impl {spec!r}: importing {target!r} failed: {type(exc).__name__}: {exc}") from None
        if "." in attr:
            import_code = f"import {target}\nBuffer = {target}.{attr}\n"
        else:
            import_code = f"from {target} import {attr} as Buffer\n"
        where = f"module {target!r}"
    cls = _resolve(module, attr, spec, where)
    if not callable(cls):
        raise ImplError(f"--impl {spec!r}: {attr!r} is a {type(cls).__name__}, not a class")
    check_signature(cls, spec)
    return Impl(spec=spec, cls=cls, import_code=import_code)


def check_signature(cls: Any, spec: str) -> None:
    """Refuse a constructor that cannot take the contract's arguments, before any test runs."""
    import torch

    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return  # builtins and C types have no signature to check: let the suite judge them
    try:
        signature.bind(2, 3, dtype=torch.float32, device="cpu", pin_memory=False, with_numpy=True)
    except TypeError as exc:
        raise ImplError(
            f"--impl {spec!r}: constructor{signature} does not take the contract's arguments "
            f"(*size, dtype=, device=, pin_memory=, with_numpy=): {exc}"
        ) from None
