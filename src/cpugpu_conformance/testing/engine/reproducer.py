"""The standalone reproducer of a MutableStateTests failure, built from the test class's own source.

The script holds the class's own methods (make_state, warm_up, and any helper they call on
``self``) and plain settings as written, in a class of its own; the names those methods read
imported from where they are defined (a class from its module, anything else from the test
module); the creation context and the checks as the suite ran them (reproducer.py writes
their source); then the calls, and a check of each tensor path the suite found bad. It
needs torch and the modules it imports: run it where the tests run.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
from typing import Any

import numpy as np
import torch

from cpugpu_conformance import devices
from cpugpu_conformance import promises as P

from ..shared.reproducer import Record, Scenario, Step, literal
from .checks import caller_left_alone, mutable_in_place, placed_as
from .walk import set_elements

# The names every reproducer has already (reproducer.py's header imports them).
_HEADER_NAMES = {"torch": torch, "np": np}
# Plain settings a class may read through self, written as literals.
_LITERALS = (bool, int, float, str, bytes, type(None), torch.dtype)


class StateScenario(Scenario):
    """A scenario of promises 3 and 12 for the state a MutableStateTests class builds."""

    def __init__(self, tests_cls: type, stop: type, device: str, context: str, phase: str) -> None:
        record = Record(class_source(tests_cls, stop), promise=P.MUTABLE)
        self.tests_name, self.context, self.phase = tests_cls.__qualname__, context, phase
        self.placement = False  # the script checks placement (an ambient context leaking in): its header says so
        super().__init__(record, P.MUTABLE, device, title=f"the state {tests_cls.__qualname__}.make_state builds")

    @property
    def header(self) -> str:
        needs = devices.get(self.device).needs
        what = (f"placement (built in any context, every tensor has the device, dtype and shape it has when built "
                f"plainly), and promises {P.MUTABLE} and {P.NO_SIDE_EFFECTS}" if self.placement
                else f"promises {P.MUTABLE} and {P.NO_SIDE_EFFECTS} ({P.PROMISES[P.MUTABLE]}; "
                     f"{P.PROMISES[P.NO_SIDE_EFFECTS]})")
        return (
            f"# Reproducer: {what} for any object:\n"
            f"# the state {self.tests_name}.make_state builds, device {self.device}, {self.phase}.\n"
            f"# Found by cpugpu-conformance's MutableStateTests, with torch {torch.__version__}.\n"
            + (f"# Needs {needs}.\n" if needs else "")
            + "# Needs the modules it imports on sys.path: run it where the tests run.\n"
            + "# Run: python reproducer.py  (an exception or a failed assert is the bug)\n"
        )

    def check_paths(self, bad_paths: list[str]) -> None:
        """Write (not run: the suite ran them in its walk) a check of each bad tensor path."""
        for path in bad_paths:
            used = (mutable_in_place, set_elements) if "set_elements(" in path else (mutable_in_place,)
            self.steps.append(Step(f"mutable_in_place({path!r}, {path})\n", used))
        self._record()

    def check_placement(self, misplaced: list[tuple[str, Any, Any]]) -> None:
        """Write a check of each tensor whose placement differs from the plain build's: (path, here,
        plain), where plain is the plain build's (device, dtype, shape), written as a literal."""
        self.placement = True
        for path, _, plain in misplaced:
            used = (placed_as, set_elements) if "set_elements(" in path else (placed_as,)
            self.steps.append(Step(f"placed_as({path!r}, lambda: {path}, {literal(plain)})\n", used))
        self._record()

    def check_caller_state(self) -> None:
        """Write the check that the caller's state was left alone (what `changed` collected)."""
        self.steps.append(Step("caller_left_alone(changed)\n", (caller_left_alone,)))
        self._record()


def own_members(cls: type, stop: type) -> dict[str, Any]:
    """The class's own methods and settings, below `stop` (MutableStateTests): the most derived
    of each name, without tests and dunders."""
    members: dict[str, Any] = {}
    for klass in cls.__mro__:
        if klass is stop or klass is object:
            break
        for name, value in vars(klass).items():
            if name.startswith(("test", "__")) or name in members:
                continue
            members[name] = value
    return members


