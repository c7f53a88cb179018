"""The seed's bug in any object: `assert_mutable_state(obj)` and the test class `MutableStateTests`.

"Inplace update to inference tensor outside InferenceMode is not allowed" is not particular
to CpuGpuBuffer: engines hit it in workspaces allocated during a warm-up under
``torch.inference_mode()``, in per-request tables, in an ``nn.Module``'s buffers. Promises 3 and
12 of the contract, applied to any object, and what an ambient context sets kept out of it:

    assert_mutable_state(runner)          # in an existing test: every bad tensor path, or nothing

    class TestOurRunner(MutableStateTests):   # with the plugin: per device and creation context
        def make_state(self, device):
            return OurRunner(device)

        def warm_up(self, state):              # optional: what allocates lazily
            state.warm_up()

Every tensor reachable from the object (state_walk.py) must be no inference tensor and take
an in-place update outside inference mode and inside it, and in grad mode where it is a view
that requires grad (state_checks.py); building the object and warming it up must leave the
caller's grad mode, inference mode, default device and dtype (and the device's own state) as
they were; and built in any context, every tensor must have the device, dtype and shape it has
when the object is built plainly (placement: a default device or dtype must not leak in).
Tensors an object holds as inference tensors on purpose are excluded by path, with a reason,
and listed as excluded. The terminal's words are state_report.py's.

The class's surface is make_state, warm_up, exclude, skip_contexts, max_items and max_depth;
everything else here is the library's own, in module functions a subclass cannot reach.
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import torch

from cpugpu_conformance import devices
from cpugpu_conformance import promises as P

from ..shared.caller import caller_state
from ..shared.contexts import PLAIN, Context, contexts_for
from ..shared.marks import STATE_REPORT_KEY
from ..shared.reproducer import Name
from ..shared.stamps import CONTRACT_TESTS
from .checks import built_and_warmed_up, in_place_refusal, note_changes, placement, warmed_up
from .report import PLACEMENT, SHOWN, Checked, PhaseOutcome, message, misplaced, order_of
from .reproducer import StateScenario
from .walk import DEFAULT_MAX_DEPTH, DEFAULT_MAX_ITEMS, WalkLimit, normalize_exclusions, walk

__all__ = ["Checked", "MutableStateTests", "assert_mutable_state", "check_state"]



def check_state(obj: Any, exclude: Mapping[str, str] | None = None, *, root: str = "state",
                max_items: int = DEFAULT_MAX_ITEMS, max_depth: int = DEFAULT_MAX_DEPTH) -> Checked:
    """Walk `obj` and check every tensor on it (promise 3); what was found, never raised."""
    result = Checked(root)
    try:
        found = walk(obj, root, exclude=exclude, max_items=max_items, max_depth=max_depth)
    except WalkLimit as exc:
        result.error = f"not checked: {exc}"
        return result
    result.excluded = dict(found.excluded)
    for path, tensor in found.tensors:
        result.placements[path] = placement(tensor)
        why = in_place_refusal(tensor)
        if why is not None:
            result.bad.append((path, why))
    result.checked = len(found.tensors)
    if found.unmatched:
        result.error = "; ".join(_stale(path, reason, found.excluded) for path, reason in found.unmatched.items())
    elif not found.tensors:
        what = f" ({len(found.excluded)} excluded)" if found.excluded else ""
        result.error = (f"nothing checked: no tensor is reachable from {root}{what} through attributes, slots, dicts, "
                        "lists, tuples, sets, nn.Module registrations, partials, bound methods or closures "
                        "(is it allocated lazily, on first use?)")
    return result


def _stale(path: str, reason: str, matched: Mapping[str, str]) -> str:
    inside = next((m for m in matched if path.startswith((f"{m}.", f"{m}["))), None)
    where = f"it is inside the excluded {inside}" if inside else "the walk found no tensor or object there"
    return f"stale exclusion {path!r} ({reason}): {where}; remove it or correct the path"


def _check_name(name: Any) -> None:
    """A root name is where every path starts: it must be Python (``runner``, ``engine.runner``)."""
    parts = name.split(".") if isinstance(name, str) else []
    if not parts or not all(part.isidentifier() and not keyword.iskeyword(part) for part in parts):
        raise ValueError(f"assert_mutable_state: name={name!r} is not a Python identifier or dotted path "
                         "(e.g. 'runner' or 'engine.runner'): every path it prints starts with it")


def assert_mutable_state(obj: Any, exclude: Mapping[str, str] | None = None, *, name: str = "state",
                         max_items: int = DEFAULT_MAX_ITEMS, max_depth: int = DEFAULT_MAX_DEPTH) -> Checked:
    """Promise 3 for an object already built: every tensor reachable from it is no inference tensor
    and takes an in-place update outside inference mode and inside it (and in grad mode, for a view
    that requires grad made in inference mode or under no_grad()). AssertionError names every bad
    path, and each refusal once. ``exclude``: path -> reason, for tensors held as inference tensors
    on purpose (``{"weights.w": "read-only weights"}``); one that matches nothing is an error. Paths
    start with `name`, a Python identifier or dotted path (ValueError otherwise). Returns what was
    checked and excluded. Each tensor is written with its own values (``t.copy_(t)``): its data is
    unchanged, its version counter is bumped (state_checks.py)."""
    _check_name(name)
    exclusions = normalize_exclusions(exclude, name)
    result = check_state(obj, exclusions, root=name, max_items=max_items, max_depth=max_depth)
    if not result.ok:
        head = (f"{name}: {len(result.bad)} of {result.checked} tensors would refuse an in-place update "
                f"(promise {P.MUTABLE}, {P.PROMISES[P.MUTABLE]})" if result.bad
                else f"{name}: promise {P.MUTABLE} could not be checked, which is no pass")
        raise AssertionError("\n".join([head + ":", *result.lines(), *result.excluded_lines()]))
    return result


@dataclass(frozen=True)
class Phase:
    """One way of building the state in a context: both calls inside it, or only the warm-up."""

    context: Context
    warm_up_only: bool

    def describe(self, has_warm_up: bool) -> str:
        where = "the plain context" if self.context == PLAIN else f"context {self.context.name}"
        if self.warm_up_only:
            return f"built in the plain context, warmed up in {where}"
        return f"built and warmed up in {where}" if has_warm_up else f"built in {where}"


class MutableStateTests:
    """Promises 3 and 12 for any object, and its placement: override ``make_state(device)`` (and
    ``warm_up(state)``).

    For each device and each creation context the suite knows (contexts.py), the object is built
    and warmed up in the context, and (with a warm_up) built plainly and warmed up in the
    context; every tensor reachable from it is checked, the caller's state around both calls,
    and each tensor's device, dtype and shape against the object built plainly. With the plugin,
    each (device, context) is a test of its own.
    """

    # path -> reason: tensors the object holds as inference tensors on purpose (read-only weights).
    # Relative to the object ("weights.w") or as a failure prints it ("state.weights.w").
    exclude: ClassVar[Mapping[str, str]] = {}
    # context name -> reason: contexts this object is never built in; their tests are skipped
    # with the reason (untested, never passed). The names are contexts.py's.
    skip_contexts: ClassVar[Mapping[str, str]] = {}
    max_items: ClassVar[int] = DEFAULT_MAX_ITEMS
    max_depth: ClassVar[int] = DEFAULT_MAX_DEPTH

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__}>"

    def make_state(self, device: Any) -> Any:
        """Build the object under test for `device` (a torch.device). Its source goes into
        reproducers: keep it self-contained (names it reads are imported by the script)."""
        raise NotImplementedError(f"{type(self).__qualname__}: override make_state(self, device) to build the object")

    def warm_up(self, state: Any) -> None:
        """Optional: run what allocates lazily (a warm-up, autotuning, a graph capture)."""

    @pytest.mark.cpugpu_promise(P.MUTABLE, P.NO_SIDE_EFFECTS)
    def test_mutable_state(self, device: str, context: Context, request: pytest.FixtureRequest) -> None:
        """`device` and `context`: every creation context of every device (generate_tests)."""
        cls = f"{type(self).__module__}.{type(self).__qualname__}"
        record: dict[str, Any] = {"class": cls, "device": device, "context": context.name,
                                  "promises": [P.MUTABLE, P.NO_SIDE_EFFECTS]}
        request.node.user_properties.append((STATE_REPORT_KEY, record))
        team_why = self.skip_contexts.get(context.name)
        why = team_why or context.same_as_plain()
        if why:  # the team's decision (waived), or a context that changes nothing on this machine
            record.update(skipped=why, skipped_by="team" if team_why else "contract")
            pytest.skip(why)
        outcomes = [_run(self, device, phase) for phase in _phases(self, context)]
        record.update(_findings(outcomes))
        if record["broken"] or record["errors"]:  # the message says it all: no traceback of the suite's own code
            pytest.fail(message(type(self).__qualname__, cls, device, context.name, outcomes), pytrace=False)


# The judge counts a test as the contract's only when its function is this one (stamps.py): an
# override, whatever its body, leaves its (device, context) untested.
CONTRACT_TESTS.setdefault("test_mutable_state", MutableStateTests.test_mutable_state)


# --- how a test runs: module functions, so that a subclass's own names never stand in for them


def _has_warm_up(tests: MutableStateTests) -> bool:
    return type(tests).warm_up is not MutableStateTests.warm_up


def _phases(tests: MutableStateTests, context: Context) -> list[Phase]:
    phases = [Phase(context, warm_up_only=False)]
    if _has_warm_up(tests) and context != PLAIN:
        phases.append(Phase(context, warm_up_only=True))
    return phases


def _run(tests: MutableStateTests, device: str, phase: Phase) -> PhaseOutcome:
    """Build the state as `phase` says, through a scenario (so the reproducer is what ran), then walk
    it, and compare it with the state built plainly."""
    has_warm_up = _has_warm_up(tests)
    outcome = PhaseOutcome(phase.describe(has_warm_up), phase.context.name)
    sc = StateScenario(type(tests), MutableStateTests, device, phase.context.name, outcome.phase)
    sc.ns["make_state"] = tests.make_state
    sc.ns["warm_up"] = tests.warm_up
    warm = Name("warm_up") if has_warm_up else None
    sc.bind(changed=[])
    sc.call(caller_state, Name("device"), into="outer")
    try:
        if phase.warm_up_only:
            sc.call(built_and_warmed_up, Name("make_state"), None, Name("device"), Name("changed"), into="state")
            _call_in(sc, phase.context, warmed_up, Name("warm_up"), Name("state"), Name("device"), Name("changed"))
        else:
            _call_in(sc, phase.context, built_and_warmed_up, Name("make_state"), warm, Name("device"),
                     Name("changed"))
        if phase.context != PLAIN:
            left = f"context {phase.context.name}, with what ran in it, once left,"
            sc.call(note_changes, Name("outer"), left, Name("device"), Name("changed"))
    except Exception as exc:  # the class's own calls raised in this context: the reproducer ends with that call
        outcome.raised = f"{type(exc).__name__}: {exc}"
        outcome.raised_in = _raised_in(tests, exc)
        outcome.changed = list(sc["changed"])
        outcome.script = sc.record.reproducer()
    finally:
        _put_back(sc["outer"])
    if outcome.raised is not None:
        if phase.context == PLAIN:
            _PLAIN_BUILDS.setdefault((type(tests), device), _not_compared(outcome))
        elif isinstance(_plain_build(tests, device), Checked):  # only here: what the context sets leaked in?
            outcome.leak = _ambient(phase.context)
        return outcome
    outcome.changed = list(sc["changed"])
    outcome.checked = check_state(sc["state"], tests.exclude, max_items=tests.max_items, max_depth=tests.max_depth)
    if phase.context == PLAIN:
        _PLAIN_BUILDS.setdefault((type(tests), device), outcome.checked)
    else:
        plain = _plain_build(tests, device)
        if isinstance(plain, Checked):
            outcome.misplaced = misplaced(plain, outcome.checked)
        else:
            outcome.placement_error = plain
    if not outcome.ok:
        sc.check_paths([path for path, _ in outcome.checked.bad])
        if outcome.misplaced:
            sc.check_placement(outcome.misplaced)
        if outcome.changed:
            sc.check_caller_state()
        outcome.script = sc.record.reproducer()
    return outcome


def _findings(outcomes: list[PhaseOutcome]) -> dict[str, Any]:
    """What the test's record says of its phases (the result file's entry for the test)."""
    failed = [o for o in outcomes if not o.ok]
    return dict(
        checked=sum(o.checked.checked for o in outcomes if o.checked is not None),
        bad_paths=[{"path": path, "why": why, "phase": o.phase}
                   for o in outcomes if o.checked is not None for path, why in o.checked.bad],
        caller_state_changes=[change for o in outcomes for change in o.changed],
        errors=[e for o in outcomes for e in (None if o.leak else o.raised, o.checked.error if o.checked else None,
                                                 o.placement_error) if e],
        excluded={path: reason for o in outcomes if o.checked is not None
                  for path, reason in o.checked.excluded.items()},
        placement=[{"path": path, "phase": o.phase, "here": _placed(here), "plain": _placed(plain)}
                   for o in outcomes for path, here, plain in o.misplaced]
        + [{"phase": o.phase, "raised": o.raised, "leak": o.leak} for o in outcomes if o.leak],
        broken=sorted({p for o in failed for p in o.broken()}, key=order_of),
        why=failed[0].first_finding() if failed else None,
        reproducer=failed[0].script if failed else None,
        reproducers=[{"phase": o.phase, "cause": o.cause(), "reproducer": o.script} for o in failed if o.script],
    )


def _placed(where: Any) -> dict[str, Any] | None:
    if where is None:
        return None
    device, dtype, shape = where
    return {"device": device, "dtype": dtype, "shape": list(shape)}


# The state each test class builds plainly on each device (or why it could not be built): what every
# other context's build is compared with. Made once per process, by the plain test or the first
# test that needs it; it holds placements and paths, never the state.
_PLAIN_BUILDS: dict[tuple[type, str], Checked | str] = {}


def _plain_build(tests: MutableStateTests, device: str) -> Checked | str:
    key = (type(tests), device)
    if key not in _PLAIN_BUILDS:
        before = caller_state(torch.device(device))
        outcome = PhaseOutcome("built and warmed up in the plain context", PLAIN.name)
        try:
            state = tests.make_state(torch.device(device))
            if _has_warm_up(tests):
                tests.warm_up(state)
        except Exception as exc:
            outcome.raised, outcome.raised_in = f"{type(exc).__name__}: {exc}", _raised_in(tests, exc)
            _PLAIN_BUILDS[key] = _not_compared(outcome)
        else:
            _PLAIN_BUILDS[key] = check_state(state, tests.exclude, max_items=tests.max_items,
                                             max_depth=tests.max_depth)
        finally:
            _put_back(before)
    return _PLAIN_BUILDS[key]


def _not_compared(plain: PhaseOutcome) -> str:
    first = (str(plain.raised).splitlines() or [""])[0]
    return f"{PLACEMENT} not compared: built plainly, {plain.raised_in} raised {first}"


def _defaults() -> tuple[torch.device, torch.dtype]:
    """Where a tensor made without a device or dtype goes, here and now."""
    return torch.empty(0).device, torch.get_default_dtype()


def _ambient(context: Context) -> str | None:
    """What `context` sets that tensors created without a device or dtype follow, in words; None
    when it sets neither (a grad or inference mode, a thread)."""
    if context.enter is None:
        return None
    (device, dtype), (device_in, dtype_in) = _defaults(), context.enter(_defaults)
    found = []
    if device_in != device:
        found.append(f"this context sets the default device to {device_in}, and tensors created without a device "
                     "follow the ambient default device")
    if dtype_in != dtype:
        found.append(f"this context sets the default dtype to {str(dtype_in).removeprefix('torch.')}, and tensors "
                     "created without a dtype follow the ambient default dtype")
    return "; ".join(found) or None


def _raised_in(tests: MutableStateTests, exc: BaseException) -> str:
    """Which of the class's calls raised: warm_up when its frame is in the traceback."""
    code = getattr(type(tests).warm_up, "__code__", None)
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return "warm_up"
        tb = tb.tb_next
    return "make_state"


