"""The seed's bug in any engine object (issues 25 and 29): the walk (state_walk.py: partials,
bound methods, closures and defaults too), the checks (state_checks.py: a view made in a mode is
updated in grad mode too; placement), `assert_mutable_state`, and `MutableStateTests` in a
project's own pytest run with the plugin, down to its standalone reproducers and what the
terminal prints (state_report.py).

Each engine-shaped broken class (engine_states.py) must be rejected on the path that holds the
inference tensor, in exactly the creation contexts that make one; each fixed class must pass
in every context.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import re
import subprocess
import sys
import textwrap
import types
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import engine_states as es
import numpy as np
import pytest
import torch

from cpugpu_conformance.testing import MutableStateTests, assert_mutable_state
from cpugpu_conformance.testing.engine.checks import in_place_refusal, placed_as
from cpugpu_conformance.testing.engine.mutable_state import check_class, check_state
from cpugpu_conformance.testing.engine.report import PhaseOutcome, Shown, message, misplaced
from cpugpu_conformance.testing.engine.walk import WalkLimit, set_elements, walk
from cpugpu_conformance.testing.shared.contexts import contexts_for

REPO = Path(__file__).resolve().parent.parent
SEED_ERROR = "Inplace update to inference tensor outside InferenceMode is not allowed"
CPU_CONTEXTS = [c.name for c in contexts_for("cpu")]
# The contexts in which what runs is in inference mode: a lazy allocation there makes an inference tensor.
INFERENCE_CONTEXTS = {"inference_mode", "nested_inference_mode", "no_grad_inside_inference_mode",
                      "decorated_inference_mode", "thread_in_inference_mode"}
# The contexts in which grad mode is on where warm_up runs: switching it off there is a change.
GRAD_ON_CONTEXTS = {"plain", "inference_mode_false_inside_inference_mode", "thread", "default_device_meta",
                    "set_default_device_meta", "set_default_dtype_float16"}


def inference(*size, **kwargs):
    with torch.inference_mode():
        return torch.zeros(*size, **kwargs)


def names(message: str, path: str) -> bool:
    """Whether a failure names `path`: on a line of its own, or with what was found there."""
    return f"\n  {path}\n" in message or f"\n  {path}: " in message


def paths(obj, **kwargs) -> list[str]:
    return [path for path, _ in walk(obj, **kwargs).tensors]


def built_in_inference_mode(cls, device="cpu"):
    """Built plainly, warmed up in inference mode: the engines' warm-up."""
    state = cls(torch.device(device))
    with torch.inference_mode():
        state.warm_up()
    return state


# --- the walk: what it reaches, by which path


class Slotted:
    __slots__ = ("a", "__private", "unset")

    def __init__(self, a, private):
        self.a = a
        self.__private = private


class SlottedChild(Slotted):
    __slots__ = ("b",)

    def __init__(self, a, private, b):
        super().__init__(a, private)
        self.b = b


@dataclass
class Frame:
    __slots__ = ("kv",)
    kv: Any


class Pair(NamedTuple):
    k: Any
    v: Any


class Everything:
    """A tensor in every kind of place the walk goes."""

    def __init__(self):
        self.attr = torch.zeros(1)
        self.dict = {"k": torch.zeros(2), 3: torch.zeros(3), ("a", 1): torch.zeros(4), None: torch.zeros(5)}
        self.odd_keys = {1.5: torch.zeros(6), object(): torch.zeros(7)}
        self.tensor_key = {torch.zeros(8): "a tensor used as a key"}
        self.seq = [torch.zeros(9), (torch.zeros(10), [torch.zeros(11)])]
        self.deque = collections.deque([torch.zeros(12)])
        self.set = {torch.zeros(13, dtype=torch.int64), torch.zeros(13)}
        self.frozen = frozenset({torch.zeros(14)})
        self.slots = SlottedChild(torch.zeros(15), torch.zeros(16), torch.zeros(17))
        self.frame = Frame(torch.zeros(18))
        self.pair = Pair(torch.zeros(19), torch.zeros(20))
        self.proxy = types.MappingProxyType({"p": torch.zeros(21)})
        self.model = torch.nn.Sequential(torch.nn.Linear(2, 2))
        self.model.register_buffer("steps", torch.zeros(22))
        self.leaf = torch.zeros(23, requires_grad=True)
        self.leaf.grad = torch.ones(23)
        setattr(self, "not-an-identifier", torch.zeros(24))


def test_every_tensor_is_reached_by_a_path_that_evaluates_to_it():
    state = Everything()
    found = walk(state).tensors
    assert len(found) == 28, [p for p, _ in found]  # 25 made here, the Linear's two, one .grad
    for path, tensor in found:
        assert eval(path, {"state": state, "set_elements": set_elements}) is tensor, path
    by_path = dict(found)
    for path in ("state.attr", "state.dict['k']", "state.dict[3]", "state.dict[('a', 1)]", "state.dict[None]",
                 "list(state.odd_keys.values())[0]", "list(state.odd_keys.values())[1]", "list(state.tensor_key)[0]",
                 "state.seq[0]", "state.seq[1][0]", "state.seq[1][1][0]", "state.deque[0]",
                 "set_elements(state.set)[0]", "set_elements(state.set)[1]", "set_elements(state.frozen)[0]",
                 "state.slots.a", "state.slots._Slotted__private", "state.slots.b", "state.frame.kv",
                 "state.pair[0]", "state.pair[1]", "state.proxy['p']", "getattr(state.model, '0').weight",
                 "state.model.steps", "state.leaf", "state.leaf.grad", "getattr(state, 'not-an-identifier')"):
        assert path in by_path, (path, sorted(by_path))


def test_a_module_is_walked_by_its_registered_names():
    model = torch.nn.Module()
    model.proj = torch.nn.Linear(3, 3)
    model.register_buffer("cache", torch.zeros(2), persistent=False)
    model.register_parameter("unset", None)
    model.plain = torch.zeros(1)  # not registered: an attribute like any other
    assert paths(model, root="model") == ["model.cache", "model.plain", "model.proj.weight", "model.proj.bias"]


def test_the_order_is_the_objects_own_and_the_same_for_equal_objects():
    assert paths(Everything()) == paths(Everything())
    state = types.SimpleNamespace(b=torch.zeros(1), a=torch.zeros(1), nested=types.SimpleNamespace(c=torch.zeros(1)))
    assert paths(state) == ["state.b", "state.a", "state.nested.c"]  # breadth first, attributes as set


def test_sets_are_ordered_by_dtype_shape_and_device_not_by_hash():
    a, b, c = torch.zeros(3, dtype=torch.int64), torch.zeros(2), torch.zeros(1)
    for members in ([a, b, c], [c, b, a], [b, a, c]):
        assert set_elements(set(members)) == [c, b, a]


