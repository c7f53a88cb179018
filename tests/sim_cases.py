"""What the tests of the device checks on sim share (tests/test_sim_sync_checks.py,
tests/test_sim_copy_checks.py): the cases of a module and how each is run, the child process that
loads sim and runs them, and what the streams are doing.

Loading sim makes it torch's accelerator for the whole process, so nothing here loads it in the test
process. Each module registers its cases (``case_*``) with a Cases of its own; run as a script, the
module loads sim, runs every case in one process, each as the suite runs the function under test and
as a sim reproducer defines it (its source, in a namespace of its own), and prints one JSON object,
run -> "ok" or the traceback; the module's tests (``test_<case>[<run>]``, made from the cases) run it
once and read it.
"""

from __future__ import annotations

import functools
import gc
import itertools
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import sim_probe
import torch
from reproducer_parts import definitions, script_for
from suite_runner import REPO

# Jobs on sim's 1 GHz clock. A sync under test waits for SHORT ones and must leave LONG ones running
# (234 ms to spare); where it, or a broken sync it must catch, waits for a LONG one, a LONGER one must
# still run. The stall of the non-blocking check is the registry's own (2**25 cycles, 34 ms).
SHORT, LONG, LONGER = 1 << 25, 1 << 28, 1 << 29


def sim1() -> torch.device:
    """The device the suite passes on sim: not the current one (sim:0). A function: torch knows "sim" once it is
    loaded."""
    return torch.device("sim", 1)


# --- how a case is run: the function as the suite runs it, or as a sim reproducer defines it


def _as_the_suite_runs_it(func: Callable[..., Any]) -> Callable[..., Any]:
    return func


@functools.cache
def _as_a_reproducer_defines_it(func: Callable[..., Any]) -> Callable[..., Any]:
    return definitions(script_for("sim", func))[func.__name__]


AS_RUN = {"suite": _as_the_suite_runs_it, "reproducer": _as_a_reproducer_defines_it}


class Cases:
    """The cases of one test module, registered by its `case` decorator."""

    def __init__(self) -> None:
        self.cases: dict[str, Callable[[], None]] = {}  # "name[run]" -> the case, its arguments bound
        self.runs: dict[str, list[str]] = {}  # name -> its runs ([] for a case run once, unparametrized)
        self.docs: dict[str, str | None] = {}

    def case(self, *params: dict[str, Any], as_run: bool = True) -> Callable[[Callable[..., None]], Callable[..., None]]:
        """Register `case_NAME` once per parameter set (its id: the values' names, joined by "-"), and, where
        `as_run`, once as the suite runs the function under test and once as a reproducer defines it."""

        def register(func: Callable[..., None]) -> Callable[..., None]:
            name = func.__name__.removeprefix("case_")
            self.runs[name], self.docs[name] = [], func.__doc__
            for p in params or ({},):
                pid = "-".join(getattr(value, "__name__", str(value)) for value in p.values())
                for mode in AS_RUN if as_run else (None,):
                    run = "-".join(part for part in (pid, mode) if part)
                    bound = dict(p, as_run=AS_RUN[mode]) if mode else p
                    self.cases[f"{name}[{run}]" if run else name] = functools.partial(func, **bound)
                    if run:
                        self.runs[name].append(run)
            return func

        return register

    # --- in the child: load sim, run every case, print the outcomes

    def main(self) -> None:
        from cpugpu_conformance import sim

        sim.load()
        defaults = {index: current(index) for index in range(torch.accelerator.device_count())}
        print(json.dumps(sim_probe.outcomes(self.cases, after=lambda: _put_back(defaults))))

    # --- in the test process: run the child once, and one test per case and run

    def tests(self, script: str) -> dict[str, Any]:
        """The module's fixture `on_sim` (`script`, the module, run once as the child) and its test_NAME per case."""

        @pytest.fixture(scope="module")
        def on_sim() -> dict[str, str]:
            proc = subprocess.run([sys.executable, script], cwd=REPO, capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            return json.loads(proc.stdout.strip().splitlines()[-1])

        return {"on_sim": on_sim, **{f"test_{name}": self._test_of(name) for name in self.runs}}

    def _test_of(self, name: str) -> Callable[..., None]:
        """test_NAME: the outcome of case_NAME in the child, per run (as the suite runs it, as a reproducer defines it)."""
        if self.runs[name]:
            @pytest.mark.parametrize("run", self.runs[name])
            def test(on_sim, run):
                assert on_sim[f"{name}[{run}]"] == "ok", on_sim[f"{name}[{run}]"]
        else:
            def test(on_sim):
                assert on_sim[name] == "ok", on_sim[name]
        test.__name__ = test.__qualname__ = f"test_{name}"
        test.__doc__ = self.docs[name]
        return test


def grid(**axes: list[Any]) -> list[dict[str, Any]]:
    return [dict(zip(axes, values)) for values in itertools.product(*axes.values())]


def _put_back(defaults) -> None:
    """Between cases: every stream idle, the default streams and sim:0 current, garbage collection on."""
    for index, stream in defaults.items():
        torch.accelerator.synchronize(index)
        torch.accelerator.set_stream(stream)
    torch.accelerator.set_device_index(0)
    gc.enable()


# --- what the streams are doing


def current(index: int):
    return torch.accelerator.current_stream(index)


def busy(stream) -> bool:
    """Work queued on `stream` is still running (or waiting for another stream's)."""
    return not stream.query()


def job(stream, cycles: int) -> None:
    """Queue a job of `cycles` on `stream`, whatever the current device and stream are."""
    with torch.accelerator.device_index(stream.device.index), stream:
        torch.sim._sleep(cycles)