def _put_back(before: Mapping[str, Any]) -> None:
    """Put back the grad mode and default dtype a class changed (promise 12, reported already), so
    that the next phase and the next test start from the caller's state, not the class's."""
    if torch.is_grad_enabled() != before["grad mode"]:
        torch.set_grad_enabled(before["grad mode"])
    if torch.get_default_dtype() != before["default dtype"]:
        torch.set_default_dtype(before["default dtype"])


def _call_in(sc: StateScenario, context: Context, func: Any, *args: Any) -> Any:
    """``state = context(func, *args)``, or ``state = func(*args)`` in the plain context."""
    if context.enter is None:
        return sc.call(func, *args, into="state")
    return sc.call(context.enter, func, *args, into="state")


# --- the plugin's part: parametrize by device and creation context

_PARAMETRIZED = pytest.StashKey[bool]()


def generate_tests(metafunc: pytest.Metafunc, plan: Any) -> bool:
    """Parametrize a MutableStateTests test by `device` and `context` (every creation context of
    each device the plan tests; a missing device's tests are skipped with its reason), after
    checking the class's settings (a bad one is a collection error of one line, naming it). True
    when it did; a second call for the same test does nothing. The plugin's pytest_generate_tests
    calls it."""
    cls = metafunc.cls
    if cls is None or not issubclass(cls, MutableStateTests) or "context" not in metafunc.fixturenames:
        return False
    if metafunc.definition.stash.get(_PARAMETRIZED, False):
        return True
    if SHOWN.run is not metafunc.config:  # a new run in this process: what an earlier one showed and built is not its
        SHOWN.start(metafunc.config)
        _PLAIN_BUILDS.clear()
    try:
        check_class(cls)
    except ValueError as exc:
        raise pytest.Collector.CollectError(str(exc)) from None  # pytest prints its message alone
    pairs = []
    for name in plan.parametrized:
        marks = pytest.mark.skip(reason=plan.skipped[name]) if name in plan.skipped else ()
        pairs += [pytest.param(name, c, id=f"{name}-{c.name}", marks=marks) for c in contexts_for(name)]
    metafunc.parametrize("device,context", pairs)
    metafunc.definition.stash[_PARAMETRIZED] = True
    return True


def check_class(cls: type[MutableStateTests]) -> None:
    """A MutableStateTests class builds something, and its exclusions and skipped contexts are well
    formed; ValueError names the setting that is not."""
    where = f"{cls.__module__}.{cls.__qualname__}"
    if cls.make_state is MutableStateTests.make_state:
        raise ValueError(f"{where}: override make_state(self, device) to build the object under test")
    try:
        normalize_exclusions(cls.exclude, "state")
    except ValueError as exc:
        raise ValueError(f"{where}.{exc}") from None
    known = {c.name for name in devices.NAMES for c in contexts_for(name)}
    for name, reason in cls.skip_contexts.items():
        if name not in known:
            raise ValueError(f"{where}.skip_contexts: unknown context {name!r}; expected one of "
                             + ", ".join(sorted(known)))
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"{where}.skip_contexts[{name!r}]: give the reason it is never built there")
