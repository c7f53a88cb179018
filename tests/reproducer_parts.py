"""What the tests read of a reproducer: its definitions, run apart from the package, and the
functions the suite passes to a scenario, for the checks that every reproducer holds up."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from collections.abc import Callable
from typing import Any

import cpugpu_conformance.testing as testing
from cpugpu_conformance import devices
from cpugpu_conformance.testing.shared.reproducer import Record, Scenario, Step


def _import_library() -> list[Any]:
    """Every module of the library, in every room (tests/conftest.py registers its marks)."""
    return [importlib.import_module(info.name)
            for info in pkgutil.walk_packages(testing.__path__, prefix=f"{testing.__name__}.") if not info.ispkg]


LIBRARY = _import_library()
from cpugpu_conformance.testing.buffer import stateful  # noqa: E402
from cpugpu_conformance.testing.shared import contexts  # noqa: E402


def definitions(script: str) -> dict[str, Any]:
    """The functions and classes a reproducer defines, with its module imports (not the class
    under test's), in a namespace of their own: what they read is what the script gives them."""
    tree = ast.parse(script)
    tree.body = [node for node in tree.body if isinstance(node, (ast.Import, ast.FunctionDef, ast.ClassDef))]
    ns: dict[str, Any] = {"__name__": "reproducer"}
    exec(compile(tree, "<reproducer>", "exec"), ns)
    return ns


def script_for(device: str, *functions: Callable[..., Any], impl_import: str = "from ours import Buffer\n") -> str:
    """A reproducer whose steps call `functions`, each with its parameters by name, built without
    running them (a state machine's step may leave a mode on when given the wrong arguments)."""
    record = Record(impl_import)
    sc = Scenario(record, "2", device)
    for func in functions:
        params = [p.name for p in inspect.signature(func).parameters.values() if p.default is inspect.Parameter.empty
                  and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        sc.steps.append(Step(f"{func.__name__}({', '.join(params)})\n", (func,)))
    return sc.script()


def top_level_defs(script: str) -> list[str]:
    return [node.name for node in ast.parse(script).body if isinstance(node, ast.FunctionDef)]


def _resolve(node: ast.expr, module: Any) -> list[Any]:
    """What a call's function argument names in `module`: a name, a dotted name, or every value of a
    dict of functions indexed (ORDERED_COPIES[method])."""
    if isinstance(node, ast.Subscript):
        table = _resolve(node.value, module)
        return [f for t in table if isinstance(t, dict) for f in t.values()]
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return []
    value = getattr(module, node.id, None)
    for part in reversed(parts):
        value = getattr(value, part, None)
    return [value]


def suite_functions() -> list[Callable[..., Any]]:
    """Every function the library's tests pass to a scenario (sc.call, sc.check, construct_in), found in
    their source, with those passed through a variable (the invariant's parts, the contexts)."""
    found: dict[str, Callable[..., Any]] = {}
    for module in LIBRARY:
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            args = node.args[:1] if name in ("call", "check") else node.args[2:3] if name == "construct_in" else []
            for arg in args:
                for value in _resolve(arg, module):
                    if inspect.isfunction(value):
                        found[f"{value.__module__}.{value.__qualname__}"] = value
    extras = [check for _, check in stateful.INVARIANT]
    extras += [c.enter for c in contexts.contexts_for("cuda") if c.enter is not None]
    extras += [f for d in devices.REGISTRY.values() for f in d.contexts]
    for value in extras:
        found[f"{value.__module__}.{value.__qualname__}"] = value
    return list(found.values())
