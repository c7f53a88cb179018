"""Signals: stopping gpu_check stops what it started. SIGNALS, the one StopSignals of the run,
turns the first stopping signal into Stopped (held while a child starts or a file is renamed)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

from gpu_checking.outcomes import EXIT_INTERRUPTED, Step


class Stopped(BaseException):
    """SIGINT, SIGTERM or SIGHUP reached gpu_check: end the step, say so, exit. A BaseException,
    as KeyboardInterrupt is, so no `except Exception` swallows it. ``step``: the step it stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.step: Step | None = None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def code(self) -> int:
        """2 for Ctrl-C, as before; 128 + the signal otherwise, as a shell reports it."""
        return EXIT_INTERRUPTED if self.signum == signal.SIGINT else 128 + self.signum


class StopSignals:
    """Turns the first stopping signal into Stopped, once: while a step is being ended a second
    one is ignored. Inside ``deferred()`` (a child being started, a file being renamed into place)
    it is held until the block ends, so no child is started that nothing will stop."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.caught: int | None = None
        self.held = False
        self.pending = False

    def install(self) -> None:
        for signum in self.SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup, a background job: still ignored
                signal.signal(signum, self._handle)

    def ignore_from_now(self) -> None:
        """The run is over (its summary is being written): a late signal changes nothing."""
        for signum in self.SIGNALS:
            signal.signal(signum, signal.SIG_IGN)

    def _handle(self, signum: int, frame) -> None:
        if self.caught is not None:
            return
        self.caught = signum
        if self.held:
            self.pending = True
        else:
            raise Stopped(signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        held, self.held = self.held, True
        try:
            yield
        finally:
            self.held = held
        if self.pending and not held:
            self.pending = False
            raise Stopped(self.caught)


SIGNALS = StopSignals()
