"""Blocking calls nobody has to wait for.

A thread stuck in an HTTP call (an LLM judge's placement, a vision description, a model
load) holds whoever waits for it for as long as the server takes. ``call_abandonable``
runs the call in a daemon thread and gives up on it when ``give_up()`` turns true: the
caller goes on at once, and the call runs on until it ends or the process does. The call
must not write a session file after it is given up, or only in whole transactions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


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
