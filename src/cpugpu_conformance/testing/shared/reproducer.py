"""Scenarios made of ordinary function calls, so that every failure comes with a standalone reproducer.

A test builds a `Scenario`, binds the values it drew, and calls the checks (plain functions
in checks.py, helpers.py and the area modules) through it. The suite runs exactly those
functions, and the reproducer is their source followed by the calls, with the drawn values
as literals: what a user pastes into a bug report is what failed, and it needs only torch,
numpy and the class. Hypothesis replays the minimal failing example last, so the script
recorded at a failure is the shrunk one.
"""

from __future__ import annotations

import functools
import inspect
import re
import textwrap
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from cpugpu_conformance import devices
from cpugpu_conformance.promises import PROMISES

DEFAULT_IMPORT = "from cpugpu_conformance.reference import CpuGpuBuffer as Buffer\n"
# The modules every reproducer imports, under the names the checks use.
_HEADER_MODULES = {"torch": torch, "np": np}
# Functions whose source goes into a reproducer: the library's own (the checks and their helpers).
_LIBRARY = "cpugpu_conformance"
# The contract's constructor: Buffer(*size, dtype=, device=, pin_memory=, with_numpy=).
CONSTRUCTOR_KEYWORDS = ("dtype", "device", "pin_memory", "with_numpy")


def import_line(cls: type) -> str:
    """How a reproducer imports the class under test, as `Buffer`."""
    return f"from {cls.__module__} import {cls.__qualname__.split('.')[0]} as Buffer\n"


class Record:
    """What one test leaves for its report: the script of the example that ran last, what an
    implementation-defined promise did, and the promise a failure from here on breaks.

    One per test, made by the ``record`` fixture and kept on the test item, so two tests
    (in xdist workers or threads) never see each other's reproducer or blame.
    """

    def __init__(self, impl_import: str = DEFAULT_IMPORT, promise: str | None = None) -> None:
        self.impl_import = impl_import
        self.promise = promise  # the test's own (its first cpugpu_promise marker)
        self.observed: str | None = None
        self.blamed: str | None = None
        self._last: tuple[Scenario, Step | None] | None = None
        # How the contract's own body ended, and why the contract skipped it (stamps.py).
        self.stamp: str | None = None
        self.stamp_detail: str | None = None
        self.contract_skip: str | None = None
        # The dtypes its scenarios bound: the result file says what each promise was checked with.
        self.dtypes: set[str] = set()
        # The class under test as collection found it (surface.TESTED_AS), for a buffer test.
        self.tested_as: str | None = None

    def __repr__(self) -> str:
        # Hypothesis prints a failing example's arguments: an address would differ run to run.
        return "<record>"

    def blame(self, promise: str | None) -> None:
        """Name the promise a failure from here on breaks, for tests that check several."""
        self.blamed = promise

    def observe(self, text: str) -> None:
        """What an implementation-defined promise (11) did, for the result file."""
        self.observed = text

    def ran(self, scenario: Scenario, extra: Step | None = None) -> None:
        self._last = (scenario, extra)

    def last_run(self) -> Scenario | None:
        """The scenario that ran a step last (None before any)."""
        return self._last[0] if self._last is not None else None

    def reproducer(self) -> str | None:
        """The reproducer of the example that ran last, built only now: most examples pass."""
        if self._last is None:
            return None
        scenario, extra = self._last
        return scenario.script(extra)


def literal(value: Any) -> str:
    """Source that evaluates to `value`, for the values scenarios bind."""
    if isinstance(value, torch.dtype):
        return str(value)  # "torch.float32"
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"  # as callers pass it, not "device(type='cpu')"
    if isinstance(value, np.ndarray):
        # The dtype by its name: np.bool is NumPy 2's spelling only (NumPy 1.24 to 1.26 have np.bool_).
        return f"np.array({value.tolist()!r}, dtype={value.dtype.name!r})"
    return repr(value)


@dataclass(frozen=True)
class Name:
    """An argument that is a name bound in the scenario (`buf`), not a literal value."""

    name: str


@dataclass
class Step:
    """One line of the reproducer: values bound, or a call (its function's source goes above)."""

    line: str
    functions: tuple[Callable[..., Any], ...] = ()


