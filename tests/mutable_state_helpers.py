"""What the tests of assert_mutable_state and MutableStateTests share (issues 25 and 29): the seed's
error, the creation contexts by what runs in them, an inference tensor, whether a failure names a path,
and an object warmed up in inference mode as the engines warm up.
"""

from __future__ import annotations

import torch

from cpugpu_conformance.testing.shared.contexts import contexts_for

SEED_ERROR = "Inplace update to inference tensor outside InferenceMode is not allowed"
CPU_CONTEXTS = [c.name for c in contexts_for("cpu")]
# The contexts in which what runs is in inference mode: a lazy allocation there makes an inference tensor.
INFERENCE_CONTEXTS = {"inference_mode", "nested_inference_mode", "no_grad_inside_inference_mode",
                      "decorated_inference_mode", "thread_in_inference_mode"}


def inference(*size, **kwargs):
    with torch.inference_mode():
        return torch.zeros(*size, **kwargs)


def names(message: str, path: str) -> bool:
    """Whether a failure names `path`: on a line of its own, or with what was found there."""
    return f"\n  {path}\n" in message or f"\n  {path}: " in message


def built_in_inference_mode(cls, device="cpu"):
    """Built plainly, warmed up in inference mode: the engines' warm-up."""
    state = cls(torch.device(device))
    with torch.inference_mode():
        state.warm_up()
    return state