def test_an_alias_is_named_once_by_its_shortest_path():
    shared = torch.zeros(2)
    state = types.SimpleNamespace(deep=types.SimpleNamespace(inner=[shared]), top=shared)
    assert paths(state) == ["state.top"]


class Cyclic:
    def __init__(self):
        self.me = self
        self.box = [self, torch.zeros(1)]
        self.box.append(self.box)
        self.peer = types.SimpleNamespace(back=self, t=torch.zeros(2))
        self.table = {}
        self.table["self"] = self.table


def test_cycles_end_the_walk_and_each_tensor_is_found_once():
    assert paths(Cyclic()) == ["state.box[1]", "state.peer.t"]


def test_thousands_of_tensors_are_each_found_once():
    state = types.SimpleNamespace(
        layers=[types.SimpleNamespace(w=torch.zeros(2), cache={"k": torch.zeros(1), "v": torch.zeros(1)})
                for _ in range(2000)],
        pool={i: torch.zeros(1) for i in range(3000)},
    )
    state.aliases = [layer.w for layer in state.layers]  # a second, shorter path to each w
    found = walk(state).tensors
    assert len(found) == 2000 * 3 + 3000
    assert len({id(t) for _, t in found}) == len(found)
    by_path = dict(found)
    assert all(by_path[f"state.aliases[{i}]"] is layer.w for i, layer in enumerate(state.layers))
    assert not any(".w" in path for path in by_path)  # each w once, by its shortest path
    assert found[0][0] == "state.pool[0]" and found[-1][0] == "state.layers[1999].cache['v']"


class Node:
    def __init__(self, nxt):
        self.next = nxt


def linked(n: int) -> Node:
    head = None
    for _ in range(n):
        head = Node(head)
    return head


def test_a_long_linked_structure_is_walked_without_recursion():
    head = linked(50_000)
    node = head
    while node.next is not None:
        node = node.next
    node.payload = torch.zeros(1)
    found = walk(head, max_depth=60_000).tensors
    assert len(found) == 1 and found[0][0].endswith(".next.payload") and found[0][0].count(".next") == 49_999


def test_past_the_depth_limit_the_walk_stops_and_says_where():
    with pytest.raises(WalkLimit, match=r"deeper than max_depth=100 steps \(at state\.next\.next.* \.\.\. .*\(101 steps\)"):
        walk(linked(500), max_depth=100)


def test_past_the_item_limit_the_walk_stops_and_says_how_to_go_on():
    state = types.SimpleNamespace(tokens=list(range(10_000)))
    with pytest.raises(WalkLimit, match=r"more than max_items=1000 things \(at state\.tokens\[\d+\]\): exclude"):
        walk(state, max_items=1000)
    # Excluded, the large container is not walked into.
    assert walk(state, max_items=1000, exclude={"tokens": "token ids, no tensors"}).excluded == {
        "state.tokens": "token ids, no tensors"}


class Lazy:
    """Tensors behind a property and __getattr__: computed, not held; the walk never calls them."""

    calls = 0

    @property
    def computed(self):
        Lazy.calls += 1
        return inference(1)

    def __getattr__(self, name):
        Lazy.calls += 1
        return inference(1)


def test_the_walk_never_calls_properties_or_getattr():
    state = Lazy()
    state.held = torch.zeros(1)
    assert paths(state) == ["state.held"] and Lazy.calls == 0


GLOBAL_TENSOR = inference(1)  # a module's: a function that reads it does not hold it


def reads_a_global():
    return GLOBAL_TENSOR


def test_the_walk_does_not_enter_tensors_modules_classes_globals_generators_or_torch_internals():
    t = torch.zeros(1)
    t.hidden = inference(1)  # a tensor's own attribute: no state of the object's

    class Holder:
        secret = inference(1)  # a class attribute: the class's, not the object's

        def method(self, default=inference(1)):  # noqa: B008  (the class's function: its defaults are the class's)
            return default

    def function():
        return None

    function.attribute = inference(1)  # a function's attribute: not what it keeps alive to run
    hidden_ref = inference(1)

    def generator(local=None):
        local = inference(1)  # a suspended frame's local: no attribute of anything, changes at every step
        yield local

    gen = generator()
    next(gen)
    state = types.SimpleNamespace(t=t, cls=Holder, module=types.ModuleType("m", None), f=function,
                                  method=Holder().method, ref=weakref.ref(Holder), rng=torch.Generator(),
                                  array=np.zeros(2), dtype=torch.float32, device=torch.device("cpu"),
                                  exc=ValueError(hidden_ref), reads=reads_a_global, gen=gen, builtin=len)
    state.module.x = inference(1)
    assert paths(state) == ["state.t"]


@pytest.mark.parametrize("cls", [es.PartialKernel, es.BoundWriter, es.ClosureStep, es.DefaultArgument],
                         ids=lambda c: c.__name__)
def test_the_walk_follows_partials_bound_methods_closures_and_defaults(cls):
    state = cls(torch.device("cpu"))
    state.warm_up()
    found = walk(state).tensors
    assert [path for path, _ in found] == [cls.BAD_PATH]
    assert eval(cls.BAD_PATH, {"state": state}) is found[0][1]  # a path that is Python


def test_a_partials_func_args_and_keywords_and_a_builtin_methods_self_are_walked():
    ws = es.Cache(torch.zeros(1))
    kernel = functools.partial(es.Cache(torch.zeros(2)).write, torch.zeros(3), out=torch.zeros(4))
    t = torch.zeros(5)
    state = types.SimpleNamespace(kernel=kernel, add=t.add_, run=ws.write, lam=lambda: None)
    assert paths(state) == ["state.add.__self__", "state.kernel.args[0]", "state.kernel.keywords['out']",
                            "state.run.__self__.buf", "state.kernel.func.__self__.buf"]


def test_a_closure_cell_not_filled_yet_is_passed_over():
    def outer():
        def inner():
            return later

        state = types.SimpleNamespace(f=inner)
        found = paths(state)
        later = torch.zeros(1)
        return found, paths(state)

    before, after = outer()
    assert before == [] and after == ["state.f.__closure__[0].cell_contents"]


@pytest.mark.parametrize("cls, use", [
    (es.PartialKernel, lambda s: s.step()),
    (es.BoundWriter, lambda s: s.write(torch.ones(4))),
    (es.ClosureStep, lambda s: s.step()),
    (es.DefaultArgument, lambda s: s.fill(torch.ones(4))),
], ids=lambda x: getattr(x, "__name__", ""))
def test_a_tensor_only_a_callable_holds_is_rejected_and_the_engine_hits_it(cls, use):
    state = built_in_inference_mode(cls)
    with pytest.raises(AssertionError) as caught:
        assert_mutable_state(state)
    assert names(str(caught.value), cls.BAD_PATH) and SEED_ERROR in str(caught.value), str(caught.value)
    with pytest.raises(RuntimeError, match=SEED_ERROR):  # its first use outside inference mode
        use(state)


