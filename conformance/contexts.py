"""The contexts a buffer can be constructed in (promise 3), as source code.

The suite executes exactly this source, and pastes it into reproducers, so what a
failure report shows is what ran. Each context makes fresh ``torch.inference_mode()``
objects: reusing one for nested ``with`` blocks leaves inference mode on for the rest
of the thread.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Context:
    name: str
    template: str  # binds `buf` from the constructor call `{make}`

    def code(self, make: str) -> str:
        return self.template.format(make=make)

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

PLAIN = CONTEXTS[0]
