"""Stopping a run cleanly: SIGTERM and Ctrl-C become one exception, raised once.

Inside :func:`cancel_on_signals` the first SIGTERM (what schedulers and ``timeout`` send)
raises :class:`Cancelled` and the first Ctrl-C (SIGINT) ``KeyboardInterrupt``, wherever the
run is (set-up included); every later signal is only logged, so a second signal while
the run writes its ``cancelled`` record cannot lose the record. Outside the main thread
nothing changes (Python delivers signals to the main thread only).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from typing import Iterator

log = logging.getLogger(__name__)


class Cancelled(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C."""


class SignalGuard:
    """What :func:`cancel_on_signals` yields: :meth:`hold` makes every later signal only
    logged (called before the record is written, so no signal can interrupt that)."""

    def __init__(self) -> None:
        self.fired: list[int] = []
        self.held = False

    def hold(self) -> None:
        self.held = True

    def handle(self, signum, frame) -> None:
        if self.fired or self.held:
            log.warning("signal %d: already stopping, the record is being written", signum)
            return
        self.fired.append(signum)
        raise Cancelled() if signum == signal.SIGTERM else KeyboardInterrupt()


@contextlib.contextmanager
def cancel_on_signals() -> Iterator[SignalGuard]:
    guard = SignalGuard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    # a SIGINT the process ignores (a job started with `&` from a script) stays ignored
    sigs = [s for s in (signal.SIGTERM, signal.SIGINT) if signal.getsignal(s) is not signal.SIG_IGN]
    old = {s: signal.signal(s, guard.handle) for s in sigs}
    try:
        yield guard
    finally:
        for s, h in old.items():
            signal.signal(s, h)


__all__ = ["Cancelled", "SignalGuard", "cancel_on_signals"]