@pytest.mark.parametrize("cls", [es.FixedPartialKernel, es.FixedKeywordKernel, es.CachedWorkspace],
                         ids=lambda c: c.__name__)
def test_partial_held_and_cached_workspaces_that_are_fixed_pass_and_take_their_updates(cls):
    state = built_in_inference_mode(cls)
    checked = assert_mutable_state(state)
    assert checked.checked == 1 and not checked.bad
    if hasattr(state, "step"):
        assert torch.equal(state.step(), torch.ones(8))
    assert [p for p, _ in walk(state).tensors] == [getattr(cls, "PATH", None) or
                                                   {"CachedWorkspace": "state.workspace"}.get(cls.__name__,
                                                                                              "state.kernel.args[0]")]


# --- a view that requires grad, made in a mode: refused in grad mode (issue 29)


def test_a_view_of_a_parameter_made_in_inference_mode_is_refused_in_grad_mode_only():
    state = built_in_inference_mode(es.ParameterView)
    head = state.head
    assert not head.is_inference() and head.requires_grad
    with torch.no_grad():
        head.copy_(head)  # under no_grad() torch takes the update: the old check passed it
    with pytest.raises(RuntimeError, match="A view was created in inference mode and is being modified inplace"):
        head.copy_(head)
    with pytest.raises(AssertionError) as caught:
        assert_mutable_state(state)
    message = str(caught.value)
    assert message.startswith("state: 1 of 2 tensors would refuse an in-place update"), message
    assert ("\n  state.head: a view that requires grad: an in-place update in grad mode raised RuntimeError: "
            "A view was created in inference mode") in message
    assert "state.weight" not in message  # the parameter itself is no view: updated under no_grad(), as engines do


def test_a_view_made_under_no_grad_is_refused_in_grad_mode_too():
    state = es.ParameterView(torch.device("cpu"))
    with torch.no_grad():
        state.warm_up()
    bad = check_state(state).bad
    assert [path for path, _ in bad] == ["state.head"] and "created in no_grad mode" in bad[0][1], bad


def test_what_the_grad_mode_check_rejects_is_what_the_serving_loop_hits():
    broken, fixed = built_in_inference_mode(es.EmbeddingRows), built_in_inference_mode(es.FixedEmbeddingRows)
    assert [p for p, _ in check_state(broken).bad] == ["state.rows"]
    with pytest.raises(RuntimeError, match="A view was created in inference mode"):
        broken.serve()
    assert assert_mutable_state(fixed).checked == 3
    fixed.serve()


def test_views_of_parameters_made_plainly_pass_and_get_no_graph_from_the_check():
    state = built_in_inference_mode(es.FixedParameterView)
    assert assert_mutable_state(state).checked == 2  # autograd's own rule for leaves is not the state's fault
    assert state.weight.grad_fn is None and state.head.requires_grad  # no graph written into them
    leaf = torch.nn.Parameter(torch.zeros(3))
    assert in_place_refusal(leaf) is None and in_place_refusal(leaf[:2]) is None and in_place_refusal(leaf * 2) is None
    base = torch.ones(3)
    with torch.inference_mode():
        unbound = base[:2]  # a view made in inference mode that requires no grad: grad mode is no matter
    assert in_place_refusal(unbound) is None


# --- the name a failure's paths start with (issue 29)


@pytest.mark.parametrize("name", ["InputBuffers(new", "", "class", "engine..runner", "runner.", "9lives", "a b",
                                  "state['x']", 3, None])
def test_a_name_that_is_not_python_is_refused_in_one_line(name):
    with pytest.raises(ValueError) as caught:
        assert_mutable_state(torch.zeros(1), name=name)
    text = str(caught.value)
    assert "\n" not in text and text == (f"assert_mutable_state: name={name!r} is not a Python identifier or dotted "
                                         "path (e.g. 'runner' or 'engine.runner'): every path it prints starts with it")


@pytest.mark.parametrize("name", ["runner", "engine.runner", "_private", "self.model.cache", "état"])
def test_a_name_that_is_python_starts_every_path(name):
    with pytest.raises(AssertionError, match=rf"\n  {re.escape(name)}\.bad: an inference tensor"):
        assert_mutable_state(types.SimpleNamespace(good=torch.zeros(1), bad=inference(1)), name=name)


# --- exclusions


def weights_and_cache():
    return es.WeightsAndCache(torch.device("cpu"))


@pytest.mark.parametrize("key", ["weights.w", "state.weights.w"])
def test_an_exclusion_by_path_is_recorded_never_silent(key):
    checked = assert_mutable_state(weights_and_cache(), exclude={key: "read-only weights, made in inference mode on purpose"})
    assert checked.checked == 1 and checked.excluded == {
        "state.weights.w": "read-only weights, made in inference mode on purpose"}


def test_without_the_exclusion_the_weights_are_rejected():
    with pytest.raises(AssertionError, match=r"state\.weights\.w: an inference tensor"):
        assert_mutable_state(weights_and_cache())


def test_an_exclusion_that_matches_no_path_is_an_error():
    with pytest.raises(AssertionError, match=r"stale exclusion 'state\.weigths\.w' \(typo\): the walk found no tensor"):
        assert_mutable_state(weights_and_cache(), exclude={"weights.w": "ok", "weigths.w": "typo"})


def test_an_exclusion_inside_an_excluded_path_is_stale_and_says_so():
    with pytest.raises(AssertionError, match=r"stale exclusion 'state\.weights\.w'.*inside the excluded state\.weights"):
        assert_mutable_state(weights_and_cache(), exclude={"weights": "all of it", "weights.w": "and this"})


@pytest.mark.parametrize("exclude, culprit", [({"weights.w": ""}, "give the reason"), ({"": "why"}, "is no path"),
                                              ({"weights.w": None}, "give the reason"),
                                              (["weights.w"], "exclude: expected a dict of path -> reason")])
def test_an_exclusion_without_a_reason_or_path_is_refused(exclude, culprit):
    with pytest.raises(ValueError, match=culprit):
        assert_mutable_state(weights_and_cache(), exclude=exclude)


def test_an_excluded_alias_reached_first_elsewhere_is_checked_there_and_says_so():
    w = inference(2)
    state = types.SimpleNamespace(model=types.SimpleNamespace(w=w), weights=types.SimpleNamespace(w=w))
    checked = check_state(state, {"weights.w": "read-only"})
    assert checked.bad and checked.bad[0][0] == "state.model.w"
    assert checked.excluded == {"state.weights.w": "read-only (the same object is reached first at state.model.w, "
                                                   "and checked there)"}


# --- the checks on one tensor


