"""What a subclass of the library's test classes may set or override: declared here, and only here.

A team subclasses BufferContractTests (or an area class) and MutableStateTests, and the library's
tests call helpers through ``self`` (``self.build``, ``self.scenario``, ``self._run``, a fixture
such as ``record``). A subclass that defines one of those names, by design or because a helper of
its own happens to share the name, changes what the contract's tests do without touching a test:
a ``scenario()`` whose checks do nothing made the pre-fix class pass the whole contract. So every
name the library's classes define is the library's, except the surface declared below; a user's
class (or a class in its bases that is not the library's) that defines any other one leaves every
test of the class untested, each named with the collision and a way out (rename it).

Test methods (``test_*``) are not collisions: an override of a test is judged as one (judge.py:
untested, or waived with a skip marker's reason). Nor are the names Python gives every class.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from typing import Any

import pytest

# The declared surface, by the library class that offers it (docs/library.md says the same).
OVERRIDABLE: dict[str, frozenset[str]] = {
    # The class under test, how a reproducer imports it, and the adapter for another constructor.
    "BufferTests": frozenset({"buffer_cls", "buffer_import", "make_buffer"}),
    # The object under test, what allocates lazily, and the team's exclusions and limits.
    "MutableStateTests": frozenset({"make_state", "warm_up", "exclude", "skip_contexts", "max_items", "max_depth"}),
}

# Names that reach every attribute lookup of the test instance: never a user's to define, whether
# or not a library class defines them.
INTERCEPTORS = frozenset({"__getattribute__", "__getattr__", "__setattr__", "__delattr__"})

# What Python (and pytest's class-level marks) put on any class: no collision.
ANY_CLASS = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
                       "__firstlineno__", "__static_attributes__", "__orig_bases__", "__parameters__",
                       "__type_params__", "pytestmark", "__test__", "__slotnames__", "__abstractmethods__",
                       "_abc_impl"})

LIBRARY_PACKAGE = "cpugpu_conformance.testing"

# The class under test as collection found it (collected.check_classes), kept on each item: the
# result file names it, so a test that would run against another class is untested (stamps.py).
TESTED_AS = pytest.StashKey[str]()


def tested_spec(owner: Any) -> str:
    """How the result file names the class under test of a test class or instance: its buffer_cls,
    or the test class itself where an adapter (make_buffer) alone builds the buffers; and the adapter
    where one builds them, with a digest of its source. An adapter can pass a class its own
    constructor would fail (one that builds it under inference_mode(False)): the file says so, and the
    gate refuses to compare two cells whose adapters differ."""
    target = owner.buffer_cls if getattr(owner, "buffer_cls", None) is not None else owner
    target = target if isinstance(target, type) else type(target)
    spec = f"{target.__module__}:{target.__qualname__}"
    cls = owner if isinstance(owner, type) else type(owner)
    adapter = _adapter(getattr(cls, "make_buffer", None))
    if adapter is None:
        return spec
    return f"{spec} built by {adapter}"


@functools.cache
def _adapter(method: Any) -> str | None:
    """``module.Class.make_buffer (source sha256 0123456789ab)`` for a team's make_buffer; None for the
    library's own (the constructor called as the contract words it)."""
    if method is None or getattr(method, "__module__", "").startswith(LIBRARY_PACKAGE):
        return None
    try:
        digest = hashlib.sha256(inspect.getsource(method).encode()).hexdigest()[:12]
        source = f"source sha256 {digest}"
    except (OSError, TypeError):
        source = "source not found"
    return f"{method.__module__}.{method.__qualname__} ({source})"


def is_library_class(cls: type) -> bool:
    return cls.__module__ == LIBRARY_PACKAGE or cls.__module__.startswith(LIBRARY_PACKAGE + ".")


def _declared(mro: tuple[type, ...]) -> frozenset[str]:
    allowed: set[str] = set()
    for cls in mro:
        if is_library_class(cls):
            allowed |= OVERRIDABLE.get(cls.__name__, frozenset())
    return frozenset(allowed)


def collisions(cls: type) -> tuple[str, ...]:
    """Each undeclared library name a non-library class in ``cls``'s MRO defines, as one line:
    ``TestOurs defines `scenario`, a helper the contract's tests call (BufferTests.scenario)``.

    Asked again at each test: a fixture may set a name on the class while the run goes on
    (``request.cls.scenario = ...``), so the answer is kept per set of names the classes define."""
    return _collisions(cls, tuple(frozenset(vars(base)) for base in cls.__mro__ if not is_library_class(base)))


@functools.cache
def _collisions(cls: type, _names: tuple[frozenset[str], ...]) -> tuple[str, ...]:
    mro = cls.__mro__
    library = [c for c in mro if is_library_class(c)]
    owners: dict[str, str] = {}
    for base in reversed(library):
        for name in vars(base):
            owners[name] = f"{base.__name__}.{name}"
    allowed = _declared(mro)
    found: list[str] = []
    metaclass = type(cls)
    if metaclass is not type and not is_library_class(metaclass) and metaclass.__module__ != "abc":
        found.append(f"{cls.__qualname__} has the metaclass {metaclass.__module__}.{metaclass.__qualname__}, which "
                     "can answer the library's lookups in its place: use a plain class")
    for base in mro:
        if is_library_class(base) or base is object:
            continue
        for name in vars(base):
            if name in ANY_CLASS or name in allowed or name.startswith("test"):
                continue
            if name in INTERCEPTORS:
                found.append(f"{base.__qualname__} defines {name}, which intercepts the library's own lookups on "
                             "the test instance: remove it")
            elif name in owners:
                found.append(f"{base.__qualname__} defines `{name}`, a name the library's classes use "
                             f"({owners[name]}): rename it (what a subclass may override: "
                             f"{', '.join(sorted(allowed))})")
    return tuple(found)


def shadowed_on_instance(instance: Any) -> list[str]:
    """Library names an instance attribute hides (a fixture that set ``self.build = ...``)."""
    library = {name for c in type(instance).__mro__ if is_library_class(c) for name in vars(c)}
    allowed = _declared(type(instance).__mro__)
    own = getattr(instance, "__dict__", {})
    return [f"the test instance has its own attribute `{name}`, which hides the library's: rename it"
            for name in sorted(own) if name in library and name not in allowed]
