"""Keep a loaded session's tree out of the garbage collector's full passes.

A 10,000-exchange session is a few hundred thousand long-lived objects (nodes, their
messages, snapshot rows). CPython's full collection walks all of them whenever enough
new objects survive — measured in ``bench.tree_pane``: pauses of 0.3–0.7 s on the UI
thread every few dozen pane operations, most of the p95 at 10,000 exchanges. Once a
tree is loaded, everything alive is frozen (``gc.freeze``: never scanned again; still
freed by reference counting). When a tree is let go, everything is thawed, and the
next freeze waits until that tree has been collected: its parent <-> children cycles
need the collector, and a frozen dead tree would be kept until the next thaw.
"""

from __future__ import annotations

import gc
import weakref

_let_go: list[weakref.ref] = []  # trees let go since the last freeze, not known to be collected
_collect = False  # thawed since the last freeze: collect before freezing again


def thaw(tree=None) -> None:
    """``tree`` is being let go, or a reorganisation dropped nodes of the tree on screen
    (no ``tree``): make everything collectable again."""
    global _collect
    gc.unfreeze()
    _collect = True
    if tree is not None:
        _let_go.append(weakref.ref(tree))


def freeze_loaded(force: bool = False) -> bool:
    """A tree was just loaded and shown: freeze what is alive now (on the UI thread).
    False when a tree let go is still referenced (a worker finishing with it): try again
    a little later; ``force`` freezes anyway (it is then alive, not garbage)."""
    global _collect
    if _collect:
        for _ in range(5):  # each pass frees what the last one's weak callbacks released
            if not gc.collect():
                break
        _let_go[:] = [r for r in _let_go if r() is not None]
        if _let_go and not force:
            return False
        _let_go.clear()
        _collect = False
    gc.freeze()
    return True


def freeze_more() -> None:
    """What became long-lived since the freeze (a session's history on screen, caches):
    collected — a pass over the unfrozen objects only — and frozen too. Without it, full
    passes keep walking those every few operations (measured: +20 ms per expand)."""
    gc.collect()
    gc.freeze()
