"""Every tensor reachable from an object, by the path that reaches it: ``state.tables['default'][0]``.

The walk follows what an object holds, never what it computes: instance attributes
(``__dict__``), ``__slots__``, dicts (values, and keys that hold tensors), lists, tuples,
deques, sets, dataclasses (their attributes), and an ``nn.Module``'s registered parameters,
buffers and submodules by their names. A leaf tensor's ``.grad`` is a tensor it holds too.
So are the tensors the callables it holds keep alive, which engines use as state (a kernel bound
to its workspace): a ``functools.partial``'s ``func``, ``args`` and ``keywords``; a bound
method's ``__self__``; a function's closure cells and defaults.

It never calls a property, never walks into a tensor's own attributes, nor into modules,
classes (class attributes are the class's, made at import, shared by every instance), a
function's globals or attributes (its module's), a bound method's ``__func__`` (the class's),
generators and coroutines (their locals live in a suspended frame, change at every step and are
no attribute of anything), weak references, NumPy arrays or torch's internals (``torch._*``).

Breadth first, so each tensor is named by a shortest path; each object is visited once (by
id), so cycles and aliases end the walk instead of looping; the order is the order the
object holds things in (attributes as set, dicts as filled, sets by ``set_elements``), so two
walks of equal objects give the same paths. Bounded: past ``max_items`` things looked at or
``max_depth`` steps it stops with a `WalkLimit` that names where, never a hang.

A path is Python that evaluates to what it names (reproducers use it as such):
``state.w``, ``state.d['k']``, ``state.xs[0]``, ``list(state.d.values())[1]`` (a key with no
literal), ``list(state.d)[0]`` (a tensor used as a key), ``getattr(state.seq, '0')`` (a name that
is no identifier), ``set_elements(state.pool)[0]`` (a set: this module's stable order),
``state.kernel.args[0]``, ``state.step.__self__.buf``, ``state.fn.__closure__[0].cell_contents``,
``state.fn.__defaults__[1]``.
"""

from __future__ import annotations

import collections
import enum
import functools
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

DEFAULT_MAX_ITEMS = 2_000_000
DEFAULT_MAX_DEPTH = 10_000

# Things with nothing inside to walk (checked by exact type first: the walk's hot path).
_ATOMIC = frozenset({str, bytes, bytearray, int, float, complex, bool, type(None), type(Ellipsis), type(NotImplemented),
                     range, slice, memoryview, torch.dtype, torch.device, torch.layout, torch.memory_format,
                     torch.Size})
# Things that hold tensors the object does not own, or none at all: never walked into.
_NOT_STATE = (type, types.ModuleType, types.WrapperDescriptorType, types.MethodDescriptorType,
              types.ClassMethodDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType,
              types.CodeType, types.FrameType, types.TracebackType, types.GeneratorType, types.CoroutineType,
              types.AsyncGeneratorType, property, staticmethod, classmethod, weakref.ref, weakref.ProxyType,
              weakref.CallableProxyType, enum.Enum, np.ndarray, np.generic, BaseException)
# Keys a path writes as a literal: d['k'], d[3], d[('a', 1)].
_LITERAL_KEYS = (str, bytes, int, type(None))


# What the walk does with a thing, by its type (decided once per type: the walk's hot path).
_ATOM, _SKIP, _TENSOR, _MODULE, _DICT, _PROXY, _SEQUENCE, _SET, _OBJECT, _PARTIAL, _FUNCTION, _BOUND = range(12)
# Callables whose state is what they are bound to: a bound method of a Python class, of a C type
# (``[].append``, ``tensor.add_``) or a slot wrapper's (``obj.__eq__``): their ``__self__``.
_BOUND_TYPES = (types.MethodType, types.BuiltinMethodType, types.MethodWrapperType)