@functools.lru_cache(maxsize=256)  # every phase of every context of a class writes the same text
def class_source(cls: type, stop: type) -> str:
    """What the class's own methods need (imports, and the classes and functions of the test module
    they use, as written), then those methods as a class of their own, an instance of it, and
    `make_state` (and `warm_up`, where the class has one) bound from it."""
    members = own_members(cls, stop)
    functions = {name: _function(value) for name, value in members.items() if _function(value) is not None}
    body: list[str] = []
    for name, value in members.items():
        if _is_literal(value):
            body.append(f"    {name} = {literal(value)}\n")
    for name, func in functions.items():
        body.append(("\n" if body else "") + _method_source(name, func))
    needed = _Needed(cls.__module__)
    for func in functions.values():
        needed.read(_source_of(func), func.__globals__)
    origin = f"{cls.__qualname__}'s own methods and settings, as written in {cls.__module__}"
    text = (needed.text() + f"\n\nclass Tests:  # {origin}\n" + ("".join(body) or "    pass\n")
            + "\n\nTESTS = Tests()\nmake_state = TESTS.make_state\n")
    if "warm_up" in functions:
        text += "warm_up = TESTS.warm_up\n"
    # The script puts one blank line above this text: a definition first needs one more (PEP 8).
    text = text.lstrip("\n")
    return text if text.startswith(("import ", "from ")) else "\n" + text


class _Needed:
    """The imports and definitions a piece of source needs, from the globals of its module: a module
    as itself; a class or function of the test module as written there (and what it needs in
    turn); one defined elsewhere imported from its module; a plain constant as a literal;
    anything else imported from the test module."""

    def __init__(self, test_module: str) -> None:
        self.test_module = test_module
        self.imports: list[str] = []
        self.definitions: dict[str, tuple[int, str]] = {}  # name -> (line in the test module, source)
        self.seen: set[str] = set()

    def read(self, source: str | None, namespace: dict[str, Any]) -> None:
        if source is None:
            return
        for name in _names_read(source):
            if name in self.seen or name not in namespace or _HEADER_NAMES.get(name) is namespace[name]:
                continue
            self.seen.add(name)
            self._add(name, namespace[name])

    def _add(self, name: str, value: Any) -> None:
        own = (inspect.isclass(value) or inspect.isfunction(value)) and getattr(value, "__module__", None) == \
            self.test_module and getattr(value, "__qualname__", None) == name
        source = _source_of(value) if own else None
        if source is not None:
            self.definitions[name] = (inspect.getsourcelines(value)[1], source)
            members = vars(value).values() if inspect.isclass(value) else [value]
            namespace = sys.modules[self.test_module].__dict__
            self.read(source, namespace)
            for member in members:  # a class's methods read the module's globals as its body does
                func = _function(member)
                if func is not None:
                    self.read(_source_of(func), func.__globals__)
        elif _is_literal(value):
            self.definitions[name] = (0, f"{name} = {literal(value)}\n")
        else:
            line = _import_of(name, value, self.test_module)
            if line not in self.imports:
                self.imports.append(line)

    def text(self) -> str:
        definitions = [source.rstrip("\n") + "\n" for _, source in sorted(self.definitions.values(),
                                                                         key=lambda item: item[0])]
        return "".join(f"{line}\n" for line in self.imports) + "".join(f"\n\n{d}" for d in definitions)


def _names_read(source: str) -> list[str]:
    """The names a piece of source reads, in the order they appear."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return list(dict.fromkeys(node.id for node in ast.walk(tree)
                              if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)))


def _source_of(value: Any) -> str | None:
    try:
        return textwrap.dedent(inspect.getsource(value))
    except (OSError, TypeError):
        return None


def _is_literal(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_is_literal(v) for v in value)
    return isinstance(value, _LITERALS)


def _function(value: Any) -> Any:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    return value if inspect.isfunction(value) else None


def _method_source(name: str, func: Any) -> str:
    source = _source_of(func)
    if source is None:
        return (f"    def {name}(self, *args, **kwargs):\n"
                f"        raise NotImplementedError({f'the source of {name} was not found'!r})\n")
    return textwrap.indent(source, "    ").rstrip() + "\n"


def _import_of(name: str, value: Any, test_module: str) -> str:
    """Where the script imports `name` from: a module as itself, a top-level class or function from
    its own module, anything else (an instance, say) from the test module."""
    if inspect.ismodule(value):
        return f"import {value.__name__}" if value.__name__ == name else f"import {value.__name__} as {name}"
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if (isinstance(module, str) and isinstance(qualname, str) and module != "__main__"
            and getattr(sys.modules.get(module), qualname, None) is value):
        return f"from {module} import {qualname}" + (f" as {name}" if qualname != name else "")
    if test_module == "__main__":
        return f"{name} = ...  # read by the tests' methods, defined in __main__: set it here"
    return f"from {test_module} import {name}"