def test_an_ordinary_tensor_of_any_dtype_and_layout_takes_the_update_and_keeps_its_data():
    values = torch.tensor([-0.0, float("nan"), float("inf"), 1.5])
    tensors = [values.clone(), torch.zeros(1).expand(5), torch.zeros(3, 3).t(), torch.zeros(3, 3).to_sparse(),
               torch.zeros(3, dtype=torch.float8_e4m3fn), torch.zeros(3, dtype=torch.bool),
               torch.zeros(3, device="meta"), torch.zeros(2, requires_grad=True)]
    for t in tensors:
        assert in_place_refusal(t) is None, t
    kept = tensors[0]
    assert torch.equal(kept.view(torch.int32), values.view(torch.int32))  # bitwise: -0.0 and nan too


def test_a_tensor_that_requires_grad_gets_no_graph_from_the_check():
    leaf = torch.zeros(2, requires_grad=True)
    nonleaf = leaf * 2
    grad_fn = nonleaf.grad_fn
    assert in_place_refusal(leaf) is None and in_place_refusal(nonleaf) is None
    assert leaf.grad_fn is None and nonleaf.grad_fn is grad_fn


def test_an_inference_tensor_is_refused_with_the_seeds_error():
    why = in_place_refusal(inference(3))
    assert why.startswith("an inference tensor") and SEED_ERROR in why
    assert "outside inference mode raised RuntimeError" in why and "inside" not in why


@pytest.mark.parametrize("mode", ["plain", "no_grad", "inference_mode"])
def test_the_check_is_the_same_in_any_mode_of_the_caller_and_leaves_it(mode):
    state = types.SimpleNamespace(good=torch.zeros(1), bad=inference(1))
    enter = {"plain": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}[mode]
    with enter():
        before = (torch.is_grad_enabled(), torch.is_inference_mode_enabled())
        checked = check_state(state)
        assert (torch.is_grad_enabled(), torch.is_inference_mode_enabled()) == before
    assert [path for path, _ in checked.bad] == ["state.bad"]


def test_an_object_with_no_tensor_is_not_a_pass():
    with pytest.raises(AssertionError, match="could not be checked, which is no pass:\n  nothing checked: no tensor"):
        assert_mutable_state(es.LazyWorkspace(torch.device("cpu")))  # never warmed up: nothing allocated yet
    with pytest.raises(AssertionError, match=r"reachable from state \(1 excluded\).*\n  excluded: state \(all of it\)"):
        assert_mutable_state(torch.zeros(1), exclude={"state": "all of it"})


def test_a_tensor_is_a_state_of_its_own():
    assert assert_mutable_state(torch.zeros(2)).checked == 1
    with pytest.raises(AssertionError, match="\n  state: an inference tensor"):
        assert_mutable_state(inference(2))


# --- the engine-shaped classes, one object at a time


@pytest.mark.parametrize("broken, fixed", es.BROKEN_AND_FIXED, ids=[b.__name__ for b, _ in es.BROKEN_AND_FIXED])
def test_each_broken_engine_state_is_rejected_on_its_path_and_its_fix_passes(broken, fixed):
    with pytest.raises(AssertionError) as caught:
        assert_mutable_state(built_in_inference_mode(broken))
    message = str(caught.value)
    assert names(message, broken.BAD_PATH) and "an inference tensor" in message and SEED_ERROR in message, message
    checked = assert_mutable_state(built_in_inference_mode(fixed))
    assert checked.checked >= 1 and not checked.bad


def test_the_failure_names_every_bad_path():
    with pytest.raises(AssertionError) as caught:
        assert_mutable_state(built_in_inference_mode(es.RequestTables), name="tables_owner")
    lines = str(caught.value).splitlines()
    assert lines[0] == ("tables_owner: 2 of 2 tensors would refuse an in-place update "
                        "(promise 3, Mutable wherever they were made):")
    # Each path on a line of its own, then the refusal they share, once.
    assert lines[1:3] == ["  tables_owner.tables['default'][0]", "  tables_owner.tables['default'][1]"]
    assert lines[3].startswith("    refused: an inference tensor") and SEED_ERROR in lines[3] and len(lines) == 4


def test_what_the_check_rejects_is_what_the_engine_hits():
    """The walk's verdict and the serving loop agree: the broken workspace raises the seed's error
    when updated outside inference mode, the fixed one does not."""
    broken, fixed = built_in_inference_mode(es.LazyWorkspace), built_in_inference_mode(es.FixedLazyWorkspace)
    with pytest.raises(RuntimeError, match=SEED_ERROR):
        broken.serve()
    fixed.serve()


def test_an_engine_with_a_cycle_passes_and_every_tensor_is_checked():
    engine = es.Engine(torch.device("cpu"))
    with torch.inference_mode():
        engine.warm_up()
    checked = assert_mutable_state(engine)
    assert checked.checked == 3  # the batch's two ids and the workspace


# --- MutableStateTests in a project's own pytest run, with the plugin

CONFTEST = '''
import json
import os

import pytest
import torch

pytest_plugins = ["cpugpu_conformance.testing.plugin"]  # the plugin parametrizes the state classes

REPORTS = []


@pytest.fixture(autouse=True)
def caller_state_put_back(request):
    before = (torch.is_grad_enabled(), torch.get_default_dtype())
    yield
    after = (torch.is_grad_enabled(), torch.get_default_dtype())
    if after != before:
        REPORTS.append({"leak": request.node.nodeid, "before": str(before), "after": str(after)})


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        message = str(report.longrepr) if report.longrepr else ""
        REPORTS.append({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                        "message": message, "properties": dict(report.user_properties)})


def pytest_sessionfinish(session):
    with open(os.environ["REPORTS_OUT"], "w") as out:
        json.dump(REPORTS, out)
'''

ENGINE_TESTS = '''
import torch

import engine_states as es
from engine_states import (Engine, FixedLazyWorkspace, FixedRequestTables, FixedRotaryModel, FixedScheduler,
                           GradSwitchingRunner, RequestTables, RotaryModel, Scheduler, WeightsAndCache)
from cpugpu_conformance.testing import MutableStateTests


class TestLazyWorkspace(MutableStateTests):
    def make_state(self, device):
        return es.LazyWorkspace(device)

    def warm_up(self, state):
        state.warm_up()


class TestFixedLazyWorkspace(MutableStateTests):
    size = 32

    def make_state(self, device):
        return FixedLazyWorkspace(device, size=self.size)

    def warm_up(self, state):
        state.warm_up()
{classes}

class TestWeightsExcluded(MutableStateTests):
    exclude = {{"weights.w": "read-only weights, loaded in inference mode on purpose"}}

    def make_state(self, device):
        return WeightsAndCache(device)


class TestWeightsNotExcluded(MutableStateTests):
    def make_state(self, device):
        return WeightsAndCache(device)


class TestStaleExclusion(MutableStateTests):
    exclude = {{"weights.w": "read-only weights", "weights.bias": "there is no such tensor"}}

    def make_state(self, device):
        return WeightsAndCache(device)


class TestGradSwitching(MutableStateTests):
    def make_state(self, device):
        return GradSwitchingRunner(device)

    def warm_up(self, state):
        state.warm_up()


class Pool:
    """Free blocks in a set, allocated in inference mode; defined here, so the reproducer holds its source."""

    def __init__(self, device):
        with torch.inference_mode():
            self.free = {{torch.zeros(3, device=device), torch.zeros(2, device=device)}}


def make_pool(device):
    return Pool(device)


class TestPool(MutableStateTests):
    def make_state(self, device):
        return make_pool(device)


class TestRefusesInferenceMode(MutableStateTests):
    skip_contexts = {{"thread": "never built in a thread of its own"}}

    def make_state(self, device):
        if torch.is_inference_mode_enabled():
            raise RuntimeError("build me outside inference mode")
        return FixedLazyWorkspace(device)

    def warm_up(self, state):
        state.warm_up()
'''