@functools.lru_cache(maxsize=4096)
def _kind(cls: Any) -> int:
    if cls in _ATOMIC:
        return _ATOM
    if issubclass(cls, torch.Tensor):
        return _TENSOR
    module = getattr(cls, "__module__", None) or ""
    if issubclass(cls, _NOT_STATE) or module == "torch" or module.startswith("torch._"):
        return _SKIP  # torch's own machinery (torch._C, torch._dynamo, ...) holds no state of the object's
    for base, kind in ((torch.nn.Module, _MODULE), (dict, _DICT), (types.MappingProxyType, _PROXY),
                       ((list, tuple, collections.deque), _SEQUENCE), ((set, frozenset), _SET),
                       (functools.partial, _PARTIAL), (types.FunctionType, _FUNCTION), (_BOUND_TYPES, _BOUND)):
        if issubclass(cls, base):
            return kind
    return _OBJECT


class WalkLimit(Exception):
    """The walk went past its bound (items looked at, or depth): it cannot say it saw every tensor."""


def set_elements(s):
    """The elements of a set in a stable order: tensors by dtype, shape and device, anything
    else by type and repr; ties keep the set's own order. Paths into a set index this list."""

    def key(x):
        if isinstance(x, torch.Tensor):
            return (0, str(x.dtype), tuple(x.shape), str(x.device), "")
        try:
            text = repr(x)
        except Exception:  # a repr that raises: by type alone
            text = ""
        return (1, type(x).__qualname__, (), "", text)

    return sorted(s, key=key)


# One step of a path, as a tuple (the walk makes one per thing it holds): the parent's node, the
# text around the parent's path (prefix + parent + suffix), the rendered path's length, its depth
# in steps. A path is rendered only when it is needed.
_Node = tuple  # (parent: _Node | None, prefix: str, suffix: str, length: int, depth: int)
_PARENT, _PREFIX, _SUFFIX, _LENGTH, _DEPTH = range(5)


def _child(node: _Node, prefix: str, suffix: str) -> _Node:
    return (node, prefix, suffix, node[_LENGTH] + len(prefix) + len(suffix), node[_DEPTH] + 1)


def _render(node: _Node) -> str:
    parts: list[_Node] = []
    while node is not None:
        parts.append(node)
        node = node[_PARENT]
    text = ""
    for part in reversed(parts):
        text = part[_PREFIX] + text + part[_SUFFIX]
    return text


def _attribute(parent: _Node, name: str) -> _Node:
    if name.isidentifier():
        return _child(parent, "", f".{name}")
    return _child(parent, "getattr(", f", {name!r})")


def _literal_key(key: Any) -> bool:
    if isinstance(key, tuple):
        return all(_literal_key(k) for k in key)
    return isinstance(key, _LITERAL_KEYS) and not isinstance(key, enum.Enum)


@dataclass
class Walk:
    """What a walk found: each tensor by its path (in walk order), each exclusion that matched
    (path -> the reason given, and what was there), each that matched nothing."""

    tensors: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)
    unmatched: dict[str, str] = field(default_factory=dict)
    items: int = 0


def normalize_exclusions(exclude: Mapping[str, str] | None, root: str) -> dict[str, str]:
    """Exclusions by full path: ``"weights.w"`` (relative to the object) or ``"state.weights.w"``
    (as a failure prints it) both name ``state.weights.w``. Each needs a reason: ValueError
    names the one that has none."""
    if exclude is not None and not isinstance(exclude, Mapping):
        raise ValueError(f"exclude: expected a dict of path -> reason, got {type(exclude).__name__} {exclude!r}")
    full: dict[str, str] = {}
    for path, reason in (exclude or {}).items():
        if not isinstance(path, str) or not path.strip():
            raise ValueError(f"exclude: {path!r} is no path (expected e.g. 'weights.w' or '{root}.weights.w')")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"exclude[{path!r}]: give the reason the tensor is excluded (got {reason!r})")
        path = path.strip()
        if not (path == root or path.startswith((f"{root}.", f"{root}["))):
            path = f"{root}{path}" if path.startswith("[") else f"{root}.{path}"
        full[path] = reason.strip()
    return full


