"""The contexts a buffer can be constructed in (promises 1, 3 and 12), as source code.

The suite executes exactly this source, and pastes it into reproducers, so what a
failure report shows is what ran. Each context makes fresh ``torch.inference_mode()``
objects: reusing one for nested ``with`` blocks leaves inference mode on for the rest
of the thread.

Besides the grad and inference modes, engines build buffers where a model's init runs:
under a default device (``with torch.device(...)``, ``torch.set_default_device``) or a
default dtype. The explicit arguments must win there (promise 1). Contexts that set a
default restore it in ``finally``, so a failing buffer cannot poison later tests.
Contexts only one device has (a CUDA side stream, say) are listed with it, in devices.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from cpugpu_conformance import devices


def _changes_something() -> str | None:
    return None


@dataclass(frozen=True)
class Context:
    name: str
    template: str  # binds `buf` from the constructor call `{make}`
    # Why, on this machine, the context is the plain one (None: it is not); see devices.inert_contexts.
    inert: Callable[[], str | None] = field(default=_changes_something, compare=False)

    def code(self, make: str) -> str:
        return self.template.format(make=make)

    def same_as_plain(self) -> str | None:
        """Why entering this context changes nothing here, so that a check that it leaves the
        caller's state alone cannot fire (promise 12); None when it changes something."""
        why = self.inert()
        return f"context {self.name}: {why}" if why else None

    def __repr__(self) -> str:  # hypothesis prints this in falsifying examples
        return f"<context {self.name}>"


# A thread that builds the buffer; its exception, if any, is re-raised in the caller.
_THREAD = (
    "import threading\n\nmade = {{{{}}}}\n\n\ndef build():\n    try:\n        {body}\n"
    "    except BaseException as exc:\n        made['error'] = exc\n\n\n"
    "thread = threading.Thread(target=build)\nthread.start()\nthread.join()\n"
    "if 'error' in made:\n    raise made['error']\nbuf = made['buf']\n"
)

CONTEXTS: tuple[Context, ...] = (
    Context("plain", "buf = {make}\n"),
    Context("inference_mode", "with torch.inference_mode():\n    buf = {make}\n"),
    Context(
        "nested_inference_mode",
        "with torch.inference_mode():\n    with torch.inference_mode():\n        buf = {make}\n",
    ),
    Context(
        "inference_mode_false_inside_inference_mode",
        "with torch.inference_mode():\n    with torch.inference_mode(False):\n        buf = {make}\n",
    ),
    Context("no_grad", "with torch.no_grad():\n    buf = {make}\n"),
    Context(
        "no_grad_inside_inference_mode",
        "with torch.inference_mode():\n    with torch.no_grad():\n        buf = {make}\n",
    ),
    Context(
        "decorated_inference_mode",
        "@torch.inference_mode()\ndef build():\n    return {make}\n\nbuf = build()\n",
    ),
    Context("thread", _THREAD.format(body="made['buf'] = {make}")),
    Context(
        "thread_in_inference_mode",
        _THREAD.format(body="with torch.inference_mode():\n            made['buf'] = {make}"),
    ),
)

# Ambient defaults a model's init sets; "meta" works on any machine.
AMBIENT: tuple[Context, ...] = (
    Context("default_device_meta", 'with torch.device("meta"):\n    buf = {make}\n'),
    Context(
        "set_default_device_meta",
        'torch.set_default_device("meta")\ntry:\n    buf = {make}\nfinally:\n    torch.set_default_device(None)\n',
    ),
    Context(
        "set_default_dtype_float16",
        "previous_dtype = torch.get_default_dtype()\ntorch.set_default_dtype(torch.float16)\n"
        "try:\n    buf = {make}\nfinally:\n    torch.set_default_dtype(previous_dtype)\n",
    ),
)

PLAIN = CONTEXTS[0]


def contexts_for(device: str) -> tuple[Context, ...]:
    """Every context a buffer for `device` is built in: the common ones, then the device's own (devices.py)."""
    dev = devices.get(device)
    own = tuple(Context(name, template, lambda name=name: dev.inert_context(name)) for name, template in dev.contexts)
    return CONTEXTS + AMBIENT + own