SIMPLE_CLASS = '''

class Test{name}(MutableStateTests):
    def make_state(self, device):
        return {name}(device)

    def warm_up(self, state):
        state.warm_up()
'''


@dataclass
class ProjectRun:
    returncode: int
    output: str
    reports: list[dict[str, Any]]
    project: Path

    def outcomes(self, cls: str) -> dict[str, str]:
        """context -> outcome of the class's tests on the CPU."""
        return {r["properties"]["mutable_state"]["context"]: r["outcome"] for r in self.reports
                if f"::{cls}::" in r.get("nodeid", "") and "[cpu-" in r["nodeid"]}

    def report(self, cls: str, context: str, device: str = "cpu") -> dict[str, Any]:
        return next(r for r in self.reports if r.get("nodeid", "").endswith(f"{cls}::test_mutable_state[{device}-{context}]"))

    def record(self, cls: str, context: str, device: str = "cpu") -> dict[str, Any]:
        return self.report(cls, context, device)["properties"]["mutable_state"]


def env_with_tests() -> dict[str, str]:
    path = os.pathsep.join([str(REPO / "src"), str(REPO / "tests")])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    return {**env, "PYTHONPATH": path}


def run_project(root: Path, files: dict[str, str], *args: str) -> ProjectRun:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    out = root / "reports.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=root,
                          capture_output=True, text=True, timeout=300, env={**env_with_tests(), "REPORTS_OUT": str(out)})
    reports = json.loads(out.read_text()) if out.exists() else []
    return ProjectRun(proc.returncode, proc.stdout + proc.stderr, reports, root)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> ProjectRun:
    names = ["RequestTables", "FixedRequestTables", "RotaryModel", "FixedRotaryModel", "Scheduler", "FixedScheduler",
             "Engine"]
    tests = ENGINE_TESTS.format(classes="".join(SIMPLE_CLASS.format(name=n) for n in names))
    return run_project(tmp_path_factory.mktemp("ours"), {"conftest.py": CONFTEST, "test_engines.py": tests})


def test_each_class_is_a_test_per_device_and_creation_context(project):
    assert project.returncode == 1, project.output[-3000:]
    for cls in ("TestLazyWorkspace", "TestFixedRotaryModel", "TestWeightsExcluded"):
        assert sorted(project.outcomes(cls)) == sorted(CPU_CONTEXTS), project.outcomes(cls)
    assert not [r for r in project.reports if "leak" in r], "a test left the caller's grad mode or dtype changed"


@pytest.mark.parametrize("cls", ["TestFixedLazyWorkspace", "TestFixedRequestTables", "TestFixedRotaryModel",
                                 "TestFixedScheduler", "TestEngine", "TestWeightsExcluded"])
def test_the_fixed_classes_pass_in_every_context(project, cls):
    outcomes = project.outcomes(cls)
    assert outcomes == dict.fromkeys(CPU_CONTEXTS, "passed"), outcomes
    record = project.record(cls, "inference_mode")
    assert record["checked"] >= 1 and record["bad_paths"] == [] and record["broken"] == [], record
    assert record["promises"] == ["3", "12"] and record["reproducer"] is None


def test_the_lazy_workspace_fails_exactly_where_its_warm_up_runs_in_inference_mode(project):
    failed = {c for c, outcome in project.outcomes("TestLazyWorkspace").items() if outcome == "failed"}
    assert failed == INFERENCE_CONTEXTS
    record = project.record("TestLazyWorkspace", "decorated_inference_mode")
    assert [(b["path"], b["phase"]) for b in record["bad_paths"]] == [
        ("state.workspace", "built and warmed up in context decorated_inference_mode"),
        ("state.workspace", "built in the plain context, warmed up in context decorated_inference_mode")]
    assert record["broken"] == ["3"] and SEED_ERROR in record["bad_paths"][0]["why"]


@pytest.mark.parametrize("cls, bad_paths", [
    ("TestRequestTables", ["state.tables['default'][0]", "state.tables['default'][1]"]),
    ("TestRotaryModel", ["state.rotary.cos_sin_cache"]),
    ("TestScheduler", ["state.batch.ids[1]"]),
    ("TestWeightsNotExcluded", ["state.weights.w"]),
])
def test_a_class_broken_in_every_context_is_rejected_on_its_path_in_each(project, cls, bad_paths):
    assert project.outcomes(cls) == dict.fromkeys(CPU_CONTEXTS, "failed")
    plain = project.record(cls, "plain")
    assert [b["path"] for b in plain["bad_paths"]] == bad_paths, plain["bad_paths"]
    message = project.report(cls, "plain")["message"]
    assert message.startswith(f"{cls}, device cpu, context plain: promise 3 (Mutable wherever they were made) broken")
    refusal = ("an inference tensor (made under torch.inference_mode()); an in-place update outside inference mode "
               f"raised RuntimeError: {SEED_ERROR}")
    for path in bad_paths:
        assert names(message, path), message
    assert message.count(refusal) == 1, message  # the torch message once, after the paths it refuses


def test_a_module_built_in_inference_mode_has_inference_parameters_too(project):
    record = project.record("TestRotaryModel", "inference_mode")
    first_phase = [b["path"] for b in record["bad_paths"] if b["phase"].startswith("built and warmed up")]
    assert first_phase == ["state.proj.weight", "state.proj.bias", "state.rotary.inv_freq",
                           "state.rotary.cos_sin_cache"]


def test_an_exclusion_is_recorded_and_a_stale_one_fails(project):
    record = project.record("TestWeightsExcluded", "plain")
    assert record["excluded"] == {"state.weights.w": "read-only weights, loaded in inference mode on purpose"}
    assert project.outcomes("TestStaleExclusion") == dict.fromkeys(CPU_CONTEXTS, "failed")
    message = project.report("TestStaleExclusion", "plain")["message"]
    assert "stale exclusion 'state.weights.bias' (there is no such tensor): the walk found no tensor" in message