def walk(obj: Any, root: str = "state", *, exclude: Mapping[str, str] | None = None, grads: bool = True,
         max_items: int = DEFAULT_MAX_ITEMS, max_depth: int = DEFAULT_MAX_DEPTH) -> Walk:
    """Every tensor reachable from `obj`, by path from `root`. ``exclude``: path -> reason (see
    normalize_exclusions); an excluded path is not walked into, and is listed in the result."""
    exclusions = normalize_exclusions(exclude, root)
    lengths = {len(path) for path in exclusions}
    found = Walk()
    first_path: dict[int, _Node] = {}  # id -> where it was first reached
    alive: list[Any] = []  # what the walk made ids of: an id is unique only while its object lives
    queue: collections.deque[tuple[Any, _Node]] = collections.deque([(obj, (None, root, "", len(root), 0))])

    def excluded_here(node: _Node, value: Any) -> bool:
        if node[_LENGTH] not in lengths:
            return False
        path = _render(node)
        if path not in exclusions:
            return False
        earlier = first_path.get(id(value))
        seen = f" (the same object is reached first at {_render(earlier)}, and checked there)" if earlier else ""
        found.excluded[path] = exclusions[path] + seen
        return True

    while queue:
        value, node = queue.popleft()
        found.items += 1
        if found.items > max_items:
            raise WalkLimit(f"the walk of {root} looked at more than max_items={max_items} things (at {_short(node)}): "
                            "exclude the path of a large container that holds no tensors, or raise max_items")
        kind = _kind(type(value))  # type: ignore[arg-type]  # (mypy: a type is hashable)
        if kind == _ATOM:
            continue
        if node[_DEPTH] > max_depth:
            raise WalkLimit(f"the walk of {root} went deeper than max_depth={max_depth} steps (at {_short(node)}): "
                            "a linked structure? exclude its path, or raise max_depth")
        if (lengths and excluded_here(node, value)) or id(value) in first_path or kind == _SKIP:
            continue
        first_path[id(value)] = node
        alive.append(value)
        if kind == _TENSOR:
            found.tensors.append((_render(node), value))
            grad = _grad(value) if grads else None
            if grad is not None:
                queue.append((grad, _child(node, "", ".grad")))
        else:
            queue.extend(_CHILDREN[kind](value, node))
    found.unmatched = {path: reason for path, reason in exclusions.items() if path not in found.excluded}
    return found


def _grad(tensor: torch.Tensor) -> torch.Tensor | None:
    """A leaf's .grad (a non-leaf's warns, and is None)."""
    try:
        return tensor.grad if tensor.is_leaf else None
    except RuntimeError:  # a view made in inference mode whose base changed since: no graph to ask (checked as it is)
        return None


def _short(node: _Node, limit: int = 200) -> str:
    path = _render(node)
    return path if len(path) <= limit else f"{path[:limit // 2]} ... {path[-limit // 2:]} ({node[_DEPTH]} steps)"


def _sequence_children(value: Any, node: _Node) -> Iterator[tuple[Any, _Node]]:
    yield from ((item, _child(node, "", f"[{i}]")) for i, item in enumerate(value))
    yield from _attributes(value, node)  # a subclass's own attributes (a namedtuple has none)


def _set_children(value: Any, node: _Node) -> Iterator[tuple[Any, _Node]]:
    return ((item, _child(node, "set_elements(", f")[{i}]")) for i, item in enumerate(set_elements(value)))


def _dict_children(d: dict, node: _Node) -> Iterator[tuple[Any, _Node]]:
    items = list(dict.items(d))  # dict's own items: a subclass's (defaultdict's) hooks do not run
    for i, (key, _) in enumerate(items):
        if not (_literal_key(key) or isinstance(key, (enum.Enum, type, float))):
            yield key, _child(node, "list(", f")[{i}]")  # a key may hold tensors too
    for i, (key, item) in enumerate(items):
        yield item, (_child(node, "", f"[{key!r}]") if _literal_key(key) else _child(node, "list(", f".values())[{i}]"))