def per_device(attribute: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a helper whose body is the device registry's `attribute` (devices.py): in a
    reproducer it is written out as that device's own function, under the helper's name, so
    the script needs neither this package nor an ``if device.type == ...`` for other devices."""

    def mark(func: Callable[..., Any]) -> Callable[..., Any]:
        func.__per_device__ = attribute  # type: ignore[attr-defined]
        return func

    return mark


def _code_names(code: types.CodeType) -> set[str]:
    """The global names a function's code (nested functions and comprehensions too) reads; not the
    names pytest's assertion rewriting adds (@py_builtins, @pytest_ar), which no script can import."""
    names = {name for name in code.co_names if not name.startswith("@")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


@functools.lru_cache(maxsize=1024)
def _required_names(func: Callable[..., Any]) -> tuple[Name, ...]:
    """Each positional parameter of `func` without a default, as a Name: the values a call with no
    arguments passes. Once per function, not once per example (a state machine calls its checks
    after every step)."""
    params = inspect.signature(func).parameters.values()
    return tuple(Name(p.name) for p in params if p.default is inspect.Parameter.empty and p.kind in (
        p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


_BODY_IMPORTS = re.compile(r"^\s+(import torch|import numpy as np)\n", re.MULTILINE)


def _source(func: Callable[..., Any], name: str | None = None) -> str:
    """A function's source at the top level, under `name`; the imports every reproducer has
    already (a registry function imports torch in its body, as devices.py imports it lazily) go."""
    text = textwrap.dedent(inspect.getsource(func))
    if name is not None and name != func.__name__:
        text = re.sub(rf"^def {func.__name__}\(", f"def {name}(", text, count=1, flags=re.MULTILINE)
    return _BODY_IMPORTS.sub("", text).strip("\n") + "\n"


class Scenario:
    """One example: named values, then calls, each run as Python and kept for the reproducer."""

    def __init__(self, record: Record, promise: str | None, device: str, *, title: str | None = None,
                 factory: Callable[..., Any] | None = None, adapter: str | None = None, **values: Any) -> None:
        """`factory` builds a buffer as the contract's constructor does (the test class's
        make_buffer); `adapter` is the source a reproducer needs for it (None: `Buffer` itself)."""
        self.record = record
        self.promise, self.device = promise, device
        self.title = title or (PROMISES[promise] if promise else "a check of the CpuGpuBuffer contract")
        self.steps: list[Step] = []
        self.ns: dict[str, Any] = {}
        self._adapter = adapter
        # Callers pass a torch.device and real implementations read device.type: so does the suite.
        self.bind(device=devices.get(device).argument(), **values)
        if factory is not None:
            # make() builds the buffer from the values bound when it is called.
            self.ns["make"] = lambda: factory(*self.ns["size"], **self._constructor_values())

    def _constructor_values(self) -> dict[str, Any]:
        """The constructor's keywords bound now: a test of a default leaves its keyword unbound."""
        return {k: self.ns[k] for k in CONSTRUCTOR_KEYWORDS if k in self.ns}

    def _make_source(self) -> str:
        keywords = ", ".join(f"{k}={k}" for k in CONSTRUCTOR_KEYWORDS if k in self.ns)
        if self._adapter is None:
            return f"def make():\n    return Buffer(*size, {keywords})\n"
        return self._adapter + f"\n\ndef make():\n    return ADAPTER.make_buffer(*size, {keywords})\n"

    def bind(self, **values: Any) -> None:
        self.steps.append(Step("".join(f"{k} = {literal(v)}\n" for k, v in values.items())))
        self.ns.update(values)
        if isinstance(values.get("dtype"), torch.dtype):  # what the test checked, for the result file
            self.record.dtypes.add(str(values["dtype"]).removeprefix("torch."))
        self._record()

    def call(self, func: Callable[..., Any], *args: Any, into: str | tuple[str, ...] | None = None,
             **kwargs: Any) -> Any:
        """Call `func`; a `Name` argument is the value bound under that name (`Name("buf")`), a
        function argument is passed as itself (its source goes into the reproducer), anything
        else is a literal. With no arguments at all, each parameter is the value of its name.
        `into` binds the result (or its items) for later calls."""
        step, call_args, call_kwargs = self._step(func, args, kwargs, into)
        self.steps.append(step)
        self._record()
        result = self._callable(func)(*call_args, **call_kwargs)
        self._bind_result(into, result)
        return result

    def check(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Like call, but the check (and its values) appear in the reproducer only while it is the
        last thing run: a state machine checks its invariant after every step, and a reproducer
        needs only the check that failed."""
        step, call_args, call_kwargs = self._step(func, args, kwargs, None)
        self._record(extra=step)
        return self._callable(func)(*call_args, **call_kwargs)

    def _callable(self, func: Any) -> Callable[..., Any]:
        return self.ns[func.name] if isinstance(func, Name) else func

    def _step(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
              into: str | tuple[str, ...] | None) -> tuple[Step, list[Any], dict[str, Any]]:
        if not args and not kwargs and not isinstance(func, Name):
            args = _required_names(func)
        functions = [] if isinstance(func, Name) else [func]
        name = func.name if isinstance(func, Name) else func.__name__
        rendered: list[str] = []
        values: list[Any] = []
        for arg in args:
            text, value = self._argument(arg, functions)
            rendered.append(text)
            values.append(value)
        kw_values: dict[str, Any] = {}
        for key, arg in kwargs.items():
            text, kw_values[key] = self._argument(arg, functions)
            rendered.append(f"{key}={text}")
        target = "" if into is None else (into if isinstance(into, str) else ", ".join(into)) + " = "
        return Step(f"{target}{name}({', '.join(rendered)})\n", tuple(functions)), values, kw_values

    def _argument(self, arg: Any, functions: list[Callable[..., Any]]) -> tuple[str, Any]:
        if isinstance(arg, Name):
            return arg.name, self.ns[arg.name]
        if inspect.isfunction(arg):
            functions.append(arg)
            return arg.__name__, arg
        return literal(arg), arg

    def _bind_result(self, into: str | tuple[str, ...] | None, result: Any) -> None:
        if isinstance(into, str):
            self.ns[into] = result
        elif into is not None:
            self.ns.update(zip(into, result))

    @property
    def header(self) -> str:
        """Named after the promise blamed now (a constructor that raised is promise 1, whatever the
        test checks), else the scenario's own; a scenario with a title of its own says so."""
        promise = self.record.blamed or self.promise
        title = PROMISES.get(promise or "", self.title)
        found_by = "" if title.startswith(self.title) else f"# Found by: {self.title}.\n"
        needs = devices.get(self.device).needs  # "a CUDA device"
        return (
            f"# Reproducer: CpuGpuBuffer promise {promise} ({title}), device {self.device}.\n"
            + found_by
            + f"# Smallest failing example cpugpu-conformance found, with torch {torch.__version__}.\n"
            + (f"# Needs {needs}.\n" if needs else "")
            + "# Run: python reproducer.py  (an exception or a failed assert is the bug)\n"
        )

    def script(self, extra: Step | None = None) -> str:
        steps = self.steps + ([extra] if extra else [])
        imports, definitions = self._definitions(steps)
        setup = devices.get(self.device).setup  # a backend to load first (sim)
        head = (self.header + "import numpy as np\nimport torch\n" + "".join(f"{line}\n" for line in imports)
                + "\n" + self.record.impl_import.rstrip("\n") + "\n" + (f"\n{setup}" if setup else ""))
        body = "".join(step.line for step in steps) + 'print("ok: the promise held")\n'
        # PEP 8: two blank lines around each definition, none doubled.
        return "\n\n".join([head, *(d.rstrip("\n") + "\n" for d in definitions), body])

    def _definitions(self, steps: list[Step]) -> tuple[list[str], list[str]]:
        """The source of every function the steps call, and of the library functions those call, each
        once and before its first use; and the modules they read besides torch and numpy."""
        order: list[str] = []
        sources: dict[str, str] = {}
        imports: list[str] = []
        uses_make = any(re.search(r"\bmake\b", step.line) for step in steps)

        def visit(func: Callable[..., Any], name: str | None = None) -> None:
            name = name or func.__name__
            if name in sources:
                return
            sources[name] = ""  # being visited: a function that calls itself is written once
            attribute = getattr(func, "__per_device__", None)
            body = getattr(devices.get(self.device), attribute) if attribute else func
            if body is None:  # the registry has none for this device: the script says so where it is called
                sources[name] = (f"def {name}(*args):\n    raise NotImplementedError("
                                 f"{f'the device registry has no {attribute} for {self.device}'!r})\n")
                order.append(name)
                return
            for used in sorted(_code_names(body.__code__)):
                value = body.__globals__.get(used)
                if inspect.ismodule(value) and used not in _HEADER_MODULES:
                    line = f"import {value.__name__}" + (f" as {used}" if value.__name__ != used else "")
                    if line not in imports:
                        imports.append(line)
                elif inspect.isfunction(value) and value.__module__.startswith(_LIBRARY):
                    visit(value)
            sources[name] = _source(body, name)
            order.append(name)

        for step in steps:
            for func in step.functions:
                visit(func)
        definitions = ([self._make_source()] if uses_make and "make" in self.ns else []) + [sources[n] for n in order]
        return imports, definitions

    def __getitem__(self, name: str) -> Any:
        return self.ns[name]

    def _record(self, extra: Step | None = None) -> None:
        self.record.ran(self, extra)
