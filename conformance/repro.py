"""Scenarios that run as source code, so every failure comes with a standalone reproducer.

A test builds a `Scenario`, binds its drawn values, and runs each step as a snippet of
Python. The suite executes exactly those snippets, and the reproducer is their
concatenation: what a user pastes into a bug report is what failed. Hypothesis replays
the minimal failing example last, so the script recorded at a failure is the shrunk one.
"""

from __future__ import annotations

import linecache
import re
import textwrap
import threading
from typing import Any

import numpy as np
import torch

from cpugpu_conformance import devices
from cpugpu_conformance.promises import PROMISES

DEFAULT_IMPORT = "from cpugpu_conformance.reference import CpuGpuBuffer as Buffer\n"


class Record:
    """What one test leaves for its report: the script of the example that ran last, what an
    implementation-defined promise did, and the promise a failure from here on breaks.

    One per test, made by the ``record`` fixture and kept on the test item, so two tests
    (in xdist workers or threads) never see each other's reproducer or blame.
    """

    def __init__(self, impl_import: str = DEFAULT_IMPORT) -> None:
        self.impl_import = impl_import
        self.observed: str | None = None
        self.blamed: str | None = None
        self._last: tuple[Scenario, str] | None = None

    def __repr__(self) -> str:
        # Hypothesis prints a failing example's arguments: an address would differ run to run.
        return "<record>"

    def blame(self, promise: str | None) -> None:
        """Name the promise a failure from here on breaks, for tests that check several."""
        self.blamed = promise

    def observe(self, text: str) -> None:
        """What an implementation-defined promise (11) did, for the result file."""
        self.observed = text

    def ran(self, scenario: Scenario, extra: str = "") -> None:
        self._last = (scenario, extra)

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
        return f"np.array({value.tolist()!r}, dtype=np.{value.dtype.name})"
    return repr(value)


_DEF = re.compile(r"def (\w+)\(")


def _used_helpers(steps: list[str]) -> list[str]:
    """Keep a helper definition only if what follows calls it, directly or through another kept
    helper (promise 12's make() calls unchanged()): shorter reproducers that still run."""
    out: list[str] = []
    later = ""  # what is kept after the current step
    for step in reversed(steps):
        if not step.startswith("def "):
            out.append(step)
            later = step + "\n" + later
            continue
        chunks = [c.strip("\n") for c in re.split(r"\n(?=def )", step)]
        kept: set[str] = set()
        while True:
            used = later + "\n".join(kept)
            found = {c for c in chunks if re.search(rf"\b{_DEF.match(c).group(1)}\(", used)}
            if found <= kept:
                break
            kept |= found
        if kept:
            text = "\n\n\n".join(c for c in chunks if c in kept) + "\n"
            out.append(text)
            later = text + later
    return out[::-1]


# Compiled snippets, shared by every test: a snippet's source is its whole identity.
_compiled: dict[str, Any] = {}
_compiling = threading.Lock()  # numbering the filenames must not race between threads


def _compile(code: str) -> Any:
    """Compile once per distinct snippet, under a filename tracebacks can show the source of."""
    with _compiling:
        if code not in _compiled:
            filename = f"<conformance snippet {len(_compiled)}>"
            linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
            _compiled[code] = compile(code, filename, "exec")
        return _compiled[code]


class Scenario:
    """One example: named values, then steps, each run as source and kept for the reproducer."""

    def __init__(self, Buffer: Any, record: Record, promise: str, title: str, device: str, **values: Any) -> None:
        self.record = record
        self.promise, self.title, self.device = promise, title, device
        self.steps: list[str] = []
        self.ns: dict[str, Any] = {"torch": torch, "np": np, "Buffer": Buffer, "__name__": "__reproducer__"}
        # Callers pass a torch.device and real implementations read device.type: so does the suite.
        self.bind(device=torch.device(device), **values)

    def bind(self, **values: Any) -> None:
        self.steps.append("".join(f"{k} = {literal(v)}\n" for k, v in values.items()))
        self.ns.update(values)
        self._record()

    def run(self, code: str) -> Any:
        """Run a snippet in the scenario's namespace; returns the namespace for reading results."""
        code = textwrap.dedent(code).strip("\n") + "\n"
        self.steps.append(code)
        self._record()
        exec(_compile(code), self.ns)
        return self.ns

    def check(self, code: str, **values: Any) -> Any:
        """Like run, but the snippet (and its values) appear in the reproducer only while it is the
        last thing run: a state machine checks its invariant after every step, and a reproducer
        needs only the check that failed."""
        code = textwrap.dedent(code).strip("\n") + "\n"
        bound = "".join(f"{k} = {literal(v)}\n" for k, v in values.items())
        self.ns.update(values)
        self._record(extra=bound + code)
        exec(_compile(code), self.ns)
        return self.ns

    @property
    def header(self) -> str:
        """Named after the promise blamed now (a constructor that raised is promise 1, whatever the
        test checks), else the scenario's own; a scenario with a title of its own says so."""
        promise = self.record.blamed or self.promise
        title = PROMISES.get(promise, self.title)
        found_by = "" if title.startswith(self.title) else f"# Found by: {self.title}.\n"
        needs = devices.get(self.device).needs  # "a CUDA device"
        return (
            f"# Reproducer: CpuGpuBuffer promise {promise} ({title}), device {self.device}.\n"
            + found_by
            + f"# Smallest failing example cpugpu-conformance found, with torch {torch.__version__}.\n"
            + (f"# Needs {needs}.\n" if needs else "")
            + "# Run: python reproducer.py  (an exception or a failed assert is the bug)\n"
            "import numpy as np\nimport torch\n\n" + self.record.impl_import + "\n"
        )

    def script(self, extra: str = "") -> str:
        steps = self.steps + ([extra] if extra else [])
        return self.header + "\n".join(_used_helpers(steps)) + '\nprint("ok: the promise held")\n'

    def _record(self, extra: str = "") -> None:
        self.record.ran(self, extra)

    def __getitem__(self, name: str) -> Any:
        return self.ns[name]
