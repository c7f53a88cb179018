"""The contexts a buffer can be constructed in (promises 1, 3 and 12), as plain functions.

Each is ``context(make, *args)``: it calls ``make(*args)`` inside the context and returns what
that made. The suite runs them, and reproducers hold their source, so what a failure report
shows is what ran. Each makes fresh ``torch.inference_mode()`` objects: reusing one for nested
``with`` blocks leaves inference mode on for the rest of the thread.

Besides the grad and inference modes, engines build buffers where a model's init runs:
under a default device (``with torch.device(...)``, ``torch.set_default_device``) or a
default dtype. The explicit arguments must win there (promise 1). Contexts that set a
default restore it in ``finally``, so a failing buffer cannot poison later tests.
Contexts only one device has (a CUDA side stream, say) are listed with it, in devices.py.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from cpugpu_conformance import devices


def _changes_something() -> str | None:
    return None


@dataclass(frozen=True)
class Context:
    name: str
    enter: Callable[..., Any] | None  # context(make, *args); None: the plain call, make(*args)
    # Why, on this machine, the context is the plain one (None: it is not); see devices.inert_contexts.
    inert: Callable[[], str | None] = field(default=_changes_something, compare=False)

    def same_as_plain(self) -> str | None:
        """Why entering this context changes nothing here, so that a check that it leaves the
        caller's state alone cannot fire (promise 12); None when it changes something."""
        why = self.inert()
        return f"context {self.name}: {why}" if why else None

    def __repr__(self) -> str:  # hypothesis prints this in falsifying examples
        return f"<context {self.name}>"


def inference_mode(make, *args):
    with torch.inference_mode():
        return make(*args)


def nested_inference_mode(make, *args):
    return inference_mode(inference_mode, make, *args)


def inference_mode_false_inside_inference_mode(make, *args):
    with torch.inference_mode():
        with torch.inference_mode(False):
            return make(*args)


def no_grad(make, *args):
    with torch.no_grad():
        return make(*args)


def no_grad_inside_inference_mode(make, *args):
    return inference_mode(no_grad, make, *args)


def decorated_inference_mode(make, *args):
    @torch.inference_mode()
    def build():
        return make(*args)

    return build()


def thread(make, *args):
    """Made in a thread of its own; its exception, if any, is raised again in the caller."""
    made = {}

    def build():
        try:
            made["buf"] = make(*args)
        except BaseException as exc:
            made["error"] = exc

    worker = threading.Thread(target=build)
    worker.start()
    worker.join()
    if "error" in made:
        raise made["error"]
    return made["buf"]


def thread_in_inference_mode(make, *args):
    """Made in a thread of its own, in inference mode there (a thread's modes are its own)."""
    return thread(inference_mode, make, *args)


# Ambient defaults a model's init sets; "meta" works on any machine.
def default_device_meta(make, *args):
    with torch.device("meta"):
        return make(*args)


def set_default_device_meta(make, *args):
    torch.set_default_device("meta")
    try:
        return make(*args)
    finally:
        torch.set_default_device(None)


def set_default_dtype_float16(make, *args):
    previous_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float16)
    try:
        return make(*args)
    finally:
        torch.set_default_dtype(previous_dtype)


PLAIN = Context("plain", None)

CONTEXTS: tuple[Context, ...] = (PLAIN,) + tuple(
    Context(f.__name__, f)
    for f in (inference_mode, nested_inference_mode, inference_mode_false_inside_inference_mode, no_grad,
              no_grad_inside_inference_mode, decorated_inference_mode, thread, thread_in_inference_mode)
)
AMBIENT: tuple[Context, ...] = tuple(
    Context(f.__name__, f) for f in (default_device_meta, set_default_device_meta, set_default_dtype_float16)
)


def contexts_for(device: str) -> tuple[Context, ...]:
    """Every context a buffer for `device` is built in: the common ones, then the device's own (devices.py)."""
    dev = devices.get(device)
    own = tuple(Context(f.__name__, f, functools.partial(dev.inert_context, f.__name__)) for f in dev.contexts)
    return CONTEXTS + AMBIENT + own