def test_a_class_that_changes_the_callers_grad_mode_breaks_promise_12(project):
    failed = {c for c, outcome in project.outcomes("TestGradSwitching").items() if outcome == "failed"}
    assert failed == GRAD_ON_CONTEXTS
    record = project.record("TestGradSwitching", "plain")
    assert record["broken"] == ["12"] and record["bad_paths"] == []
    assert record["caller_state_changes"] == ["warm_up changed the caller's grad mode from True to False"]


def test_a_class_that_cannot_be_built_in_a_context_fails_there_and_a_skipped_context_is_untested(project):
    outcomes = project.outcomes("TestRefusesInferenceMode")
    assert {c for c, o in outcomes.items() if o == "failed"} == INFERENCE_CONTEXTS
    assert outcomes["thread"] == "skipped"
    skipped = project.report("TestRefusesInferenceMode", "thread")
    assert "never built in a thread of its own" in skipped["message"]
    assert skipped["properties"]["mutable_state"]["skipped"] == "never built in a thread of its own"
    message = project.report("TestRefusesInferenceMode", "inference_mode")["message"]
    assert "raised RuntimeError: build me outside inference mode" in message
    assert project.record("TestRefusesInferenceMode", "inference_mode")["broken"] == ["3"]


def test_every_failure_has_its_reproducer_and_the_terminal_prints_one_per_class_and_cause(project):
    printed: dict[str, list[str]] = collections.defaultdict(list)  # class -> the contexts whose failure holds one
    for r in project.reports:
        if r.get("outcome") != "failed":
            continue
        record = r["properties"]["mutable_state"]
        assert record["reproducer"] and record["reproducers"][0]["reproducer"] == record["reproducer"], r["nodeid"]
        cls = r["nodeid"].split("::")[1]
        if "\n\nReproducer (" in r["message"]:
            scripts = [x["reproducer"].rstrip() for x in record["reproducers"]]
            assert any(r["message"].rstrip().endswith(script) for script in scripts), r["nodeid"]
            assert r["message"].count("\n\nReproducer (") == len({x["cause"] for x in record["reproducers"]})
            printed[cls].append(record["context"])
        else:  # an earlier failure of its class printed it, and this one says where
            assert "\nreproducer: as printed for context " in r["message"] and printed[cls], r["nodeid"]
            where = r["message"].split("\nreproducer: as printed for context ")[1].split(" above")[0]
            assert set(where.split(", ")) <= set(printed[cls]), (r["nodeid"], where, printed[cls])
    assert printed["TestLazyWorkspace"] == ["inference_mode"]  # one cause, one reproducer, in five failures


def run_reproducer(project: ProjectRun, script: str, name: str) -> subprocess.CompletedProcess[str]:
    path = project.project / name
    path.write_text(script)
    return subprocess.run([sys.executable, str(path)], cwd=project.project, capture_output=True, text=True,
                          timeout=120, env=env_with_tests())


def test_the_reproducer_stands_alone_and_fails_with_the_seeds_error(project):
    script = project.record("TestLazyWorkspace", "thread_in_inference_mode")["reproducer"]
    assert "import engine_states as es\n" in script and "def make_state(self, device):\n" in script
    assert "def thread_in_inference_mode(make, *args):" in script and "import threading" in script
    assert "mutable_in_place('state.workspace', state.workspace)\n" in script
    assert "cpugpu_conformance" not in script.split("# Run:")[1]  # torch and the class's modules only
    run = run_reproducer(project, script, "repro_lazy.py")
    assert run.returncode == 1 and "AssertionError: state.workspace: an inference tensor" in run.stderr, run.stderr
    assert SEED_ERROR in run.stderr
    # The same script with the fixed class in it: the promise holds.
    fixed = run_reproducer(project, script.replace("es.LazyWorkspace(", "es.FixedLazyWorkspace("), "repro_fixed.py")
    assert fixed.returncode == 0 and fixed.stdout.strip() == "ok: the promise held", fixed.stderr


def test_the_reproducer_imports_what_make_state_reads_and_holds_its_settings(project):
    script = project.record("TestRequestTables", "plain")["reproducer"]
    assert "from engine_states import RequestTables\n" in script
    run = run_reproducer(project, script, "repro_tables.py")
    assert run.returncode == 1 and "state.tables['default'][0]: an inference tensor" in run.stderr, run.stderr
    fixed = script.replace("from engine_states import RequestTables\n",
                           "from engine_states import FixedRequestTables as RequestTables\n")
    assert run_reproducer(project, fixed, "repro_tables_fixed.py").returncode == 0


def test_the_reproducer_of_a_promise_12_failure_fails_on_the_callers_state(project):
    script = project.record("TestGradSwitching", "thread")["reproducer"]
    run = run_reproducer(project, script, "repro_grad.py")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "AssertionError: warm_up changed the caller's grad mode from True to False" in run.stderr


def test_the_reproducer_holds_what_the_test_module_defines(project, tmp_path):
    script = project.record("TestPool", "plain")["reproducer"]
    assert script.index("class Pool:") < script.index("def make_pool(device):") < script.index("class Tests:")
    assert "test_engines" in script and "import test_engines" not in script and "from test_engines" not in script
    path = tmp_path / "reproducer.py"  # away from the project: it needs nothing of it
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 1 and "AssertionError: set_elements(state.free)[0]: an inference tensor" in run.stderr, \
        run.stderr
    bad = [b["path"] for b in project.record("TestPool", "plain")["bad_paths"]]
    assert bad == ["set_elements(state.free)[0]", "set_elements(state.free)[1]"]


@pytest.mark.parametrize("settings, culprit", [
    ({"skip_contexts": {"nope": "x"}}, "TestOurs.skip_contexts: unknown context 'nope'; expected one of"),
    ({"skip_contexts": {"thread": " "}}, "TestOurs.skip_contexts['thread']: give the reason"),
    ({"exclude": {"w": ""}}, "TestOurs.exclude['w']: give the reason the tensor is excluded"),
    ({"make_state": None}, "TestOurs: override make_state(self, device)"),
])
def test_a_bad_setting_is_refused_naming_it(settings, culprit):
    members = {"make_state": lambda self, device: object(), **settings}
    if members["make_state"] is None:
        del members["make_state"]
    cls = type("TestOurs", (MutableStateTests,), members)
    with pytest.raises(ValueError) as caught:
        check_class(cls)
    assert culprit in str(caught.value)


def test_a_bad_setting_is_a_one_line_collection_error_in_a_run(tmp_path):
    tests = '''
    from cpugpu_conformance.testing import MutableStateTests

    class TestOurs(MutableStateTests):
        skip_contexts = {"nope": "x"}

        def make_state(self, device):
            return None
    '''
    run = run_project(tmp_path, {"conftest.py": CONFTEST, "test_ours.py": tests})
    assert run.returncode == 2, run.output
    assert "\ntest_ours.TestOurs.skip_contexts: unknown context 'nope'; expected one of" in run.output
    assert "Traceback" not in run.output and "generate_tests" not in run.output


