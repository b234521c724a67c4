"""Keep a loaded session's tree out of the garbage collector's full passes.

A 10,000-exchange session is a few hundred thousand long-lived objects (nodes, their
messages, snapshot rows). CPython's full collection walks all of them whenever enough
new objects survive — measured in ``bench.tree_pane``: pauses of 0.3–0.7 s on the UI
thread every few dozen pane operations, which is most of the p95 at 10,000 exchanges.
Once a tree is loaded, everything alive is frozen (``gc.freeze``: never scanned
again; freed normally by reference counting). When a tree is let go, everything is
thawed and collected once before the next freeze, so the old tree's reference cycles
(parent <-> children) are freed rather than kept frozen.
"""

from __future__ import annotations

import gc

_thawed = False  # a tree was let go since the last freeze: collect before freezing again


def freeze_loaded() -> None:
    """A tree was just loaded and shown: freeze what is alive now (on the UI thread)."""
    global _thawed
    if _thawed:
        gc.collect()
        _thawed = False
    gc.freeze()


def thaw() -> None:
    """A tree is being let go: make everything collectable again."""
    global _thawed
    gc.unfreeze()
    _thawed = True
