"""What every area's test class shares: the class under test, how to build it, the per-test record.

A user's subclass sets ``buffer_cls``; a class whose constructor differs from the contract's
overrides ``make_buffer`` (the adapter). Test methods draw a scenario with ``self.build`` and
run checks through it, so each failure carries a standalone reproducer (reproducer.py).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import linecache
import textwrap
from typing import Any, ClassVar

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from cpugpu_conformance import devices
from cpugpu_conformance import promises as P

from ..shared import budget, surface
from ..shared import strategies as s
from ..shared.contexts import PLAIN, Context
from ..shared.helpers import sync
from ..shared.marks import RECORD, promises_of
from ..shared.reproducer import Name, Record, Scenario, import_line
from ..shared.stamps import stamped


class BufferTests:
    """The base of every area's tests. Set ``buffer_cls``, or override ``make_buffer``."""

    # The class under test: called as the contract's constructor, Buffer(*size, dtype=, device=,
    # pin_memory=, with_numpy=), unless make_buffer is overridden.
    buffer_cls: ClassVar[type | None] = None
    # The line a reproducer imports the class with, as `Buffer` (default: from buffer_cls).
    buffer_import: ClassVar[str | None] = None

    def __repr__(self) -> str:
        # Hypothesis prints a failing example's arguments, self among them: an address would
        # differ run to run, and two ci runs of one class must give the same result file.
        return f"<{type(self).__qualname__}>"

    def make_buffer(self, *size: int, **options: Any) -> Any:
        """Build a buffer as the contract's constructor would. Override it (the adapter) for a class
        whose constructor differs; it is called as ``make_buffer(*size, dtype=torch.dtype,
        device=torch.device, pin_memory=bool, with_numpy=bool)``, with ``with_numpy`` left out
        where the test checks its default. Its source goes into reproducers: keep it self-contained
        (it may read ``self.buffer_cls``)."""
        return self.buffer_cls(*size, **options)  # type: ignore[misc]

    @pytest.fixture
    def record(self, request: pytest.FixtureRequest) -> Record:
        """This test's reproducer, blame and observation, kept on its item for its report."""
        rec = Record(self._import_line(), promise=min(promises_of(request.node), key=int, default=None))
        rec.tested_as = request.node.stash.get(surface.TESTED_AS, None)
        request.node.stash[RECORD] = rec
        return rec

    # --- for the test methods

    def scenario(self, record: Record, device: str, *, title: str | None = None, **values: Any) -> Scenario:
        """A scenario of the test's promise (its marker) whose make() builds the buffer through
        make_buffer (the adapter, if any)."""
        return Scenario(record, record.promise, device, title=title, factory=self.make_buffer,
                        adapter=self._adapter(), **values)

    def build(
        self,
        record: Record,
        device: str,
        data: st.DataObject,
        dtypes: st.SearchStrategy,
        *,
        contexts: bool = False,
        nonempty: bool = False,
        with_numpy: bool | None = None,
        pin_memory: bool | None = None,
        construct: bool = True,
        size: tuple[int, ...] | None = None,
        context: Context | None = None,
    ) -> Scenario:
        """Draw a scenario and (unless construct=False) build `buf` in it.

        ``size`` and ``context`` fix what would be drawn (engine-scale sizes, and a context a
        test runs every time, are pytest parameters: each run includes them).
        """
        info = data.draw(dtypes, label="dtype")
        ctx = context or (data.draw(s.contexts_for(device), label="context") if contexts else PLAIN)
        sc = self.scenario(
            record,
            device,
            size=size if size is not None else data.draw(s.sizes_for(info, nonempty=nonempty), label="size"),
            dtype=info.dtype,
            pin_memory=data.draw(s.pin_memory_for(device), label="pin_memory") if pin_memory is None else pin_memory,
            with_numpy=data.draw(s.with_numpy_for(info), label="with_numpy") if with_numpy is None else with_numpy,
        )
        if construct:
            construct_blamed(record, constructor_promise(record.promise, ctx), lambda: construct_in(sc, ctx))
        return sc

    # --- how reproducers name the class and the adapter

    def _import_line(self) -> str:
        if self.buffer_import:
            return self.buffer_import
        if self.buffer_cls is None:
            return "Buffer = ...  # the class under test (buffer_cls was not set)\n"
        return import_line(self.buffer_cls)

    def _adapter(self) -> str | None:
        """The source a reproducer needs for an overridden make_buffer; None for the constructor itself."""
        method = type(self).make_buffer
        if method is BufferTests.make_buffer:
            return None
        owner = next(c for c in type(self).__mro__ if "make_buffer" in vars(c))
        try:
            body = textwrap.indent(textwrap.dedent(inspect.getsource(method)), "    ")
        except (OSError, TypeError):
            body = ("    def make_buffer(self, *size, **options):\n"
                    "        raise NotImplementedError('the adapter's source was not found')\n")
        return (f"class Adapter:  # {owner.__qualname__}.make_buffer, with the class it reads\n"
                f"    buffer_cls = Buffer\n\n{body.rstrip()}\n\n\nADAPTER = Adapter()\n")


