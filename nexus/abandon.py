"""Blocking calls that ``/quit`` does not wait for.

A worker thread of Textual is joined when the process exits, so a worker stuck in an
HTTP call (a vision description, a model load, an LLM merge veto) holds ``/quit`` for
as long as the server takes. ``call_abandonable`` runs the call in a daemon thread and
gives up on it when ``give_up()`` turns true: the worker returns at once and the
process exits without it. The call must not write the session file after it is given
up, or only in whole transactions (SQLite keeps the file as before or fully after).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


class Abandoned(Exception):
    """``give_up()`` said stop while the call was still running."""


def call_abandonable(fn: Callable[..., T], *args, give_up: Callable[[], bool], poll: float = 0.05,
                     name: str = "abandonable") -> T:
    """``fn(*args)``'s result or exception; ``Abandoned`` when ``give_up()`` turns true first
    (asked every ``poll`` seconds). Given up, the call runs on until it ends or the process does."""
    if give_up():
        raise Abandoned
    done = threading.Event()
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # handed to the caller as it is
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    while not done.wait(poll):
        if give_up():
            raise Abandoned
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def start_detached(fn: Callable[[], object], name: str = "detached") -> threading.Thread:
    """Run ``fn`` in a daemon thread nobody waits for (best effort while the process lives;
    a failure is logged, never printed over the terminal)."""
    def run() -> None:
        try:
            fn()
        except Exception as exc:
            log.warning("%s: %s", name, exc)

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    return t
