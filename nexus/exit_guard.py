"""Leaving on SIGTERM or SIGHUP, even when the event loop cannot run.

asyncio's ``loop.add_signal_handler`` runs its callback on the loop, so a loop blocked
(Textual's shutdown waiting on a terminal that is gone, measured: a window closed at its
first screen) never hears the signal and the process keeps the session locked. A Python
signal handler runs in the main thread between two bytecodes, even inside a lock wait;
this one only starts a thread, which stores what must not be lost, asks the app to exit
in order, and ends the process itself when that has not happened within ``grace``.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("nexus")


def bounded(fn: Callable[[], object], seconds: float) -> bool:
    """Run ``fn`` in a daemon thread for at most ``seconds``; True when it finished."""
    done = threading.Event()

    def run() -> None:
        try:
            fn()
        except Exception:  # the last moments: what it could not do is in the log, not a crash
            log.exception("leaving: %s failed", getattr(fn, "__name__", fn))
        finally:
            done.set()

    threading.Thread(target=run, name="leave-step", daemon=True).start()
    return done.wait(seconds)


@dataclass
class SignalExit:
    """``SignalExit(store, request_exit, close).install()``.

    ``store(signum)``: keep the draft, the reply in flight, the queued messages (called in
    a thread of its own, bounded by ``store_wait``); ``request_exit(code)``: ask the app
    to leave in order (from that thread); ``close()``: close the session file if the app
    has not within ``grace`` s (``grace_after_hangup`` after SIGHUP), bounded by
    ``close_wait``; then ``end_process(code)``."""

    store: Callable[[int], None]
    request_exit: Callable[[int], None]
    close: Callable[[], None]
    grace: float = 5.0
    grace_after_hangup: float = 1.0  # the terminal is gone: only the session file's lock waits
    store_wait: float = 20.0
    close_wait: float = 3.0
    end_process: Callable[[int], None] = os._exit
    _started: threading.Event = field(default_factory=threading.Event, init=False)

    def install(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP)) -> bool:
        """False when signals cannot be handled here (not the main thread, or no such signal)."""
        try:
            for sig in signals:
                signal.signal(sig, self.arrived)
        except (ValueError, OSError, AttributeError):
            return False
        return True

    def arrived(self, signum: int, _frame=None) -> None:
        """(main thread, between two bytecodes) Start leaving; a second signal changes nothing."""
        if self._started.is_set():
            return
        self._started.set()
        threading.Thread(target=self.leave, args=(signum,), name="leave-on-signal", daemon=True).start()

    def leave(self, signum: int) -> None:
        code = 128 + signum
        log.warning("signal %s: storing the reply in flight and leaving", signum)
        if not bounded(lambda: self.store(signum), self.store_wait):
            log.warning("leaving: storing took more than %g s; leaving anyway", self.store_wait)
        try:
            self.request_exit(code)
        except RuntimeError:  # the loop has closed already: the process is on its way out
            pass
        grace = self.grace_after_hangup if signum == getattr(signal, "SIGHUP", None) else self.grace
        end_if_still_running(code, grace, self.close, self.close_wait, self.end_process)


def end_if_still_running(code: int, grace: float, close: Callable[[], None], close_wait: float = 3.0,
                         end_process: Callable[[int], None] = os._exit) -> None:
    """(a thread of its own, once everything is stored) An orderly exit ends the process
    within ``grace`` s; if it has not, close the session file (bounded) and end it here."""
    time.sleep(grace)
    log.warning("leaving: the app did not exit within %g s; ending the process", grace)
    bounded(close, close_wait)
    bounded(logging.shutdown, 1.0)  # the file log's last lines
    end_process(code)


def guard_exit(code: int, close: Callable[[], None], grace: float = 15.0) -> None:
    """/quit or Ctrl+Q, after storing: the process ends within ``grace`` s even if the
    app's own way out gets stuck."""
    threading.Thread(target=end_if_still_running, args=(code, grace, close), name="leave-guard",
                     daemon=True).start()