def test_a_missing_device_is_skipped_with_its_reason_never_passed(tmp_path):
    tests = ENGINE_TESTS.format(classes="")
    run = run_project(tmp_path, {"conftest.py": CONFTEST, "test_engines.py": tests},
                      "--cpugpu-device", "all", "-k", "TestFixedLazyWorkspace")
    cuda = [r for r in run.reports if "[cuda-" in r.get("nodeid", "")]
    assert cuda, run.output[-2000:]
    if torch.cuda.is_available():
        assert {r["outcome"] for r in cuda} == {"passed"}, [r["message"] for r in cuda if r["outcome"] != "passed"]
    else:
        assert {r["outcome"] for r in cuda} == {"skipped"}
        assert all("no CUDA device" in r["message"] for r in cuda)
    assert {r["outcome"] for r in run.reports if "[cpu-" in r.get("nodeid", "")} == {"passed"}


# --- issue 29 in a project's own run: callables, views, placement, and a report a person can read

PLAIN_CLASS = """

class Test{name}(MutableStateTests):
    def make_state(self, device):
        return {name}(device)
"""
ISSUE_29_WARMED = ["PartialKernel", "FixedPartialKernel", "FixedKeywordKernel", "CachedWorkspace", "ParameterView",
                   "FixedParameterView", "PositionsWarmUp", "FixedPositionsWarmUp"]
ISSUE_29_PLAIN = ["ReqToTokenPool", "FixedReqToTokenPool", "Scales"]
META_CONTEXTS = {"default_device_meta", "set_default_device_meta"}


@pytest.fixture(scope="module")
def project29(tmp_path_factory) -> ProjectRun:
    names = ISSUE_29_WARMED + ISSUE_29_PLAIN
    tests = ("import torch\n\nfrom engine_states import " + ", ".join(names)
             + "\nfrom cpugpu_conformance.testing import MutableStateTests\n"
             + "".join(SIMPLE_CLASS.format(name=n) for n in ISSUE_29_WARMED)
             + "".join(PLAIN_CLASS.format(name=n) for n in ISSUE_29_PLAIN))
    return run_project(tmp_path_factory.mktemp("issue29"), {"conftest.py": CONFTEST, "test_engines.py": tests})


def failed_contexts(run: ProjectRun, cls: str) -> set[str]:
    return {c for c, outcome in run.outcomes(cls).items() if outcome == "failed"}


@pytest.mark.parametrize("cls", ["TestFixedPartialKernel", "TestFixedKeywordKernel", "TestCachedWorkspace",
                                 "TestFixedParameterView", "TestFixedReqToTokenPool", "TestFixedPositionsWarmUp"])
def test_fixed_objects_in_new_styles_pass_in_every_context(project29, cls):
    assert project29.outcomes(cls) == dict.fromkeys(CPU_CONTEXTS, "passed"), project29.outcomes(cls)
    record = project29.record(cls, "default_device_meta")
    assert record["checked"] >= 1 and record["placement"] == [] and record["broken"] == [], record


def test_a_workspace_only_a_partial_holds_is_rejected_where_the_warm_up_runs_in_inference_mode(project29):
    assert failed_contexts(project29, "TestPartialKernel") == INFERENCE_CONTEXTS
    record = project29.record("TestPartialKernel", "inference_mode")
    assert {b["path"] for b in record["bad_paths"]} == {"state.kernel.args[0]"} and record["broken"] == ["3"]
    script = record["reproducer"]
    assert "mutable_in_place('state.kernel.args[0]', state.kernel.args[0])\n" in script
    run = run_reproducer(project29, script, "repro_partial.py")
    assert run.returncode == 1 and "AssertionError: state.kernel.args[0]: an inference tensor" in run.stderr, run.stderr
    fixed = script.replace("import PartialKernel\n", "import FixedPartialKernel as PartialKernel\n")
    assert "FixedPartialKernel" in fixed and run_reproducer(project29, fixed, "repro_partial_fixed.py").returncode == 0


def test_a_view_of_a_parameter_taken_in_the_warm_up_is_rejected_in_grad_mode(project29):
    # Under no_grad() the view is made in no_grad mode: torch refuses it in grad mode all the same.
    assert failed_contexts(project29, "TestParameterView") == INFERENCE_CONTEXTS | {"no_grad"}
    record = project29.record("TestParameterView", "decorated_inference_mode")
    [bad] = {b["why"] for b in record["bad_paths"]}
    assert bad.startswith("a view that requires grad: an in-place update in grad mode raised RuntimeError: A view "
                          "was created in inference mode"), bad
    run = run_reproducer(project29, record["reproducer"], "repro_view.py")
    assert run.returncode == 1 and "AssertionError: state.head: a view that requires grad" in run.stderr, run.stderr


def test_a_tensor_made_without_a_device_is_a_placement_failure_under_a_default_device(project29):
    assert failed_contexts(project29, "TestReqToTokenPool") == META_CONTEXTS
    record = project29.record("TestReqToTokenPool", "default_device_meta")
    assert record["broken"] == ["placement"] and record["bad_paths"] == [] and record["errors"] == []
    assert record["placement"] == [{"path": "state.req_generation", "phase": "built in context default_device_meta",
                                    "here": {"device": "meta", "dtype": "int64", "shape": [8]},
                                    "plain": {"device": "cpu", "dtype": "int64", "shape": [8]}}]
    message = project29.report("TestReqToTokenPool", "default_device_meta")["message"]
    first = message.splitlines()[0]
    assert first.startswith("TestReqToTokenPool, device cpu, context default_device_meta: placement (the context "
                            "leaks into the object") and "promise 3" not in first, first
    assert ("\n  state.req_generation: on meta, int64, shape (8,) here; built plainly, on cpu, int64, shape (8,)"
            in message), message
    run = run_reproducer(project29, record["reproducer"], "repro_pool.py")
    assert run.returncode == 1, run.stderr
    assert ("AssertionError: state.req_generation: on meta, int64, shape (8,) here; built plainly, on cpu, int64, "
            "shape (8,)") in run.stderr, run.stderr
    assert "# Reproducer: placement" in record["reproducer"]


def test_a_tensor_made_without_a_dtype_is_a_placement_failure_under_a_default_dtype(project29):
    assert failed_contexts(project29, "TestScales") == {"set_default_dtype_float16"}
    [entry] = project29.record("TestScales", "set_default_dtype_float16")["placement"]
    assert (entry["path"], entry["here"]["dtype"], entry["plain"]["dtype"]) == ("state.scales", "float16", "float32")


