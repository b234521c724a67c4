"""Soft-archiving exchanges: out of the tree, retrieval and prompts, but kept and restorable."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .fanout import FanoutBalancer
from .model import TreeModel
from .nodes import MessageNode, TopicNode
from .persist import TreeStore
from .summaries import Summaries

if TYPE_CHECKING:
    from .reorganize import UndoLog


class Archive:
    """Handed the tree model, the fan-out balancer, the summaries, the tree's store (or
    ``None``) and the tree's lock."""

    def __init__(self, model: TreeModel, balancer: FanoutBalancer, summaries: Summaries, store: TreeStore | None,
                 lock: threading.RLock, undo: UndoLog | None = None) -> None:
        self.model = model
        self.balancer = balancer
        self.summaries = summaries
        self.store = store
        self.lock = lock
        self.undo = undo

    def archive(self, exchanges: Iterable[MessageNode]) -> list[MessageNode]:
        """Soft-archive ``exchanges`` (one transaction when the tree has a store)."""
        with self.lock:
            done = [x for x in exchanges if not x.archived and x.parent is not None]
            touched: list[TopicNode] = []
            for x in done:
                touched += self.model.detach(x)[0]
            # a group whose other parts emptied gives way to its last one, as after a merge:
            # "Dana Sister Porto" over "Dana Sister Porto" alone, after a /forget (a trial)
            for group in dict.fromkeys(t for t in touched if t.is_group):
                if group.parent is not None and len(group.children) == 1 and group.children[0].is_topic:
                    self.model.dissolve(group)
            self._settle(done, touched, archived=True)
            return done

    def restore(self, exchanges: Iterable[MessageNode] | None = None) -> list[MessageNode]:
        """Bring archived exchanges back (all of them by default)."""
        with self.lock:
            todo = list(self.model.archived if exchanges is None else exchanges)
            done = [x for x in todo if x.archived and not x.forgotten]  # nothing of those is left
            touched: list[TopicNode] = []
            for x in sorted(done, key=lambda m: m.index):
                touched += self.model.attach(x)
            self._settle(done, touched, archived=False)
            return done

    def _settle(self, changed: list[MessageNode], touched: list[TopicNode], archived: bool) -> None:
        """Ranges, fan-out, current node, summaries, then one transaction on disk."""
        if not changed:
            return
        model = self.model
        model.recompute_ranges()
        # until nothing is over the bound: a split halves a node once, and a restore can
        # bring back many exchanges to one topic (16 left 7 and 9 under a bound of 5: a trial)
        while True:
            created = [c for t in list(model.root.iter_topics()) if t is not model.root
                       for c in self.balancer.balance(t)]
            created += self.balancer.balance(model.root)
            if not created:
                break
        model.recompute_ranges()
        model.fix_current()
        model.vectors.invalidate()
        live = set(model.root.iter_topics())
        model.stale.update(t for t in touched if t in live and t is not model.root)
        self.summaries.refresh_frozen()
        if self.undo is not None:
            self.undo.end()
        if self.store is not None:
            self.store.write_archive_state(changed, archived)