def construct_in(sc: Scenario, context: Context, *call: Any) -> Any:
    """``buf = context(make)``, or ``buf = make()`` in the plain context (make builds the buffer);
    with `call`, ``buf = context(*call)``: a function and its arguments, run inside the context."""
    call = call or (Name("make"),)
    if context.enter is None:
        return sc.call(call[0], *call[1:], into="buf")
    return sc.call(context.enter, *call, into="buf")


def constructor_promise(promise: str | None, ctx: Context) -> str:
    """The promise a constructor that raises breaks: the arguments it was given are all allowed
    (promise 1, shape and dtype), unless the test's own promise is about the construction itself:
    every dtype without NumPy (6), under a mode or in a thread (3, in a context other than the
    plain one), pinned memory (10)."""
    if promise in (P.BFLOAT16_PATH, P.CUDA_SPECIFICS) or (promise == P.MUTABLE and ctx != PLAIN):
        return promise
    return P.SHAPE_AND_DTYPE


def construct_blamed(record: Record, promise: str, construct: Any) -> None:
    """Run `construct` blaming `promise` for what it raises; the blame before it is restored after."""
    before = record.blamed
    record.blame(promise)
    construct()
    record.blame(before)


def line_that_raised(exc: BaseException, function: Any) -> str:
    """The source line of ``function`` that was running when ``exc`` was raised ('' if none was):
    a check that does several things in one function (a scenario must stay one call to run in one
    context) blames the promise of the step that broke."""
    line, tb = "", exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is function.__code__:
            line = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).strip()
        tb = tb.tb_next
    return line


def blame_by_line(record: Record, exc: BaseException, function: Any, blames: tuple[tuple[str, str], ...],
                  default: str | None = None) -> None:
    """Blame the promise of the first of ``blames`` (text the line holds, promise) that the line of
    ``function`` that raised ``exc`` holds; else ``default`` (None: the test's own promise)."""
    line = line_that_raised(exc, function)
    record.blame(next((promise for text, promise in blames if text in line), default))


def property_test(*promises: str, examples: budget.Examples | None = None) -> Any:
    """A property test of these promises (P.MUTABLE, ...): marked with them, run with the suite's
    hypothesis settings (``examples``: a share of the profile's, budget.share; default all of
    them), drawing its values from ``data``; its body stamps how it ended (stamps.py)."""

    def decorate(test: Any) -> Any:
        chosen = examples if examples is not None else budget.whole()
        return pytest.mark.cpugpu_promise(*promises)(stamped(chosen(given(data=st.data())(blamed_afresh(test)))))

    return decorate


def blamed_afresh(test: Any) -> Any:
    """Each example starts with no promise blamed: a blame an earlier example left (its constructor
    raised, say) must not name the promise of a later example's failure. Whatever step torch refused
    because a tensor is an inference tensor (a copy, a fill), the example broke promise 3."""

    @functools.wraps(test)
    def example(*args: Any, **kwargs: Any) -> Any:
        record = kwargs["record"]
        record.blame(None)
        before = record.last_run()
        try:
            result = test(*args, **kwargs)
        except Exception as exc:
            if refused_as_inference(exc):
                record.blame(P.MUTABLE)
            drain(kwargs.get("device"))
            raise
        settle(record, kwargs.get("device"), before)
        return result

    return example


def _queues_work(device: Any) -> bool:
    return devices.REGISTRY.get(device, devices.CPU).sync is not devices.nothing_queued


def settle(record: Record, device: Any, before: Scenario | None) -> None:
    """End a passing example with the work it queued on its device done: work that fails only when it
    runs (sim runs each kernel on its stream's worker) fails this example, with the wait as its
    reproducer's last step, never the next example's first wait (where hypothesis would call the
    test flaky, and a correct step would be blamed). Nothing to wait for on the CPU."""
    last = record.last_run()
    if last is not None and last is not before and _queues_work(device):
        last.call(sync, torch.device(device))


def drain(device: Any) -> None:
    """After an example that failed: its work done, so the next starts clean. Its own failure is the
    report, with its reproducer as it was; what the wait raises is not."""
    if _queues_work(device):
        with contextlib.suppress(Exception):
            sync(torch.device(device))


# How torch refuses an in-place update of an inference tensor (or of a view made in inference mode)
# outside inference mode: the seed's bug, promise 3's wherever it shows (a copy, a check's fill).
INFERENCE_REFUSALS = (
    "Inplace update to inference tensor outside InferenceMode",
    "A view was created in inference mode and is being modified inplace in normal mode",
)


def refused_as_inference(exc: BaseException | None) -> bool:
    """Whether `exc`, or an exception it was raised from or while handling, is torch's refusal."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if any(text in str(exc) for text in INFERENCE_REFUSALS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def contract_test(*promises: str, examples: budget.Examples | None = None) -> Any:
    """A test of these promises that draws nothing (one fixed scenario), or runs hypothesis itself
    (a state machine: ``examples`` is its share, so the run is held to its floor); its body stamps
    how it ended (stamps.py)."""

    def decorate(test: Any) -> Any:
        if examples is not None:
            test._cpugpu_examples = examples
        return pytest.mark.cpugpu_promise(*promises)(stamped(test))

    return decorate
