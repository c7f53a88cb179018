"""The walk behind assert_mutable_state (issues 25 and 29; walk.py): every tensor an engine object
holds is reached once, by its shortest path, a path that is Python and evaluates to it, in the
object's own order; through partials, bound methods, closures and defaults too, and never into what
the object does not hold (properties, modules, classes, globals, torch's internals); cycles end it,
and past its limits it stops and says where. A tensor only a callable holds is rejected, and the
engine hits it.
"""

from __future__ import annotations

import collections
import functools
import types
import weakref
from dataclasses import dataclass
from typing import Any, NamedTuple

import engine_states as es
import numpy as np
import pytest
import torch
from mutable_state_helpers import SEED_ERROR, built_in_inference_mode, inference, names

from cpugpu_conformance.testing import assert_mutable_state
from cpugpu_conformance.testing.engine.walk import WalkLimit, set_elements, walk


def paths(obj, **kwargs) -> list[str]:
    return [path for path, _ in walk(obj, **kwargs).tensors]


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
