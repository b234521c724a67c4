"""Blocking calls that ``/quit`` does not wait for.

A worker thread of Textual is joined when the process exits, so a worker stuck in an
HTTP call (a vision description, a model load, an LLM merge veto) holds ``/quit`` for
as long as the server takes. ``call_abandonable`` (trace_core's: the LLM judge gives up
the same way) runs the call in a daemon thread and gives up on it when ``give_up()``
turns true: the worker returns at once and the process exits without it. The call must
not write the session file after it is given up, or only in whole transactions (SQLite
keeps the file as before or fully after).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from trace_core.abandon import Abandoned, call_abandonable

__all__ = ["Abandoned", "call_abandonable", "start_detached"]
log = logging.getLogger(__name__)


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
