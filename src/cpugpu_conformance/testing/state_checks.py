"""Promises 3 and 12 for any object: its tensors take in-place updates, and building it leaves the caller alone.

Plain functions, run by MutableStateTests and assert_mutable_state and written into
reproducers as they are (reproducer.py): each uses torch and the library's own functions only.

The in-place update is ``tensor.copy_(tensor)``: a write of the tensor's own values, which
torch refuses for an inference tensor outside inference mode exactly as it refuses any
other in-place op, for every dtype and layout, and which leaves the data as it was (for a
tensor copied onto itself torch copies nothing, so it costs nothing at any size). Like
every in-place op it bumps the tensor's version counter: a tensor saved for a backward pass
that has not run yet refuses that backward afterwards. A tensor that requires grad is
written under ``no_grad()``, as an engine updates its weights, so no graph is recorded into it.

PYTEST_DONT_REWRITE (pytest loads the package as a plugin): the asserts say what broke themselves,
and the functions go into reproducers as they are written.
"""

from __future__ import annotations

import torch

from .side_effects import caller_state


def in_place_refusal(tensor):
    """Why an engine could not update `tensor` in place, as text; None when it can: an inference
    tensor, or an in-place update that raises outside inference mode or inside it."""
    problems = []
    if tensor.is_inference():
        problems.append("an inference tensor (made under torch.inference_mode())")
    for inside in (False, True):
        try:
            with torch.inference_mode(inside):  # inference_mode(False): outside, whatever the caller's mode
                with torch.set_grad_enabled(torch.is_grad_enabled() and not tensor.requires_grad):
                    tensor.copy_(tensor)
        except Exception as exc:  # what an engine's update would raise: RuntimeError for an inference tensor
            where = "inside" if inside else "outside"
            first_line = (str(exc).strip().splitlines() or [""])[0]
            problems.append(f"an in-place update {where} inference mode raised {type(exc).__name__}: {first_line}")
    return "; ".join(problems) or None


def mutable_in_place(path, tensor):
    """Promise 3 for the tensor at `path`: not an inference tensor, and updated in place outside
    inference mode and inside it."""
    why = in_place_refusal(tensor)
    assert why is None, f"{path}: {why}"


def changes(before, after_what, device):
    """What `after_what` changed of the caller's state since `before` (caller_state), one line each."""
    now = caller_state(device)
    return [f"{after_what} changed the caller's {key} from {before[key]} to {now[key]}"
            for key in before if now[key] != before[key]]


def built_and_warmed_up(make_state, warm_up, device, changed):
    """``state = make_state(device)``, then ``warm_up(state)`` (None: nothing to warm up); what each
    changed of the caller's state (promise 12) is added to `changed`."""
    before = caller_state(device)
    state = make_state(device)
    changed += changes(before, "make_state", device)
    if warm_up is not None:
        warm_up(state)
        changed += changes(before, "warm_up", device)
    return state


def warmed_up(warm_up, state, device, changed):
    """``warm_up(state)`` of a state built elsewhere; what it changed of the caller's state goes into `changed`."""
    before = caller_state(device)
    warm_up(state)
    changed += changes(before, "warm_up", device)
    return state


def note_changes(before, after_what, device, changed):
    """Add to `changed` what `after_what` (a whole context, left now) changed of the caller's state,
    when the calls inside it changed nothing: a change made inside is named there already."""
    if not changed:
        changed += changes(before, after_what, device)


def caller_left_alone(changed):
    """Promise 12: building the state and warming it up changed nothing of the caller's state."""
    assert not changed, "; ".join(changed)
