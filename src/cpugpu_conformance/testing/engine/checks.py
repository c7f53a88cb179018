"""Promises 3 and 12 for any object: its tensors take in-place updates, and building it leaves the caller alone.

Plain functions, run by MutableStateTests and assert_mutable_state and written into
reproducers as they are (reproducer.py): each uses torch and the library's own functions only.

The in-place update is ``tensor.copy_(tensor)``: a write of the tensor's own values, which
torch refuses for an inference tensor outside inference mode exactly as it refuses any
other in-place op, for every dtype and layout, and which leaves the data as it was (for a
tensor copied onto itself torch copies nothing, so it costs nothing at any size). Like
every in-place op it bumps the tensor's version counter: a tensor saved for a backward pass
that has not run yet refuses that backward afterwards. A tensor that requires grad is
written under ``no_grad()``, as an engine updates its weights, so no graph is recorded into it;
a view that requires grad and was made in inference mode or under ``no_grad()`` is also written
in grad mode, where torch refuses it ("A view was created in inference mode and is being
modified inplace in normal mode") before it writes anything.

PYTEST_DONT_REWRITE (why: cpugpu_conformance.testing's docstring).
"""

from __future__ import annotations

import torch

from ..shared.caller import caller_state


def in_place_refusal(tensor):
    """Why an engine could not update `tensor` in place, as text; None when it can: an inference
    tensor, or an in-place update that raises outside inference mode or inside it, or (for a view
    that requires grad, made in inference mode or under no_grad()) in grad mode."""
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
            problems.append(f"an in-place update {where} inference mode raised {type(exc).__name__}: {_first(exc)}")
    if view_made_in_a_mode(tensor):
        try:  # as an engine updates it where grad is on: torch refuses before it writes anything
            with torch.inference_mode(False), torch.enable_grad():
                tensor.copy_(tensor)
        except Exception as exc:
            problems.append(f"a view that requires grad: an in-place update in grad mode raised "
                            f"{type(exc).__name__}: {_first(exc)}")
    return "; ".join(problems) or None


def view_made_in_a_mode(tensor):
    """Whether `tensor` is a view that requires grad and was made in inference mode or under
    no_grad() (torch's creation meta): not an inference tensor, and an in-place update under
    no_grad() takes, but torch refuses one in grad mode. Any other view that requires grad is
    updated in grad mode by autograd's own rules (a view of a leaf never is), wherever it was
    made: the mode it was made in is what this checks."""
    if not (tensor.requires_grad and tensor._is_view()):
        return False
    get = getattr(torch._C._autograd, "_get_creation_meta", None)
    if get is None:  # a torch that cannot say: a view of a leaf is refused in grad mode anyway
        return not tensor._base.is_leaf
    try:
        meta = get(tensor)
    except RuntimeError:  # a view autograd keeps no record of
        return False
    return getattr(meta, "name", str(meta).rsplit(".", 1)[-1]) in ("INFERENCE_MODE", "NO_GRAD_MODE")


def _first(exc):
    return (str(exc).strip().splitlines() or [""])[0]


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


def placement(tensor):
    """Where a tensor is, as an ambient context could change it: (device, dtype, shape)."""
    return (str(tensor.device), str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape))


def described(where):
    """A placement (or None: no tensor there) as words."""
    if where is None:
        return "no tensor"
    device, dtype, shape = where
    return f"on {device}, {dtype}, shape {shape}"


def placed_as(path, value, plain):
    """The tensor at `path` (`value()` reads it) is where it is when the object is built plainly:
    `plain` is its (device, dtype, shape) in that build, None where that build has no tensor there."""
    try:
        found = value()
    except (AttributeError, KeyError, IndexError, TypeError):  # the path leads nowhere in this build
        found = None
    here = placement(found) if isinstance(found, torch.Tensor) else None
    assert here == plain, f"{path}: {described(here)} here; built plainly, {described(plain)}"