def _module_children(module: torch.nn.Module, node: _Node) -> Iterator[tuple[Any, _Node]]:
    """Registered parameters, buffers and submodules by the names they were registered under,
    then the module's other attributes."""
    registries = ("_parameters", "_buffers", "_modules")
    attributes = vars(module)
    for registry in registries:
        for name, item in attributes.get(registry, {}).items():
            if item is not None:
                yield item, _attribute(node, name)
    yield from ((item, _attribute(node, name)) for name, item in attributes.items() if name not in registries)


def _attributes(value: Any, node: _Node) -> Iterator[tuple[Any, _Node]]:
    """``__dict__`` then ``__slots__``, without calling a property or ``__getattr__``."""
    try:
        attributes = object.__getattribute__(value, "__dict__")
    except (AttributeError, TypeError):
        attributes = None
    if isinstance(attributes, dict):
        yield from ((item, _attribute(node, str(name))) for name, item in list(attributes.items()))
    for name, member in _slots(type(value)):  # type: ignore[arg-type]
        try:
            item = member.__get__(value, type(value))
        except AttributeError:  # a slot never set
            continue
        yield item, _attribute(node, name)


def _partial_children(value: functools.partial, node: _Node) -> Iterator[tuple[Any, _Node]]:
    """A partial holds its function and the arguments bound to it (a kernel and its workspace)."""
    yield value.func, _child(node, "", ".func")
    yield value.args, _child(node, "", ".args")
    yield value.keywords, _child(node, "", ".keywords")
    yield from _attributes(value, node)


def _function_children(func: types.FunctionType, node: _Node) -> Iterator[tuple[Any, _Node]]:
    """What a function keeps alive of its own: its closure cells and its defaults (not its globals,
    which are its module's, nor its attributes)."""
    for i, cell in enumerate(func.__closure__ or ()):
        try:
            contents = cell.cell_contents
        except ValueError:  # a cell not filled yet (a name assigned after the inner function is made)
            continue
        yield contents, _child(node, "", f".__closure__[{i}].cell_contents")
    if func.__defaults__:
        yield func.__defaults__, _child(node, "", ".__defaults__")
    if func.__kwdefaults__:
        yield func.__kwdefaults__, _child(node, "", ".__kwdefaults__")


def _bound_children(method: Any, node: _Node) -> Iterator[tuple[Any, _Node]]:
    """What a bound method is bound to (a module, for a builtin function: not walked)."""
    owner = getattr(method, "__self__", None)
    if owner is not None:
        yield owner, _child(node, "", ".__self__")


@functools.lru_cache(maxsize=4096)
def _slots(cls: Any) -> tuple[tuple[str, Any], ...]:
    """Each slot of the class and its bases: (its name on the object, its descriptor)."""
    found: list[tuple[str, Any]] = []
    for klass in cls.__mro__:
        declared = vars(klass).get("__slots__", ())
        for name in [declared] if isinstance(declared, str) else declared:
            if name in ("__dict__", "__weakref__"):
                continue
            private = name.startswith("__") and not name.endswith("__")
            mangled = f"_{klass.__name__.lstrip('_')}{name}" if private else name
            member = vars(klass).get(mangled)
            if isinstance(member, types.MemberDescriptorType):
                found.append((mangled, member))
    return tuple(found)


_CHILDREN: dict[int, Callable[[Any, _Node], Iterable[tuple[Any, _Node]]]] = {
    _MODULE: _module_children,
    _DICT: _dict_children,
    _PROXY: lambda value, node: _dict_children(dict(value), node),
    _SEQUENCE: _sequence_children,
    _SET: _set_children,
    _OBJECT: _attributes,
    _PARTIAL: _partial_children,
    _FUNCTION: _function_children,
    _BOUND: _bound_children,
}