def test_a_warm_up_that_raises_only_under_a_default_device_is_that_context_leaking_not_promise_3(project29):
    assert failed_contexts(project29, "TestPositionsWarmUp") == META_CONTEXTS
    record = project29.record("TestPositionsWarmUp", "set_default_device_meta")
    assert record["broken"] == ["placement"] and record["errors"] == [], record
    assert [(p["phase"], p["raised"].split(":")[0]) for p in record["placement"]] == [
        ("built and warmed up in context set_default_device_meta", "RuntimeError"),
        ("built in the plain context, warmed up in context set_default_device_meta", "RuntimeError")]
    assert "tensors created without a device follow the ambient default device" in record["placement"][0]["leak"]
    message = project29.report("TestPositionsWarmUp", "set_default_device_meta")["message"]
    assert "promise 3" not in message.splitlines()[0] and "(placement, not promise 3)" in message, message
    assert "warm_up raised RuntimeError: index_copy(): self, index and source expected to be in the same device" in \
        message
    run = run_reproducer(project29, record["reproducer"], "repro_positions.py")
    assert run.returncode == 1 and "RuntimeError: index_copy()" in run.stderr, run.stderr


def test_placement_compares_device_dtype_and_shape_and_names_a_tensor_only_one_build_has():
    plain = check_state(types.SimpleNamespace(a=torch.zeros(2), b=torch.zeros(3), c=torch.zeros(4)))
    here = check_state(types.SimpleNamespace(a=torch.zeros(2, device="meta"), b=torch.zeros(5), d=torch.zeros(1)))
    assert misplaced(plain, here) == [("state.a", ("meta", "float32", (2,)), ("cpu", "float32", (2,))),
                                      ("state.b", ("cpu", "float32", (5,)), ("cpu", "float32", (3,))),
                                      ("state.d", ("cpu", "float32", (1,)), None),
                                      ("state.c", None, ("cpu", "float32", (4,)))]
    assert misplaced(plain, plain) == []


def test_the_placement_check_of_a_reproducer_fails_on_a_path_that_leads_nowhere():
    state = types.SimpleNamespace()
    with pytest.raises(AssertionError, match=r"^state\.c: no tensor here; built plainly, on cpu, float32, shape \(4,\)$"):
        placed_as("state.c", lambda: state.c, ("cpu", "float32", (4,)))
    placed_as("state.c", lambda: state.c, None)  # neither build has one: nothing differs


def test_what_the_terminal_was_shown_is_of_one_run_only():
    shown, run, again = Shown(), object(), object()
    shown.start(run)
    outcome = PhaseOutcome("built in the plain context", "plain", checked=check_state(inference(1)), script="x = 1\n")
    first = message("TestOurs", "m.TestOurs", "cpu", "plain", [outcome], shown)
    assert "Reproducer (" in first and "  state: an inference tensor" in first
    shown.start(run)  # the same run: the same memory
    assert "the 1 named above" in message("TestOurs", "m.TestOurs", "cpu", "plain", [outcome], shown)
    shown.start(again)  # pytest run again in this process: named in full again
    assert message("TestOurs", "m.TestOurs", "cpu", "plain", [outcome], shown) == first


def test_a_build_that_could_not_be_compared_is_no_pass_and_says_so():
    outcome = PhaseOutcome("built in context default_device_meta", "default_device_meta",
                           checked=check_state(torch.zeros(1)),
                           placement_error="placement not compared: built plainly, make_state raised ValueError: no")
    assert not outcome.ok and outcome.broken() == []
    text = message("TestOurs", "m.TestOurs", "cpu", "default_device_meta", [outcome], Shown())
    assert text.splitlines()[:2] == [
        "TestOurs, device cpu, context default_device_meta: not all of it could be checked, which is no pass",
        "built in context default_device_meta: placement not compared: built plainly, make_state raised ValueError: no"]
    assert "eproducer" not in text  # none was made: no pointer to one


def test_a_class_with_twenty_bad_tensors_prints_at_most_250_lines_at_q(tmp_path):
    tests = ("from engine_states import TwentyTables\nfrom cpugpu_conformance.testing import MutableStateTests\n"
             + SIMPLE_CLASS.format(name="TwentyTables"))
    result = tmp_path / "cell.json"
    # -rN: the short summary as a terminal shows it; in CI pytest prints it untruncated, each failure's
    # whole message again (416 lines here): the bound is on the report, measured without it.
    run = run_project(tmp_path, {"conftest.py": CONFTEST, "test_twenty.py": tests}, "--cpugpu-cell-result",
                      str(result), "-rN")
    lines = run.output.splitlines()
    assert run.returncode == 1 and len(run.reports) >= 12, run.output[-2000:]
    assert len(lines) <= 250, f"{len(lines)} lines at -q"
    for i in range(20):  # each bad path named once, the torch message once, one reproducer
        assert lines.count(f"  state.tables['t{i}']") == 1, i
    assert sum(SEED_ERROR in line for line in lines if line.startswith("    refused: ")) == 1
    assert run.output.count("\n\nReproducer (") == 1
    assert run.output.count("\nreproducer: as printed for context plain") == len(CPU_CONTEXTS) - 1
    tests_in_file = json.loads(result.read_text())["mutable_state"]["test_twenty.TestTwentyTables"]["tests"]
    scripts = [x["reproducer"] for t in tests_in_file for x in t["reproducers"]]
    assert len(scripts) == 1 + 2 * (len(CPU_CONTEXTS) - 1)  # the file keeps every one
    assert all("mutable_in_place(\"state.tables['t19']\", state.tables['t19'])" in x for x in scripts)


def test_the_names_are_the_librarys():
    import cpugpu_conformance.testing as testing

    assert testing.MutableStateTests is MutableStateTests and testing.assert_mutable_state is assert_mutable_state
    assert {"MutableStateTests", "assert_mutable_state"} <= set(dir(testing))


# --- the benchmark: it runs, and says bad input in one line (its numbers are for reading)


def run_benchmark(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_mutable_state.py"), *args],
                          capture_output=True, text=True, timeout=300, env=env_with_tests())


def test_the_benchmark_prints_ratios_against_its_own_baseline():
    run = run_benchmark("--tensors", "200", "--repeat", "1", "--big-mib", "1")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("torch ") and "200 tensors" in lines[0]
    for name in ("create", "walk", "check"):
        assert any(line.split()[0] == name and line.endswith("x create") for line in lines[1:]), run.stdout


@pytest.mark.parametrize("args, culprit", [(["--tensors", "3"], "--tensors 3: must be at least 4"),
                                           (["--repeat", "0"], "--repeat 0: must be at least 1")])
def test_the_benchmark_refuses_bad_input_in_one_line(args, culprit):
    run = run_benchmark(*args)
    assert run.returncode == 2 and run.stderr.strip() == culprit and not run.stdout
